#!/usr/bin/env python3
"""Health watchdog for the head of a multi-node vLLM group: restart the head when the group is broken.

Usage: vllm_watchdog.py SPEC.json [--once]

Why: when a worker node dies, vLLM's head process keeps running. Its /health answers 200 until a request
reaches the dead rank, that request fails with HTTP 500, and /health then answers 503 for good; the process
never exits, so no restart policy fires. Restarting the head makes it form a new group with the workers (a
restarted worker waits for its head), so the group comes back whole instead of staying half alive.

SPEC (root-owned, written by the vllm_service role, no secrets):
{"url": "http://127.0.0.1:8000", "model": "org/name", "env_file": "/etc/vllm/vllm.env",
 "interval": 15, "failures": 3, "timeout": 20, "probe_request": true,
 "active_cmd": ["systemctl", "is-active", "--quiet", "vllm.service"],
 "restart_cmd": ["systemctl", "restart", "--no-block", "vllm.service"]}

Each round: skip while the service is not active (stopped on purpose, or starting: nothing to judge);
GET /health, then, with probe_request, a one-token completion (a dead worker shows only when a request
reaches it). The watchdog arms once the service answered; an armed watchdog restarts the service after
`failures` failed rounds in a row and disarms until it answers again, so a head that cannot start is left
to its own restart policy instead of being restarted in a loop. The API key is read from the service's
environment file (VLLM_API_KEY), never from argv.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_launch import parse_env_file  # installed beside this file by the role


def log(message: str) -> None:
    print(f"vllm_watchdog: {message}", flush=True)


def _request(url: str, api_key: str, timeout: float, body: dict | None = None) -> int:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method="POST" if data else "GET")
    if data:
        req.add_header("Content-Type", "application/json")
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            resp.read()
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (OSError, ValueError):
        return 0


def probe(spec: dict, api_key: str) -> tuple[bool, str]:
    """One round: (healthy, what was seen)."""
    base = spec["url"].rstrip("/")
    timeout = float(spec.get("timeout", 20))
    status = _request(f"{base}/health", api_key, timeout)
    if status != 200:
        return False, f"/health answered {status or 'nothing'}"
    if not spec.get("probe_request", True) or not spec.get("model"):
        return True, "/health 200"
    body = {"model": spec["model"], "prompt": "ping", "max_tokens": 1, "temperature": 0}
    status = _request(f"{base}/v1/completions", api_key, timeout, body)
    if status != 200:
        return False, f"/health 200 but a one-token completion answered {status or 'nothing'}"
    return True, "/health 200, one-token completion 200"


def _api_key(env_file: str) -> str:
    try:
        return parse_env_file(Path(env_file).read_text()).get("VLLM_API_KEY", "")
    except OSError:
        return ""


def _active(spec: dict) -> bool:
    cmd = spec.get("active_cmd")
    if not cmd:
        return True
    return subprocess.run(cmd, capture_output=True, check=False).returncode == 0


class Watchdog:
    """The armed / failure-count state between rounds."""

    def __init__(self, spec: dict) -> None:
        self.spec = spec
        self.armed = False
        self.failures = 0

    def round(self) -> str:
        """Run one round; returns what it did: idle, healthy, failing or restarted."""
        if not _active(self.spec):
            self.armed, self.failures = False, 0
            return "idle"
        healthy, seen = probe(self.spec, _api_key(self.spec.get("env_file", "")))
        if healthy:
            if not self.armed or self.failures:
                log(f"{seen}: armed")
            self.armed, self.failures = True, 0
            return "healthy"
        if not self.armed:
            return "idle"
        self.failures += 1
        limit = int(self.spec.get("failures", 3))
        log(f"{seen} ({self.failures}/{limit})")
        if self.failures < limit:
            return "failing"
        log("restarting the service: " + " ".join(self.spec["restart_cmd"]))
        done = subprocess.run(self.spec["restart_cmd"], capture_output=True, text=True, check=False)
        if done.returncode:
            log(f"restart command failed ({done.returncode}): {done.stderr.strip()[-500:]}")
        self.armed, self.failures = False, 0
        return "restarted"


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3) or (len(argv) == 3 and argv[2] != "--once"):
        print("usage: vllm_watchdog.py SPEC.json [--once]", file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[1]).read_text())
    dog = Watchdog(spec)
    if len(argv) == 3:
        print(dog.round())
        return 0
    log(f"watching {spec['url']} every {spec.get('interval', 15)} s")
    while True:
        dog.round()
        time.sleep(float(spec.get("interval", 15)))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
