"""Layout constraints vLLM enforces at start-up (heads, KV heads, intermediate sizes, FP8 blocks, DCP)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

# One problem: {"field": the input at fault, "message": why vLLM refuses it}.
Problem = dict[str, str]


def _problem(field: str, message: str) -> Problem:
    return {"field": field, "message": message}


def _fp8_weight_block_n(arch: dict[str, Any]) -> int | None:
    qc = arch.get("quantization_config") or {}
    block = qc.get("weight_block_size")
    if str(qc.get("quant_method") or "").lower() == "fp8" and isinstance(block, list) and block:
        return int(block[0])
    return None


def _head_problems(arch: dict[str, Any], tp: int) -> Iterator[Problem]:
    """Attention heads and (GQA) KV heads must split evenly over the TP ranks."""
    heads, kvh = arch["num_attention_heads"], arch["num_key_value_heads"]
    if heads % tp:
        yield _problem(
            "tensor_parallel_size",
            f"num_attention_heads {heads} is not divisible by tensor_parallel_size {tp}",
        )
    if not arch["use_mla"]:
        if tp >= kvh and tp % kvh:
            yield _problem(
                "tensor_parallel_size",
                f"tensor_parallel_size {tp} is not a multiple of num_key_value_heads {kvh}",
            )
        if tp < kvh and kvh % tp:
            yield _problem(
                "tensor_parallel_size",
                f"num_key_value_heads {kvh} is not divisible by tensor_parallel_size {tp}",
            )


def _width_problems(arch: dict[str, Any], *, tp: int, pp: int, dp: int, ep: bool) -> Iterator[Problem]:
    """Pipeline stages vs layers, experts vs the EP size, MLP widths vs TP."""
    if arch["num_hidden_layers"] < pp:
        yield _problem(
            "pipeline_parallel_size",
            f"pipeline_parallel_size {pp} exceeds num_hidden_layers {arch['num_hidden_layers']}",
        )
    if arch["num_experts"]:
        inter = arch["moe_intermediate_size"]
        if ep:
            ep_size = tp * dp
            if arch["num_experts"] % ep_size:
                yield _problem(
                    "enable_expert_parallel",
                    f"num_experts {arch['num_experts']} is not divisible by the expert-parallel size "
                    f"{ep_size} (tensor_parallel_size x data_parallel_size)",
                )
        elif inter % tp:
            yield _problem(
                "tensor_parallel_size",
                f"moe_intermediate_size {inter} is not divisible by tensor_parallel_size {tp}",
            )
    if arch["intermediate_size"] and arch["intermediate_size"] % tp:
        yield _problem(
            "tensor_parallel_size",
            f"intermediate_size {arch['intermediate_size']} is not divisible by tensor_parallel_size {tp}",
        )


def _fp8_block_problems(arch: dict[str, Any], *, tp: int, ep: bool) -> Iterator[Problem]:
    """Block-FP8 checkpoints (e.g. DeepSeek-V3, Qwen3 FP8): each rank's slice of a column-parallel weight
    must be whole blocks (vllm/model_executor/layers/quantization/fp8.py validate_block_quant_shapes)."""
    block_n = _fp8_weight_block_n(arch)
    if not block_n:
        return
    widths = {"intermediate_size": arch["intermediate_size"]}
    if arch["num_experts"] and not ep:
        widths["moe_intermediate_size"] = arch["moe_intermediate_size"]
    for name, width in widths.items():
        if width and width % tp == 0 and (width // tp) % block_n:
            yield _problem(
                "tensor_parallel_size",
                f"{name} {width} / tensor_parallel_size {tp} = {width // tp} is not a multiple of "
                f"the FP8 weight block {block_n}",
            )


def _dcp_problems(arch: dict[str, Any], *, tp: int, dcp: int) -> Iterator[Problem]:
    """Decode context parallel: DCP groups inside the TP group, sharing KV heads; no windowed layers."""
    if dcp <= 1:
        return
    kvh = arch["num_key_value_heads"]
    if tp % dcp:
        yield _problem(
            "decode_context_parallel_size",
            f"tensor_parallel_size {tp} is not divisible by decode_context_parallel_size {dcp}",
        )
    elif not arch["use_mla"]:
        # Each DCP group must share the same KV heads: tp / kv_heads must be a multiple of dcp.
        replicas = max(tp // kvh, 1)
        if replicas % dcp:
            yield _problem(
                "decode_context_parallel_size",
                f"decode_context_parallel_size {dcp} needs tensor_parallel_size / num_key_value_heads "
                f"({tp}/{kvh}) to be a multiple of it",
            )
    if any(k in ("sliding", "chunked") for k in arch["layer_kinds"]):
        yield _problem(
            "decode_context_parallel_size",
            "decode context parallel does not support sliding-window / chunked attention",
        )


def check_divisibility(
    arch: dict[str, Any], *, tp: int, pp: int, dp: int, ep: bool, dcp: int
) -> list[dict[str, str]]:
    """Constraints vLLM enforces at start-up: each entry names the input at fault and why."""
    return [
        *_head_problems(arch, tp),
        *_width_problems(arch, tp=tp, pp=pp, dp=dp, ep=ep),
        *_fp8_block_problems(arch, tp=tp, ep=ep),
        *_dcp_problems(arch, tp=tp, dcp=dcp),
    ]
