"""Pure checks on Hugging Face model file listings: disk requirement, shard verification, split GGUF.

The hf_model role's helper scripts import this file on the target host too (copied next to them), so it
must not need ansible at import time: AnsibleFilterError falls back to ValueError there.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # on the target host, beside the helper scripts

    class AnsibleFilterError(ValueError):  # type: ignore[no-redef]
        pass


GGUF_MAGIC = b"GGUF"
LFS_POINTER_PREFIX = b"version https://git-lfs"
_SPLIT_RE = re.compile(r"^(?P<stem>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")
INDEX_NAME = "model.safetensors.index.json"
MARKER_FORMAT = 1


def _files(files: Any, name: str) -> list[dict[str, Any]]:
    if not isinstance(files, list):
        raise AnsibleFilterError(f"{name}: expected a list of files, got {type(files).__name__}: {files!r}")
    out = []
    for f in files:
        if not isinstance(f, Mapping) or "path" not in f or not isinstance(f.get("size"), int):
            raise AnsibleFilterError(f"{name}: each file needs 'path' and an integer 'size', got {f!r}")
        out.append(dict(f))
    return out


def hf_split_gguf_groups(paths: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Group split GGUF parts by the merged file they make; report first part, count and missing parts."""
    groups: dict[str, dict[str, Any]] = {}
    for path in paths:
        head, _, base = str(path).rpartition("/")
        m = _SPLIT_RE.match(base)
        if not m:
            continue
        count = int(m["count"])
        prefix = f"{head}/" if head else ""
        first = f"{prefix}{m['stem']}-00001-of-{count:05d}.gguf"
        merged = f"{prefix}{m['stem']}.gguf"
        g = groups.setdefault(merged, {"first": first, "count": count, "parts": [], "merged": merged})
        if g["count"] != count:
            raise AnsibleFilterError(
                f"hf_split_gguf_groups: {path!r} says {count} parts but another part of {merged!r} "
                f"says {g['count']}"
            )
        g["parts"].append(str(path))
    for g in groups.values():
        g["parts"].sort()
        expected = [g["first"].replace("-00001-of-", f"-{i:05d}-of-") for i in range(1, g["count"] + 1)]
        g["missing"] = [p for p in expected if p not in g["parts"]]
    return groups


def hf_disk_requirement(
    files: list[dict[str, Any]],
    present: Mapping[str, int] | None,
    free_bytes: int,
    margin_bytes: int = 0,
    gguf_merge: bool = True,
) -> dict[str, Any]:
    """How many bytes the download still needs on disk, and whether ``free_bytes`` covers it.

    Files already present with their full size count as done. A split GGUF that will be merged needs
    its whole merged size again (the parts stay until the merged file is verified).
    """
    files = _files(files, "hf_disk_requirement")
    present = {k: _local_size(v) for k, v in (present or {}).items()}
    for value in (free_bytes, margin_bytes):
        if not isinstance(value, int) or value < 0:
            raise AnsibleFilterError(
                f"hf_disk_requirement: sizes must be non-negative integers, got {value!r}"
            )
    total = sum(f["size"] for f in files)
    done = sum(f["size"] for f in files if present.get(f["path"]) == f["size"])
    merged = 0
    if gguf_merge:
        sizes = {f["path"]: f["size"] for f in files}
        for g in hf_split_gguf_groups(sizes).values():
            if g["merged"] not in present:
                merged += sum(sizes[p] for p in g["parts"])
    to_fetch = total - done
    required = to_fetch + merged + margin_bytes
    return {
        "total_bytes": total,
        "present_bytes": done,
        "to_fetch_bytes": to_fetch,
        "merged_bytes": merged,
        "margin_bytes": margin_bytes,
        "required_bytes": required,
        "free_bytes": free_bytes,
        "missing_bytes": max(0, required - free_bytes),
        "ok": free_bytes >= required,
    }


def hf_is_lfs_pointer(head: str | bytes) -> bool:
    """True when a file's first bytes are a Git-LFS pointer (a clone without LFS) rather than data."""
    if isinstance(head, str):
        head = head.encode("utf-8", "replace")
    if not isinstance(head, bytes | bytearray):
        raise AnsibleFilterError(f"hf_is_lfs_pointer: expected text or bytes, got {type(head).__name__}")
    return bytes(head).lstrip().startswith(LFS_POINTER_PREFIX)


def hf_verify_files(
    files: list[dict[str, Any]],
    local: Mapping[str, Mapping[str, Any]],
    index: Mapping[str, Any] | None = None,
) -> list[dict[str, str]]:
    """Problems of the local copy. ``local`` maps path -> {size, sha256 (optional), head (optional)}.

    Checks: every listed file present with the listed size, sha256 equal where both sides have one,
    no Git-LFS pointer in place of a weight file, every shard named by the safetensors index listed
    and present, and every split GGUF set complete.
    """
    files = _files(files, "hf_verify_files")
    problems: list[dict[str, str]] = []
    for f in files:
        path = f["path"]
        got = local.get(path)
        if got is None:
            problems.append({"path": path, "problem": "missing"})
            continue
        if got.get("size") != f["size"]:
            problems.append({"path": path, "problem": f"size {got.get('size')} != expected {f['size']}"})
            continue
        head = got.get("head")
        if head is not None and f["size"] > 0 and hf_is_lfs_pointer(head):
            problems.append({"path": path, "problem": "Git-LFS pointer file instead of the data"})
            continue
        want, have = f.get("sha256"), got.get("sha256")
        if want and have and want != have:
            problems.append({"path": path, "problem": f"sha256 {have} != expected {want}"})
    listed = {f["path"] for f in files}
    if index is not None:
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, Mapping):
            problems.append({"path": INDEX_NAME, "problem": "no weight_map in the index"})
        else:
            for shard in sorted(set(weight_map.values())):
                if shard not in listed:
                    problems.append(
                        {"path": shard, "problem": "named by the index but not in the repository"}
                    )
                elif shard not in local:
                    problems.append({"path": shard, "problem": "named by the index but missing"})
    for g in hf_split_gguf_groups(listed).values():
        problems.extend(
            {"path": p, "problem": "split GGUF part missing from the repository"} for p in g["missing"]
        )
    return problems


def _local_size(value: Any) -> Any:
    return value.get("size") if isinstance(value, Mapping) else value


def hf_marker_current(
    marker: Mapping[str, Any] | None, repo: str, revision: str, local: Mapping[str, Any]
) -> bool:
    """True when the completion marker is for ``repo`` at ``revision`` and every file it lists is on disk
    unchanged. ``local`` maps path -> size, or -> {size, mtime_ns}; a file rewritten since the marker was
    written (other mtime) is not current, so an edited or corrupted file is checked again."""
    if not marker or marker.get("format") != MARKER_FORMAT:
        return False
    if marker.get("repo") != repo or marker.get("revision") != revision:
        return False
    files = marker.get("files")
    if not isinstance(files, list) or not files:
        return False
    for f in files:
        got = local.get(f.get("path"))
        if got is None or _local_size(got) != f.get("size"):
            return False
        if (
            isinstance(got, Mapping)
            and f.get("mtime_ns") is not None
            and got.get("mtime_ns") != f["mtime_ns"]
        ):
            return False
    return True


def hf_prune_candidates(markers: list[Any], keep_dirs: Iterable[str]) -> list[dict[str, Any]]:
    """Directories of older completed downloads. Each item is a marker (with ``dir``) or a pair
    ``[marker, dir]`` where dir is where the marker was found (trusted over the marker's own field).

    Never returns one of ``keep_dirs`` (the model being deployed) nor a directory inside or above one.
    """
    keep = [str(d).rstrip("/") for d in keep_dirs]
    if not keep or any(not d for d in keep):
        raise AnsibleFilterError(
            f"hf_prune_candidates: keep_dirs must name the deployed model dir, got {keep!r}"
        )
    out = []
    for item in markers:
        if isinstance(item, list | tuple) and len(item) == 2:
            m, d = item[0] or {}, str(item[1]).rstrip("/")
        elif isinstance(item, Mapping):
            m, d = item, str(item.get("dir", "")).rstrip("/")
        else:
            raise AnsibleFilterError(f"hf_prune_candidates: expected a marker or [marker, dir], got {item!r}")
        if not d:
            continue
        related = any(d == k or d.startswith(k + "/") or k.startswith(d + "/") for k in keep)
        if not related:
            out.append(
                {
                    "dir": d,
                    "repo": m.get("repo"),
                    "revision": m.get("revision"),
                    "bytes": m.get("total_bytes", 0),
                }
            )
    return sorted(out, key=lambda c: c["dir"])


def hf_sync_plan(hosts: list[str], download_host: str, shared_path: bool) -> dict[str, str]:
    """Per host: ``download`` (the one host that talks to the hub), ``sync`` (receives a copy from it) or
    ``shared`` (reads the same shared directory). One download per host group, never one per GPU worker."""
    if not hosts:
        raise AnsibleFilterError("hf_sync_plan: no hosts in the play")
    if download_host not in hosts:
        raise AnsibleFilterError(
            f"hf_sync_plan: hf_model_download_host {download_host!r} is not one of the play's hosts {hosts!r}"
        )
    rest = "shared" if shared_path else "sync"
    return {h: ("download" if h == download_host else rest) for h in hosts}
