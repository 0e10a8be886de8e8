"""Known-issue rules (catalog/known_issues.yml) and the model facts they are keyed by.

A rule fires on what a model *is* (families derived from config.json, the checkpoint format), on the GPU
and on the engine release, so one rule covers every model of a kind; a catalog entry adds issues of its
own model and may replace or switch off a rule by id. Pure functions; PyYAML only to read the file.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

RULES_PATH = Path(__file__).resolve().parents[2] / "catalog" / "known_issues.yml"
FAMILIES = ("mla", "sparse_mla", "moe", "multimodal", "gguf")
# A rule must do one of these, or none (then it is a fact the plan prints).
ACTIONS = ("forces", "recommends", "refuses")
MODEL_KEYS = ("family", "not_family", "quant_format", "model_type")
HOST_KEYS = (
    "compute_capability",
    "compute_capability_lt",
    "compute_capability_ge",
    "interconnect",
    "kv_cache_dtype",
    "attention_backend",
    "engine_version_lt",
    "engine_version_ge",
    "min_gpu_count",
)
# model_type values whose attention is DeepSeek's sparse MLA (the DSA indexer): no DCP, own backends.
SPARSE_MLA_TYPES = ("deepseek_v32", "glm_moe_dsa")


class RuleError(ValueError):
    """A malformed rule or catalog issue; the message names it."""


def _text(config: Mapping[str, Any]) -> Mapping[str, Any]:
    text = config.get("text_config")
    return text if isinstance(text, Mapping) else config


def _experts(text: Mapping[str, Any]) -> int:
    for key in ("n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts"):
        value = text.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return 0


def model_families(config: Mapping[str, Any], quant_format: str = "") -> list[str]:
    """Families of a config.json: mla (a KV LoRA rank), sparse_mla (MLA with DeepSeek's indexer), moe
    (more than one routed expert), multimodal (a vision or audio tower), gguf (the checkpoint format)."""
    text = _text(config)
    model_type = str(text.get("model_type") or config.get("model_type") or "")
    found = set()
    if text.get("kv_lora_rank"):
        found.add("mla")
        if text.get("index_topk") or model_type in SPARSE_MLA_TYPES:
            found.add("sparse_mla")
    if _experts(text) > 1:
        found.add("moe")
    if any(config.get(k) for k in ("vision_config", "audio_config", "vision_tower")):
        found.add("multimodal")
    if quant_format == "gguf":
        found.add("gguf")
    return [f for f in FAMILIES if f in found]


def model_facts(model: Mapping[str, Any]) -> dict[str, Any]:
    """What the rules' model keys are matched against, from a catalog entry or a hub-derived one."""
    config = model.get("hf_config") if isinstance(model.get("hf_config"), Mapping) else {}
    text = _text(config)
    fmt = str(model.get("quant_format") or "")
    families = model.get("families")
    if not isinstance(families, list):
        families = model_families(config, fmt)
    return {
        "families": [str(f) for f in families],
        "quant_format": fmt or None,
        "model_type": str(text.get("model_type") or config.get("model_type") or "") or None,
    }


def _number(value: Any) -> tuple[int, ...]:
    match = re.match(r"^\s*(\d+(?:\.\d+)*)", str(value))
    if not match:
        raise RuleError(f"not a number like 8.0: {value!r}")
    return tuple(int(p) for p in match.group(1).split("."))


def _less(left: Any, right: Any) -> bool:
    a, b = _number(left), _number(right)
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)) < b + (0,) * (width - len(b))


def _listed(expected: Any) -> list[str]:
    return [str(v) for v in (expected if isinstance(expected, list) else [expected])]


def condition_matches(when: Mapping[str, Any] | None, facts: Mapping[str, Any]) -> bool:
    """True when every key of a ``when`` mapping holds for ``facts`` (keys: MODEL_KEYS and HOST_KEYS).

    A key whose fact is unknown (None) does not match, so a rule never fires on missing information.
    """
    for key, expected in (when or {}).items():
        if key in ("family", "not_family"):
            have = set(facts.get("families") or [])
            wanted = set(_listed(expected))
            if (key == "family" and not wanted <= have) or (key == "not_family" and wanted & have):
                return False
        elif key in (
            "engine_version_lt",
            "engine_version_ge",
            "compute_capability_lt",
            "compute_capability_ge",
        ):
            fact = facts.get("engine_version" if key.startswith("engine") else "compute_capability")
            if fact is None:
                return False
            if _less(fact, expected) != key.endswith("_lt"):
                return False
        elif key == "min_gpu_count":
            count = facts.get("gpu_count")
            if count is None or int(count) < int(expected):
                return False
        elif key in (
            "compute_capability",
            "interconnect",
            "kv_cache_dtype",
            "attention_backend",
            "quant_format",
            "model_type",
        ):
            value = facts.get(key)
            if value is None or str(value) not in _listed(expected):
                return False
        else:
            raise RuleError(f"unknown condition key {key!r}")
    return True


def check_rule(rule: Any, where: str) -> dict[str, Any]:
    """A rule or catalog issue, validated: id, summary, sources, known keys only."""
    if not isinstance(rule, Mapping):
        raise RuleError(f"{where}: a rule must be a mapping, got {rule!r}")
    rid = rule.get("id")
    if not isinstance(rid, str) or not re.fullmatch(r"[a-z0-9_]+", rid):
        raise RuleError(f"{where}: id must be lower_snake_case, got {rid!r}")
    if rule.get("disabled") is True:
        return dict(rule)
    if not isinstance(rule.get("summary"), str) or not rule["summary"].strip():
        raise RuleError(f"{where}: rule {rid} has no summary")
    if not isinstance(rule.get("sources"), list) or not rule["sources"]:
        raise RuleError(f"{where}: rule {rid} names no sources")
    when = rule.get("when") or {}
    if not isinstance(when, Mapping):
        raise RuleError(f"{where}: rule {rid}: when must be a mapping")
    unknown = sorted(set(when) - set(MODEL_KEYS) - set(HOST_KEYS))
    if unknown:
        raise RuleError(f"{where}: rule {rid}: unknown condition key(s) {unknown}")
    for key in ("family", "not_family"):
        bad = sorted(set(_listed(when.get(key, []))) - set(FAMILIES))
        if bad:
            raise RuleError(f"{where}: rule {rid}: unknown famil(ies) {bad}; known: {list(FAMILIES)}")
    extra = sorted(set(rule) - {"id", "summary", "when", "sources", "disabled", "checked", *ACTIONS})
    if extra:
        raise RuleError(f"{where}: rule {rid}: unknown key(s) {extra}")
    if "refuses" in rule and not (isinstance(rule["refuses"], str) and rule["refuses"].strip()):
        raise RuleError(f"{where}: rule {rid}: refuses must say what would work instead")
    return dict(rule)


def load_rules(path: str | Path | None = None) -> list[dict[str, Any]]:
    """The rules of catalog/known_issues.yml (or ``path``), validated, ids unique."""
    import yaml  # noqa: PLC0415 - only the controller reads the file; bin/llm-plan never imports this module

    source = Path(path) if path else RULES_PATH
    try:
        data = yaml.safe_load(source.read_text(encoding="utf-8"))
    except OSError as exc:
        raise RuleError(f"cannot read the known-issue rules {source}: {exc.strerror}") from exc
    rules = (data or {}).get("rules") if isinstance(data, Mapping) else None
    if not isinstance(rules, list):
        raise RuleError(f"{source}: expected a mapping with a `rules` list")
    checked = [check_rule(r, f"{source.name} rule {i + 1}") for i, r in enumerate(rules)]
    ids = [r["id"] for r in checked]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise RuleError(f"{source}: duplicate rule id(s) {duplicates}")
    return checked


def rules_for(model: Mapping[str, Any], rules: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The shared rules, then the model's own known_issues; an own issue with a rule's id replaces it and
    ``disabled: true`` drops it."""
    own = [check_rule(i, f"known_issues of {model.get('id')!r}") for i in model.get("known_issues") or []]
    by_id = {str(i["id"]): i for i in own}
    merged = [dict(by_id.get(str(r["id"]), r)) for r in rules]
    shared = {str(r["id"]) for r in rules}
    merged += [dict(i) for i in own if str(i["id"]) not in shared]
    return [r for r in merged if r.get("disabled") is not True]
