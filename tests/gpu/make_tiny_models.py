"""Build small random-weight checkpoints for recording vLLM start-up logs on the lent GPU machine.

Each model is saved with transformers' own config class and `save_pretrained` (bf16 safetensors) plus a
word-level tokenizer, so vLLM loads it as it would a published checkpoint. No network is needed.
Usage: python3 make_tiny_models.py OUT_DIR [NAME...]   (default: every model below)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import transformers
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast


def llama_gqa() -> transformers.PretrainedConfig:
    # Llama-style GQA: 16 query heads share 4 KV heads of 64 dims.
    return transformers.LlamaConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
        head_dim=64,
        max_position_embeddings=8192,
        tie_word_embeddings=False,
    )


def dsv3_mla() -> transformers.PretrainedConfig:
    # DeepSeek-V3-style: MLA latent 512 + rope 64, one dense layer then 16 routed experts (+1 shared).
    return transformers.DeepseekV3Config(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2048,
        moe_intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=16,
        num_key_value_heads=16,
        n_shared_experts=1,
        n_routed_experts=16,
        num_experts_per_tok=4,
        n_group=4,
        topk_group=2,
        first_k_dense_replace=1,
        q_lora_rank=384,
        kv_lora_rank=512,
        qk_rope_head_dim=64,
        qk_nope_head_dim=128,
        v_head_dim=128,
        max_position_embeddings=8192,
        tie_word_embeddings=False,
    )


def gemma3_hybrid() -> transformers.PretrainedConfig:
    # Gemma-3-style text model: 5 sliding-window (512) layers per full-attention layer, 262k vocabulary.
    return transformers.Gemma3TextConfig(
        vocab_size=262144,
        hidden_size=1024,
        intermediate_size=4096,
        num_hidden_layers=12,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=128,
        query_pre_attn_scalar=128,
        sliding_window=512,
        max_position_embeddings=32768,
    )


MODELS = {"llama_gqa": llama_gqa, "dsv3_mla": dsv3_mla, "gemma3_hybrid": gemma3_hybrid}
# Keys vLLM needs that transformers 5 no longer writes (without them vLLM builds no
# e_score_correction_bias and the load fails; the published DeepSeek-V3 config has them).
CONFIG_EXTRAS = {"dsv3_mla": {"topk_method": "noaux_tc", "scoring_func": "sigmoid"}}


def save_tokenizer(out: Path, size: int = 1000) -> None:
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "<pad>": 3}
    vocab.update({f"w{i}": i for i in range(len(vocab), size)})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    # vLLM's chat endpoint refuses a tokenizer without a chat template (transformers >= 4.44 has no default).
    fast.chat_template = (
        "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}"
    )
    fast.save_pretrained(out)


def build(name: str, root: Path) -> Path:
    out = root / name
    cfg = MODELS[name]()
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16)
    model.config.torch_dtype = torch.bfloat16
    model.save_pretrained(out)
    path = out / "config.json"
    saved = json.loads(path.read_text())
    saved.update(CONFIG_EXTRAS.get(name, {}))
    path.write_text(json.dumps(saved, indent=2) + "\n")
    # One token per embedding row: a random model picks any id, and each must decode to text.
    save_tokenizer(out, cfg.vocab_size)
    params = sum(p.numel() for p in model.parameters())
    print(f"{name}: {params / 1e6:.1f}M parameters -> {out}", flush=True)
    return out


def main() -> None:
    root = Path(sys.argv[1])
    names = sys.argv[2:] or list(MODELS)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}", flush=True)
    for name in names:
        build(name, root)


if __name__ == "__main__":
    main()
