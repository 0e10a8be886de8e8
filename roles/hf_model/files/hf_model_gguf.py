"""Merge a split GGUF (``name-00001-of-0000N.gguf`` ...) into ``name.gguf`` and check the result.

Before merging, every part must exist and start with the GGUF magic; a Git-LFS pointer in place of a part
(the "invalid magic characters 'vers'" error of llama.cpp) is named as such. The merge uses llama.cpp's
``llama-gguf-split --merge`` when it is on PATH, else the ``gguf`` Python package. The merged file is
written beside the parts under a temporary name, read back with ``gguf.GGUFReader`` (it must hold every
tensor of every part, with the same shapes and types), then renamed into place.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter
from hf_model_common import HEAD_BYTES, Refused, hf_files

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


def _tensor_table(path: Path) -> dict[str, tuple[tuple[int, ...], int, int]]:
    reader = GGUFReader(path)
    return {
        t.name: (tuple(int(x) for x in t.shape), int(t.tensor_type), int(t.n_bytes)) for t in reader.tensors
    }


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


def merge_group(local_dir: Path, group: dict[str, Any], split_bin: str) -> dict[str, Any]:
    parts = check_parts(local_dir, group)
    out = local_dir / group["merged"]
    expected: dict[str, tuple[tuple[int, ...], int, int]] = {}
    for p in parts:
        expected.update(_tensor_table(p))
    tmp = out.with_name(f".{out.name}.partial")
    tmp.unlink(missing_ok=True)  # llama-gguf-split refuses to overwrite
    tool = shutil.which(split_bin)
    try:
        if tool:
            proc = subprocess.run(
                [tool, "--merge", str(parts[0]), str(tmp)], capture_output=True, text=True, check=False
            )
            if proc.returncode != 0:
                raise Refused(f"{tool} --merge {parts[0]} failed ({proc.returncode}): {proc.stderr[-2000:]}")
            method = tool
        else:
            _merge_python(parts, tmp)
            method = "gguf-python"
        got = _tensor_table(tmp)
    except Refused:
        tmp.unlink(missing_ok=True)
        raise
    except Exception as exc:
        tmp.unlink(missing_ok=True)
        raise Refused(f"merging {group['first']!r} failed: {exc}") from exc
    if got != expected:
        missing = sorted(set(expected) - set(got))
        tmp.unlink(missing_ok=True)
        raise Refused(
            f"merged {out.name} does not match its parts "
            f"(missing or changed tensors: {missing[:10] or 'shapes'})"
        )
    tmp.replace(out)
    return {"path": group["merged"], "parts": group["parts"], "tensors": len(got), "method": method}
