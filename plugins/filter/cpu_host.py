"""Filter plugin: maps filter names onto the pure functions of module_utils/cpu_host.py and cpu_plan.py."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.llmdeploy.llm.plugins.module_utils.cpu_host import (
    cpu_facts_from_probes,
    cpu_preflight_problems,
    thread_binding,
)
from ansible_collections.llmdeploy.llm.plugins.module_utils.cpu_plan import (
    CpuPlanError,
    cpu_plan,
    cpu_plan_lines,
)

DOCUMENTATION = r"""
name: cpu_host
short_description: Facts, refusals and the serving plan for vLLM's CPU build
description:
  - C(cpu_host_facts_from_probes) turns the gpu_preflight role's probe results on a CPU host into facts
    (memory, disk, /dev/shm, allowed CPUs, instruction-set flags, Python, the service port).
  - C(cpu_host_preflight_problems) lists what refuses the host (memory for weights and KV space, cores for
    the workers, /dev/shm, the instruction set, Python, checkpoint formats without CPU kernels such as NVFP4).
  - C(cpu_host_thread_binding) splits the allowed CPUs into one group per tensor-parallel worker.
  - C(llm_cpu_plan) plans KV space (VLLM_CPU_KVCACHE_SPACE), tokens and the layout on the host reached.
"""

EXAMPLES = r"""
- name: Plan the catalog model on this CPU host
  ansible.builtin.set_fact:
    plan: >-
      {{ llm_model | llmdeploy.llm.llm_cpu_plan(tensor_parallel_size=2, kv_cache_gib='auto',
         memory_available_bytes=facts.memory.available_bytes, cpus=facts.cpus) }}
"""


def _plan(model: Any, **kwargs: Any) -> dict[str, Any]:
    try:
        return cpu_plan(model, **kwargs)
    except CpuPlanError as exc:
        raise AnsibleFilterError(f"llm_cpu_plan: {exc}") from exc


class FilterModule:
    """Map filter names to the functions above."""

    def filters(self) -> dict[str, Any]:
        return {
            "cpu_host_facts_from_probes": cpu_facts_from_probes,
            "cpu_host_preflight_problems": cpu_preflight_problems,
            "cpu_host_thread_binding": thread_binding,
            "llm_cpu_plan": _plan,
            "llm_cpu_plan_lines": cpu_plan_lines,
        }
