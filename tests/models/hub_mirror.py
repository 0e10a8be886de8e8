"""Git repositories in the layout olah's offline mirror serves (``<mirror>/models/<org>/<name>``).

A blob at or above ``lfs_min`` bytes is stored as a Git-LFS pointer with its object under ``.git/lfs/objects``
(no git-lfs binary needed), so the mirror reports size and sha256 like the real hub does. Used by the
integration tests' hub fixture and by publish_tiny_chat.py (molecule, `make demo`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

LFS_MIN_BYTES = 1024


def git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "test",
        "GIT_AUTHOR_EMAIL": "test@example.invalid",
        "GIT_COMMITTER_NAME": "test",
        "GIT_COMMITTER_EMAIL": "test@example.invalid",
    }
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


def make_repo(
    mirror: Path,
    repo_id: str,
    files: Mapping[str, bytes | Path],
    lfs_min: int = LFS_MIN_BYTES,
    *,
    move: bool = True,
) -> str:
    """Create (or add a commit to) ``repo_id`` under ``mirror`` with ``files``; return the commit sha.

    Content given as a Path is moved (``move``) or copied into the LFS store."""
    path = mirror / "models" / repo_id
    if not (path / ".git").exists():
        path.mkdir(parents=True)
        git(path, "init", "-q", "-b", "main")
    for name, content in files.items():
        dest = path / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        size = content.stat().st_size if isinstance(content, Path) else len(content)
        if size < lfs_min:
            data = content.read_bytes() if isinstance(content, Path) else content
            dest.write_bytes(data)
            continue
        digest = hashlib.sha256()
        if isinstance(content, Path):
            with content.open("rb") as fh:
                while chunk := fh.read(1 << 22):
                    digest.update(chunk)
        else:
            digest.update(content)
        oid = digest.hexdigest()
        obj = path / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4] / oid
        obj.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            (shutil.move if move else shutil.copyfile)(content, obj)
        else:
            obj.write_bytes(content)
        dest.write_text(f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {size}\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "--allow-empty", "-m", f"add {len(files)} files")
    return git(path, "rev-parse", "HEAD")
