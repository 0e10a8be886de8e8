"""Filter plugin: maps the filter name onto the pure function of module_utils/sglang_args.py."""

from __future__ import annotations

from typing import Any

from ansible_collections.llmdeploy.llm.plugins.module_utils.sglang_args import sglang_args

DOCUMENTATION = r"""
name: sglang_args
short_description: SGLang server arguments from data, with role-owned options and secrets refused
description:
  - Turns a mapping of SGLang option names (SGLang 0.5.17 spelling, C(_) or C(-)) to values into an
    argument list for C(python -m sglang.launch_server). C(None) and C(false) leave an option out, C(true)
    gives a bare flag, a list gives the flag followed by each item, a mapping gives the flag followed by its
    compact JSON.
  - The first argument holds the options the caller owns, in order; every key of it is owned whatever its
    value. The second is a mapping of extra options appended after them; an extra option that the first
    mapping or the third argument (a list of reserved names) owns, under its name or an SGLang alias
    (C(model) for C(model-path), C(tensor-parallel-size) for C(tp-size), ...), is refused.
  - Options that carry secrets (C(api-key), C(admin-api-key), C(hf-token)) are refused in both mappings.
  - Errors start with C(sglang_args:) and show the bad value.
options:
  _input:
    description: Role-owned options, name to value.
    type: dict
    required: true
  extra:
    description: Extra options, name to value, appended after the role-owned ones.
    type: dict
    default: {}
  reserved:
    description: More option names the extra mapping may not set.
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Argument list
  ansible.builtin.debug:
    msg: "{{ {'model-path': '/srv/m', 'tp_size': 2, 'trust-remote-code': false, 'enable-metrics': true}
      | llmdeploy.llm.sglang_args({'chunked-prefill-size': 8192}) }}"
  # ['--model-path', '/srv/m', '--tp-size', '2', '--enable-metrics', '--chunked-prefill-size', '8192']
- name: Refused - the role owns tp-size (and its alias tensor-parallel-size)
  ansible.builtin.debug:
    msg: "{{ {'tp-size': 2} | llmdeploy.llm.sglang_args({'tensor-parallel-size': 4}) }}"
"""

RETURN = r"""
_value:
  description: The argument list, a list of strings.
  type: list
  elements: str
"""


class FilterModule:
    """Map the filter name to the function above."""

    def filters(self) -> dict[str, Any]:
        return {"sglang_args": sglang_args}
