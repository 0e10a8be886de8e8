"""Filter plugin: maps llm_deployment_plan onto module_utils/deployment_plan.py's plan_deployment."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.llmdeploy.llm.plugins.module_utils.deployment_plan import (
    DeploymentPlanError,
    plan_deployment,
)
from ansible_collections.llmdeploy.llm.plugins.module_utils.llm_capacity import PlanInputError

DOCUMENTATION = r"""
name: llm_deployment_plan
short_description: The deployment fact llm_plan_result for a model on a hardware profile or a live host
description:
  - Takes the C(llm_model) dict of a catalog model (or a hub-derived entry) and the C(llm_hardware) dict of a
    hardware profile (or the live GPU facts in that shape) and returns C(llm_plan_result), the fact the
    llm_plan role documents in its argument_specs.
  - Searches the layout, applies the overrides, evaluates the known issues, plans every KV dtype, DCP size
    and context length, picks the plan to deploy and, for C(engine=sglang), adds SGLang's own KV pool.
  - The same call serves the hardware profile and the host's real GPUs; only the hardware differs.
options:
  _input:
    description: The catalog C(llm_model) dict.
    type: dict
    required: true
  hardware:
    description: The C(llm_hardware) dict (gpu_count, gpu_memory_gib, compute_capability, interconnect, ...).
    type: dict
    required: true
  vllm_version:
    description: The engine release the plan is for (memory accounting and known issues depend on it).
    type: str
    required: true
  engine:
    description: C(vllm) or C(sglang).
    type: str
    default: vllm
  nodes:
    description: Identical nodes of the hardware; TP stays inside a node.
    type: int
    default: 1
  overrides:
    description: >-
      Fixed layout values (tensor_parallel_size, pipeline_parallel_size, data_parallel_size,
      enable_expert_parallel, decode_context_parallel_size, gpu_memory_utilization, max_model_len); null takes
      the recommendation's.
    type: dict
  kv_cache_dtypes:
    description: KV dtypes to plan (subset of auto, bfloat16, fp8).
    type: list
    elements: str
  context_lengths:
    description: Context lengths to plan.
    type: list
    elements: int
  max_num_seqs:
    description: vLLM's --max-num-seqs.
    type: int
    default: 256
  allow_long_max_model_len:
    description: Accept a max_model_len beyond the model's trained length.
    type: bool
    default: false
  sglang_mem_fraction_static:
    description: SGLang's --mem-fraction-static; null for SGLang's own rule.
    type: float
"""

EXAMPLES = r"""
- ansible.builtin.set_fact:
    llm_plan_result: >-
      {{ llm_model | llmdeploy.llm.llm_deployment_plan(llm_hardware, vllm_version='0.33.0',
           overrides={'tensor_parallel_size': 8}) }}
"""

RETURN = r"""
_value:
  description: llm_plan_result; see roles/llm_plan/meta/argument_specs.yml and docs/planner.md.
  type: dict
"""


def llm_deployment_plan(model: Any, hardware: Any, **kwargs: Any) -> dict[str, Any]:
    try:
        return plan_deployment(model, hardware, **kwargs)
    except (DeploymentPlanError, PlanInputError, TypeError) as exc:
        raise AnsibleFilterError(f"llm_deployment_plan: {exc}") from exc


class FilterModule:
    """Map the filter name to the function above."""

    def filters(self) -> dict[str, Any]:
        return {"llm_deployment_plan": llm_deployment_plan}
