#!/usr/bin/python
"""Ansible module: wait until a vLLM service answers a real request, or fail fast with its log tail."""

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_service_wait
short_description: Wait until a vLLM service answers /health, /v1/models and one real chat completion
description:
  - Polls C(/health) until 200, then C(/v1/models) until it lists the model, then sends one chat completion
    and requires generated tokens. A C(/health) of 200 alone is not enough (vLLM's CPU backend has answered
    it while every request failed).
  - Watches the service between polls (the systemd unit, or the supervisord program); fails at once, with
    the journal or log file tail, when it stops, fails, or restarts (its engine died) during the wait.
options:
  manager:
    description: What runs the service.
    type: str
    choices: [systemd, supervisord]
    default: systemd
  supervisorctl:
    description: supervisorctl to ask (O(manager=supervisord)).
    type: path
    default: supervisorctl
  supervisor_config:
    description: supervisord configuration file that supervisorctl reads (O(manager=supervisord)).
    type: path
  log_file:
    description: The program's log file, whose tail a failure shows (O(manager=supervisord)).
    type: path
  url:
    description: Base URL of the server, e.g. C(http://127.0.0.1:8000).
    type: str
    required: true
  unit:
    description: systemd unit (or supervisord program name) to watch and whose log to print on failure.
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
author: llmdeploy maintainers (@llmdeploy)
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
  description: MainPID of the unit (the program's pid under supervisord) at the end of the wait.
  type: int
  returned: always
n_restarts:
  description: >-
    NRestarts of the unit at the end of the wait; under supervisord, the restarts seen during the wait.
  type: int
  returned: always
"""

import json
import time
import urllib.error
import urllib.request
from typing import Any

from ansible.module_utils.basic import AnsibleModule

_DEAD_STATES = frozenset({"failed", "inactive", "deactivating"})
# supervisord process states that mean the program is not (or no longer) running.
_SUPERVISOR_DEAD = {"STOPPED": "inactive", "EXITED": "failed", "FATAL": "failed", "STOPPING": "deactivating"}


def unit_state(module: AnsibleModule, unit: str) -> dict[str, str]:
    props = "ActiveState,SubState,MainPID,NRestarts,Result"
    rc, out, err = module.run_command(["systemctl", "show", unit, "-p", props])
    if rc != 0:
        module.fail_json(msg=f"systemctl show {unit} failed: {err.strip()}")
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def supervisor_state(line: str) -> dict[str, str]:
    """`supervisorctl status NAME` output -> the unit_state keys (MainPID, ActiveState, SubState, Result)."""
    words = line.split()
    state = words[1] if len(words) > 1 else "UNKNOWN"
    pid = ""
    if "pid" in words:
        pid = words[words.index("pid") + 1].rstrip(",")
    active = _SUPERVISOR_DEAD.get(state, "active")
    sub = "auto-restart" if state == "BACKOFF" else state.lower()
    return {"ActiveState": active, "SubState": sub, "MainPID": pid or "0", "Result": state}


def journal_tail(module: AnsibleModule, unit: str, lines: int) -> str:
    _rc, out, err = module.run_command(["journalctl", "-u", unit, "-n", str(lines), "--no-pager"])
    return out or err


def file_tail(path: str, lines: int) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            fh.seek(max(0, fh.tell() - 256 * lines))
            return b"\n".join(fh.read().splitlines()[-lines:]).decode(errors="replace")
    except OSError as exc:
        return f"(cannot read {path}: {exc.strerror})"


class Service:
    """The service as its manager reports it: state (unit_state's keys) and the log tail."""

    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.p = module.params
        self.pids: list[str] = []

    @property
    def log_name(self) -> str:
        if self.p["manager"] == "systemd":
            return f"journalctl -u {self.p['unit']} -n {self.p['journal_lines']}"
        return f"tail -n {self.p['journal_lines']} {self.p['log_file']}"

    def state(self) -> dict[str, str]:
        if self.p["manager"] == "systemd":
            return unit_state(self.module, self.p["unit"])
        cmd = [self.p["supervisorctl"], "-c", self.p["supervisor_config"], "status", self.p["unit"]]
        _rc, out, err = self.module.run_command(cmd)  # rc 3 means "not running", still a status line
        lines = [line for line in out.splitlines() if line.split()[:1] == [self.p["unit"]]]
        if not lines:
            self.module.fail_json(msg=f"{' '.join(cmd)} gave no status: {(out or err).strip()[:500]}")
        state = supervisor_state(lines[0])
        # supervisord keeps no restart count: count the pids seen while waiting.
        if state["MainPID"] != "0" and state["MainPID"] not in self.pids:
            self.pids.append(state["MainPID"])
        state["NRestarts"] = str(max(0, len(self.pids) - 1))
        return state

    def tail(self) -> str:
        if self.p["manager"] == "systemd":
            return journal_tail(self.module, self.p["unit"], self.p["journal_lines"])
        return file_tail(self.p["log_file"], self.p["journal_lines"])


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
        self.service = Service(module)
        self.first = self.service.state()
        self.health_after: float | None = None
        self.last = "no answer yet"

    def fail(self, why: str, state: dict[str, str]) -> None:
        tail = self.service.tail()
        self.module.fail_json(
            msg=f"{self.p['unit']}: {why}. Last answer: {self.last[:500]}\n"
            f"--- {self.service.log_name} ---\n{tail}",
            elapsed=round(time.monotonic() - self.start, 1),
            main_pid=int(state.get("MainPID", "0") or 0),
            n_restarts=int(state.get("NRestarts", "0") or 0),
            journal=tail.splitlines(),
        )

    def check_unit(self) -> dict[str, str]:
        state = self.service.state()
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
        if status in (401, 403):
            # Waiting longer cannot help: the server runs and refuses the key it was given (or its absence).
            why = f"/v1/models answered {status}: the API key does not match the server's"
            self.fail(why, self.check_unit())
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
            "manager": {"type": "str", "choices": ["systemd", "supervisord"], "default": "systemd"},
            "supervisorctl": {"type": "path", "default": "supervisorctl"},
            "supervisor_config": {"type": "path"},
            "log_file": {"type": "path"},
            "timeout": {"type": "int", "default": 1800},
            "interval": {"type": "int", "default": 5},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "model": {"type": "str", "default": ""},
            "prompt": {"type": "str", "default": "Hello"},
            "max_tokens": {"type": "int", "default": 8, "no_log": False},
            "journal_lines": {"type": "int", "default": 80},
            "fail_on_restart": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
        required_if=[("manager", "supervisord", ("supervisor_config", "log_file"))],
    )
    Waiter(module).run()


if __name__ == "__main__":
    main()
