"""bin/llm-plan: one JSON object, flags as in issue 2, errors that name the flag; runs without Ansible."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest
import yaml

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


def test_not_fitting_prints_the_plan_and_exits_1():
    out = run("--model-config", str(LLAMA), "--gpu-memory-gib", "8", "--tensor-parallel-size", "1", "--json")
    assert out.returncode == 1
    plan = json.loads(out.stdout)
    assert plan["fits"] is False and any("exceed" in r for r in plan["reasons"])
    assert "does not fit: weights" in out.stderr


@pytest.mark.parametrize(
    ("flags", "flag", "says"),
    [
        (["--gpu-memory-gib", "inf"], "--gpu-memory-gib", "finite"),
        (["--gpu-memory-gib", "nan"], "--gpu-memory-gib", "number > 0"),
        (["--gpu-memory-gib", "81920"], "--gpu-memory-gib", "<= 1024"),
        (["--gpu-memory-gib", "80", "--weights-gib-per-gpu", "inf"], "--weights-gib-per-gpu", "finite"),
        (["--gpu-memory-gib", "80", "--checkpoint-gib=-1e400"], "--checkpoint-gib", "number > 0"),
        (["--gpu-memory-gib", "80", "--kv-cache-memory-gib", "200"], "--kv-cache-memory-gib", "does not fit"),
        (["--gpu-memory-gib", "80", "--max-model-len", str(2**40)], "--max-model-len", "<="),
        (["--gpu-memory-gib", "80", "--vllm-version", "0.9.2"], "--vllm-version", "0.10.x to 0.33.x"),
        (["--gpu-memory-gib", "80", "--vllm-version", "1.0.0"], "--vllm-version", "0.10.x to 0.33.x"),
        (["--gpu-memory-gib", "80", "--pipeline-parallel-size", "5000"], "--pipeline-parallel-size", "<="),
        (["--gpu-memory-gib", "80", "--gpu-memory-utilization", "inf"], "--gpu-memory-utilization", "finite"),
    ],
)
def test_numbers_it_cannot_answer_are_refused(flags, flag, says):
    out = run("--model-config", str(LLAMA), "--tensor-parallel-size", "1", *flags, "--json")
    assert out.returncode == 2, out.stdout[-500:]
    assert out.stderr.startswith(f"llm-plan: {flag}: ") and says in out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""


def test_a_context_beyond_the_model_needs_the_override():
    base = ("--model-config", str(LLAMA), "--gpu-memory-gib", "80", "--tensor-parallel-size", "1", "--json")
    refused = run(*base, "--max-model-len", "1048576")
    assert refused.returncode == 1 and "max_position_embeddings" in refused.stderr
    allowed = json.loads(run(*base, "--max-model-len", "1048576", "--allow-long-max-model-len").stdout)
    assert not any("max_position_embeddings" in r for r in allowed["reasons"])
    assert any("max_position_embeddings" in w for w in allowed["warnings"])


def test_default_utilization_and_versions_follow_the_release():
    new = json.loads(run(*BASE, "--max-model-len", "4096", "--json").stdout)
    assert new["layout"]["gpu_memory_utilization"] == 0.92
    assert new["vllm_versions"] == {
        "planned": "0.33.0",
        "modeled": "0.10-0.33",
        "run_on_real_gpus_here": "0.22.0",
    }
    old = json.loads(run(*BASE, "--max-model-len", "4096", "--vllm-version", "0.19.1", "--json").stdout)
    assert old["layout"]["gpu_memory_utilization"] == 0.9
    out = run(*BASE, "--vllm-version", "0.34.0")
    assert out.returncode == 2 and "--vllm-version" in out.stderr and "0.10.x to 0.33.x" in out.stderr


def test_engine_sglang_adds_sglangs_own_kv_pool(tmp_path):
    """--engine sglang: the figure the deploy planned for the tiny model on the lent H200, which SGLang
    0.5.17 then allocated within 0.05 % (tests/unit/test_h200_gguf_sglang_run.py)."""
    entry = yaml.safe_load((ROOT / "catalog" / "models" / "tiny_test.yml").read_text())["llm_model"]
    config = tmp_path / "config.json"
    config.write_text(json.dumps(entry["hf_config"] | {"torch_dtype": "bfloat16"}))
    args = ("--model-config", str(config), "--gpu-memory-gib", "139.8", "--tensor-parallel-size", "1")
    args += ("--max-model-len", "256", "--vllm-version", "0.22.0", "--gpu-memory-utilization", "0.9")
    args += ("--checkpoint-gib", str(entry["checkpoint_bytes"] / 2**30), "--engine", "sglang")
    out = run(*args, "--compute-capability", "9.0", "--json")
    assert out.returncode == 0, out.stderr
    sglang = json.loads(out.stdout)["sglang"]
    assert sglang["max_total_tokens"] == 131_656_214 and sglang["mem_fraction_static"] == 0.903
    table = run(*args, "--compute-capability", "9.0")
    assert "SGLang 0.5.17 accounting: mem_fraction_static 0.903 (its default rule)" in table.stdout
    assert "131,656,214 tokens (bfloat16, attention backend fa3)" in table.stdout
    given = json.loads(run(*args, "--mem-fraction-static", "0.5", "--json").stdout)["sglang"]
    assert given["mem_fraction_static"] == 0.5 and not given["mem_fraction_static_default"]
    assert given["max_total_tokens"] < sglang["max_total_tokens"] * 0.6
