"""bin/llm-plan: one JSON object, flags as in issue 2, errors that name the flag; runs without Ansible."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = ROOT / "bin" / "llm-plan"
LLAMA = ROOT / "tests" / "data" / "model_configs" / "meta-llama__Llama-3.1-8B-Instruct.json"
DSV2 = ROOT / "tests" / "data" / "model_configs" / "deepseek-ai__DeepSeek-V2-Lite-Chat.json"


def run(*args: str) -> subprocess.CompletedProcess:
    # -S: no site-packages, so the CLI must work with the standard library alone (no Ansible).
    return subprocess.run(
        [sys.executable, "-S", str(CLI), *args], capture_output=True, text=True, timeout=60, check=False
    )


BASE = ("--model-config", str(LLAMA), "--gpu-memory-gib", "79.19", "--tensor-parallel-size", "1")


def test_cli_is_executable():
    assert CLI.stat().st_mode & 0o111


def test_json_output_is_one_object_with_the_documented_keys():
    out = run(
        *BASE,
        "--gpu-memory-utilization",
        "0.95",
        "--max-model-len",
        "8192",
        "--kv-cache-memory-gib",
        "58.11",
        "--vllm-version",
        "0.19.0",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    for key in (
        "weights_gib_per_gpu",
        "kv_cache_gib_per_gpu",
        "kv_bytes_per_token",
        "kv_cache_tokens",
        "max_concurrency",
        "fits",
        "reasons",
    ):
        assert key in plan
    assert plan["kv_cache_tokens"] == 476032  # 58.11 GiB / 131072 B per token, whole 16-token blocks
    assert plan["kv_bytes_per_token"] == 131072
    assert plan["fits"] is True


def test_every_documented_flag_is_accepted():
    out = run(
        "--model-config",
        str(DSV2),
        "--gpu-memory-gib",
        "80",
        "--tensor-parallel-size",
        "2",
        "--pipeline-parallel-size",
        "1",
        "--data-parallel-size",
        "2",
        "--enable-expert-parallel",
        "--decode-context-parallel-size",
        "2",
        "--gpu-memory-utilization",
        "0.9",
        "--kv-cache-dtype",
        "fp8",
        "--max-model-len",
        "32768",
        "--max-num-seqs",
        "128",
        "--max-num-batched-tokens",
        "4096",
        "--checkpoint-gib",
        "29.3",
        "--vllm-version",
        "0.22.0",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["layout"]["decode_context_parallel_size"] == 2
    assert plan["layout"]["enable_expert_parallel"] is True
    assert plan["max_num_seqs"] == 128 and plan["kv_cache_dtype"] == "fp8"


def test_vllm_switches_change_the_plan():
    base = json.loads(run(*BASE, "--json").stdout)
    eager = json.loads(run(*BASE, "--enforce-eager", "--json").stdout)
    assert eager["cudagraph_gib"] == 0 and eager["kv_cache_gib_per_gpu"] > base["kv_cache_gib_per_gpu"]


def test_table_output_without_json():
    out = run(*BASE, "--max-model-len", "8192")
    assert out.returncode == 0
    assert "KV cache tokens" in out.stdout and "fits" in out.stdout
    with pytest.raises(json.JSONDecodeError):
        json.loads(out.stdout)


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (("--gpu-memory-gib", "80", "--tensor-parallel-size", "1"), "--model-config"),
        (("--model-config", str(LLAMA), "--gpu-memory-gib", "80"), "--tensor-parallel-size"),
        (("--model-config", str(LLAMA), "--tensor-parallel-size", "1"), "--gpu-memory-gib"),
        ((*BASE, "--gpu-memory-utilization", "1.5"), "--gpu-memory-utilization"),
        ((*BASE, "--gpu-memory-utilization", "lots"), "--gpu-memory-utilization"),
        ((*BASE, "--kv-cache-dtype", "int4"), "--kv-cache-dtype"),
        ((*BASE, "--weights-gib-per-gpu", "5", "--checkpoint-gib", "10"), "--checkpoint-gib"),
        ((*BASE, "--vllm-version", "latest"), "--vllm-version"),
        ((*BASE, "--max-model-len", "-5"), "--max-model-len"),
        ((*BASE, "--kv-cache-memory-gib", "0"), "--kv-cache-memory-gib"),
        (
            (
                "--model-config",
                "/nonexistent/config.json",
                "--gpu-memory-gib",
                "80",
                "--tensor-parallel-size",
                "1",
            ),
            "--model-config",
        ),
    ],
)
def test_bad_input_exits_non_zero_naming_the_flag(args, flag):
    out = run(*args, "--json")
    assert out.returncode != 0
    assert flag in out.stderr
    assert out.stdout == ""


def test_config_without_required_key_names_model_config(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"num_hidden_layers": 2, "num_attention_heads": 2, "vocab_size": 10}))
    out = run("--model-config", str(cfg), "--gpu-memory-gib", "80", "--tensor-parallel-size", "1", "--json")
    assert out.returncode == 2
    assert "--model-config" in out.stderr and "hidden_size" in out.stderr


def test_invalid_json_config(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text("{not json")
    out = run("--model-config", str(cfg), "--gpu-memory-gib", "80", "--tensor-parallel-size", "1")
    assert out.returncode == 2 and "--model-config" in out.stderr


def test_layout_vllm_refuses_exits_1_with_the_plan():
    out = run("--model-config", str(LLAMA), "--gpu-memory-gib", "80", "--tensor-parallel-size", "3", "--json")
    assert out.returncode == 1
    assert "--tensor-parallel-size" in out.stderr
    plan = json.loads(out.stdout)
    assert plan["fits"] is False and plan["input_errors"]


def test_not_fitting_is_a_valid_answer():
    out = run("--model-config", str(LLAMA), "--gpu-memory-gib", "8", "--tensor-parallel-size", "1", "--json")
    assert out.returncode == 0
    plan = json.loads(out.stdout)
    assert plan["fits"] is False and any("exceed" in r for r in plan["reasons"])
