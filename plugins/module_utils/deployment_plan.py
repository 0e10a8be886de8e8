"""The one entry point that turns a model entry, a hardware description and the planning inputs into the
deployment fact ``llm_plan_result``.

The llm_plan role calls it once, for a hardware profile and again for the GPUs a host really has, with the
same inputs. It only sequences the pure pieces: the layout
search (llm_capacity.recommend_layout), the overrides (llm_plan_report.llm_plan_layout), the known-issue
settings, one memory plan per KV dtype, DCP size and context length (llm_capacity.plan_memory), the pick
(llm_plan_report.llm_plan_assemble) and, for SGLang, SGLang's own KV pool (llm_capacity.sglang).
Stdlib and the collection's module_utils only.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

try:  # the collection's module_utils package, or the directory itself on sys.path (unit tests, bin/)
    from . import llm_capacity as _capacity
    from . import llm_plan_report as _report
    from . import model_entry as _entry
    from .llm_capacity.sglang import sglang_kv_pool
except ImportError:
    import llm_capacity as _capacity  # type: ignore[no-redef]
    import llm_plan_report as _report  # type: ignore[no-redef]
    import model_entry as _entry  # type: ignore[no-redef]
    from llm_capacity.sglang import sglang_kv_pool  # type: ignore[no-redef]

GIB = 1024**3
ENGINES = ("vllm", "sglang")
KV_CACHE_DTYPES = _report._KV_DTYPES
# The layout inputs a caller may fix (llm_plan_layout's keys but the KV dtype, which is planned per row);
# None takes the recommendation's value.
OVERRIDE_KEYS = tuple(key for key in _report._LAYOUT_KEYS if key != "kv_cache_dtype")
# vLLM's KV dtype names -> SGLang's.
_SGLANG_KV = {"fp8": "fp8_e4m3", "float16": "bfloat16"}
# A model without max_position_embeddings is not limited by it.
_NO_POSITION_LIMIT = 2**31


class DeploymentPlanError(ValueError):
    """An input the plan cannot be made from; the message names the input."""


def _int(name: str, value: Any, minimum: int = 1) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise DeploymentPlanError(f"{name} must be a whole number >= {minimum}, got {value!r}") from None
    if (isinstance(value, float) and value != number) or number < minimum:
        raise DeploymentPlanError(f"{name} must be a whole number >= {minimum}, got {value!r}")
    return number


def _optional_int(name: str, value: Any) -> int | None:
    return None if value is None or value == "" else _int(name, value)


def _bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on", "y", "t"):
        return True
    if text in ("0", "false", "no", "off", "n", "f", ""):
        return False
    raise DeploymentPlanError(f"{name} must be true or false, got {value!r}")


def _utilization(value: Any) -> float | None:
    if value is None or value == "":
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = -1.0
    if not 0 < number <= 1:
        raise DeploymentPlanError(f"gpu_memory_utilization must be null or in (0, 1], got {value!r}")
    return number


def _check_entries(model: Any, hardware: Any) -> None:
    if not isinstance(model, Mapping) or not isinstance(model.get("hf_config"), Mapping):
        raise DeploymentPlanError("model must be a catalog llm_model dict with an hf_config mapping")
    for key in ("id", "hf_repo"):
        if not isinstance(model.get(key), str):
            raise DeploymentPlanError(f"model.{key} must be a string, got {model.get(key)!r}")
    _int("model.checkpoint_bytes", model.get("checkpoint_bytes"))
    if not isinstance(hardware, Mapping):
        raise DeploymentPlanError("hardware must be an llm_hardware dict (or live facts in that shape)")
    _int("hardware.gpu_count", hardware.get("gpu_count"))
    try:
        memory = float(hardware.get("gpu_memory_gib"))
    except (TypeError, ValueError):
        memory = 0.0
    if memory <= 0:
        given = hardware.get("gpu_memory_gib")
        raise DeploymentPlanError(f"hardware.gpu_memory_gib must be > 0, got {given!r}")


def _max_positions(hf_config: Mapping[str, Any]) -> int:
    text = hf_config.get("text_config") if isinstance(hf_config.get("text_config"), Mapping) else hf_config
    return int(text.get("max_position_embeddings") or _NO_POSITION_LIMIT)


def _lengths(
    context_lengths: Sequence[Any], max_model_len: int | None, max_positions: int
) -> tuple[int, list[int]]:
    """The length to deploy (the given one, else the largest requested one the model supports) and every
    length to plan: the requested ones the model supports plus that one."""
    if not isinstance(context_lengths, Sequence) or isinstance(context_lengths, str) or not context_lengths:
        raise DeploymentPlanError(
            f"context_lengths must be a non-empty list of positive integers, got {context_lengths!r}"
        )
    requested = [_int("context_lengths[]", length) for length in context_lengths]
    target = max_model_len if max_model_len is not None else min(max(requested), max_positions)
    return target, sorted({length for length in requested if length <= max_positions} | {target})


def _kv_dtypes(kv_cache_dtypes: Sequence[Any]) -> list[str]:
    dtypes = [str(d) for d in kv_cache_dtypes] if isinstance(kv_cache_dtypes, Sequence) else []
    if isinstance(kv_cache_dtypes, str) or not dtypes or set(dtypes) - set(KV_CACHE_DTYPES):
        raise DeploymentPlanError(
            f"kv_cache_dtypes must be a non-empty subset of {list(KV_CACHE_DTYPES)}, got {kv_cache_dtypes!r}"
        )
    return dtypes


def _dcp_sizes(given: int | None, layout: Mapping[str, Any], model: Mapping[str, Any]) -> list[int]:
    """The override alone, else 1, the layout's, and TP for models whose KV decode context parallel shards."""
    if given is not None:
        return [given]
    sizes = [1, int(layout["decode_context_parallel_size"])]
    if _entry.model_complete(model).get("supports_dcp"):
        sizes.append(int(layout["tensor_parallel_size"]))
    return list(dict.fromkeys(sizes))


def _sglang(
    model: Mapping[str, Any],
    hardware: Mapping[str, Any],
    result: Mapping[str, Any],
    interconnect: str,
    mem_fraction_static: Any,
) -> dict[str, Any]:
    kv = str(result["kv_cache_dtype"])
    return sglang_kv_pool(
        dict(model["hf_config"]),
        weights_gib_per_gpu=float(result["plan"]["weights_gib_per_gpu"]),
        gpu_memory_gib=float(hardware["gpu_memory_gib"]),
        nvidia_smi_memory_mib=hardware.get("gpu_memory_mib_cuda"),
        tensor_parallel_size=int(result["tensor_parallel_size"]),
        kv_cache_dtype=_SGLANG_KV.get(kv, kv),
        mem_fraction_static=None if mem_fraction_static in (None, "") else float(mem_fraction_static),
        compute_capability=str(hardware["compute_capability"]),
        interconnect=interconnect,
        context_length=int(result["max_model_len"]),
    )


def plan_deployment(
    model: Mapping[str, Any],
    hardware: Mapping[str, Any],
    *,
    vllm_version: str,
    engine: str = "vllm",
    nodes: Any = 1,
    overrides: Mapping[str, Any] | None = None,
    kv_cache_dtypes: Sequence[Any] = ("bfloat16", "fp8"),
    context_lengths: Sequence[Any] = (32768, 131072),
    max_num_seqs: Any = 256,
    allow_long_max_model_len: Any = False,
    sglang_mem_fraction_static: Any = None,
) -> dict[str, Any]:
    """``llm_plan_result`` for ``model`` (a catalog llm_model entry) on ``hardware`` (an llm_hardware profile
    or the live facts in its shape), ``nodes`` identical nodes of it.

    ``overrides`` holds the OVERRIDE_KEYS a user fixed (None or missing: the recommendation's). Every KV dtype
    is planned at every requested context length the model supports plus the target length, with DCP 1, the
    layout's DCP and (for MLA models) DCP = TP; the pick is llm_plan_assemble's. With ``engine='sglang'`` the
    result gains ``engine`` and ``sglang`` (SGLang's mem_fraction_static, KV pool and tokens for the picked
    layout). Raises DeploymentPlanError (inputs), llm_capacity.PlanInputError or AnsibleFilterError (the
    pieces), each naming the value.
    """
    _check_entries(model, hardware)
    if engine not in ENGINES:
        raise DeploymentPlanError(f"engine must be one of {list(ENGINES)}, got {engine!r}")
    unknown = sorted(set(overrides or {}) - set(OVERRIDE_KEYS))
    if unknown:
        raise DeploymentPlanError(f"overrides has unknown keys {unknown}; known: {list(OVERRIDE_KEYS)}")
    given = dict(overrides or {})
    node_count = _int("nodes", nodes)
    max_model_len = _optional_int("max_model_len", given.get("max_model_len"))
    dcp = _optional_int("decode_context_parallel_size", given.get("decode_context_parallel_size"))
    for key in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
        given[key] = _optional_int(key, given.get(key))
    given["gpu_memory_utilization"] = _utilization(given.get("gpu_memory_utilization"))
    given["max_model_len"], given["decode_context_parallel_size"] = max_model_len, dcp
    if given.get("enable_expert_parallel") not in (None, ""):
        given["enable_expert_parallel"] = _bool("enable_expert_parallel", given["enable_expert_parallel"])
    dtypes = _kv_dtypes(kv_cache_dtypes)
    seqs = _int("max_num_seqs", max_num_seqs)
    allow_long = _bool("allow_long_max_model_len", allow_long_max_model_len)

    hf_config = dict(model["hf_config"])
    gpu_gib = float(hardware["gpu_memory_gib"])
    gpu_count = int(hardware["gpu_count"])
    checkpoint_gib = int(model["checkpoint_bytes"]) / GIB
    capability = str(hardware.get("compute_capability"))
    interconnect = "pcie" if hardware.get("interconnect") == "pcie" else "nvlink"
    target, lengths = _lengths(context_lengths, max_model_len, _max_positions(hf_config))
    utilization = given["gpu_memory_utilization"]
    if utilization is None:
        utilization = float(hardware.get("recommended_gpu_memory_utilization") or 0.9)

    recommendation = _capacity.recommend_layout(
        hf_config,
        gpu_memory_gib=gpu_gib,
        gpu_count=gpu_count,
        checkpoint_gib=checkpoint_gib,
        compute_capability=capability,
        vllm_version=vllm_version,
        target_max_model_len=target,
        gpu_memory_utilization=utilization,
        max_num_seqs=seqs,
        kv_cache_dtypes=dtypes,
        interconnect=interconnect,
        nodes=node_count,
    )
    layout = _report.llm_plan_layout(recommendation, given, hardware, nodes=node_count)
    settings = _report.llm_plan_settings(model, hardware, vllm_version)
    rows = [
        {
            "kv_cache_dtype": kv,
            "decode_context_parallel_size": dcp_size,
            "max_model_len": length,
            "plan": _capacity.plan_memory(
                hf_config,
                gpu_memory_gib=gpu_gib,
                tensor_parallel_size=layout["tensor_parallel_size"],
                pipeline_parallel_size=layout["pipeline_parallel_size"],
                data_parallel_size=layout["data_parallel_size"],
                enable_expert_parallel=layout["enable_expert_parallel"],
                decode_context_parallel_size=dcp_size,
                gpu_memory_utilization=layout["gpu_memory_utilization"],
                kv_cache_dtype=kv,
                max_model_len=length,
                max_num_seqs=seqs,
                checkpoint_gib=checkpoint_gib,
                vllm_version=vllm_version,
                gpu_count=gpu_count * node_count,
                interconnect=interconnect,
                allow_long_max_model_len=allow_long,
            ),
        }
        for kv, dcp_size, length in itertools.product(dtypes, _dcp_sizes(dcp, layout, model), lengths)
    ]
    result = _report.llm_plan_assemble(
        rows,
        model=model,
        hardware=hardware,
        layout=layout,
        settings=settings,
        engine_version=vllm_version,
        target_max_model_len=target,
        recommendation=recommendation,
    )
    if engine == "sglang":
        result = {
            **result,
            "engine": "sglang",
            "sglang": _sglang(model, hardware, result, interconnect, sglang_mem_fraction_static),
        }
    return result
