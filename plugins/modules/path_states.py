"""Ansible module: read the type, mode, owner, group and checksum of several paths in one call."""

from __future__ import annotations

DOCUMENTATION = r"""
module: path_states
short_description: Read what several paths on a host look like now, in one module call (read-only)
description:
  - Returns, for every path of O(paths), whether it exists, its type (file, directory, other), mode, owner,
    group and, for a regular file when O(checksum) is set, its sha1 (the checksum the copy and template
    modules compare).
  - Symbolic links are followed, as the file, copy and template modules follow them.
  - With the llmdeploy.llm.path_needs_change filter, a role's file, copy and template tasks skip themselves
    when the path is already as they would leave it, and an unchanged run costs one remote call for all.
options:
  paths:
    type: list
    elements: str
    required: true
    description: Absolute paths to read; a relative one is reported as not existing, with C(error), so the
      caller's own checks can name the variable it came from.
  checksum: {type: bool, default: true, description: Read the sha1 of regular files}
  secret_paths:
    type: list
    elements: str
    default: []
    description:
      - Files that hold secrets (tokens, API keys). Their content is returned only as C(hmac), an HMAC-SHA256
        keyed with O(secret_key), so the result (shown with -v) lets no one test a guess of the secret.
  secret_key:
    type: str
    default: ""
    description: The key for O(secret_paths); a random value the caller keeps out of its logs (no_log).
  users:
    type: list
    elements: str
    default: []
    description: Accounts to read as well (the owners of those paths), returned in C(users) when they exist.
  groups:
    type: list
    elements: str
    default: []
    description: Groups to read as well, returned in C(groups) when they exist.
author: llmdeploy maintainers (@llmdeploy)
"""

EXAMPLES = r"""
- name: Read the service's files
  llmdeploy.llm.path_states:
    paths: [/etc/vllm, /etc/vllm/vllm.env, /etc/systemd/system/vllm.service]
  register: service_paths

- name: Render the unit unless it is already so
  ansible.builtin.template:
    src: vllm.service.j2
    dest: /etc/systemd/system/vllm.service
    mode: "0644"
  when: >-
    service_paths.paths | llmdeploy.llm.path_needs_change('/etc/systemd/system/vllm.service', mode='0644',
    content=lookup('ansible.builtin.template', 'vllm.service.j2'))
"""

RETURN = r"""
paths:
  description: Path to exists, type, islink, link_target, mode (four octal digits), owner, group, sha1, hmac.
  returned: always
  type: dict
users:
  description: User name to uid, group (primary group's name), home, shell and comment; absent users left out.
  returned: always
  type: dict
groups:
  description: Group name to gid; absent groups left out.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmdeploy.llm.plugins.module_utils.path_states import accounts, path_states


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "paths": {"type": "list", "elements": "str", "required": True},
            "checksum": {"type": "bool", "default": True},
            "secret_paths": {"type": "list", "elements": "str", "default": [], "no_log": False},
            "secret_key": {"type": "str", "default": "", "no_log": True},
            "users": {"type": "list", "elements": "str", "default": []},
            "groups": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    if p["secret_paths"] and len(p["secret_key"]) < 16:
        module.fail_json(msg="path_states: secret_paths need a secret_key of at least 16 characters")
    module.exit_json(
        changed=False,
        paths=path_states(p["paths"], p["checksum"], p["secret_paths"], p["secret_key"]),
        **accounts(p["users"], p["groups"]),
    )


if __name__ == "__main__":
    main()
