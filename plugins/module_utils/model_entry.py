"""A catalog entry (the shape of catalog/models/*.yml) derived from a hub repository's own files.

Input: what hf_hub_metadata.hub_model read (config.json, hf_quant_config.json, weight files, chat template).
What cannot be derived stays neutral and is said so: no checkpoint patches, no known issues of its own, the
tool-call and reasoning parsers from the model family (PARSERS; "none" when the family is not listed),
generic quality probes with their threshold.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

try:  # the collection's module_utils package, or the directory itself on sys.path (bin/llm-plan, tests)
    from . import known_issues
except ImportError:
    import known_issues  # type: ignore[no-redef]

# model_type -> (tool-call parser, reasoning parser), vLLM's registered names (vllm/tool_parsers/__init__.py
# and vllm/reasoning/__init__.py of vLLM 0.22.0 and 0.33.0, recorded in vllm_parsers.json; the tool-calling
# page of vLLM's documentation names the families; GLM-5 and DeepSeek-V3.2 from vllm-project/recipes).
# Name patterns refine a family where one model_type covers several (Qwen3-Coder, DeepSeek-R1).
PARSERS: dict[str, tuple[str | None, str | None]] = {
    "qwen2": ("hermes", None),
    "qwen2_moe": ("hermes", None),
    "qwen3": ("hermes", "qwen3"),
    "qwen3_moe": ("hermes", "qwen3"),
    "qwen3_vl": ("hermes", "qwen3"),
    "qwen3_vl_moe": ("hermes", "qwen3"),
    "llama": ("llama3_json", None),
    "llama4": ("llama4_pythonic", None),
    "mistral": ("mistral", None),
    "mixtral": ("mistral", None),
    "deepseek_v3": ("deepseek_v3", None),
    "kimi_k2": ("kimi_k2", "kimi_k2"),
    "kimi_k25": ("kimi_k2", "kimi_k2"),
    "glm4_moe": ("glm45", "glm45"),
    "glm_moe_dsa": ("glm47", "glm45"),
    "deepseek_v32": ("deepseek_v32", "deepseek_v3"),
    "gpt_oss": ("openai", "openai_gptoss"),
}
NAME_OVERRIDES: list[tuple[str, str, tuple[str | None, str | None]]] = [
    ("qwen3_moe", r"(?i)coder", ("qwen3_coder", None)),
    ("deepseek_v3", r"(?i)\bR1\b|-R1", ("deepseek_v3", "deepseek_r1")),
]
# Questions any instruction-tuned model of a few billion parameters answers; a pass needs 4 of 5.
GENERIC_PROBES = [
    {"prompt": "What is the capital of France? Answer in one word.", "expect": "Paris", "max_tokens": 512},
    {"prompt": "What is 2+2? Answer with the number only.", "expect": r"\b4\b", "max_tokens": 512},
    {"prompt": "What is the opposite of hot? One word.", "expect": "(?i)cold", "max_tokens": 512},
    {"prompt": "Name the largest planet in the solar system.", "expect": "(?i)jupiter", "max_tokens": 512},
    {
        "prompt": "How many legs does a spider have? Answer with a number.",
        "expect": r"(?i)\b(8|eight)\b",
        "max_tokens": 512,
    },
]
GENERIC_MIN_PASS_RATIO = 0.8


def _text(config: Mapping[str, Any]) -> Mapping[str, Any]:
    text = config.get("text_config")
    return text if isinstance(text, Mapping) else config


def quant_format(config: Mapping[str, Any], hf_quant_config: Mapping[str, Any] | None = None) -> str:
    """The checkpoint format as the catalog names it (modelopt_nvfp4, fp8, awq, mxfp4...) or its dtype."""
    q = config.get("quantization_config") if isinstance(config.get("quantization_config"), Mapping) else {}
    method = str(q.get("quant_method", "")).lower()
    algo = str(
        q.get("quant_algo", "") or ((hf_quant_config or {}).get("quantization") or {}).get("quant_algo", "")
    )
    if method == "modelopt" or hf_quant_config:
        return f"modelopt_{algo.lower()}" if algo else "modelopt"
    if method in ("fp8", "mxfp4", "awq", "gptq", "bitsandbytes", "gguf"):
        return method
    if method == "compressed-tensors":
        return "compressed_tensors"
    if method:
        return method.replace("-", "_")
    dtype = str(
        _text(config).get("torch_dtype") or _text(config).get("dtype") or config.get("torch_dtype") or ""
    )
    return {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(dtype, dtype or "bf16")


def parsers(model_type: str, repo: str) -> tuple[str | None, str | None]:
    for family, pattern, chosen in NAME_OVERRIDES:
        if model_type == family and re.search(pattern, repo):
            return chosen
    return PARSERS.get(model_type, (None, None))


def model_entry_from_hub(info: Mapping[str, Any]) -> dict[str, Any]:
    """llm_model for the planner and the deploy roles, from hub_model()'s result."""
    config = dict(info["config"])
    text = _text(config)
    repo = str(info["repo"])
    model_type = str(text.get("model_type") or config.get("model_type") or "")
    tool, reasoning = parsers(str(config.get("model_type") or model_type), repo)
    weights = info.get("weight_files") or {}
    fmt = quant_format(config, info.get("hf_quant_config"))
    return model_complete(
        {
            "id": re.sub(r"[^A-Za-z0-9_.-]+", "_", repo.replace("/", "__")),
            "display_name": repo,
            "hf_repo": repo,
            "hf_revision": str(info["sha"]),
            "hf_revision_note": f"resolved from {info.get('revision', 'main')!r} when the plan was made",
            "hf_config": config,
            **({"hf_quant_config": dict(info["hf_quant_config"])} if info.get("hf_quant_config") else {}),
            "checkpoint_bytes": int(info.get("checkpoint_bytes") or 0),
            "checkpoint_shards": len(weights),
            "checkpoint_note": "summed from the repository's weight files",
            "quant_format": "gguf" if weights and all(str(w).endswith(".gguf") for w in weights) else fmt,
            "engine": "vllm",
            "engine_min_version": "0.10.0",
            "tool_call_parser": tool,
            "reasoning_parser": reasoning,
            "parsers_note": (
                f"from the model family {model_type!r}"
                if (tool or reasoning)
                else f"none: the family {model_type!r} is not in the parser table (a catalog entry sets them)"
            ),
            "chat_template": bool(info.get("chat_template")),
            "trust_remote_code": False,
            "engine_args": {},
            "engine_env": {},
            "patches": [],
            "known_issues": [],
            "quality_probes": GENERIC_PROBES,
            "quality_min_pass_ratio": GENERIC_MIN_PASS_RATIO,
            "quality_note": "generic probes (no model-specific ones): 4 of 5 must pass",
            "sources": [f"{repo}@{info['sha']}: config.json and the file listing, read by the plan"],
        }
    )


def model_complete(model: Mapping[str, Any]) -> dict[str, Any]:
    """A catalog or hub-derived entry with the values derivable from its config.json filled in where the
    entry does not set them (it overrides): quant_format, families (known_issues.model_families), mla and
    supports_dcp (MLA without the sparse indexer: vLLM's decode context parallel shards its latent cache)."""
    out = dict(model)
    config = out.get("hf_config") if isinstance(out.get("hf_config"), Mapping) else {}
    if not out.get("quant_format"):
        out["quant_format"] = quant_format(config, out.get("hf_quant_config"))
    families = out.get("families")
    if not isinstance(families, list):
        families = known_issues.model_families(config, str(out["quant_format"]))
        out["families"] = families
    out.setdefault("mla", "mla" in families)
    out.setdefault("supports_dcp", "mla" in families and "sparse_mla" not in families)
    return out


# What the hub read is the truth for these: a catalog entry's copies are its offline snapshot.
HUB_KEYS = (
    "hf_repo",
    "hf_revision",
    "hf_revision_note",
    "hf_config",
    "hf_quant_config",
    "checkpoint_bytes",
    "checkpoint_shards",
    "checkpoint_note",
    "chat_template",
)
# Derived again after the merge unless the catalog entry sets them.
DERIVED_KEYS = ("families", "mla", "supports_dcp", "quant_format")


def model_merge(hub: Mapping[str, Any], catalog: Mapping[str, Any] | None) -> dict[str, Any]:
    """The hub-derived entry with a catalog entry's own values over it (parsers, probes, patches, pins,
    engine options, overrides); config, files and commit stay the hub's."""
    if not catalog:
        return model_complete(hub)
    out = {k: v for k, v in hub.items() if k not in DERIVED_KEYS}
    out.update({k: v for k, v in catalog.items() if k not in HUB_KEYS})
    out["sources"] = [*(catalog.get("sources") or []), *(hub.get("sources") or [])]
    out["parsers_note"] = f"from the catalog entry {catalog.get('id')!r}"
    if "quality_probes" in catalog:
        out.pop("quality_note", None)
    return model_complete(out)


def _registry() -> dict[str, dict[str, Any]]:
    path = Path(__file__).with_name("vllm_architectures.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    return {k: v for k, v in data.items() if not k.startswith("_")}


def parser_problems(model: Mapping[str, Any], vllm_version: str) -> list[str]:
    """A tool-call or reasoning parser the chosen release does not register (vLLM refuses to start with
    it); nothing is said for a release whose parser names are not recorded in vllm_parsers.json."""
    data = json.loads(Path(__file__).with_name("vllm_parsers.json").read_text(encoding="utf-8"))
    release = str(vllm_version).partition("+")[0]
    if release not in data:
        return []
    problems = []
    for kind, key in (("tool", "tool_call_parser"), ("reasoning", "reasoning_parser")):
        name = model.get(key)
        if name and str(name) not in data[release][kind]:
            others = [v for v in sorted(data) if not v.startswith("_") and str(name) in data[v][kind]]
            where = (
                f"vLLM {', '.join(others)} registers it"
                if others
                else "no recorded vLLM release registers it"
            )
            problems.append(
                f"{kind} parser {name!r} ({key}) is not registered in vLLM {release}: {where}; set {key} "
                f"in the model's catalog entry to one of that release's names"
            )
    return problems


def architecture_problems(config: Mapping[str, Any], vllm_version: str) -> tuple[list[str], list[str]]:
    """(problems, notes) for the architectures of config.json against the model registry of the chosen vLLM
    release: not served by it is a problem (naming what would serve it); served through the Transformers
    backend, or a release whose registry is not recorded here, is a note."""
    registry = _registry()
    archs = [str(a) for a in config.get("architectures") or []]
    if not archs:
        return ["config.json names no architectures: vLLM cannot pick a model class"], []
    release = str(vllm_version).partition("+")[0]
    if release not in registry:
        recorded = ", ".join(sorted(registry))
        return [], [
            f"vLLM {release}'s model registry is not recorded here (recorded: {recorded}); not checked"
        ]
    reg = registry[release]
    name = "/".join(archs)
    if any(a in reg["native"] for a in archs):
        return [], []
    if any(a in reg["transformers"] for a in archs):
        return [], [
            f"vLLM {release} serves {name} through its Transformers backend, not a native model class"
        ]
    plugin = next((reg["plugins"][a] for a in archs if a in reg["plugins"]), None)
    removed = next((reg["removed"][a] for a in archs if a in reg["removed"]), None)
    others = [v for v, r in sorted(registry.items()) if any(a in r["native"] for a in archs)]
    if plugin:
        fix = f"it is served by the out-of-tree plugin {plugin}"
    elif removed:
        fix = f"vLLM dropped it (its registry names {removed} for it)"
    elif others:
        fix = f"vLLM {', '.join(others)} has it (llm_vllm_version / --vllm-version)"
    else:
        fix = "no recorded vLLM release has it: the model's own code (trust_remote_code) or another engine"
    others_note = f"; vLLM {', '.join(others)} has it" if others and (plugin or removed) else ""
    return [f"architecture {name} is not in vLLM {release}'s model registry: {fix}{others_note}"], []
