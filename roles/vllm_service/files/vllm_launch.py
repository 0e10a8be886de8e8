#!/usr/bin/env python3
"""Start vLLM under a process supervisor without systemd (supervisord), as the systemd unit would.

Usage: vllm_launch.py SPEC.json

SPEC (written by the vllm_service role, root-owned, no secrets) names the environment file and the argv:
{"env_file": "/etc/vllm/vllm.env", "argv": ["/opt/ml-env/bin/python", "-m", ...], "nofile": 65536,
 "home": "/var/lib/vllm", "user": "vllm"}

What systemd does for the unit and this does here, in order: read the environment file (the unit's
EnvironmentFile= syntax as the role writes it: NAME="value" with \\ \" \\$ \\` escaped, comments, blank
lines), remove the service user's stale vllm_dist_* files from /dev/shm (ExecStartPre), raise the
open-file limit as far as the hard limit allows (LimitNOFILE=), then exec the engine, so the supervisor
watches and signals the engine itself. The secrets stay in the 0640 environment file: never in argv, the
supervisor's configuration or its log.
"""

from __future__ import annotations

import json
import os
import resource
import sys
from pathlib import Path

_ESCAPED = ("\\", '"', "$", "`")


def parse_env_file(text: str) -> dict[str, str]:
    """NAME="value" lines as written by the role's systemd_env_value filter; comments and blanks skipped."""
    env: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        if not sep or not name.replace("_", "a").isalnum() or name[0].isdigit():
            raise ValueError(f"line {number}: expected NAME=value")
        if len(value) >= 2 and value[0] == value[-1] == '"':
            out, i, body = [], 0, value[1:-1]
            while i < len(body):
                if body[i] == "\\" and i + 1 < len(body) and body[i + 1] in _ESCAPED:
                    out.append(body[i + 1])
                    i += 2
                else:
                    out.append(body[i])
                    i += 1
            value = "".join(out)
        env[name] = value
    return env


def clean_shm(shm: Path = Path("/dev/shm")) -> list[str]:
    """Remove vllm_dist_* files the current user owns (left by an engine that died)."""
    removed = []
    uid = os.getuid()
    for path in shm.glob("vllm_dist_*"):
        try:
            if path.lstat().st_uid == uid:
                path.unlink()
                removed.append(path.name)
        except OSError:
            continue
    return removed


def raise_nofile(wanted: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        return target
    return soft


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: vllm_launch.py SPEC.json", file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[1]).read_text())
    # A clean environment, as systemd gives a unit: the supervisor's own variables do not leak in.
    env = {k: v for k, v in os.environ.items() if k in ("LANG", "TZ")}
    env["PATH"] = os.environ.get("PATH") or "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    if spec.get("user"):
        env.update(HOME=spec.get("home", "/"), USER=spec["user"], LOGNAME=spec["user"])
    env.update(parse_env_file(Path(spec["env_file"]).read_text()))
    removed = clean_shm()
    nofile = raise_nofile(int(spec.get("nofile", 65536)))
    print(f"vllm_launch: {len(removed)} stale /dev/shm file(s) removed, open files {nofile}", flush=True)
    os.execve(spec["argv"][0], spec["argv"], env)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv))
