"""Filter plugin: maps filter names onto the pure functions of module_utils/vllm_args.py."""

from __future__ import annotations

from typing import Any

from ansible_collections.llmdeploy.llm.plugins.module_utils.vllm_args import (
    systemd_env_name,
    systemd_env_value,
    systemd_exec_args,
    vllm_args,
)

DOCUMENTATION = r"""
name: vllm_args
short_description: vLLM server arguments from data, quoted for systemd units
description:
  - C(vllm_args) turns a mapping of vLLM option names to values into an argument list. C(None) and
    C(false) leave an option out, C(true) gives a bare flag, a list gives the flag followed by each item,
    a mapping gives the flag followed by its compact JSON. Option names may use C(_) or C(-).
    A second argument is a list of raw strings appended verbatim.
  - Options that carry secrets (C(api-key), C(hf-token)) are refused, in the mapping and in the raw list.
  - C(systemd_exec_args) quotes an argument list for a unit's C(ExecStart=) (escapes C(%), C($), quotes).
  - C(systemd_env_value) quotes one value for an C(EnvironmentFile=) line.
"""

EXAMPLES = r"""
- name: Argument list
  ansible.builtin.debug:
    msg: "{{ {'model': '/srv/m', 'tensor_parallel_size': 2, 'trust_remote_code': false}
      | vllm_args(['--seed', '1']) }}"
  # ['--model', '/srv/m', '--tensor-parallel-size', '2', '--seed', '1']
- name: ExecStart line
  ansible.builtin.debug:
    msg: "ExecStart={{ ['/opt/ml-env/bin/python', '-m', 'x', '--a', 'b c'] | systemd_exec_args }}"
"""

RETURN = r"""
_value:
  description: A list of strings (vllm_args) or one string (the quoting filters).
  type: raw
"""


class FilterModule:
    """Map filter names to the functions above."""

    def filters(self) -> dict[str, Any]:
        return {
            "vllm_args": vllm_args,
            "systemd_exec_args": systemd_exec_args,
            "systemd_env_value": systemd_env_value,
            "systemd_env_name": systemd_env_name,
        }
