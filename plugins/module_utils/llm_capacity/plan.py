"""The memory plan of one vLLM instance: inputs checked, weights, non-KV terms and KV budget per PP stage,
the KV cache that fits, and the verdict with its reasons."""

from __future__ import annotations

from typing import Any

from ._common import DEFAULT_BLOCK_SIZE, DEFAULT_VLLM_VERSION, GIB, _flag
from .checks import check_divisibility
from .kv import (
    REPORT_FROM_CONCURRENCY_SINCE,
    _group_layers,
    kv_capacity,
    kv_layer_specs,
    max_model_len_that_fits,
    resolve_kv_dtype,
)
from .non_kv import (
    cudagraph_subtracted,
    estimate_activation_gib,
    estimate_non_torch_gib,
    sampler_copies,
    stage_cudagraph_gib,
)
from .plan_inputs import Batch, PlanInputs, batch_limits, check_gpu_count, check_inputs, plan_architecture
from .weights import _stage_of_layers, estimate_weights


def _stage_weights(arch: dict[str, Any], inp: PlanInputs) -> tuple[list[float], dict[str, Any]]:
    """Weights GiB per GPU of each PP stage and where the figure comes from."""
    if inp.weights_gib_per_gpu is not None:
        return [float(inp.weights_gib_per_gpu)] * inp.pp, {"source": "weights_gib_per_gpu"}
    weights_info = estimate_weights(
        arch,
        tp=inp.tp,
        pp=inp.pp,
        dp=inp.dp,
        expert_parallel=inp.expert_parallel,
        checkpoint_gib=inp.checkpoint_gib,
        mm_encoder_tp_mode=inp.mm_encoder_tp_mode,
        language_model_only=inp.language_model_only,
    )
    return weights_info["weights_gib_per_gpu_by_stage"], weights_info


def _stage_budgets(
    arch: dict[str, Any],
    inp: PlanInputs,
    batch: Batch,
    *,
    architectures: list[str],
    weights_by_stage: list[float],
    stage_of: list[int],
) -> list[dict[str, Any]]:
    """Non-KV terms and the KV budget of one GPU of each PP stage (gpu_worker.determine_available_memory)."""
    applied = cudagraph_subtracted(inp.version, inp.enforce_eager)
    copies = sampler_copies(inp.version, batch.seqs, batch.mnbt)
    non_torch = estimate_non_torch_gib(tp=inp.tp, pp=inp.pp, interconnect=inp.interconnect)
    stages = []
    for s in range(inp.pp):
        stage_layers = [i for i, st in enumerate(stage_of) if st == s]
        act = estimate_activation_gib(
            arch,
            tp=inp.tp,
            stage=s,
            pp=inp.pp,
            expert_parallel=inp.expert_parallel,
            max_num_seqs=batch.seqs,
            mnbt=batch.mnbt,
            sampler_copies=copies,
        )
        graphs = stage_cudagraph_gib(
            arch,
            stage_layers,
            version=inp.version,
            architectures=architectures,
            enforce_eager=inp.enforce_eager,
            tp=inp.tp,
            ep=inp.expert_parallel,
            max_num_seqs=batch.seqs,
            mnbt=batch.mnbt,
        )
        if inp.kv_cache_memory_gib is not None:
            avail = float(inp.kv_cache_memory_gib)
        else:
            avail = inp.requested - weights_by_stage[s] - act - non_torch - (graphs if applied else 0.0)
        stages.append(
            {
                "stage": s,
                "layers": len(stage_layers),
                "weights_gib": round(weights_by_stage[s], 3),
                "activation_peak_gib": round(act, 3),
                "non_torch_gib": round(non_torch, 3),
                "cudagraph_gib": round(graphs, 3),
                "cudagraph_subtracted": applied,
                "kv_cache_gib": round(avail, 3),
            }
        )
    return stages


def _kv_cache(
    arch: dict[str, Any],
    inp: PlanInputs,
    batch: Batch,
    *,
    stages: list[dict[str, Any]],
    stage_of: list[int],
    kv_dtype: str,
    kv_bytes: float,
) -> dict[str, Any]:
    """KV groups and capacity over the stage budgets, the smallest budget and the limiting stage's
    bytes per token."""
    specs = kv_layer_specs(arch, tp=inp.tp, kv_dtype=kv_dtype, kv_bytes=kv_bytes)
    # Chunked local attention turns the hybrid manager off unless
    # VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE is set (vllm/config/vllm.py).
    hybrid = not inp.disable_hybrid_kv_cache_manager and "chunked" not in arch["layer_kinds"]
    groups = _group_layers(specs, hybrid, inp.block)
    memory = [max(st["kv_cache_gib"], 0.0) * GIB for st in stages]
    cap = kv_capacity(
        groups,
        memory,
        stage_of,
        dcp=inp.dcp,
        max_model_len=batch.model_len,
        max_num_batched_tokens=batch.mnbt,
        mamba_cache_mode=inp.mamba_cache_mode,
        report_from_concurrency=inp.version >= REPORT_FROM_CONCURRENCY_SINCE,
    )
    bytes_by_stage = [
        sum(sp["bytes_per_token"] for sp in specs if stage_of[sp["layer"]] == s) for s in range(inp.pp)
    ]
    limiting = min(range(inp.pp), key=lambda s: cap["num_blocks_by_stage"][s])
    return {
        "groups": groups,
        "cap": cap,
        "per_token": bytes_by_stage[limiting],
        "kv_gib": min(st["kv_cache_gib"] for st in stages),
    }


def _verdict(
    arch: dict[str, Any],
    inp: PlanInputs,
    batch: Batch,
    kv: dict[str, Any],
    *,
    max_weights: float,
    kv_dtype: str,
    reasons: list[str],
    warnings: list[str],
) -> None:
    """Append why the plan does not fit (weights, no KV room, one request too long) and what to watch."""
    cap, kv_gib, model_len = kv["cap"], kv["kv_gib"], batch.model_len
    if max_weights >= inp.requested:
        reasons.append(
            f"weights {max_weights:.2f} GiB per GPU exceed gpu_memory_utilization x memory "
            f"({inp.util} x {inp.gpu_memory_gib} = {inp.requested:.2f} GiB)"
        )
    if kv_gib <= 0:
        reasons.append(
            f"no memory left for the KV cache ({kv_gib:.2f} GiB): raise gpu_memory_utilization, "
            "use more GPUs or a smaller quantization"
        )
    elif cap["blocks_per_request"] > cap["num_blocks"]:
        fit_len = max_model_len_that_fits(
            kv["groups"],
            cap["num_blocks"],
            dcp=inp.dcp,
            mnbt=batch.mnbt,
            mamba_cache_mode=inp.mamba_cache_mode,
        )
        reasons.append(
            f"one request of max_model_len {model_len} needs {cap['blocks_per_request']} KV blocks but only "
            f"{cap['num_blocks']} fit; the largest max_model_len that fits is {fit_len}"
        )
    if cap["max_concurrency"] and cap["max_concurrency"] < batch.seqs and not reasons:
        warnings.append(
            f"at most {cap['max_concurrency']} requests of {model_len} tokens fit at once "
            f"(max_num_seqs {batch.seqs}); longer queues or preemption under full load"
        )
    if kv_dtype == "fp8" and arch["use_mla"]:
        warnings.append("FP8 MLA cache needs an attention backend with FP8 support (see llm_recommend)")


def _explicit_budget_check(inp: PlanInputs, stages: list[dict[str, Any]], reasons: list[str]) -> None:
    """An explicit KV budget bypasses gpu_memory_utilization: it must still fit the GPU beside the rest."""
    if inp.kv_cache_memory_gib is None:
        return
    for st in stages:
        graphs = st["cudagraph_gib"] if st["cudagraph_subtracted"] else 0.0
        rest = st["weights_gib"] + st["activation_peak_gib"] + st["non_torch_gib"] + graphs
        total = rest + st["kv_cache_gib"]
        if total > inp.gpu_memory_gib:
            reasons.append(
                f"kv_cache_memory_gib {inp.kv_cache_memory_gib} plus weights {st['weights_gib']}, "
                f"activations {st['activation_peak_gib']}, non-torch {st['non_torch_gib']} and "
                f"CUDA graphs {graphs} GiB is {total:.2f} GiB, more than the GPU's {inp.gpu_memory_gib} GiB "
                f"(stage {st['stage']})"
            )
            return


def _layout_summary(inp: PlanInputs) -> dict[str, Any]:
    return {
        "tensor_parallel_size": inp.tp,
        "pipeline_parallel_size": inp.pp,
        "data_parallel_size": inp.dp,
        "enable_expert_parallel": bool(inp.expert_parallel),
        "decode_context_parallel_size": inp.dcp,
        "gpus": inp.world,
        "gpu_memory_gib": inp.gpu_memory_gib,
        "gpu_memory_utilization": inp.util,
        "interconnect": inp.interconnect,
        "vllm_version": ".".join(map(str, inp.version)),
    }


def _architecture_summary(arch: dict[str, Any]) -> dict[str, Any]:
    return {
        k: v
        for k, v in arch.items()
        if k not in ("quantization_config", "warnings", "moe_layers", "layer_kinds", "runtime_quantization")
    } | {
        "attention_layers": {k: arch["layer_kinds"].count(k) for k in sorted(set(arch["layer_kinds"]))},
        "moe_layer_count": sum(arch["moe_layers"]),
    }


def _plan_result(
    arch: dict[str, Any],
    inp: PlanInputs,
    batch: Batch,
    kv: dict[str, Any],
    *,
    kv_dtype: str,
    stages: list[dict[str, Any]],
    weights_info: dict[str, Any],
    max_weights: float,
    reasons: list[str],
    warnings: list[str],
    input_errors: list[dict[str, str]],
) -> dict[str, Any]:
    """plan_memory's answer (docs/planner.md describes every key)."""
    cap = kv["cap"]
    return {
        "fits": not reasons,
        "reasons": reasons,
        "input_errors": input_errors,
        "warnings": warnings,
        "weights_gib_per_gpu": round(max_weights, 3),
        "kv_cache_gib_per_gpu": round(kv["kv_gib"], 3),
        "kv_cache_dtype": kv_dtype,
        "kv_bytes_per_token": round(kv["per_token"] / inp.dcp, 2),
        "kv_bytes_per_token_per_rank": kv["per_token"],
        "kv_cache_tokens": cap["kv_cache_tokens"],
        "kv_cache_tokens_all_replicas": cap["kv_cache_tokens"] * inp.dp,
        "max_concurrency": cap["max_concurrency"],
        "max_model_len": batch.model_len,
        "max_num_seqs": batch.seqs,
        "max_num_batched_tokens": batch.mnbt,
        "block_size": cap["block_size"],
        "num_gpu_blocks": cap["num_blocks"],
        "kv_cache_groups": cap["kv_cache_groups"],
        "blocks_per_request": cap["blocks_per_request"],
        "requested_memory_gib": round(inp.requested, 3),
        "activation_peak_gib": max(st["activation_peak_gib"] for st in stages),
        "non_torch_gib": stages[0]["non_torch_gib"],
        "cudagraph_gib": max(st["cudagraph_gib"] for st in stages),
        "cudagraph_subtracted": cudagraph_subtracted(inp.version, inp.enforce_eager),
        "kv_cache_memory_source": "kv_cache_memory_gib"
        if inp.kv_cache_memory_gib is not None
        else "profile_estimate",
        "stages": stages,
        "weights": weights_info,
        "layout": _layout_summary(inp),
        "architecture": _architecture_summary(arch),
    }


def plan_memory(
    hf_config: dict[str, Any],
    *,
    gpu_memory_gib: float,
    tensor_parallel_size: int = 1,
    pipeline_parallel_size: int = 1,
    data_parallel_size: int = 1,
    enable_expert_parallel: bool = False,
    decode_context_parallel_size: int = 1,
    gpu_memory_utilization: float = 0.9,
    kv_cache_dtype: str = "auto",
    max_model_len: int | None = None,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    weights_gib_per_gpu: float | None = None,
    checkpoint_gib: float | None = None,
    kv_cache_memory_gib: float | None = None,
    vllm_version: str = DEFAULT_VLLM_VERSION,
    gpu_count: int | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
    enforce_eager: bool = False,
    disable_hybrid_kv_cache_manager: bool = False,
    mm_encoder_tp_mode: str = "weights",
    language_model_only: bool = False,
    quantization: str | None = None,
    interconnect: str = "nvlink",
    mamba_cache_mode: str = "none",
    allow_long_max_model_len: bool = False,
) -> dict[str, Any]:
    """Memory plan of one vLLM instance on identical GPUs. See docs/planner.md for every key.

    Steps: check the inputs, normalise the config, batch limits and layout checks, weights per stage,
    non-KV terms and KV budget per stage, KV groups and capacity, then the verdict and its reasons.
    """
    inp = check_inputs(
        gpu_memory_gib=gpu_memory_gib,
        tensor_parallel_size=tensor_parallel_size,
        pipeline_parallel_size=pipeline_parallel_size,
        data_parallel_size=data_parallel_size,
        enable_expert_parallel=enable_expert_parallel,
        decode_context_parallel_size=decode_context_parallel_size,
        gpu_memory_utilization=gpu_memory_utilization,
        weights_gib_per_gpu=weights_gib_per_gpu,
        checkpoint_gib=checkpoint_gib,
        kv_cache_memory_gib=kv_cache_memory_gib,
        vllm_version=vllm_version,
        gpu_count=gpu_count,
        block_size=block_size,
        enforce_eager=enforce_eager,
        disable_hybrid_kv_cache_manager=disable_hybrid_kv_cache_manager,
        mm_encoder_tp_mode=mm_encoder_tp_mode,
        language_model_only=language_model_only,
        interconnect=interconnect,
        mamba_cache_mode=mamba_cache_mode,
    )
    arch = plan_architecture(hf_config, quantization)
    warnings = list(arch["warnings"])
    reasons: list[str] = []
    batch = batch_limits(
        arch,
        inp,
        max_num_seqs,
        max_num_batched_tokens,
        max_model_len,
        reasons=reasons,
        warnings=warnings,
        allow_long_max_model_len=_flag("allow_long_max_model_len", allow_long_max_model_len),
    )
    check_gpu_count(inp, reasons, warnings)
    input_errors = check_divisibility(
        arch, tp=inp.tp, pp=inp.pp, dp=inp.dp, ep=inp.expert_parallel, dcp=inp.dcp
    )
    reasons.extend(e["message"] for e in input_errors)
    kv_dtype, kv_bytes = resolve_kv_dtype(kv_cache_dtype, arch, warnings)
    weights_by_stage, weights_info = _stage_weights(arch, inp)
    stage_of = _stage_of_layers(arch["num_hidden_layers"], inp.pp)
    architectures = list(hf_config.get("architectures") or [])
    stages = _stage_budgets(
        arch, inp, batch, architectures=architectures, weights_by_stage=weights_by_stage, stage_of=stage_of
    )
    kv = _kv_cache(arch, inp, batch, stages=stages, stage_of=stage_of, kv_dtype=kv_dtype, kv_bytes=kv_bytes)
    max_weights = max(weights_by_stage)
    _explicit_budget_check(inp, stages, reasons)
    _verdict(
        arch, inp, batch, kv, max_weights=max_weights, kv_dtype=kv_dtype, reasons=reasons, warnings=warnings
    )
    return _plan_result(
        arch,
        inp,
        batch,
        kv,
        kv_dtype=kv_dtype,
        stages=stages,
        weights_info=weights_info,
        max_weights=max_weights,
        reasons=reasons,
        warnings=warnings,
        input_errors=input_errors,
    )
