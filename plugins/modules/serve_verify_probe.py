"""Ansible module: measure an OpenAI-compatible endpoint with serve_verify_client (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: serve_verify_probe
short_description: Send serve_verify's probe, tool, reasoning and throughput requests to an endpoint
description:
  - Runs on the target so that endpoints bound to 127.0.0.1 are reachable. Sends only requests;
    changes nothing. Returns raw observations; the serve_report filters judge them.
  - The API key is sent as a bearer token and is never returned.
options:
  base_url: {type: str, required: true, description: "Endpoint root, e.g. http://127.0.0.1:8000"}
  api_key: {type: str, default: "", description: Bearer token; empty for none}
  model: {type: str, required: true, description: Served model name}
  probes: {type: list, elements: dict, default: [], description: "List of {prompt, expect, max_tokens}"}
  tool_checks: {type: bool, default: false, description: Send tool-call requests}
  throughput: {type: bool, default: true, description: "Measure decode rate, TTFT and aggregate rate"}
  concurrency_levels: {type: list, elements: int, default: [1, 2, 4], description: Parallel streams per level}
  throughput_max_tokens: {type: int, default: 64, description: Tokens per throughput request}
  requests_per_level: {type: int, default: 4, description: Requests per level (min. the level)}
  timeout: {type: float, default: 120, description: Seconds per request}
  log_argv:
    type: list
    elements: str
    default: []
    description:
      - A command printing the engine log (journalctl, tail), run after the requests in the same module call;
        its lines are returned as C(log). Empty for none.
author: llmdeploy maintainers (@llmdeploy)
"""

EXAMPLES = r"""
- name: Measure the local vLLM endpoint
  serve_verify_probe:
    base_url: http://127.0.0.1:8000
    model: tiny-chat
    probes: [{prompt: "2+2=", expect: '\b4\b', max_tokens: 16}]
"""

RETURN = r"""
observations:
  description: health, version, models, chat, probes, tools, throughput and /metrics text before/after.
  returned: always
  type: dict
log:
  description: rc and lines of O(log_argv) (rc 127 and no lines when it cannot be run; none asked, rc null).
  returned: always
  type: dict
"""

import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmdeploy.llm.plugins.module_utils.serve_verify_client import measure


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "base_url": {"type": "str", "required": True},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "model": {"type": "str", "required": True},
            "probes": {"type": "list", "elements": "dict", "default": []},
            "tool_checks": {"type": "bool", "default": False},
            "throughput": {"type": "bool", "default": True},
            "concurrency_levels": {"type": "list", "elements": "int", "default": [1, 2, 4]},
            "throughput_max_tokens": {"type": "int", "default": 64, "no_log": False},
            "requests_per_level": {"type": "int", "default": 4},
            "timeout": {"type": "float", "default": 120},
            "log_argv": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    params = dict(module.params)
    api_key = params.pop("api_key")
    log_argv = params.pop("log_argv")
    observations = measure(params, api_key)
    module.exit_json(changed=False, observations=observations, log=read_log(log_argv))


def read_log(argv: list[str]) -> dict:
    """The engine log, read after the requests (their lines are in it); never fails the probe."""
    if not argv:
        return {"rc": None, "lines": []}
    try:
        done = subprocess.run(argv, capture_output=True, timeout=60, check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"rc": 127, "lines": [], "error": str(exc)}
    return {"rc": done.returncode, "lines": done.stdout.decode("utf-8", "replace").splitlines()}


if __name__ == "__main__":
    main()
