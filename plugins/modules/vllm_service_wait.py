#!/usr/bin/python
"""Ansible module: wait until a vLLM systemd service answers a real request, or fail fast with its journal."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: vllm_service_wait
short_description: Wait until a vLLM service answers /health, /v1/models and one real chat completion
description:
  - Polls C(/health) until 200, then C(/v1/models) until it lists the model, then sends one chat completion
    and requires generated tokens. A C(/health) of 200 alone is not enough (vLLM's CPU backend has answered
    it while every request failed).
  - Watches the systemd unit between polls; fails at once, with the unit's journal tail, when it stops,
    fails, or restarts (its engine died) during the wait.
options:
  url:
    description: Base URL of the server, e.g. C(http://127.0.0.1:8000).
    type: str
    required: true
  unit:
    description: systemd unit to watch and whose journal to print on failure.
    type: str
    required: true
  timeout:
    description: Seconds before giving up.
    type: int
    default: 1800
  interval:
    description: Seconds between polls.
    type: int
    default: 5
  api_key:
    description: Bearer token for the /v1 endpoints (empty for none).
    type: str
    default: ""
  model:
    description: Served model name expected in /v1/models (empty means the first one listed).
    type: str
    default: ""
  prompt:
    description: User message of the test request.
    type: str
    default: Hello
  max_tokens:
    description: max_tokens of the test request.
    type: int
    default: 8
  journal_lines:
    description: Journal lines included in a failure message.
    type: int
    default: 80
  fail_on_restart:
    description: Fail when the unit restarts during the wait (turn off to wait through an expected restart).
    type: bool
    default: true
author: llmdeploy
"""

EXAMPLES = r"""
- name: Wait for vLLM
  vllm_service_wait:
    url: http://127.0.0.1:8000
    unit: vllm.service
    timeout: 600
"""

RETURN = r"""
elapsed:
  description: Seconds the wait took.
  type: float
  returned: always
health_after:
  description: Seconds until /health first answered 200.
  type: float
  returned: success
model:
  description: The model id the request used.
  type: str
  returned: success
completion:
  description: Text the test request generated.
  type: str
  returned: success
usage:
  description: Token usage the server reported for the test request.
  type: dict
  returned: success
main_pid:
  description: MainPID of the unit at the end of the wait.
  type: int
  returned: always
n_restarts:
  description: NRestarts of the unit at the end of the wait.
  type: int
  returned: always
"""

_DEAD_STATES = frozenset({"failed", "inactive", "deactivating"})


def unit_state(module: AnsibleModule, unit: str) -> dict[str, str]:
    props = "ActiveState,SubState,MainPID,NRestarts,Result"
    rc, out, err = module.run_command(["systemctl", "show", unit, "-p", props])
    if rc != 0:
        module.fail_json(msg=f"systemctl show {unit} failed: {err.strip()}")
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def journal_tail(module: AnsibleModule, unit: str, lines: int) -> str:
    _rc, out, err = module.run_command(["journalctl", "-u", unit, "-n", str(lines), "--no-pager"])
    return out or err


def http(url: str, api_key: str, body: dict[str, Any] | None = None, timeout: float = 30) -> tuple[int, str]:
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except (OSError, urllib.error.URLError) as exc:
        return 0, str(exc)


class Waiter:
    """One wait: polls the server in phases and watches the unit."""

    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.p = module.params
        self.url = self.p["url"].rstrip("/")
        self.start = time.monotonic()
        self.first = unit_state(module, self.p["unit"])
        self.health_after: float | None = None
        self.last = "no answer yet"

    def fail(self, why: str, state: dict[str, str]) -> None:
        tail = journal_tail(self.module, self.p["unit"], self.p["journal_lines"])
        self.module.fail_json(
            msg=f"{self.p['unit']}: {why}. Last answer: {self.last[:500]}\n"
            f"--- journalctl -u {self.p['unit']} -n {self.p['journal_lines']} ---\n{tail}",
            elapsed=round(time.monotonic() - self.start, 1),
            main_pid=int(state.get("MainPID", "0") or 0),
            n_restarts=int(state.get("NRestarts", "0") or 0),
            journal=tail.splitlines(),
        )

    def check_unit(self) -> dict[str, str]:
        state = unit_state(self.module, self.p["unit"])
        active = state.get("ActiveState", "")
        if active in _DEAD_STATES:
            self.fail(f"the unit is {active} ({state.get('Result', '?')}) during the wait", state)
        if self.p["fail_on_restart"]:
            restarted = state.get("NRestarts") != self.first.get("NRestarts")
            first_pid = self.first.get("MainPID", "0")
            pid_changed = first_pid != "0" and state.get("MainPID") != first_pid
            if restarted or pid_changed or state.get("SubState") == "auto-restart":
                self.fail("the service restarted during the wait (its engine died)", state)
        return state

    def model_id(self) -> str | None:
        status, text = http(f"{self.url}/v1/models", self.p["api_key"])
        self.last = f"/v1/models {status}: {text}"
        if status != 200:
            return None
        ids = [m.get("id") for m in json.loads(text).get("data", [])]
        if self.p["model"]:
            if self.p["model"] not in ids:
                self.fail(f"/v1/models lists {ids}, not {self.p['model']!r}", self.check_unit())
            return self.p["model"]
        return ids[0] if ids else None

    def completion(self, model: str) -> dict[str, Any]:
        body = {
            "model": model,
            "messages": [{"role": "user", "content": self.p["prompt"]}],
            "max_tokens": self.p["max_tokens"],
            "temperature": 0,
        }
        status, text = http(f"{self.url}/v1/chat/completions", self.p["api_key"], body, timeout=120)
        self.last = f"/v1/chat/completions {status}: {text}"
        answer = json.loads(text) if status == 200 else {}
        usage = answer.get("usage") or {}
        if status != 200 or not answer.get("choices") or int(usage.get("completion_tokens", 0)) < 1:
            # The server said it was ready: a failing request is a broken engine, not a slow start.
            self.fail("the server is up but a chat completion failed", self.check_unit())
        return answer

    def run(self) -> None:
        deadline = self.start + self.p["timeout"]
        while True:
            state = self.check_unit()
            if self.health_after is None:
                status, text = http(f"{self.url}/health", "", timeout=10)
                self.last = f"/health {status}: {text}"
                if status == 200:
                    self.health_after = round(time.monotonic() - self.start, 1)
            if self.health_after is not None:
                model = self.model_id()
                if model:
                    answer = self.completion(model)
                    state = self.check_unit()
                    self.module.exit_json(
                        changed=False,
                        elapsed=round(time.monotonic() - self.start, 1),
                        health_after=self.health_after,
                        model=model,
                        completion=answer["choices"][0].get("message", {}).get("content") or "",
                        usage=answer.get("usage"),
                        main_pid=int(state.get("MainPID", "0") or 0),
                        n_restarts=int(state.get("NRestarts", "0") or 0),
                    )
            if time.monotonic() + self.p["interval"] > deadline:
                self.fail(f"not healthy after {self.p['timeout']} s (vllm_service_health_timeout)", state)
            time.sleep(self.p["interval"])


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "unit": {"type": "str", "required": True},
            "timeout": {"type": "int", "default": 1800},
            "interval": {"type": "int", "default": 5},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "model": {"type": "str", "default": ""},
            "prompt": {"type": "str", "default": "Hello"},
            "max_tokens": {"type": "int", "default": 8},
            "journal_lines": {"type": "int", "default": 80},
            "fail_on_restart": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    Waiter(module).run()


if __name__ == "__main__":
    main()
