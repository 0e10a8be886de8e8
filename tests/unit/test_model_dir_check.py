"""Unit tests of plugins/module_utils/model_dir_check.py on real safetensors and GGUF files."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFWriter
from safetensors.numpy import save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugins" / "module_utils"))

import model_dir_check as mdc


def model(root: Path, shards: int = 2) -> Path:
    root.mkdir(parents=True)
    weight_map = {}
    for i in range(1, shards + 1):
        name = f"model-{i:05d}-of-{shards:05d}.safetensors"
        tensors = {f"layers.{i}.w": np.arange(64, dtype=np.float32), f"layers.{i}.b": np.ones(4, np.float32)}
        save_file(tensors, str(root / name))
        weight_map |= dict.fromkeys(tensors, name)
    (root / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (root / "config.json").write_text(json.dumps({"model_type": "llama"}))
    return root


def test_a_complete_checkpoint_has_no_problems(tmp_path: Path) -> None:
    root = model(tmp_path / "m")
    (root / ".hf_model").mkdir()
    (root / ".hf_model" / "progress.json").write_text("{}")
    result = mdc.check_model_dir(root)
    assert result["problems"] == []
    assert sorted(result["files"]) == [
        "config.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
    ]
    assert result["total_bytes"] == sum(p.stat().st_size for p in root.glob("*") if p.is_file())


def test_truncated_and_padded_shards_are_found_by_their_headers(tmp_path: Path) -> None:
    root = model(tmp_path / "m")
    first, second = sorted(root.glob("*.safetensors"))
    first.write_bytes(first.read_bytes()[:-10])
    second.write_bytes(second.read_bytes() + b"\0")
    problems = mdc.check_model_dir(root)["problems"]
    assert any(first.name in p and "truncated or padded" in p for p in problems), problems
    assert any(second.name in p and "truncated or padded" in p for p in problems), problems


def test_missing_shard_wrong_index_and_garbage(tmp_path: Path) -> None:
    root = model(tmp_path / "m", shards=3)
    (root / "model-00003-of-00003.safetensors").unlink()
    index = json.loads((root / "model.safetensors.index.json").read_text())
    index["weight_map"]["layers.9.w"] = "model-00001-of-00003.safetensors"
    (root / "model.safetensors.index.json").write_text(json.dumps(index))
    (root / "extra.safetensors").write_bytes(b"\xff" * 20)
    problems = " | ".join(mdc.check_model_dir(root)["problems"])
    assert "names files that are missing: model-00003-of-00003.safetensors" in problems
    assert "1 tensors are not in the file it names: layers.9.w" in problems
    assert "extra.safetensors: not a readable safetensors file" in problems


def test_no_config_no_weights_and_not_a_directory(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "README.md").write_text("x")
    problems = mdc.check_model_dir(empty)["problems"]
    assert any("holds no weights" in p for p in problems) and any("no config.json" in p for p in problems)
    assert "is not a directory" in mdc.check_model_dir(tmp_path / "missing")["problems"][0]
    root = model(tmp_path / "m")
    (root / "config.json").write_text("{not json")
    assert any("config.json is not valid JSON" in p for p in mdc.check_model_dir(root)["problems"])


def _split_gguf(root: Path, parts: int) -> list[Path]:
    root.mkdir(parents=True)
    writer = GGUFWriter(root / "tiny-Q8.gguf", "llama", split_max_tensors=1)
    writer.add_block_count(parts)
    for i in range(parts):
        writer.add_tensor(f"blk.{i}.w", np.ones((4, 8), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return sorted(root.glob("*.gguf"))


def test_gguf_split_set_must_be_complete_and_real(tmp_path: Path) -> None:
    root = tmp_path / "g"
    parts = _split_gguf(root, 3)
    assert len(parts) == 3
    assert mdc.check_model_dir(root)["problems"] == []
    parts[1].unlink()
    parts[2].write_bytes(b"GGUX" + parts[2].read_bytes()[4:])
    problems = " | ".join(mdc.check_model_dir(root)["problems"])
    assert "parts [2] of 3 are missing" in problems
    assert "does not start with the GGUF magic" in problems


def test_allow_patterns_and_the_download_record(tmp_path: Path) -> None:
    root = model(tmp_path / "m")
    (root / "notes.bin").write_bytes(b"x")
    record = {"files": [{"path": "config.json", "size": 999}, {"path": "tokenizer.json", "size": 5}]}
    result = mdc.check_model_dir(root, ignore=["*.bin"], marker=record)
    assert "notes.bin" not in result["files"]
    joined = " | ".join(result["problems"])
    assert "config.json: " in joined and "record says 999" in joined
    assert "tokenizer.json: listed in the download's completion record but missing" in joined
    only = mdc.check_model_dir(root, allow=["*.json", "*.safetensors"], marker=record)
    assert "notes.bin" not in only["files"]


@pytest.mark.parametrize("length", [b"\xff" * 8, b"\x01\x00"])
def test_implausible_header_lengths(tmp_path: Path, length: bytes) -> None:
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(length)
    with pytest.raises(ValueError):
        mdc.safetensors_header(bad)
