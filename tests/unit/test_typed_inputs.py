"""The typed-input rule for role variables (plugins/module_utils/typed_inputs.py), walked over every typed
option of every role's argument_specs: a variable added later is covered without new test code.

For each option: the string form `-e name=value` would give is refused (list, dict) or accepted only in the
strict form the tasks convert (int, float, bool), a value that is not one of those forms is refused naming
the variable, and every role whose spec has a typed option runs the check first in its preflight.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import deploy_inputs as di
import pytest
import typed_inputs as ti
import yaml

ROOT = Path(__file__).resolve().parents[2]
SPECS = sorted(ROOT.glob("roles/*/meta/argument_specs.yml"))
CHECK_TASK = "llmdeploy.llm.typed_inputs"


def _options() -> list[tuple[str, str, dict[str, Any], Any]]:
    """(role, option, its spec, its default) for every typed option of every role's main entry."""
    out = []
    for path in SPECS:
        role = path.parents[1].name
        spec = yaml.safe_load(path.read_text())["argument_specs"]["main"].get("options") or {}
        defaults_file = path.parents[1] / "defaults" / "main.yml"
        defaults = yaml.safe_load(defaults_file.read_text()) or {} if defaults_file.exists() else {}
        for name, option in spec.items():
            if (option or {}).get("type") in ti.CHECKED_TYPES:
                out.append((role, name, option, defaults.get(name, option.get("default"))))
    return out


OPTIONS = _options()
IDS = [f"{role}.{name}" for role, name, _, _ in OPTIONS]


def _string_form(option: dict[str, Any], default: Any) -> str:
    """What `-e name=<the default>` gives: text."""
    kind = option["type"]
    if kind == "list":
        items = default if isinstance(default, list) and default else ["8"]
        return ",".join(str(i) for i in items)
    if kind == "dict":
        return json.dumps(default if isinstance(default, dict) and default else {"KEY": "VALUE"})
    if kind == "bool":
        return "true" if default in (None, True) else "false"
    if default is None or isinstance(default, str):
        return "1" if kind == "int" else "0.5"
    return str(default)


def test_the_walk_covers_the_roles() -> None:
    roles = {role for role, _, _, _ in OPTIONS}
    assert len(OPTIONS) > 100 and len(roles) == len(SPECS), (len(OPTIONS), sorted(roles))


@pytest.mark.parametrize(("role", "name", "option", "default"), OPTIONS, ids=IDS)
def test_the_string_form_is_refused_or_read_as_typed(
    role: str, name: str, option: dict, default: Any
) -> None:
    text = _string_form(option, default)
    problem = ti.value_problem(name, text, option)
    if option["type"] in ("list", "dict"):
        assert problem and problem.startswith(f"{name}=") and "-e '{" in problem, problem
        # The form it names is one the option takes.
        given = json.loads(problem.split("-e '", 1)[1].rstrip("'"))[name]
        assert isinstance(given, list if option["type"] == "list" else dict)
        if option.get("no_log"):
            assert text not in problem
    else:
        assert problem is None, problem


@pytest.mark.parametrize(("role", "name", "option", "default"), OPTIONS, ids=IDS)
def test_a_value_of_no_typed_form_is_refused_naming_the_variable(
    role: str, name: str, option: dict, default: Any
) -> None:
    bad = {"list": "x", "dict": "x", "int": "8x", "float": "nan", "bool": "maybe"}[option["type"]]
    problem = ti.value_problem(name, bad, option)
    assert problem and problem.startswith(f"{name}=") and " is refused: " in problem


@pytest.mark.parametrize("role_dir", sorted({p.parents[1] for p in SPECS}), ids=lambda p: p.name)
def test_every_role_checks_its_typed_inputs_first(role_dir: Path) -> None:
    if role_dir.name == "deploy":
        # The deploy contract's own check (deploy_inputs, stricter than the types) comes first instead.
        first = yaml.safe_load((role_dir / "tasks" / "main.yml").read_text())[0]
        assert first.get("ansible.builtin.import_tasks") == "inputs.yml"
        return
    tasks = yaml.safe_load((role_dir / "tasks" / "preflight.yml").read_text())
    assert CHECK_TASK in tasks[0], f"{role_dir.name}: the first preflight task is {tasks[0].get('name')}"
    main = (role_dir / "tasks" / "main.yml").read_text()
    assert "preflight.yml" in main


@pytest.mark.parametrize(
    ("kind", "value", "accepted"),
    [
        ("int", "8", True),
        ("int", " -3 ", True),
        ("int", "8.0", False),
        ("int", "0x10", False),
        ("int", math.inf, False),
        ("float", "0.9", True),
        ("float", "1e-3", True),
        ("float", "1e999", False),
        ("float", "inf", False),
        ("float", math.nan, False),
        ("float", 0.9, True),
        ("bool", "Yes", True),
        ("bool", "0", True),
        ("bool", "on", False),
        ("bool", "", False),
        ("list", ["a"], True),
        ("list", "", False),
        ("dict", {"a": 1}, True),
        ("dict", '{"a": 1}', False),
        ("str", "anything", True),
    ],
)
def test_strict_forms(kind: str, value: Any, accepted: bool) -> None:
    assert (ti.value_problem("x", value, {"type": kind}) is None) is accepted


def test_the_example_keeps_the_elements_type() -> None:
    problem = ti.value_problem("lens", "65536, 131072", {"type": "list", "elements": "int"})
    assert problem is not None and """-e '{"lens": [65536, 131072]}'""" in problem
    problem = ti.value_problem("env", '{"A": "1"}', {"type": "dict"})
    assert problem is not None and """-e '{"env": {"A": "1"}}'""" in problem


def test_a_secret_is_shown_by_length_only() -> None:
    problem = ti.value_problem("key", "sk-secret-value", {"type": "list", "no_log": True})
    assert problem is not None and "sk-secret-value" not in problem and "<hidden, 15 characters>" in problem


def test_problems_come_sorted_and_only_for_given_options() -> None:
    options = {"b": {"type": "int"}, "a": {"type": "list"}, "c": {"type": "bool"}}
    problems = ti.typed_input_problems(options, {"b": "x", "a": "y", "unrelated": "z"})
    assert [p.split("=", 1)[0] for p in problems] == ["a", "b"]


# The deploy contract (docs/deploy-inputs.md): its typed inputs, by the type of their default.
DEPLOY_TYPED = sorted(
    name for name, spec in di.INPUTS.items() if isinstance(spec.default, bool | int | dict | list)
)


@pytest.mark.parametrize("name", DEPLOY_TYPED)
def test_deploy_inputs_in_string_form_are_read_as_typed_or_refused(name: str) -> None:
    default = di.INPUTS[name].default
    if isinstance(default, dict | list):
        problems = di.input_problems({name: json.dumps(default or {"KEY": "VALUE"})})
        assert problems and problems[0].startswith(f"{name}="), problems
        return
    text = str(default).lower() if isinstance(default, bool) else str(default)
    assert di.input_problems({name: text}) == []
    for bad in ("nan", "inf", "1e999", "8x"):
        problems = di.input_problems({name: bad})
        assert problems and problems[0].startswith(f"{name}="), (bad, problems)
