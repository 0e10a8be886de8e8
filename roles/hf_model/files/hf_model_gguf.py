"""Merge a split GGUF (``name-00001-of-0000N.gguf`` ...) into ``name.gguf`` and check the result.

Before merging, every part must exist and start with the GGUF magic; a Git-LFS pointer in place of a part
(the "invalid magic characters 'vers'" error of llama.cpp) is named as such. The ``gguf`` Python package
merges: the first part's metadata without the ``split.*`` keys, then every part's tensors in order. The
merged file is written beside the parts under a temporary name and read back: it must hold every tensor of
every part with the same shape, type and bytes (a digest per tensor), else it is deleted and refused. Only
then is it renamed into place.

llama.cpp's ``llama-gguf-split --merge`` is not used: no Debian release a fresh host can install ships it
(Debian's ``llama.cpp-tools-extra`` is in forky only and needs glibc 2.43), no wheel carries it, and the
merge above writes the same layout.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter, LlamaFileType
from hf_model_common import (
    HEAD_BYTES,
    STATE_DIR,
    Refused,
    hf_files,
    local_stats,
    read_json,
    run_main,
    write_json_atomic,
)

SPLIT_KEY_PREFIX = "split."


def check_parts(local_dir: Path, group: dict[str, Any]) -> list[Path]:
    if group["missing"]:
        raise Refused(f"split GGUF {group['first']!r} is missing parts: {', '.join(group['missing'])}")
    parts = [local_dir / p for p in group["parts"]]
    for p in parts:
        if not p.is_file():
            raise Refused(f"split GGUF part {p} is missing on disk")
        with p.open("rb") as fh:
            head = fh.read(HEAD_BYTES)
        if hf_files.hf_is_lfs_pointer(head):
            raise Refused(
                f'{p} is a Git-LFS pointer file, not GGUF data (llama.cpp: "invalid magic characters '
                "'vers'\"); fetch it through the hub API (huggingface_hub), not a git clone without LFS"
            )
        if head[:4] != hf_files.GGUF_MAGIC:
            raise Refused(f"{p} does not start with the GGUF magic (got {head[:4]!r}): damaged download")
    return parts


def _tensor_table(path: Path) -> dict[str, tuple[tuple[int, ...], int, int, str]]:
    """name -> (shape, GGML type, bytes, blake2b of the bytes): what a merged file must reproduce."""
    reader = GGUFReader(path)
    return {
        t.name: (
            tuple(int(x) for x in t.shape),
            int(t.tensor_type),
            int(t.n_bytes),
            hashlib.blake2b(np.ascontiguousarray(t.data).view(np.uint8), digest_size=16).hexdigest(),
        )
        for t in reader.tensors
    }


def quant_summary(path: Path) -> dict[str, Any]:
    """The file's declared type (general.file_type), its tensor types and the bits per weight it stores."""
    reader = GGUFReader(path)
    field = reader.get_field("general.file_type")
    file_type = None
    if field is not None:
        value = int(field.contents())
        file_type = LlamaFileType(value).name if value in LlamaFileType._value2member_map_ else str(value)
    types: dict[str, int] = {}
    n_bytes = n_elements = 0
    for t in reader.tensors:
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + int(t.n_elements)
        n_bytes += int(t.n_bytes)
        n_elements += int(t.n_elements)
    return {
        "file_type": file_type,
        "bits_per_weight": round(8 * n_bytes / n_elements, 2) if n_elements else None,
        "weights_by_type": dict(sorted(types.items(), key=lambda kv: -kv[1])),
    }


def compare_tables(expected: dict[str, Any], got: dict[str, Any]) -> str:
    """'' when the merged file's tensors equal the parts'; else what differs (first few names)."""
    missing = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    changed = sorted(n for n in set(expected) & set(got) if expected[n] != got[n])
    problems = []
    for label, names in (("missing", missing), ("not in any part", extra), ("different bytes", changed)):
        if names:
            problems.append(f"{label}: {', '.join(names[:5])}{' ...' if len(names) > 5 else ''}")
    return "; ".join(problems)


def _merge_python(parts: list[Path], out: Path) -> None:
    readers = [GGUFReader(p) for p in parts]
    first = readers[0]
    arch_field = first.get_field("general.architecture")
    arch = arch_field.contents() if arch_field else "unknown"
    writer = GGUFWriter(out, arch)
    for key, field in first.fields.items():
        if key.startswith(SPLIT_KEY_PREFIX) or key.startswith("GGUF.") or key == "general.architecture":
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == GGUFValueType.ARRAY else None
        writer.add_key_value(key, field.contents(), vtype, sub_type=sub)
        if key == "general.alignment":
            writer.data_alignment = int(field.contents())
    tensors = [t for r in readers for t in r.tensors]
    for t in tensors:
        shape = [int(x) for x in reversed(t.shape.tolist())]
        writer.add_tensor_info(t.name, shape, np.dtype(np.float32), int(t.n_bytes), raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in tensors:
        writer.write_tensor_data(t.data)
    writer.close()


def merge_group(local_dir: Path, group: dict[str, Any], out_dir: Path | None = None) -> dict[str, Any]:
    """Merge ``group``'s parts (in ``local_dir``) into its merged file in ``out_dir`` (default: local_dir)."""
    parts = check_parts(local_dir, group)
    out = (out_dir or local_dir) / group["merged"]
    expected: dict[str, Any] = {}
    for p in parts:
        expected.update(_tensor_table(p))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.partial")
    tmp.unlink(missing_ok=True)
    try:
        _merge_python(parts, tmp)
        got = _tensor_table(tmp)
    except Exception as exc:
        tmp.unlink(missing_ok=True)
        raise Refused(f"merging {group['first']!r} failed: {exc}") from exc
    difference = compare_tables(expected, got)
    if difference:
        tmp.unlink(missing_ok=True)
        raise Refused(f"merged {out.name} does not match its parts ({difference}); nothing was kept")
    tmp.replace(out)
    return {
        "path": group["merged"],
        "parts": group["parts"],
        "tensors": len(got),
        "method": "gguf-python",
        **quant_summary(out),
    }


SOURCE_RECORD = "merged-from.json"


def merge_source(source_dir: Path, dest_dir: Path, names: list[str]) -> dict[str, Any]:
    """Merge the split sets found among ``names`` (files of ``source_dir``) whose merged file is not there,
    into ``dest_dir``. A set merged before from the same parts (names, sizes, mtimes) is not merged again."""
    groups = hf_files.hf_split_gguf_groups(names)
    record_path = dest_dir / STATE_DIR / SOURCE_RECORD
    record = read_json(record_path) or {}
    merged, kept = [], []
    for name, group in sorted(groups.items()):
        if name in names:
            continue  # the source holds the merged file itself
        parts = local_stats(source_dir, group["parts"])
        target = dest_dir / group["merged"]
        if record.get(name, {}).get("part_stats") == parts and target.is_file():
            kept.append(name)
            continue
        dest_dir.mkdir(parents=True, exist_ok=True)
        result = merge_group(source_dir, group, dest_dir)
        record[name] = {**result, "part_stats": parts}
        write_json_atomic(record_path, record)
        merged.append(result)
    return {
        "changed": bool(merged),
        "merged": merged,
        "kept": kept,
        "gguf": [
            {k: v for k, v in record[n].items() if k != "part_stats"} for n in sorted(record) if n in groups
        ],
    }


def main() -> dict[str, Any]:
    req = json.load(sys.stdin)
    source, dest = Path(req["source_dir"]), Path(req["dest_dir"])
    names = sorted(str(p.relative_to(source)) for p in source.rglob("*.gguf") if STATE_DIR not in p.parts)
    return merge_source(source, dest, names)


if __name__ == "__main__":
    run_main(main)
