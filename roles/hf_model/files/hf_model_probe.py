#!/usr/bin/env python3
"""Read-only probe before a download: resolve the revision, list files and sizes, read local state.

Prints one JSON object: sha, files, local sizes, marker, free bytes. Creates nothing. When the request pins
a full commit sha and the completion marker matches it with every file at its size, the hub is not asked.
"""

from __future__ import annotations

import re
from typing import Any

from hf_model_common import (
    MARKER,
    hf_files,
    local_stats,
    read_json,
    read_request,
    resolve_listing,
    run_main,
    state_path,
)
from hf_model_common import free_bytes as fs_free_bytes

FULL_SHA = re.compile(r"^[0-9a-f]{40}$")


def main() -> dict[str, Any]:
    req = read_request()
    local_dir = req["local_dir"]
    marker = read_json(state_path(local_dir, MARKER))
    marker_paths = [f.get("path") for f in (marker or {}).get("files", []) if isinstance(f, dict)]
    revision = req.get("revision") or "main"
    if FULL_SHA.match(revision) and marker:
        sizes = local_stats(local_dir, marker_paths)
        if hf_files.hf_marker_current(marker, req["repo"], revision, sizes):
            return {
                "source": "marker",
                "repo": req["repo"],
                "sha": revision,
                "files": marker.get("listing", marker["files"]),
                "local": sizes,
                "marker": marker,
                "free_bytes": fs_free_bytes(local_dir),
            }
    listing = resolve_listing(req)
    paths = sorted({f["path"] for f in listing["files"]} | set(marker_paths))
    return {
        "source": "hub",
        **listing,
        "local": local_stats(local_dir, paths),
        "marker": marker,
        "free_bytes": fs_free_bytes(local_dir),
    }


if __name__ == "__main__":
    run_main(main)
