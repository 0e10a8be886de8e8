"""Filter plugin: maps filter names onto the pure functions of module_utils/model_patches.py."""

from __future__ import annotations

from typing import Any

from ansible_collections.llmdeploy.llm.plugins.module_utils.model_patches import (
    model_patch_apply,
    model_patch_engine_args,
    model_patch_normalize,
    model_patch_select,
)

DOCUMENTATION = r"""
name: model_patches
short_description: Select and apply the declarative checkpoint patches of a catalog model entry
description:
  - C(model_patch_normalize) - check a list of patches and give each the canonical form
    C({id, file, op, path (list), value, reason, when, engine_args}). Accepts the catalog form
    (C(action), dotted C(json_path)) and the list form (C(op), C(path)).
  - C(model_patch_select) - the patches whose C(when) holds for the host facts. Condition keys
    C(compute_capability), C(kv_cache_dtype), C(attention_backend), C(interconnect) (accepted values),
    C(engine_version_lt), C(engine_version_ge), C(engine_version) (a range such as C(>=0.13,<0.20)).
    A fact that is unknown never matches, so a patch never fires on missing information.
  - C(model_patch_apply) - a patched copy of a JSON document (the input is not modified).
  - C(model_patch_engine_args) - the engine arguments the selected patches ask for.
"""

EXAMPLES = r"""
- ansible.builtin.set_fact:
    applicable: "{{ llm_model.patches | model_patch_normalize | model_patch_select(facts) }}"
    patched: "{{ original | model_patch_apply(applicable | selectattr('file', 'eq', 'config.json')) }}"
"""


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "model_patch_normalize": model_patch_normalize,
            "model_patch_select": model_patch_select,
            "model_patch_apply": model_patch_apply,
            "model_patch_engine_args": model_patch_engine_args,
        }
