"""SGLang's KV pool sizing (SGLang 0.5.17): mem_fraction_static and the number of KV tokens per GPU.

SGLang sizes its pool differently from vLLM (docs/sglang.md, "Facts from SGLang 0.5.17's source"):

* ``mem_fraction_static`` is the share of the GPU for weights plus the KV pool. Activations, CUDA graphs,
  the req_to_token table and everything else live in the remainder ``1 - mem_fraction_static``; nothing is
  profiled. When not given, server_args.py ``_handle_gpu_memory_settings`` derives it from the GPU memory
  (nvidia-smi MiB): ``round((gpu_mib - reserved_mib) / gpu_mib, 3)``.
* After the weights load, kv_cache_configurator.py ``_profile_available_bytes`` takes
  ``free_now - pre_model_load_free * (1 - mem_fraction_static)``, which with nothing else resident is
  ``pre_model_load_free * mem_fraction_static - weights``; pool_configurator.py divides it by the cell
  size (bytes of one token over all layers of the rank) and rounds down to a multiple of the page size.

All functions are pure; they import nothing beyond this package.
"""

from __future__ import annotations

import math
from typing import Any

from ._common import (
    GIB,
    MAX_GPU_MEMORY_GIB,
    PlanInputError,
    _flag,
    _positive_float,
    _positive_int,
)
from .config import _text_config, normalize_architecture
from .kv import kv_layer_specs
from .non_kv import estimate_non_torch_gib

SGLANG_VERSION = "0.5.17"
NOTE = (
    f"follows SGLang {SGLANG_VERSION}'s accounting: KV pool = pre-load free memory x mem_fraction_static - "
    "weights, divided by the per-token cell size and rounded down to the page size; activations and CUDA "
    "graphs sit in the 1 - mem_fraction_static remainder and are not subtracted"
)

# CUDA context of a PyTorch process, in use before SGLang measures pre_model_load_memory
# (distributed/bootstrap.py). An assumption, not measured here; pass preload_overhead_gib to override.
CUDA_CONTEXT_GIB = 0.5

# --kv-cache-dtype values modelled here (server_args.py also lists mxfp8, nvfp4, fp4_mx_block16, whose
# pools carry scale buffers this module does not model). "fp8" is the planner's generic name: fp8_e4m3.
_SGLANG_KV_DTYPES = {"auto", "bf16", "bfloat16", "fp8_e4m3", "fp8_e5m2", "fp8"}

# arg_groups/overrides.py _DEEPSEEK_FAMILY_ARCHS: on SM100 these non-DSA MLA models default to trtllm_mla.
_DEEPSEEK_FAMILY = frozenset(
    {
        "DeepseekV3ForCausalLM",
        "DeepseekV32ForCausalLM",
        "KimiK25ForConditionalGeneration",
        "MistralLarge3ForCausalLM",
        "PixtralForConditionalGeneration",
        "GlmMoeDsaForCausalLM",
        "LongcatFlashForCausalLM",
        "LongcatFlashForCausalLMNextN",
    }
)

# configs/model_config.py is_deepseek_dsa: these architectures with index_topk use DSA (sparse MLA).
_DSA_ARCHS = frozenset(
    {
        "DeepseekV3ForCausalLM",
        "DeepseekV32ForCausalLM",
        "DeepseekV3ForCausalLMNextN",
        "MistralLarge3ForCausalLM",
        "PixtralForConditionalGeneration",
        "GlmMoeDsaForCausalLM",
        "GlmMoeDsaForCausalLMNextN",
        "LongcatFlashForCausalLM",
        "LongcatFlashForCausalLMNextN",
    }
)

# DSATokenToKVPool (mem_cache/memory_pool.py): FP8 groups of 128 with a 4-byte scale; rope kept in BF16.
DSA_QUANT_BLOCK = 128
DSA_ROPE_BYTES = 2

# Page sizes the MLA / TRT-LLM backends force (overrides.py _mla_backend_page_constraints and
# _fa4_page_constraint).
_BACKEND_PAGE = {
    "flashmla": 64,
    "cutlass_mla": 128,
    "trtllm_mla": 64,
    "tokenspeed_mla": 64,
    "cutedsl_mla": 64,
    "trtllm_mha": 64,
    "hpc_ops": 64,
    "fa4": 128,
}

# mem_cache/allocation_sizing.py get_req_to_token_extra_context_len without speculative decoding.
REQ_TO_TOKEN_EXTRA = 4


def _major(compute_capability: str | None) -> int | None:
    if compute_capability is None:
        return None
    try:
        return int(str(compute_capability).split(".", maxsplit=1)[0])
    except ValueError as exc:
        raise PlanInputError(
            "compute_capability", f"expected e.g. '9.0', got {compute_capability!r}"
        ) from exc


def _gpu_tier(gpu_mib: float, tp: int) -> tuple[int, int]:
    """Default (chunked_prefill_size, decode CUDA-graph max_bs) by GPU memory (server_args.py tiers)."""
    if gpu_mib < 20 * 1024:
        return 2048, 8
    if gpu_mib < 35 * 1024:
        return 2048, 24 if tp < 4 else 80
    if gpu_mib < 60 * 1024:
        return 4096, 32 if tp < 4 else 160
    if gpu_mib < 160 * 1024:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def prefill_graph_batch_sizes(max_bs: int) -> list[int]:
    """Prefill CUDA-graph capture sizes up to max_bs (_generate_prefill_cuda_graph_batch_sizes)."""
    sizes = [
        *range(4, 33, 4),
        *range(48, 257, 16),
        *range(288, 513, 32),
        *range(576, 1025, 64),
        *range(1280, 4097, 256),
        *range(4608, max_bs + 1, 512),
    ]
    return [s for s in sizes if s <= max_bs]


def _vlm_factor(hf_config: dict[str, Any]) -> float | None:
    """adjust_mem_fraction_for_vlm: 0.95 x a factor from the ViT size relative to ViT-L/14 (24 x 1024)."""
    vision = hf_config.get("vision_config")
    if not isinstance(vision, dict):
        return None
    layers = int(vision.get("num_hidden_layers") or vision.get("depth") or 24)
    hidden = int(vision.get("hidden_size") or 1024)
    ratio = layers * hidden**2 / (24 * 1024**2)
    return 0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))


def sglang_default_mem_fraction_static(
    gpu_memory_mib: float,
    *,
    tp: int = 1,
    pp: int = 1,
    use_mla: bool = False,
    dsa: bool = False,
    multimodal: bool = False,
    chunked_prefill_size: int | None = None,
    cuda_graph_max_bs: int | None = None,
    disable_cuda_graph: bool = False,
    max_total_tokens: int | None = None,
    dp_attention_size: int = 1,
    deepep: bool = False,
) -> dict[str, Any]:
    """SGLang's mem_fraction_static when none is given, with the terms of its reserve (MiB).

    server_args.py _handle_gpu_memory_settings (SGLANG_ENABLE_POST_CAPTURE_KV_SIZING off, the default;
    not a PD-disaggregated engine): reserve = 512 + 1.5 x max(chunked_prefill_size, 2048) + tp x pp / 8 x
    1024 + CUDA-graph reserve, at least 10240 on GPUs over 60 GiB, plus 2048 for DeepEP; the fraction is
    (gpu - reserve) / gpu rounded to 3 decimals. The VLM factor is applied by the caller.
    """
    tier_cps, tier_bs = _gpu_tier(gpu_memory_mib, tp)
    cps = tier_cps if chunked_prefill_size is None else int(chunked_prefill_size)
    max_bs = tier_bs if cuda_graph_max_bs is None else int(cuda_graph_max_bs)
    activation_tokens = max(cps, 2048) if cps > 0 else 2048
    activation_mb = 512 + activation_tokens * 1.5
    parallel_mb = tp * pp / 8 * 1024
    graph_mb = 0.0
    # Decode graphs are FULL by default; prefill graphs BREAKABLE on CUDA, switched off for MLA without DSA
    # (_disable_breakable_cudagraph_if_incompatible) and for multimodal models outside an allowlist.
    prefill_graphs = not disable_cuda_graph and not (use_mla and not dsa) and not multimodal
    if not disable_cuda_graph:
        graph_mb += max_bs * 2
        if dp_attention_size > 1:
            graph_mb += max_bs * dp_attention_size * 3
            if max_bs > 300:
                graph_mb += max_bs * dp_attention_size * 1.5
    prefill_sizes: list[int] = []
    if prefill_graphs:
        prefill_max = 2048 if use_mla else cps
        if max_total_tokens is not None:
            prefill_max = min(prefill_max, max_total_tokens)
        prefill_sizes = prefill_graph_batch_sizes(prefill_max)
        graph_mb += 1.5 * 1024 if use_mla else len(prefill_sizes) * 8
    reserved = activation_mb + parallel_mb + graph_mb
    if gpu_memory_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    if deepep and not disable_cuda_graph:
        reserved += 2 * 1024
    return {
        "mem_fraction_static": round((gpu_memory_mib - reserved) / gpu_memory_mib, 3),
        "gpu_memory_mib": gpu_memory_mib,
        "reserved_mib": reserved,
        "activation_reserve_mib": activation_mb,
        "parallel_reserve_mib": parallel_mb,
        "cuda_graph_reserve_mib": graph_mb,
        "chunked_prefill_size": cps,
        "cuda_graph_max_bs": max_bs,
        "prefill_cuda_graph": prefill_graphs,
        "prefill_cuda_graph_sizes": len(prefill_sizes),
    }


def _is_dsa(arch: dict[str, Any]) -> bool:
    return bool(arch["use_mla"] and arch["sparse_indexer"] and set(arch["architectures"]) & _DSA_ARCHS)


def _checkpoint_fp8_kv(arch: dict[str, Any]) -> bool:
    """kv_cache_dtype.py: "auto" is FP8 only where the quant config's kv_cache_quant_algo is "FP8"."""
    qc = arch.get("quantization_config") or {}
    algo = qc.get("kv_cache_quant_algo")
    if algo is None and isinstance(qc.get("quantization"), dict):
        algo = qc["quantization"].get("kv_cache_quant_algo")
    return isinstance(algo, str) and algo.upper() == "FP8"


def resolve_sglang_kv_dtype(
    kv_cache_dtype: str, arch: dict[str, Any], *, major: int | None, warnings: list[str]
) -> tuple[str, int]:
    """The KV dtype SGLang stores ("bfloat16", "float16", "fp8_e4m3", "fp8_e5m2") and its bytes."""
    if kv_cache_dtype not in _SGLANG_KV_DTYPES:
        raise PlanInputError(
            "kv_cache_dtype", f"expected one of {sorted(_SGLANG_KV_DTYPES)}, got {kv_cache_dtype!r}"
        )
    if kv_cache_dtype == "fp8":
        kv_cache_dtype = "fp8_e4m3"
    dsa = _is_dsa(arch)
    if dsa and kv_cache_dtype == "auto":
        # overrides.py _dsa_kv_cache_dtype_default: FP8 on SM10x and newer, BF16 before.
        if major is None:
            warnings.append(
                "DSA model with kv_cache_dtype auto: SGLang picks fp8_e4m3 on SM >= 10 and bfloat16 below; "
                "no compute_capability given, so bfloat16 is assumed"
            )
        kv_cache_dtype = "fp8_e4m3" if major is not None and major >= 10 else "bfloat16"
    if dsa and kv_cache_dtype == "fp8_e5m2":
        raise PlanInputError("kv_cache_dtype", "SGLang's DSA models take only bfloat16 or fp8_e4m3")
    if kv_cache_dtype == "auto":
        if _checkpoint_fp8_kv(arch):
            warnings.append(
                "kv_cache_dtype auto adopts the checkpoint's FP8 KV recipe (kv_cache_quant_algo FP8)"
            )
            return "fp8_e4m3", 1
        return ("float16" if arch["dtype"] in ("float16", "half") else "bfloat16"), int(arch["dtype_bytes"])
    if kv_cache_dtype.startswith("fp8"):
        return kv_cache_dtype, 1
    return "bfloat16", 2


def default_attention_backend(arch: dict[str, Any], major: int | None) -> str | None:
    """server_args.py _get_default_attn_backend plus the DeepSeek-family overrides, on CUDA."""
    if major is None:
        return None
    archs = set(arch["architectures"])
    if arch["use_mla"]:
        if _is_dsa(arch):
            return "dsa"
        if major == 9:
            return "fa3"
        if major == 10:
            return "trtllm_mla" if archs & _DEEPSEEK_FAMILY else "flashinfer"
        return "triton"
    if major == 9:
        return "fa3"
    if major == 10:
        return "trtllm_mha"
    return "flashinfer"


def default_dsa_decode_backend(arch: dict[str, Any], kv_dtype: str, major: int | None) -> str | None:
    """overrides.py _dsa_split_backend_resolution (CUDA, no HiSparse): the DSA decode kernel."""
    if major is None:
        return None
    if "GlmMoeDsaForCausalLM" in arch["architectures"] and major == 12 and kv_dtype == "fp8_e4m3":
        return "flashinfer_sparse_mla"
    if kv_dtype == "fp8_e4m3":
        return "trtllm" if major >= 10 else "flashmla_kv"
    return "trtllm" if major >= 10 else "fa3"


def sglang_cell_bytes(
    arch: dict[str, Any],
    *,
    tp: int,
    kv_dtype: str,
    kv_bytes: int,
    v_head_dim: int | None = None,
    dsa_backend: str | None = None,
) -> int:
    """Bytes of one token over all KV layers of one TP rank (pool_configurator.py _compute_cell_size).

    Equal to the planner's vLLM per-token bytes (kv.kv_layer_specs) for GQA/MHA with v_head_dim ==
    head_dim, for MLA (one kv_lora_rank + qk_rope_head_dim latent per layer, whole on every rank) and for
    DSA models with a BF16 cache or an FP8 cache read by a non-TRT-LLM kernel (656 bytes: 512 FP8 + 4 x 4
    scale bytes + 64 BF16 rope, plus the 132-byte indexer key). It differs for DSA with FP8 under the
    trtllm DSA backend (576 bytes, calculate_mla_kv_cache_dim) and where v_head_dim != head_dim
    (SGLang sums head_dim + v_head_dim).
    """
    kinds = set(arch["layer_kinds"]) - {"full"}
    if kinds:
        raise PlanInputError(
            "hf_config",
            f"layer kinds {sorted(kinds)} use SGLang's hybrid SWA / Mamba pools, which are not modelled here",
        )
    specs = kv_layer_specs(arch, tp=tp, kv_dtype="fp8" if kv_bytes == 1 else "bfloat16", kv_bytes=kv_bytes)
    if arch["use_mla"]:
        dsa = _is_dsa(arch)
        latent = arch["kv_lora_rank"] + arch["qk_rope_head_dim"]
        total = 0
        for spec in specs:
            if spec["kind"] == "indexer":
                total += spec["bytes_per_token"] if dsa else 0
            elif dsa and kv_dtype == "fp8_e4m3" and dsa_backend != "trtllm":
                total += (
                    arch["kv_lora_rank"]
                    + arch["kv_lora_rank"] // DSA_QUANT_BLOCK * 4
                    + arch["qk_rope_head_dim"] * DSA_ROPE_BYTES
                )
            else:
                total += latent * kv_bytes
        return int(total)
    vdim = v_head_dim or arch["head_dim"]
    if vdim == arch["head_dim"]:
        return int(sum(s["bytes_per_token"] for s in specs))
    heads = max(1, arch["num_key_value_heads"] // tp)
    return int(heads * (arch["head_dim"] + vdim) * kv_bytes * len(specs))


def sglang_context_length(hf_config: dict[str, Any]) -> int:
    """hf_transformers/common.py get_context_length: the first length key x the rope factor."""
    text = _text_config(hf_config)
    rope = text.get("rope_scaling")
    factor = 1.0
    if isinstance(rope, dict):
        factor = rope.get("factor", 1) or 1
        if "original_max_position_embeddings" in rope or rope.get("rope_type") == "llama3":
            factor = 1
    for key in (
        "max_sequence_length",
        "seq_length",
        "max_seq_len",
        "model_max_length",
        "max_position_embeddings",
    ):
        if text.get(key) is not None:
            return int(factor * text[key])
    return 2048


def _max_running_requests(tokens: int, context_len: int, requested: int | None) -> int:
    """kv_cache_configurator.py resolve_max_num_reqs (one attention DP rank)."""
    if requested is not None:
        return min(requested, tokens // 2)
    estimated = max(min(int(tokens / context_len * 512), 4096), 2048)
    return min(estimated, tokens // 2)


def sglang_kv_pool(
    hf_config: dict[str, Any],
    *,
    weights_gib_per_gpu: float,
    gpu_memory_gib: float,
    tensor_parallel_size: int = 1,
    kv_cache_dtype: str = "auto",
    mem_fraction_static: float | None = None,
    compute_capability: str | None = None,
    nvidia_smi_memory_mib: float | None = None,
    preload_overhead_gib: float | None = None,
    interconnect: str = "nvlink",
    max_total_tokens: int | None = None,
    context_length: int | None = None,
    page_size: int | None = None,
    attention_backend: str | None = None,
    dsa_decode_backend: str | None = None,
    chunked_prefill_size: int | None = None,
    cuda_graph_max_bs: int | None = None,
    disable_cuda_graph: bool = False,
    max_running_requests: int | None = None,
    speculative_draft_layers: int = 0,
) -> dict[str, Any]:
    """KV pool of one SGLang 0.5.17 server (TP only, no PP / DP attention) on identical GPUs.

    ``gpu_memory_gib`` is CUDA's total per GPU; ``nvidia_smi_memory_mib`` what nvidia-smi reports (SGLang's
    default rule reads it; gpu_memory_gib x 1024 when not given). ``weights_gib_per_gpu`` is the planner's
    weights per GPU. ``preload_overhead_gib`` is the memory in use before the weights load (CUDA context,
    NCCL / custom all-reduce buffers): CUDA_CONTEXT_GIB plus the planner's non-torch estimate when not given.
    ``compute_capability`` ("9.0", "10.0", "12.0") picks SGLang's default attention backend, page size and,
    for DSA models, the KV dtype of "auto" and the DSA kernel.
    """
    tp = _positive_int("tensor_parallel_size", tensor_parallel_size)
    gpu_gib = _positive_float("gpu_memory_gib", gpu_memory_gib, upper=MAX_GPU_MEMORY_GIB)
    weights = float(weights_gib_per_gpu)
    if not math.isfinite(weights) or weights < 0:
        raise PlanInputError("weights_gib_per_gpu", f"expected a number >= 0, got {weights_gib_per_gpu!r}")
    smi_mib = (
        _positive_float("nvidia_smi_memory_mib", nvidia_smi_memory_mib)
        if nvidia_smi_memory_mib is not None
        else gpu_gib * 1024
    )
    major = _major(compute_capability)
    warnings: list[str] = []
    arch = normalize_architecture(hf_config)
    dsa = _is_dsa(arch)
    kv_dtype, kv_bytes = resolve_sglang_kv_dtype(kv_cache_dtype, arch, major=major, warnings=warnings)

    backend = attention_backend or default_attention_backend(arch, major)
    dsa_backend = None
    if dsa:
        dsa_backend = dsa_decode_backend or default_dsa_decode_backend(arch, kv_dtype, major)
        if dsa_backend is None and kv_dtype == "fp8_e4m3":
            warnings.append(
                "DSA FP8 cell assumed 656 bytes per layer (flashmla_kv / flashinfer_sparse_mla); "
                "the trtllm DSA kernel (SGLang's default on SM10x) stores 576"
            )
    if page_size is not None:
        page = _positive_int("page_size", page_size)
    elif dsa:
        page = 64  # overrides.py: "Setting page size to 64 for DeepSeek DSA"
    else:
        page = _BACKEND_PAGE.get(backend or "", 1)
    if kv_dtype.startswith("fp8") and arch["use_mla"] and backend == "flashinfer":
        warnings.append(
            "FlashInfer's MLA backend casts each layer's whole FP8 KV buffer to BF16 on every decode step "
            "(flashinfer_mla_backend.py forward_decode); prefer triton (SM120) or trtllm_mla (SM100)"
        )

    vdim = _text_config(hf_config).get("v_head_dim") if not arch["use_mla"] else None
    cell = sglang_cell_bytes(
        arch, tp=tp, kv_dtype=kv_dtype, kv_bytes=kv_bytes, v_head_dim=vdim, dsa_backend=dsa_backend
    )
    layers = arch["num_hidden_layers"]
    draft = int(speculative_draft_layers or 0)
    if draft > 0:
        cell = int(cell * (1 + draft / layers))  # EAGLE / MTP draft KV in the same pool

    rule = None
    if mem_fraction_static is None:
        multimodal = isinstance(hf_config.get("vision_config"), dict)
        rule = sglang_default_mem_fraction_static(
            smi_mib,
            tp=tp,
            use_mla=arch["use_mla"],
            dsa=dsa,
            multimodal=multimodal,
            chunked_prefill_size=chunked_prefill_size,
            cuda_graph_max_bs=cuda_graph_max_bs,
            disable_cuda_graph=_flag("disable_cuda_graph", disable_cuda_graph),
            max_total_tokens=max_total_tokens,
        )
        mfs = rule["mem_fraction_static"]
        factor = _vlm_factor(hf_config) if multimodal else None
        if factor is not None:
            mfs *= factor
            rule["vlm_factor"] = round(factor, 4)
    else:
        mfs = _positive_float("mem_fraction_static", mem_fraction_static, upper=1.0)

    if preload_overhead_gib is None:
        overhead = CUDA_CONTEXT_GIB + estimate_non_torch_gib(tp=tp, pp=1, interconnect=interconnect)
    else:
        overhead = float(preload_overhead_gib)
    pre_load = gpu_gib - overhead
    remainder = pre_load * (1 - mfs)
    rest_gib = pre_load - weights - remainder
    reasons: list[str] = []
    pool_bytes = int(rest_gib * GIB) if rest_gib > 0 else 0
    tokens = pool_bytes // cell // page * page if cell else 0
    if max_total_tokens is not None:
        cap = _positive_int("max_total_tokens", max_total_tokens)
        if cap > tokens:
            warnings.append(f"max_total_tokens {cap} is above the profiled {tokens}; SGLang keeps {tokens}")
        tokens = min(tokens, cap) // page * page
    if rest_gib <= 0:
        minimum = math.ceil((1 - (pre_load - weights) / pre_load) * 1000) / 1000
        reasons.append(
            f"weights {weights:.2f} GiB leave no KV pool under mem_fraction_static {mfs:.3f}; "
            f"SGLang refuses to start: raise it above {minimum:.3f}"
        )
    elif tokens <= 0:
        reasons.append("not enough memory for one KV page: raise mem_fraction_static (SGLang raises too)")

    ctx = int(context_length) if context_length is not None else sglang_context_length(hf_config)
    mrr = _max_running_requests(tokens, ctx, max_running_requests) if tokens > 0 else 0
    req_to_token = (mrr + 1) * (ctx + REQ_TO_TOKEN_EXTRA) * 4
    if tokens > 0 and req_to_token > 0.5 * remainder * GIB:
        warnings.append(
            f"the req_to_token table ({req_to_token / GIB:.2f} GiB: {mrr} requests x {ctx} tokens) "
            f"takes over half of the {remainder:.2f} GiB left outside mem_fraction_static; "
            "lower --context-length or --max-running-requests"
        )
    return {
        "engine": "sglang",
        "sglang_version": SGLANG_VERSION,
        "fits": not reasons,
        "reasons": reasons,
        "warnings": warnings,
        "mem_fraction_static": round(mfs, 4),
        "mem_fraction_static_default": rule is not None,
        "mem_fraction_static_rule": rule,
        "gpu_memory_gib": gpu_gib,
        "pre_model_load_gib": round(pre_load, 3),
        "preload_overhead_gib": round(overhead, 3),
        "weights_gib_per_gpu": round(weights, 3),
        "remainder_gib": round(remainder, 3),
        "kv_pool_bytes_per_gpu": pool_bytes,
        "kv_pool_gib_per_gpu": round(pool_bytes / GIB, 3),
        "kv_cache_dtype": kv_dtype,
        "cell_size_bytes": cell,
        "page_size": page,
        "attention_backend": backend,
        "dsa_decode_backend": dsa_backend,
        "max_total_tokens": tokens,
        "context_length": ctx,
        "max_running_requests": mrr,
        "req_to_token_bytes": req_to_token,
        "tp": tp,
        "note": NOTE,
    }
