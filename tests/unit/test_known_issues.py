"""catalog/known_issues.yml: rules keyed by model family, quant format, GPU and engine release."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import known_issues as ki
import llm_plan_report as rep
import model_entry as me
import pytest
import yaml
from ansible.errors import AnsibleFilterError

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "tests" / "data" / "model_configs"


def _catalog(kind: str, name: str) -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "catalog" / kind / f"{name}.yml").read_text())
    return data["llm_model" if kind == "models" else "llm_hardware"]


def _config(stem: str) -> dict[str, Any]:
    return json.loads((CONFIGS / f"{stem}.json").read_text())


RTX = _catalog("hardware", "rtx_pro_6000_x8")
H200 = _catalog("hardware", "h200_x8")
B200 = {**H200, "id": "b200_x8", "compute_capability": "10.0"}


@pytest.mark.parametrize(
    ("stem", "families"),
    [
        ("deepseek-ai__DeepSeek-V2-Lite-Chat", ["mla", "moe"]),
        ("Qwen__Qwen3-30B-A3B", ["moe"]),
        ("openai__gpt-oss-20b", ["moe"]),
        ("meta-llama__Llama-4-Scout-17B-16E-Instruct", ["moe", "multimodal"]),
        ("Qwen__Qwen3-VL-30B-A3B-Instruct-FP8", ["moe", "multimodal"]),
        ("meta-llama__Llama-3.1-8B-Instruct", []),
        ("Qwen__Qwen2.5-72B-Instruct", []),
        ("mistralai__Mixtral-8x7B-Instruct-v0.1", ["moe"]),
    ],
)
def test_families_come_from_the_published_config(stem: str, families: list[str]) -> None:
    assert ki.model_families(_config(stem)) == families


def test_catalog_families_and_sparse_mla() -> None:
    glm5 = me.model_complete(_catalog("models", "glm5_nvfp4"))
    assert glm5["families"] == ["mla", "sparse_mla", "moe"]
    assert (glm5["mla"], glm5["supports_dcp"], glm5["quant_format"]) == (True, False, "modelopt_nvfp4")
    kimi = me.model_complete(_catalog("models", "kimi_k2_5_nvfp4"))
    assert kimi["families"] == ["mla", "moe", "multimodal"] and kimi["supports_dcp"] is True
    gguf = me.model_complete(_catalog("models", "glm5_ud_q4_k_xl_gguf"))
    assert "gguf" in gguf["families"] and gguf["quant_format"] == "gguf"
    # A value the entry sets wins over the derived one.
    assert me.model_complete(_catalog("models", "tiny_dsv3"))["supports_dcp"] is False


def test_the_rules_file_is_valid_and_every_rule_is_sourced() -> None:
    rules = ki.load_rules()
    assert len(rules) >= 8
    for rule in rules:
        assert rule["sources"] and rule["summary"].strip()


def test_one_rule_serves_every_model_of_its_family() -> None:
    """DeepSeek-V2-Lite is in no catalog entry: the MLA rules reach it through its config alone."""
    hub = me.model_entry_from_hub(
        {
            "repo": "deepseek-ai/DeepSeek-V2-Lite-Chat",
            "sha": "a" * 40,
            "config": _config("deepseek-ai__DeepSeek-V2-Lite-Chat"),
        }
    )
    on_sm120 = rep.llm_plan_settings(hub, RTX, "0.22.0")
    assert on_sm120["engine_args"] == {"attention-backend": "TRITON_MLA"}
    assert on_sm120["recommends"] == {"decode_context_parallel_size": "tensor_parallel_size"}
    assert rep.llm_plan_settings(hub, RTX, "0.17.1")["kv_cache_dtypes_unavailable"] == ["fp8"]
    assert rep.llm_plan_settings(hub, RTX, "0.18.0")["kv_cache_dtypes_unavailable"] == []
    on_hopper = rep.llm_plan_settings(hub, H200, "0.22.0")
    assert "attention-backend" not in on_hopper["engine_args"]
    # TRITON_MLA takes no FP8 cache below SM 8.9 on any release.
    ampere = {**H200, "compute_capability": "8.0"}
    assert rep.llm_plan_settings(hub, ampere, "0.33.0")["kv_cache_dtypes_unavailable"] == ["fp8"]
    # Not NVFP4: the NVFP4 rules stay quiet.
    assert not any(n["id"].startswith("nvfp4") for n in on_hopper["notes"])


def test_nvfp4_rules_fire_on_format_gpu_and_release() -> None:
    glm5 = _catalog("models", "glm5_nvfp4")
    assert rep.llm_plan_settings(glm5, B200, "0.22.0")["engine_env"]["VLLM_USE_FLASHINFER_MOE_FP4"] == "1"
    # No release from 0.24.0 reads the variable: it is not set there.
    assert "VLLM_USE_FLASHINFER_MOE_FP4" not in rep.llm_plan_settings(glm5, B200, "0.33.0")["engine_env"]
    assert "VLLM_USE_FLASHINFER_MOE_FP4" not in rep.llm_plan_settings(glm5, H200, "0.22.0")["engine_env"]
    # Hopper runs NVFP4 weight-only (Marlin): served, and said so; SM 7.0 cannot run it: refused.
    hopper = rep.llm_plan_settings(glm5, H200, "0.33.0")
    assert "nvfp4_weight_only_below_sm100" in {n["id"] for n in hopper["notes"]} and not hopper["refusals"]
    volta = rep.llm_plan_settings(glm5, {**H200, "compute_capability": "7.0"}, "0.33.0")
    assert [r["id"] for r in volta["refusals"]] == ["nvfp4_needs_sm75"]
    assert "nvfp4_weight_only_below_sm100" not in {
        n["id"] for n in rep.llm_plan_settings(glm5, B200, "0.33.0")["notes"]
    }


def test_an_entry_replaces_or_switches_off_a_rule_by_id() -> None:
    kimi = _catalog("models", "kimi_k2_5_nvfp4")
    off = {**kimi, "known_issues": [{"id": "sm120_mla_backend", "disabled": True}]}
    assert "attention-backend" not in rep.llm_plan_settings(off, RTX, "0.22.0")["engine_args"]
    replaced = {
        **kimi,
        "known_issues": [
            {
                "id": "sm120_mla_backend",
                "summary": "site build with FlashInfer MLA on SM120",
                "when": {"compute_capability": ["12.0"]},
                "forces": {"engine_args": {"attention-backend": "FLASHINFER_MLA"}},
                "sources": ["site notes"],
            }
        ],
    }
    assert (
        rep.llm_plan_settings(replaced, RTX, "0.22.0")["engine_args"]["attention-backend"] == "FLASHINFER_MLA"
    )


def test_a_refusing_rule_makes_the_plan_refuse_with_the_fix(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yml"
    rules.write_text(
        yaml.safe_dump(
            {
                "rules": [
                    {
                        "id": "no_fp8_below_ada",
                        "summary": "FP8 checkpoints need compute capability 8.9.",
                        "when": {"quant_format": ["fp8"], "compute_capability_lt": "8.9"},
                        "refuses": "a BF16 or AWQ checkpoint of the model",
                        "sources": ["test"],
                    }
                ]
            }
        )
    )
    model = me.model_entry_from_hub(
        {"repo": "acme/fp8", "sha": "b" * 40, "config": _config("Qwen__Qwen3-235B-A22B-Instruct-2507-FP8")}
    )
    ampere = {**H200, "compute_capability": "8.0"}
    refused = rep.llm_plan_settings(model, ampere, "0.22.0", rules_path=str(rules))
    assert refused["refusals"] == [
        {
            "id": "no_fp8_below_ada",
            "reason": "FP8 checkpoints need compute capability 8.9.",
            "fix": "a BF16 or AWQ checkpoint of the model",
        }
    ]
    assert rep.llm_plan_settings(model, H200, "0.22.0", rules_path=str(rules))["refusals"] == []
    # 10.0 is numerically above 8.9 (not a string comparison).
    assert rep.llm_plan_settings(model, B200, "0.22.0", rules_path=str(rules))["refusals"] == []


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ({"id": "x", "summary": "s", "when": {"family": ["dense"]}, "sources": ["s"]}, "unknown famil"),
        ({"id": "x", "summary": "s", "when": {}}, "names no sources"),
        ({"id": "X-1", "summary": "s", "sources": ["s"]}, "lower_snake_case"),
        ({"id": "x", "summary": "s", "sources": ["s"], "refuses": ""}, "what would work instead"),
        ({"id": "x", "summary": "s", "sources": ["s"], "forcez": {}}, "unknown key"),
    ],
)
def test_malformed_rules_are_refused_by_name(tmp_path: Path, rule: dict[str, Any], message: str) -> None:
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"rules": [rule]}))
    with pytest.raises(ki.RuleError, match=message):
        ki.load_rules(path)
    with pytest.raises(AnsibleFilterError, match=message):
        rep.llm_plan_settings(_catalog("models", "tiny_test"), H200, "0.22.0", rules_path=str(path))


def test_duplicate_rule_ids_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "rules.yml"
    rule = {"id": "x", "summary": "s", "sources": ["s"]}
    path.write_text(yaml.safe_dump({"rules": [rule, rule]}))
    with pytest.raises(ki.RuleError, match=r"duplicate rule id\(s\) \['x'\]"):
        ki.load_rules(path)


def test_an_architecture_the_release_lacks_is_a_refusal() -> None:
    model = me.model_entry_from_hub(
        {
            "repo": "acme/bailing",
            "sha": "c" * 40,
            "config": {"architectures": ["BailingMoeV3ForCausalLM"], "hidden_size": 8},
        }
    )
    refusals = rep.llm_plan_settings(model, H200, "0.22.0")["refusals"]
    assert [r["id"] for r in refusals] == ["vllm_model_registry"]
    assert "vLLM 0.32.0" in refusals[0]["fix"]
    assert rep.llm_plan_settings(model, H200, "0.32.0")["refusals"] == []
