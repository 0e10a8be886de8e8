"""Every role documents every public variable: meta/argument_specs.yml and defaults/main.yml agree."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import deploy_inputs as contract
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(p for p in (ROOT / "roles").iterdir() if p.is_dir())
# The deploy role's options are the deploy contract (llm_*, and hf_token shared with hf_model): an input it
# leaves unset means "derive it" (the catalog, the planner), so those have no default and are not required.
PREFIXES = {"deploy": ("llm_", "hf_token")}


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


def _task_files() -> list[Path]:
    """The roles' tasks and handlers, the playbooks, molecule's and the consumer's plays."""
    globs = (
        "roles/*/tasks/*.yml",
        "roles/*/handlers/*.yml",
        "playbooks/*.yml",
        "molecule/*/*.yml",
        "tests/consumer/*.yml",
    )
    return [path for pattern in globs for path in sorted(ROOT.glob(pattern))]


@pytest.mark.parametrize("role", ROLES, ids=[r.name for r in ROLES])
def test_defaults_and_argument_specs_agree(role: Path):
    defaults = _load(role / "defaults" / "main.yml")
    specs = _load(role / "meta" / "argument_specs.yml")["argument_specs"]
    options: dict[str, dict] = {}
    for entry in specs.values():
        options.update(entry.get("options") or {})
    assert sorted(set(defaults) - set(options)) == [], "defaults missing from argument_specs"
    unset = {n for n, i in contract.INPUTS.items() if i.default is None} if role.name == "deploy" else set()
    undocumented_required = [
        n for n in set(options) - set(defaults) - unset if not options[n].get("required")
    ]
    assert undocumented_required == [], "options without a default must be required"
    for name, spec in options.items():
        prefixes = PREFIXES.get(role.name, (role.name + "_",))
        assert name.startswith(prefixes), f"{name}: public variables carry the role prefix"
        assert spec.get("description"), f"{name}: no description"


@pytest.mark.parametrize("role", ROLES, ids=[r.name for r in ROLES])
def test_galaxy_metadata_names_the_role(role: Path):
    info = _load(role / "meta" / "main.yml")["galaxy_info"]
    assert info["namespace"] == "llmdeploy"
    assert info["role_name"] == role.name


def test_the_deploy_contract_files_are_rendered_from_the_contract():
    """roles/deploy's argument_specs and defaults and docs/deploy-inputs.md's table say what
    plugins/module_utils/deploy_inputs.py checks: scripts/render-deploy-contract.py --check finds no drift."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "render-deploy-contract.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_tasks_from_names_an_entry_point_with_a_spec():
    """Ansible validates a role's arguments only for the entry point tasks_from names exactly (without .yml):
    every tasks_from in the project names one that has a spec."""
    found = []
    for path in _task_files():
        text = path.read_text()
        for block in re.finditer(r"name: llmdeploy\.llm\.(\w+)\n(?:\s+\w+: .*\n)*?\s+tasks_from: (.+)", text):
            role, value = block.group(1), block.group(2).strip()
            names = re.findall(r"'([\w.]+)'", value) or [value]
            specs = _load(ROOT / "roles" / role / "meta" / "argument_specs.yml")["argument_specs"]
            found += [f"{path.relative_to(ROOT)}: {role} {n}" for n in names if n not in specs]
    assert found == []


_CONDITIONAL_KEYS = ("when", "that", "failed_when", "changed_when", "until")


def _templated_conditionals(node: object, where: str) -> list[str]:
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _CONDITIONAL_KEYS:
                values = value if isinstance(value, list) else [value]
                found += [f"{where}: {key}: {v}" for v in values if isinstance(v, str) and "{{" in v]
            if key not in ("loop", "vars") and not str(key).startswith("with_"):  # data, not conditionals
                found += _templated_conditionals(value, f"{where} > {node.get('name', key)}")
    elif isinstance(node, list):
        for item in node:
            found += _templated_conditionals(item, where)
    return found


def test_no_conditional_is_templated():
    """ansible-core 2.19 warns (and 2.23 refuses) a conditional wrapped in {{ }}: every when, that, *_when and
    until is a bare expression."""
    found = []
    for path in _task_files():
        found += _templated_conditionals(_load(path), str(path.relative_to(ROOT)))
    assert found == []
