"""Shared pieces of the capacity planner: constants, the input error, version parsing, validators."""

from __future__ import annotations

import math
import re
from typing import Any

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # bin/llm-plan runs without Ansible installed

    class AnsibleFilterError(Exception):  # type: ignore[no-redef]
        """Stand-in when Ansible is not importable."""


try:
    from ..engine_releases import default_version, modelled_vllm_range, proven_vllm_version
except ImportError:  # llm_capacity imported as a top-level package (bin/llm-plan, unit tests)
    from engine_releases import default_version, modelled_vllm_range, proven_vllm_version

GIB = 1024**3
# vLLM's default KV block size on CUDA (vllm/config/cache.py; platforms/cuda.py sets 16 when unset).
DEFAULT_BLOCK_SIZE = 16
# vllm/model_executor/layers/vocab_parallel_embedding.py DEFAULT_VOCAB_PADDING_SIZE.
VOCAB_PADDING = 64
# The vLLM release planned for by default, the one checked on a real GPU here, and (major, minor) of the
# oldest and newest release the accounting follows: catalog/engines.json, the one source of engine releases.
DEFAULT_VLLM_VERSION = default_version("vllm")
PROVEN_VLLM_VERSION = proven_vllm_version()
MODELED_VLLM_RANGE = modelled_vllm_range()
# No GPU has more memory than this; a larger --gpu-memory-gib is a unit mistake (MiB or bytes).
MAX_GPU_MEMORY_GIB = 1024.0
# Largest parallel degree accepted for each of TP, PP, DP and DCP.
MAX_PARALLEL_SIZE = 1024
# Largest context a request may have (tokens); beyond this a number is a typo, not a model.
MAX_MODEL_LEN_LIMIT = 2**26

_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 2, "float": 2, "auto": 2}
# config.json "mamba_ssm_dtype" (Qwen3.5 ships "float32"): vLLM keeps the recurrent (temporal) state in
# that dtype (vllm/model_executor/layers/mamba/mamba_utils.py MambaStateDtypeCalculator); the conv state
# stays in the model dtype.
_STATE_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
_KV_DTYPES = {"auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2"}


class PlanInputError(ValueError):
    """Bad planner input. ``field`` is the keyword argument (or config key) at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.detail = message


# ----------------------------------------------------------------------------------------------
# Small helpers
# ----------------------------------------------------------------------------------------------


def parse_version(version: str) -> tuple[int, int, int]:
    """'0.22.0' / 'v0.19.1rc1' / '0.23.1rc1.dev1018+g8aba' -> (0, 22, 0) etc."""
    match = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?", str(version).strip())
    if not match:
        raise PlanInputError("vllm_version", f"expected X.Y.Z, got {version!r}")
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _int_field(cfg: dict[str, Any], key: str, *, required: bool = True, default: Any = None) -> Any:
    value = cfg.get(key, default)
    if value is None:
        if required:
            raise PlanInputError(f"hf_config.{key}", "missing from the model config (config.json)")
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise PlanInputError(f"hf_config.{key}", f"expected a non-negative number, got {value!r}")
    return int(value)


def _numeric(value: Any, kind: type) -> Any:
    # Ansible variables can arrive as strings ("8", "0.93"); accept those, never booleans.
    if isinstance(value, str):
        try:
            return kind(value.strip())
        except ValueError:
            return value
    return value


def _positive_int(name: str, value: Any, *, upper: int | None = None) -> int:
    value = _numeric(value, int)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlanInputError(name, f"expected an integer >= 1, got {value!r}")
    if upper is not None and value > upper:
        raise PlanInputError(name, f"expected an integer <= {upper}, got {value!r}")
    return value


def _positive_float(name: str, value: Any, *, upper: float | None = None) -> float:
    value = _numeric(value, float)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise PlanInputError(name, f"expected a number > 0, got {value!r}")
    if not math.isfinite(value):
        raise PlanInputError(name, f"expected a finite number, got {value!r}")
    if upper is not None and value > upper:
        raise PlanInputError(name, f"expected a number <= {upper}, got {value!r}")
    return float(value)


# vLLM's default --gpu-memory-utilization: 0.9 up to 0.19.x, 0.92 from 0.20.0 (vllm/config/cache.py of the
# 0.19.0 and 0.20.0 sdists; still 0.92 in 0.33.0).
GPU_MEMORY_UTILIZATION_092_SINCE = (0, 20, 0)


def default_gpu_memory_utilization(version: str) -> float:
    """What vLLM uses when --gpu-memory-utilization is not given, for a release."""
    return 0.92 if parse_version(version) >= GPU_MEMORY_UTILIZATION_092_SINCE else 0.9


def modeled_range_text() -> str:
    """'0.10-0.33': the releases whose accounting the planner follows, as the plan prints them."""
    (a, b), (c, d) = MODELED_VLLM_RANGE
    return f"{a}.{b}-{c}.{d}"


def check_modeled_version(version: tuple[int, int, int]) -> tuple[int, int, int]:
    """Refuse a vLLM version outside the releases whose start-up accounting the planner models."""
    low, high = MODELED_VLLM_RANGE
    if not low <= version[:2] <= high:
        raise PlanInputError(
            "vllm_version",
            f"the planner models vLLM {low[0]}.{low[1]}.x to {high[0]}.{high[1]}.x, got "
            f"{'.'.join(map(str, version))}: pin a version in that range",
        )
    return version


def _flag(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "yes", "1", "false", "no", "0", ""):
        return value.strip().lower() in ("true", "yes", "1")
    raise PlanInputError(name, f"expected true or false, got {value!r}")


def _pow2_divisors(n: int) -> list[int]:
    return [d for d in (1, 2, 4, 8, 16, 32, 64) if d <= n and n % d == 0]
