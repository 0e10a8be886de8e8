"""The deploy playbooks' run on the lent one-GPU H200 (tests/gpu/deploy_on_gpu.sh), checked from its outputs.

tests/fixtures/h200x1_deploy/ holds what came back: the ansible-playbook logs, the engine log (every start
of the supervisord program, in order), supervisord's log, the launch spec and serve_verify's report. The
planner is held to the same bar as the other recorded logs: the token count from the logged KV memory within
0.5 %, the KV memory from the logged weights within 3 %.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from _gpu_runs import ROOT, recap, vllm_log_records
from _gpu_runs import plan as _plan

RUN = ROOT / "tests" / "fixtures" / "h200x1_deploy"
H200_GIB = 139.8  # catalog/hardware/h200_x1.yml, torch's figure for the card


def engine_starts(log: str) -> list[dict]:
    """One record per engine start: the model it loaded and the figures it logged."""
    blocks = re.split(r"(?=\(EngineCore pid=\d+\) INFO [^\n]*Initializing a V1 LLM engine)", log)[1:]
    starts = []
    for block in blocks:
        figures = vllm_log_records.parse_log(block)
        figures["model"] = re.search(r"model='([^']+)'", block).group(1)
        starts.append(figures)
    return starts


def plan(tmp: Path, model: str, max_model_len: int, **given: float) -> dict:
    return _plan(tmp, model, H200_GIB, "0.22.0", max_model_len, **given)


CHAT_STARTS = engine_starts((RUN / "engine_chat.log").read_text())
DSV3_LOG_STARTS = engine_starts((RUN / "engine_dsv3_and_rollback.log").read_text())


def test_the_engine_starts_in_order() -> None:
    # Chat deploy (one start; the unchanged re-run started nothing), then the DeepSeek-V3 deploy, then the
    # rollback onto the chat model once serve_verify refused the DeepSeek-V3 answers.
    assert [s["model"] for s in CHAT_STARTS] == ["/srv/llm-src/tiny-chat"]
    assert [s["model"] for s in DSV3_LOG_STARTS] == [
        "/srv/llm-src/tiny-chat",
        "/srv/llm-src/dsv3_mla",
        "/srv/llm-src/tiny-chat",
    ]
    assert {s["vllm_version"] for s in DSV3_LOG_STARTS} == {"0.22.0"}
    supervisord = (RUN / "supervisord.log").read_text()
    assert supervisord.count("spawned: 'vllm'") == 1 and "entered RUNNING state" in supervisord


@pytest.mark.parametrize(
    ("model", "start", "max_model_len"),
    [("tiny_test", CHAT_STARTS[0], 256), ("tiny_dsv3", DSV3_LOG_STARTS[1], 8192)],
    ids=["chat_llama", "dsv3_mla_moe"],
)
def test_planner_against_the_engine(tmp_path: Path, model: str, start: dict, max_model_len: int) -> None:
    assert start["kv_cache_tokens"] == pytest.approx(start["max_concurrency"] * max_model_len, rel=1e-4)
    from_kv = plan(tmp_path, model, max_model_len, kv_cache_memory_gib=start["kv_cache_gib"])
    token_err = from_kv["kv_cache_tokens"] / start["kv_cache_tokens"] - 1
    assert abs(token_err) <= 0.005, f"{model}: tokens off by {token_err:+.3%}"
    # "Model loading took 0.0 GiB" for the 5 MB chat model: the planner's floor stands in for it.
    weights = max(start["weights_gib_per_gpu"], 0.01)
    from_weights = plan(tmp_path, model, max_model_len, weights_gib_per_gpu=weights)
    kv_err = from_weights["kv_cache_gib_per_gpu"] / start["kv_cache_gib"] - 1
    assert abs(kv_err) <= 0.03, f"{model}: KV memory off by {kv_err:+.2%}"


def test_the_deploy_planned_what_the_engine_allocated() -> None:
    log = (RUN / "deploy_chat.log").read_text()
    planned = int(re.search(r"Verdict: FITS: .*?\(([\d,]+) KV tokens", log).group(1).replace(",", ""))
    observed = CHAT_STARTS[0]["kv_cache_tokens"]
    assert abs(planned / observed - 1) <= 0.005
    report = json.loads((RUN / "serve_verify_chat.json").read_text())
    assert report["kv_cache"]["planned_tokens"] == planned
    assert report["kv_cache"]["observed_tokens"] == observed


def test_chat_deploy_verified_and_the_rerun_changed_nothing() -> None:
    first = recap((RUN / "deploy_chat.log").read_text())
    again = recap((RUN / "deploy_chat_again.log").read_text())
    assert first["failed"] == 0 and first["changed"] > 0
    assert again["failed"] == 0 and again["changed"] == 0
    report = json.loads((RUN / "serve_verify_chat.json").read_text())
    assert report["passed"] is True
    checks = {c["name"]: c["passed"] for c in report["checks"]}
    for name in ("health", "chat", "quality", "tool_call_required", "tool_call_named", "reasoning_split"):
        assert checks[name], name
    assert report["quality"]["pass_ratio"] == 1.0
    assert report["engine_version"] == "0.22.0"
    assert report["gpu_facts"]["gpus"][0]["name"] == "NVIDIA H200"


def test_the_service_ran_from_the_base_torch_venv_without_secrets_in_argv() -> None:
    spec = json.loads((RUN / "vllm.launch.json").read_text())
    assert spec["user"] == "vllm" and spec["argv"][0].startswith("/opt/ml-env.releases/")
    assert "--host" in spec["argv"] and spec["argv"][spec["argv"].index("--host") + 1] == "127.0.0.1"
    assert not any("key" in a.lower() or "token" in a.lower() for a in spec["argv"])
    log = (RUN / "deploy_chat.log").read_text()
    assert "checked in place (headers, index and sizes); nothing downloaded" in " ".join(log.split())
