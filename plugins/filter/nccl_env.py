"""Filter plugin: maps filter names onto the pure functions of module_utils/nccl_env.py."""

from __future__ import annotations

from typing import Any

from ansible_collections.llmdeploy.llm.plugins.module_utils.nccl_env import (
    bench_compare,
    choose_env,
    env_file,
)

DOCUMENTATION = r"""
name: nccl_env
short_description: NCCL environment and engine flags for a GPU host's interconnect
description:
  - C(gpu_nccl_env) takes C(gpu_preflight_facts) and options and returns a profile dict
    (profile, env list of {name, value, why}, engine_args list of {arg, why}, warnings, notes).
  - C(gpu_nccl_env_file) renders a profile as an environment-file fragment with a comment per variable.
  - C(gpu_nccl_bench_compare) compares two all-reduce bus-bandwidth results of files/nccl_allreduce_bench.py.
options:
  tensor_parallel_size: {description: GPUs in one tensor-parallel group, type: int}
  pipeline_parallel_size: {description: pipeline stages, type: int}
  pcie_proto_ll: {description: opt in to NCCL_PROTO=LL on PCIe-only hosts, type: bool}
  overrides: {description: extra NAME -> value pairs set by the operator, type: dict}
"""

EXAMPLES = r"""
- name: Choose the NCCL environment
  ansible.builtin.set_fact:
    profile: "{{ gpu_preflight_facts | gpu_nccl_env({'tensor_parallel_size': 8}) }}"
"""

RETURN = r"""
_value:
  description: Profile dict, rendered text, or comparison dict (see each function).
  type: raw
"""


class FilterModule:
    """Map filter names to the functions above."""

    def filters(self) -> dict[str, Any]:
        return {
            "gpu_nccl_env": choose_env,
            "gpu_nccl_env_file": env_file,
            "gpu_nccl_bench_compare": bench_compare,
        }
