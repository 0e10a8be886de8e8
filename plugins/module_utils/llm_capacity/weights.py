"""Weights per GPU: parameter inventory by sharding rule, bytes per parameter, pipeline-stage split."""

from __future__ import annotations

import fnmatch
import functools
import re
from typing import Any

from ._common import GIB, VOCAB_PADDING, PlanInputError, _cdiv
from .config import quantization_scheme


def _module_ignored(name: str, patterns: list[str]) -> bool:
    return _module_ignored_cached(name, tuple(str(p) for p in patterns))


@functools.lru_cache(maxsize=65536)
def _module_ignored_cached(name: str, patterns: tuple[str, ...]) -> bool:
    candidates = (name, "language_model." + name, "model.language_model." + name.removeprefix("model."))
    for raw in patterns:
        pattern = str(raw)
        for cand in candidates:
            if pattern.startswith("re:"):
                if re.search(pattern[3:], cand):
                    return True
            elif (
                cand == pattern
                or cand.startswith(pattern + ".")
                or fnmatch.fnmatchcase(cand, pattern)
                or fnmatch.fnmatchcase(cand, pattern + ".*")
                or fnmatch.fnmatchcase(cand, "*." + pattern)
            ):
                return True
    return False


def pp_partition(num_layers: int, pp: int) -> list[int]:
    """Layers per pipeline stage as vllm/distributed/utils.py get_pp_indices splits them."""
    if num_layers < pp:
        raise PlanInputError("pipeline_parallel_size", f"{pp} stages for only {num_layers} layers")
    per = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):  # the remainder goes to the stages before the last
        per[-i] += 1
    return per


def _stage_of_layers(num_layers: int, pp: int) -> list[int]:
    stages = []
    for stage, count in enumerate(pp_partition(num_layers, pp)):
        stages.extend([stage] * count)
    return stages


def parameter_inventory(arch: dict[str, Any]) -> list[dict[str, Any]]:
    """Weight tensors by sharding rule: tp, kv (GQA k/v), vocab, expert, replicated."""
    h = arch["hidden_size"]
    inv: list[dict[str, Any]] = []

    def add(name: str, params: float, rule: str, where: Any, quant: bool = True) -> None:
        inv.append({"name": name, "params": float(params), "rule": rule, "where": where, "quant": quant})

    add("model.embed_tokens", arch["vocab_size"] * h, "vocab", "first", quant=False)
    heads, kvh, hd = arch["num_attention_heads"], arch["num_key_value_heads"], arch["head_dim"]
    for i in range(arch["num_hidden_layers"]):
        p = f"model.layers.{i}"
        add(f"{p}.input_layernorm", 2 * h, "replicated", i, quant=False)
        state = arch.get("linear_state")
        if arch["layer_kinds"][i] == "linear" and state:
            if state["type"] == "gdn":  # in_proj_qkvz + in_proj_ba, out_proj
                kd, vd = state["k_heads"] * state["k_dim"], state["v_heads"] * state["v_dim"]
                add(f"{p}.linear_attn.in_proj", h * (2 * kd + 2 * vd + 2 * state["v_heads"]), "tp", i)
                add(f"{p}.linear_attn.out_proj", vd * h, "tp", i)
            else:  # Mamba2 in_proj (z, x, B, C, dt) and out_proj
                inner = state["heads"] * state["head_dim"]
                width = 2 * inner + 2 * state["groups"] * state["state"] + state["heads"]
                add(f"{p}.mixer.in_proj", h * width, "tp", i)
                add(f"{p}.mixer.out_proj", inner * h, "tp", i)
        elif arch["layer_kinds"][i] == "none":
            pass
        elif arch["use_mla"]:
            nope, rope, v = arch["qk_nope_head_dim"], arch["qk_rope_head_dim"], arch["v_head_dim"]
            q_lora = arch["q_lora_rank"]
            if q_lora:
                add(f"{p}.self_attn.q_a_proj", h * q_lora, "replicated", i)
                add(f"{p}.self_attn.q_b_proj", q_lora * heads * (nope + rope), "tp", i)
            else:
                add(f"{p}.self_attn.q_proj", h * heads * (nope + rope), "tp", i)
            add(f"{p}.self_attn.kv_a_proj_with_mqa", h * (arch["kv_lora_rank"] + rope), "replicated", i)
            add(f"{p}.self_attn.kv_b_proj", arch["kv_lora_rank"] * heads * (nope + v), "tp", i)
            add(f"{p}.self_attn.o_proj", heads * v * h, "tp", i)
            if arch["sparse_indexer"]:
                idx = arch["index_head_dim"] * arch["index_n_heads"]
                add(
                    f"{p}.self_attn.indexer",
                    (q_lora or h) * idx + h * (arch["index_head_dim"] + 64),
                    "replicated",
                    i,
                )
        else:
            add(f"{p}.self_attn.q_proj", h * heads * hd, "tp", i)
            add(f"{p}.self_attn.k_proj", h * kvh * hd, "kv", i)
            add(f"{p}.self_attn.v_proj", h * kvh * hd, "kv", i)
            add(f"{p}.self_attn.o_proj", heads * hd * h, "tp", i)
        if arch["moe_layers"][i]:
            e, mi = arch["num_experts"], arch["moe_intermediate_size"]
            add(f"{p}.mlp.gate", h * e, "replicated", i, quant=False)
            add(f"{p}.mlp.experts", e * 3 * h * mi, "expert", i)
            if arch["shared_expert_intermediate_size"]:
                add(f"{p}.mlp.shared_experts", 3 * h * arch["shared_expert_intermediate_size"], "tp", i)
        elif arch["intermediate_size"]:
            add(f"{p}.mlp", 3 * h * arch["intermediate_size"], "tp", i)
    add("model.norm", h, "replicated", "last", quant=False)
    add("lm_head", arch["vocab_size"] * h, "vocab", "last", quant=False)
    if arch["vision_params"]:
        add("vision_tower", arch["vision_params"], "vision", "first", quant=False)
    return inv


def _bytes_per_param(entry: dict[str, Any], scheme: dict[str, Any]) -> float:
    if not entry["quant"] or scheme["method"] == "none":
        return scheme["base"]
    if _module_ignored(entry["name"], scheme["ignore"]):
        return scheme["base"]
    return scheme["bytes_per_param"]


def estimate_weights(
    arch: dict[str, Any],
    *,
    tp: int,
    pp: int,
    dp: int,
    expert_parallel: bool,
    checkpoint_gib: float | None,
    mm_encoder_tp_mode: str = "weights",
    language_model_only: bool = False,
) -> dict[str, Any]:
    """Weight GiB on one GPU of each PP stage, from the config (scaled to the checkpoint if given)."""
    scheme = quantization_scheme(arch)
    inv = parameter_inventory(arch)
    stage_of = _stage_of_layers(arch["num_hidden_layers"], pp)
    padded_vocab = _cdiv(arch["vocab_size"], VOCAB_PADDING) * VOCAB_PADDING
    ep = tp * dp if expert_parallel else 1
    local_experts = _cdiv(arch["num_experts"], ep) if arch["num_experts"] else 0
    kvh = arch["num_key_value_heads"]
    total_bytes = 0.0
    per_stage = [0.0] * pp
    per_stage_replicated = [0.0] * pp
    for entry in inv:
        nbytes = entry["params"] * _bytes_per_param(entry, scheme)
        total_bytes += nbytes
        if entry["rule"] == "vision" and language_model_only:
            continue
        where = entry["where"]
        stages = [0] if where == "first" else [pp - 1] if where == "last" else [stage_of[where]]
        rule = entry["rule"]
        if rule == "tp":
            local = nbytes / tp
        elif rule == "kv":  # each rank holds max(1, kv_heads / tp) heads (replicated when tp > kv_heads)
            local = nbytes * max(1, kvh // tp) / kvh
        elif rule == "vocab":  # vocab padded to 64 then split over TP
            local = nbytes * _cdiv(padded_vocab, tp) / arch["vocab_size"]
        elif rule == "expert":
            local = nbytes * local_experts / arch["num_experts"] if expert_parallel else nbytes / tp
        elif rule == "vision":
            local = nbytes if mm_encoder_tp_mode == "data" else nbytes / tp
        else:
            local = nbytes
        for stage in stages:
            per_stage[stage] += local
            if rule in ("replicated",) or (rule == "vision" and mm_encoder_tp_mode == "data"):
                per_stage_replicated[stage] += local
    if arch["tie_word_embeddings"] and pp == 1:  # lm_head shares the embedding tensor
        head = next(e for e in inv if e["name"] == "lm_head")
        shared = head["params"] * scheme["base"] * _cdiv(padded_vocab, tp) / arch["vocab_size"]
        per_stage[pp - 1] -= shared
        total_bytes -= head["params"] * scheme["base"]
    scale = 1.0
    if checkpoint_gib is not None:
        # The checkpoint also carries MTP layers vLLM does not load without speculative decoding.
        mtp_bytes = arch["mtp_layers"] * total_bytes / max(arch["num_hidden_layers"], 1)
        scale = checkpoint_gib * GIB / (total_bytes + mtp_bytes)
    stages_gib = [round(b * scale / GIB, 3) for b in per_stage]
    return {
        "weights_gib_per_gpu_by_stage": stages_gib,
        "replicated_gib_per_gpu_by_stage": [round(b * scale / GIB, 3) for b in per_stage_replicated],
        "model_total_gib": round(total_bytes * scale / GIB, 3),
        "estimate_scale": round(scale, 4),
        "quantization": {k: v for k, v in scheme.items() if k != "ignore"},
        "source": "checkpoint_gib" if checkpoint_gib is not None else "config_estimate",
    }
