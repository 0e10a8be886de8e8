#!/usr/bin/env python3
"""Wait up to N seconds for download progress, then print it as one JSON object with a readable line.

Usage: hf_model_progress.py PROGRESS_JSON SECONDS. Returns early once the download reports phase "done".
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"


def read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def main() -> None:
    path, wait = Path(sys.argv[1]), float(sys.argv[2])
    deadline = time.monotonic() + wait
    p = read(path)
    while time.monotonic() < deadline and p.get("phase") != "done":
        time.sleep(min(1.0, max(deadline - time.monotonic(), 0)))
        p = read(path)
    if not p:
        print(json.dumps({"line": "starting (no progress yet)"}))
        return
    eta = p.get("eta_s")
    line = (
        f"{p.get('phase')}: {human(p.get('done_bytes', 0))} / {human(p.get('total_bytes', 0))} "
        f"({p.get('percent', 0)}%), {human(p.get('rate_bytes_per_s', 0))}/s, "
        f"{p.get('files_done', 0)}/{p.get('files_total', 0)} files"
        + (f", ETA {eta} s" if eta is not None else "")
    )
    print(json.dumps({**p, "line": line}))


if __name__ == "__main__":
    main()
