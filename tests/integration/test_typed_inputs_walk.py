"""Every typed variable, given the way `-e key=value` gives it (a string), through the playbooks users run.

The walk reads the options from the files that define them (each role's meta/argument_specs.yml main entry,
the deploy contract in plugins/module_utils/deploy_inputs.py), so a new variable is walked without new test
code. One play per role, each on its own local host alias (so one role's refusal does not stop another's),
runs the role in check mode:

- bad strings (a list or mapping as text, "8x" for a number, "maybe" for a boolean): the run is refused and
  the refusal names every one of them (the role's argument_specs validation for what it cannot convert, the
  typed_inputs check for what it would convert wrongly, a list as text);
- the defaults in string form ("8", "0.9", "true"): accepted; only the list or mapping the run gives as text
  to stop the role before it changes anything is named.

The deploy contract goes through deploy_tiny.yml in plan mode: the bad forms are refused in one message that
names each; the good string forms give the plan line with the converted values.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

import deploy_inputs as contract  # noqa: E402  (the module_utils path is set just above)

PLAYBOOK_BIN = Path(sys.executable).parent / "ansible-playbook"
TYPED = ("list", "dict", "int", "float", "bool")
BAD = {"list": "a,b", "dict": "not-a-mapping", "int": "8x", "float": "0.9x", "bool": "maybe"}
# Values the roles need to reach their checks at all (required options), given as host variables.
REQUIRED = {
    "llm_plan": {
        "llm_plan_model": {"id": "x", "hf_repo": "x/y", "hf_config": {}, "checkpoint_bytes": 1},
        "llm_plan_hardware": {"gpu_count": 1, "gpu_memory_gib": 80, "compute_capability": "9.0"},
    },
    "model_patch": {
        "model_patch_source_dir": "/nonexistent/src",
        "model_patch_overlay_dir": "/nonexistent/o",
    },
}
# Roles walked here; the deploy role's options are the contract, walked through deploy_tiny.yml below.
ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if p.is_dir() and p.name != "deploy")


def _typed_options(role: str) -> dict[str, dict[str, Any]]:
    specs = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"].get("options") or {}
    return {
        n: o
        for n, o in options.items()
        if (o or {}).get("type") in TYPED and n not in REQUIRED.get(role, {}) and not o.get("required")
    }


def _as_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _run(tmp_path: Path, playbook: Path, extra: dict[str, Any], inventory: Path | None = None, *args: str):
    vars_file = tmp_path / "extra.json"
    vars_file.write_text(json.dumps(extra))
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    argv = [str(PLAYBOOK_BIN), str(playbook), "-e", f"@{vars_file}", *args]
    if inventory:
        argv += ["-i", str(inventory)]
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)


def _walk_plays(tmp_path: Path, roles: list[str] = ROLES) -> tuple[Path, Path]:
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    hosts = {f"walk_{role}": {**local, **REQUIRED.get(role, {})} for role in roles}
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    # Every play on every host, the role only on its own: a play whose hosts all failed would end the run.
    plays = [
        {
            "name": f"walk {role}",
            "hosts": "all",
            "gather_facts": False,
            "tasks": [
                {
                    "name": f"Run {role}",
                    "ansible.builtin.include_role": {"name": f"llmdeploy.llm.{role}"},
                    "when": f"inventory_hostname == 'walk_{role}'",
                }
            ],
        }
        for role in roles
    ]
    playbook = tmp_path / "walk.yml"
    playbook.write_text(yaml.safe_dump(plays, sort_keys=False))
    return playbook, inventory


def _refusals(out: str) -> dict[str, str]:
    """host alias -> the text of its failure (the fatal line and the message after it)."""
    found = {}
    for match in re.finditer(r"fatal: \[(walk_\w+)\]: FAILED! =>(.*?)(?=\n\S|\Z)", out, re.S):
        # A failed validation also prints the whole spec (argument_spec_data): only its errors count.
        text = re.split(r"\n\s+(?:argument_spec_data|validate_args_context):", match.group(2))[0]
        found[match.group(1)] = found.get(match.group(1), "") + text
    return found


def _text_the_validation_converts(option: dict[str, Any]) -> str | None:
    """A list or mapping as the text the argument_specs validation converts (so the typed_inputs check is
    reached) and the tasks would misread; None where no text converts (mappings of set keys, lists of
    mappings): the first walk sees those refused by the validation."""
    if option.get("options") or option.get("elements") == "dict":
        return None
    if option["type"] == "dict":
        return '{"KEY": "VALUE"}'
    return {"int": "1,2", "float": "0.5,0.9", "bool": "true,false"}.get(option.get("elements"), "a,b")


def _named(text: str, name: str) -> bool:
    return re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", text) is not None


def test_every_typed_role_variable_given_as_a_bad_string_is_refused_by_name(tmp_path):
    playbook, inventory = _walk_plays(tmp_path)
    extra = {n: BAD[o["type"]] for role in ROLES for n, o in _typed_options(role).items()}
    assert len(extra) > 100, "the walk lost the roles' typed options"
    proc = _run(tmp_path, playbook, extra, inventory, "--check")
    out = proc.stdout + proc.stderr
    refusals = _refusals(out)
    missing = []
    for role in ROLES:
        typed = _typed_options(role)
        if not typed:
            continue
        text = refusals.get(f"walk_{role}", "")
        # Ansible's validation stops at what it cannot convert; the lists it converts are the typed_inputs
        # check's, which runs only when the validation passed. So: the unconvertible ones all, or the lists.
        cannot = [n for n, o in typed.items() if o["type"] != "list"]
        lists = [n for n, o in typed.items() if o["type"] == "list"]
        expected = cannot or lists
        missing += [f"{role}: {n}" for n in expected if not _named(text, n)]
    assert missing == [], out[-4000:]
    assert "changed=0" in out and "Traceback" not in out


def test_lists_and_mappings_given_as_text_are_refused_once_the_other_types_convert(tmp_path):
    """The typed_inputs check: every other typed option in its default's string form passes; every list or
    mapping given as text is refused with the JSON form to give."""
    extra: dict[str, Any] = {}
    stoppers: dict[str, list[str]] = {}
    accepted: dict[str, list[str]] = {}
    for role in ROLES:
        for name, option in _typed_options(role).items():
            if option["type"] in ("list", "dict"):
                text = _text_the_validation_converts(option)
                if text is None:
                    continue
                extra[name] = text
                stoppers.setdefault(role, []).append(name)
            elif option.get("default") is not None and not isinstance(option["default"], str):
                extra[name] = _as_text(option["default"])
                accepted.setdefault(role, []).append(name)
    # Only the roles a list or mapping stops: the others would run on in check mode.
    playbook, inventory = _walk_plays(tmp_path, sorted(stoppers))
    proc = _run(tmp_path, playbook, extra, inventory, "--check")
    out = proc.stdout + proc.stderr
    refusals = _refusals(out)
    wrong = []
    for role, names in stoppers.items():
        text = refusals.get(f"walk_{role}", "")
        wrong += [f"{role}: {n} not refused" for n in names if not _named(text, n)]
        wrong += [f"{role}: {n} refused in string form" for n in accepted.get(role, []) if _named(text, n)]
        if names and "-e '{" not in text:
            wrong.append(f"{role}: the refusal does not give the JSON form")
    assert wrong == [], out[-4000:]
    assert sum(len(v) for v in accepted.values()) > 50


CONTRACT_TYPED = {n: contract.spec_type(n) for n in contract.INPUTS if contract.spec_type(n) in TYPED}


def test_every_typed_deploy_input_given_as_a_bad_string_is_refused_in_one_message(tmp_path):
    extra = {n: BAD[t] for n, t in CONTRACT_TYPED.items()}
    proc = _run(tmp_path, ROOT / "playbooks" / "deploy_tiny.yml", extra)
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0
    match = re.search(r"(\d+) deploy input\(s\) refused", out)
    assert match, out[-3000:]
    assert [n for n in CONTRACT_TYPED if f"- {n}=" not in out] == [], out[-4000:]


def test_deploy_inputs_in_string_form_reach_the_plan_converted(tmp_path):
    extra = {
        "llm_deploy_plan_only": "yes",
        "llm_api_port": "8123",
        "llm_tensor_parallel_size": "1",
        "llm_max_model_len": "200",
        "llm_start_timeout_minutes": "30",
        "llm_verify_full": "0",
        "llm_hardware_name": "h200_x1",
    }
    proc = _run(tmp_path, ROOT / "playbooks" / "deploy_tiny.yml", extra)
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 0, out[-3000:]
    assert "vllm on 127.0.0.1:8123 as user vllm, TP 1, max_model_len 200," in out, out[-3000:]
    # Plan mode contacted no host and changed nothing: the string "yes" was read as true.
    assert "changed=0" in out and "Stop here in plan mode" in out
