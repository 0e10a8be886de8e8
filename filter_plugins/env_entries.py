"""Turn a name -> value mapping into the {name, value, why} entries the service role renders."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - only when used outside Ansible

    class AnsibleFilterError(Exception):  # type: ignore[no-redef]
        """Stand-in so the function stays importable without Ansible."""


DOCUMENTATION = r"""
name: env_entries
short_description: Mapping of environment variables to a list of {name, value, why} entries
description:
  - Used by the deploy playbooks to hand the plan's C(engine_env) to C(vllm_service_env).
  - Names matching one of O(exclude_prefixes) are left out (the NCCL choice belongs to gpu_preflight).
options:
  _input:
    description: Variable name to value.
    type: dict
    required: true
  why:
    description: The comment rendered above each entry.
    type: str
    required: true
  exclude_prefixes:
    description: Name prefixes to leave out.
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
vllm_service_env: "{{ {'VLLM_DISABLED_KERNELS': 'X'} | env_entries('forced by a known issue') }}"
# -> [{'name': 'VLLM_DISABLED_KERNELS', 'value': 'X', 'why': 'forced by a known issue'}]
"""


def env_entries(
    mapping: Mapping[str, Any], why: str, exclude_prefixes: list[str] | None = None
) -> list[dict[str, str]]:
    """Return [{name, value, why}] for every item whose name does not start with an excluded prefix."""
    if not isinstance(mapping, Mapping):
        raise AnsibleFilterError(f"env_entries: expected a mapping of names to values, got {mapping!r}")
    if not isinstance(why, str) or not why.strip():
        raise AnsibleFilterError(f"env_entries: `why` must be a non-empty string, got {why!r}")
    prefixes = tuple(exclude_prefixes or ())
    entries = []
    for name, value in mapping.items():
        if not isinstance(name, str) or not name:
            raise AnsibleFilterError(f"env_entries: variable names must be non-empty strings, got {name!r}")
        if prefixes and name.startswith(prefixes):
            continue
        entries.append({"name": name, "value": str(value), "why": why})
    return entries


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"env_entries": env_entries}
