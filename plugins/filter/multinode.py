"""Filter plugin: maps filter names onto the pure functions of module_utils/multinode.py."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.llmdeploy.llm.plugins.module_utils.multinode import (
    MultinodeError,
    group_fact_problems,
    group_input_problems,
    group_layout,
    node_network,
    reach_problem,
)

DOCUMENTATION = r"""
name: multinode
short_description: The checks and choices of a multi-node vLLM group
description:
  - C(llm_group_layout) gives nnodes, node_rank, head and hosts for a host of the play's host list.
  - C(llm_group_input_problems) lists deploy inputs set differently on the group's hosts.
  - C(llm_group_fact_problems) lists hardware or software facts that differ between the hosts.
  - C(llm_node_network) picks the interface and address a node talks to the group on.
  - C(llm_group_reach_problem) turns a worker's TCP probe of the head into a refusal (or none).
"""

EXAMPLES = r"""
- name: Place this host in the group
  ansible.builtin.set_fact:
    group: "{{ ansible_play_hosts_all | llmdeploy.llm.llm_group_layout(inventory_hostname) }}"
"""

RETURN = r"""
_value:
  description: A dict (layout, network) or a list of refusal messages.
  type: raw
"""


def _wrap(name: str, func: Any) -> Any:
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except MultinodeError as exc:
            raise AnsibleFilterError(f"{name}: {exc}") from exc

    return run


class FilterModule:
    """Map filter names to the functions above."""

    def filters(self) -> dict[str, Any]:
        return {
            "llm_group_layout": _wrap("llm_group_layout", group_layout),
            "llm_group_input_problems": _wrap("llm_group_input_problems", group_input_problems),
            "llm_group_fact_problems": _wrap("llm_group_fact_problems", group_fact_problems),
            "llm_node_network": _wrap("llm_node_network", node_network),
            "llm_group_reach_problem": reach_problem,
        }
