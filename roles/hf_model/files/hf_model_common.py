"""Shared pieces of the hf_model helper scripts (run on the target with the venv that has huggingface_hub).

Request: a JSON object on stdin (no secrets; the token file is named by HF_TOKEN_PATH in the environment).
State of a model directory lives in ``<local_dir>/.hf_model/``: ``complete.json`` (the completion marker),
``progress.json`` (read by the role's polling loop) and ``verified.json`` (sha256 already checked).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))

import hf_files  # copied beside this script by the role
import httpx2
from huggingface_hub import HfApi
from huggingface_hub.errors import HfHubHTTPError, RevisionNotFoundError
from huggingface_hub.utils import close_session, filter_repo_objects

STATE_DIR = ".hf_model"
MARKER = "complete.json"
PROGRESS = "progress.json"
VERIFIED = "verified.json"
HEAD_BYTES = 64


class Refused(Exception):
    """A clear, expected refusal: printed as the task's message, exit status 2."""


def read_request() -> dict[str, Any]:
    req = json.load(sys.stdin)
    if not isinstance(req, dict) or "repo" not in req or "local_dir" not in req:
        raise Refused("the request on stdin needs at least 'repo' and 'local_dir'")
    return req


def state_path(local_dir: str | Path, name: str) -> Path:
    return Path(local_dir) / STATE_DIR / name


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def write_json_atomic(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)


def local_stats(local_dir: str | Path, paths: list[str]) -> dict[str, dict[str, int]]:
    """path -> {size, mtime_ns} for the given paths that exist under local_dir."""
    out = {}
    for p in paths:
        try:
            st = (Path(local_dir) / p).stat()
        except OSError:
            continue
        out[p] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
    return out


def free_bytes(path: str | Path) -> int:
    """Free bytes for an unprivileged writer on the filesystem that holds ``path`` (or its nearest parent)."""
    p = Path(path)
    while not p.exists():
        p = p.parent
    st = os.statvfs(p)
    return st.f_bavail * st.f_frsize


def resolve_listing(req: dict[str, Any]) -> dict[str, Any]:
    """Resolve the revision to a commit and list its files (path, size, sha256 when the hub has one)."""
    api = HfApi()
    repo, revision = req["repo"], req.get("revision") or "main"
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    try:
        info = api.model_info(repo, revision=revision)
    except RevisionNotFoundError as exc:
        raise Refused(f"hf_model_revision {revision!r} does not exist in {repo!r} on {endpoint}") from exc
    except HfHubHTTPError as exc:
        # Some hubs answer an unknown revision like an unknown repo (olah: 401, or 500 for an unknown sha):
        # ask for the repo alone to tell the two apart (on a new connection: olah drops it after a 500).
        close_session()
        try:
            refs = api.list_repo_refs(repo)
        except HfHubHTTPError:
            raise Refused(
                f"hf_model_repo {repo!r} was not found on {endpoint} (check the name; a private or gated "
                "repo needs hf_model_token)"
            ) from exc
        status = exc.response.status_code if exc.response is not None else "no answer"
        names = ", ".join(r.name for r in [*refs.branches, *refs.tags]) or "none"
        raise Refused(
            f"hf_model_revision {revision!r} does not exist in {repo!r} on {endpoint} (the hub answered "
            f"{status} for it while the repo itself exists); use a commit sha or one of its branches/tags: "
            f"{names}"
        ) from exc
    sha = info.sha
    entries = [e for e in api.list_repo_tree(repo, revision=sha, recursive=True) if hasattr(e, "size")]
    entries = list(
        filter_repo_objects(
            entries,
            allow_patterns=req.get("allow_patterns") or None,
            ignore_patterns=req.get("ignore_patterns") or None,
            key=lambda e: e.path,
        )
    )
    files = [
        {"path": e.path, "size": int(e.size), "sha256": e.lfs.sha256 if e.lfs else None}
        for e in sorted(entries, key=lambda e: e.path)
    ]
    if not files:
        raise Refused(
            f"no file of {repo!r} at {revision!r} matches hf_model_allow_patterns "
            f"{req.get('allow_patterns')!r} and hf_model_ignore_patterns {req.get('ignore_patterns')!r}"
        )
    return {"repo": repo, "requested_revision": revision, "sha": sha, "files": files}


def run_main(main: Any) -> None:
    try:
        result = main()
    except httpx2.TransportError as exc:
        endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
        print(
            json.dumps(
                {"failed": True, "msg": f"cannot reach the hub at {endpoint} (hf_model_endpoint): {exc}"}
            )
        )
        sys.exit(2)
    except Refused as exc:
        print(json.dumps({"failed": True, "msg": str(exc)}))
        sys.exit(2)
    print(json.dumps(result))


__all__ = ["HEAD_BYTES", "Refused", "hf_files"]
