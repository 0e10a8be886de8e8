"""plan_memory's inputs: keyword arguments checked and normalised, the architecture, batch limits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from ._common import (
    MAX_GPU_MEMORY_GIB,
    MAX_MODEL_LEN_LIMIT,
    MAX_PARALLEL_SIZE,
    PlanInputError,
    _flag,
    _positive_float,
    _positive_int,
    check_modeled_version,
    parse_version,
)
from .config import normalize_architecture
from .non_kv import batch_defaults


@dataclass(frozen=True)
class PlanInputs:
    """plan_memory's keyword arguments once checked (Ansible strings turned into numbers and flags)."""

    gpu_memory_gib: float
    tp: int
    pp: int
    dp: int
    dcp: int
    block: int
    util: float
    version: tuple[int, int, int]
    expert_parallel: bool
    enforce_eager: bool
    disable_hybrid_kv_cache_manager: bool
    language_model_only: bool
    weights_gib_per_gpu: float | None
    checkpoint_gib: float | None
    kv_cache_memory_gib: float | None
    gpu_count: int | None
    mm_encoder_tp_mode: str
    interconnect: str
    mamba_cache_mode: str

    @property
    def requested(self) -> float:
        """gpu_memory_utilization x memory: what vLLM may use on one GPU."""
        return self.gpu_memory_gib * self.util

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp


def _optional_positive_float(name: str, value: Any) -> float | None:
    return None if value is None else _positive_float(name, value)


def _check_choice(name: str, value: Any, choices: tuple[str, str]) -> str:
    if value not in choices:
        raise PlanInputError(name, f"expected {choices[0]!r} or {choices[1]!r}, got {value!r}")
    return value


def check_inputs(
    *,
    gpu_memory_gib: Any,
    tensor_parallel_size: Any,
    pipeline_parallel_size: Any,
    data_parallel_size: Any,
    enable_expert_parallel: Any,
    decode_context_parallel_size: Any,
    gpu_memory_utilization: Any,
    weights_gib_per_gpu: Any,
    checkpoint_gib: Any,
    kv_cache_memory_gib: Any,
    vllm_version: str,
    gpu_count: Any,
    block_size: Any,
    enforce_eager: Any,
    disable_hybrid_kv_cache_manager: Any,
    mm_encoder_tp_mode: str,
    language_model_only: Any,
    interconnect: str,
    mamba_cache_mode: str,
) -> PlanInputs:
    """Validate the layout and engine arguments (in this order: the first bad one raises)."""
    gpu_memory_gib = _positive_float("gpu_memory_gib", gpu_memory_gib, upper=MAX_GPU_MEMORY_GIB)
    tp = _positive_int("tensor_parallel_size", tensor_parallel_size, upper=MAX_PARALLEL_SIZE)
    pp = _positive_int("pipeline_parallel_size", pipeline_parallel_size, upper=MAX_PARALLEL_SIZE)
    dp = _positive_int("data_parallel_size", data_parallel_size, upper=MAX_PARALLEL_SIZE)
    dcp = _positive_int("decode_context_parallel_size", decode_context_parallel_size, upper=MAX_PARALLEL_SIZE)
    block = _positive_int("block_size", block_size)
    util = _positive_float("gpu_memory_utilization", gpu_memory_utilization, upper=1.0)
    version = check_modeled_version(parse_version(vllm_version))
    flags = {
        name: _flag(name, value)
        for name, value in (
            ("enable_expert_parallel", enable_expert_parallel),
            ("enforce_eager", enforce_eager),
            ("disable_hybrid_kv_cache_manager", disable_hybrid_kv_cache_manager),
            ("language_model_only", language_model_only),
        )
    }
    if weights_gib_per_gpu is not None and checkpoint_gib is not None:
        raise PlanInputError(
            "weights_gib_per_gpu", "give either weights_gib_per_gpu or checkpoint_gib, not both"
        )
    weights_gib_per_gpu = _optional_positive_float("weights_gib_per_gpu", weights_gib_per_gpu)
    checkpoint_gib = _optional_positive_float("checkpoint_gib", checkpoint_gib)
    kv_cache_memory_gib = _optional_positive_float("kv_cache_memory_gib", kv_cache_memory_gib)
    if kv_cache_memory_gib is not None and kv_cache_memory_gib >= gpu_memory_gib:
        raise PlanInputError(
            "kv_cache_memory_gib",
            f"a KV budget of {kv_cache_memory_gib} GiB per GPU does not fit a {gpu_memory_gib} GiB GPU "
            "next to the weights: give less, or leave it unset to let gpu_memory_utilization decide",
        )
    if gpu_count is not None:
        gpu_count = _positive_int("gpu_count", gpu_count)
    return PlanInputs(
        gpu_memory_gib=gpu_memory_gib,
        tp=tp,
        pp=pp,
        dp=dp,
        dcp=dcp,
        block=block,
        util=util,
        version=version,
        expert_parallel=flags["enable_expert_parallel"],
        enforce_eager=flags["enforce_eager"],
        disable_hybrid_kv_cache_manager=flags["disable_hybrid_kv_cache_manager"],
        language_model_only=flags["language_model_only"],
        weights_gib_per_gpu=weights_gib_per_gpu,
        checkpoint_gib=checkpoint_gib,
        kv_cache_memory_gib=kv_cache_memory_gib,
        gpu_count=gpu_count,
        interconnect=_check_choice("interconnect", interconnect, ("nvlink", "pcie")),
        mamba_cache_mode=_check_choice("mamba_cache_mode", mamba_cache_mode, ("none", "align")),
        mm_encoder_tp_mode=_check_choice("mm_encoder_tp_mode", mm_encoder_tp_mode, ("weights", "data")),
    )


class Batch(NamedTuple):
    """Scheduler limits of the plan: max_num_seqs, max_num_batched_tokens, max_model_len."""

    seqs: int
    mnbt: int
    model_len: int


def plan_architecture(hf_config: dict[str, Any], quantization: str | None) -> dict[str, Any]:
    """normalize_architecture plus vLLM's --quantization of an unquantized checkpoint."""
    arch = normalize_architecture(hf_config)
    if quantization is not None:
        if quantization not in ("fp8", "mxfp4", "bitsandbytes"):
            raise PlanInputError("quantization", f"expected fp8, mxfp4 or bitsandbytes, got {quantization!r}")
        arch["runtime_quantization"] = quantization
    return arch


def batch_limits(
    arch: dict[str, Any],
    inp: PlanInputs,
    max_num_seqs: Any,
    max_num_batched_tokens: Any,
    max_model_len: Any,
    *,
    reasons: list[str],
    warnings: list[str],
    allow_long_max_model_len: bool = False,
) -> Batch:
    """max_num_seqs, max_num_batched_tokens and max_model_len, vLLM's defaults where not given."""
    defaults = batch_defaults(inp.gpu_memory_gib, inp.version)
    seqs = (
        _positive_int("max_num_seqs", max_num_seqs) if max_num_seqs is not None else defaults["max_num_seqs"]
    )
    mnbt = (
        _positive_int("max_num_batched_tokens", max_num_batched_tokens)
        if max_num_batched_tokens is not None
        else defaults["max_num_batched_tokens"]
    )
    derived_len = arch["max_position_embeddings"]
    model_len = (
        _positive_int("max_model_len", max_model_len, upper=MAX_MODEL_LEN_LIMIT)
        if max_model_len is not None
        else int(derived_len or 8192)
    )
    if derived_len and model_len > int(derived_len):
        message = (
            f"max_model_len {model_len} exceeds the model's max_position_embeddings {derived_len} "
            "(vLLM refuses unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)"
        )
        if allow_long_max_model_len:
            warnings.append(
                message.replace("refuses unless", "accepts it with") + "; outputs beyond the "
                "trained length may be garbage"
            )
        else:
            reasons.append(message)
    return Batch(seqs, mnbt, model_len)


def check_gpu_count(inp: PlanInputs, reasons: list[str], warnings: list[str]) -> None:
    """The layout against gpu_count: more GPUs than there are is a reason, fewer a warning."""
    tp, pp, dp, world, gpu_count = inp.tp, inp.pp, inp.dp, inp.world, inp.gpu_count
    if gpu_count is not None and world > gpu_count:
        reasons.append(
            f"the layout needs {world} GPUs (TP {tp} x PP {pp} x DP {dp}) but gpu_count is {gpu_count}"
        )
    elif gpu_count is not None and world < gpu_count:
        warnings.append(f"the layout uses {world} of {gpu_count} GPUs")
