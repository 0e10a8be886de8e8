"""llm_recommend on every catalog model x every hardware profile: only layouts vLLM starts.

Regression: tiny_test (2 layers, 4 heads) on 8 GPUs used to raise "pipeline_parallel_size: 8 stages for
only 2 layers" because every GPU had to go into TP x PP. Data parallelism now takes the GPUs a smaller
instance leaves, and splits vLLM refuses are skipped with the reason.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

import _collection  # noqa: E402  (tests/unit is on sys.path under pytest: rootdir-relative import)
import llm_capacity as lc  # noqa: E402

MODELS = sorted((ROOT / "catalog" / "models").glob("*.yml"))
HARDWARE = sorted((ROOT / "catalog" / "hardware").glob("*.yml"))
RECOMMEND = _collection.filters("llm_capacity")["llm_recommend"]


def _load(path: Path) -> dict[str, Any]:
    return next(iter(yaml.safe_load(path.read_text()).values()))


def _role_args(model: dict[str, Any], hw: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """The arguments roles/llm_plan/tasks/main.yml passes (its defaults: 256 sequences, bf16 + fp8)."""
    args = {
        "gpu_memory_gib": hw["gpu_memory_gib"],
        "gpu_count": hw["gpu_count"],
        "checkpoint_gib": model["checkpoint_bytes"] / 2**30,
        "compute_capability": str(hw["compute_capability"]),
        "vllm_version": "0.22.0",
        "gpu_memory_utilization": hw["recommended_gpu_memory_utilization"],
        "max_num_seqs": 256,
        "kv_cache_dtypes": ["bfloat16", "fp8"],
    }
    args.update(extra)
    return args


def _replan(model: dict[str, Any], hw: dict[str, Any], rec: dict[str, Any], dtype: str) -> dict[str, Any]:
    sparse = lc.normalize_architecture(model["hf_config"]).get("sparse_indexer")
    pick = lc.sparse_mla_backend if sparse else lc.mla_backend
    backend = pick(str(hw["compute_capability"]), "0.22.0") if rec["attention_backend"] else None
    return lc.plan_memory(
        model["hf_config"],
        gpu_memory_gib=hw["gpu_memory_gib"],
        tensor_parallel_size=rec["tensor_parallel_size"],
        pipeline_parallel_size=rec["pipeline_parallel_size"],
        data_parallel_size=rec["data_parallel_size"],
        decode_context_parallel_size=rec["decode_context_parallel_size"],
        gpu_memory_utilization=rec["gpu_memory_utilization"],
        kv_cache_dtype=dtype,
        max_model_len=rec["max_model_len"],
        max_num_seqs=256,
        checkpoint_gib=model["checkpoint_bytes"] / 2**30,
        gpu_count=hw["gpu_count"],
        block_size=lc._backend_block(backend, dtype),
        vllm_version="0.22.0",
    )


@pytest.mark.parametrize("target", [None, 32768, 131072])
@pytest.mark.parametrize("hw_path", HARDWARE, ids=lambda p: p.stem)
@pytest.mark.parametrize("model_path", MODELS, ids=lambda p: p.stem)
def test_recommendation_is_a_layout_vllm_starts(model_path: Path, hw_path: Path, target: int | None) -> None:
    model, hw = _load(model_path), _load(hw_path)
    arch = lc.normalize_architecture(model["hf_config"])
    if target is not None:
        target = min(target, arch["max_position_embeddings"])
    rec = RECOMMEND(model["hf_config"], **_role_args(model, hw, target_max_model_len=target))
    for row in rec["candidates"]:  # nothing vLLM refuses is even planned
        problems = lc.check_divisibility(
            arch, tp=row["tp"], pp=row["pp"], dp=row["dp"], ep=False, dcp=row["dcp"]
        )
        assert problems == [], row
        assert row["pp"] <= arch["num_hidden_layers"]
    if not rec["fits"]:
        assert rec["reasons"][0].startswith(f"no layout of {hw['gpu_count']} GPU(s) fits")
        assert len(rec["reasons"]) > 2, "the closest candidate's own reasons follow"
        assert not any(row["fits"] for row in rec["candidates"])
        return
    tp, pp, dp = rec["tensor_parallel_size"], rec["pipeline_parallel_size"], rec["data_parallel_size"]
    assert tp * pp * dp == hw["gpu_count"]
    assert (
        lc.check_divisibility(arch, tp=tp, pp=pp, dp=dp, ep=False, dcp=rec["decode_context_parallel_size"])
        == []
    )
    again = _replan(model, hw, rec, rec["kv_cache_dtype"])
    assert again["fits"], again["reasons"]
    assert again["kv_cache_tokens"] == rec["plan"]["kv_cache_tokens"]
    # The smallest instance that meets the concurrency target: no fitting candidate without PP and with
    # fewer TP ranks reaches the same capped concurrency.
    wanted = min(rec["plan"]["max_concurrency"] * dp, 16.0)
    for row in rec["candidates"]:
        if row["fits"] and row["pp"] == 1 and row["tp"] < tp:
            assert min(row["max_concurrency"] * row["dp"], 16.0) < wanted, row


@pytest.mark.parametrize("hw_path", HARDWARE, ids=lambda p: p.stem)
def test_tiny_model_takes_one_gpu_per_replica(hw_path: Path) -> None:
    model, hw = _load(ROOT / "catalog/models/tiny_test.yml"), _load(hw_path)
    rec = RECOMMEND(model["hf_config"], **_role_args(model, hw))
    assert rec["fits"]
    assert (rec["tensor_parallel_size"], rec["pipeline_parallel_size"]) == (1, 1)
    assert rec["data_parallel_size"] == hw["gpu_count"]
    if hw["gpu_count"] == 8:
        skipped = "\n".join(rec["skipped_layouts"])
        assert "TP 1 x PP 8 x DP 1 skipped: pipeline_parallel_size 8 exceeds num_hidden_layers 2" in skipped
        assert (
            "TP 8 x PP 1 x DP 1 skipped: num_attention_heads 4 is not divisible by tensor_parallel_size 8"
            in (skipped)
        )
        assert any("replicas" in r for r in rec["reasons"])


def test_candidate_layouts_skip_what_vllm_refuses() -> None:
    cfg = {"hidden_size": 768, "num_hidden_layers": 3, "num_attention_heads": 6, "vocab_size": 1000}
    valid, skipped = lc.candidate_layouts(lc.normalize_architecture(cfg), 8)
    assert (1, 1, 8) in valid and (2, 1, 4) in valid and (1, 2, 4) in valid
    assert not any(tp in (4, 8) for tp, _, _ in valid)  # 6 heads
    assert not any(pp > 3 for _, pp, _ in valid)  # 3 layers
    assert len(valid) + len(skipped) == 10  # every power-of-two TP x PP split of 8 GPUs


def test_nothing_fits_gives_a_verdict_with_reasons() -> None:
    model, hw = (
        _load(ROOT / "catalog/models/kimi_k2_5_nvfp4.yml"),
        _load(ROOT / "catalog/hardware/h100_x1.yml"),
    )
    rec = RECOMMEND(model["hf_config"], **_role_args(model, hw))
    assert rec["fits"] is False
    assert rec["plan"] is not None and rec["plan"]["fits"] is False
    assert any("exceed gpu_memory_utilization" in r for r in rec["reasons"])
    assert "tensor_parallel_size" not in rec  # no layout is proposed


def test_block_fp8_slices_must_be_whole_blocks() -> None:
    """Qwen3-235B-A22B FP8 (128x128 blocks): 1536 / TP 8 = 192 is refused by vLLM; EP or TP 4 is not."""
    cfg = json.loads(
        (ROOT / "tests/data/model_configs/Qwen__Qwen3-235B-A22B-Instruct-2507-FP8.json").read_text()
    )
    arch = lc.normalize_architecture(cfg)
    (problem,) = lc.check_divisibility(arch, tp=8, pp=1, dp=1, ep=False, dcp=1)
    assert problem["field"] == "tensor_parallel_size" and "FP8 weight block 128" in problem["message"]
    assert lc.check_divisibility(arch, tp=8, pp=1, dp=1, ep=True, dcp=1) == []
    assert lc.check_divisibility(arch, tp=4, pp=1, dp=1, ep=False, dcp=1) == []
    rec = RECOMMEND(
        cfg, gpu_memory_gib=79.19, gpu_count=8, compute_capability="9.0", target_max_model_len=32768
    )
    assert rec["fits"] and rec["tensor_parallel_size"] <= 4
    assert any("TP 8 x PP 1 x DP 1 skipped" in s for s in rec["skipped_layouts"])
