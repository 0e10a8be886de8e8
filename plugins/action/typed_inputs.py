"""Action plugin llmdeploy.llm.typed_inputs: refuse a role's typed variables given in a form its tasks
would misread (a string for a list, a mapping, a number or a boolean). Runs on the controller only; the
checks are plugins/module_utils/typed_inputs.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.llmdeploy.llm.plugins.module_utils.typed_inputs import typed_input_problems

DOCUMENTATION = r"""
action: typed_inputs
short_description: Refuse a role's typed variables given as strings its tasks would misread
description:
  - See the module llmdeploy.llm.typed_inputs for the options.
"""


class ActionModule(ActionBase):
    """Reads the calling role's argument_specs entry and checks the role's variables against it."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("entry", "spec_file"))
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        entry = self._task.args.get("entry", "main")
        spec_file = self._task.args.get("spec_file")
        role = self._task._role
        if not spec_file:
            if role is None:
                raise AnsibleActionFail("typed_inputs: not called from a role; give spec_file")
            spec_file = str(Path(role._role_path) / "meta" / "argument_specs.yml")
        try:
            specs = yaml.safe_load(Path(spec_file).read_text())["argument_specs"]
            options = specs[entry].get("options") or {}
        except (OSError, KeyError, TypeError, yaml.YAMLError) as exc:
            message = f"typed_inputs: cannot read entry {entry!r} of {spec_file}: {exc}"
            raise AnsibleActionFail(message) from exc
        given = {name: self._templar.template(task_vars[name]) for name in options if name in task_vars}
        problems = typed_input_problems(options, given)
        result["changed"] = False
        result["checked"] = len(given)
        if problems:
            owner = role.get_name() if role is not None else Path(spec_file).parent.parent.name
            result["failed"] = True
            result["msg"] = "\n- ".join([f"{owner}: {len(problems)} variable(s) refused:", *problems])
        else:
            result["msg"] = f"{len(given)} typed variable(s) in a form the tasks read"
        return result
