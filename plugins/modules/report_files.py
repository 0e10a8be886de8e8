"""Ansible module: write a report's files into one directory in a single call (only those that differ)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: report_files
short_description: Write several text files into a directory at once, each only when its content differs
description:
  - Creates O(dir) (and its parents) when missing, then writes every file of O(files) whose content differs,
    each atomically (a temporary file renamed over it). One module call, where a copy loop costs two module
    runs per file; meant for reports the roles write on the controller (delegate_to localhost).
  - Check mode reports what would change and writes nothing.
options:
  dir: {type: path, required: true, description: The directory the files go into}
  files: {type: dict, required: true, description: File name (no slash) to its text content}
  mode: {type: str, default: "0644", description: Mode of the written files (the directory gets 0755)}
author: llmdeploy maintainers (@llmdeploy)
"""

EXAMPLES = r"""
- name: Write report.json and report.md
  llmdeploy.llm.report_files:
    dir: reports/serve_verify/host1
    files:
      report.json: "{{ report | to_nice_json }}\n"
      report.md: "{{ lines | join('\n') }}\n"
  delegate_to: localhost
"""

RETURN = r"""
written:
  description: The files that were (or, in check mode, would be) written.
  returned: always
  type: list
  elements: str
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule


def write_files(directory: str, files: dict[str, str], mode: int, check: bool) -> list[str]:
    """Write each differing file; return the names written (or that would be)."""
    written = []
    for name, content in sorted(files.items()):
        path = os.path.join(directory, name)
        data = str(content).encode("utf-8")
        try:
            with open(path, "rb") as handle:
                if handle.read() == data:
                    continue
        except OSError:
            pass
        written.append(name)
        if check:
            continue
        os.makedirs(directory, mode=0o755, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    return written


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "dir": {"type": "path", "required": True},
            "files": {"type": "dict", "required": True},
            "mode": {"type": "str", "default": "0644"},
        },
        supports_check_mode=True,
    )
    p = module.params
    bad = [name for name in p["files"] if not name or "/" in name or name in (".", "..")]
    if bad:
        module.fail_json(msg=f"report_files: file names must be plain names without a slash, got {bad}")
    try:
        mode = int(p["mode"], 8)
    except ValueError:
        module.fail_json(msg=f"report_files: mode must be octal like 0644, got {p['mode']!r}")
    try:
        written = write_files(p["dir"], p["files"], mode, module.check_mode)
    except OSError as exc:
        module.fail_json(msg=f"report_files: cannot write into {p['dir']}: {exc}")
    module.exit_json(changed=bool(written), written=written)


if __name__ == "__main__":
    main()
