"""Load the collection's filter plugins the way Ansible does: by FQCN, through its collection loader.

The pure functions are tested by importing plugins/module_utils directly; these helpers check that the
plugin files map the documented names (and only those) onto them inside the installed layout.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from ansible.plugins.loader import init_plugin_loader

ROOT = Path(__file__).resolve().parents[2]
COLLECTIONS = ROOT / ".collections"  # made by `make setup` (scripts/setup-venv.sh)
FQCN = "llmdeploy.llm"


def filters(plugin: str) -> dict[str, Any]:
    """Return FilterModule().filters() of plugins/filter/<plugin>.py, imported by its collection path."""
    assert (COLLECTIONS / "ansible_collections" / "llmdeploy" / "llm" / "galaxy.yml").is_file(), (
        "run `make setup`: it makes the checkout visible as the collection llmdeploy.llm"
    )
    init_plugin_loader([str(COLLECTIONS)])
    module = importlib.import_module(f"ansible_collections.llmdeploy.llm.plugins.filter.{plugin}")
    return module.FilterModule().filters()


def run_module(name: str, args: dict[str, Any]) -> dict[str, Any]:
    """Run plugins/modules/<name>.py as Ansible runs a module: its own process, the arguments on stdin."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "plugins" / "modules" / f"{name}.py")],
        input=json.dumps({"ANSIBLE_MODULE_ARGS": args}),
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(COLLECTIONS), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    return json.loads(done.stdout)
