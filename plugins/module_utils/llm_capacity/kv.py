"""KV cache layout: cache dtype, per-layer specs, vLLM's layer grouping, blocks, tokens and concurrency."""

from __future__ import annotations

from typing import Any

from ._common import _KV_DTYPES, DEFAULT_BLOCK_SIZE, PlanInputError, _cdiv
from .config import quantization_scheme

# "GPU KV cache size" is logged as int(max_concurrency * max_model_len) from this version on (PRs #38364 /
# #40694): this project's own vLLM 0.22.0 recording on an H200 shows it for Gemma 3
# (tests/data/vllm_logs_h200.jsonl r02_gemma3_tp1_bf16, exact), v0.27.1's kv_cache_utils.py has it, while
# 0.19.0 (issue #40691) and 0.16.1rc1 (a Qwen3.5-9B log) print num_blocks // groups * block. 0.20 and
# 0.21 are not pinned; 0.22 is the first version seen with it.
REPORT_FROM_CONCURRENCY_SINCE = (0, 22, 0)


def resolve_kv_dtype(kv_cache_dtype: str, arch: dict[str, Any], warnings: list[str]) -> tuple[str, float]:
    if kv_cache_dtype not in _KV_DTYPES:
        raise PlanInputError(
            "kv_cache_dtype", f"expected one of {sorted(_KV_DTYPES)}, got {kv_cache_dtype!r}"
        )
    if kv_cache_dtype == "auto":
        ckpt = quantization_scheme(arch)["kv_cache_dtype"]
        if ckpt:
            warnings.append(
                "kv_cache_dtype auto adopts the checkpoint's FP8 KV recipe (vLLM PR #29980); "
                "pass bfloat16 explicitly to keep a 16-bit cache"
            )
            return "fp8", 1.0
        return arch["dtype"], float(arch["dtype_bytes"])
    if kv_cache_dtype.startswith("fp8"):
        return "fp8", 1.0
    return kv_cache_dtype, 2.0


def _linear_state_bytes(arch: dict[str, Any], tp: int) -> int | None:
    """Recurrent state of one linear-attention / Mamba layer on one rank, in bytes.

    Gated DeltaNet (Qwen3-Next, vllm/model_executor/models/qwen3_next.py) and Mamba2
    (mamba_mixer2.py): a conv state of (conv_dim / tp, kernel - 1) in the model dtype and a temporal
    state in the config's mamba_ssm_dtype (model dtype when absent; mamba_ssm_cache_dtype "auto").
    Qwen3.5-27B's float32 state makes vLLM log "Setting attention block size to 1568 tokens" with an
    FP8 cache (784 with BF16); a 16-bit state would give 800 / 400.
    """
    state = arch.get("linear_state")
    if not state:
        return None
    dtype = arch["dtype_bytes"]
    ssm = state.get("ssm_bytes") or dtype
    if state["type"] == "gdn":
        conv_dim = 2 * state["k_heads"] * state["k_dim"] + state["v_heads"] * state["v_dim"]
        temporal = _cdiv(state["v_heads"], tp) * state["k_dim"] * state["v_dim"]
    else:
        conv_dim = state["heads"] * state["head_dim"] + 2 * state["groups"] * state["state"]
        temporal = _cdiv(state["heads"], tp) * state["head_dim"] * state["state"]
    return _cdiv(conv_dim, tp) * (state["kernel"] - 1) * dtype + temporal * ssm


def kv_layer_specs(arch: dict[str, Any], *, tp: int, kv_dtype: str, kv_bytes: float) -> list[dict[str, Any]]:
    """Per-layer KV spec on one rank: kind, bytes per token (or state bytes), window."""
    specs = []
    state_bytes = _linear_state_bytes(arch, tp)
    for i, kind in enumerate(arch["layer_kinds"]):
        if kind == "none":
            continue
        if kind == "linear":
            if state_bytes is not None:
                specs.append(
                    {
                        "layer": i,
                        "kind": "mamba",
                        "bytes_per_token": 0,
                        "state_bytes": state_bytes,
                        "window": None,
                    }
                )
            continue
        if arch["use_mla"]:
            latent = arch["kv_lora_rank"] + arch["qk_rope_head_dim"]
            # kv_cache_interface.py MLAAttentionSpec: the latent is one head kept whole on every TP rank;
            # sparse (DSA) MLA with an FP8 cache uses the packed fp8_ds_mla layout of 656 bytes.
            per_token = 656 if (arch["sparse_indexer"] and kv_dtype == "fp8") else latent * kv_bytes
            specs.append({"layer": i, "kind": "mla", "bytes_per_token": per_token, "window": None})
            if arch["sparse_indexer"]:
                # DeepSeek-V3.2 / GLM-5 indexer keys: fp8 head_dim plus one fp32 scale per 128 (uint8 pages).
                idx = arch["index_head_dim"] + arch["index_head_dim"] // 128 * 4
                specs.append({"layer": i, "kind": "indexer", "bytes_per_token": idx, "window": None})
            continue
        heads_per_rank = max(1, arch["num_key_value_heads"] // tp)
        per_token = 2 * heads_per_rank * arch["head_dim"] * kv_bytes
        specs.append(
            {
                "layer": i,
                "kind": kind,
                "bytes_per_token": per_token,
                "window": arch["window"] if kind != "full" else None,
            }
        )
    return specs


def _group_layers(specs: list[dict[str, Any]], hybrid: bool, block_size: int) -> list[dict[str, Any]]:
    """kv_cache_utils.py get_kv_cache_groups: one group, one uniform-type group, or equal-size groups.

    Each group carries its page (bytes per block per layer) and block (tokens per block).
    """
    if not specs:
        return []
    if not hybrid:
        specs = [
            dict(s, kind="full" if s["kind"] in ("sliding", "chunked") else s["kind"], window=None)
            for s in specs
        ]
    attn = [s for s in specs if s["kind"] != "mamba"]
    if len(attn) < len(specs) and attn:
        # models/config.py HybridAttentionMambaModelConfig: the attention block grows (in steps of 16
        # tokens) until an attention page holds a Mamba state; the Mamba page is padded to it.
        per_token = max(s["bytes_per_token"] for s in attn)
        state = max(s["state_bytes"] for s in specs if s["kind"] == "mamba")
        block_size = max(block_size, 16 * _cdiv(int(state), int(16 * per_token)))
    for s in specs:
        s["block"] = block_size
        s["page"] = s["bytes_per_token"] * block_size
    for s in specs:
        if s["kind"] == "mamba":
            s["page"] = max(x["page"] for x in specs)
    keys = {(s["kind"], s["page"]) for s in specs}
    if len(keys) == 1:
        first = specs[0]
        return [
            {
                "kind": first["kind"],
                "window": first["window"],
                "page": first["page"],
                "block": block_size,
                "members": specs,
            }
        ]
    kinds = {s["kind"] for s in specs}
    if kinds <= {"full", "mla", "indexer"}:
        # All layers need a slot for every token: UniformTypeKVCacheSpecs, one group, page = sum.
        return [{"kind": "uniform_type", "window": None, "page": None, "block": block_size, "members": specs}]
    # unify_kv_cache_spec_page_size: smaller pages get proportionally larger blocks.
    max_page = max(s["page"] for s in specs)
    for s in specs:
        if s["page"] != max_page:
            if max_page % s["page"]:
                raise PlanInputError("hf_config", "layer page sizes cannot be unified (vLLM raises too)")
            s["block"] = s["block"] * (max_page // s["page"])
            s["page"] = max_page
    by_type: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for s in specs:
        by_type.setdefault((s["kind"], s["block"]), []).append(s)
    sizes = [len(v) for v in by_type.values()]
    group_size = min(sizes)
    if max(sizes) < group_size * 1.5:
        group_size = max(sizes)
    groups = []
    for (kind, blk), members in by_type.items():
        count = _cdiv(len(members), group_size)
        for g in range(count):
            groups.append(
                {
                    "kind": kind,
                    "window": members[0]["window"],
                    "page": max_page,
                    "block": blk,
                    "members": members[g::count],
                }
            )
    return groups


def _blocks_per_request(
    group: dict[str, Any], *, max_model_len: int, dcp: int, mnbt: int, mamba_cache_mode: str = "none"
) -> int:
    """Blocks one request of max_model_len needs in a group (KVCacheSpec.max_memory_usage_bytes)."""
    block = group["block"]
    if group["kind"] == "mamba":
        # "none": one state per sequence. "align" (prefix caching on a hybrid model): the running state
        # plus the last block-aligned checkpoint, 2 blocks: a Qwen3.5-27B-geometry log with prefix
        # caching reports 2.31x for 208 blocks = 84 attention blocks + 3 linear groups x 2.
        return 2 if mamba_cache_mode == "align" else 1
    if group["kind"] == "sliding":
        return _cdiv(min(group["window"] - 1 + mnbt, max_model_len), block) + 1
    if group["kind"] == "chunked":
        return _cdiv(min(group["window"] + mnbt, max_model_len), block)
    return _cdiv(_cdiv(max_model_len, dcp), block)


def kv_capacity(
    groups: list[dict[str, Any]],
    stage_memory_bytes: list[float],
    stage_of_layer: list[int],
    *,
    dcp: int,
    max_model_len: int,
    max_num_batched_tokens: int,
    mamba_cache_mode: str = "none",
    report_from_concurrency: bool = False,
) -> dict[str, Any]:
    """num_blocks (min over stages), logged token count and maximum concurrency, as vLLM computes them.

    The logged "GPU KV cache size" is ``num_blocks // groups * block * dcp`` up to vLLM 0.19 at least
    (issue #40691); 0.22 and later log ``int(max_concurrency * max_model_len)``
    (``report_from_concurrency``, PRs #38364 / #40694), which differs for hybrid models.
    """
    pp = len(stage_memory_bytes)
    blocks_by_stage = []
    page_by_stage = []
    for stage in range(pp):
        if groups and groups[0]["kind"] == "uniform_type":
            page = sum(m["page"] for m in groups[0]["members"] if stage_of_layer[m["layer"]] == stage)
            nblocks = int(stage_memory_bytes[stage] // page) if page else 0
        else:
            counts = [sum(1 for m in g["members"] if stage_of_layer[m["layer"]] == stage) for g in groups]
            group_size = max(counts) if counts else 0
            page = groups[0]["page"] if groups else 0
            nblocks = int(stage_memory_bytes[stage] // page // group_size) if group_size else 0
            page *= group_size
        blocks_by_stage.append(max(nblocks, 0))
        page_by_stage.append(page)
    num_blocks = min(blocks_by_stage) if blocks_by_stage else 0
    n_groups = max(len(groups), 1)
    min_block = min((g["block"] for g in groups), default=DEFAULT_BLOCK_SIZE)
    need = sum(
        _blocks_per_request(
            g,
            max_model_len=max_model_len,
            dcp=dcp,
            mnbt=max_num_batched_tokens,
            mamba_cache_mode=mamba_cache_mode,
        )
        for g in groups
    )
    if report_from_concurrency and need:
        tokens = int(num_blocks / need * max_model_len)
    else:
        tokens = num_blocks // n_groups * min_block * dcp
    return {
        "num_blocks": num_blocks,
        "num_blocks_by_stage": blocks_by_stage,
        "bytes_per_block_by_stage": page_by_stage,
        "kv_cache_groups": len(groups),
        "block_size": min_block,
        "blocks_per_request": need,
        "kv_cache_tokens": tokens,
        "max_concurrency": round(num_blocks / need, 2) if need else 0.0,
    }


def max_model_len_that_fits(
    groups: list[dict[str, Any]], num_blocks: int, *, dcp: int, mnbt: int, mamba_cache_mode: str = "none"
) -> int:
    """Largest max_model_len whose single request fits in num_blocks (vLLM's estimate on failure)."""
    lo, hi, best = 1, 1 << 26, 0
    while lo <= hi:
        mid = (lo + hi) // 2
        need = sum(
            _blocks_per_request(g, max_model_len=mid, dcp=dcp, mnbt=mnbt, mamba_cache_mode=mamba_cache_mode)
            for g in groups
        )
        if need <= num_blocks:
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best
