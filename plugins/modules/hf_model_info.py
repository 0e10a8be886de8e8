"""Ansible module: read a model repository's config and weight sizes from a hub (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: hf_model_info
short_description: Resolve a Hugging Face model repository to its commit and read what the planner needs
description:
  - Resolves O(repo) (C(ORG/NAME) or C(ORG/NAME@REVISION)) to a commit sha and reads config.json, ModelOpt's
    hf_quant_config.json when there is one, the weight files' sizes and whether a chat template is present.
  - Reads only; changes nothing, also outside check mode. The token is sent as a bearer token, never returned.
options:
  repo: {type: str, required: true, description: "ORG/NAME or ORG/NAME@REVISION (branch, tag or commit sha)"}
  endpoint: {type: str, default: "", description: "Hub or mirror; empty: HF_ENDPOINT, else huggingface.co"}
  token: {type: str, default: "", description: Token for gated or private repositories}
  timeout: {type: float, default: 30, description: Seconds per request}
  allow_patterns:
    type: list
    elements: str
    default: []
    description: Weight files to count (fnmatch on the repository path, as the download's allow patterns)
author: llmdeploy maintainers (@llmdeploy)
"""

EXAMPLES = r"""
- name: Read Qwen3-14B from the hub
  llmdeploy.llm.hf_model_info:
    repo: Qwen/Qwen3-14B@main
  delegate_to: localhost
  register: qwen
"""

RETURN = r"""
model:
  description: repo, revision, sha, config, hf_quant_config, weight_files (name to bytes), checkpoint_bytes,
    chat_template, files.
  returned: success
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmdeploy.llm.plugins.module_utils.hf_hub_metadata import (
    HubError,
    hub_model,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "repo": {"type": "str", "required": True},
            "endpoint": {"type": "str", "default": ""},
            "token": {"type": "str", "default": "", "no_log": True},
            "timeout": {"type": "float", "default": 30},
            "allow_patterns": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        model = hub_model(p["repo"], p["endpoint"], p["token"] or None, p["timeout"], p["allow_patterns"])
    except HubError as exc:
        module.fail_json(msg=f"llm_model_repo={p['repo']}: {exc}")
    module.exit_json(changed=False, model=model)


if __name__ == "__main__":
    main()
