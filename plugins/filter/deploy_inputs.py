"""Filter plugin: maps filter names onto the pure functions of module_utils/deploy_inputs.py."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.llmdeploy.llm.plugins.module_utils.deploy_inputs import (
    engine_problems,
    input_problems,
    is_loopback,
    is_own_dir,
    passthrough_engine_args,
)

DOCUMENTATION = r"""
name: deploy_inputs
short_description: The deploy playbooks' input contract, checked on the controller
description:
  - C(llm_deploy_input_problems) takes a mapping of the deploy variables set (every C(llm_*) name and
    C(hf_token)) and returns one refusal per problem - "NAME=VALUE is refused - FIX" - naming the variable,
    the value given (secrets masked) and what is accepted. Unknown C(llm_*) names are refused with the
    closest known name; strict booleans, ranges, paths, names safe for systemd and the public-bind opt-in are
    checked here.
  - C(llm_deploy_engine_problems) checks the engine version against the catalog entry's
    C(engine_min_version) and, on GPUs, the versions the memory planner models; and C(llm_max_model_len)
    against the model's context limit unless C(llm_engine_env.VLLM_ALLOW_LONG_MAX_MODEL_LEN) is C("1").
  - C(llm_deploy_passthrough_args) takes the merged engine options (vLLM spelling) and the names the service
    role has variables for, and returns the options left for C(vllm_service_engine_args) - never the ones the
    deploy sets from its own inputs (layout, parsers, memory, bind, model).
  - C(llm_is_loopback) is true for C(localhost) and loopback addresses (127.0.0.0/8, ::1).
  - C(llm_own_dir) is true for an absolute path of letters, digits, C(. _ - @ + /) that is not C(/), a system
    directory (C(/usr), C(/etc), C(/var/lib), ...) or a path with C(..) parts - a directory a role may own.
"""

EXAMPLES = r"""
- name: Refuse bad deploy inputs
  ansible.builtin.fail:
    msg: "{{ item }}"
  loop: "{{ given | llmdeploy.llm.llm_deploy_input_problems }}"
  vars:
    given: "{{ dict(names | zip(query('ansible.builtin.vars', *names))) }}"
    names: "{{ query('ansible.builtin.varnames', '^llm_') }}"
"""


def _engine(
    model: dict[str, Any], device: str, version: Any, max_model_len: Any = None, engine_env: Any = None
) -> list[str]:
    return engine_problems(model, device, version, max_model_len, engine_env)


def _passthrough(args: Any, mapped: Any = ()) -> dict[str, Any]:
    try:
        return passthrough_engine_args(args, mapped)
    except TypeError as exc:
        raise AnsibleFilterError(f"llm_deploy_passthrough_args: {exc}") from exc


class FilterModule:
    """Map filter names to the functions above."""

    def filters(self) -> dict[str, Any]:
        return {
            "llm_deploy_input_problems": input_problems,
            "llm_deploy_engine_problems": _engine,
            "llm_own_dir": is_own_dir,
            "llm_is_loopback": is_loopback,
            "llm_deploy_passthrough_args": _passthrough,
        }
