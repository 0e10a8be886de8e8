"""Every role documents every public variable: meta/argument_specs.yml and defaults/main.yml agree."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROLES = sorted(p for p in (Path(__file__).resolve().parents[2] / "roles").iterdir() if p.is_dir())


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


@pytest.mark.parametrize("role", ROLES, ids=[r.name for r in ROLES])
def test_defaults_and_argument_specs_agree(role: Path):
    defaults = _load(role / "defaults" / "main.yml")
    specs = _load(role / "meta" / "argument_specs.yml")["argument_specs"]
    options: dict[str, dict] = {}
    for entry in specs.values():
        options.update(entry.get("options") or {})
    assert sorted(set(defaults) - set(options)) == [], "defaults missing from argument_specs"
    undocumented_required = [n for n in set(options) - set(defaults) if not options[n].get("required")]
    assert undocumented_required == [], "options without a default must be required"
    for name, spec in options.items():
        assert name.startswith(role.name + "_"), f"{name}: public variables carry the role prefix"
        assert spec.get("description"), f"{name}: no description"


@pytest.mark.parametrize("role", ROLES, ids=[r.name for r in ROLES])
def test_galaxy_metadata_names_the_role(role: Path):
    info = _load(role / "meta" / "main.yml")["galaxy_info"]
    assert info["namespace"] == "llmdeploy"
    assert info["role_name"] == role.name
