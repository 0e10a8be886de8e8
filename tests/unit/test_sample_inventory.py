"""The documented sample GPU inventory parses and points at real catalog entries, with no secrets in it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = ROOT / "inventory" / "sample_gpu"


def _inventory() -> dict:
    out = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-inventory"), "-i", str(INVENTORY), "--list"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return json.loads(out.stdout)


def test_sample_inventory_has_the_workstation_with_documented_vars() -> None:
    inv = _inventory()
    assert inv["gpu_hosts"]["hosts"] == ["gpu-ws-01"]
    host = inv["_meta"]["hostvars"]["gpu-ws-01"]
    assert host["ansible_host"] == "192.0.2.10"
    assert (ROOT / "catalog" / "models" / f"{host['llm_model_name']}.yml").is_file()
    assert (ROOT / "catalog" / "hardware" / f"{host['llm_hardware_name']}.yml").is_file()
    assert host["llm_api_host"] == "127.0.0.1"
    assert isinstance(host["llm_api_port"], int)
    assert host["llm_service_user"] not in ("root", "")


def test_secrets_come_from_the_vault_only() -> None:
    host = _inventory()["_meta"]["hostvars"]["gpu-ws-01"]
    assert "vault_hf_token" in host["hf_token"]
    assert "vault_llm_api_key" in host["llm_api_key"]
    text = "".join(p.read_text() for p in INVENTORY.rglob("*.yml"))
    assert "hf_" + "xxxx" not in text
    assert not any(line.strip().startswith("vault_") for line in text.splitlines())


def test_every_variable_is_documented() -> None:
    """Each top-level variable in group_vars sits in a paragraph that carries a comment."""
    for path in (INVENTORY / "group_vars").glob("*.yml"):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if not line or line.startswith(("#", " ", "-")) or ":" not in line:
                continue
            paragraph = []
            for previous in reversed(lines[:i]):
                if not previous.strip():
                    break
                paragraph.append(previous)
            assert any(p.startswith("#") for p in paragraph), (
                f"{path.name}: {line.split(':')[0]} lacks a comment"
            )


def test_every_inventory_variable_is_read_by_something() -> None:
    """No documented-but-unused input: each group_vars key of the sample inventories is read by a playbook,
    is a role option (meta/argument_specs.yml) or a connection setting."""
    import yaml  # noqa: PLC0415  (only this test parses YAML itself)

    playbooks = "".join(p.read_text() for p in (ROOT / "playbooks").rglob("*.yml"))
    options = set()
    for spec in (ROOT / "roles").glob("*/meta/argument_specs.yml"):
        options |= set(yaml.safe_load(spec.read_text())["argument_specs"]["main"]["options"])
    for inventory in ("sample_gpu", "demo"):
        for path in (ROOT / "inventory" / inventory / "group_vars").glob("*.yml"):
            for name in yaml.safe_load(path.read_text()) or {}:
                if name.startswith("ansible_") or name in options:
                    continue
                assert name in playbooks, f"inventory/{inventory}/{path.name}: {name} is read by no playbook"
