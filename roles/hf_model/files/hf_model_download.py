#!/usr/bin/env python3
"""Download one pinned revision into a local directory, verify it, merge split GGUF, write the marker.

Run by the hf_model role as an async task; writes ``.hf_model/progress.json`` every second for the role's
polling loop. Resumable: files already complete are skipped by huggingface_hub (local-dir metadata, or a
sha256 match for LFS files), so an interrupted run re-fetches only the files that were in flight.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from hf_model_common import (
    HEAD_BYTES,
    MARKER,
    PROGRESS,
    VERIFIED,
    Refused,
    hf_files,
    read_json,
    read_request,
    resolve_listing,
    run_main,
    state_path,
    write_json_atomic,
)
from huggingface_hub import hf_hub_download

HF_META_DIR = Path(".cache") / "huggingface" / "download"


def _partial_name(path: str) -> str:
    """Where huggingface_hub keeps a file while it downloads it into a local dir (its naming rule)."""
    parent, _, base = path.rpartition("/")
    digest = base64.urlsafe_b64encode(hashlib.sha1(f"{base}.metadata".encode()).digest()).decode()
    return f"{parent}/{digest}" if parent else digest


def _stat_key(path: Path) -> list[int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 23):
            h.update(chunk)
    return h.hexdigest()


class Downloader:
    def __init__(self, req: dict[str, Any]) -> None:
        self.req = req
        self.local_dir = Path(req["local_dir"])
        if req.get("sha") and req.get("files"):
            self.sha, self.files = req["sha"], req["files"]
        else:
            listing = resolve_listing(req)
            self.sha, self.files = listing["sha"], listing["files"]
        self.total = sum(f["size"] for f in self.files)
        self.verified: dict[str, dict[str, Any]] = read_json(state_path(self.local_dir, VERIFIED)) or {}
        self.lock = threading.Lock()
        self.phase = "download"
        self.fetched: list[str] = []
        self.fetched_bytes = 0
        self.started = time.monotonic()
        self.done_at_start = 0
        self.stop = threading.Event()
        self.partial_names = {_partial_name(f["path"]): f["path"] for f in self.files}

    # -- progress -------------------------------------------------------------------------------------
    def _done_bytes(self) -> tuple[int, int, list[str]]:
        done, files_done = 0, 0
        for f in self.files:
            key = _stat_key(self.local_dir / f["path"])
            if key and key[0] == f["size"]:
                done += f["size"]
                files_done += 1
        partial = []
        meta = self.local_dir / HF_META_DIR
        if meta.is_dir():
            for p in meta.rglob("*.incomplete"):
                key = _stat_key(p)
                if key:
                    done += key[0]
                    rel = str(p.relative_to(meta)).rsplit(".", 3)[0]
                    partial.append(self.partial_names.get(rel, rel))
        return min(done, self.total), files_done, partial

    def write_progress(self, final: bool = False) -> None:
        done, files_done, partial = self._done_bytes()
        elapsed = max(time.monotonic() - self.started, 1e-6)
        rate = max(done - self.done_at_start, 0) / elapsed
        left = self.total - done
        write_json_atomic(
            state_path(self.local_dir, PROGRESS),
            {
                "phase": "done" if final else self.phase,
                "done_bytes": done,
                "total_bytes": self.total,
                "percent": round(100.0 * done / self.total, 1) if self.total else 100.0,
                "rate_bytes_per_s": int(rate),
                "eta_s": int(left / rate) if rate > 0 and left > 0 else None,
                "files_done": files_done,
                "files_total": len(self.files),
                "in_flight": partial,
                "elapsed_s": round(elapsed, 1),
                "updated": time.time(),
            },
        )

    def _progress_loop(self) -> None:
        while not self.stop.wait(1.0):
            with contextlib.suppress(OSError):
                self.write_progress()

    # -- download -------------------------------------------------------------------------------------
    def _forget(self, path: str) -> None:
        """Remove a local file and huggingface_hub's metadata for it, so it is fetched again."""
        (self.local_dir / path).unlink(missing_ok=True)
        (self.local_dir / HF_META_DIR / f"{path}.metadata").unlink(missing_ok=True)
        self.verified.pop(path, None)

    def _clean_stale(self) -> int:
        """Partial files of an interrupted run (huggingface_hub names them per process, never resumes)."""
        freed = 0
        meta = self.local_dir / HF_META_DIR
        if meta.is_dir():
            for p in meta.rglob("*.incomplete"):
                key = _stat_key(p)
                freed += key[0] if key else 0
                p.unlink(missing_ok=True)
        return freed

    def _hash_if_needed(self, f: dict[str, Any]) -> None:
        if not (self.req.get("verify_sha256", True) and f.get("sha256")):
            return
        path = self.local_dir / f["path"]
        key = _stat_key(path)
        cached = self.verified.get(f["path"])
        if key is None or key[0] != f["size"] or (cached and cached.get("key") == key):
            return
        digest = _sha256(path)
        with self.lock:
            self.verified[f["path"]] = {"key": key, "sha256": digest}

    def _fetch_one(self, f: dict[str, Any]) -> None:
        before = _stat_key(self.local_dir / f["path"])
        try:
            hf_hub_download(
                self.req["repo"],
                f["path"],
                revision=self.sha,
                local_dir=self.local_dir,
            )
        except Exception as exc:
            raise Refused(f"downloading {f['path']!r} from {self.req['repo']!r} failed: {exc}") from exc
        after = _stat_key(self.local_dir / f["path"])
        if after != before:
            with self.lock:
                self.fetched.append(f["path"])
                self.fetched_bytes += f["size"]
        # Hash while other files are still downloading.
        self._hash_if_needed(f)

    def fetch(self, files: list[dict[str, Any]]) -> None:
        workers = max(1, int(self.req.get("max_workers", 8)))
        ordered = sorted(files, key=lambda f: -f["size"])
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for fut in [pool.submit(self._fetch_one, f) for f in ordered]:
                fut.result()

    # -- verification ---------------------------------------------------------------------------------
    def problems(self) -> list[dict[str, str]]:
        local: dict[str, dict[str, Any]] = {}
        for f in self.files:
            path = self.local_dir / f["path"]
            key = _stat_key(path)
            if key is None:
                continue
            with path.open("rb") as fh:
                head = fh.read(HEAD_BYTES)
            cached = self.verified.get(f["path"])
            sha = cached["sha256"] if cached and cached.get("key") == key else None
            local[f["path"]] = {"size": key[0], "head": head, "sha256": sha}
        index = None
        if any(f["path"] == hf_files.INDEX_NAME for f in self.files):
            index = read_json(self.local_dir / hf_files.INDEX_NAME) or {}
        return hf_files.hf_verify_files(self.files, local, index)

    def run(self) -> dict[str, Any]:
        self.local_dir.mkdir(parents=True, exist_ok=True)
        state_path(self.local_dir, MARKER).unlink(missing_ok=True)
        stale = self._clean_stale()
        for f in self.files:
            key = _stat_key(self.local_dir / f["path"])
            if key and key[0] != f["size"]:
                self._forget(f["path"])
        self.done_at_start = self._done_bytes()[0]
        ticker = threading.Thread(target=self._progress_loop, daemon=True)
        ticker.start()
        refetched: list[dict[str, str]] = []
        try:
            self.fetch(self.files)
            for attempt in range(int(self.req.get("retries", 1)) + 1):
                self.phase = "verify"
                for f in self.files:
                    self._hash_if_needed(f)
                bad = self.problems()
                if not bad:
                    break
                fixable = [
                    p for p in bad if (self.local_dir / p["path"]).exists() or p["problem"] == "missing"
                ]
                if attempt == int(self.req.get("retries", 1)) or not fixable:
                    raise Refused(
                        "verification failed after download: "
                        + "; ".join(f"{p['path']}: {p['problem']}" for p in bad)
                    )
                refetched.extend(fixable)
                listed = {f["path"]: f for f in self.files}
                for p in fixable:
                    self._forget(p["path"])
                self.phase = "download"
                self.fetch([listed[p["path"]] for p in fixable if p["path"] in listed])
            merged = self.merge_gguf()
        finally:
            self.stop.set()
            ticker.join()
            write_json_atomic(state_path(self.local_dir, VERIFIED), self.verified)
        marker = self.write_marker(merged)
        self.write_progress(final=True)
        return {
            "changed": True,
            "sha": self.sha,
            "fetched": sorted(self.fetched),
            "fetched_bytes": self.fetched_bytes,
            "stale_partial_bytes_removed": stale,
            "refetched_after_verify": refetched,
            "merged": merged,
            "total_bytes": marker["total_bytes"],
            "elapsed_s": round(time.monotonic() - self.started, 2),
        }

    def merge_gguf(self) -> list[dict[str, Any]]:
        if not self.req.get("gguf_merge", True):
            return []
        groups = hf_files.hf_split_gguf_groups([f["path"] for f in self.files])
        if not groups:
            return []
        import hf_model_gguf  # noqa: PLC0415  (needs gguf, imported only when a split GGUF is there)

        self.phase = "merge"
        out = []
        for g in groups.values():
            out.append(hf_model_gguf.merge_group(self.local_dir, g))
        return out

    def write_marker(self, merged: list[dict[str, Any]]) -> dict[str, Any]:
        entries = []
        for f in self.files:
            key = _stat_key(self.local_dir / f["path"])
            entries.append(
                {"path": f["path"], "size": f["size"], "sha256": f.get("sha256"), "mtime_ns": key[1]}
            )
        for m in merged:
            key = _stat_key(self.local_dir / m["path"])
            entries.append({"path": m["path"], "size": key[0], "sha256": None, "mtime_ns": key[1]})
        marker = {
            "format": hf_files.MARKER_FORMAT,
            "repo": self.req["repo"],
            "revision": self.sha,
            "requested_revision": self.req.get("revision") or "main",
            "dir": str(self.local_dir),
            "files": entries,
            "listing": self.files,
            "merged": [m["path"] for m in merged],
            "total_bytes": sum(e["size"] for e in entries),
            "completed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        write_json_atomic(state_path(self.local_dir, MARKER), marker)
        return marker


def main() -> dict[str, Any]:
    req = read_request()
    result = Downloader(req).run()
    if req.get("result_path"):
        Path(req["result_path"]).write_text(json.dumps(result))
    return result


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    run_main(main)
