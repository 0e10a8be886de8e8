"""Judge serve_verify's observations of an OpenAI-compatible endpoint and render its report.

The serve_verify_probe module only records what the endpoint answered; these pure functions decide what
passed, say what the likely cause of a failure is, read the engine log and /metrics, and format the
Markdown report. Stdlib + ansible only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError

TOOL_NAME = "get_weather"
TOOL_REQUIRED_ARGS = ("city",)
REPORT_METRICS = (
    "vllm:kv_cache_usage_perc",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
)
THINK_TAGS = ("<think>", "</think>")

HINT_GARBAGE = (
    "garbage output: the model does not answer probes with known answers. Typical causes: a quantization, "
    "loader or attention-backend change that corrupts the computation (compare with an unquantized or "
    "previous engine), the wrong checkpoint revision or tokenizer, or a chat template that does not match "
    "the model."
)
HINT_TOOL_PARSER = (
    "tool parser missing: start the server with --enable-auto-tool-choice --tool-call-parser <name> "
    "(catalog llm_model.tool_call_parser)."
)
HINT_TOOL_FORMAT = (
    "the model's tool-call output did not parse into a call with valid JSON arguments: the tool parser "
    "'{parser}' may not match this model's tool-call format, or the output is garbage."
)
HINT_REASONING_MISMATCH = (
    "reasoning parser mismatch: the answer still carries think tags and no reasoning field came back. "
    "Start the server with --reasoning-parser <name> matching the model's think tokens "
    "(configured here: '{parser}')."
)
HINT_REASONING_UNCLOSED = (
    "reasoning never ended: every reply went into the reasoning field and left no answer. Either the output "
    "is garbage, the probes' max_tokens is too small for this model's thinking, or the reasoning parser "
    "'{parser}' does not match the model's end-of-thinking token."
)


def _fail(filter_name: str, message: str) -> AnsibleFilterError:
    return AnsibleFilterError(f"{filter_name}: {message}")


def probe_errors(probes: Any) -> list[str]:
    """Problems with a probe list (empty when fine): each needs a prompt, a valid regex and max_tokens > 0."""
    if not isinstance(probes, Sequence) or isinstance(probes, str):
        return [f"expected a list of {{prompt, expect, max_tokens}}, got {type(probes).__name__}"]
    errors = []
    for i, probe in enumerate(probes):
        if not isinstance(probe, Mapping):
            errors.append(f"item {i} is not a mapping")
            continue
        if not isinstance(probe.get("prompt"), str) or not probe["prompt"]:
            errors.append(f"item {i} has no prompt")
        try:
            re.compile(str(probe.get("expect", "")))
        except re.error as err:
            errors.append(f"item {i} expect {probe.get('expect')!r} is not a regular expression ({err})")
        if "expect" not in probe:
            errors.append(f"item {i} has no expect (a regular expression the answer must match)")
        tokens = probe.get("max_tokens", 32)
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
            errors.append(f"item {i} max_tokens must be a positive integer, got {tokens!r}")
    return errors


def kv_from_log(text: str) -> dict[str, Any]:
    """KV facts from the engine's log: tokens and pool ('GPU', 'CPU'), and available KV memory per rank.
    vLLM: 'GPU KV cache size: N tokens'; SGLang: the scheduler's 'max_total_num_tokens=N' (pool 'GPU')."""
    if not isinstance(text, str):
        raise _fail("serve_verify_kv_from_log", f"expected the log as a string, got {type(text).__name__}")
    sizes = re.findall(r"(GPU|CPU|XPU|TPU)(?: \+ host)? KV cache size: ([\d,]+) tokens", text)
    mem = re.findall(r"Available KV cache memory: ([\d.]+) GiB", text)
    out: dict[str, Any] = {"kv_cache_tokens": None, "kv_cache_pool": None, "available_kv_gib": []}
    sglang = re.findall(r"max_total_num_tokens=(\d+)", text)
    if sizes:
        pool, tokens = sizes[-1]
        out["kv_cache_tokens"] = int(tokens.replace(",", ""))
        out["kv_cache_pool"] = pool
    elif sglang:
        out["kv_cache_tokens"] = int(sglang[-1])
        out["kv_cache_pool"] = "GPU"
    if mem:
        # One line per worker at each start; keep the last start's lines (as many as there were ranks).
        last_start = text.rfind("Starting vLLM") if "Starting vLLM" in text else 0
        recent = re.findall(r"Available KV cache memory: ([\d.]+) GiB", text[last_start:]) or mem[-1:]
        out["available_kv_gib"] = [float(x) for x in recent]
    return out


_METRIC_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text exposition -> {metric name: value summed over its label sets}."""
    if not isinstance(text, str):
        raise _fail("serve_verify_parse_metrics", f"expected Prometheus text, got {type(text).__name__}")
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _METRIC_LINE.match(line)
        if not match:
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        out[match.group(1)] = out.get(match.group(1), 0.0) + value
    return out


def _message(rec: Mapping[str, Any]) -> dict[str, Any]:
    try:
        return rec["json"]["choices"][0]["message"] or {}
    except (KeyError, IndexError, TypeError):
        return {}


def _reasoning(msg: Mapping[str, Any]) -> str:
    # vLLM 0.32 returns `reasoning`; older releases (and some servers) `reasoning_content`.
    return msg.get("reasoning") or msg.get("reasoning_content") or ""


def _error_text(rec: Mapping[str, Any]) -> str:
    if rec.get("error"):
        return str(rec["error"])[:300]
    body = rec.get("json")
    if isinstance(body, Mapping) and "error" in body:
        err = body["error"]
        return str(err.get("message", err) if isinstance(err, Mapping) else err)[:300]
    return str(rec.get("text", ""))[:300]


def _check(name: str, passed: bool, detail: str, hint: str = "") -> dict[str, Any]:
    return {"name": name, "passed": bool(passed), "detail": detail, "hint": "" if passed else hint}


def _http_check(name: str, rec: Mapping[str, Any] | None, hint: str) -> dict[str, Any] | None:
    """A failed check if the request did not get HTTP 200, else None."""
    if rec is None:
        return _check(name, False, "not attempted (an earlier check failed)", hint)
    if rec.get("status") != 200:
        return _check(name, False, f"HTTP {rec.get('status')}: {_error_text(rec)}", hint)
    return None


def _models_check(rec: Mapping[str, Any] | None, model: str) -> dict[str, Any]:
    failed = _http_check("models", rec, "GET /v1/models failed; check the API key and the service log.")
    if failed:
        return failed
    ids = [m.get("id") for m in (rec or {}).get("json", {}).get("data", [])]
    return _check(
        "models",
        model in ids,
        f"served: {', '.join(map(str, ids)) or 'none'}",
        f"'{model}' is not served: set --served-model-name {model} or serve_verify_model to one of these.",
    )


def _chat_check(rec: Mapping[str, Any] | None) -> dict[str, Any]:
    failed = _http_check("chat", rec, "a plain chat completion failed; see the service journal below.")
    if failed:
        return failed
    msg = _message(rec or {})
    text = (msg.get("content") or "") + _reasoning(msg)
    usage = (rec or {}).get("json", {}).get("usage") or {}
    prompt, completion, total = (usage.get(k) for k in ("prompt_tokens", "completion_tokens", "total_tokens"))
    adds_up = None not in (prompt, completion, total) and prompt + completion == total and completion > 0
    return _check(
        "chat",
        bool(text) and adds_up,
        f"{len(text)} chars; usage prompt {prompt} + completion {completion} = total {total}",
        "the completion came back empty or its token usage does not add up (prompt + completion != total).",
    )


def _probe_results(probes: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for rec in probes:
        msg = _message(rec)
        answer = msg.get("content") or ""
        try:
            hit = rec.get("status") == 200 and re.search(str(rec["expect"]), answer) is not None
        except re.error as err:
            raise _fail(
                "serve_verify_report", f"probe expect {rec['expect']!r} is not a regex: {err}"
            ) from err
        out.append(
            {
                "prompt": rec.get("prompt"),
                "expect": rec.get("expect"),
                "passed": hit,
                "answer": answer[:200],
                "reasoning": _reasoning(msg)[:200],
                "status": rec.get("status"),
                "error": "" if rec.get("status") == 200 else _error_text(rec),
                "seconds": rec.get("seconds"),
            }
        )
    return out


# Checkpoint formats whose answers must pass the model's quality probes before the endpoint is called usable:
# a GGUF quant can load and answer fluently while being wrong (the reference story's GLM-5 UD-Q4_K_XL).
PROBES_REQUIRED_FORMATS = ("gguf",)
HINT_QUANT_UNPROBED = (
    "quantized weights can load and answer fluently yet wrongly, so such an endpoint is called usable only "
    "after the model's own probes pass: add quality_probes to its catalog entry (serve_verify_probes)"
)


def quantization_summary(quant: Any) -> dict[str, Any] | None:
    """The checkpoint's quantization as the report shows it; None when the deploy gave none."""
    if not isinstance(quant, Mapping) or not quant.get("format"):
        return None
    fmt = str(quant["format"]).lower()
    bits = quant.get("bits_per_weight")
    return {
        "format": fmt,
        "level": str(quant.get("level") or "") or None,
        "file_type": str(quant.get("file_type") or "") or None,
        "bits_per_weight": float(bits)
        if isinstance(bits, int | float) and not isinstance(bits, bool)
        else None,
        "probes_required": fmt in PROBES_REQUIRED_FORMATS,
    }


def _quality_check(
    results: Sequence[Mapping[str, Any]], min_ratio: float, quant: Mapping[str, Any] | None = None
) -> tuple[dict[str, Any], float]:
    if not results:
        if quant and quant["probes_required"]:
            what = " ".join(x for x in (quant["format"].upper(), quant["level"]) if x)
            return (
                _check("quality", False, f"a {what} checkpoint with no quality probes", HINT_QUANT_UNPROBED),
                0.0,
            )
        return _check("quality", True, "no probes configured"), 1.0
    passed = sum(r["passed"] for r in results)
    ratio = passed / len(results)
    worst = next((r for r in results if not r["passed"]), None)
    sample = (
        f"; e.g. {worst['prompt']!r} -> {(worst['answer'] or worst['reasoning'])[:80]!r}" if worst else ""
    )
    return (
        _check(
            "quality",
            ratio >= min_ratio,
            f"{passed}/{len(results)} probes answered (pass ratio {ratio:.2f}, need {min_ratio:.2f}){sample}",
            HINT_GARBAGE,
        ),
        ratio,
    )


def _tool_check(mode: str, rec: Mapping[str, Any] | None, parser: str) -> dict[str, Any]:
    name = f"tool_call_{mode}"
    if rec is None:
        return _check(name, False, "not attempted", HINT_TOOL_PARSER)
    if rec.get("status") != 200:
        err = _error_text(rec)
        hint = HINT_TOOL_PARSER if re.search(r"tool", err, re.I) else HINT_TOOL_FORMAT.format(parser=parser)
        return _check(name, False, f"HTTP {rec.get('status')}: {err}", hint)
    msg = _message(rec)
    calls = msg.get("tool_calls") or []
    if not calls:
        content = (msg.get("content") or "")[:120]
        return _check(
            name, False, f"no tool call; content {content!r}", HINT_TOOL_FORMAT.format(parser=parser)
        )
    fn = calls[0].get("function") or {}
    try:
        args = json.loads(fn.get("arguments") or "")
    except ValueError:
        args = None
    ok = fn.get("name") == TOOL_NAME and isinstance(args, dict) and all(k in args for k in TOOL_REQUIRED_ARGS)
    detail = f"{fn.get('name')}({str(fn.get('arguments'))[:120]})"
    if not ok:
        # The engine parsed the call from text the reply may still carry: shown, since the parsed call alone
        # does not tell a grammar that was not applied from a model that wrote the wrong thing inside it.
        detail += f"; content {(msg.get('content') or '')[:120]!r}; reasoning {_reasoning(msg)[:120]!r}"
    return _check(
        name,
        ok,
        detail,
        HINT_TOOL_FORMAT.format(parser=parser)
        + f" Expected {TOOL_NAME} with a JSON object holding {', '.join(TOOL_REQUIRED_ARGS)}.",
    )


def _reasoning_check(recs: Sequence[Mapping[str, Any]], parser: str) -> dict[str, Any]:
    msgs = [_message(r) for r in recs if r.get("status") == 200]
    split = [m for m in msgs if _reasoning(m) and (m.get("content") or "").strip()]
    leaked = [m for m in msgs if any(t in (m.get("content") or "") for t in THINK_TAGS)]
    detail = (
        f"{len(split)}/{len(msgs)} replies had reasoning and answer in separate fields; "
        f"{len(leaked)} answers carried think tags"
    )
    if split and not leaked:
        return _check("reasoning_split", True, detail)
    no_reasoning = not any(_reasoning(m) for m in msgs)
    hint = (HINT_REASONING_MISMATCH if leaked or no_reasoning else HINT_REASONING_UNCLOSED).format(
        parser=parser
    )
    return _check("reasoning_split", False, detail, hint)


def _throughput_check(tp: Mapping[str, Any]) -> dict[str, Any]:
    single = tp.get("single_stream") or {}
    bad = [lv for lv in tp.get("levels", []) if lv.get("ok") != lv.get("requests")]
    ok = single.get("status") == 200 and not bad
    detail = f"single stream TTFT {single.get('ttft_s')} s; " + ", ".join(
        f"c={lv['concurrency']}: {lv['aggregate_tok_s']} tok/s" for lv in tp.get("levels", [])
    )
    errors = "; ".join(e for lv in bad for e in lv.get("errors", [])) or single.get("error", "")
    return _check("throughput", ok, detail, f"requests failed under load: {errors}")


def _kv_check(observed: int | None, planned: int | None, tolerance: float) -> dict[str, Any] | None:
    if not planned:
        return None
    if observed is None:
        return _check(
            "kv_cache",
            False,
            f"planned {planned} tokens; none found in the engine log",
            "no 'KV cache size: N tokens' line was found: give serve_verify_service_unit or "
            "serve_verify_engine_log_path so the engine log can be read.",
        )
    ratio = observed / planned
    return _check(
        "kv_cache",
        ratio >= 1 - tolerance,
        f"observed {observed} tokens vs planned {planned} ({ratio:.1%})",
        "the engine found less KV cache room than planned: lower --max-model-len / concurrency, or re-plan "
        "with the observed memory (other processes on the GPU, a larger activation peak, CUDA graphs).",
    )


def server_side_latency(before: str, after: str) -> dict[str, float | None]:
    """Mean TTFT and decode rate the engine itself recorded between two /metrics snapshots."""
    b, a = parse_metrics(before or ""), parse_metrics(after or "")

    def mean(name: str) -> float | None:
        count = a.get(f"{name}_count", 0.0) - b.get(f"{name}_count", 0.0)
        total = a.get(f"{name}_sum", 0.0) - b.get(f"{name}_sum", 0.0)
        return total / count if count > 0 else None

    ttft, itl = mean("vllm:time_to_first_token_seconds"), mean("vllm:inter_token_latency_seconds")
    return {
        "ttft_s": round(ttft, 4) if ttft is not None else None,
        "decode_tok_s": round(1.0 / itl, 2) if itl else None,
    }


_LEVEL_KEYS = ("concurrency", "requests", "ok", "aggregate_tok_s", "ttft_median_s", "seconds")


def _peaks(samples: Sequence[str]) -> dict[str, float | None]:
    """Highest KV usage and running/waiting counts seen in the /metrics samples taken under load."""
    parsed = [parse_metrics(text) for text in samples]
    return {
        f"peak_{name.split(':')[1]}": max((p[name] for p in parsed if name in p), default=None)
        for name in ("vllm:kv_cache_usage_perc", "vllm:num_requests_running", "vllm:num_requests_waiting")
    }


def _throughput_summary(tp: Mapping[str, Any]) -> dict[str, Any]:
    single = tp.get("single_stream") or {}
    server = server_side_latency(
        single.get("server_metrics_before", ""), single.get("server_metrics_after", "")
    )
    return {
        "max_tokens_per_request": tp.get("max_tokens"),
        "single_stream_decode_tok_s": single.get("decode_tok_s"),
        "single_stream_ttft_s": single.get("ttft_s"),
        "single_stream_e2e_tok_s": round(single["completion_tokens"] / single["seconds"], 2)
        if single.get("seconds")
        else None,
        "engine_decode_tok_s": server["decode_tok_s"],
        "engine_ttft_s": server["ttft_s"],
        "levels": [
            {**{k: lv.get(k) for k in _LEVEL_KEYS}, **_peaks(lv.get("gauge_samples") or [])}
            for lv in tp.get("levels", [])
        ],
    }


def serve_verify_report(observations: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """Judge one endpoint. settings: model, checkpoint, tool_call_parser, reasoning_parser, min_pass_ratio,
    planned_kv_tokens, kv_tolerance, engine_log (text), log_tail_lines, engine_args, gpu_facts, base_url,
    quantization ({format, level, file_type, bits_per_weight}: a GGUF checkpoint needs quality probes)."""
    if not isinstance(observations, Mapping) or "health" not in observations:
        raise _fail("serve_verify_report", "expected the serve_verify_probe module's `observations` dict")
    model = str(settings.get("model") or "")
    if not model:
        raise _fail("serve_verify_report", "settings.model (serve_verify_model) is empty")
    min_ratio = float(settings.get("min_pass_ratio", 1.0))
    tool_parser = str(settings.get("tool_call_parser") or "")
    reasoning_parser = str(settings.get("reasoning_parser") or "")

    health = observations["health"]
    checks = [
        _http_check("health", health, "the server is not healthy: see the service journal below.")
        or _check("health", True, "GET /health 200"),
        _models_check(observations.get("models"), model),
    ]
    if health.get("status") == 200:
        checks.append(_chat_check(observations.get("chat")))
    probes = _probe_results(observations.get("probes") or [])
    quant = quantization_summary(settings.get("quantization"))
    quality, ratio = _quality_check(probes, min_ratio, quant)
    if health.get("status") == 200:
        checks.append(quality)
    if tool_parser and health.get("status") == 200:
        tools = observations.get("tools") or {}
        checks.extend(_tool_check(mode, tools.get(mode), tool_parser) for mode in ("required", "named"))
    if reasoning_parser and health.get("status") == 200:
        checks.append(_reasoning_check(observations.get("probes") or [], reasoning_parser))
    tp = observations.get("throughput") or {}
    if tp:
        checks.append(_throughput_check(tp))
    kv = kv_from_log(str(settings.get("engine_log") or ""))
    planned = settings.get("planned_kv_tokens") or None
    kv_check = _kv_check(
        kv["kv_cache_tokens"], int(planned) if planned else None, float(settings.get("kv_tolerance", 0.1))
    )
    if kv_check:
        checks.append(kv_check)

    version = (observations.get("version") or {}).get("json") or {}
    passed = all(c["passed"] for c in checks)
    tail = int(settings.get("log_tail_lines", 60))
    log_lines = str(settings.get("engine_log") or "").splitlines()
    return {
        "passed": passed,
        "model": model,
        "checkpoint": str(settings.get("checkpoint") or "") or None,
        "quantization": quant,
        "base_url": observations.get("base_url", settings.get("base_url", "")),
        "engine_version": version.get("version"),
        "engine_args": settings.get("engine_args") or {},
        "gpu_facts": settings.get("gpu_facts") or {},
        "tool_call_parser": tool_parser or None,
        "reasoning_parser": reasoning_parser or None,
        "checks": checks,
        "failures": [
            f"{c['name']}: {c['detail']}. Likely cause: {c['hint']}" for c in checks if not c["passed"]
        ],
        "quality": {"pass_ratio": round(ratio, 3), "min_pass_ratio": min_ratio, "probes": probes},
        "kv_cache": {
            "planned_tokens": int(planned) if planned else None,
            "observed_tokens": kv["kv_cache_tokens"],
            "pool": kv["kv_cache_pool"],
            "available_kv_gib": kv["available_kv_gib"],
        },
        "throughput": _throughput_summary(tp) if tp else {},
        # quick: every check but the throughput pass (the deploy's choice for a service it did not change).
        "mode": "full" if tp else "quick",
        "metrics": {
            when: {
                k: v
                for k, v in parse_metrics(str(observations.get(f"metrics_{when}") or "")).items()
                if k in REPORT_METRICS
            }
            for when in ("before", "after")
        },
        # Only a failure needs the engine's side of the story.
        "log_tail": [] if passed or tail <= 0 else log_lines[-tail:],
    }


def _cell(value: Any) -> str:
    return "-" if value is None or value == "" else str(value).replace("|", "\\|").replace("\n", " ")


def _pct(fraction: float | None) -> str:
    return "-" if fraction is None else f"{fraction:.2%}"


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines.extend("| " + " | ".join(_cell(v) for v in row) + " |" for row in rows)
    return lines


_MODE_LINES = {
    "full": "- mode: full (health, models, chat, quality probes, tools, reasoning, KV cache, throughput)",
    "quick": "- mode: quick (every check but the throughput pass, which serve_verify_throughput turned off)",
}


def _throughput_lines(tp: Mapping[str, Any]) -> list[str]:
    if not tp:
        return []
    client = (
        f"{_cell(tp.get('single_stream_decode_tok_s'))} tok/s decode, "
        f"TTFT {_cell(tp.get('single_stream_ttft_s'))} s, "
        f"{_cell(tp.get('single_stream_e2e_tok_s'))} tok/s end to end"
    )
    engine = f"{_cell(tp.get('engine_decode_tok_s'))} tok/s decode, TTFT {_cell(tp.get('engine_ttft_s'))} s"
    lines = [
        "",
        f"## Throughput ({_cell(tp.get('max_tokens_per_request'))} tokens per request)",
        "",
        f"Single stream, as the client saw it: {client}; as the engine recorded it (/metrics): {engine}.",
        "",
    ]
    rows = [
        (
            lv["concurrency"],
            f"{lv['ok']}/{lv['requests']}",
            lv["aggregate_tok_s"],
            lv["ttft_median_s"],
            lv["seconds"],
            _pct(lv.get("peak_kv_cache_usage_perc")),
            f"{_cell(lv.get('peak_num_requests_running'))}/{_cell(lv.get('peak_num_requests_waiting'))}",
        )
        for lv in tp.get("levels", [])
    ]
    header = [
        "concurrency",
        "ok",
        "aggregate tok/s",
        "median TTFT s",
        "wall s",
        "peak KV use",
        "peak run/wait",
    ]
    return lines + _table(header, rows)


def _quantization_lines(quant: Mapping[str, Any] | None) -> list[str]:
    if not quant:
        return []
    detail = ", ".join(
        x
        for x in (
            quant.get("file_type"),
            f"{quant['bits_per_weight']:g} bits per weight" if quant.get("bits_per_weight") else None,
        )
        if x
    )
    line = f"- quantization: {quant['format'].upper()} {quant.get('level') or ''}".rstrip()
    line += f" ({detail})" if detail else ""
    if quant.get("probes_required"):
        line += ": quantized weights, judged usable only by the quality probes below"
    return [line]


def serve_verify_markdown(report: Mapping[str, Any]) -> list[str]:
    """The report as Markdown lines (written to report.md and printed by the role)."""
    if not isinstance(report, Mapping) or "checks" not in report:
        raise _fail("serve_verify_markdown", "expected the dict returned by serve_verify_report")
    verdict = "PASS" if report["passed"] else "FAIL"
    lines = [
        f"# serve_verify: {report['model']} ({verdict})",
        "",
        f"- endpoint: {report['base_url']}",
        *([f"- checkpoint: {report['checkpoint']}"] if report.get("checkpoint") else []),
        *_quantization_lines(report.get("quantization")),
        f"- engine version: {_cell(report.get('engine_version'))}",
        f"- tool-call parser: {_cell(report.get('tool_call_parser'))}; "
        f"reasoning parser: {_cell(report.get('reasoning_parser'))}",
        _MODE_LINES.get(str(report.get("mode")), f"- mode: {_cell(report.get('mode'))}"),
    ]
    if report.get("engine_args"):
        lines.append(f"- engine args: `{json.dumps(report['engine_args'], sort_keys=True)}`")
    if report.get("gpu_facts"):
        lines.append(f"- GPU: `{json.dumps(report['gpu_facts'], sort_keys=True)}`")
    kv = report.get("kv_cache") or {}
    lines.append(
        f"- KV cache tokens: planned {_cell(kv.get('planned_tokens'))}, "
        f"observed {_cell(kv.get('observed_tokens'))} ({_cell(kv.get('pool'))})"
    )
    lines += ["", "## Checks", ""]
    lines += _table(
        ["check", "result", "detail"],
        [(c["name"], "pass" if c["passed"] else "FAIL", c["detail"]) for c in report["checks"]],
    )
    quality = report.get("quality") or {}
    if quality.get("probes"):
        lines += [
            "",
            f"## Quality probes (pass ratio {quality['pass_ratio']}, need {quality['min_pass_ratio']})",
            "",
        ]
        lines += _table(
            ["prompt", "expect", "result", "answer"],
            [
                (
                    p["prompt"],
                    f"`{p['expect']}`",
                    "pass" if p["passed"] else "FAIL",
                    p["answer"] or p["error"],
                )
                for p in quality["probes"]
            ],
        )
    lines += _throughput_lines(report.get("throughput") or {})
    metrics = report.get("metrics") or {}
    if any(metrics.values()):
        lines += ["", "## /metrics", ""]
        lines += _table(
            ["metric", "before", "after"],
            [(k, metrics.get("before", {}).get(k), metrics.get("after", {}).get(k)) for k in REPORT_METRICS],
        )
    if report.get("failures"):
        lines += ["", "## Failures", ""]
        lines += [f"- {f}" for f in report["failures"]]
    return lines
