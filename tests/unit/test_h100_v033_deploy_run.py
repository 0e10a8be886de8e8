"""vLLM 0.33.0 (the default pin, torch 2.14.0) through deploy_tiny.yml on the lent one-GPU H100.

tests/fixtures/h100x1_v033_deploy/ holds what tests/gpu/deploy_v033_on_gpu.sh's `setup chat collect`
returned on 2026-12-07: the playbook log, the engine log, serve_verify's report and the step status. The
planner is held to the bar of the other recordings: tokens from the logged KV memory within 0.5 %, KV memory
from the logged weights within 3 %.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "tests" / "fixtures" / "h100x1_v033_deploy"
CLI = ROOT / "bin" / "llm-plan"

_spec = importlib.util.spec_from_file_location("vllm_log_records", ROOT / "tests/gpu/vllm_log_records.py")
vllm_log_records = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(vllm_log_records)


def logged() -> dict:
    return vllm_log_records.parse_log((RUN / "engine_chat.log").read_text())


def plan(tmp: Path, **given: float) -> dict:
    entry = yaml.safe_load((ROOT / "catalog/models/tiny_test.yml").read_text())["llm_model"]
    config = tmp / "config.json"
    config.write_text(json.dumps(entry["hf_config"] | {"torch_dtype": "bfloat16"}))
    card = yaml.safe_load((ROOT / "catalog/hardware/h100_x1.yml").read_text())["llm_hardware"]
    args = ["--model-config", str(config), "--gpu-memory-gib", str(card["gpu_memory_gib"])]
    args += ["--tensor-parallel-size", "1", "--gpu-memory-utilization", "0.9", "--max-model-len", "256"]
    args += ["--vllm-version", "0.33.0", "--json"]
    for key, value in given.items():
        args += ["--" + key.replace("_", "-"), str(value)]
    out = subprocess.run([sys.executable, str(CLI), *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_the_bare_machine_deploy_passed_on_vllm_0_33() -> None:
    log = (RUN / "deploy_chat.log").read_text()
    recap = dict(re.findall(r"(\w+)=(\d+)", log.split("PLAY RECAP", 1)[1].splitlines()[1]))
    assert recap["failed"] == "0" and recap["unreachable"] == "0"
    assert int(recap["changed"]) > 0  # a bare machine: the venv, the weights and the service were made
    assert "NVIDIA H100 80GB HBM3" in (RUN / "gpu.txt").read_text()
    assert logged()["vllm_version"] == "0.33.0"


def test_serve_verify_passed_every_check() -> None:
    report = json.loads((RUN / "serve_verify_chat.json").read_text())
    assert report["passed"] is True and report["engine_version"] == "0.33.0"
    names = {c["name"]: c["passed"] for c in report["checks"]}
    for name in ("health", "chat", "quality", "tool_call_required", "tool_call_named", "reasoning_split"):
        assert names[name] is True, name
    assert names["kv_cache"] is True
    assert report["kv_cache"]["observed_tokens"] == logged()["kv_cache_tokens"]


def test_planner_against_the_engine(tmp_path: Path) -> None:
    start = logged()
    from_kv = plan(tmp_path, kv_cache_memory_gib=start["kv_cache_gib"])
    token_err = from_kv["kv_cache_tokens"] / start["kv_cache_tokens"] - 1
    assert abs(token_err) <= 0.005, f"tokens off by {token_err:+.3%}"
    # The log rounds the tiny model's weights to 0.0 GiB.
    from_weights = plan(tmp_path, weights_gib_per_gpu=max(start["weights_gib_per_gpu"], 0.01))
    kv_err = from_weights["kv_cache_gib_per_gpu"] / start["kv_cache_gib"] - 1
    assert abs(kv_err) <= 0.03, f"KV memory off by {kv_err:+.2%}"
