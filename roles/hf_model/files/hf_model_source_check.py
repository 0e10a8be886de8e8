#!/usr/bin/env python3
"""Read-only check of a model directory that is already on the host (hf_model_source_dir).

Reads {"source_dir", "allow_patterns", "ignore_patterns", "require_weights"} as JSON on stdin and prints
model_dir_check's result as one JSON object. A completion record left by an earlier hf_model download is
compared too.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import model_dir_check  # copied beside this script by the role


def main() -> None:
    req = json.load(sys.stdin)
    root = Path(req["source_dir"])
    try:
        marker = json.loads((root / ".hf_model" / "complete.json").read_text())
    except (OSError, ValueError):
        marker = None
    result = model_dir_check.check_model_dir(
        root,
        req.get("allow_patterns") or (),
        req.get("ignore_patterns") or (),
        marker,
        bool(req.get("require_weights", True)),
    )
    result["marker"] = {k: marker.get(k) for k in ("repo", "revision")} if isinstance(marker, dict) else None
    print(json.dumps(result))


if __name__ == "__main__":
    main()
