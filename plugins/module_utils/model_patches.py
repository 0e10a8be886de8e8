"""Declarative model-checkpoint patches: which apply to a host, and what they do to a JSON document."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

OPS = ("remove", "set")
LIST_KEYS = ("compute_capability", "kv_cache_dtype", "attention_backend", "interconnect")
_SAFE_FILE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\.json$")
_VERSION = re.compile(r"^\s*v?(\d+)(?:\.(\d+))?(?:\.(\d+))?")
_RANGE_PART = re.compile(r"^\s*(>=|<=|==|!=|>|<)\s*(\S+)\s*$")


def _fail(name: str, msg: str) -> AnsibleFilterError:
    return AnsibleFilterError(f"{name}: {msg}")


def version_tuple(version: str) -> tuple[int, int, int]:
    """Release part of a version: ``0.19.1rc2`` and ``0.19.1+cu130`` count as ``(0, 19, 1)``."""
    m = _VERSION.match(str(version))
    if not m:
        raise ValueError(f"not a version: {version!r}")
    return (int(m[1]), int(m[2] or 0), int(m[3] or 0))


def _in_range(version: str, spec: str) -> bool:
    v = version_tuple(version)
    for part in str(spec).split(","):
        m = _RANGE_PART.match(part)
        if not m:
            raise ValueError(f"bad version range part {part!r} in {spec!r}")
        op, bound = m[1], version_tuple(m[2])
        ok = {
            ">=": v >= bound,
            "<=": v <= bound,
            ">": v > bound,
            "<": v < bound,
            "==": v == bound,
            "!=": v != bound,
        }[op]
        if not ok:
            return False
    return True


def condition_holds(when: Mapping[str, Any] | None, facts: Mapping[str, Any]) -> bool:
    """Every key of ``when`` must hold for ``facts``; an unknown fact (missing or None) never matches."""
    for key, expected in (when or {}).items():
        if key in ("engine_version", "engine_version_lt", "engine_version_ge"):
            version = facts.get("engine_version")
            if version in (None, ""):
                return False
            spec = {"engine_version": expected, "engine_version_lt": f"<{expected}"}.get(key, f">={expected}")
            if not _in_range(str(version), str(spec)):
                return False
        elif key in LIST_KEYS:
            accepted = [str(v) for v in (expected if isinstance(expected, list) else [expected])]
            value = facts.get(key)
            if value in (None, "") or str(value) not in accepted:
                return False
        else:
            raise ValueError(
                f"unknown condition key {key!r} (known: {', '.join((*LIST_KEYS, 'engine_version*'))})"
            )
    return True


def model_patch_normalize(patches: Any) -> list[dict[str, Any]]:
    name = "model_patch_normalize"
    if not isinstance(patches, list):
        raise _fail(name, f"model_patch_patches must be a list, got {type(patches).__name__}")
    out, seen = [], set()
    for i, p in enumerate(patches):
        where = f"patch #{i} ({p.get('id') if isinstance(p, Mapping) else p!r})"
        if not isinstance(p, Mapping):
            raise _fail(name, f"{where} must be a mapping")
        pid, file = p.get("id"), p.get("file")
        if not isinstance(pid, str) or not pid:
            raise _fail(name, f"{where} needs an 'id'")
        if pid in seen:
            raise _fail(name, f"{where}: duplicate id {pid!r}")
        seen.add(pid)
        if not isinstance(file, str) or not _SAFE_FILE.match(file):
            raise _fail(
                name, f"{where}: 'file' must be a JSON file name at the model dir's top level, got {file!r}"
            )
        op = p.get("op", p.get("action"))
        if op not in OPS:
            raise _fail(name, f"{where}: 'op'/'action' must be one of {OPS}, got {op!r}")
        path = p.get("path", p.get("json_path"))
        if isinstance(path, str):
            path = path.split(".")
        if not isinstance(path, list) or not path or not all(isinstance(k, str) and k for k in path):
            raise _fail(
                name,
                f"{where}: 'path' must be a non-empty list of keys (or a dotted json_path), got {path!r}",
            )
        if op == "set" and "value" not in p:
            raise _fail(name, f"{where}: op 'set' needs a 'value'")
        if not isinstance(p.get("reason"), str) or not p["reason"].strip():
            raise _fail(name, f"{where}: every patch needs a 'reason'")
        when = p.get("when") or {}
        if not isinstance(when, Mapping):
            raise _fail(name, f"{where}: 'when' must be a mapping")
        try:
            condition_holds(when, {})
        except ValueError as exc:
            raise _fail(name, f"{where}: {exc}") from exc
        args = p.get("engine_args") or {}
        if not isinstance(args, Mapping):
            raise _fail(name, f"{where}: 'engine_args' must map flag names to values")
        out.append(
            {
                "id": pid,
                "file": file,
                "op": op,
                "path": list(path),
                "value": p.get("value"),
                "reason": " ".join(p["reason"].split()),
                "when": dict(when),
                "engine_args": dict(args),
            }
        )
    return out


def model_patch_select(patches: list[dict[str, Any]], facts: Mapping[str, Any]) -> list[dict[str, Any]]:
    name = "model_patch_select"
    if not isinstance(facts, Mapping):
        raise _fail(name, f"model_patch_facts must be a mapping, got {type(facts).__name__}")
    try:
        return [p for p in patches if condition_holds(p["when"], facts)]
    except ValueError as exc:
        raise _fail(name, f"{exc}; facts: {dict(facts)!r}") from exc


def model_patch_apply(document: Any, patches: list[dict[str, Any]]) -> dict[str, Any]:
    """Apply ``remove``/``set`` patches in order to a copy of ``document``; removing an absent key: no-op."""
    name = "model_patch_apply"
    if not isinstance(document, Mapping):
        raise _fail(name, f"the file to patch must hold a JSON object, got {type(document).__name__}")
    doc = copy.deepcopy(dict(document))
    for p in patches:
        *parents, leaf = p["path"]
        node: Any = doc
        for key in parents:
            if not isinstance(node, dict):
                raise _fail(
                    name, f"patch {p['id']!r}: {'.'.join(p['path'])} crosses a non-object in {p['file']}"
                )
            if key not in node:
                if p["op"] == "remove":
                    node = None
                    break
                node[key] = {}
            node = node[key]
        if node is None:
            continue
        if not isinstance(node, dict):
            raise _fail(name, f"patch {p['id']!r}: {'.'.join(p['path'])} crosses a non-object in {p['file']}")
        if p["op"] == "remove":
            node.pop(leaf, None)
        else:
            node[leaf] = copy.deepcopy(p["value"])
    return doc


def model_patch_engine_args(patches: list[dict[str, Any]]) -> dict[str, Any]:
    """Engine arguments (flag without ``--`` -> value) of the selected patches; a conflict is an error."""
    out: dict[str, Any] = {}
    for p in patches:
        for flag, value in p.get("engine_args", {}).items():
            if flag in out and out[flag] != value:
                raise _fail(
                    "model_patch_engine_args", f"patches disagree on --{flag}: {out[flag]!r} vs {value!r}"
                )
            out[flag] = value
    return out
