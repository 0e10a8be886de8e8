"""The gpu_preflight role's data: argument_specs in sync with defaults, filters carried, probes named."""

from __future__ import annotations

from pathlib import Path

import yaml
from _gpu_probe_fixtures import FIXTURES, gpu_facts

ROLE = Path(__file__).resolve().parents[2] / "roles" / "gpu_preflight"


def _yaml(path: str) -> dict:
    return yaml.safe_load((ROLE / path).read_text())


def test_argument_specs_document_every_default() -> None:
    defaults = _yaml("defaults/main.yml")
    options = _yaml("meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    assert set(defaults) == set(options)
    for name, spec in options.items():
        assert spec["description"], name
        assert spec["default"] == defaults[name], name


def test_recorded_fixture_has_every_probe() -> None:
    variables = _yaml("vars/main.yml")
    probes = set(variables["_gpu_preflight_probes"]) - set(variables["_gpu_preflight_cpu_only"])
    recorded = {p.name[: -len(".rc")] for p in (FIXTURES / "h200x2_run").glob("*.rc")}
    assert recorded == probes
    # and facts_from_probes reads exactly these names
    doc = gpu_facts.facts_from_probes.__doc__ or ""
    assert all(name in doc for name in probes)


def test_cpu_probes_exist_and_are_parsed() -> None:
    variables = _yaml("vars/main.yml")
    cpu = variables["_gpu_preflight_device_probes"]["cpu"]
    assert set(cpu) <= set(variables["_gpu_preflight_probes"])
    assert set(variables["_gpu_preflight_cpu_only"]) <= set(cpu)
