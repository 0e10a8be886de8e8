"""Filter plugin: maps filter names onto the pure functions of module_utils/llm_plan_report.py."""

from __future__ import annotations

from typing import Any

from ansible_collections.llmdeploy.llm.plugins.module_utils.llm_plan_report import (
    llm_plan_assemble,
    llm_plan_layout,
    llm_plan_settings,
    llm_plan_table,
)

DOCUMENTATION = r"""
name: llm_plan_report
short_description: Settings, selection and a printable table for LLM capacity plans
description:
  - C(llm_plan_settings) evaluates a catalog model's C(known_issues) and C(patches) and a hardware
    profile's C(engine_env) against host facts (compute capability, engine version, interconnect,
    KV dtype) and returns the settings they force.
  - C(llm_plan_layout) merges a recommendation from C(llm_recommend) with explicit overrides.
  - C(llm_plan_assemble) picks the plan to deploy from a list of computed rows and builds C(llm_plan_result).
  - C(llm_plan_table) renders C(llm_plan_result) as a list of text lines.
"""

EXAMPLES = r"""
- ansible.builtin.debug:
    msg: "{{ llm_plan_result | llm_plan_table }}"
"""


class FilterModule:
    """Map filter names to the functions above."""

    def filters(self) -> dict[str, Any]:
        return {
            "llm_plan_settings": llm_plan_settings,
            "llm_plan_layout": llm_plan_layout,
            "llm_plan_assemble": llm_plan_assemble,
            "llm_plan_table": llm_plan_table,
        }
