"""Typed role variables against the forms a playbook run can hand them: pure functions.

``-e key=value`` gives every value as a string, and a role's argument_specs validate a converted copy while
the tasks go on reading the variable itself (extra vars outrank everything a role could set). A string for
a ``list`` or ``dict`` option is then read character by character, so it is refused with the form to give
instead; a string for an ``int``, ``float`` or ``bool`` option is accepted only in the strict form the
tasks convert (``"8"``, ``"0.9"``, ``true``/``false``/``yes``/``no``/``1``/``0``). Numbers must be finite.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

BOOL_STRINGS = ("true", "false", "yes", "no", "1", "0")
_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")
CHECKED_TYPES = ("list", "dict", "int", "float", "bool")


def shown(value: Any, secret: bool = False) -> str:
    """The value as a refusal shows it: JSON (control characters visible), cut when long, a secret as its
    length only. The deploy contract's refusals (deploy_inputs.shown) end here too."""
    if secret:
        return f'"<hidden, {len(str(value))} characters>"'
    try:
        text = json.dumps(value, sort_keys=True, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 160 else text[:157] + "..."


def _element(text: str, kind: str | None) -> Any:
    text = text.strip()
    if kind == "int" and _INT.fullmatch(text):
        return int(text)
    if kind == "float" and _FLOAT.fullmatch(text):
        return float(text)
    return text


def _example(name: str, value: str, spec: Mapping[str, Any]) -> str:
    """The -e form that gives ``value`` as the option's type (a list split at commas, a mapping as JSON)."""
    if spec.get("type") == "list":
        parts = [p for p in value.split(",") if p.strip()] or ["..."]
        example: Any = [_element(p, spec.get("elements")) for p in parts]
    else:
        try:
            example = json.loads(value)
        except ValueError:
            example = None
        if not isinstance(example, dict):
            example = {"KEY": "VALUE"}
    return "-e '" + json.dumps({name: example}) + "'"


def value_problem(name: str, value: Any, spec: Mapping[str, Any]) -> str | None:
    """Why ``value`` cannot be given for option ``name`` of ``spec`` (its argument_specs entry), or None."""
    kind = spec.get("type", "str")
    if kind not in CHECKED_TYPES or value is None:
        return None
    secret = bool(spec.get("no_log"))
    head = f"{name}={shown(value, secret)} is refused: "
    if isinstance(value, float) and not math.isfinite(value) and kind in ("int", "float"):
        return head + "not a finite number; give a number"
    if not isinstance(value, str):
        return None
    text = value.strip()
    if kind in ("list", "dict"):
        what = "a list" if kind == "list" else "a mapping"
        return (
            head + f"{what} is expected, and a string (what -e {name}=... gives) is not one; give it as "
            f"JSON or YAML, e.g. {_example(name, '...' if secret else value, spec)}"
        )
    if kind == "int" and not _INT.fullmatch(text):
        return head + "a whole number is expected, e.g. " + f"{name}=8"
    if kind == "float":
        if not _FLOAT.fullmatch(text):
            return head + f"a decimal number is expected, e.g. {name}=0.9"
        if not math.isfinite(float(text)):
            return head + "not a finite number; give a number"
    if kind == "bool" and text.lower() not in BOOL_STRINGS:
        return head + "true or false is expected (also accepted: yes/no, 1/0)"
    return None


def typed_input_problems(options: Mapping[str, Mapping[str, Any]], given: Mapping[str, Any]) -> list[str]:
    """One refusal per option of ``options`` (an argument_specs entry's options) whose value in ``given``
    is of a form the tasks would misread; options missing from ``given`` are not checked."""
    problems = []
    for name in sorted(options):
        if name in given:
            problem = value_problem(name, given[name], options[name] or {})
            if problem:
                problems.append(problem)
    return problems
