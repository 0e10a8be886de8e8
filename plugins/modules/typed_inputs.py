#!/usr/bin/python
"""Documentation of the action plugin llmdeploy.llm.typed_inputs (it runs on the controller only)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: typed_inputs
short_description: Refuse a role's typed variables given as strings its tasks would misread
description:
  - C(-e key=value) gives every value as a string, and a role's argument_specs validate a converted copy
    while the tasks read the variable itself, which extra vars keep as given. This action reads the calling
    role's C(meta/argument_specs.yml) and refuses, naming each variable, its value and the form to give, a
    string for a C(list) or C(dict) option, a string for an C(int), C(float) or C(bool) option that is not
    in the strict form the tasks convert, and a number that is not finite.
  - Runs on the controller; never contacts the host. Secrets (C(no_log) options) are shown by length only.
options:
  entry:
    description: The argument_specs entry to check against.
    type: str
    default: main
  spec_file:
    description: An argument_specs file to read instead of the calling role's.
    type: path
author: llmdeploy maintainers (@llmdeploy)
"""

EXAMPLES = r"""
- name: Refuse typed variables in a form the tasks would misread
  llmdeploy.llm.typed_inputs:
"""

RETURN = r"""
checked:
  description: How many of the entry's options had a value.
  type: int
  returned: always
"""

if __name__ == "__main__":
    raise SystemExit("typed_inputs is an action plugin: it runs on the controller, not as a module")
