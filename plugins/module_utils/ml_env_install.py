"""Command lines and input checks for the ml_env role's installers (uv or pip).

The role runs these argv lists with ansible.builtin.command (no shell), so quoting never matters.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

INSTALLERS = ("uv", "pip")
_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?(?:\[[A-Za-z0-9._,\s-]+\])?"
_PINNED_RE = re.compile(rf"^{_NAME}\s*===?\s*[A-Za-z0-9.+!_-]+\s*(?:;.*)?$")
_URL_RE = re.compile(rf"^{_NAME}\s*@\s*\S+\s*(?:;.*)?$")
_SOURCE_KEYS = {"index_url", "extra_index_urls", "find_links", "wheelhouse", "cache_dir", "extra_args"}


def ml_env_unpinned(specs: Any) -> list[str]:
    """Specs that are neither 'name==version' nor 'name @ url' (a direct reference is one exact file)."""
    if isinstance(specs, str) or not isinstance(specs, Iterable):
        raise AnsibleFilterError(f"ml_env_unpinned: expected a list of requirement specs, got {specs!r}")
    return [str(s) for s in specs if not (_PINNED_RE.match(str(s).strip()) or _URL_RE.match(str(s).strip()))]


_WHEEL_RE = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._]*)-(?P<version>[A-Za-z0-9.+!_]+)(?:-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl$"
)


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def ml_env_wheel_pins(filenames: Any, keep: Any = ()) -> list[str]:
    """name==version for every wheel file name (one per project, sorted), leaving out projects named in
    ``keep`` (requirement specs the package set already pins). A name that is not a wheel, or two wheels of
    one project, is an error: an exact install must know which file it takes."""
    name = "ml_env_wheel_pins"
    if isinstance(filenames, str) or not isinstance(filenames, Iterable):
        raise AnsibleFilterError(f"{name}: expected a list of wheel file names, got {filenames!r}")
    skip = {_canonical(re.split(r"[\s=<>!~;@\[]", str(spec).strip(), maxsplit=1)[0]) for spec in keep or ()}
    pins: dict[str, str] = {}
    for raw in filenames:
        base = str(raw).rsplit("/", 1)[-1]
        match = _WHEEL_RE.match(base)
        if not match:
            raise AnsibleFilterError(
                f"{name}: {base!r} is not a wheel file name (name-version-py-abi-platform.whl)"
            )
        project, version = _canonical(match["name"]), match["version"]
        if project in pins and pins[project] != version:
            raise AnsibleFilterError(
                f"{name}: two wheels of {project} ({pins[project]} and {version}); keep one in the wheelhouse"
            )
        pins[project] = version
    return [f"{p}=={v}" for p, v in sorted(pins.items()) if p not in skip]


def _installer(name: str, installer: Any) -> str:
    if installer not in INSTALLERS:
        raise AnsibleFilterError(f"{name}: installer must be one of {INSTALLERS}, got {installer!r}")
    return str(installer)


def _list(name: str, key: str, value: Any) -> list[str]:
    if value in (None, ""):
        return []
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise AnsibleFilterError(f"{name}: sources.{key} must be a list, got {value!r}")
    return [str(v) for v in value if str(v)]


def _source_args(name: str, sources: Any, tool_args: bool = True) -> list[str]:
    """Where packages come from; tool_args adds the cache dir and raw extra args (installer-specific)."""
    if not isinstance(sources, Mapping):
        raise AnsibleFilterError(f"{name}: sources must be a dict, got {sources!r}")
    unknown = set(sources) - _SOURCE_KEYS
    if unknown:
        known = sorted(_SOURCE_KEYS)
        raise AnsibleFilterError(f"{name}: unknown sources keys {sorted(unknown)}; known: {known}")
    args: list[str] = []
    wheelhouse = str(sources.get("wheelhouse") or "")
    if wheelhouse:
        args += ["--no-index", "--find-links", wheelhouse]
    else:
        if sources.get("index_url"):
            args += ["--index-url", str(sources["index_url"])]
        for url in _list(name, "extra_index_urls", sources.get("extra_index_urls")):
            args += ["--extra-index-url", url]
    for path in _list(name, "find_links", sources.get("find_links")):
        args += ["--find-links", path]
    if not tool_args:
        return args
    if sources.get("cache_dir"):
        args += ["--cache-dir", str(sources["cache_dir"])]
    return args + _list(name, "extra_args", sources.get("extra_args"))


def ml_env_venv_argv(
    installer: Any, uv: str, interpreter: str, path: str, base_pip: bool = False
) -> list[str]:
    """uv creates the venv itself (no python3-venv needed); pip needs the interpreter's venv module. With
    ``base_pip`` the venv gets no pip of its own: a base environment's pip, seen through the .pth file,
    installs into it (and the interpreter needs no ensurepip, which Debian and Ubuntu ship separately)."""
    if _installer("ml_env_venv_argv", installer) == "uv":
        return [uv, "venv", "--quiet", "--python", interpreter, path]
    return [interpreter, "-m", "venv", *(["--without-pip"] if base_pip else []), path]


def ml_env_install_argv(  # noqa: PLR0917 - Jinja passes filter arguments by position
    installer: Any, uv: str, python: str, requirements: str, constraints: str, sources: Any
) -> list[str]:
    """Install a requirements file (and a constraints file when given) into the venv of ``python``."""
    name = "ml_env_install_argv"
    if _installer(name, installer) == "uv":
        argv = [uv, "pip", "install", "--python", python]
    else:
        argv = [python, "-m", "pip", "install", "--disable-pip-version-check"]
    argv += ["--requirement", requirements]
    if constraints:
        argv += ["--constraint", constraints]
    return argv + _source_args(name, sources)


def ml_env_uninstall_argv(installer: Any, uv: str, python: str, packages: Any) -> list[str]:
    name = "ml_env_uninstall_argv"
    pkgs = _list(name, "packages", packages)
    if not pkgs:
        raise AnsibleFilterError(f"{name}: no packages given")
    if _installer(name, installer) == "uv":
        return [uv, "pip", "uninstall", "--python", python, *pkgs]
    return [python, "-m", "pip", "uninstall", "--yes", "--disable-pip-version-check", *pkgs]


def ml_env_uv_bootstrap_argv(interpreter: str, target: str, uv_version: str, sources: Any) -> list[str]:
    """Install uv with pip. With a target, pip --target puts uv's binary in <target>/bin and needs no venv
    module (and no PEP 668 override); without one, ``interpreter`` is a venv's python."""
    return [
        interpreter,
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--no-deps",
        *(["--target", target] if target else []),
        f"uv=={uv_version}",
        *_source_args("ml_env_uv_bootstrap_argv", sources, tool_args=False),
    ]
