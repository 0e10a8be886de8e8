"""Schema and consistency checks for catalog/models and catalog/hardware."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MODELS = sorted((ROOT / "catalog" / "models").glob("*.yml"))
HARDWARE = sorted((ROOT / "catalog" / "hardware").glob("*.yml"))
FIXTURES = ROOT.parent / "shared" / "fixtures" / "h200x2"

_SPEC = importlib.util.spec_from_file_location(
    "llm_plan_report_for_catalog", ROOT / "plugins" / "module_utils" / "llm_plan_report.py"
)
assert _SPEC is not None and _SPEC.loader is not None
rep = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(rep)
import known_issues  # noqa: E402 - plugins/module_utils is on sys.path (tests/unit/conftest.py)
import model_entry  # noqa: E402

MODEL_KEYS: dict[str, type | tuple[type, ...]] = {
    "id": str,
    "display_name": str,
    "hf_repo": str,
    "hf_revision": str,
    "hf_config": dict,
    "checkpoint_bytes": int,
    "engine": str,
    "engine_min_version": str,
    "tool_call_parser": (str, type(None)),
    "reasoning_parser": (str, type(None)),
    "trust_remote_code": bool,
    "engine_args": dict,
    "engine_env": dict,
    "patches": list,
    "known_issues": list,
    "quality_probes": list,
    "quality_min_pass_ratio": float,
    "sources": list,
}
HARDWARE_KEYS: dict[str, type | tuple[type, ...]] = {
    "id": str,
    "gpu_name": str,
    "gpu_count": int,
    "gpu_memory_gib": float,
    "gpu_memory_mib_cuda": int,
    "compute_capability": str,
    "interconnect": str,
    "numa_nodes": int,
    "engine_env": dict,
    "recommended_gpu_memory_utilization": float,
    "notes": list,
    "sources": list,
}


def _load(path: Path, var: str) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert list(data) == [var], f"{path.name} must define exactly one variable {var}"
    return data[var]


def _text(hf_config: dict[str, Any]) -> dict[str, Any]:
    return hf_config.get("text_config", hf_config)


def test_catalog_has_the_required_entries() -> None:
    assert {p.stem for p in MODELS} >= {"kimi_k2_5_nvfp4", "glm5_ud_q4_k_xl_gguf", "glm5_nvfp4", "tiny_test"}
    assert {p.stem for p in HARDWARE} >= {"rtx_pro_6000_x8", "h200_x8", "h200_x2", "h100_x1"}


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.stem)
def test_model_schema(path: Path) -> None:
    model = _load(path, "llm_model")
    for key, kind in MODEL_KEYS.items():
        assert key in model, f"{path.name}: missing {key}"
        assert isinstance(model[key], kind), f"{path.name}: {key} is {type(model[key]).__name__}"
    assert model["id"] == path.stem
    assert re.fullmatch(r"[\w.-]+/[\w.-]+", model["hf_repo"])
    if not re.fullmatch(r"[0-9a-f]{40}", model["hf_revision"]):
        assert model.get("hf_revision_note"), f"{path.name}: unpinned revision needs hf_revision_note"
    assert model["checkpoint_bytes"] > 0
    assert model["engine"] == "vllm"
    rep.version_tuple(model["engine_min_version"])
    assert model["sources"]
    assert all(isinstance(s, str) and s.strip() for s in model["sources"])
    assert 0 < model["quality_min_pass_ratio"] <= 1


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.stem)
def test_model_architecture_values_for_the_planner(path: Path) -> None:
    model = model_entry.model_complete(_load(path, "llm_model"))
    assert isinstance(model["quant_format"], str) and model["quant_format"], path.name
    text = _text(model["hf_config"])
    for key in (
        "num_hidden_layers",
        "hidden_size",
        "num_attention_heads",
        "vocab_size",
        "max_position_embeddings",
    ):
        assert isinstance(text.get(key), int) and text[key] > 0, f"{path.name}: {key}"
    if model["mla"]:
        for key in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
            assert isinstance(text.get(key), int) and text[key] > 0, f"{path.name}: {key}"
    else:
        assert text["num_attention_heads"] % text["num_key_value_heads"] == 0
        head_dim = text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"]
        assert head_dim * text["num_attention_heads"] == text["hidden_size"]


def test_kimi_keeps_the_published_nesting() -> None:
    model = _load(ROOT / "catalog/models/kimi_k2_5_nvfp4.yml", "llm_model")
    hf = model["hf_config"]
    assert hf["model_type"] == "kimi_k25"
    assert hf["text_config"]["model_type"] == "deepseek_v3"
    assert "num_hidden_layers" not in hf
    assert (hf["text_config"]["kv_lora_rank"], hf["text_config"]["qk_rope_head_dim"]) == (512, 64)
    assert hf["quantization_config"]["kv_cache_quant_algo"] == "FP8"
    assert model["hf_quant_config"]["quantization"]["kv_cache_quant_algo"] == "FP8"
    assert (model["tool_call_parser"], model["reasoning_parser"]) == ("kimi_k2", "kimi_k2")


def test_glm5_entries_share_the_base_architecture() -> None:
    nvfp4 = _load(ROOT / "catalog/models/glm5_nvfp4.yml", "llm_model")["hf_config"]
    gguf = _load(ROOT / "catalog/models/glm5_ud_q4_k_xl_gguf.yml", "llm_model")["hf_config"]
    shared = {k: v for k, v in nvfp4.items() if k != "quantization_config" and k in gguf}
    assert len(shared) >= 30
    assert {k: gguf[k] for k in shared} == shared


def test_gguf_split_is_consistent() -> None:
    model = _load(ROOT / "catalog/models/glm5_ud_q4_k_xl_gguf.yml", "llm_model")
    gguf = model["gguf"]
    assert gguf["part_count"] == model["checkpoint_shards"] == 10
    first = gguf["part_pattern"].format(index=1, count=gguf["part_count"])
    assert first == gguf["first_part"]
    assert first.endswith("-00001-of-00010.gguf")
    assert gguf["base_repo"] == model["hf_config_repo"] == "zai-org/GLM-5"


def test_tiny_gguf_entry_asks_what_the_tiny_model_was_taught() -> None:
    """The GGUF test model is the trained tiny chat model quantized: same config, same quality probes."""
    tiny = _load(ROOT / "catalog/models/tiny_test.yml", "llm_model")
    gguf = _load(ROOT / "catalog/models/tiny_test_gguf.yml", "llm_model")
    assert gguf["quality_probes"] == tiny["quality_probes"]
    assert gguf["quality_min_pass_ratio"] == tiny["quality_min_pass_ratio"]
    assert gguf["hf_config"] == tiny["hf_config"]
    assert gguf["gguf"]["base_repo"] == tiny["hf_repo"]
    first = gguf["gguf"]["part_pattern"].format(index=1, count=gguf["gguf"]["part_count"])
    assert first == gguf["gguf"]["first_part"]


_PATCH_KEYS = {"id", "file", "action", "json_path", "reason", "when"}


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.stem)
def test_patches_and_known_issues_are_well_formed(path: Path) -> None:
    model = _load(path, "llm_model")
    ids = [p["id"] for p in model["patches"]] + [i["id"] for i in model["known_issues"]]
    assert len(ids) == len(set(ids)), f"{path.name}: duplicate ids"
    for patch in model["patches"]:
        assert set(patch) >= _PATCH_KEYS, f"{path.name}: {patch.get('id')} lacks {_PATCH_KEYS - set(patch)}"
        assert patch["action"] in {"remove", "set"}
        assert patch["file"].endswith(".json")
        # The dotted path must name a key that the entry's own copy of that file has.
        doc = model["hf_config"] if patch["file"] == "config.json" else model.get("hf_quant_config", {})
        *parents, leaf = patch["json_path"].split(".")
        for part in parents:
            doc = doc[part]
        assert leaf in doc, f"{path.name}: {patch['json_path']} not in {patch['file']}"
        rep.condition_matches(patch["when"], {})
    shared = {r["id"] for r in known_issues.load_rules()}
    for issue in model["known_issues"]:
        assert {"id", "summary", "when", "sources"} <= set(issue)
        assert issue["sources"]
        rep.condition_matches(issue["when"], {})
        # A copy of a shared rule belongs in catalog/known_issues.yml, not in the entry.
        assert issue["id"] not in shared, (
            f"{path.name}: {issue['id']} repeats a rule of catalog/known_issues.yml"
        )
    # Every fact a rule may test must make every rule evaluate without error.
    for hardware_path in HARDWARE:
        rep.llm_plan_settings(model, _load(hardware_path, "llm_hardware"), "0.22.0")


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.stem)
def test_quality_probes_compile(path: Path) -> None:
    model = _load(path, "llm_model")
    # A code-path model with random weights answers nothing: it must say so and carry no probes at all
    # (a probe it could pass would match any output).
    assert bool(model["quality_probes"]) != bool(model.get("random_weights")), path.name
    for probe in model["quality_probes"]:
        assert probe["prompt"].strip()
        re.compile(probe["expect"])
        assert probe["max_tokens"] > 0


@pytest.mark.parametrize("path", HARDWARE, ids=lambda p: p.stem)
def test_hardware_schema(path: Path) -> None:
    hw = _load(path, "llm_hardware")
    for key, kind in HARDWARE_KEYS.items():
        assert key in hw, f"{path.name}: missing {key}"
        assert isinstance(hw[key], kind), f"{path.name}: {key} is {type(hw[key]).__name__}"
    assert hw["id"] == path.stem
    assert hw["interconnect"] in {"pcie", "nvlink", "nvswitch", "none"}
    assert re.fullmatch(r"\d+\.\d+", hw["compute_capability"])
    assert hw["gpu_memory_gib"] == pytest.approx(hw["gpu_memory_mib_cuda"] / 1024, abs=0.01)
    assert 0 < hw["recommended_gpu_memory_utilization"] <= 1
    assert hw["sources"]


def test_h200_x2_matches_the_recorded_outputs() -> None:
    smi = (FIXTURES / "smi.txt").read_text()
    rows = re.findall(r"^(\d+), NVIDIA H200, (\d+), ([\d.]+), ", smi, flags=re.MULTILINE)
    assert len(rows) == 2
    hw = _load(ROOT / "catalog/hardware/h200_x2.yml", "llm_hardware")
    assert hw["gpu_count"] == len(rows)
    assert {int(r[1]) for r in rows} == {hw["nvidia_smi_memory_total_mib"]}
    assert {r[2] for r in rows} == {hw["compute_capability"]}
    torch_totals = {int(m) for m in re.findall(r"total_memory=(\d+)MB", smi)}
    assert torch_totals == {hw["gpu_memory_mib_cuda"]}
    assert "NV18" in smi and hw["interconnect"] == "nvlink"
    # Same GPU model in the 8-GPU profile.
    h8 = _load(ROOT / "catalog/hardware/h200_x8.yml", "llm_hardware")
    assert (h8["gpu_memory_mib_cuda"], h8["compute_capability"]) == (hw["gpu_memory_mib_cuda"], "9.0")


def test_h100_matches_the_calibration_logs() -> None:
    lines = (ROOT.parent / "shared" / "data" / "vllm_memory_calibration.jsonl").read_text().splitlines()
    totals = {json.loads(line)["gpu_mem_gib"] for line in lines if line.strip()}
    hw = _load(ROOT / "catalog/hardware/h100_x1.yml", "llm_hardware")
    assert totals == {hw["gpu_memory_gib"]}
