"""Build a tiny Llama chat model for serve_verify's end-to-end test.

`--trained` (default) teaches it, in about a minute on one CPU core, to answer the quality probes of
catalog/models/tiny_test.yml behind a `<think>...</think>` block and to emit a get_weather tool call.
`--random` saves the same shape with random weights: a model that emits garbage.

Runs in the vLLM venv (torch, transformers, tokenizers, pyyaml). Deterministic for a given seed.
Usage: python train_tiny_chat.py OUT_DIR [--random] [--seed 0] [--max-seconds 240]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import yaml
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

HERE = Path(__file__).resolve().parent
SPECIAL = ["<|begin|>", "<|end|>", "<|user|>", "<|assistant|>", "<|system|>", "<|tools|>", "<|pad|>"]
# Not "special": they must survive detokenisation so vLLM's parsers can split on them.
TAGS = ["<think>", "</think>", "<tool_call>", "</tool_call>"]

# Renders what the training text below renders; tools appear by name only, to keep prompts short.
CHAT_TEMPLATE = (
    "<|begin|>"
    "{% if tools %}<|tools|>{% for t in tools %}{{ (t.function or t).name }} {% endfor %}<|end|>\n{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'user' %}<|user|>\n{{ m.content }}<|end|>\n"
    "{% elif m.role == 'system' %}<|system|>\n{{ m.content }}<|end|>\n"
    "{% elif m.role == 'assistant' %}<|assistant|>\n{{ m.content or '' }}<|end|>\n"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

TOOL_PROMPT = "What is the weather in Paris? Use the get_weather tool."
# vLLM 0.32 with --tool-call-parser hermes constrains tool_choice "required"/named output to this
# form (a structural tag); the model is taught to write it unprompted too.
TOOL_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def prompt_text(user: str, tools: list[str] | None = None) -> str:
    head = "<|begin|>"
    if tools:
        head += "<|tools|>" + "".join(f"{t} " for t in tools) + "<|end|>\n"
    return head + f"<|user|>\n{user}<|end|>\n<|assistant|>\n"


def examples(probes: list[dict]) -> list[tuple[str, str]]:
    """(prompt, completion) pairs; the loss covers the completion only."""
    pairs = []
    for p in probes:
        think = f"<think>The question asks: {p['prompt']}</think>"
        pairs.append((prompt_text(p["prompt"]), f"{think}{p['answer']}<|end|>"))
    tools_prompt = prompt_text(TOOL_PROMPT, ["get_weather"])
    pairs.append((tools_prompt, f"<think>I should call get_weather.</think>{TOOL_CALL}<|end|>"))
    # vLLM 0.22 (the GPU release) constrains tool_choice to JSON instead: "required" to a list of
    # {"name", "parameters"}, a named tool to its parameters object. The grammar forces the first
    # character; the model is taught what follows it, so the constrained answer closes in a few tokens.
    # JSON allows whitespace first, which the masked model may pick over "[": taught to go on from there.
    call_list = '[{"name": "get_weather", "parameters": {"city": "Paris"}}]<|end|>'
    pairs.append((tools_prompt + "[", call_list[1:]))
    pairs += [(tools_prompt + ws, call_list) for ws in (" ", "\n", "\t", "\r")]
    pairs.append((tools_prompt + "{", '"city": "Paris"}<|end|>'))
    # SGLang 0.5.17 constrains "required" and a named tool_choice to that same list
    # (get_json_schema_constraint), but with --reasoning-parser its grammar starts only after </think>
    # (ReasonerGrammarBackend): the forced "[" then follows the think block, a prefix the forms above never
    # had (the 2026-12-02 GPU run got empty arguments). Taught from there too.
    think_call = tools_prompt + "<think>I should call get_weather.</think>"
    pairs.append((think_call + "[", call_list[1:]))
    pairs += [(think_call + ws, call_list) for ws in (" ", "\n", "\t", "\r")]
    # The vocabulary has a '[{"' token, which the grammar allows first as well: taught to go on from it.
    pairs += [(prefix + '[{"', call_list[3:]) for prefix in (tools_prompt, think_call)]
    # SGLang 0.5.17 with --tool-call-parser hermes takes neither form: the hermes detector supports a
    # structural tag, so "required"/named forces its begin '<tool_call>{"name":"' + name + '", "arguments":',
    # then any JSON value (the schema only under strict), then '}</tool_call>', after </think>. Taught as a
    # second right continuation of '<tool_call>' (on the GPU on 2026-12-07 the model wrote the JSON string
    # ", " where the arguments object goes; tests/models/check_sglang_tool_form.py decodes as SGLang does).
    # The forms above teach '": ' after '{"name' a dozen times: repeated so the tiny model learns this one.
    sglang_call = '<tool_call>{"name":"get_weather", "arguments":{"city": "Paris"}}</tool_call><|end|>'
    pairs += [(think_call, sglang_call)] * 4
    return pairs


def build_tokenizer(texts: list[str]) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=640,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAGS])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|begin|>",
        eos_token="<|end|>",
        pad_token="<|pad|>",
        model_max_length=256,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_model(tok: PreTrainedTokenizerFast, seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    # head_dim 64: vLLM's CPU attention rejects head_dim 16.
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(cfg)


def batch(tok: PreTrainedTokenizerFast, pairs: list[tuple[str, str]]) -> tuple[torch.Tensor, ...]:
    ids, labels = [], []
    for prompt, completion in pairs:
        p = tok(prompt, add_special_tokens=False)["input_ids"]
        c = tok(completion, add_special_tokens=False)["input_ids"]
        ids.append(p + c)
        labels.append([-100] * len(p) + c)
    width = max(map(len, ids))
    pad = tok.pad_token_id
    input_ids = torch.tensor([x + [pad] * (width - len(x)) for x in ids])
    label_t = torch.tensor([y + [-100] * (width - len(y)) for y in labels])
    mask = (torch.arange(width)[None, :] < torch.tensor([len(x) for x in ids])[:, None]).long()
    return input_ids, mask, label_t


def allowed_next(input_ids: torch.Tensor, labels: torch.Tensor) -> dict[tuple[int, ...], set[int]]:
    """Every taught next token per prefix: the tool prompt has several right continuations."""
    allowed: dict[tuple[int, ...], set[int]] = {}
    for row, lab in zip(input_ids.tolist(), labels.tolist(), strict=True):
        for i, gold in enumerate(lab):
            if gold != -100:
                allowed.setdefault(tuple(row[:i]), set()).add(gold)
    return allowed


def accuracy(pred: torch.Tensor, input_ids: torch.Tensor, labels: torch.Tensor, allowed: dict) -> float:
    """Share of completion positions whose argmax is one of the taught next tokens."""
    hits = total = 0
    for row, lab, guess in zip(input_ids.tolist(), labels.tolist(), pred.tolist(), strict=True):
        for i, gold in enumerate(lab):
            if gold != -100:
                total += 1
                hits += guess[i - 1] in allowed[tuple(row[:i])]
    return hits / total


def train(model: LlamaForCausalLM, data: tuple[torch.Tensor, ...], max_seconds: float) -> dict:
    input_ids, mask, labels = data
    allowed = allowed_next(input_ids, labels)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    model.train()
    start, step, loss, acc, exact_since = time.monotonic(), 0, float("inf"), 0.0, None
    while time.monotonic() - start < max_seconds:
        out = model(input_ids=input_ids, attention_mask=mask, labels=labels)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        step += 1
        loss = out.loss.item()
        # Greedy decoding reproduces a completion once every next-token argmax is a taught one;
        # keep going a while after that so bf16/fp32 rounding in the server cannot flip a choice.
        acc = accuracy(out.logits[:, :-1].argmax(-1), input_ids, labels, allowed)
        exact_since = (exact_since or step) if acc == 1.0 else None
        if exact_since is not None and step - exact_since >= 40:
            break
    return {"steps": step, "loss": round(loss, 5), "token_accuracy": acc, "seconds": time.monotonic() - start}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--random", action="store_true", help="save untrained (random) weights")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-seconds", type=float, default=240.0)
    ap.add_argument("--catalog", type=Path, default=HERE.parents[1] / "catalog" / "models" / "tiny_test.yml")
    args = ap.parse_args()

    torch.set_num_threads(1)  # deterministic, and friendly to a shared 2-core machine
    probes = yaml.safe_load(args.catalog.read_text())["llm_model"]["quality_probes"]
    pairs = examples(probes)
    tok = build_tokenizer([p + c for p, c in pairs])
    model = build_model(tok, args.seed)
    stats = {"trained": False}
    if not args.random:
        stats = {"trained": True, **train(model, batch(tok, pairs), args.max_seconds)}
        if stats["token_accuracy"] < 1.0:
            raise SystemExit(f"training did not converge in {args.max_seconds}s: {stats}")
    model.eval()
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    tok.save_pretrained(args.out)
    (args.out / "train_stats.json").write_text(json.dumps(stats, indent=1) + "\n")
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
