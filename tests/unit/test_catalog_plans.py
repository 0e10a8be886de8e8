"""Every catalog model's hf_config goes through the capacity planner on every hardware profile."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MODELS = sorted((ROOT / "catalog" / "models").glob("*.yml"))
HARDWARE = sorted((ROOT / "catalog" / "hardware").glob("*.yml"))

sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))
import llm_capacity as cap  # noqa: E402


def _load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    return next(iter(data.values()))


@pytest.mark.parametrize("hw_path", HARDWARE, ids=lambda p: p.stem)
@pytest.mark.parametrize("model_path", MODELS, ids=lambda p: p.stem)
def test_plan_runs_for_every_pair(model_path: Path, hw_path: Path) -> None:
    model, hw = _load(model_path), _load(hw_path)
    for dtype in ("bfloat16", "fp8"):
        plan = cap.plan_memory(
            model["hf_config"],
            gpu_memory_gib=hw["gpu_memory_gib"],
            tensor_parallel_size=hw["gpu_count"],
            kv_cache_dtype=dtype,
            max_model_len=2048,
            checkpoint_gib=model["checkpoint_bytes"] / 2**30,
            gpu_count=hw["gpu_count"],
        )
        for key in ("weights_gib_per_gpu", "kv_cache_gib_per_gpu", "kv_bytes_per_token", "kv_cache_tokens"):
            assert isinstance(plan[key], int | float), key
        assert isinstance(plan["fits"], bool)
        assert isinstance(plan["reasons"], list)
        assert plan["fits"] == (not plan["reasons"])


@pytest.mark.parametrize("model_path", MODELS, ids=lambda p: p.stem)
def test_kv_bytes_per_token_follow_the_catalog_geometry(model_path: Path) -> None:
    """BF16 KV bytes per token per GPU at TP 1, from the catalog's own numbers (MLA latent vs GQA K+V)."""
    model = _load(model_path)
    text = model["hf_config"].get("text_config", model["hf_config"])
    layers = text["num_hidden_layers"]
    extra = 0
    if text.get("kv_lora_rank"):
        expected = layers * (text["kv_lora_rank"] + text["qk_rope_head_dim"]) * 2
        # DeepSeek sparse attention (GLM-5) adds an indexer key cache of at most index_head_dim x 2 bytes.
        extra = layers * text.get("index_head_dim", 0) * 2
    else:
        head_dim = text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"]
        expected = layers * 2 * text["num_key_value_heads"] * head_dim * 2
    plan = cap.plan_memory(
        model["hf_config"],
        gpu_memory_gib=1000.0,
        kv_cache_dtype="bfloat16",
        max_model_len=2048,
        checkpoint_gib=model["checkpoint_bytes"] / 2**30,
    )
    assert expected * 0.999 <= plan["kv_bytes_per_token"] <= (expected + extra) * 1.001
    if not extra:
        assert plan["kv_bytes_per_token"] == pytest.approx(expected, rel=0.001)
    else:
        assert plan["kv_bytes_per_token"] > expected, "the DSA indexer cache is counted"
