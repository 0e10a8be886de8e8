"""Verify a model directory that is already on the host (a shared filesystem, a pre-copied folder).

No hub is asked: the checks read what the files say about themselves. Each safetensors file's header gives
the byte range of every tensor, so a truncated or padded file is found without reading the weights; the
index's weight_map must point at files that hold those tensors; a GGUF file must start with its magic, and a
split set must be complete. Standard library only: the hf_model role copies this file beside its helper
scripts and runs it with any Python on the host.
"""

from __future__ import annotations

import fnmatch
import json
import re
import struct
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

try:  # the collection's module_utils package, or beside the hf_model helper scripts on the host
    from . import hf_files
except ImportError:
    import hf_files

SKIP_DIRS = (".cache", ".hf_model", ".git")
MAX_HEADER_BYTES = 100 * 1024 * 1024
GGUF_PART = re.compile(r"^(?P<stem>.+)-(?P<index>\d{5})-of-(?P<total>\d{5})\.gguf$")
SHOWN = 8


def list_files(root: Path, allow: Iterable[str] = (), ignore: Iterable[str] = ()) -> dict[str, int]:
    """Relative path -> size of every regular file under root, state and cache folders left out."""
    allow, ignore = list(allow), list(ignore)
    out: dict[str, int] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel.split("/", 1)[0] in SKIP_DIRS or not path.is_file():
            continue
        if allow and not any(fnmatch.fnmatch(rel, p) for p in allow):
            continue
        if any(fnmatch.fnmatch(rel, p) for p in ignore):
            continue
        out[rel] = path.stat().st_size
    return out


def safetensors_header(path: Path) -> tuple[dict[str, Any], int]:
    """The header (tensor name -> dtype, shape, data_offsets) and the size the file must have."""
    with path.open("rb") as fh:
        raw = fh.read(8)
        if len(raw) != 8:
            raise ValueError("shorter than the 8-byte header length")
        (length,) = struct.unpack("<Q", raw)
        if length > MAX_HEADER_BYTES:
            raise ValueError(f"header length {length} is not plausible")
        text = fh.read(length)
    if len(text) != length:
        raise ValueError(f"header cut short ({len(text)} of {length} bytes)")
    header = json.loads(text)
    if not isinstance(header, dict):
        raise ValueError("header is not a JSON object")
    end = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, Mapping) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and 0 <= offsets[0] <= offsets[1]):
            raise ValueError(f"tensor {name} has no valid data_offsets")
        end = max(end, int(offsets[1]))
    return header, 8 + length + end


def _check_safetensors(root: Path, files: Mapping[str, int]) -> tuple[list[str], set[str]]:
    problems: list[str] = []
    tensors_by_file: dict[str, set[str]] = {}
    for rel in sorted(f for f in files if f.endswith(".safetensors")):
        try:
            header, expected = safetensors_header(root / rel)
        except (OSError, ValueError) as exc:
            problems.append(f"{rel}: not a readable safetensors file ({exc})")
            continue
        if expected != files[rel]:
            problems.append(f"{rel}: {files[rel]} bytes, its header says {expected} (truncated or padded)")
        tensors_by_file[rel] = {k for k in header if k != "__metadata__"}
    for index_rel in sorted(f for f in files if f.endswith(".safetensors.index.json")):
        try:
            weight_map = json.loads((root / index_rel).read_text()).get("weight_map") or {}
        except (OSError, ValueError, AttributeError) as exc:
            problems.append(f"{index_rel}: not a readable index ({exc})")
            continue
        base = str(Path(index_rel).parent)
        missing_files = sorted({f for f in weight_map.values() if _join(base, f) not in files})
        if missing_files:
            problems.append(f"{index_rel} names files that are missing: {', '.join(missing_files[:SHOWN])}")
        absent = [
            name
            for name, f in weight_map.items()
            if _join(base, f) in tensors_by_file and name not in tensors_by_file[_join(base, f)]
        ]
        if absent:
            shown = ", ".join(absent[:SHOWN])
            problems.append(f"{index_rel}: {len(absent)} tensors are not in the file it names: {shown}")
    return problems, set(tensors_by_file)


def _join(base: str, name: str) -> str:
    return name if base in ("", ".") else f"{base}/{name}"


def _check_gguf(root: Path, files: Mapping[str, int]) -> list[str]:
    problems: list[str] = []
    for rel in sorted(f for f in files if f.endswith(".gguf")):
        try:
            with (root / rel).open("rb") as fh:
                magic = fh.read(4)
        except OSError as exc:
            problems.append(f"{rel}: cannot be read ({exc})")
            continue
        if magic != hf_files.GGUF_MAGIC:
            problems.append(f"{rel}: does not start with the GGUF magic (got {magic!r})")
    try:
        groups = hf_files.hf_split_gguf_groups(files)
    except ValueError as exc:  # AnsibleFilterError is a ValueError too: parts naming different counts
        return [*problems, str(exc)]
    for merged, group in sorted(groups.items()):
        if group["missing"]:
            numbers = [int(p.rsplit("-of-", 1)[0][-5:]) for p in group["missing"]]
            problems.append(f"split GGUF {merged}: parts {numbers[:SHOWN]} of {group['count']} are missing")
    return problems


def check_model_dir(
    root: str | Path,
    allow: Iterable[str] = (),
    ignore: Iterable[str] = (),
    marker: Mapping[str, Any] | None = None,
    require_weights: bool = True,
) -> dict[str, Any]:
    """Files, total size and the problems found (empty when the directory holds a usable model).
    ``require_weights=False``: only config.json and the tokenizer are wanted (a GGUF model's base)."""
    base = Path(root)
    if not base.is_dir():
        return {"files": {}, "total_bytes": 0, "problems": [f"{base} is not a directory on this host"]}
    files = list_files(base, allow, ignore)
    problems: list[str] = []
    weights = [f for f in files if f.endswith((".safetensors", ".gguf", ".bin", ".pt", ".pth"))]
    if not weights and require_weights:
        problems.append(f"{base} holds no weights (.safetensors, .gguf, .bin)")
    gguf_only = bool(weights) and all(f.endswith(".gguf") for f in weights)
    if not gguf_only:
        if "config.json" not in files:
            problems.append(f"{base} has no config.json")
        else:
            try:
                config = json.loads((base / "config.json").read_text())
                if not isinstance(config, dict):
                    raise ValueError("not a JSON object")
            except (OSError, ValueError) as exc:
                problems.append(f"config.json is not valid JSON ({exc})")
    st_problems, _ = _check_safetensors(base, files)
    problems += st_problems + _check_gguf(base, files)
    for entry in (marker or {}).get("files", []) if isinstance(marker, Mapping) else []:
        path, size = entry.get("path"), entry.get("size")
        if path in files and size is not None and files[path] != size:
            problems.append(f"{path}: {files[path]} bytes, the download's completion record says {size}")
        elif path not in files and (not allow or any(fnmatch.fnmatch(path, p) for p in allow)):
            problems.append(f"{path}: listed in the download's completion record but missing")
    return {
        "files": files,
        "total_bytes": sum(files.values()),
        "weights": weights,
        "gguf_files": sorted(f for f in weights if f.endswith(".gguf") and not GGUF_PART.match(f)),
        "problems": problems,
    }
