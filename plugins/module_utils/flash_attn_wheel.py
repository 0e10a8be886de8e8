"""flash-attn build decisions for the ml_env role: prebuilt wheel name, CUDA arch list, build parallelism.

Facts behind the numbers:
- Prebuilt wheels are published on the GitHub releases of Dao-AILab/flash-attention as
  ``flash_attn-<ver>+cu<cuda major>torch<major.minor>cxx11abi<TRUE|FALSE>-<cpXY>-<cpXY>-<platform>.whl``
  (the naming of its setup.py since 2.6.0; older releases used cu118/cu122-style tags, which are not
  mapped here: those versions are built from source).
- Peak compiler memory is 3-5 GB per nvcc thread (Dao-AILab/flash-attention PR #2079, measured with
  torch 2.9 + CUDA 12.8; its setup.py budgets 5 GB x NVCC_THREADS per ninja job). Issue #2493 shows that
  budgeting all free memory still OOMs, so a share of RAM is kept free (headroom).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

RELEASE_URL = "https://github.com/Dao-AILab/flash-attention/releases/download/v{version}/{filename}"
FIRST_CU_MAJOR_NAMING = (2, 6, 0)
GB_PER_NVCC_THREAD = 5.0
DEFAULT_NVCC_THREADS = 4
DEFAULT_HEADROOM = 0.2

_CC_RE = re.compile(r"^(?:sm_?)?(\d+)\.(\d+)$")
_CC_COMPACT_RE = re.compile(r"^(?:sm_?)?(\d)(\d)$|^(?:sm_?)?(\d{2})(\d)$")
_VERSION_RE = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?")
_PY_TAG_RE = re.compile(r"^cp3\d{1,2}$")


def _version_tuple(name: str, value: Any) -> tuple[int, int, int]:
    m = _VERSION_RE.match(str(value))
    if not m:
        raise AnsibleFilterError(f"{name}: cannot read a version from {value!r}")
    return int(m[1]), int(m[2]), int(m[3] or 0)


def _capability(value: Any) -> tuple[int, int]:
    """'9.0', 9.0, 'sm_90', '90', '120', (12, 0) -> (major, minor)."""
    if isinstance(value, list | tuple) and len(value) == 2:
        return int(value[0]), int(value[1])
    text = f"{value:.1f}" if isinstance(value, float) else str(value).strip().lower()
    m = _CC_RE.match(text)
    if m:
        return int(m[1]), int(m[2])
    m = _CC_COMPACT_RE.match(text)
    if m:
        major, minor = (m[1], m[2]) if m[1] else (m[3], m[4])
        return int(major), int(minor)
    raise AnsibleFilterError(
        f"ml_env_cuda_arch_list: {value!r} is not a compute capability "
        "(expected e.g. '9.0', '12.0' or 'sm_90')"
    )


def _capabilities(values: Any) -> list[tuple[int, int]]:
    if isinstance(values, str):
        values = [v for v in re.split(r"[;,\s]+", values) if v]
    if not isinstance(values, Iterable) or isinstance(values, Mapping):
        raise AnsibleFilterError(
            f"ml_env_cuda_arch_list: expected a list of compute capabilities, got {values!r}"
        )
    caps = sorted({_capability(v) for v in values})
    if not caps:
        raise AnsibleFilterError(
            "ml_env_cuda_arch_list: no compute capability given; set ml_env_cuda_arch_list or "
            "ml_env_compute_capabilities (e.g. ['9.0'])"
        )
    return caps


def ml_env_cuda_arch_list(capabilities: Any) -> str:
    """TORCH_CUDA_ARCH_LIST: sorted, de-duplicated 'major.minor' joined by ';'."""
    return ";".join(f"{major}.{minor}" for major, minor in _capabilities(capabilities))


def ml_env_flash_attn_archs(capabilities: Any) -> str:
    """FLASH_ATTN_CUDA_ARCHS (flash-attn's own arch switch): '90;120'."""
    return ";".join(f"{major}{minor}" for major, minor in _capabilities(capabilities))


def ml_env_flash_attn_max_jobs(
    mem_total_mb: Any,
    cpus: Any,
    nvcc_threads: Any = DEFAULT_NVCC_THREADS,
    gb_per_thread: Any = GB_PER_NVCC_THREAD,
    headroom: Any = DEFAULT_HEADROOM,
) -> int:
    """Parallel compile jobs that fit in RAM (a job runs nvcc_threads threads of up to gb_per_thread GB)."""
    try:
        mem_gb = float(mem_total_mb) / 1024
        ncpu = int(cpus)
        threads = int(nvcc_threads)
        per_thread = float(gb_per_thread)
        keep = float(headroom)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(
            f"ml_env_flash_attn_max_jobs: numbers expected, got mem_total_mb={mem_total_mb!r} cpus={cpus!r} "
            f"nvcc_threads={nvcc_threads!r} gb_per_thread={gb_per_thread!r} headroom={headroom!r}"
        ) from exc
    if mem_gb <= 0 or ncpu < 1 or threads < 1 or per_thread <= 0 or not 0 <= keep < 1:
        raise AnsibleFilterError(
            f"ml_env_flash_attn_max_jobs: out of range: mem_total_mb={mem_total_mb!r} cpus={cpus!r} "
            f"nvcc_threads={nvcc_threads!r} gb_per_thread={gb_per_thread!r} headroom={headroom!r}"
        )
    by_memory = math.floor(mem_gb * (1 - keep) / (per_thread * threads))
    by_cpu = ncpu // threads
    return max(1, min(by_memory, by_cpu))


def _abi(value: Any) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    text = str(value).strip().upper()
    if text in {"TRUE", "1"}:
        return "TRUE"
    if text in {"FALSE", "0"}:
        return "FALSE"
    raise AnsibleFilterError(f"ml_env_flash_attn_wheel: cxx11_abi must be a boolean, got {value!r}")


def ml_env_flash_attn_wheel(
    torch_info: Mapping[str, Any], flash_attn_version: str, arch_list: str = ""
) -> dict[str, Any]:
    """Name, URL and cache keys of the flash-attn wheel for this torch build.

    torch_info keys (what the venv's torch reports): torch (torch.__version__), cuda (torch.version.cuda),
    cxx11_abi (torch._C._GLIBCXX_USE_CXX11_ABI), python_tag ('cp311'), platform ('linux_x86_64').
    ``prebuilt_url`` is None when this flash-attn version predates the naming handled here.
    """
    if not isinstance(torch_info, Mapping):
        raise AnsibleFilterError(f"ml_env_flash_attn_wheel: torch_info must be a dict, got {torch_info!r}")
    missing = [k for k in ("torch", "cuda", "cxx11_abi", "python_tag", "platform") if k not in torch_info]
    if missing:
        raise AnsibleFilterError(f"ml_env_flash_attn_wheel: torch_info lacks {missing}: {dict(torch_info)!r}")
    if not torch_info["cuda"]:
        raise AnsibleFilterError(
            f"ml_env_flash_attn_wheel: torch {torch_info['torch']} is not a CUDA build "
            "(torch.version.cuda is None); flash-attn needs CUDA torch - "
            "set ml_env_flash_attn: false on CPU hosts"
        )
    fa = _version_tuple("ml_env_flash_attn_wheel (flash-attn version)", flash_attn_version)
    t_major, t_minor, _ = _version_tuple("ml_env_flash_attn_wheel (torch version)", torch_info["torch"])
    c_major, c_minor, _ = _version_tuple("ml_env_flash_attn_wheel (CUDA version)", torch_info["cuda"])
    py = str(torch_info["python_tag"])
    if not _PY_TAG_RE.match(py):
        raise AnsibleFilterError(f"ml_env_flash_attn_wheel: python_tag must look like 'cp311', got {py!r}")
    plat = str(torch_info["platform"])
    abi = _abi(torch_info["cxx11_abi"])
    version = str(flash_attn_version)
    local = f"cu{c_major}torch{t_major}.{t_minor}cxx11abi{abi}"
    filename = f"flash_attn-{version}+{local}-{py}-{py}-{plat}.whl"
    combo = f"torch{t_major}.{t_minor}-cu{c_major}.{c_minor}-cxx11abi{abi}-{py}-{plat}"
    arch_key = re.sub(r"[^0-9.;]", "", arch_list).replace(";", "_") or "default"
    published = fa >= FIRST_CU_MAJOR_NAMING
    return {
        "filename": filename,
        "prebuilt_url": RELEASE_URL.format(version=version, filename=filename) if published else None,
        "prebuilt_key": f"flash_attn-{version}-{combo}-prebuilt",
        "built_key": f"flash_attn-{version}-{combo}-sm{arch_key}",
    }
