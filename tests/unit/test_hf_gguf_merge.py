"""Unit tests of the hf_model role's split-GGUF helper (roles/hf_model/files/hf_model_gguf.py)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "roles" / "hf_model" / "files"))
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

import hf_files  # noqa: E402
import hf_model_gguf as g  # noqa: E402
from hf_model_common import Refused  # noqa: E402


def _split(tmp: Path, n_tensors: int = 5, per_part: int = 2) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    tensors = {
        f"blk.{i}.ffn.weight": rng.standard_normal((8, 32), dtype=np.float32) for i in range(n_tensors)
    }
    w = GGUFWriter(tmp / "m.gguf", "llama", split_max_tensors=per_part)
    w.add_name("unit")
    w.add_array("tokenizer.ggml.tokens", ["a", "b", "c"])
    for name, arr in tensors.items():
        w.add_tensor(name, arr)
    raw = np.arange(34, dtype=np.uint8)  # one Q8_0 block: 2-byte scale + 32 int8
    w.add_tensor("q8.weight", raw, raw_dtype=GGMLQuantizationType.Q8_0)
    tensors["q8.weight"] = raw
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tensors


def _group(tmp: Path) -> dict:
    (group,) = hf_files.hf_split_gguf_groups(sorted(p.name for p in tmp.glob("m-*.gguf"))).values()
    return group


def test_python_merge_keeps_every_tensor_and_metadata(tmp_path: Path) -> None:
    tensors = _split(tmp_path)
    group = _group(tmp_path)
    assert group["count"] == 3 and group["missing"] == []
    out = g.merge_group(tmp_path, group, "no-such-llama-gguf-split")
    assert out["method"] == "gguf-python" and out["tensors"] == len(tensors)
    reader = GGUFReader(tmp_path / "m.gguf")
    assert reader.get_field("split.count") is None
    assert reader.get_field("general.name").contents() == "unit"
    assert reader.get_field("tokenizer.ggml.tokens").contents() == ["a", "b", "c"]
    got = {t.name: t for t in reader.tensors}
    assert sorted(got) == sorted(tensors)
    assert got["q8.weight"].data.tobytes() == tensors["q8.weight"].tobytes()
    assert (got["blk.3.ffn.weight"].data.reshape(8, 32) == tensors["blk.3.ffn.weight"]).all()
    assert not list(tmp_path.glob(".m.gguf.partial"))


def test_lfs_pointer_part_is_named(tmp_path: Path) -> None:
    _split(tmp_path)
    group = _group(tmp_path)
    (tmp_path / group["parts"][1]).write_text(
        "version https://git-lfs.github.com/spec/v1\noid sha256:" + "1" * 64 + "\nsize 999\n"
    )
    with pytest.raises(Refused, match="Git-LFS pointer file"):
        g.merge_group(tmp_path, group, "no-such-tool")
    assert not (tmp_path / "m.gguf").exists()


def test_missing_and_damaged_parts_refused(tmp_path: Path) -> None:
    _split(tmp_path)
    group = _group(tmp_path)
    with pytest.raises(Refused, match="missing parts"):
        g.merge_group(tmp_path, {**group, "missing": [group["parts"][2]]}, "x")
    (tmp_path / group["parts"][2]).unlink()
    with pytest.raises(Refused, match="missing on disk"):
        g.merge_group(tmp_path, group, "x")
    _split(tmp_path)
    (tmp_path / group["parts"][0]).write_bytes(b"\x00" * 64)
    with pytest.raises(Refused, match="GGUF magic"):
        g.merge_group(tmp_path, group, "x")


@pytest.mark.skipif(shutil.which("llama-gguf-split") is None, reason="llama.cpp-tools is not installed")
def test_llama_gguf_split_merge(tmp_path: Path) -> None:
    tensors = _split(tmp_path)
    out = g.merge_group(tmp_path, _group(tmp_path), "llama-gguf-split")
    assert out["tensors"] == len(tensors) and out["method"].endswith("llama-gguf-split")
