"""Greedy decoding of the trained tiny chat model under the constraint SGLang 0.5.17 puts on a tool_choice
"required" or named request with --tool-call-parser hermes and --reasoning-parser deepseek_r1, using the
grammar engine SGLang uses (xgrammar) on CPU, then the hermes parse SGLang applies to the text.

What SGLang does (read from its 0.5.17 sources, serving_chat.py and function_call_parser.py): the hermes
detector supports a structural tag, so the request gets a legacy structural tag with one structure per
tool: begin '<tool_call>{"name":"' + NAME + '", "arguments":', the schema {} (any JSON value; the tool's
parameters only when it is strict), end '}</tool_call>', trigger '<tool_call>', at_least_one for required
and named. With a reasoning parser the grammar applies only after '</think>' (ReasonerGrammarBackend).
The reply is then parsed by the hermes detector: the JSON between <tool_call> and </tool_call>.

Runs in the vLLM CPU venv (torch, transformers, xgrammar). Prints one JSON object; exit status 1 when the call
is not get_weather with an arguments object naming the city.
Usage: check_sglang_tool_form.py MODEL_DIR
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import torch
import xgrammar as xgr
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugins" / "module_utils"))
from serve_verify_client import TOOL_PROMPT, TOOL_WEATHER

THINK_END = "</think>"
MAX_NEW_TOKENS = 64


def structural_tag(name: str) -> xgr.StructuralTag:
    item = xgr.StructuralTagItem(
        begin='<tool_call>{"name":"' + name + '", "arguments":', schema=json.dumps({}), end="}</tool_call>"
    )
    tag = xgr.StructuralTag.from_legacy_structural_tag([item], ["<tool_call>"])
    tag.format.at_least_one = True
    return tag


def next_token(model: AutoModelForCausalLM, ids: list[int], mask: torch.Tensor | None) -> int:
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, -1].float()
    if mask is not None:
        logits = logits[None]
        xgr.apply_token_bitmask_inplace(logits, mask)
        logits = logits[0]
    return int(logits.argmax())


def generate(model_dir: Path) -> dict:
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    messages = [{"role": "user", "content": TOOL_PROMPT}]
    prompt = tok.apply_chat_template(
        messages, tools=[TOOL_WEATHER], add_generation_prompt=True, tokenize=False
    )
    ids = tok(prompt, add_special_tokens=False)["input_ids"]
    info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=model.config.vocab_size)
    compiled = xgr.GrammarCompiler(info).compile_structural_tag(structural_tag("get_weather"))
    matcher, mask = None, xgr.allocate_token_bitmask(1, info.vocab_size)
    out: list[int] = []
    while len(out) < MAX_NEW_TOKENS:
        if matcher is None and THINK_END in tok.decode(out):
            matcher = xgr.GrammarMatcher(compiled)
        if matcher is not None:
            if matcher.is_terminated():
                break
            matcher.fill_next_token_bitmask(mask)
        token = next_token(model, ids + out, mask if matcher is not None else None)
        if matcher is None and token == tok.eos_token_id:
            break
        if matcher is not None and not matcher.accept_token(token):
            break
        out.append(token)
    text = tok.decode(out, skip_special_tokens=False)
    reasoning, _sep, answer = text.rpartition(THINK_END)
    found = re.search(r"<tool_call>(.*?)</tool_call>", answer, re.DOTALL)
    call = None
    if found:
        try:
            call = json.loads(found.group(1).strip())
        except json.JSONDecodeError:
            call = None
    arguments = call.get("arguments") if isinstance(call, dict) else None
    ok = (
        isinstance(call, dict)
        and call.get("name") == "get_weather"
        and isinstance(arguments, dict)
        and "paris" in str(arguments.get("city", "")).lower()
    )
    return {"completion": text, "reasoning": reasoning, "call": call, "ok": ok}


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    result = generate(Path(sys.argv[1]))
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
