"""Unit tests for plugins/module_utils/ml_env_install.py (installer argv, pin checks)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

_PATH = Path(__file__).resolve().parents[2] / "plugins" / "module_utils" / "ml_env_install.py"
_SPEC = importlib.util.spec_from_file_location("ml_env_install_under_test", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
mi = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(mi)

NO_SOURCES: dict = {
    "index_url": "",
    "extra_index_urls": [],
    "find_links": [],
    "wheelhouse": "",
    "cache_dir": "",
}


def test_pinned_and_unpinned_specs() -> None:
    specs = [
        "six==1.17.0",
        "vllm[audio]==0.22.0",
        "torch==2.13.0+cpu",
        "flash-attn @ https://example.org/flash_attn-2.8.3-cp311-cp311-linux_x86_64.whl",
        "numpy==2.4.6; python_version >= '3.11'",
        "six",
        "six>=1.16",
        "six==1.*",
        "six~=1.16.0",
        "",
    ]
    assert mi.ml_env_unpinned(specs) == ["six", "six>=1.16", "six==1.*", "six~=1.16.0", ""]


def test_unpinned_needs_a_list() -> None:
    with pytest.raises(AnsibleFilterError, match="ml_env_unpinned"):
        mi.ml_env_unpinned("six==1.17.0")


def test_uv_install_with_every_source() -> None:
    sources = {
        "index_url": "https://mirror.example/simple",
        "extra_index_urls": ["https://download.pytorch.org/whl/cpu"],
        "find_links": ["/opt/wheels"],
        "wheelhouse": "",
        "cache_dir": "/var/cache/uv",
        "extra_args": ["--link-mode", "copy"],
    }
    argv = mi.ml_env_install_argv("uv", "/u/uv", "/e/bin/python", "/e/req.txt", "/e/con.txt", sources)
    assert argv == [
        "/u/uv", "pip", "install", "--python", "/e/bin/python",
        "--requirement", "/e/req.txt", "--constraint", "/e/con.txt",
        "--index-url", "https://mirror.example/simple",
        "--extra-index-url", "https://download.pytorch.org/whl/cpu",
        "--find-links", "/opt/wheels",
        "--cache-dir", "/var/cache/uv",
        "--link-mode", "copy",
    ]  # fmt: skip


def test_wheelhouse_means_no_index_and_drops_index_urls() -> None:
    sources = {
        **NO_SOURCES,
        "wheelhouse": "/srv/wh",
        "index_url": "https://x/simple",
        "find_links": ["/opt/w"],
    }
    argv = mi.ml_env_install_argv("pip", "", "/e/bin/python", "/e/req.txt", "", sources)
    assert argv == [
        "/e/bin/python", "-m", "pip", "install", "--disable-pip-version-check",
        "--requirement", "/e/req.txt",
        "--no-index", "--find-links", "/srv/wh", "--find-links", "/opt/w",
    ]  # fmt: skip
    assert "https://x/simple" not in argv


def test_venv_argv() -> None:
    assert mi.ml_env_venv_argv("uv", "/u/uv", "python3.11", "/r/a") == [
        "/u/uv", "venv", "--quiet", "--python", "python3.11", "/r/a",
    ]  # fmt: skip
    assert mi.ml_env_venv_argv("pip", "/u/uv", "python3.11", "/r/a") == ["python3.11", "-m", "venv", "/r/a"]


def test_uninstall_argv() -> None:
    pkgs = ["torchvision", "torchaudio"]
    assert mi.ml_env_uninstall_argv("uv", "/u/uv", "/e/py", pkgs) == [
        "/u/uv", "pip", "uninstall", "--python", "/e/py", "torchvision", "torchaudio",
    ]  # fmt: skip
    assert mi.ml_env_uninstall_argv("pip", "", "/e/py", pkgs)[:5] == [
        "/e/py",
        "-m",
        "pip",
        "uninstall",
        "--yes",
    ]
    with pytest.raises(AnsibleFilterError, match="no packages"):
        mi.ml_env_uninstall_argv("uv", "/u/uv", "/e/py", [])


def test_uv_bootstrap_keeps_pip_sources_but_not_uv_only_args() -> None:
    sources = {
        **NO_SOURCES,
        "wheelhouse": "/srv/wh",
        "cache_dir": "/c",
        "extra_args": ["--link-mode", "copy"],
    }
    argv = mi.ml_env_uv_bootstrap_argv("python3", "/r/.tools/uv-0.13.9", "0.13.9", sources)
    assert argv[:3] == ["python3", "-m", "pip"]
    assert "uv==0.13.9" in argv
    assert argv[argv.index("--target") + 1] == "/r/.tools/uv-0.13.9"
    assert "--no-index" in argv
    assert "--link-mode" not in argv and "--cache-dir" not in argv


@pytest.mark.parametrize(
    ("installer", "sources", "match"),
    [
        ("conda", NO_SOURCES, "installer must be one of"),
        ("uv", {**NO_SOURCES, "mirror": "x"}, "unknown sources keys"),
        ("uv", {**NO_SOURCES, "find_links": "/opt/wheels"}, "find_links must be a list"),
        ("uv", ["/opt/wheels"], "sources must be a dict"),
    ],
)
def test_bad_arguments(installer: str, sources: object, match: str) -> None:
    with pytest.raises(AnsibleFilterError, match=match):
        mi.ml_env_install_argv(installer, "/u/uv", "/e/py", "/e/r", "", sources)


def test_uv_bootstrap_into_a_venv_has_no_target() -> None:
    argv = mi.ml_env_uv_bootstrap_argv("/r/.tools/uv-0.13.9/bin/python", "", "0.13.9", NO_SOURCES)
    assert argv == [
        "/r/.tools/uv-0.13.9/bin/python", "-m", "pip", "install", "--disable-pip-version-check", "--no-deps",
        "uv==0.13.9",
    ]  # fmt: skip


def test_wheel_pins_one_per_project_minus_the_pinned_ones() -> None:
    names = [
        "/w/vllm-0.22.0-cp38-abi3-manylinux_2_28_x86_64.whl",
        "/w/Pydantic_Core-2.50.5-cp312-cp312-manylinux2014_x86_64.whl",
        "/w/partial_json_parser-0.2.1.1.post7-py3-none-any.whl",
        "/w/fastsafetensors-0.5.0-1-cp312-cp312-manylinux_2_28_x86_64.whl",
    ]
    assert mi.ml_env_wheel_pins(names, ["vllm==0.22.0"]) == [
        "fastsafetensors==0.5.0",
        "partial-json-parser==0.2.1.1.post7",
        "pydantic-core==2.50.5",
    ]


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (["six-1.16.0-py2.py3-none-any.whl", "six-1.17.0-py2.py3-none-any.whl"], "two wheels of six"),
        (["six-1.17.0.tar.gz"], "is not a wheel file name"),
        ("six-1.17.0-py2.py3-none-any.whl", "expected a list"),
    ],
)
def test_wheel_pins_refuse_ambiguous_or_foreign_files(names: object, message: str) -> None:
    with pytest.raises(AnsibleFilterError, match=message):
        mi.ml_env_wheel_pins(names)
