#!/usr/bin/env python3
"""Watchdog for one node of a multi-node vLLM group: restart this node's service when the group broke.

Usage: vllm_watchdog.py SPEC.json [--once]

Why (measured with vLLM 0.32's multi-node mode): when a worker node dies, the head keeps answering /health,
/v1/models and /metrics with 200; only a generation request reaches the lost rank, and then the head
exits (status 0) or, with a frozen worker, hangs for 300 s first. When the head dies, a headless worker
never notices: it waits for the head's next message with no timeout and keeps its dead connection to the
head's rendezvous port, and a restarted head cannot form a group with it. So each side watches what it can:

- mode "head": GET /health, then, with probe_request, a one-token completion (timeout = a failure). After
  `failures` failed rounds the head is restarted; a new head waits for its workers.
- mode "worker": the service must hold an established TCP connection to the head's rendezvous port
  (master_addr:master_port). When the head is gone, or restarted, that connection is gone: the worker is
  restarted, and the new worker joins the new head.

SPEC (root-owned, written by the vllm_service role, no secrets):
{"mode": "head", "url": "http://127.0.0.1:8000", "model": "org/name", "env_file": "/etc/vllm/vllm.env",
 "master_addr": "10.0.0.1", "master_port": 29501, "interval": 15, "failures": 3, "timeout": 20,
 "probe_request": true, "active_cmd": ["systemctl", "is-active", "--quiet", "vllm.service"],
 "restart_cmd": ["systemctl", "restart", "--no-block", "vllm.service"]}

Each round is skipped while the service is not active (stopped on purpose). The watchdog arms once the
service is seen healthy (answering, or connected to its head); an armed watchdog restarts the service after
`failures` failed rounds in a row and disarms until it is healthy again, so a service that cannot start is
left to its own restart policy instead of being restarted in a loop. The API key is read from the
service's environment file (VLLM_API_KEY), never from argv.
"""

from __future__ import annotations

import ipaddress
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


# /proc/net/tcp state of an established connection.
_ESTABLISHED = "01"


def _proc_address(field: str) -> tuple[str, int]:
    """An address of /proc/net/tcp{,6} (hex, host byte order per 32-bit word) as (ip, port)."""
    host, port = field.split(":")
    raw = bytes.fromhex(host)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(words)), int(port, 16)


def connected_to(addr: str, port: int, tables: tuple[str, ...] = ("/proc/net/tcp", "/proc/net/tcp6")) -> bool:
    """Whether this host holds an established TCP connection to addr:port."""
    want = ipaddress.ip_address(addr)
    for table in tables:
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 4 or fields[3] != _ESTABLISHED:
                continue
            ip, remote_port = _proc_address(fields[2])
            remote = ipaddress.ip_address(ip)
            if getattr(remote, "ipv4_mapped", None):
                remote = remote.ipv4_mapped
            if remote == want and remote_port == port:
                return True
    return False


def worker_probe(spec: dict) -> tuple[bool, str]:
    """One round of a worker: (healthy, what was seen)."""
    where = f"{spec['master_addr']}:{spec['master_port']}"
    if connected_to(spec["master_addr"], int(spec["master_port"])):
        return True, f"connected to the head at {where}"
    return False, f"no connection to the head at {where}"


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
        if self.spec.get("mode", "head") == "worker":
            healthy, seen = worker_probe(self.spec)
        else:
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
    what = (
        spec["url"] if spec.get("mode", "head") == "head" else f"{spec['master_addr']}:{spec['master_port']}"
    )
    log(f"{spec.get('mode', 'head')}: watching {what} every {spec.get('interval', 15)} s")
    while True:
        dog.round()
        time.sleep(float(spec.get("interval", 15)))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
