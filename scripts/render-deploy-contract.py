#!/usr/bin/env python3
"""Render the deploy contract (plugins/module_utils/deploy_inputs.py: INPUTS) into the files that state it:
roles/deploy/meta/argument_specs.yml, roles/deploy/defaults/main.yml and the table of docs/deploy-inputs.md.
  scripts/render-deploy-contract.py          write them
  scripts/render-deploy-contract.py --check  exit 1 naming each file that differs (tests/unit runs this)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

import deploy_inputs as contract  # noqa: E402  (the module_utils path is set just above)

SPECS = ROOT / "roles" / "deploy" / "meta" / "argument_specs.yml"
DEFAULTS = ROOT / "roles" / "deploy" / "defaults" / "main.yml"
DOC = ROOT / "docs" / "deploy-inputs.md"
TABLE_START = "| Variable | Default | Accepted |"
GENERATED = "# Rendered by scripts/render-deploy-contract.py from plugins/module_utils/deploy_inputs.py.\n"

# The other entry points: what each is for and the contract's options it reads.
ENTRY_POINTS = {
    "inputs": (
        "Check the deploy inputs",
        "Check every llm_* variable (and hf_token) against the contract on the controller, one refusal "
        "listing every problem; deploy_model.yml runs it before the role so its refusals come first.",
        [],
    ),
    "model": (
        "Settle llm_model",
        "Settle llm_model (a catalog entry or a hub repository) without deploying (playbooks/plan.yml).",
        ["llm_model_name", "llm_model_repo", "llm_model_revision", "llm_hf_endpoint", "hf_token"],
    ),
}


class _Dumper(yaml.SafeDumper):
    """Block lists indented under their key, as yamllint's default wants; no anchors."""

    def ignore_aliases(self, data: object) -> bool:
        return True

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _yaml(data: object) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=110, allow_unicode=True)


def render_specs() -> str:
    options = contract.argument_spec_options()
    specs = {
        "main": {
            "short_description": "Plan, check, deploy and verify one model as an LLM endpoint",
            "description": [
                "The whole pipeline of playbooks/deploy_model.yml: the plan on the controller, a read-only "
                "preflight that refuses an unfit host, then the engine venv, the weights, the patches, the "
                "service and serve_verify, with a rollback when the new service fails.",
                "Every option is also checked by the contract (docs/deploy-inputs.md) with one refusal per "
                "problem naming the variable, the value and the fix.",
            ],
            "options": options,
        }
    }
    for entry, (short, text, names) in ENTRY_POINTS.items():
        specs[entry] = {"short_description": short, "description": [text]}
        if names:
            specs[entry]["options"] = {n: options[n] for n in names}
    return "---\n" + GENERATED + _yaml({"argument_specs": specs})


def render_defaults() -> str:
    return "---\n" + GENERATED + _yaml(contract.role_defaults())


def _cell(value: object) -> str:
    if value is None:
        return "`unset`"
    return "`" + (json.dumps(value) if isinstance(value, bool | dict) or value == "" else str(value)) + "`"


def render_doc(current: str) -> str:
    head, _, _ = current.partition(TABLE_START)
    rows = [TABLE_START, "| --- | --- | --- |"]
    rows += [f"| `{n}` | {_cell(s.default)} | {s.fix} |" for n, s in contract.INPUTS.items()]
    return head + "\n".join(rows) + "\n"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    wanted = {
        SPECS: render_specs(),
        DEFAULTS: render_defaults(),
        DOC: render_doc(DOC.read_text()),
    }
    stale = [p for p, text in wanted.items() if not p.exists() or p.read_text() != text]
    if check:
        for path in stale:
            print(
                f"{path.relative_to(ROOT)} differs from the contract: run scripts/render-deploy-contract.py"
            )
        return 1 if stale else 0
    for path in stale:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(wanted[path])
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
