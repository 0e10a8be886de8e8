"""Unit tests of plugins/module_utils/model_entry.py on the published configs in tests/data/model_configs."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugins" / "module_utils"))

import model_entry as me

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "tests" / "data" / "model_configs"
CATALOG_KEYS = set(yaml.safe_load((ROOT / "catalog/models/tiny_test.yml").read_text())["llm_model"]) - {
    "hf_config",
    "known_issues",
    # Optional: the engines a catalog entry was proven on besides vLLM (default [engine]) and their options.
    "engines",
    "sglang",
}


def info(name: str, **over: object) -> dict:
    config = json.loads((CONFIGS / f"{name}.json").read_text())
    return {
        "repo": name.replace("__", "/", 1),
        "revision": "main",
        "sha": "a" * 40,
        "config": config,
        "hf_quant_config": None,
        "weight_files": {"model-00001-of-00002.safetensors": 10, "model-00002-of-00002.safetensors": 5},
        "checkpoint_bytes": 15,
        "chat_template": True,
    } | over


@pytest.mark.parametrize(
    ("name", "fmt", "tool", "reasoning", "mla"),
    [
        ("Qwen__Qwen3-14B", "bf16", "hermes", "qwen3", False),
        ("Qwen__Qwen3-14B-AWQ", "awq", "hermes", "qwen3", False),
        ("Qwen__Qwen3-Coder-30B-A3B-Instruct", "bf16", "qwen3_coder", None, False),
        ("Qwen__Qwen3-235B-A22B-Instruct-2507-FP8", "fp8", "hermes", "qwen3", False),
        ("openai__gpt-oss-20b", "mxfp4", "openai", "openai_gptoss", False),
        ("meta-llama__Llama-3.1-8B-Instruct", "bf16", "llama3_json", None, False),
        ("deepseek-ai__DeepSeek-V2-Lite-Chat", "bf16", None, None, True),
        ("RedHatAI__Llama-3.3-70B-Instruct-quantized.w8a8", "compressed_tensors", "llama3_json", None, False),
    ],
)
def test_entries_derived_from_published_configs(
    name: str, fmt: str, tool: str | None, reasoning: str | None, mla: bool
) -> None:
    entry = me.model_entry_from_hub(info(name))
    assert set(entry) >= CATALOG_KEYS, CATALOG_KEYS - set(entry)
    assert (
        entry["hf_revision"] == "a" * 40
        and entry["checkpoint_bytes"] == 15
        and entry["checkpoint_shards"] == 2
    )
    assert (entry["quant_format"], entry["tool_call_parser"], entry["reasoning_parser"]) == (
        fmt,
        tool,
        reasoning,
    )
    assert entry["mla"] is mla
    assert ("none:" in entry["parsers_note"]) == (tool is None and reasoning is None)
    assert re.fullmatch(r"[A-Za-z0-9_.-]+", entry["id"])


def test_modelopt_nvfp4_from_the_quant_config_file() -> None:
    quant = json.loads((CONFIGS / "nvidia__DeepSeek-V3-0324-NVFP4.hf_quant_config.json").read_text())
    config = {"model_type": "deepseek_v3", "kv_lora_rank": 512, "torch_dtype": "bfloat16"}
    assert me.quant_format(config, quant) == "modelopt_nvfp4"
    entry = me.model_entry_from_hub(info("Qwen__Qwen3-14B", config=config, hf_quant_config=quant))
    assert entry["hf_quant_config"] == quant and entry["mla"] and entry["tool_call_parser"] == "deepseek_v3"


def test_gguf_only_repository_and_r1_reasoning() -> None:
    entry = me.model_entry_from_hub(
        info("Qwen__Qwen3-14B", repo="unsloth/DeepSeek-R1-GGUF", weight_files={"a-00001-of-00002.gguf": 1})
        | {"config": {"model_type": "deepseek_v3", "kv_lora_rank": 512}}
    )
    assert entry["quant_format"] == "gguf" and entry["reasoning_parser"] == "deepseek_r1"


def test_generic_probes_are_real_questions_with_a_threshold() -> None:
    entry = me.model_entry_from_hub(info("Qwen__Qwen3-14B"))
    probes = entry["quality_probes"]
    assert len(probes) == 5 and entry["quality_min_pass_ratio"] == 0.8
    for probe in probes:
        pattern = re.compile(probe["expect"])
        assert not pattern.search("I cannot answer that.")  # a refusal passes none
        assert probe["max_tokens"] >= 256  # room for a reasoning model's thinking


@pytest.mark.parametrize(
    ("arch", "version", "problem", "note"),
    [
        ("Qwen3ForCausalLM", "0.22.0", "", ""),
        (
            "BailingMoeV3ForCausalLM",
            "0.22.0",
            "vLLM 0.32.0, 0.33.0 has it (llm_vllm_version / --vllm-version)",
            "",
        ),
        (
            "ArcticForCausalLM",
            "0.32.0",
            "vLLM dropped it (its registry names 0.28.0 for it); vLLM 0.22.0 has it",
            "",
        ),
        (
            "BartForConditionalGeneration",
            "0.32.0",
            "out-of-tree plugin https://github.com/vllm-project/bart-plugin",
            "",
        ),
        ("NoSuchForCausalLM", "0.22.0", "no recorded vLLM release has it", ""),
        ("ArceeForCausalLM", "0.32.0", "", "through its Transformers backend"),
        (
            "NoSuchForCausalLM",
            "0.34.0",
            "",
            "not recorded here (recorded: 0.22.0, 0.32.0, 0.33.0); not checked",
        ),
    ],
)
def test_architecture_against_the_release_registry(arch: str, version: str, problem: str, note: str) -> None:
    problems, notes = me.architecture_problems({"architectures": [arch]}, version)
    assert (problem in " ".join(problems)) and (bool(problems) == bool(problem)), problems
    assert (note in " ".join(notes)) and (bool(notes) == bool(note)), notes


def test_every_published_config_is_served_by_both_recorded_releases() -> None:
    for path in sorted(CONFIGS.glob("*.json")):
        if path.name.endswith(".hf_quant_config.json"):
            continue
        config = json.loads(path.read_text())
        for version in ("0.22.0", "0.32.0"):
            assert me.architecture_problems(config, version) == ([], []), (path.name, version)


def test_every_parser_of_the_family_table_is_registered_by_the_recorded_releases() -> None:
    data = json.loads((ROOT / "plugins" / "module_utils" / "vllm_parsers.json").read_text())
    chosen = [*me.PARSERS.values(), *(c for _, _, c in me.NAME_OVERRIDES)]
    for release in ("0.22.0", "0.33.0"):
        for tool, reasoning in chosen:
            assert tool is None or tool in data[release]["tool"], (release, tool)
            assert reasoning is None or reasoning in data[release]["reasoning"], (release, reasoning)


def test_a_parser_the_release_does_not_register_is_refused_with_where_it_is() -> None:
    model = {"tool_call_parser": "minimax", "reasoning_parser": "qwen3"}
    assert me.parser_problems(model, "0.22.0") == []
    (problem,) = me.parser_problems(model, "0.33.0")
    assert "tool parser 'minimax' (tool_call_parser) is not registered in vLLM 0.33.0" in problem
    assert "vLLM 0.22.0 registers it" in problem
    assert me.parser_problems({"tool_call_parser": "nope"}, "0.32.0") == []  # release not recorded
