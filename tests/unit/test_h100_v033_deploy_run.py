"""vLLM 0.33.0 (the default pin, torch 2.14.0) through deploy_tiny.yml on the lent one-GPU H100.

tests/fixtures/h100x1_v033_deploy/ holds what tests/gpu/deploy_v033_on_gpu.sh's `setup chat collect`
returned on 2026-12-07: the playbook log, the engine log, serve_verify's report and the step status. The
planner is held to the bar of the other recordings: tokens from the logged KV memory within 0.5 %, KV memory
from the logged weights within 3 %.
"""

from __future__ import annotations

import json
from pathlib import Path

from _gpu_runs import ROOT, card_gib, recap, vllm_log_records
from _gpu_runs import plan as _plan

RUN = ROOT / "tests" / "fixtures" / "h100x1_v033_deploy"


def logged() -> dict:
    return vllm_log_records.parse_log((RUN / "engine_chat.log").read_text())


def plan(tmp: Path, **given: float) -> dict:
    return _plan(tmp, "tiny_test", card_gib("h100_x1"), "0.33.0", 256, **given)


def test_the_bare_machine_deploy_passed_on_vllm_0_33() -> None:
    counts = recap((RUN / "deploy_chat.log").read_text())
    assert counts["failed"] == 0 and counts["unreachable"] == 0
    assert counts["changed"] > 0  # a bare machine: the venv, the weights and the service were made
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
