"""Filter plugin: maps filter names onto the pure functions of module_utils/hf_files.py."""

from __future__ import annotations

from typing import Any

from ansible_collections.llmdeploy.llm.plugins.module_utils.hf_files import (
    hf_disk_requirement,
    hf_is_lfs_pointer,
    hf_marker_current,
    hf_prune_candidates,
    hf_split_gguf_groups,
    hf_sync_plan,
    hf_verify_files,
)

DOCUMENTATION = r"""
name: hf_files
short_description: Disk requirement, shard verification and split-GGUF detection for HF model downloads
description:
  - C(hf_disk_requirement) - bytes a download still needs and whether the free space suffices.
  - C(hf_split_gguf_groups) - split GGUF sets (C(name-00001-of-00003.gguf)) with missing parts.
  - C(hf_is_lfs_pointer) - whether the first bytes of a file are a Git-LFS pointer instead of data.
  - C(hf_verify_files) - problems of local files against the hub listing and the safetensors index.
  - C(hf_marker_current) - whether a completion marker matches the revision and the local files.
  - C(hf_prune_candidates) - model directories of older downloads that may be removed.
  - C(hf_sync_plan) - per host, whether it downloads, receives a copy, or reads a shared path.
"""

EXAMPLES = r"""
- ansible.builtin.set_fact:
    __need: "{{ listing.files | hf_disk_requirement(local_sizes, free_bytes, margin_bytes) }}"
"""


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "hf_disk_requirement": hf_disk_requirement,
            "hf_split_gguf_groups": hf_split_gguf_groups,
            "hf_is_lfs_pointer": hf_is_lfs_pointer,
            "hf_verify_files": hf_verify_files,
            "hf_marker_current": hf_marker_current,
            "hf_prune_candidates": hf_prune_candidates,
            "hf_sync_plan": hf_sync_plan,
        }
