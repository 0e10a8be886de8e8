"""serve_verify end to end: real vLLM (CPU build) serving a tiny model, the role run by ansible-playbook.

The same tiny Llama shape is served twice, one server at a time: with random weights (garbage: the quality
gate must fail and say so) and trained for a few seconds by tests/models/train_tiny_chat.py to answer the
probes, think in <think> tags and call get_weather (everything must pass). The vLLM venv (.venv-vllm) and
the models (.cache/serve_verify/, keyed by the trainer's and the probes' hash) are built on first use.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from tiny_vllm import API_KEY, VLLM_PY, planned_kv_tokens, role_vars, run_role, tiny_models, vllm_server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", name="models")
def _models() -> dict[str, Path]:
    return tiny_models()


def changed_count(stdout: str) -> int:
    line = next(ln for ln in stdout.splitlines() if ln.startswith("localhost") and "changed=" in ln)
    return int(line.split("changed=")[1].split()[0])


def check(report: dict, name: str) -> dict:
    return next(c for c in report["checks"] if c["name"] == name)


def test_bad_input_fails_before_any_request(tmp_path: Path) -> None:
    res = run_role(tmp_path, {"serve_verify_base_url": "localhost:8000", "serve_verify_model": "x"})
    assert res.returncode != 0
    assert "serve_verify_base_url must be an http(s) URL" in res.stdout
    assert "Send health" not in res.stdout
    bad_probe = {"prompt": "hi", "expect": "(unclosed", "max_tokens": 8}
    res = run_role(
        tmp_path,
        {"serve_verify_base_url": "http://127.0.0.1:9", "serve_verify_model": "x", "llm_model": {
            "quality_probes": [bad_probe], "quality_min_pass_ratio": 1.0}},
    )  # fmt: skip
    assert res.returncode != 0
    assert "serve_verify_probes: item 0 expect '(unclosed' is not a regular expression" in res.stdout


def test_random_weights_fail_the_gate(models: dict[str, Path], tmp_path: Path) -> None:
    log = tmp_path / "vllm-random.log"
    with vllm_server(models["random"], log) as base:
        start = time.monotonic()
        res = run_role(
            tmp_path, role_vars(base, log, tmp_path / "report", serve_verify_concurrency_levels=[1])
        )
        print(f"role run on random weights: {time.monotonic() - start:.1f} s")
    assert res.returncode != 0, res.stdout[-3000:]
    assert "serve_verify FAILED for tiny-chat" in res.stdout
    assert "garbage output" in res.stdout
    assert "Engine log tail (" in res.stdout and "KV cache size" in log.read_text()
    assert API_KEY not in res.stdout + res.stderr

    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["passed"] is False
    quality = check(report, "quality")
    assert not quality["passed"] and "garbage output" in quality["hint"]
    # Real inference: every probe got an answer from the engine, and it was not the taught one.
    probes = report["quality"]["probes"]
    assert len(probes) == 6 and all(p["status"] == 200 for p in probes)
    assert report["quality"]["pass_ratio"] < report["quality"]["min_pass_ratio"]
    assert check(report, "health")["passed"] and check(report, "models")["passed"]
    assert report["log_tail"], "a failed report keeps the engine log tail"
    assert "## Failures" in (tmp_path / "report" / "report.md").read_text()


def test_trained_model_passes_and_reports(models: dict[str, Path], tmp_path: Path) -> None:
    log = tmp_path / "vllm-trained.log"
    model = models["trained"]
    report_dir = tmp_path / "report"
    planned = planned_kv_tokens(model)
    with vllm_server(model, log) as base:
        start = time.monotonic()
        res = run_role(tmp_path, role_vars(base, log, report_dir, serve_verify_planned_kv_tokens=planned))
        print(f"role run on trained weights: {time.monotonic() - start:.1f} s")
        assert res.returncode == 0, res.stdout[-4000:]
        first = json.loads((report_dir / "report.json").read_text())
        # Check mode sends the same read-only requests, prints the report and writes nothing.
        check_dir = tmp_path / "check-only"
        again = run_role(
            tmp_path, role_vars(base, log, check_dir, serve_verify_planned_kv_tokens=planned), True
        )
        assert again.returncode == 0, again.stdout[-3000:]
        assert changed_count(again.stdout) == 0
        assert not check_dir.exists()
        wrong = run_role(tmp_path, role_vars(base, log, tmp_path / "wrong", serve_verify_model="other-name"))
    assert API_KEY not in res.stdout + res.stderr + again.stdout + again.stderr

    assert first["passed"] is True and first["failures"] == [] and first["log_tail"] == []
    assert first["engine_version"] == "0.32.0"
    names = {c["name"]: c for c in first["checks"]}
    assert set(names) >= {"health", "models", "chat", "quality", "tool_call_required", "tool_call_named",
                          "reasoning_split", "throughput", "kv_cache"}  # fmt: skip
    assert all(c["passed"] for c in names.values()), names
    assert names["tool_call_required"]["detail"].startswith('get_weather({"city": "Paris"})')
    assert names["tool_call_named"]["detail"].startswith('get_weather({"city": "Paris"})')
    probes = first["quality"]["probes"]
    assert first["quality"]["pass_ratio"] == 1.0 and all(p["reasoning"] for p in probes)
    assert not any("<think>" in p["answer"] for p in probes)
    assert first["kv_cache"] == {"planned_tokens": planned, "observed_tokens": planned, "pool": "CPU",
                                 "available_kv_gib": []}  # fmt: skip
    tp = first["throughput"]
    assert tp["engine_decode_tok_s"] > 0 and tp["single_stream_ttft_s"] > 0
    assert [lv["concurrency"] for lv in tp["levels"]] == [1, 2, 4]
    assert all(lv["ok"] == lv["requests"] and lv["aggregate_tok_s"] > 0 for lv in tp["levels"])
    # /metrics sampled while the levels ran saw requests in flight (an idle server reports 0).
    assert max(lv["peak_num_requests_running"] or 0 for lv in tp["levels"]) >= 1
    assert (
        first["metrics"]["after"]["vllm:generation_tokens_total"]
        > first["metrics"]["before"]["vllm:generation_tokens_total"]
    )
    md = (report_dir / "report.md").read_text()
    assert "# serve_verify: tiny-chat (PASS)" in md and "| tool_call_named | pass |" in md
    assert "| concurrency | ok | aggregate tok/s |" in md
    print("\n".join(md.splitlines()[-24:]))

    assert wrong.returncode != 0
    assert "'tiny-chat'" not in wrong.stdout or "is not served" in wrong.stdout
    assert "'other-name' is not served: set --served-model-name other-name" in wrong.stdout


@pytest.mark.parametrize("kind", ["trained", "random"])
def test_sglangs_hermes_tool_tag_gets_an_arguments_object_only_from_the_trained_model(
    models: dict[str, Path], kind: str
) -> None:
    """SGLang 0.5.17 constrains tool_choice required/named with hermes to its own structural tag (any JSON
    value after '"arguments":'); on the 2026-12-07 GPU run the model wrote the string ", " there. Decoded
    here with xgrammar, SGLang's grammar engine: the trained model writes the object, random weights not."""
    checker = Path(__file__).resolve().parents[1] / "models" / "check_sglang_tool_form.py"
    res = subprocess.run(
        [str(VLLM_PY), str(checker), str(models[kind])],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode in (0, 1), res.stderr[-2000:]
    result = json.loads(res.stdout)
    if kind == "trained":
        assert res.returncode == 0, result
        assert result["call"] == {"name": "get_weather", "arguments": {"city": "Paris"}}
        assert result["reasoning"].startswith("<think>")
    else:
        assert res.returncode == 1, result
        assert not result["ok"]
