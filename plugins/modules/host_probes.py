"""Ansible module: run several read-only commands on a host in one module call."""

from __future__ import annotations

DOCUMENTATION = r"""
module: host_probes
short_description: Run read-only probe commands on a host and return each one's rc, stdout and stderr
description:
  - Runs every command of O(probes) named in O(names), one after another, in a single module call, so a role
    that reads its host through many small commands pays for one remote round trip instead of one per command.
  - Never changes anything and never fails on a probe's exit status; a command that cannot be started reports
    rc 127, one that runs past O(timeout) rc 124. The caller parses the outputs.
  - The results have the shape of a looped M(ansible.builtin.command) (C(item), C(rc), C(stdout), C(stderr)),
    trailing newlines removed as that module does.
options:
  probes:
    type: dict
    required: true
    description: Probe name to argv (a list of strings; no shell unless the argv starts one).
  names:
    type: list
    elements: str
    required: true
    description: The probes to run, in this order; each must be a key of O(probes).
  timeout:
    type: float
    default: 120
    description: Seconds one probe may run before it is stopped and reported with rc 124.
author: llmdeploy maintainers (@llmdeploy)
"""

EXAMPLES = r"""
- name: Read memory and disk in one call
  llmdeploy.llm.host_probes:
    probes:
      meminfo: [cat, /proc/meminfo]
      df: [df, -P, -B1, /var/lib]
    names: [meminfo, df]
  register: probes
"""

RETURN = r"""
results:
  description: One entry per name of O(names), in order, each with item (the name), cmd, rc, stdout, stderr.
  returned: always
  type: list
  elements: dict
"""

import subprocess

from ansible.module_utils.basic import AnsibleModule


def run_probe(name: str, argv: list[str], timeout: float) -> dict:
    """Run one probe; the result never raises, whatever the command does."""
    result = {"item": name, "cmd": argv, "rc": 0, "stdout": "", "stderr": ""}
    try:
        done = subprocess.run(
            argv, capture_output=True, timeout=timeout, check=False, stdin=subprocess.DEVNULL
        )
    except FileNotFoundError as exc:
        result.update(rc=127, stderr=f"No such file or directory: {exc.filename or argv[0]}")
        return result
    except PermissionError as exc:
        result.update(rc=126, stderr=f"Permission denied: {exc.filename or argv[0]}")
        return result
    except subprocess.TimeoutExpired:
        result.update(rc=124, stderr=f"{argv[0]} timed out after {timeout:g} s")
        return result
    result.update(
        rc=done.returncode,
        stdout=done.stdout.decode("utf-8", "replace").rstrip("\r\n"),
        stderr=done.stderr.decode("utf-8", "replace").rstrip("\r\n"),
    )
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "probes": {"type": "dict", "required": True},
            "names": {"type": "list", "elements": "str", "required": True},
            "timeout": {"type": "float", "default": 120},
        },
        supports_check_mode=True,
    )
    probes, names = module.params["probes"], module.params["names"]
    unknown = [n for n in names if n not in probes]
    if unknown:
        module.fail_json(msg=f"host_probes: names {unknown} are not keys of probes ({sorted(probes)})")
    bad = [n for n in names if not isinstance(probes[n], list) or not probes[n]]
    if bad:
        module.fail_json(msg=f"host_probes: probes {bad} must each be a non-empty list (an argv)")
    timeout = module.params["timeout"]
    module.exit_json(
        changed=False, results=[run_probe(n, [str(a) for a in probes[n]], timeout) for n in names]
    )


if __name__ == "__main__":
    main()
