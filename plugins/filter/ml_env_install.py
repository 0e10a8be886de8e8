"""Filter plugin: maps filter names onto the pure functions of module_utils/ml_env_install.py."""

from __future__ import annotations

from typing import Any

from ansible_collections.llmdeploy.llm.plugins.module_utils.ml_env_install import (
    ml_env_install_argv,
    ml_env_uninstall_argv,
    ml_env_unpinned,
    ml_env_uv_bootstrap_argv,
    ml_env_venv_argv,
    ml_env_wheel_pins,
)

DOCUMENTATION = r"""
name: ml_env_install
short_description: Installer command lines and pin checks for the ml_env role
description:
  - C(ml_env_unpinned) - the requirement specs of a list that are not pinned to one version.
  - C(ml_env_venv_argv) - argv creating a venv (C(uv venv) or C(python -m venv)).
  - C(ml_env_install_argv) - argv installing a requirements (and constraints) file.
  - C(ml_env_uninstall_argv) - argv removing packages from a venv.
  - C(ml_env_uv_bootstrap_argv) - argv installing uv with the host's pip into a private folder.
  - C(ml_env_wheel_pins) - name==version of every wheel file name (an exact wheelhouse install).
  - Package sources come from one dict (C(index_url), C(extra_index_urls), C(find_links), C(wheelhouse),
    C(cache_dir), C(extra_args)); a wheelhouse means C(--no-index) and nothing comes from a network index.
"""

EXAMPLES = r"""
- ansible.builtin.command:
    argv: "{{ 'uv' | ml_env_install_argv('/opt/bin/uv', '/opt/ml-env/bin/python', req, '', sources) }}"
"""


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "ml_env_unpinned": ml_env_unpinned,
            "ml_env_venv_argv": ml_env_venv_argv,
            "ml_env_wheel_pins": ml_env_wheel_pins,
            "ml_env_install_argv": ml_env_install_argv,
            "ml_env_uninstall_argv": ml_env_uninstall_argv,
            "ml_env_uv_bootstrap_argv": ml_env_uv_bootstrap_argv,
        }
