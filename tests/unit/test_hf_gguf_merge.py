"""Unit tests of the hf_model role's split-GGUF helper (roles/hf_model/files/hf_model_gguf.py)."""

from __future__ import annotations

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
    out = g.merge_group(tmp_path, group)
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
        g.merge_group(tmp_path, group)
    assert not (tmp_path / "m.gguf").exists()


def test_missing_and_damaged_parts_refused(tmp_path: Path) -> None:
    _split(tmp_path)
    group = _group(tmp_path)
    with pytest.raises(Refused, match="missing parts"):
        g.merge_group(tmp_path, {**group, "missing": [group["parts"][2]]}, "x")
    (tmp_path / group["parts"][2]).unlink()
    with pytest.raises(Refused, match="missing on disk"):
        g.merge_group(tmp_path, group)
    _split(tmp_path)
    (tmp_path / group["parts"][0]).write_bytes(b"\x00" * 64)
    with pytest.raises(Refused, match="GGUF magic"):
        g.merge_group(tmp_path, group)


def test_a_merge_that_mixes_up_tensor_bytes_is_refused_and_not_kept(tmp_path: Path, monkeypatch) -> None:
    """Same names, shapes and types, but two tensors' bytes swapped: the per-tensor digest catches it."""
    _split(tmp_path)
    group = _group(tmp_path)
    real_merge = g._merge_python

    def swapping_merge(parts, out):
        real_merge(parts, out)
        reader = GGUFReader(out)
        a, b = (t for t in reader.tensors if t.name in ("blk.0.ffn.weight", "blk.1.ffn.weight"))
        data = bytearray(out.read_bytes())
        sa, sb = int(a.data_offset), int(b.data_offset)
        n = int(a.n_bytes)
        data[sa : sa + n], data[sb : sb + n] = data[sb : sb + n], data[sa : sa + n]
        out.write_bytes(bytes(data))

    monkeypatch.setattr(g, "_merge_python", swapping_merge)
    with pytest.raises(Refused, match=r"different bytes: blk\.0\.ffn\.weight, blk\.1\.ffn\.weight"):
        g.merge_group(tmp_path, group)
    assert not (tmp_path / "m.gguf").exists()
    assert not list(tmp_path.glob(".m.gguf.partial"))


def test_merge_reports_the_quant_level_of_the_file(tmp_path: Path) -> None:
    _split(tmp_path)
    out = g.merge_group(tmp_path, _group(tmp_path))
    # Five 8x32 float32 tensors (256 elements each, 32 bits) and one Q8_0 block (34 bytes for 32 weights).
    assert out["weights_by_type"] == {"F32": 1280, "Q8_0": 32}
    assert out["bits_per_weight"] == round(8 * (1280 * 4 + 34) / 1312, 2)
    assert out["file_type"] is None  # the unit file declares none


def test_merge_into_another_directory_leaves_the_parts_alone(tmp_path: Path) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    src.mkdir()
    dest.mkdir()
    _split(src)
    before = {p.name: p.read_bytes() for p in src.iterdir()}
    out = g.merge_group(src, _group(src), dest)
    assert (dest / out["path"]).is_file()
    assert {p.name: p.read_bytes() for p in src.iterdir()} == before
