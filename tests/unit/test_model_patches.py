"""Unit tests of plugins/module_utils/model_patches.py, including the real Kimi-K2.5-NVFP4 catalog patches."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

import model_patches as mp  # noqa: E402

SM120 = {"compute_capability": "12.0", "engine_version": "0.16.0", "attention_backend": "TRITON_MLA"}
HF_QUANT = {"quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8", "group_size": 16}}


def kimi_patches() -> list[dict]:
    doc = yaml.safe_load((ROOT / "catalog" / "models" / "kimi_k2_5_nvfp4.yml").read_text())
    return mp.model_patch_normalize(doc["llm_model"]["patches"])


def test_kimi_catalog_patches_normalize() -> None:
    patches = kimi_patches()
    by_file = {p["file"]: p for p in patches}
    assert by_file["hf_quant_config.json"]["op"] == "remove"
    assert by_file["hf_quant_config.json"]["path"] == ["quantization", "kv_cache_quant_algo"]
    assert all(p["reason"] for p in patches)


@pytest.mark.parametrize(
    ("facts", "applies"),
    [
        (SM120, True),
        ({**SM120, "engine_version": "0.17.1rc2"}, True),
        ({**SM120, "engine_version": "0.18.0"}, False),
        ({**SM120, "engine_version": "0.22.0"}, False),
        ({**SM120, "compute_capability": "9.0"}, False),
        ({**SM120, "attention_backend": "FLASHINFER_MLA"}, False),
        ({"compute_capability": "12.0", "attention_backend": "TRITON_MLA"}, False),  # engine unknown
        ({**SM120, "compute_capability": None}, False),
    ],
)
def test_kimi_sm120_condition(facts: dict, applies: bool) -> None:
    selected = mp.model_patch_select(kimi_patches(), facts)
    assert bool(selected) is applies
    if applies:
        assert {p["file"] for p in selected} == {"hf_quant_config.json", "config.json"}


def test_apply_remove_is_a_copy_and_idempotent() -> None:
    patches = [p for p in kimi_patches() if p["file"] == "hf_quant_config.json"]
    out = mp.model_patch_apply(HF_QUANT, patches)
    assert out == {"quantization": {"quant_algo": "NVFP4", "group_size": 16}}
    assert HF_QUANT["quantization"]["kv_cache_quant_algo"] == "FP8"  # input untouched
    assert mp.model_patch_apply(out, patches) == out
    assert mp.model_patch_apply({"other": 1}, patches) == {"other": 1}


def test_apply_set_creates_parents() -> None:
    (p,) = mp.model_patch_normalize(
        [{"id": "s", "file": "config.json", "op": "set", "path": ["a", "b"], "value": [1], "reason": "r"}]
    )
    assert mp.model_patch_apply({}, [p]) == {"a": {"b": [1]}}
    with pytest.raises(AnsibleFilterError, match="crosses a non-object"):
        mp.model_patch_apply({"a": 3}, [p])
    with pytest.raises(AnsibleFilterError, match="JSON object"):
        mp.model_patch_apply([1], [p])


def test_version_range_forms() -> None:
    base = {"id": "v", "file": "c.json", "op": "remove", "path": ["x"], "reason": "r"}
    (p,) = mp.model_patch_normalize([{**base, "when": {"engine_version": ">=0.13.0,<0.17"}}])
    assert mp.model_patch_select([p], {"engine_version": "0.16.2"}) == [p]
    assert mp.model_patch_select([p], {"engine_version": "0.17.0"}) == []
    assert mp.model_patch_select([p], {"engine_version": "0.12.9"}) == []
    (q,) = mp.model_patch_normalize([{**base, "when": {"engine_version_ge": "0.20"}}])
    assert mp.model_patch_select([q], {"engine_version": "v0.20.0+cu130"}) == [q]


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"file": "c.json", "op": "remove", "path": ["x"], "reason": "r"}, "needs an 'id'"),
        ({"id": "a", "file": "../c.json", "op": "remove", "path": ["x"], "reason": "r"}, "JSON file name"),
        ({"id": "a", "file": "c.json", "op": "rename", "path": ["x"], "reason": "r"}, "'op'/'action'"),
        ({"id": "a", "file": "c.json", "op": "set", "path": ["x"], "reason": "r"}, "needs a 'value'"),
        ({"id": "a", "file": "c.json", "op": "remove", "path": [], "reason": "r"}, "'path'"),
        ({"id": "a", "file": "c.json", "op": "remove", "path": ["x"]}, "'reason'"),
        (
            {"id": "a", "file": "c.json", "op": "remove", "path": ["x"], "reason": "r", "when": {"gpu": 1}},
            "unknown",
        ),
    ],
)
def test_normalize_rejects_bad_patches(patch: dict, message: str) -> None:
    with pytest.raises(AnsibleFilterError, match=message):
        mp.model_patch_normalize([patch])


def test_normalize_rejects_duplicates_and_non_lists() -> None:
    p = {"id": "a", "file": "c.json", "op": "remove", "path": ["x"], "reason": "r"}
    with pytest.raises(AnsibleFilterError, match="duplicate"):
        mp.model_patch_normalize([p, p])
    with pytest.raises(AnsibleFilterError, match="must be a list"):
        mp.model_patch_normalize({"a": p})


def test_engine_args_merge_and_conflict() -> None:
    base = {"file": "c.json", "op": "remove", "path": ["x"], "reason": "r"}
    a, b, c = mp.model_patch_normalize(
        [
            {**base, "id": "a", "engine_args": {"kv-cache-dtype": "bfloat16"}},
            {**base, "id": "b", "engine_args": {"kv-cache-dtype": "bfloat16", "block-size": 64}},
            {**base, "id": "c", "engine_args": {"kv-cache-dtype": "fp8"}},
        ]
    )
    assert mp.model_patch_engine_args([a, b]) == {"kv-cache-dtype": "bfloat16", "block-size": 64}
    with pytest.raises(AnsibleFilterError, match="disagree"):
        mp.model_patch_engine_args([a, c])
