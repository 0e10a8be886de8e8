"""Shared integration fixtures: a real Hugging Face-protocol hub (olah) serving git repositories built here.

olah (offline mode, ``mirrors-path``) serves every git repository at ``<mirror>/models/<org>/<name>`` as the
model repo ``<org>/<name>``. A blob that is a Git-LFS pointer is served from ``.git/lfs/objects`` with its
size and sha256 in the tree API, like the real hub, so large files are stored that way here (no git-lfs
binary needed: the pointer and the object are written directly).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "models"))
from hub_mirror import LFS_MIN_BYTES, make_repo  # noqa: E402  (tests/models is put on sys.path above)
from hub_mirror import git as _git  # noqa: E402

VENV_BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Hub:
    """A running olah server and the mirror directory it serves."""

    endpoint: str
    mirror: Path
    log_path: Path
    proc: subprocess.Popen[bytes]
    repos: dict[str, Path] = field(default_factory=dict)

    def make_repo(self, repo_id: str, files: Mapping[str, bytes | Path], lfs_min: int = LFS_MIN_BYTES) -> str:
        """Create (or add a commit to) ``repo_id`` with ``files``; return the commit sha.

        Content given as a Path is moved into the LFS store (no copy of big files)."""
        sha = make_repo(self.mirror, repo_id, files, lfs_min)
        self.repos[repo_id] = self.mirror / "models" / repo_id
        return sha

    def lfs_object(self, repo_id: str, name: str) -> Path:
        """The LFS object behind ``name`` at the repo's HEAD (to corrupt or inspect it)."""
        pointer = _git(self.repos[repo_id], "show", f"HEAD:{name}")
        oid = pointer.split("oid sha256:")[1].split()[0]
        return self.repos[repo_id] / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4] / oid

    def requests(self) -> list[str]:
        """Request lines olah has logged so far (uvicorn access log)."""
        return [line for line in self.log_path.read_text(errors="replace").splitlines() if '"GET ' in line]

    def file_gets(self, repo_id: str) -> list[str]:
        """File downloads (``/resolve/``) of ``repo_id`` seen so far: one line each."""
        return [line for line in self.requests() if f"/{repo_id}/resolve/" in line]


def start_hub(base: Path) -> Hub:
    """Start olah on a free loopback port serving ``base/mirror`` (offline mode); wait until it answers."""
    mirror = base / "mirror"
    (mirror / "models").mkdir(parents=True, exist_ok=True)
    port = _free_port()
    config = base / "olah.toml"
    config.write_text(
        "[basic]\n"
        'host = "127.0.0.1"\n'
        f"port = {port}\n"
        f'repos-path = "{base / "repos"}"\n'
        f'mirrors-path = ["{mirror}"]\n'
        "[accessibility]\n"
        "offline = true\n"
    )
    log_path = base / "olah.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [str(VENV_BIN / "olah-cli"), "-c", str(config)],
            cwd=base,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"olah exited with {proc.returncode}: {log_path.read_text()[-2000:]}")
        try:
            if httpx.get(endpoint + "/api/models/none/none", timeout=2).status_code in (200, 401, 404):
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"olah did not answer in 60 s: {log_path.read_text()[-2000:]}")
        time.sleep(0.3)
    return Hub(endpoint=endpoint, mirror=mirror, log_path=log_path, proc=proc)


def stop_hub(hub: Hub) -> None:
    hub.proc.terminate()
    try:
        hub.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        hub.proc.kill()
        hub.proc.wait()


@pytest.fixture(scope="session")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    started = start_hub(tmp_path_factory.mktemp("olah"))
    try:
        yield started
    finally:
        stop_hub(started)


def run_playbook(
    playbook: Path,
    extra_vars: Mapping[str, object],
    env: Mapping[str, str] | None = None,
    timeout: int = 600,
    args: tuple[str, ...] = (),
) -> subprocess.CompletedProcess[str]:
    """ansible-playbook against localhost (connection local) with the project's ansible.cfg."""
    vars_file = playbook.parent / f".vars-{os.getpid()}-{time.monotonic_ns()}.json"
    vars_file.write_text(json.dumps(dict(extra_vars)))
    full_env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_NOCOLOR": "1",
        "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}",
        **(env or {}),
    }
    try:
        return subprocess.run(
            [str(VENV_BIN / "ansible-playbook"), str(playbook), "-e", f"@{vars_file}", *args],
            cwd=ROOT,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    finally:
        vars_file.unlink(missing_ok=True)


def sha256(path: Path) -> str:
    """A file's sha256, read in 4 MiB chunks (weights can be large)."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def recap(stdout: str) -> dict[str, int]:
    """The PLAY RECAP counters for localhost."""
    for line in stdout.splitlines():
        if line.startswith("localhost") and "ok=" in line:
            return {k: int(v) for k, v in (part.split("=") for part in line.split(":", 1)[1].split())}
    raise AssertionError(f"no PLAY RECAP in output:\n{stdout[-3000:]}")


def hf_model_role_vars(hub: Hub, tmp: Path, repo: str, revision: str, **extra: object) -> dict[str, object]:
    """The hf_model role's variables for a download of ``repo`` from the test hub into ``tmp``."""
    return {
        "hf_model_repo": repo,
        "hf_model_revision": revision,
        "hf_model_local_dir": str(tmp / "models" / repo.replace("/", "--")),
        "hf_model_endpoint": hub.endpoint,
        "hf_model_xet": False,
        "hf_model_python": sys.executable,
        "hf_model_helper_dir": str(tmp / "helpers"),
        "hf_model_disk_margin_bytes": 0,
        "hf_model_poll_interval_s": 1,
        "result_file": str(tmp / "result.json"),
        **extra,
    }
