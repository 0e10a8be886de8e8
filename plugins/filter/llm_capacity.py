"""Filter plugin: maps filter names onto the pure functions of module_utils/llm_capacity.py."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.llmdeploy.llm.plugins.module_utils.llm_capacity import (
    PlanInputError,
    plan_memory,
    recommend_layout,
)
from ansible_collections.llmdeploy.llm.plugins.module_utils.llm_capacity.sglang import sglang_kv_pool

DOCUMENTATION = r"""
name: llm_capacity
short_description: Plan GPU memory, KV cache and parallel layout for serving a model with vLLM
description:
  - C(llm_plan) takes a Hugging Face config.json dict and keyword arguments matching vLLM's flags
    (tensor_parallel_size, pipeline_parallel_size, data_parallel_size, enable_expert_parallel,
    decode_context_parallel_size, gpu_memory_utilization, kv_cache_dtype, max_model_len, max_num_seqs,
    max_num_batched_tokens, weights_gib_per_gpu or checkpoint_gib, kv_cache_memory_gib, vllm_version)
    plus gpu_memory_gib, and returns weights per GPU, KV bytes per token, KV tokens, maximum
    concurrency, a fit verdict and its reasons.
  - C(llm_recommend) searches TP/PP/DCP and KV dtype for a GPU count and returns the best layout with
    the reasons, including what the GPU architecture forces (for example TRITON_MLA on SM 12.x).
    With C(nodes=N) (default 1) C(gpu_count) is the GPUs of one node and N identical nodes are planned;
    TP stays inside a node, pipeline stages or data-parallel replicas split the nodes; the result's
    C(multinode) says how (split, local_world_size) and why.
  - C(llm_sglang_plan) sizes SGLang 0.5.17's KV pool the way SGLang does (mem_fraction_static of the GPU
    holds the weights and the KV pool; its default rule when not given), from the weights per GPU of a
    plan, and returns the fraction, the pool bytes per GPU, the tokens and a note saying so.
"""

EXAMPLES = r"""
- name: Plan Kimi-K2.5-NVFP4 on 8x RTX PRO 6000
  ansible.builtin.set_fact:
    plan: >-
      {{ llm_model.hf_config | llm_plan(gpu_memory_gib=95.59, tensor_parallel_size=8,
         checkpoint_gib=550.4, kv_cache_dtype='fp8', max_model_len=131072) }}
- name: Recommend a layout
  ansible.builtin.set_fact:
    layout: >-
      {{ llm_model.hf_config | llm_recommend(gpu_memory_gib=95.59, gpu_count=8,
         compute_capability='12.0') }}
- name: Recommend a layout over two nodes of 8 H200
  ansible.builtin.set_fact:
    layout: >-
      {{ llm_model.hf_config | llm_recommend(gpu_memory_gib=139.8, gpu_count=8, nodes=2,
         checkpoint_gib=958.5, compute_capability='9.0') }}
- name: SGLang's own KV pool for the chosen layout
  ansible.builtin.set_fact:
    sglang_pool: >-
      {{ llm_model.hf_config | llm_sglang_plan(weights_gib_per_gpu=53.98, gpu_memory_gib=95.59,
         tensor_parallel_size=8, kv_cache_dtype='bfloat16', compute_capability='12.0') }}
"""

RETURN = r"""
_value:
  description: A dict; see plan_memory and recommend_layout in docs/planner.md for every key.
  type: dict
"""

# ----------------------------------------------------------------------------------------------
# Ansible
# ----------------------------------------------------------------------------------------------


def _filter(name: str, func: Any) -> Any:
    def run(hf_config: Any, **kwargs: Any) -> Any:
        try:
            return func(hf_config, **kwargs)
        except PlanInputError as exc:
            raise AnsibleFilterError(f"{name}: {exc}") from exc
        except TypeError as exc:  # unknown keyword argument
            raise AnsibleFilterError(f"{name}: {exc}") from exc

    return run


class FilterModule:
    """Ansible filters of the capacity planner."""

    def filters(self) -> dict[str, Any]:
        return {
            "llm_plan": _filter("llm_plan", plan_memory),
            "llm_recommend": _filter("llm_recommend", recommend_layout),
            "llm_sglang_plan": _filter("llm_sglang_plan", sglang_kv_pool),
        }
