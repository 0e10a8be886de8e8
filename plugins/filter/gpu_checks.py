"""Filter plugin: maps filter names onto the pure functions of module_utils/gpu_checks.py."""

from __future__ import annotations

from typing import Any

from ansible_collections.llmdeploy.llm.plugins.module_utils.gpu_checks import (
    min_driver_for_cuda,
    mla_backends_for,
    preflight_problems,
)

DOCUMENTATION = r"""
name: gpu_checks
short_description: Decide whether a GPU host may be deployed to, from gpu_preflight_facts
description:
  - C(gpu_preflight_problems) returns every problem found, each naming the fact, what was found,
    the requirement and the fix. Severity C(error) refuses the host; C(warning) is reported only.
  - C(gpu_min_driver_for_cuda) returns the minimum Linux x86_64 driver for a CUDA major.minor.
  - C(gpu_mla_backends_for) lists the vLLM MLA decode backends that support a compute capability.
"""

EXAMPLES = r"""
- name: Problems
  ansible.builtin.set_fact:
    problems: "{{ gpu_preflight_facts | gpu_preflight_problems({'tensor_parallel_size': 8}) }}"
"""

RETURN = r"""
_value:
  description: List of dicts with check, severity, fact, found, requirement, fix and message.
  type: list
"""


class FilterModule:
    """Map filter names to the functions above."""

    def filters(self) -> dict[str, Any]:
        return {
            "gpu_preflight_problems": preflight_problems,
            "gpu_min_driver_for_cuda": min_driver_for_cuda,
            "gpu_mla_backends_for": mla_backends_for,
        }
