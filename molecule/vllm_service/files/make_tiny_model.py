"""Write a tiny random-weight Llama (about 5 MB) that vLLM's CPU build can serve.

Shape from ../shared/notes/verified-recipes.md section 1: hidden 256, 4 heads (head_dim 64; the CPU
attention rejects head_dim 16), 2 KV heads, 2 layers, a 512-token byte-level BPE vocabulary trained here.
Usage: python make_tiny_model.py OUTPUT_DIR   (run with the engine venv's python: it brings
transformers, tokenizers and torch). Writes config.json last, so its presence means a complete model.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

VOCAB = 512
SPECIAL = ["<s>", "</s>", "<unk>"]
# A minimal chat template: /v1/chat/completions needs one, random weights do not care about its form.
CHAT_TEMPLATE = (
    "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant: {% endif %}"
)
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello, how are you today? I am fine, thank you.",
    "vLLM serves large language models with paged attention.",
    "systemd starts services, restarts them and keeps their logs.",
    "0123456789 !?.,:;()[]{}<>-_+=*/\\'\" abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ",
] * 20


def build_tokenizer() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="</s>"
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def main(out: Path) -> None:
    torch.manual_seed(0)
    tokenizer = build_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=2048,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(out)
    model.save_pretrained(out, safe_serialization=True)
    # save_pretrained wrote config.json before the weights; rewrite it last as the completion marker.
    config_path = out / "config.json"
    text = config_path.read_text()
    config_path.unlink()
    config_path.write_text(text)
    # The service runs as its own user: the files must be world-readable (safetensors writes 0600).
    for path in out.iterdir():
        path.chmod(0o644)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_tiny_model.py OUTPUT_DIR")
    main(Path(sys.argv[1]))
