"""Filter plugin: maps filter names onto the pure functions of module_utils/serve_report.py."""

from __future__ import annotations

from typing import Any

from ansible_collections.llmdeploy.llm.plugins.module_utils.serve_report import (
    kv_from_log,
    parse_metrics,
    probe_errors,
    serve_verify_markdown,
    serve_verify_report,
)

DOCUMENTATION = r"""
name: serve_report
short_description: Judge serve_verify observations, parse vLLM's log and /metrics, render the report
description:
  - C(serve_verify_probe_errors) lists what is wrong with a probe list (empty when it is fine).
  - "C(serve_verify_kv_from_log) reads vLLM's start-up log for C(<pool> KV cache size: N tokens) and
    C(Available KV cache memory: X GiB) (the last start in the text wins)."
  - C(serve_verify_parse_metrics) turns Prometheus text into a mapping of name to value, summing label sets.
  - C(serve_verify_report) judges the observations of the serve_verify_probe module against the
    settings (served name, parsers configured, pass ratio, planned KV tokens) and returns the report, with
    checks with a hint at the likely cause for each failure, probe results, throughput, KV and metrics.
  - C(serve_verify_markdown) renders that report as Markdown lines (the printed table).
"""

EXAMPLES = r"""
- ansible.builtin.set_fact:
    __serve_verify_report: "{{ __serve_verify_probe.observations | serve_verify_report(settings) }}"
- ansible.builtin.debug:
    msg: "{{ __serve_verify_report | serve_verify_markdown }}"
"""


class FilterModule:
    """Map filter names to the functions above."""

    def filters(self) -> dict[str, Any]:
        return {
            "serve_verify_probe_errors": probe_errors,
            "serve_verify_kv_from_log": kv_from_log,
            "serve_verify_parse_metrics": parse_metrics,
            "serve_verify_report": serve_verify_report,
            "serve_verify_markdown": serve_verify_markdown,
        }
