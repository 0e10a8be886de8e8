#!/usr/bin/env python3
"""The one-time rsync daemon that copies a model from the download host to the others (hf_model_sync_method
rsyncd). Standard library only; prints one JSON object.

  hf_model_rsyncd.py source ADDRESS PORT
      On a receiving host: the local address its connection to ADDRESS:PORT leaves from (what the daemon's
      ``hosts allow`` must name). A UDP socket is connected, which sends nothing.
  hf_model_rsyncd.py wait PID_FILE PORT LOG_FILE TIMEOUT_S
      On the download host: wait until the daemon whose pid is in PID_FILE listens on PORT (its own socket in
      /proc/net/tcp*, so a firewall or another listener on the port cannot fake it), or has exited (then the
      tail of LOG_FILE says why). Exit status 0 either way; ``ready`` tells.
  hf_model_rsyncd.py stop PID_FILE CONFIG
      On the download host: stop the daemon in PID_FILE and the children serving connections, only when its
      command line names CONFIG (a reused pid is left alone). ``stopped`` is true when a process was ended.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path


def _pid(pid_file: str) -> int | None:
    try:
        text = Path(pid_file).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _alive(pid: int) -> bool:
    """Running and not a zombie waiting for its parent."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _socket_inodes(pid: int) -> set[str]:
    out = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return out
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            out.add(link[8:-1])
    return out


def _listening(pid: int, port: int) -> bool:
    inodes = _socket_inodes(pid)
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            listen = len(cols) > 9 and cols[3] == "0A"
            if listen and int(cols[1].rsplit(":", 1)[1], 16) == port and cols[9] in inodes:
                return True
    return False


def _log_tail(log_file: str, lines: int = 8) -> str:
    try:
        text = Path(log_file).read_text(errors="replace")
    except OSError:
        return ""
    # Drop the "2026/01/01 00:00:00 [pid] " prefix rsync puts on every line, and its start line: rsync writes
    # "starting, listening on port N" before it binds, so that line says nothing about a failed start.
    tail = [ln.split("] ", 1)[-1] for ln in text.splitlines() if "starting, listening on port" not in ln]
    return "; ".join(ln for ln in tail[-lines:] if ln)


def source(address: str, port: int) -> dict:
    try:
        infos = socket.getaddrinfo(address, port, type=socket.SOCK_DGRAM)
    except OSError as exc:
        return {"source": "", "error": f"cannot resolve {address}: {exc}"}
    errors = []
    for family, kind, proto, _name, sockaddr in infos:
        try:
            with socket.socket(family, kind, proto) as s:
                s.connect(sockaddr)
                return {"source": s.getsockname()[0]}
        except OSError as exc:
            errors.append(str(exc))
    return {"source": "", "error": "; ".join(errors) or "no address"}


def wait(pid_file: str, port: int, log_file: str, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    pid = None
    while True:
        pid = pid or _pid(pid_file)
        if pid is not None:
            if not _alive(pid):
                return {
                    "ready": False,
                    "pid": pid,
                    "msg": "the rsync daemon exited",
                    "log": _log_tail(log_file),
                }
            if _listening(pid, port):
                return {"ready": True, "pid": pid, "msg": f"rsync daemon {pid} listens on port {port}"}
        if time.monotonic() > deadline:
            return {
                "ready": False,
                "pid": pid,
                "msg": f"the rsync daemon did not listen on port {port} within {timeout_s:.0f} s",
                "log": _log_tail(log_file),
            }
        time.sleep(0.1)


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(entry))
    return out


def stop(pid_file: str, config: str) -> dict:
    pid = _pid(pid_file)
    if pid is None or not _alive(pid):
        return {"stopped": False, "pid": pid, "msg": "no rsync daemon running"}
    if f"--config={config}" not in _cmdline(pid):
        return {"stopped": False, "pid": pid, "msg": f"pid {pid} is not this rsync daemon; left alone"}
    # The children serve connections (forked, same command line); end them with the daemon.
    victims = [pid, *[c for c in _children(pid) if f"--config={config}" in _cmdline(c)]]
    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        for v in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(v, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and any(_alive(v) for v in victims):
            time.sleep(0.1)
        if not any(_alive(v) for v in victims):
            return {
                "stopped": True,
                "pid": pid,
                "msg": f"stopped rsync daemon {pid} ({len(victims) - 1} children)",
            }
    return {"stopped": False, "pid": pid, "msg": f"rsync daemon {pid} survived SIGKILL", "failed": True}


def main(argv: list[str]) -> int:
    cmd, args = (argv[0], argv[1:]) if argv else ("", [])
    if cmd == "source" and len(args) == 2:
        result = source(args[0], int(args[1]))
    elif cmd == "wait" and len(args) == 4:
        result = wait(args[0], int(args[1]), args[2], float(args[3]))
    elif cmd == "stop" and len(args) == 2:
        result = stop(args[0], args[1])
    else:
        print(json.dumps({"failed": True, "msg": f"usage: see {__file__}"}))
        return 2
    print(json.dumps(result))
    return 1 if result.get("failed") else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
