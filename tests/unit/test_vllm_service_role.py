"""Static checks of roles/vllm_service: argument_specs and defaults agree, names follow the conventions."""

from __future__ import annotations

from pathlib import Path

import yaml

ROLE = Path(__file__).resolve().parents[2] / "roles" / "vllm_service"


def _defaults() -> dict[str, object]:
    return yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())


def _options() -> dict[str, dict[str, object]]:
    spec = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())
    return spec["argument_specs"]["main"]["options"]


def test_every_default_is_documented_with_the_same_value() -> None:
    defaults, options = _defaults(), _options()
    assert sorted(defaults) == sorted(options)
    for name, value in defaults.items():
        assert options[name].get("default") == value, name
        assert options[name].get("description"), name


def test_public_names_carry_the_role_prefix() -> None:
    for name in _options():
        assert name.startswith("vllm_service_"), name


def test_secrets_are_marked_no_log() -> None:
    options = _options()
    for name in ("vllm_service_api_key", "vllm_service_hf_token"):
        assert options[name].get("no_log") is True, name
