"""Modules a quantized checkpoint excludes stay 16-bit in the weight estimate (ModelOpt exclude lists).

Data: the exclude_modules of NVIDIA's nvidia/DeepSeek-V3-0324-NVFP4 hf_quant_config.json
(tests/data/model_configs/, source in its README) and the catalog's NVFP4 models, whose `ignore` lists
follow that recipe.
"""

from __future__ import annotations

import copy
import json
import pathlib
import sys

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

import llm_capacity as lc  # noqa: E402

GIB = 1024**3
DSV3_QUANT = json.loads(
    (ROOT / "tests/data/model_configs/nvidia__DeepSeek-V3-0324-NVFP4.hf_quant_config.json").read_text()
)
# DeepSeek-V3 geometry (the Kimi-K2.5 text backbone differs only in experts, heads and vocab).
DSV3 = {
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "first_k_dense_replace": 3,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "num_nextn_predict_layers": 1,
    "vocab_size": 129280,
    "max_position_embeddings": 163840,
    "quantization_config": {"quant_method": "modelopt", **DSV3_QUANT},
}


def _catalog(name: str) -> dict:
    return yaml.safe_load((ROOT / "catalog/models" / f"{name}.yml").read_text())["llm_model"]


def _bytes(arch: dict, scheme: dict) -> dict[str, float]:
    return {e["name"]: lc._bytes_per_param(e, scheme) for e in lc.parameter_inventory(arch)}


def test_nvidia_recipe_keeps_attention_and_routers_16_bit_and_quantizes_mlps():
    arch = lc.normalize_architecture(DSV3)
    scheme = lc.quantization_scheme(arch)
    assert scheme["method"] == "nvfp4" and len(scheme["ignore"]) == 245
    per = _bytes(arch, scheme)
    nvfp4 = 0.5 + 1 / 16
    for i in range(61):
        for proj in ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"):
            assert per[f"model.layers.{i}.self_attn.{proj}"] == 2.0
    assert per["model.layers.0.mlp"] == nvfp4  # dense MLPs of the first 3 layers are not excluded
    assert per["model.layers.3.mlp.experts"] == nvfp4
    assert per["model.layers.3.mlp.shared_experts"] == nvfp4
    assert per["lm_head"] == per["model.embed_tokens"] == 2.0


def test_exclude_list_moves_weight_from_experts_to_replicated_attention():
    with_list = lc.normalize_architecture(DSV3)
    without = lc.normalize_architecture(
        dict(DSV3, quantization_config={"quant_method": "modelopt", "quantization": {"quant_algo": "NVFP4"}})
    )
    kw = {"tp": 8, "pp": 1, "dp": 1, "expert_parallel": False, "checkpoint_gib": None}
    a, b = lc.estimate_weights(with_list, **kw), lc.estimate_weights(without, **kw)
    attention = sum(e["params"] for e in lc.parameter_inventory(with_list) if ".self_attn." in e["name"])
    # Attention at 2 bytes instead of 0.5625: the whole difference of the model total.
    assert (a["model_total_gib"] - b["model_total_gib"]) * GIB == pytest.approx(
        attention * (2 - 0.5625), rel=1e-3
    )
    assert a["replicated_gib_per_gpu_by_stage"][0] > b["replicated_gib_per_gpu_by_stage"][0]


@pytest.mark.parametrize("name", ["kimi_k2_5_nvfp4", "glm5_nvfp4"])
def test_catalog_split_explains_the_checkpoint_size(name: str):
    """With the recipe's exclude list the config estimate meets the checkpoint size (scale near 1);
    treating every linear layer as NVFP4 undershoots it."""
    model = _catalog(name)
    ckpt = model["checkpoint_bytes"] / GIB
    arch = lc.normalize_architecture(model["hf_config"])
    plain_cfg = copy.deepcopy(model["hf_config"])
    del plain_cfg["quantization_config"]["ignore"]
    plain = lc.normalize_architecture(plain_cfg)
    kw = {"tp": 8, "pp": 1, "dp": 1, "expert_parallel": False, "checkpoint_gib": ckpt}
    split, flat = lc.estimate_weights(arch, **kw), lc.estimate_weights(plain, **kw)
    assert abs(split["estimate_scale"] - 1) < 0.02
    assert abs(split["estimate_scale"] - 1) < abs(flat["estimate_scale"] - 1)
    # Same checkpoint, more of it replicated on every GPU: the per-GPU share grows.
    assert split["weights_gib_per_gpu_by_stage"][0] > flat["weights_gib_per_gpu_by_stage"][0]
