"""Unit tests for filter_plugins/flash_attn_wheel.py (flash-attn wheel choice and build settings)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import _collection
import pytest
from ansible.errors import AnsibleFilterError

_PATH = Path(__file__).resolve().parents[2] / "plugins" / "module_utils" / "flash_attn_wheel.py"
_SPEC = importlib.util.spec_from_file_location("flash_attn_wheel_under_test", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
fa = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(fa)

# What torch reports on the lent GPU machine (verified-recipes §3: torch 2.11.0+cu130, Python 3.12).
H200_TORCH = {
    "torch": "2.11.0+cu130",
    "cuda": "13.0",
    "cxx11_abi": True,
    "python_tag": "cp312",
    "platform": "linux_x86_64",
}


def test_wheel_name_and_url_follow_the_release_naming() -> None:
    info = {**H200_TORCH, "torch": "2.7.1+cu126", "cuda": "12.6", "python_tag": "cp311"}
    wheel = fa.ml_env_flash_attn_wheel(info, "2.8.1")
    assert wheel["filename"] == "flash_attn-2.8.1+cu12torch2.7cxx11abiTRUE-cp311-cp311-linux_x86_64.whl"
    assert wheel["prebuilt_url"] == (
        "https://github.com/Dao-AILab/flash-attention/releases/download/v2.8.1/"
        "flash_attn-2.8.1+cu12torch2.7cxx11abiTRUE-cp311-cp311-linux_x86_64.whl"
    )


def test_cache_keys_separate_every_input() -> None:
    base = fa.ml_env_flash_attn_wheel(H200_TORCH, "2.8.3", "9.0")
    variants = [
        fa.ml_env_flash_attn_wheel({**H200_TORCH, "cxx11_abi": False}, "2.8.3", "9.0"),
        fa.ml_env_flash_attn_wheel({**H200_TORCH, "cuda": "12.8"}, "2.8.3", "9.0"),
        fa.ml_env_flash_attn_wheel({**H200_TORCH, "python_tag": "cp311"}, "2.8.3", "9.0"),
        fa.ml_env_flash_attn_wheel({**H200_TORCH, "torch": "2.10.0+cu130"}, "2.8.3", "9.0"),
        fa.ml_env_flash_attn_wheel(H200_TORCH, "2.8.2", "9.0"),
    ]
    assert len({base["built_key"], *(v["built_key"] for v in variants)}) == 6
    assert len({base["prebuilt_key"], *(v["prebuilt_key"] for v in variants)}) == 6
    other_arch = fa.ml_env_flash_attn_wheel(H200_TORCH, "2.8.3", "9.0;12.0")
    assert other_arch["built_key"] != base["built_key"]
    assert other_arch["prebuilt_key"] == base["prebuilt_key"]
    assert "/" not in other_arch["built_key"] and ";" not in other_arch["built_key"]


def test_abi_spellings() -> None:
    for value, tag in ((False, "FALSE"), ("1", "TRUE"), ("false", "FALSE"), (True, "TRUE")):
        name = fa.ml_env_flash_attn_wheel({**H200_TORCH, "cxx11_abi": value}, "2.8.3")["filename"]
        assert f"cxx11abi{tag}-" in name


def test_old_releases_get_no_prebuilt_url() -> None:
    wheel = fa.ml_env_flash_attn_wheel(H200_TORCH, "2.5.9")
    assert wheel["prebuilt_url"] is None
    assert wheel["built_key"].startswith("flash_attn-2.5.9-")


def test_cpu_torch_is_refused_with_the_fix() -> None:
    with pytest.raises(
        AnsibleFilterError, match=r"2\.13\.0\+cpu is not a CUDA build.*ml_env_flash_attn: false"
    ):
        fa.ml_env_flash_attn_wheel({**H200_TORCH, "torch": "2.13.0+cpu", "cuda": None}, "2.8.3")


@pytest.mark.parametrize(
    "bad",
    [{"torch": "2.11.0"}, {**H200_TORCH, "python_tag": "py3"}, {**H200_TORCH, "cxx11_abi": "maybe"}, "torch"],
)
def test_bad_torch_info(bad: object) -> None:
    with pytest.raises(AnsibleFilterError, match="ml_env_flash_attn_wheel"):
        fa.ml_env_flash_attn_wheel(bad, "2.8.3")


@pytest.mark.parametrize(
    ("caps", "arch", "archs"),
    [
        (["9.0", "12.0"], "9.0;12.0", "90;120"),
        (["12.0", "9.0", "9.0"], "9.0;12.0", "90;120"),
        ([9.0, 8.6], "8.6;9.0", "86;90"),
        (["sm_90", "sm_100"], "9.0;10.0", "90;100"),
        ("8.0;9.0", "8.0;9.0", "80;90"),
        ([(12, 0)], "12.0", "120"),
    ],
)
def test_arch_lists(caps: object, arch: str, archs: str) -> None:
    assert fa.ml_env_cuda_arch_list(caps) == arch
    assert fa.ml_env_flash_attn_archs(caps) == archs


@pytest.mark.parametrize("bad", [[], ["hopper"], ["9"], {"gpu0": "9.0"}])
def test_bad_capabilities_name_the_variable(bad: object) -> None:
    with pytest.raises(AnsibleFilterError, match="ml_env_cuda_arch_list"):
        fa.ml_env_cuda_arch_list(bad)


@pytest.mark.parametrize(
    ("mem_mb", "cpus", "threads", "jobs"),
    [
        (24 * 1024, 2, 4, 1),  # this machine: memory allows 0 -> at least one job
        (2048 * 1024, 128, 4, 32),  # 2 TB, 128 cores: CPU-bound (128 / 4)
        (256 * 1024, 128, 4, 10),  # 256 GB: 204.8 GB usable / 20 GB per job
        (256 * 1024, 128, 2, 20),  # fewer nvcc threads per job -> more jobs
        (64 * 1024, 16, 4, 2),
    ],
)
def test_max_jobs_from_ram_and_cpus(mem_mb: int, cpus: int, threads: int, jobs: int) -> None:
    assert fa.ml_env_flash_attn_max_jobs(mem_mb, cpus, threads) == jobs


def test_max_jobs_memory_never_overcommitted() -> None:
    for mem_gb in (16, 48, 96, 200, 880):
        jobs = fa.ml_env_flash_attn_max_jobs(mem_gb * 1024, 512)
        assert jobs == 1 or jobs * fa.DEFAULT_NVCC_THREADS * fa.GB_PER_NVCC_THREAD <= mem_gb * 0.8


@pytest.mark.parametrize("args", [("lots", 4), (0, 4), (1024, 0), (1024, 4, 0), (1024, 4, 4, 5, 1.0)])
def test_max_jobs_bad_numbers(args: tuple) -> None:
    with pytest.raises(AnsibleFilterError, match="ml_env_flash_attn_max_jobs"):
        fa.ml_env_flash_attn_max_jobs(*args)


def test_filter_names() -> None:
    assert set(_collection.filters("flash_attn_wheel")) == {
        "ml_env_flash_attn_wheel",
        "ml_env_cuda_arch_list",
        "ml_env_flash_attn_archs",
        "ml_env_flash_attn_max_jobs",
    }
