"""Capacity planner: will a model fit a GPU layout under vLLM, and with how much KV cache.

Pure functions over a Hugging Face ``config.json`` dict. The memory accounting follows vLLM's own
start-up algorithm (see docs/planner.md for the source paths):

* ``vllm/v1/worker/gpu_worker.py`` ``determine_available_memory``: the KV budget of a worker is
  ``total * gpu_memory_utilization - (weights + peak activation + non-torch memory)``, minus the
  profiled CUDA-graph memory where ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` is on (the default
  since 0.21; 0.19 only logs it). ``--kv-cache-memory-bytes`` replaces the whole budget.
* ``vllm/v1/kv_cache_interface.py``: page size of a layer = ``block_size * kv_heads * (k_dim + v_dim)
  * dtype_bytes``; MLA stores one latent "head" of ``kv_lora_rank + qk_rope_head_dim`` elements
  (``fp8_ds_mla``: 656 bytes per token); sliding-window / chunked layers only need their window.
* ``vllm/v1/core/kv_cache_utils.py``: layers are grouped (hybrid models: groups of equal size, padded),
  ``num_blocks = memory // page_size // group_size``, the minimum over all workers (PP stages) is
  used, the logged token count is ``num_blocks // num_groups * block_size * dcp``, and the maximum
  concurrency is ``num_blocks / blocks needed by one max_model_len request``.

The activation, non-torch and CUDA-graph terms cannot be derived from a config alone; they are
modelled from what the profile run does (a dummy forward of ``max_num_batched_tokens`` tokens and a
dummy sampler run over ``max_num_seqs`` rows of vocabulary-wide logits) with coefficients measured on
real vLLM start-up logs (``../shared/data/vllm_memory_calibration.jsonl``). Each coefficient is named
in ``non_kv.py`` with what it stands for.

The package imports only the standard library; Ansible is optional so ``bin/llm-plan`` runs with a
bare ``python3``. Modules, by concern: ``_common`` (constants, PlanInputError, validators), ``config``
(config.json normalisation, quantization scheme), ``weights``, ``kv`` (KV layout and capacity),
``non_kv`` (activation, non-torch and CUDA-graph terms), ``checks`` (divisibility), ``plan_inputs``
and ``plan`` (plan_memory), ``layout`` (recommend_layout) and ``nodes`` (several nodes: TP inside a node,
PP or DP across nodes). Every name is re-exported here.
"""

from __future__ import annotations

from ._common import (
    _DTYPE_BYTES,
    _KV_DTYPES,
    _STATE_DTYPE_BYTES,
    DEFAULT_BLOCK_SIZE,
    DEFAULT_VLLM_VERSION,
    GIB,
    MAX_GPU_MEMORY_GIB,
    MAX_MODEL_LEN_LIMIT,
    MAX_PARALLEL_SIZE,
    MODELED_VLLM_RANGE,
    PROVEN_VLLM_VERSION,
    VOCAB_PADDING,
    AnsibleFilterError,
    PlanInputError,
    _cdiv,
    _flag,
    _int_field,
    _numeric,
    _positive_float,
    _positive_int,
    _pow2_divisors,
    check_modeled_version,
    default_gpu_memory_utilization,
    modeled_range_text,
    parse_version,
)
from .checks import (
    _fp8_weight_block_n,
    check_divisibility,
)
from .config import (
    _MODEL_TYPE_DEFAULTS,
    _derived_max_len,
    _layer_kinds,
    _linear_state,
    _moe_layers,
    _text_config,
    _vision_params,
    normalize_architecture,
    quantization_scheme,
)
from .kv import (
    REPORT_FROM_CONCURRENCY_SINCE,
    _blocks_per_request,
    _group_layers,
    _linear_state_bytes,
    kv_capacity,
    kv_layer_specs,
    max_model_len_that_fits,
    resolve_kv_dtype,
)
from .layout import (
    TRITON_MLA_FP8_SINCE,
    _backend_block,
    _candidate_table,
    candidate_layouts,
    mla_backend,
    recommend_layout,
    sparse_mla_backend,
)
from .nodes import (
    TP_ACROSS_NODES,
    check_nodes,
    multinode_why,
    node_problem,
    node_split,
    one_node_shortfall,
)
from .non_kv import (
    _V2_RUNNER_ARCHITECTURES,
    ALLREDUCE_PCIE_GIB,
    ALLREDUCE_PER_DOUBLING_GIB,
    ALLREDUCE_TP2_GIB,
    CONSUMED_ACCOUNTING_SINCE,
    CUDAGRAPH_BASE_GIB,
    CUDAGRAPH_FIRST_CAPTURE_MIN_GIB,
    CUDAGRAPH_MAX_CAPTURE_SIZE,
    CUDAGRAPH_PER_GRAPH_GIB,
    CUDAGRAPH_PER_LAYER_GIB,
    CUDAGRAPH_SUBTRACTED_SINCE,
    DEFAULTS_HUGE_GPU,
    DEFAULTS_LARGE_GPU,
    DEFAULTS_SMALL_GPU,
    FORWARD_HIDDEN_COPIES,
    FORWARD_INTERMEDIATE_COPIES,
    FUSED_MOE_CHUNK,
    HIDDEN_COPIES,
    HUGE_GPU_GIB,
    HUGE_GPU_SINCE,
    LARGE_GPU_GIB,
    NON_TORCH_BASE_GIB,
    NON_TORCH_BASE_PP_GIB,
    SAMPLER_FP32_COPIES,
    SAMPLER_SORT_FP32_COPIES,
    TRITON_TOPK_TOPP_SINCE,
    V2_RUNNER_EVERYWHERE_SINCE,
    _graph_layer_transient_bytes,
    cudagraph_capture_sizes,
    estimate_activation_gib,
    estimate_cudagraph_gib,
    estimate_cudagraph_profile_gib,
    estimate_non_torch_gib,
    v2_runner_skips_graph_estimate,
)
from .plan import (
    plan_memory,
)
from .weights import (
    _bytes_per_param,
    _module_ignored,
    _module_ignored_cached,
    _stage_of_layers,
    estimate_weights,
    parameter_inventory,
    pp_partition,
)

__all__ = [
    "ALLREDUCE_PCIE_GIB",
    "ALLREDUCE_PER_DOUBLING_GIB",
    "ALLREDUCE_TP2_GIB",
    "CONSUMED_ACCOUNTING_SINCE",
    "CUDAGRAPH_BASE_GIB",
    "CUDAGRAPH_FIRST_CAPTURE_MIN_GIB",
    "CUDAGRAPH_MAX_CAPTURE_SIZE",
    "CUDAGRAPH_PER_GRAPH_GIB",
    "CUDAGRAPH_PER_LAYER_GIB",
    "CUDAGRAPH_SUBTRACTED_SINCE",
    "DEFAULTS_HUGE_GPU",
    "DEFAULTS_LARGE_GPU",
    "DEFAULTS_SMALL_GPU",
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_VLLM_VERSION",
    "FORWARD_HIDDEN_COPIES",
    "FORWARD_INTERMEDIATE_COPIES",
    "FUSED_MOE_CHUNK",
    "GIB",
    "HIDDEN_COPIES",
    "HUGE_GPU_GIB",
    "HUGE_GPU_SINCE",
    "LARGE_GPU_GIB",
    "MAX_GPU_MEMORY_GIB",
    "MAX_MODEL_LEN_LIMIT",
    "MAX_PARALLEL_SIZE",
    "MODELED_VLLM_RANGE",
    "NON_TORCH_BASE_GIB",
    "NON_TORCH_BASE_PP_GIB",
    "PROVEN_VLLM_VERSION",
    "REPORT_FROM_CONCURRENCY_SINCE",
    "SAMPLER_FP32_COPIES",
    "SAMPLER_SORT_FP32_COPIES",
    "TP_ACROSS_NODES",
    "TRITON_MLA_FP8_SINCE",
    "TRITON_TOPK_TOPP_SINCE",
    "V2_RUNNER_EVERYWHERE_SINCE",
    "VOCAB_PADDING",
    "_DTYPE_BYTES",
    "_KV_DTYPES",
    "_MODEL_TYPE_DEFAULTS",
    "_STATE_DTYPE_BYTES",
    "_V2_RUNNER_ARCHITECTURES",
    "AnsibleFilterError",
    "PlanInputError",
    "_backend_block",
    "_blocks_per_request",
    "_bytes_per_param",
    "_candidate_table",
    "_cdiv",
    "_derived_max_len",
    "_flag",
    "_fp8_weight_block_n",
    "_graph_layer_transient_bytes",
    "_group_layers",
    "_int_field",
    "_layer_kinds",
    "_linear_state",
    "_linear_state_bytes",
    "_module_ignored",
    "_module_ignored_cached",
    "_moe_layers",
    "_numeric",
    "_positive_float",
    "_positive_int",
    "_pow2_divisors",
    "_stage_of_layers",
    "_text_config",
    "_vision_params",
    "candidate_layouts",
    "check_divisibility",
    "check_modeled_version",
    "check_nodes",
    "cudagraph_capture_sizes",
    "default_gpu_memory_utilization",
    "estimate_activation_gib",
    "estimate_cudagraph_gib",
    "estimate_cudagraph_profile_gib",
    "estimate_non_torch_gib",
    "estimate_weights",
    "kv_capacity",
    "kv_layer_specs",
    "max_model_len_that_fits",
    "mla_backend",
    "modeled_range_text",
    "multinode_why",
    "node_problem",
    "node_split",
    "normalize_architecture",
    "one_node_shortfall",
    "parameter_inventory",
    "parse_version",
    "plan_memory",
    "pp_partition",
    "quantization_scheme",
    "recommend_layout",
    "resolve_kv_dtype",
    "sparse_mla_backend",
    "v2_runner_skips_graph_estimate",
]
