"""Write a Hugging Face Llama checkpoint (one model.safetensors) as GGUF, split like llama.cpp's gguf-split.

The layout follows llama.cpp's converter for Llama: tensor names from the ``gguf`` package's name map, Q and
K rows permuted for its rotary layout (vLLM's in-tree GGUF loader serves Llama with the non-neox rotary
style because of this), 1-D tensors kept in F32, the byte-level BPE vocabulary and chat template in the
metadata. With ``split_max_tensors`` the writer produces ``NAME-00001-of-0000N.gguf`` parts (every part
carries ``split.*`` keys, the first one all the metadata), which is what the deploy downloads and merges.

``permute=False`` writes the Q/K rows as Hugging Face stores them: a file that loads without error and
answers garbage, the case serve_verify's quality gate exists for.

Usage: python tests/models/make_gguf.py HF_DIR OUT.gguf [--type Q8_0|F16|F32] [--split-max-tensors N]
       [--no-permute]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import gguf
import numpy as np
from safetensors.numpy import load_file

QUANT_TYPES = {
    "F32": (gguf.GGMLQuantizationType.F32, gguf.LlamaFileType.ALL_F32),
    "F16": (gguf.GGMLQuantizationType.F16, gguf.LlamaFileType.MOSTLY_F16),
    "Q8_0": (gguf.GGMLQuantizationType.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
}


def rotary_permute(weight: np.ndarray, n_head: int) -> np.ndarray:
    """Interleave each head's two rotary halves, as llama.cpp's Llama converter does for Q and K."""
    rows = weight.shape[0]
    return (
        weight.reshape(n_head, 2, rows // n_head // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)
    )


def _tokenizer(writer: gguf.GGUFWriter, hf_dir: Path, cfg: dict) -> None:
    tok = json.loads((hf_dir / "tokenizer.json").read_text())
    vocab = dict(tok["model"]["vocab"])
    added = {t["id"]: t for t in tok.get("added_tokens", [])}
    vocab.update({t["content"]: i for i, t in added.items()})
    by_id = {i: s for s, i in vocab.items()}
    tokens, types = [], []
    for i in range(cfg["vocab_size"]):
        tokens.append(by_id.get(i, f"[PAD{i}]"))
        if i in added:
            types.append(gguf.TokenType.CONTROL if added[i]["special"] else gguf.TokenType.USER_DEFINED)
        else:
            types.append(gguf.TokenType.NORMAL)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]])
    for key, add in (
        ("bos_token_id", writer.add_bos_token_id),
        ("eos_token_id", writer.add_eos_token_id),
        ("pad_token_id", writer.add_pad_token_id),
    ):
        if isinstance(cfg.get(key), int):
            add(cfg[key])
    template = hf_dir / "chat_template.jinja"
    if template.exists():
        writer.add_chat_template(template.read_text())


def write_gguf(
    hf_dir: Path, out: Path, quant: str = "Q8_0", split_max_tensors: int = 0, permute: bool = True
) -> list[Path]:
    """Write ``hf_dir``'s Llama checkpoint to ``out`` (or its split parts); returns the files written."""
    cfg = json.loads((hf_dir / "config.json").read_text())
    tensors = load_file(str(hf_dir / "model.safetensors"))
    n_layer, n_head = cfg["num_hidden_layers"], cfg["num_attention_heads"]
    n_kv = cfg.get("num_key_value_heads") or n_head
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // n_head
    rope = cfg.get("rope_parameters") or {}
    qtype, ftype = QUANT_TYPES[quant]
    arch = gguf.MODEL_ARCH.LLAMA
    names = gguf.get_tensor_name_map(arch, n_layer)

    writer = gguf.GGUFWriter(out, gguf.MODEL_ARCH_NAMES[arch], split_max_tensors=split_max_tensors)
    writer.add_name(hf_dir.name)
    writer.add_context_length(cfg["max_position_embeddings"])
    writer.add_embedding_length(cfg["hidden_size"])
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(cfg["intermediate_size"])
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_kv)
    writer.add_rope_dimension_count(head_dim)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_freq_base(float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0))))
    writer.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    writer.add_vocab_size(cfg["vocab_size"])
    writer.add_file_type(ftype)
    _tokenizer(writer, hf_dir, cfg)

    for name, value in tensors.items():
        data = value.astype(np.float32)
        if permute and name.endswith("q_proj.weight"):
            data = rotary_permute(data, n_head)
        elif permute and name.endswith("k_proj.weight"):
            data = rotary_permute(data, n_kv)
        base, suffix = name.rsplit(".", 1)
        mapped = names.get_name(base)
        if mapped is None:
            raise SystemExit(f"make_gguf: no GGUF name for tensor {name!r}")
        if data.ndim == 1 or qtype == gguf.GGMLQuantizationType.F32:
            writer.add_tensor(f"{mapped}.{suffix}", data)
        elif qtype == gguf.GGMLQuantizationType.F16:
            writer.add_tensor(f"{mapped}.{suffix}", data.astype(np.float16))
        else:
            packed = gguf.quants.quantize(data, qtype)
            writer.add_tensor(f"{mapped}.{suffix}", packed, raw_shape=packed.shape, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    if split_max_tensors:
        return sorted(out.parent.glob(f"{out.stem}-*-of-*.gguf"))
    return [out]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("hf_dir", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--type", default="Q8_0", choices=sorted(QUANT_TYPES))
    parser.add_argument("--split-max-tensors", type=int, default=0)
    parser.add_argument("--no-permute", action="store_true")
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for path in write_gguf(args.hf_dir, args.out, args.type, args.split_max_tensors, not args.no_permute):
        print(f"{path} {path.stat().st_size}")


if __name__ == "__main__":
    main()
