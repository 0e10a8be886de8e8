"""What a set of paths on a host looks like now, and whether a file/copy/template task would change one.

The path_states module reads every path a role manages in one call; the path_needs_change filter lets each
task skip itself (no remote round trip) when the path already has the type, mode, owner, group and content
the task would give it. A task that is not skipped still does the change and reports it, so a wrong
prediction costs only the round trip it meant to save.
"""

from __future__ import annotations

import grp
import hashlib
import hmac
import os
import pwd
import stat
from typing import Any

_TYPES = {stat.S_ISREG: "file", stat.S_ISDIR: "directory"}


def _name(lookup: Any, ident: int) -> str:
    try:
        return lookup(ident)[0]
    except KeyError:
        return str(ident)


def sha1_of(path: str) -> str:
    digest = hashlib.sha1()  # the checksum the copy and template modules compare
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def keyed_digest(data: bytes, key: str) -> str:
    """HMAC-SHA256 of a secret file's content: comparable by whoever holds KEY, useless in a log without."""
    return hmac.new(key.encode("utf-8"), data, hashlib.sha256).hexdigest()


def path_state(path: str, checksum: bool = True, secret_key: str | None = None) -> dict[str, Any]:
    """exists, type (file, directory, other; a link is followed), islink, link_target, mode ("0644"), owner,
    group and, for a file, its sha1.

    With SECRET_KEY (a file holding secrets) its content is given as ``hmac``, keyed, instead of its sha1.
    """
    if not os.path.isabs(path):
        return {"exists": False, "error": "not an absolute path"}
    try:
        st = os.stat(path)
    except OSError:
        # A dangling link: nothing to follow, but the name is taken.
        return (
            {"exists": False, "islink": True, "link_target": os.readlink(path)}
            if os.path.islink(path)
            else {"exists": False}
        )
    kind = next((name for test, name in _TYPES.items() if test(st.st_mode)), "other")
    state = {
        "exists": True,
        "type": kind,
        "islink": os.path.islink(path),
        "link_target": os.readlink(path) if os.path.islink(path) else None,
        "mode": f"{stat.S_IMODE(st.st_mode):04o}",
        "owner": _name(pwd.getpwuid, st.st_uid),
        "group": _name(grp.getgrgid, st.st_gid),
    }
    if kind == "file" and secret_key:
        try:
            with open(path, "rb") as handle:
                state["hmac"] = keyed_digest(handle.read(), secret_key)
        except OSError:
            state["hmac"] = None
    elif kind == "file" and checksum:
        try:
            state["sha1"] = sha1_of(path)
        except OSError:
            state["sha1"] = None
    return state


def path_states(
    paths: list[str], checksum: bool = True, secret_paths: list[str] | None = None, secret_key: str = ""
) -> dict[str, dict[str, Any]]:
    secret = set(secret_paths or [])
    return {path: path_state(path, checksum, secret_key if path in secret else None) for path in paths}


def _octal(mode: Any) -> int | None:
    if isinstance(mode, int):
        return mode
    try:
        return int(str(mode), 8)
    except ValueError:
        return None


def accounts(users: list[str], groups: list[str]) -> dict[str, dict[str, Any]]:
    """The passwd entries of USERS (with their primary group's name) and the gids of GROUPS; absent: {}."""
    found_users: dict[str, Any] = {}
    for name in users:
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            continue
        found_users[name] = {
            "uid": pw.pw_uid,
            "group": _name(grp.getgrgid, pw.pw_gid),
            "home": pw.pw_dir,
            "shell": pw.pw_shell,
            "comment": pw.pw_gecos,
        }
    found_groups: dict[str, Any] = {}
    for name in groups:
        try:
            found_groups[name] = {"gid": grp.getgrnam(name).gr_gid}
        except KeyError:
            continue
    return {"users": found_users, "groups": found_groups}


def _err(message: str) -> ValueError:
    return ValueError(f"path_needs_change: {message}")


def path_needs_change(
    states: dict[str, Any],
    path: str,
    *,
    state: str = "file",
    mode: str | int | None = None,
    owner: str | None = None,
    group: str | None = None,
    content: str | None = None,
    sha1: str | None = None,
    secret_key: str | None = None,
    same_content_as: str | None = None,
) -> bool:
    """True unless STATES (from path_states) shows PATH already as asked: state, mode, owner, group, content.

    CONTENT is the text a copy or template task would write (its sha1 is compared); SHA1 a checksum known
    otherwise (another path's, for a copy of it). A path the probe did not read counts as needing a change.
    SECRET_KEY: the key the probe hashed this secret file with; CONTENT is then compared through it.
    SAME_CONTENT_AS: another probed path whose content PATH must have (a copy of it; sha1 or hmac alike).
    """
    if not isinstance(states, dict):
        raise _err(f"states must be the path_states module's result (a dict), got {type(states).__name__}")
    if state not in ("file", "directory"):
        raise _err(f"state must be file or directory (as the file module spells them), got {state!r}")
    found = states.get(path)
    if not isinstance(found, dict) or not found.get("exists") or found.get("type") != state:
        return True
    if mode is not None and _octal(mode) != _octal(found.get("mode")):
        return True
    if owner is not None and str(owner) != found.get("owner"):
        return True
    if group is not None and str(group) != found.get("group"):
        return True
    if same_content_as is not None:
        other = states.get(same_content_as)
        if not isinstance(other, dict) or not other.get("exists"):
            return True
        key = "hmac" if "hmac" in other else "sha1"
        return other.get(key) is None or other.get(key) != found.get(key)
    if content is not None and secret_key:
        return keyed_digest(str(content).encode("utf-8"), secret_key) != found.get("hmac")
    if content is not None:
        sha1 = hashlib.sha1(str(content).encode("utf-8")).hexdigest()
    return sha1 is not None and sha1 != found.get("sha1")
