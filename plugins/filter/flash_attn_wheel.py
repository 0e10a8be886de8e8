"""Filter plugin: maps filter names onto the pure functions of module_utils/flash_attn_wheel.py."""

from __future__ import annotations

from typing import Any

from ansible_collections.llmdeploy.llm.plugins.module_utils.flash_attn_wheel import (
    ml_env_cuda_arch_list,
    ml_env_flash_attn_archs,
    ml_env_flash_attn_max_jobs,
    ml_env_flash_attn_wheel,
)

DOCUMENTATION = r"""
name: flash_attn_wheel
short_description: flash-attn wheel selection and build settings
description:
  - C(ml_env_flash_attn_wheel) - the prebuilt wheel file name, download URL and cache keys that match a
    torch/CUDA/Python/C++-ABI combination (as reported by the venv's torch).
  - C(ml_env_cuda_arch_list) - TORCH_CUDA_ARCH_LIST from compute capabilities
    (C(["9.0", "12.0"]) -> C("9.0;12.0")).
  - C(ml_env_flash_attn_archs) - FLASH_ATTN_CUDA_ARCHS from compute capabilities (C("90;120")).
  - C(ml_env_flash_attn_max_jobs) - MAX_JOBS for the source build from RAM and CPU count.
"""

EXAMPLES = r"""
- ansible.builtin.set_fact:
    __wheel: "{{ torch_info | ml_env_flash_attn_wheel('2.8.3') }}"
    __arch: "{{ ['9.0', '12.0'] | ml_env_cuda_arch_list }}"
    __jobs: "{{ ansible_facts.memtotal_mb | ml_env_flash_attn_max_jobs(ansible_facts.processor_vcpus) }}"
"""


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "ml_env_flash_attn_wheel": ml_env_flash_attn_wheel,
            "ml_env_cuda_arch_list": ml_env_cuda_arch_list,
            "ml_env_flash_attn_archs": ml_env_flash_attn_archs,
            "ml_env_flash_attn_max_jobs": ml_env_flash_attn_max_jobs,
        }
