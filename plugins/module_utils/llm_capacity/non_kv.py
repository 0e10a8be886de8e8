"""Non-KV memory of vLLM's profile run: activation peak, non-torch memory, CUDA graphs, batch defaults.

These terms cannot be derived from a config alone; the coefficients below were measured on real vLLM
start-up logs and each is named with what it stands for (see docs/planner.md).
"""

from __future__ import annotations

import math
from typing import Any

from ._common import GIB, _cdiv
from .weights import _stage_of_layers

# CUDA-graph memory is subtracted from the KV budget by default from this version on
# (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS; 0.19 logs "will be enabled by default", 0.22 applies it).
CUDAGRAPH_SUBTRACTED_SINCE = (0, 21, 0)
# Model Runner V2 (vllm/v1/worker/gpu/model_runner.py) is the default for these architectures (vllm/config/
# vllm.py DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES of each release); up to 0.28 its profile_cudagraph_memory
# returns 0, so nothing is subtracted for them. 0.21 has no x86 wheel to read; 0.22's list is assumed.
_V2_RUNNER_ARCHITECTURES = (
    ((0, 21, 0), frozenset({"Qwen3ForCausalLM"})),
    ((0, 23, 0), frozenset({"LlamaForCausalLM", "MistralForCausalLM", "Qwen3ForCausalLM"})),
    (
        (0, 24, 0),
        frozenset(
            {"DeepseekV2ForCausalLM", "GraniteMoeForCausalLM", "LlamaForCausalLM", "MistralForCausalLM"}
            | {"Qwen2MoeForCausalLM", "Qwen3ForCausalLM"}
        ),
    ),
    ((0, 25, 0), frozenset({"DeepseekV2ForCausalLM", "GraniteMoeForCausalLM", "Qwen2MoeForCausalLM"})),
    (
        (0, 26, 0),
        frozenset({"DeepseekV2ForCausalLM", "GraniteMoeForCausalLM", "Qwen2MoeForCausalLM"})
        | frozenset(
            {"InklingForCausalLM", "InklingForConditionalGeneration", "LongcatFlashNgramForCausalLM"}
        ),
    ),
)
# From 0.27.0 vllm/utils/mem_utils.py memory_profiling charges "total consumed" (free memory since the
# worker's first snapshot) plus the transient headroom (torch peak - allocated), instead of weights +
# torch peak increase + non-torch increase (0.19-0.26). Consumed memory includes freed profile-run blocks
# that a small later allocation pins past empty_cache(); vLLM limits that only from 0.31 (gpu_worker.py
# _scoped_allocator_max_split around profile_run). The pinned share is allocator-dependent and not
# derivable from a config, so from 0.27 the planner keeps its H100 graph-memory fit (which the three
# vLLM 0.28 L40S records match within 1.1-3.5 %) as the stand-in for graphs plus that residue.
CONSUMED_ACCOUNTING_SINCE = (0, 27, 0)
# From 0.29 Model Runner V2 serves every supported model and its estimate (vllm/v1/worker/gpu/
# cudagraph_utils.py profile_cudagraph_memory) captures every PIECEWISE graph and extrapolates FULL ones
# from the largest: the real capture footprint, which the H100 fit above describes.
V2_RUNNER_EVERYWHERE_SINCE = (0, 29, 0)


def v2_runner_skips_graph_estimate(architectures: list[str], version: tuple[int, int, int]) -> bool:
    """True where vLLM 0.21-0.26 runs the model on Model Runner V2, whose graph estimate is 0 (0.27-0.28
    do too, but there the planner's stand-in term also carries the consumed-memory residue)."""
    listed: frozenset[str] = frozenset()
    for since, names in _V2_RUNNER_ARCHITECTURES:
        if version >= since:
            listed = names
    return CUDAGRAPH_SUBTRACTED_SINCE <= version < CONSUMED_ACCOUNTING_SINCE and bool(
        listed.intersection(architectures)
    )


# vllm/engine/arg_utils.py: API-server defaults on GPUs with >= 70 GiB (A100 excepted) vs smaller ones.
LARGE_GPU_GIB = 70.0
DEFAULTS_LARGE_GPU = {"max_num_seqs": 1024, "max_num_batched_tokens": 8192}
DEFAULTS_SMALL_GPU = {"max_num_seqs": 256, "max_num_batched_tokens": 2048}
# From 0.28 GPUs with >= 160 GiB (B200 / B300) default to 16384 batched tokens for the API server too
# (vllm/engine/arg_utils.py get_batch_defaults; absent in 0.27.1).
HUGE_GPU_GIB = 160.0
HUGE_GPU_SINCE = (0, 28, 0)
DEFAULTS_HUGE_GPU = {"max_num_seqs": 1024, "max_num_batched_tokens": 16384}
# fused_moe processes at most this many tokens per chunk (vllm/envs.py VLLM_FUSED_MOE_CHUNK_SIZE).
FUSED_MOE_CHUNK = 16 * 1024
# --- Profile-run coefficients (measured on vLLM 0.19 H100 logs; see docs/planner.md) -------------
# The dummy sampler run holds about this many float32 copies of the [max_num_seqs, vocab] logits at
# its peak (logits, float32 copy, probabilities / top-k-top-p scratch).
SAMPLER_FP32_COPIES = 3.71
# Before 0.17 the default sampler filters top-k / top-p with PyTorch's sort (vllm/v1/sample/ops/
# topk_topp_sampler.py apply_top_k_top_p; the Triton kernel arrives in 0.17; the FlashInfer sampler is
# opt-in from 0.13 and an optional extra before 0.12). Live at its peak, in float32-copy units, counted
# from that code: bf16 logits kept by the dummy run (0.5), their float32 copy (1), sorted values (1),
# int64 indices (2), top-k bool mask (0.25), top-p probabilities / cumsum (1), top-p mask (0.25) and the
# scattered result (1).
SAMPLER_SORT_FP32_COPIES = 7.0
TRITON_TOPK_TOPP_SINCE = (0, 17, 0)
# Hidden-state buffers of the dummy forward still alive while the sampler runs, in units of
# max_num_batched_tokens x hidden x 2 bytes.
HIDDEN_COPIES = 1.2
# Transient peak of one dense decoder layer in the forward pass, in [tokens x width x 2 bytes] units:
# about 3 intermediate-wide (gate_up output and its activation) and 7 hidden-wide tensors.
FORWARD_INTERMEDIATE_COPIES = 3.0
FORWARD_HIDDEN_COPIES = 7.0
# Memory allocated outside PyTorch during the profile run (CUDA context growth, cuBLAS workspaces).
NON_TORCH_BASE_GIB = 0.25
NON_TORCH_BASE_PP_GIB = 0.07
# NCCL communicators and custom all-reduce buffers of a TP group: ~1.84 GiB at TP 2, ~1.94 at TP 4
# (H100 NVLink); grows by ~0.105 GiB per doubling of the group.
ALLREDUCE_TP2_GIB = 1.835
ALLREDUCE_PER_DOUBLING_GIB = 0.105
# PCIe-only GPUs: no NVLS / symmetric-memory buffers, and vLLM disables its custom all-reduce beyond
# two PCIe GPUs (device_communicators/custom_all_reduce.py), leaving NCCL's ring buffers. Assumed, not
# measured here; it reproduces the Kimi-K2.5 8x RTX PRO 6000 figure (docs/planner.md).
ALLREDUCE_PCIE_GIB = 0.25
# CUDA-graph memory as captured after the KV cache (what vLLM 0.19 logs as "CUDAGraph memory", H100 fit):
# fixed part plus a part per decoder layer on the rank. Informational only: 0.19 does not subtract it.
CUDAGRAPH_BASE_GIB = 0.35
CUDAGRAPH_PER_LAYER_GIB = 0.0185
# From 0.21 vLLM subtracts its own *estimate* (gpu_model_runner.profile_cudagraph_memory): per mode it
# captures the two largest sizes into a scratch pool and measures free memory; first capture + (n - 1) x
# the second capture, floored at 1 MiB per graph ("driver overhead"); the modes share one pool, so the
# total is max(first captures) + sum of the per-graph parts. Measured first captures on this project's
# H200 / vLLM 0.22.0 / torch 2.11 recordings (tests/data/vllm_logs_h200): 62-64 MiB for both 1024-wide
# models, whose 512-token layer transient is only 15-24 MiB, so the floor is fixed cost (allocator
# segments of the warm-up and capture pools, library workspaces), not activations. Assumed: the first
# capture grows with the layer transient of the largest captured batch once that exceeds the floor.
CUDAGRAPH_FIRST_CAPTURE_MIN_GIB = 64 / 1024
CUDAGRAPH_PER_GRAPH_GIB = 1 / 1024
# vllm/config/vllm.py _set_cudagraph_sizes: largest capture size min(2 x max_num_seqs, 512).
CUDAGRAPH_MAX_CAPTURE_SIZE = 512


def estimate_activation_gib(
    arch: dict[str, Any],
    *,
    tp: int,
    stage: int,
    pp: int,
    expert_parallel: bool,
    max_num_seqs: int,
    mnbt: int,
    sampler_copies: float = SAMPLER_FP32_COPIES,
) -> float:
    """Peak torch memory of vLLM's profile run on one GPU of a stage (gpu_model_runner.profile_run)."""
    h = arch["hidden_size"]
    tokens = mnbt
    stage_layers = [i for i, s in enumerate(_stage_of_layers(arch["num_hidden_layers"], pp)) if s == stage]
    persistent = 0.0
    if stage > 0:  # hidden states and residual received from the previous stage
        persistent += 2 * tokens * h * 2
    if any(arch["moe_layers"][i] for i in stage_layers):
        # fused_moe workspaces (persistent): [M, top_k, max(2I, H)] and [M, top_k, I] plus the output.
        inter = arch["moe_intermediate_size"] if expert_parallel else _cdiv(arch["moe_intermediate_size"], tp)
        m = min(tokens, FUSED_MOE_CHUNK)
        persistent += m * arch["num_experts_per_tok"] * (max(2 * inter, h) + inter) * 2 + m * h * 2
    dense = [i for i in stage_layers if not arch["moe_layers"][i] and arch["intermediate_size"]]
    inter_rank = _cdiv(arch["intermediate_size"], tp) if dense else 0
    forward = tokens * 2 * (FORWARD_INTERMEDIATE_COPIES * inter_rank + FORWARD_HIDDEN_COPIES * h)
    sampler = 0.0
    if stage == pp - 1:
        rows = min(max_num_seqs, tokens)
        sampler = sampler_copies * rows * arch["vocab_size"] * 4 + HIDDEN_COPIES * tokens * h * 2
    return (persistent + max(forward, sampler)) / GIB


def estimate_non_torch_gib(*, tp: int, pp: int, interconnect: str = "nvlink") -> float:
    base = NON_TORCH_BASE_GIB if pp == 1 else NON_TORCH_BASE_PP_GIB
    if tp > 1 and interconnect == "pcie":
        base += ALLREDUCE_PCIE_GIB
    elif tp > 1:
        base += ALLREDUCE_TP2_GIB + ALLREDUCE_PER_DOUBLING_GIB * math.log2(tp / 2)
    return base


def estimate_cudagraph_gib(layers_on_rank: int, max_num_seqs: int = 1024) -> float:
    """Profiled CUDA-graph memory. The coefficients hold for the default capture sizes up to 512
    (vllm/config/compilation.py: largest capture size min(2 x max_num_seqs, 512)); smaller batches
    capture fewer and smaller graphs, scaled here by the largest size (rough)."""
    largest = min(2 * max_num_seqs, 512)
    scale = 0.3 + 0.7 * largest / 512
    return (CUDAGRAPH_BASE_GIB + CUDAGRAPH_PER_LAYER_GIB * layers_on_rank) * scale


def cudagraph_capture_sizes(max_num_seqs: int, max_num_batched_tokens: int) -> list[int]:
    """vLLM's default cudagraph_capture_sizes (vllm/config/vllm.py ``_set_cudagraph_sizes``, 0.21-0.28):
    1, 2, 4, steps of 8 below 256, steps of 16 from 256, up to min(2 x max_num_seqs, 512,
    max_num_batched_tokens), plus max_num_batched_tokens itself when it is within that bound."""
    cap = min(2 * max_num_seqs, CUDAGRAPH_MAX_CAPTURE_SIZE, max_num_batched_tokens)
    sizes = {i for i in (1, 2, 4) if i <= cap}
    sizes.update(range(8, min(cap + 1, 256), 8))
    if cap >= 256:
        sizes.update(range(256, cap + 1, 16))
    if max_num_batched_tokens <= cap:
        sizes.add(max_num_batched_tokens)
    return sorted(sizes)


def _graph_layer_transient_bytes(
    arch: dict[str, Any], layers: list[int], *, tp: int, ep: bool, tokens: int
) -> float:
    """Working set of one decoder layer for a captured batch of ``tokens`` (same units as the profile
    run's forward transient; fused-MoE workspaces for MoE layers)."""
    h = arch["hidden_size"]
    best = float(tokens * 2 * FORWARD_HIDDEN_COPIES * h)
    if any(not arch["moe_layers"][i] for i in layers) and arch["intermediate_size"]:
        inter = _cdiv(arch["intermediate_size"], tp)
        best = max(best, tokens * 2 * (FORWARD_INTERMEDIATE_COPIES * inter + FORWARD_HIDDEN_COPIES * h))
    if any(arch["moe_layers"][i] for i in layers):
        inter = arch["moe_intermediate_size"] if ep else _cdiv(arch["moe_intermediate_size"], tp)
        k = arch["num_experts_per_tok"]
        best = max(
            best, tokens * k * (max(2 * inter, h) + inter) * 2 + tokens * h * 2 * FORWARD_HIDDEN_COPIES
        )
    return best


def estimate_cudagraph_profile_gib(
    arch: dict[str, Any], layers: list[int], *, tp: int, ep: bool, max_num_seqs: int, mnbt: int
) -> dict[str, Any]:
    """vLLM >= 0.21's CUDA-graph estimate for the default FULL_AND_PIECEWISE mode
    (gpu_model_runner.profile_cudagraph_memory; capture keys from cudagraph_dispatcher
    .initialize_cudagraph_keys: PIECEWISE for every capture size, FULL for the uniform-decode sizes
    <= max_num_seqs)."""
    sizes = cudagraph_capture_sizes(max_num_seqs, mnbt)
    modes = {"PIECEWISE": sizes, "FULL": [s for s in sizes if s <= max_num_seqs]}
    first = {}
    per_graph = {}
    for mode, descs in modes.items():
        if not descs:
            continue
        transient = _graph_layer_transient_bytes(arch, layers, tp=tp, ep=ep, tokens=max(descs)) / GIB
        first[mode] = max(CUDAGRAPH_FIRST_CAPTURE_MIN_GIB, transient)
        per_graph[mode] = CUDAGRAPH_PER_GRAPH_GIB * (len(descs) - 1)
    total = max(first.values(), default=0.0) + sum(per_graph.values())
    return {"gib": total, "graphs": {m: len(d) for m, d in modes.items()}, "largest": max(sizes, default=0)}


# ----------------------------------------------------------------------------------------------
# What a vLLM version does with these terms
# ----------------------------------------------------------------------------------------------


def batch_defaults(gpu_memory_gib: float, version: tuple[int, int, int]) -> dict[str, int]:
    """API-server max_num_seqs / max_num_batched_tokens vLLM picks for a GPU size and version."""
    defaults = DEFAULTS_LARGE_GPU if gpu_memory_gib >= LARGE_GPU_GIB else DEFAULTS_SMALL_GPU
    if gpu_memory_gib >= HUGE_GPU_GIB and version >= HUGE_GPU_SINCE:
        defaults = DEFAULTS_HUGE_GPU
    return defaults


def sampler_copies(version: tuple[int, int, int], max_num_seqs: int, mnbt: int) -> float:
    """float32 logits copies of the dummy sampler run: PyTorch sort or the Triton top-k / top-p kernel."""
    # The Triton top-k / top-p kernel serves batches of 8 rows and more (apply_top_k_top_p).
    sort_sampler = version < TRITON_TOPK_TOPP_SINCE or min(max_num_seqs, mnbt) < 8
    return SAMPLER_SORT_FP32_COPIES if sort_sampler else SAMPLER_FP32_COPIES


def cudagraph_subtracted(version: tuple[int, int, int], enforce_eager: bool) -> bool:
    """Whether the KV budget loses the (estimated) CUDA-graph memory."""
    return version >= CUDAGRAPH_SUBTRACTED_SINCE and not enforce_eager


def stage_cudagraph_gib(
    arch: dict[str, Any],
    layers: list[int],
    *,
    version: tuple[int, int, int],
    architectures: list[str],
    enforce_eager: bool,
    tp: int,
    ep: bool,
    max_num_seqs: int,
    mnbt: int,
) -> float:
    """CUDA-graph GiB of one PP stage (decoder layers ``layers``) as the given vLLM version counts it:
    none in eager mode or on Model Runner V2 (0.21-0.26), vLLM's own estimate on 0.21-0.26, otherwise
    the H100 capture fit (also the 0.27+ stand-in for graphs plus the consumed-memory residue)."""
    applied = cudagraph_subtracted(version, enforce_eager)
    if enforce_eager or (applied and v2_runner_skips_graph_estimate(architectures, version)):
        return 0.0
    if applied and version < CONSUMED_ACCOUNTING_SINCE:
        return estimate_cudagraph_profile_gib(
            arch, layers, tp=tp, ep=ep, max_num_seqs=max_num_seqs, mnbt=mnbt
        )["gib"]
    return estimate_cudagraph_gib(len(layers), max_num_seqs)
