"""Architecture normalisation: a published config.json reduced to what the planner needs, and its
quantization scheme (bytes per weight)."""

from __future__ import annotations

from typing import Any

from ._common import _DTYPE_BYTES, _STATE_DTYPE_BYTES, PlanInputError, _int_field

# Values transformers fills in when a published config.json leaves them out (configuration_*.py).
_MODEL_TYPE_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {
        "vocab_size": 262208,
        "sliding_window_pattern": 6,
        "max_position_embeddings": 131072,
        "tie_word_embeddings": True,
    },
    "gemma2": {"tie_word_embeddings": True},
    "gemma": {"tie_word_embeddings": True},
}


def _text_config(hf_config: dict[str, Any]) -> dict[str, Any]:
    text = dict(hf_config)
    for key in ("text_config", "language_config", "llm_config"):
        sub = hf_config.get(key)
        if isinstance(sub, dict) and sub.get("num_hidden_layers") is not None:
            text = {k: v for k, v in hf_config.items() if k not in ("text_config", "vision_config")}
            text.update(sub)
            break
    for key, value in _MODEL_TYPE_DEFAULTS.get(str(text.get("model_type", "")), {}).items():
        text.setdefault(key, value)
    return text


def _layer_kinds(text: dict[str, Any], layers: int, warnings: list[str]) -> tuple[list[str], int | None]:
    """Attention kind of every decoder layer and the window (sliding or chunk) length."""
    model_type = str(text.get("model_type", ""))
    window = text.get("sliding_window")
    layer_types = text.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        if len(layer_types) != layers:
            raise PlanInputError(
                "hf_config.layer_types", f"has {len(layer_types)} entries for {layers} layers"
            )
        mapping = {
            "full_attention": "full",
            "sliding_attention": "sliding",
            "chunked_attention": "chunked",
            "linear_attention": "linear",
            "mamba": "linear",
        }
        kinds = []
        for entry in layer_types:
            kind = mapping.get(str(entry))
            if kind is None:
                warnings.append(f"layer type {entry!r} is not modelled; counted as full attention")
                kind = "full"
            kinds.append(kind)
        if "sliding" in kinds and not window:
            raise PlanInputError("hf_config.sliding_window", "sliding layers listed but no window size")
        return kinds, window
    pattern = text.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        # Nemotron-H style: M = mamba, * = attention, - = MLP only (no cache).
        kinds = ["full" if c == "*" else "linear" if c == "M" else "none" for c in pattern]
        return kinds, None
    interval = text.get("full_attention_interval")
    if isinstance(interval, int) and interval > 0:  # Qwen3-Next: 3 linear-attention layers per full one
        return ["full" if (i + 1) % interval == 0 else "linear" for i in range(layers)], None
    chunk = text.get("attention_chunk_size")
    if chunk and model_type.startswith("llama4"):
        nope = text.get("no_rope_layers") or []
        if len(nope) == layers:
            uses_rope = [bool(x) for x in nope]
        else:  # transformers' default: every 4th layer is a NoPE (global) layer
            step = int(text.get("no_rope_layer_interval") or 4)
            uses_rope = [(i + 1) % step != 0 for i in range(layers)]
        return ["chunked" if rope else "full" for rope in uses_rope], int(chunk)
    pattern_n = text.get("sliding_window_pattern")
    if window and isinstance(pattern_n, int) and pattern_n > 1:  # Gemma 3: 5 local then 1 global
        return ["full" if (i + 1) % pattern_n == 0 else "sliding" for i in range(layers)], window
    if window and model_type == "gemma2":  # vLLM gemma2.py: even layers slide
        return ["sliding" if i % 2 == 0 else "full" for i in range(layers)], window
    if window and text.get("use_sliding_window", True) is not False:
        max_window_layers = text.get("max_window_layers")
        if model_type.startswith("qwen") and isinstance(max_window_layers, int):
            return ["sliding" if i >= max_window_layers else "full" for i in range(layers)], window
        return ["sliding"] * layers, window
    return ["full"] * layers, None


def _linear_state(text: dict[str, Any]) -> dict[str, Any] | None:
    """Shape of a Gated DeltaNet (linear_*) or Mamba2 (mamba_* / ssm_*) layer's recurrent state."""
    if text.get("linear_num_value_heads"):
        return {
            "type": "gdn",
            "k_heads": int(text.get("linear_num_key_heads") or text["linear_num_value_heads"]),
            "k_dim": int(text.get("linear_key_head_dim") or 128),
            "v_heads": int(text["linear_num_value_heads"]),
            "v_dim": int(text.get("linear_value_head_dim") or 128),
            "kernel": int(text.get("linear_conv_kernel_dim") or 4),
            "ssm_bytes": _STATE_DTYPE_BYTES.get(str(text.get("mamba_ssm_dtype") or "")),
        }
    if text.get("mamba_num_heads") and text.get("ssm_state_size"):
        return {
            "type": "mamba2",
            "heads": int(text["mamba_num_heads"]),
            "head_dim": int(text.get("mamba_head_dim") or 64),
            "state": int(text["ssm_state_size"]),
            "groups": int(text.get("n_groups") or text.get("mamba_n_groups") or 1),
            "kernel": int(text.get("conv_kernel") or text.get("mamba_d_conv") or 4),
            "ssm_bytes": _STATE_DTYPE_BYTES.get(str(text.get("mamba_ssm_dtype") or "")),
        }
    return None


def _derived_max_len(text: dict[str, Any]) -> int | None:
    """Default max_model_len. vllm/config/model.py: YaRN scaling gives original x factor."""
    length = text.get("max_position_embeddings")
    rope = text.get("rope_scaling") or text.get("rope_parameters")
    if isinstance(rope, dict) and (rope.get("rope_type") or rope.get("type")) == "yarn":
        original, factor = rope.get("original_max_position_embeddings"), rope.get("factor")
        if original and factor:
            return max(int(original * factor), int(length or 0))
    return int(length) if length else None


def _moe_layers(text: dict[str, Any], layers: int, experts: int) -> list[bool]:
    if not experts:
        return [False] * layers
    if isinstance(text.get("moe_layers"), list) and text["moe_layers"]:
        chosen = {int(i) for i in text["moe_layers"]}
        return [i in chosen for i in range(layers)]
    first_dense = int(text.get("first_k_dense_replace") or 0)
    freq = int(text.get("moe_layer_freq") or 1)
    step = int(text.get("decoder_sparse_step") or text.get("interleave_moe_layer_step") or 1)
    mlp_only = {int(i) for i in (text.get("mlp_only_layers") or [])}
    flags = []
    for i in range(layers):
        moe = i >= first_dense and (i - first_dense) % freq == 0 and (i + 1) % step == 0
        flags.append(moe and i not in mlp_only)
    return flags


def _vision_params(hf_config: dict[str, Any], hidden: int) -> int:
    vision = hf_config.get("vision_config")
    if not isinstance(vision, dict):
        return 0
    h = vision.get("hidden_size") or vision.get("vt_hidden_size") or vision.get("embed_dim")
    n = vision.get("num_hidden_layers") or vision.get("vt_num_hidden_layers") or vision.get("depth")
    inter = vision.get("intermediate_size") or vision.get("vt_intermediate_size") or (4 * (h or 0))
    if not h or not n:
        return 0
    # Per ViT block: qkv + out projections (4 h^2) and a two-matrix MLP; plus a projector into the LM
    # (merged patches of 4 x h to the text hidden size).
    return int(n) * (4 * int(h) * int(h) + 2 * int(h) * int(inter)) + 4 * int(h) * hidden


def normalize_architecture(hf_config: dict[str, Any]) -> dict[str, Any]:
    """Reduce a published config.json to the values the planner needs."""
    if not isinstance(hf_config, dict) or not hf_config:
        raise PlanInputError("hf_config", "expected the model's config.json as a non-empty mapping")
    text = _text_config(hf_config)
    warnings: list[str] = []
    hidden = _int_field(text, "hidden_size")
    layers = _int_field(text, "num_hidden_layers")
    heads = _int_field(text, "num_attention_heads")
    vocab = _int_field(text, "vocab_size")
    if not hidden or not layers or not heads or not vocab:
        raise PlanInputError("hf_config", "hidden_size, num_hidden_layers, heads and vocab_size must be > 0")
    kv_heads = _int_field(text, "num_key_value_heads", required=False, default=heads) or heads
    head_dim = _int_field(text, "head_dim", required=False, default=None) or hidden // heads
    kv_lora = text.get("kv_lora_rank")
    mla = isinstance(kv_lora, int) and kv_lora > 0
    experts = 0
    for key in ("n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts"):
        if isinstance(text.get(key), int) and text[key] > 0:
            experts = int(text[key])
            break
    top_k = int(text.get("num_experts_per_tok") or text.get("experts_per_token") or text.get("moe_topk") or 0)
    intermediate = _int_field(text, "intermediate_size", required=False, default=0)
    moe_intermediate = _int_field(text, "moe_intermediate_size", required=False, default=0) or intermediate
    dense_intermediate = _int_field(text, "intermediate_size_mlp", required=False, default=0) or intermediate
    shared_intermediate = 0
    if experts:
        if text.get("n_shared_experts"):
            shared_intermediate = int(text["n_shared_experts"]) * moe_intermediate
        elif text.get("shared_expert_intermediate_size"):
            shared_intermediate = int(text["shared_expert_intermediate_size"])
        elif str(text.get("model_type", "")).startswith("llama4"):
            shared_intermediate = intermediate  # one shared expert of the expert width
    kinds, window = _layer_kinds(text, layers, warnings)
    linear_state = _linear_state(text)
    if "linear" in kinds and linear_state is None:
        warnings.append(
            "linear-attention / mamba layers of an unknown kind: their per-sequence state is not counted"
        )
    dtype_name = str(text.get("torch_dtype") or text.get("dtype") or "bfloat16")
    quant = text.get("quantization_config") or hf_config.get("quantization_config")
    arch = {
        "model_type": str(hf_config.get("model_type") or text.get("model_type") or ""),
        "architectures": list(hf_config.get("architectures") or text.get("architectures") or []),
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "vocab_size": vocab,
        "intermediate_size": dense_intermediate,
        "max_position_embeddings": _derived_max_len(text),
        "tie_word_embeddings": bool(text.get("tie_word_embeddings", hf_config.get("tie_word_embeddings"))),
        "dtype": dtype_name,
        "dtype_bytes": _DTYPE_BYTES.get(dtype_name, 2),
        "use_mla": mla,
        "kv_lora_rank": int(kv_lora) if mla else None,
        "qk_rope_head_dim": int(text.get("qk_rope_head_dim") or 64) if mla else None,
        "qk_nope_head_dim": int(text.get("qk_nope_head_dim") or 128) if mla else None,
        "v_head_dim": int(text.get("v_head_dim") or 128) if mla else None,
        "q_lora_rank": text.get("q_lora_rank") if mla else None,
        "sparse_indexer": mla and text.get("index_topk") is not None,
        "index_head_dim": int(text.get("index_head_dim") or 128),
        "index_n_heads": int(text.get("index_n_heads") or 64),
        "num_experts": experts,
        "num_experts_per_tok": top_k,
        "moe_intermediate_size": moe_intermediate if experts else 0,
        "shared_expert_intermediate_size": shared_intermediate,
        "moe_layers": _moe_layers(text, layers, experts),
        "mtp_layers": int(text.get("num_nextn_predict_layers") or 0),
        "layer_kinds": kinds,
        "window": window,
        "vision_params": _vision_params(hf_config, hidden),
        "linear_state": linear_state if "linear" in kinds else None,
        "quantization_config": quant if isinstance(quant, dict) else None,
        "warnings": warnings,
    }
    return arch


# ----------------------------------------------------------------------------------------------
# Quantization -> bytes per parameter
# ----------------------------------------------------------------------------------------------


def quantization_scheme(arch: dict[str, Any]) -> dict[str, Any]:
    """Bytes per weight of quantized linear layers, the modules left unquantized, checkpoint KV dtype."""
    qc = arch.get("quantization_config") or {}
    if not qc and arch.get("runtime_quantization"):  # vLLM --quantization on an unquantized checkpoint
        qc = {"quant_method": arch["runtime_quantization"]}
    base = float(arch["dtype_bytes"])
    method = str(qc.get("quant_method") or qc.get("quantization", {}).get("quant_algo") or "none").lower()
    inner = qc.get("quantization") if isinstance(qc.get("quantization"), dict) else qc
    ignore = list(
        qc.get("ignore")
        or qc.get("exclude_modules")
        or inner.get("exclude_modules")
        or qc.get("modules_to_not_convert")
        or qc.get("ignored_layers")
        or []
    )
    kv = None
    bpp = base
    name = method
    if method in ("none", ""):
        name = "none"
    elif method == "fp8":  # e.g. DeepSeek-V3 block FP8: 1 byte + one fp32 scale per 128x128 block
        bpp = 1.0 + 4.0 / (128 * 128)
    elif method in ("modelopt", "modelopt_fp4", "nvfp4", "fp8_modelopt"):
        algo = str(inner.get("quant_algo") or "").upper()
        if "FP4" in algo:  # 4-bit E2M1 + one FP8 E4M3 scale per 16 weights
            bpp, name = 0.5 + 1.0 / 16, "nvfp4"
        elif "FP8" in algo:
            bpp, name = 1.0, "fp8"
        elif "INT4" in algo or "W4A" in algo:
            bpp, name = 0.5 + 2.0 / 128, "int4"
        if str(inner.get("kv_cache_quant_algo") or "").upper().startswith("FP8"):
            kv = "fp8"
    elif method == "compressed-tensors":
        groups = qc.get("config_groups") or {}
        weights = {}
        for group in groups.values():
            if isinstance(group, dict) and isinstance(group.get("weights"), dict):
                weights = group["weights"]
                break
        bits = int(weights.get("num_bits") or 16)
        wtype = str(weights.get("type") or "int")
        fmt = str(qc.get("format") or "")
        gsize = weights.get("group_size")
        if bits == 4 and (wtype == "float" or "nvfp4" in fmt):
            bpp, name = 0.5 + 1.0 / 16, "nvfp4"
        elif bits < 16:
            scale = 2.0 / int(gsize) if gsize else 0.0
            bpp, name = bits / 8.0 + scale, f"{wtype}{bits}"
        kv_scheme = qc.get("kv_cache_scheme")
        if isinstance(kv_scheme, dict) and int(kv_scheme.get("num_bits") or 16) == 8:
            kv = "fp8"
    elif method == "mxfp4":  # 4-bit E2M1 + one E8M0 scale per 32 weights
        bpp = 0.5 + 1.0 / 32
    elif method in ("gptq", "awq", "gptq_marlin", "awq_marlin"):
        bits = int(qc.get("bits") or qc.get("w_bit") or 4)
        gsize = int(qc.get("group_size") or qc.get("q_group_size") or 128)
        bpp = bits / 8.0 + 4.0 / max(gsize, 1)
    elif method == "bitsandbytes":
        bpp = 0.5 + 0.5 / 64 if qc.get("load_in_4bit") else 1.0
    else:
        arch["warnings"].append(
            f"quantization method {method!r} is not modelled; weights counted at {base} B"
        )
    return {"method": name, "bytes_per_param": bpp, "ignore": ignore, "kv_cache_dtype": kv, "base": base}
