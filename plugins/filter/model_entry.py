"""Filter plugin: maps filter names onto the pure functions of module_utils/model_entry.py."""

from __future__ import annotations

from typing import Any

from ansible_collections.llmdeploy.llm.plugins.module_utils.model_entry import (
    architecture_problems,
    model_complete,
    model_entry_from_hub,
    model_merge,
)

DOCUMENTATION = r"""
name: model_entry
short_description: A catalog entry derived from a hub repository's own files
description:
  - C(llm_model_entry) turns what the C(hf_model_info) module read (config.json, quant config, weight files,
    chat template) into an C(llm_model) of the catalog's shape - the commit sha as revision, the checkpoint's
    bytes and format, MLA from the config, the tool-call and reasoning parsers from the model family (none
    when the family is unknown, said in C(parsers_note)) and generic quality probes.
  - C(llm_model_complete) fills in what an entry does not set and its config.json tells - C(quant_format),
    C(families) (mla, sparse_mla, moe, multimodal, gguf - what catalog/known_issues.yml rules are keyed by),
    C(mla) and C(supports_dcp); a value the entry sets wins.
  - C(llm_model_merge) lays a catalog entry over the hub-derived one (C(hub | llm_model_merge(catalog))) - the
    hub's config, files and commit, the catalog's parsers, probes, patches, pins and overrides.
  - C(llm_architecture_problems) takes a config.json and a vLLM version and returns the refusals (an
    architecture that release has no model class for, with what would serve it) - the registries of vLLM
    0.22.0 and 0.32.0 are recorded in C(plugins/module_utils/vllm_architectures.json).
"""

EXAMPLES = r"""
- name: Use a hub model as the plan's model
  ansible.builtin.set_fact:
    llm_model: "{{ qwen.model | llmdeploy.llm.llm_model_entry }}"
"""


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "llm_model_entry": model_entry_from_hub,
            "llm_model_complete": model_complete,
            "llm_model_merge": model_merge,
            "llm_architecture_problems": lambda config, version: architecture_problems(config, version)[0],
        }
