"""Stdlib-only client that measures an OpenAI-compatible endpoint (vLLM) for serve_verify.

It only observes: every request is recorded with its status, body and timing; judging against
thresholds happens later in the serve_report filters. Used by the role's serve_verify_probe module
and runnable alone:

    SERVE_VERIFY_API_KEY=... python3 serve_verify_client.py --base-url http://127.0.0.1:8000 \
        --model NAME [--probes probes.json] [--tool-checks] [--concurrency 1,2,4]

The API key travels only in the Authorization header; it is never printed or returned.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

TOOL_WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name"}},
            "required": ["city"],
        },
    },
}
TOOL_PROMPT = "What is the weather in Paris? Use the get_weather tool."
THROUGHPUT_PROMPT = "Write a long story about a lighthouse keeper and the sea."
LOAD_GAUGES = ("vllm:kv_cache_usage_perc", "vllm:num_requests_running", "vllm:num_requests_waiting")


class Endpoint:
    """A base URL plus optional bearer token; every call returns a plain record, never raises."""

    def __init__(self, base_url: str, api_key: str = "", timeout: float = 120.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self.timeout = timeout

    def _open(self, path: str, body: dict | None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base_url + path, data=data, headers=self._headers)
        return urllib.request.urlopen(req, timeout=self.timeout)

    def call(self, path: str, body: dict | None = None, limit: int = 4000) -> dict:
        start = time.monotonic()
        try:
            with self._open(path, body) as resp:
                raw = resp.read().decode("utf-8", "replace")
                status = resp.status
        except urllib.error.HTTPError as err:
            raw, status = err.read().decode("utf-8", "replace"), err.code
        except (OSError, ValueError) as err:
            return {"path": path, "status": 0, "error": str(err), "seconds": time.monotonic() - start}
        rec: dict[str, Any] = {"path": path, "status": status, "seconds": round(time.monotonic() - start, 4)}
        try:
            rec["json"] = json.loads(raw)
        except ValueError:
            rec["text"] = raw[:limit]
        return rec

    def stream_chat(self, body: dict) -> dict:
        """Streamed chat completion: time to first token, decode rate, token count from usage."""
        body = {**body, "stream": True, "stream_options": {"include_usage": True}}
        start = time.monotonic()
        first = last = None
        chunks, usage = 0, None
        try:
            with self._open("/v1/chat/completions", body) as resp:
                for line in resp:
                    text = line.decode("utf-8", "replace").strip()
                    if not text.startswith("data:") or text == "data: [DONE]":
                        continue
                    event = json.loads(text[5:])
                    usage = event.get("usage") or usage
                    for choice in event.get("choices", []):
                        delta = choice.get("delta", {})
                        if delta.get("content") or delta.get("reasoning") or delta.get("reasoning_content"):
                            now = time.monotonic()
                            first = first or now
                            last = now
                            chunks += 1
        except urllib.error.HTTPError as err:
            return {"status": err.code, "error": err.read().decode("utf-8", "replace")[:2000]}
        except (OSError, ValueError) as err:
            return {"status": 0, "error": str(err)}
        end = time.monotonic()
        tokens = (usage or {}).get("completion_tokens", chunks)
        rec: dict[str, Any] = {"status": 200, "completion_tokens": tokens, "seconds": round(end - start, 4)}
        if first is not None and last is not None:
            rec["ttft_s"] = round(first - start, 4)
            # A server starved of CPU can flush a whole reply at once; chunk spacing then says nothing
            # about decode speed, so the rate is only derived when chunks arrived spread out.
            if tokens > 1 and last - first >= 0.25 * (end - start):
                rec["decode_tok_s"] = round((tokens - 1) / (last - first), 2)
        return rec


def chat_body(model: str, prompt: str, max_tokens: int, **extra: Any) -> dict:
    return {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        **extra,
    }


def run_probes(ep: Endpoint, model: str, probes: list[dict]) -> list[dict]:
    out = []
    for probe in probes:
        rec = ep.call(
            "/v1/chat/completions", chat_body(model, probe["prompt"], int(probe.get("max_tokens", 32)))
        )
        out.append({"prompt": probe["prompt"], "expect": probe["expect"], **rec})
    return out


def run_tool_checks(ep: Endpoint, model: str, max_tokens: int) -> dict:
    named = {"type": "function", "function": {"name": "get_weather"}}
    return {
        mode: ep.call(
            "/v1/chat/completions",
            chat_body(model, TOOL_PROMPT, max_tokens, tools=[TOOL_WEATHER], tool_choice=choice),
        )
        for mode, choice in (("required", "required"), ("named", named))
    }


class GaugeSampler(threading.Thread):
    """Keeps the load gauges' lines of /metrics, sampled while a concurrency level runs.

    Sampled densely: a tiny model's level can end within a quarter second, and a sparse sampler then sees
    only an idle server (the running gauge 0), which is how the integration test caught it under load.
    """

    def __init__(self, ep: Endpoint, interval: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.ep, self.interval = ep, interval
        self.samples: list[str] = []
        self.done = threading.Event()

    def run(self) -> None:
        while True:
            text = metrics_text(self.ep)
            self.samples.append("\n".join(ln for ln in text.splitlines() if ln.startswith(LOAD_GAUGES)))
            if self.done.wait(self.interval):
                return


def run_throughput(
    ep: Endpoint, model: str, levels: list[int], max_tokens: int, requests_per_level: int
) -> dict:
    # ignore_eos keeps every request at max_tokens, so rates compare across models and runs.
    body = chat_body(model, THROUGHPUT_PROMPT, max_tokens, ignore_eos=True)
    before = metrics_text(ep)
    single = ep.stream_chat(body)
    single["server_metrics_before"] = before
    single["server_metrics_after"] = metrics_text(ep)
    levels_out = []
    for level in levels:
        count = max(level, requests_per_level)
        sampler = GaugeSampler(ep)
        start = time.monotonic()
        with ThreadPoolExecutor(max_workers=level) as pool:
            futures = [pool.submit(ep.stream_chat, body) for _ in range(count)]
            sampler.start()  # after submitting, so the first sample already sees requests in flight
            results = [f.result() for f in futures]
        wall = time.monotonic() - start
        sampler.done.set()
        sampler.join()
        ok = [r for r in results if r.get("status") == 200]
        tokens = sum(r["completion_tokens"] for r in ok)
        ttfts = sorted(r["ttft_s"] for r in ok if "ttft_s" in r)
        levels_out.append(
            {
                "concurrency": level,
                "requests": count,
                "ok": len(ok),
                "completion_tokens": tokens,
                "seconds": round(wall, 3),
                "aggregate_tok_s": round(tokens / wall, 2) if wall > 0 else 0.0,
                "ttft_median_s": ttfts[len(ttfts) // 2] if ttfts else None,
                "errors": [r.get("error", "")[:300] for r in results if r.get("status") != 200][:3],
                "gauge_samples": sampler.samples,
            }
        )
    return {"max_tokens": max_tokens, "single_stream": single, "levels": levels_out}


def metrics_text(ep: Endpoint) -> str:
    rec = ep.call("/metrics", limit=2_000_000)
    return rec.get("text", "") if rec.get("status") == 200 else ""


def measure(cfg: dict, api_key: str) -> dict:
    """All observations for one endpoint; cfg keys mirror the role's serve_verify_* variables."""
    ep = Endpoint(cfg["base_url"], api_key, float(cfg.get("timeout", 120)))
    model = cfg["model"]
    res: dict[str, Any] = {
        "base_url": ep.base_url,
        "model": model,
        "health": ep.call("/health"),
        "version": ep.call("/version"),
        "models": ep.call("/v1/models"),
    }
    if res["health"]["status"] != 200:
        return res
    res["chat"] = ep.call("/v1/chat/completions", chat_body(model, "Say hello.", 16))
    res["probes"] = run_probes(ep, model, cfg.get("probes", []))
    if cfg.get("tool_checks"):
        res["tools"] = run_tool_checks(ep, model, int(cfg.get("tool_max_tokens", 64)))
    levels = [int(x) for x in cfg.get("concurrency_levels", [])]
    if cfg.get("throughput", True):
        res["metrics_before"] = metrics_text(ep)
        res["throughput"] = run_throughput(
            ep,
            model,
            levels,
            int(cfg.get("throughput_max_tokens", 64)),
            int(cfg.get("requests_per_level", 4)),
        )
        res["metrics_after"] = metrics_text(ep)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Measure an OpenAI-compatible endpoint; prints JSON.")
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--probes", help="JSON file: list of {prompt, expect, max_tokens}")
    ap.add_argument("--tool-checks", action="store_true")
    ap.add_argument("--concurrency", default="1,2,4")
    ap.add_argument("--max-tokens", type=int, default=64)
    args = ap.parse_args(argv)
    cfg = {
        "base_url": args.base_url,
        "model": args.model,
        "probes": json.loads(open(args.probes).read()) if args.probes else [],  # noqa: SIM115 - tiny file
        "tool_checks": args.tool_checks,
        "concurrency_levels": [int(x) for x in args.concurrency.split(",") if x],
        "throughput_max_tokens": args.max_tokens,
    }
    json.dump(measure(cfg, os.environ.get("SERVE_VERIFY_API_KEY", "")), sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
