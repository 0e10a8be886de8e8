"""Layout recommendation: the MLA backend a GPU generation gets, the TP / PP / DP / DCP splits vLLM would
start, and the search for the best one that fits."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ._common import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_VLLM_VERSION,
    PlanInputError,
    _positive_float,
    _positive_int,
    _pow2_divisors,
    parse_version,
)
from .checks import check_divisibility
from .config import normalize_architecture
from .kv import max_model_len_that_fits
from .nodes import check_nodes, multinode_why, node_problem, node_split, one_node_shortfall
from .plan import plan_memory

# First release with FP8 KV in TRITON_MLA (vLLM PR #34597): the 0.17.1 sdist's triton_mla.py lists only
# auto/bfloat16 and raises NotImplementedError for FP8, the 0.18.0 sdist adds fp8/fp8_e4m3; the rule
# sm120_triton_mla_no_fp8_kv of catalog/known_issues.yml uses the same bound.
TRITON_MLA_FP8_SINCE = (0, 18, 0)
# First release whose KV block size comes from the attention backend's supported sizes.
PREFERRED_BLOCK_SIZE_SINCE = (0, 18, 0)


def mla_backend(compute_capability: str | None, vllm_version: str) -> dict[str, Any]:
    """MLA decode backend vLLM picks on a GPU generation and whether it takes an FP8 cache.

    docs/design/attention_backends.md: FLASHINFER_MLA / CUTLASS_MLA are SM 10.x, FLASHMLA SM 9.x-10.x,
    FLASH_ATTN_MLA SM 9.x (no FP8); TRITON_MLA runs anywhere and is the only one on SM 12.x.
    """
    version = parse_version(vllm_version)
    if compute_capability is None:
        return {"backend": None, "fp8_kv": True, "block_size": DEFAULT_BLOCK_SIZE, "reason": "GPU unknown"}
    match = re.match(r"^(\d+)(?:\.(\d+))?$", str(compute_capability).strip())
    if not match:
        raise PlanInputError(
            "compute_capability", f"expected MAJOR.MINOR such as '12.0', got {compute_capability!r}"
        )
    major = int(match.group(1))
    if major == 10:
        # Up to 0.17.1 platforms/cuda.py set block 64 for FLASHINFER_MLA; from 0.18.0 the platform takes the
        # backend's smallest supported size, 32 of its [32, 64] (get_preferred_block_size; same in 0.33.0).
        block = 32 if version >= PREFERRED_BLOCK_SIZE_SINCE else 64
        return {"backend": "FLASHINFER_MLA", "fp8_kv": True, "block_size": block, "reason": "SM 10.x"}
    if major == 9:
        # FLASH_ATTN_MLA is picked first on Hopper (seen on H200 with vLLM 0.22) but has no FP8 cache;
        # an FP8 cache moves to FLASHMLA (block 64).
        return {
            "backend": "FLASH_ATTN_MLA",
            "fp8_kv": True,
            "fp8_backend": "FLASHMLA",
            "block_size": DEFAULT_BLOCK_SIZE,
            "fp8_block_size": 64,
            "reason": "SM 9.x: FLASH_ATTN_MLA for a 16-bit cache, FLASHMLA for FP8",
        }
    fp8 = version >= TRITON_MLA_FP8_SINCE
    reason = f"SM {compute_capability}: TRITON_MLA is the only MLA decode backend; " + (
        "it takes an FP8 cache (vLLM PR #34597)"
        if fp8
        else f"FP8 KV needs vLLM PR #34597 (in {'.'.join(map(str, TRITON_MLA_FP8_SINCE))} and later)"
    )
    return {"backend": "TRITON_MLA", "fp8_kv": fp8, "block_size": DEFAULT_BLOCK_SIZE, "reason": reason}


# Sparse MLA (DeepSeek's indexer: DeepSeek-V3.2, GLM-5): its own decode backends, KV blocks of 64
# (vllm 0.33.0 v1/attention/backends/mla/flashmla_sparse.py, flashinfer_mla_sparse.py; platforms/cuda.py
# priorities). SM 12.x has FLASHINFER_MLA_SPARSE_SM120 from 0.24.0 (absent from the 0.23.0 sdist).
SPARSE_MLA_SM120_SINCE = (0, 24, 0)
SPARSE_MLA_BLOCK = 64


def sparse_mla_backend(compute_capability: str | None, vllm_version: str) -> dict[str, Any]:
    """Sparse MLA decode backend vLLM picks on a GPU generation (None when it has none there)."""
    version = parse_version(vllm_version)
    major = int(str(compute_capability).split(".", maxsplit=1)[0]) if compute_capability else None
    if major is None:
        return {"backend": None, "fp8_kv": True, "block_size": SPARSE_MLA_BLOCK, "reason": "GPU unknown"}
    if major in (9, 10):
        return {
            "backend": "FLASHMLA_SPARSE",
            "fp8_kv": True,
            "block_size": SPARSE_MLA_BLOCK,
            "reason": f"SM {compute_capability}: sparse MLA on FLASHMLA_SPARSE or FlashInfer's sparse MLA",
        }
    if major == 12 and version >= SPARSE_MLA_SM120_SINCE:
        return {
            "backend": "FLASHINFER_MLA_SPARSE_SM120",
            "fp8_kv": True,
            "block_size": SPARSE_MLA_BLOCK,
            "reason": "SM 12.x: sparse MLA only on FLASHINFER_MLA_SPARSE_SM120 (index_topk 2048, bf16 model)",
        }
    return {
        "backend": None,
        "fp8_kv": True,
        "block_size": SPARSE_MLA_BLOCK,
        "reason": f"SM {compute_capability}: no sparse MLA backend in vLLM {vllm_version}",
    }


def _backend_block(backend: dict[str, Any] | None, kv_dtype: str) -> int:
    if not backend:
        return DEFAULT_BLOCK_SIZE
    if kv_dtype.startswith("fp8"):
        return backend.get("fp8_block_size", backend["block_size"])
    return backend["block_size"]


@dataclass(frozen=True)
class _LayoutSearch:
    """The plan_memory calls recommend_layout makes: every layout x DCP x KV dtype at one max_model_len."""

    hf_config: dict[str, Any]
    arch: dict[str, Any]
    layouts: list[tuple[int, int, int]]
    dtypes: list[str]
    backend: dict[str, Any] | None
    weights_gib_per_gpu: float | None
    plan_kwargs: dict[str, Any]

    def plans(self, length: int) -> list[dict[str, Any]]:
        found = []
        for tp, pp, dp in self.layouts:
            # Decode context parallel shards a dense MLA latent cache; sparse MLA is not planned with it.
            dcp_sizes = (
                _pow2_divisors(tp) if self.arch["use_mla"] and not self.arch.get("sparse_indexer") else [1]
            )
            for dcp in dcp_sizes:
                if check_divisibility(self.arch, tp=tp, pp=pp, dp=dp, ep=False, dcp=dcp):
                    continue
                for dtype in self.dtypes:
                    found.append(
                        plan_memory(
                            self.hf_config,
                            tensor_parallel_size=tp,
                            pipeline_parallel_size=pp,
                            data_parallel_size=dp,
                            decode_context_parallel_size=dcp,
                            kv_cache_dtype=dtype,
                            max_model_len=length,
                            weights_gib_per_gpu=self.weights_gib_per_gpu if pp == 1 else None,
                            block_size=_backend_block(self.backend, dtype),
                            **self.plan_kwargs,
                        )
                    )
        return found


def _mla_attention(
    arch: dict[str, Any],
    compute_capability: str | None,
    vllm_version: str,
    dtypes: list[str],
    notes: list[str],
) -> dict[str, Any] | None:
    """MLA models: the decode backend, with FP8 KV dropped from ``dtypes`` where it cannot take it."""
    if not arch["use_mla"]:
        return None
    if arch.get("sparse_indexer"):
        backend = sparse_mla_backend(compute_capability, vllm_version)
    else:
        backend = mla_backend(compute_capability, vllm_version)
    notes.append(
        f"attention backend {backend['backend']}: {backend['reason']}"
        if backend["backend"]
        else f"no attention backend: {backend['reason']}"
    )
    if not backend["fp8_kv"] and "fp8" in dtypes:
        dtypes.remove("fp8")
        notes.append("FP8 KV is not available on this backend/version: KV stays bfloat16")
    if compute_capability and str(compute_capability).startswith("12"):
        notes.append("SM 12.x: leave FlashInfer allreduce fusion, DeepGEMM and TRTLLM attention off")
    return backend if backend["backend"] else None


def _longest_fitting_len(candidates: list[dict[str, Any]]) -> int | None:
    """Largest max_model_len one request of which fits the KV blocks of some candidate (None: none has KV)."""
    usable = [p for p in candidates if p["kv_cache_gib_per_gpu"] > 0 and p["num_gpu_blocks"] > 0]
    if not usable:
        return None
    return max(
        max_model_len_that_fits(
            [{"kind": "full", "window": None, "block": p["block_size"]}],
            p["num_gpu_blocks"],
            dcp=p["layout"]["decode_context_parallel_size"],
            mnbt=p["max_num_batched_tokens"],
        )
        for p in usable
    )


def _search_with_auto_fit(
    search: _LayoutSearch, target: int, *, auto_fit: bool, model_max: int, notes: list[str]
) -> tuple[int, list[dict[str, Any]]]:
    """Plans at ``target``; with ``auto_fit``, like vLLM's max_model_len auto-fit, shorten the context to
    what the best layout holds when nothing fits. Returns the max_model_len used and the plans."""
    candidates = search.plans(target)
    if auto_fit and candidates and not any(p["fits"] for p in candidates):
        best_len = _longest_fitting_len(candidates)
        if best_len is not None:
            target = min(model_max, best_len // 1024 * 1024)
            if target >= 1024:
                notes.append(
                    f"the model's {model_max:,}-token context does not fit; max_model_len {target:,}"
                )
                candidates = search.plans(target)
    return target, candidates


def _layout_score(p: dict[str, Any], target_concurrency: float) -> tuple[Any, ...]:
    lay = p["layout"]
    # Fewest pipeline stages (PP adds bubbles); then room for target_concurrency requests of
    # max_model_len over all DP replicas; then the smallest model instance (fewer TP ranks, more
    # DP replicas: less communication per token); then the cheaper settings (16-bit cache, smaller
    # DCP: DCP adds an all-gather per decode step); then the most KV tokens over all replicas.
    # On several nodes a pipeline split has PP >= the node count, so a model one node holds without
    # PP always gets DP across the nodes.
    return (
        -lay["pipeline_parallel_size"],
        min(p["max_concurrency"] * lay["data_parallel_size"], target_concurrency),
        -lay["tensor_parallel_size"],
        p["kv_cache_dtype"] != "fp8",
        -lay["decode_context_parallel_size"],
        p["kv_cache_tokens_all_replicas"],
    )


def _no_fit_result(
    *,
    gpus: str,
    target: int,
    candidates: list[dict[str, Any]],
    skipped: list[str],
    notes: list[str],
    backend: dict[str, Any] | None,
) -> dict[str, Any]:
    """No layout fits: the closest one (most KV memory) and its reasons."""
    reasons = [f"no layout of {gpus} GPU(s) fits at max_model_len {target:,}"]
    if candidates:
        best_effort = max(candidates, key=lambda p: p["kv_cache_gib_per_gpu"])
        lay = best_effort["layout"]
        reasons.append(
            f"closest: TP {lay['tensor_parallel_size']} x PP {lay['pipeline_parallel_size']} x DP "
            f"{lay['data_parallel_size']}, KV {best_effort['kv_cache_dtype']}"
        )
        reasons.extend(best_effort["reasons"])
    else:
        best_effort = None
    reasons.extend(skipped)
    return {
        "fits": False,
        "reasons": reasons,
        "notes": notes,
        "attention_backend": backend["backend"] if backend else None,
        "max_model_len": target,
        "plan": best_effort,
        "candidates": _candidate_table(candidates),
        "skipped_layouts": skipped,
    }


def _fit_reasons(best: dict[str, Any], target: int) -> list[str]:
    """Why the chosen layout: weights and KV per GPU, tokens and concurrency, DP replicas, DCP."""
    lay = best["layout"]
    reasons = [
        f"TP {lay['tensor_parallel_size']} x PP {lay['pipeline_parallel_size']} x DP "
        f"{lay['data_parallel_size']}: {best['weights_gib_per_gpu']:.1f} GiB weights per GPU, "
        f"{best['kv_cache_gib_per_gpu']:.1f} GiB KV",
        f"{best['kv_cache_tokens']:,} KV tokens per replica with {best['kv_cache_dtype']} KV; "
        f"{best['max_concurrency']}x requests of {target:,} tokens per replica",
    ]
    if lay["data_parallel_size"] > 1:
        reasons.append(
            f"the model fits {lay['tensor_parallel_size'] * lay['pipeline_parallel_size']} GPU(s): "
            f"{lay['data_parallel_size']} data-parallel replicas use the rest"
        )
    if lay["decode_context_parallel_size"] > 1:
        reasons.append(
            "decode context parallel shards the MLA latent cache over tokens instead of duplicating it on "
            f"every TP rank: x{lay['decode_context_parallel_size']} tokens"
        )
    return reasons


def _fit_result(
    best: dict[str, Any],
    *,
    arch: dict[str, Any],
    backend: dict[str, Any] | None,
    target: int,
    candidates: list[dict[str, Any]],
    skipped: list[str],
    notes: list[str],
) -> dict[str, Any]:
    """The chosen layout as vLLM flags, with the reasons, notes and the plan behind it."""
    lay = best["layout"]
    reasons = _fit_reasons(best, target)
    if lay["decode_context_parallel_size"] > 1 and best["kv_cache_dtype"] == "fp8" and arch["use_mla"]:
        notes.append("FP8 KV together with DCP on MLA needs vLLM PR #34795 in the installed build")
    return {
        "fits": True,
        "tensor_parallel_size": lay["tensor_parallel_size"],
        "pipeline_parallel_size": lay["pipeline_parallel_size"],
        "data_parallel_size": lay["data_parallel_size"],
        "decode_context_parallel_size": lay["decode_context_parallel_size"],
        "kv_cache_dtype": best["kv_cache_dtype"],
        "gpu_memory_utilization": lay["gpu_memory_utilization"],
        "max_model_len": target,
        "attention_backend": (
            backend.get("fp8_backend", backend["backend"])
            if backend and best["kv_cache_dtype"] == "fp8"
            else (backend["backend"] if backend else None)
        ),
        "reasons": reasons,
        "notes": notes,
        "plan": best,
        "candidates": _candidate_table(candidates),
        "skipped_layouts": skipped,
    }


def recommend_layout(
    hf_config: dict[str, Any],
    *,
    gpu_memory_gib: float,
    gpu_count: int,
    checkpoint_gib: float | None = None,
    weights_gib_per_gpu: float | None = None,
    compute_capability: str | None = None,
    vllm_version: str = DEFAULT_VLLM_VERSION,
    target_max_model_len: int | None = None,
    gpu_memory_utilization: float = 0.9,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    kv_cache_dtypes: list[str] | None = None,
    mm_encoder_tp_mode: str = "weights",
    interconnect: str = "nvlink",
    target_concurrency: float = 16.0,
    nodes: int = 1,
) -> dict[str, Any]:
    """Search TP/PP/DCP and KV dtype for the given GPUs; return the layout that fits with the reasons.

    ``gpu_count`` is the GPUs of one node; ``nodes`` identical nodes are planned with TP inside a node and
    PP or DP across nodes (nodes.py). Preference: no pipeline stages if possible, then room for
    ``target_concurrency`` requests of the target context, then the cheaper settings (16-bit KV, no or
    small DCP), then the most KV tokens.
    """
    target_concurrency = _positive_float("target_concurrency", target_concurrency)
    gpus = _positive_int("gpu_count", gpu_count)
    nodes = check_nodes(nodes)
    arch = normalize_architecture(hf_config)
    notes: list[str] = []
    dtypes = list(kv_cache_dtypes or ["bfloat16", "fp8"])
    backend = _mla_attention(arch, compute_capability, vllm_version, dtypes, notes)
    model_max = int(arch["max_position_embeddings"] or 8192)
    layouts, skipped = candidate_layouts(arch, gpus, nodes)
    search = _LayoutSearch(
        hf_config=hf_config,
        arch=arch,
        layouts=layouts,
        dtypes=dtypes,
        backend=backend,
        weights_gib_per_gpu=weights_gib_per_gpu,
        plan_kwargs={
            "gpu_memory_gib": gpu_memory_gib,
            "gpu_memory_utilization": gpu_memory_utilization,
            "max_num_seqs": max_num_seqs,
            "max_num_batched_tokens": max_num_batched_tokens,
            "checkpoint_gib": checkpoint_gib,
            "vllm_version": vllm_version,
            "gpu_count": gpus * nodes,
            "mm_encoder_tp_mode": mm_encoder_tp_mode,
            "interconnect": interconnect,
        },
    )
    target, candidates = _search_with_auto_fit(
        search,
        target_max_model_len or model_max,
        auto_fit=target_max_model_len is None,
        model_max=model_max,
        notes=notes,
    )
    fitting = [p for p in candidates if p["fits"]]
    if not fitting:
        result = _no_fit_result(
            gpus=str(gpus) if nodes == 1 else f"{nodes} x {gpus}",
            target=target,
            candidates=candidates,
            skipped=skipped,
            notes=notes,
            backend=backend,
        )
    else:
        best = max(fitting, key=lambda p: _layout_score(p, target_concurrency))
        result = _fit_result(
            best,
            arch=arch,
            backend=backend,
            target=target,
            candidates=candidates,
            skipped=skipped,
            notes=notes,
        )
        if nodes > 1:
            result["multinode"] = _multinode(
                best,
                candidates,
                nodes=nodes,
                interconnect=interconnect,
                target_concurrency=target_concurrency,
            )
            result["reasons"].append(f"{nodes} nodes x {gpus} GPUs: {result['multinode']['why']}")
    return result | {"nnodes": nodes, "gpus_per_node": gpus}


def _multinode(
    best: dict[str, Any],
    candidates: list[dict[str, Any]],
    *,
    nodes: int,
    interconnect: str,
    target_concurrency: float,
) -> dict[str, Any]:
    """The chosen layout's node split and why, in the per-GPU figures of the plans behind it."""
    lay = best["layout"]
    tp, pp, dp = lay["tensor_parallel_size"], lay["pipeline_parallel_size"], lay["data_parallel_size"]
    split = node_split(tp=tp, pp=pp, dp=dp, nodes=nodes)
    # Instances inside one node (replicas whole on a node): the widest TP without PP, as one node would
    # run the model, and the best one that fits (with PP inside the node, if any does).
    one_node = [p for p in candidates if p["layout"]["data_parallel_size"] % nodes == 0]
    flat = [p for p in one_node if p["layout"]["pipeline_parallel_size"] == 1] or one_node
    alone = max(
        flat, key=lambda p: (p["layout"]["tensor_parallel_size"], p["kv_cache_gib_per_gpu"]), default=None
    )
    shortfall = one_node_shortfall(alone)
    inside = [p for p in one_node if p["fits"] and p is not alone]
    if inside:
        shortfall += "; " + one_node_shortfall(
            max(inside, key=lambda p: _layout_score(p, target_concurrency))
        )
    why = multinode_why(
        split,
        tp=tp,
        pp=pp,
        dp=dp,
        interconnect=interconnect,
        lead=shortfall if split["split"] == "pipeline" else None,
        weights_gib=best["weights_gib_per_gpu"],
    )
    return split | {"why": why}


def candidate_layouts(
    arch: dict[str, Any], gpus: int, nodes: int = 1
) -> tuple[list[tuple[int, int, int]], list[str]]:
    """(TP, PP, DP) splits of the GPUs vLLM would start, and why the others are left out.

    TP and PP are powers of two; DP takes the GPUs one TP x PP instance leaves. A split vLLM refuses
    (check_divisibility: heads, KV heads, intermediate sizes, more stages than layers) is skipped. On
    several nodes (``gpus`` per node) the splits cover all their GPUs, and one with TP across nodes or
    that neither PP nor DP spreads over the nodes is skipped too (node_problem).
    """
    valid: list[tuple[int, int, int]] = []
    skipped: list[str] = []
    total = gpus * nodes
    for tp in _pow2_divisors(total):
        for pp in _pow2_divisors(total // tp):
            dp = total // (tp * pp)
            placement = node_problem(tp=tp, pp=pp, dp=dp, nodes=nodes, gpus_per_node=gpus)
            problems = [placement] if placement else []
            problems += [x["message"] for x in check_divisibility(arch, tp=tp, pp=pp, dp=dp, ep=False, dcp=1)]
            if problems:
                skipped.append(f"TP {tp} x PP {pp} x DP {dp} skipped: " + "; ".join(problems))
            else:
                valid.append((tp, pp, dp))
    return valid, skipped


def _candidate_table(candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "tp": p["layout"]["tensor_parallel_size"],
            "pp": p["layout"]["pipeline_parallel_size"],
            "dp": p["layout"]["data_parallel_size"],
            "dcp": p["layout"]["decode_context_parallel_size"],
            "kv_cache_dtype": p["kv_cache_dtype"],
            "kv_cache_tokens": p["kv_cache_tokens"],
            "max_concurrency": p["max_concurrency"],
            "fits": p["fits"],
        }
        for p in candidates
    ]
