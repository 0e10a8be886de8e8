"""Builders of the model repositories the hf_model / model_patch integration tests serve through olah."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
from gguf import GGUFWriter
from safetensors.numpy import save_file


def safetensors_model(
    tmp: Path, shards: int = 3, shard_bytes: int = 2_000_000, big_bytes: int = 0
) -> dict[str, object]:
    """A sharded safetensors checkpoint with its index; ``big_bytes`` makes the last shard that big."""
    tmp.mkdir(parents=True, exist_ok=True)
    files: dict[str, object] = {}
    weight_map = {}
    rng = np.random.default_rng(1234)
    for i in range(1, shards + 1):
        name = f"model-{i:05d}-of-{shards:05d}.safetensors"
        n = (big_bytes if (big_bytes and i == shards) else shard_bytes) // 4
        tensors = {
            f"layers.{i}.w": rng.standard_normal(n, dtype=np.float32),
            f"layers.{i}.b": np.ones(8, np.float32),
        }
        path = tmp / name
        save_file(tensors, str(path))
        files[name] = path
        weight_map.update({k: name for k in tensors})
    index = {
        "metadata": {"total_size": sum(p.stat().st_size for p in files.values())},
        "weight_map": weight_map,
    }
    files["model.safetensors.index.json"] = json.dumps(index, indent=1).encode()
    files["config.json"] = json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 64}).encode()
    files["README.md"] = b"test model\n"
    return files


def split_gguf(tmp: Path, parts: int = 3) -> tuple[dict[str, object], dict[str, np.ndarray]]:
    """A small valid GGUF split by llama.cpp's rules (gguf's writer with split_max_tensors)."""
    tmp.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    tensors = {
        f"blk.{i}.attn_q.weight": rng.standard_normal((16, 32), dtype=np.float32) for i in range(parts * 2)
    }
    writer = GGUFWriter(tmp / "tiny-Q8.gguf", "llama", split_max_tensors=2)
    writer.add_name("tiny")
    writer.add_block_count(parts * 2)
    writer.add_context_length(128)
    for name, arr in tensors.items():
        writer.add_tensor(name, arr)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    files: dict[str, object] = {p.name: p for p in sorted(tmp.glob("tiny-Q8-*.gguf"))}
    assert len(files) == parts, files
    files["README.md"] = b"split gguf\n"
    return files, tensors


def random_file(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        left = size
        while left:
            n = min(left, 1 << 24)
            fh.write(os.urandom(n))
            left -= n
    return path
