# Copyright: the llmdeploy.llm authors. Apache-2.0.
"""Connection plugin for local podman containers (the demo host, the molecule scenarios).

containers.podman's connection runs five ``podman exec`` calls per module (home directory, temporary
directory, chmod, the module, cleanup) because it does not pass a module on stdin. Each costs about 0.16 s
on a 2-core machine, so a deploy of ~220 tasks spent most of its time starting processes. This plugin
sends the module on ``podman exec -i``'s stdin (pipelining, as ssh does): one process per module. Files
still travel through the container's mounted root filesystem (rootful podman) or ``podman cp``.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: podman_exec
short_description: Run tasks in a local podman container, one podman exec per module
author: llmdeploy maintainers (@llmdeploy)
version_added: "0.2.0"
description:
  - Commands run with C(podman exec); modules are piped to the container's Python on stdin.
  - Files are copied through the container's mounted root filesystem when C(podman mount) works, else
    with C(podman cp).
options:
  remote_addr:
    description: Name or ID of the container.
    default: inventory_hostname
    vars:
      - name: inventory_hostname
      - name: ansible_host
  remote_user:
    description: User the commands run as inside the container (default the image's).
    vars:
      - name: ansible_user
  pipelining:
    description: Send modules on stdin instead of copying them into the container first.
    type: boolean
    default: true
    vars:
      - name: ansible_pipelining
  podman_executable:
    description: The podman command.
    default: podman
    vars:
      - name: ansible_podman_executable
"""

import os
import shlex
import shutil
import subprocess

from ansible.errors import AnsibleConnectionFailure, AnsibleError
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.plugins.connection import ConnectionBase, ensure_connect
from ansible.utils.display import Display

display = Display()


class Connection(ConnectionBase):
    """podman exec per command; modules on stdin."""

    transport = "podman_exec"
    has_pipelining = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._root: bytes | None = None

    def _run(self, argv: list, in_data: bytes | None = None) -> tuple[int, bytes, bytes]:
        cmd = [to_bytes(self.get_option("podman_executable"))] + [to_bytes(a) for a in argv]
        display.vvv(f"RUN {cmd!r}", host=self.get_option("remote_addr"))
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = proc.communicate(in_data)
        return proc.returncode, out, err

    def _connect(self):
        super()._connect()
        if not self._connected:
            rc, out, _err = self._run(["mount", self.get_option("remote_addr")])
            root = out.strip()
            # Rootless podman cannot mount; an empty directory means the mount did not happen.
            self._root = root if rc == 0 and root and os.listdir(root) else None
            self._connected = True
        return self

    @ensure_connect
    def exec_command(self, cmd, in_data=None, sudoable=False):
        super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        argv = ["exec"]
        if in_data is not None:
            argv.append("-i")
        user = self.get_option("remote_user")
        if user:
            argv += ["--user", user]
        argv.append(self.get_option("remote_addr"))
        argv += shlex.split(to_text(cmd, errors="surrogate_or_strict"))
        return self._run(argv, in_data)

    def _in_root(self, path: str) -> bytes:
        return self._root + to_bytes(path, errors="surrogate_or_strict")

    @ensure_connect
    def put_file(self, in_path, out_path):
        super().put_file(in_path, out_path)
        display.vvv(f"PUT {in_path} TO {out_path}", host=self.get_option("remote_addr"))
        if self._root is not None and not self.get_option("remote_user"):
            shutil.copyfile(to_bytes(in_path), self._in_root(out_path))
            return
        rc, _out, err = self._run(["cp", in_path, f"{self.get_option('remote_addr')}:{out_path}"])
        if rc != 0:
            raise AnsibleError(f"podman_exec: copying {in_path} to {out_path} failed: {to_text(err)}")

    @ensure_connect
    def fetch_file(self, in_path, out_path):
        super().fetch_file(in_path, out_path)
        display.vvv(f"FETCH {in_path} TO {out_path}", host=self.get_option("remote_addr"))
        if self._root is not None:
            shutil.copyfile(self._in_root(in_path), to_bytes(out_path))
            return
        rc, _out, err = self._run(["cp", f"{self.get_option('remote_addr')}:{in_path}", out_path])
        if rc != 0:
            raise AnsibleConnectionFailure(f"podman_exec: fetching {in_path} failed: {to_text(err)}")

    def close(self):
        super().close()
        self._connected = False
