"""Filter plugin: maps path_needs_change onto the pure function of module_utils/path_states.py."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.llmdeploy.llm.plugins.module_utils.path_states import path_needs_change

DOCUMENTATION = r"""
name: path_needs_change
short_description: Whether a file, copy or template task would change a path, from the path_states module
description:
  - True unless the path_states result shows the path already with the given state, mode, owner, group and
    content (the text a copy or template task would write; its sha1 is compared) or sha1.
  - A path the probe did not read counts as needing a change, so a task guarded by it runs.
positional: path
options:
  _input: {type: dict, required: true, description: The path_states module's C(paths)}
  path: {type: str, required: true, description: The path the task manages}
  state: {type: str, default: file, description: file or directory (as the file module spells them)}
  mode: {type: raw, description: The mode the task sets ("0644")}
  owner: {type: str, description: The owner the task sets}
  group: {type: str, description: The group the task sets}
  content: {type: str, description: The text the task writes}
  sha1: {type: str, description: The checksum the file must have}
  secret_key: {type: str, description: The key path_states hashed this secret file with (its secret_paths)}
  same_content_as: {type: str, description: Another probed path whose content the path must have (a copy)}
"""

EXAMPLES = r"""
- name: Install the launcher unless it is already there
  ansible.builtin.copy:
    src: launch.py
    dest: /usr/local/lib/app/launch.py
    mode: "0755"
  when: >-
    probe.paths | llmdeploy.llm.path_needs_change('/usr/local/lib/app/launch.py', mode='0755',
    content=lookup('ansible.builtin.file', 'launch.py', rstrip=false))
"""

RETURN = r"""
_value: {description: Whether the task must run, type: bool}
"""


def _path_needs_change(states: Any, path: str, **kwargs: Any) -> bool:
    try:
        return path_needs_change(states, path, **kwargs)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    """Map filter names to the functions above."""

    def filters(self) -> dict[str, Any]:
        return {"path_needs_change": _path_needs_change}
