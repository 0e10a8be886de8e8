"""The serving plan for vLLM's CPU build on the host the deploy reaches (never a GPU profile).

On the CPU build the KV cache is not a fraction of device memory: each worker allocates
``VLLM_CPU_KVCACHE_SPACE`` GiB (an integer) of host RAM, and ``--gpu-memory-utilization`` would be read as a
fraction of host RAM, so it is left out. Token count and bytes per token come from the GPU planner's
KV layout (llm_capacity.plan_memory with a fixed KV budget), with the CPU attention's block size.
The result has the keys of llm_plan_result that the deploy playbook reads, plus ``device: cpu``.
"""

from __future__ import annotations

import math
from typing import Any

try:
    from . import llm_capacity as lc
    from .cpu_host import cpuset_text, thread_binding
except ImportError:  # imported as a top-level module (unit tests put module_utils on sys.path)
    import llm_capacity as lc
    from cpu_host import cpuset_text, thread_binding

GIB = 2**30
# Host memory kept free besides weights and KV space: the API server, tokenizer, Python and page cache.
RESERVE_GIB = 2.0
# Share of the memory left after weights and the reserve that an automatic KV space takes.
AUTO_KV_SHARE = 0.5
AUTO_KV_MAX_GIB = 64
# The CPU attention backend's block size (vLLM's CPU platform sets 128 when none is given).
CPU_BLOCK_SIZE = 128
# /dev/shm the workers' message queues need: vLLM asked for 160 MiB at TP 2 (verified-recipes §7).
SHM_PER_WORKER_BYTES = 256 * 2**20


class CpuPlanError(ValueError):
    """A bad input, named by the deploy variable that carries it."""


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str) or not str(value).strip().isdigit():
        raise CpuPlanError(f"{name} must be a positive integer, got {value!r}")
    number = int(value)
    if number < 1:
        raise CpuPlanError(f"{name} must be a positive integer, got {value!r}")
    return number


def auto_kv_gib(memory_available_bytes: int, weights_bytes: int, tensor_parallel_size: int) -> int:
    """KV space per worker when llm_cpu_kv_cache_gib is 'auto': half of what weights and reserve leave."""
    left = memory_available_bytes / GIB - weights_bytes / GIB - RESERVE_GIB
    return max(1, min(AUTO_KV_MAX_GIB, math.floor(left * AUTO_KV_SHARE / tensor_parallel_size)))


def cpu_plan(
    model: dict[str, Any],
    *,
    tensor_parallel_size: Any = 1,
    kv_cache_gib: Any = "auto",
    max_model_len: Any = None,
    memory_available_bytes: int | None = None,
    cpus: list[int] | None = None,
    engine_version: str = "0.32.0",
    nnodes: Any = 1,
) -> dict[str, Any]:
    """Plan for one CPU host. ``model`` is a catalog ``llm_model`` (hf_config, checkpoint_bytes, id).

    With ``nnodes`` > 1 the TP workers are spread evenly over that many hosts (vLLM's multi-node mode): this
    host runs ``tensor_parallel_size / nnodes`` of them and holds that share of the weights."""
    if not isinstance(model, dict) or not isinstance(model.get("hf_config"), dict):
        raise CpuPlanError(f"llm_model must be a catalog model with hf_config, got {type(model).__name__}")
    tp = _positive_int("llm_tensor_parallel_size", tensor_parallel_size)
    nodes = _positive_int("the number of llm_multinode hosts", nnodes)
    if tp % nodes:
        raise CpuPlanError(
            f"llm_tensor_parallel_size {tp} cannot be spread evenly over {nodes} hosts: "
            f"give a multiple of {nodes}"
        )
    local = tp // nodes
    weights = _positive_int("llm_model.checkpoint_bytes", model.get("checkpoint_bytes"))
    local_weights = weights * local // tp
    reasons: list[str] = []
    if kv_cache_gib in (None, "", "auto"):
        if memory_available_bytes is None:
            kv_gib, kv_source = 1, "auto (decided on the host from its available memory; shown for 1 GiB)"
        else:
            kv_gib = auto_kv_gib(int(memory_available_bytes), local_weights, local)
            kv_source = f"auto: {AUTO_KV_SHARE:.0%} of available memory after weights and {RESERVE_GIB} GiB"
    else:
        kv_gib = _positive_int("llm_cpu_kv_cache_gib", kv_cache_gib)
        kv_source = "llm_cpu_kv_cache_gib"
    derived = lc.normalize_architecture(model["hf_config"]).get("max_position_embeddings")
    length = _positive_int("llm_max_model_len", max_model_len) if max_model_len else derived
    if not length:
        raise CpuPlanError("llm_max_model_len must be set: the model's config gives no context length")
    plan = lc.plan_memory(
        model["hf_config"],
        gpu_memory_gib=max(kv_gib + weights / GIB, 1.0) * 2,
        tensor_parallel_size=tp,
        kv_cache_memory_gib=float(kv_gib),
        kv_cache_dtype="auto",
        max_model_len=int(length),
        checkpoint_gib=weights / GIB,
        block_size=CPU_BLOCK_SIZE,
        vllm_version=engine_version,
    )
    needed = local_weights + local * kv_gib * GIB + int(RESERVE_GIB * GIB)
    fits = plan["kv_cache_tokens"] >= length
    if not fits:
        reasons.append(
            f"{kv_gib} GiB of KV space per worker holds {plan['kv_cache_tokens']} tokens, fewer than "
            f"max_model_len {length}: raise llm_cpu_kv_cache_gib or lower llm_max_model_len"
        )
    if memory_available_bytes is not None and needed > memory_available_bytes:
        fits = False
        reasons.append(
            f"weights {local_weights / GIB:.2f} GiB + {local} x {kv_gib} GiB KV + {RESERVE_GIB} GiB reserve "
            f"= {needed / GIB:.2f} GiB > {memory_available_bytes / GIB:.2f} GiB available on the host"
        )
    env = {"VLLM_CPU_KVCACHE_SPACE": kv_gib}
    # One worker on a host of a multi-node group is bound explicitly too: vLLM's automatic binding counts
    # NUMA nodes for every rank of the group, not for this host's.
    if local > 1:
        binding = thread_binding(cpus or list(range(local)), local)
    else:
        binding = cpuset_text(cpus or [0]) if nodes > 1 else ""
    if binding:
        env["VLLM_CPU_OMP_THREADS_BIND"] = binding
    reasons.append(
        f"CPU build: {plan['kv_cache_tokens']:,} KV tokens in {kv_gib} GiB per worker ({kv_source}), "
        f"{plan['kv_bytes_per_token']:.0f} bytes per token, concurrency {plan['max_concurrency']:.2f} at "
        f"{length} tokens"
    )
    if nodes > 1:
        reasons.append(
            f"{nodes} hosts: {local} of the {tp} TP workers and {local_weights / GIB:.3f} GiB of weights "
            "on each"
        )
    return {
        "device": "cpu",
        "model_id": model.get("id"),
        "hardware_id": "cpu",
        "engine": "vllm-cpu",
        "engine_version": engine_version,
        "tensor_parallel_size": tp,
        "pipeline_parallel_size": 1,
        "data_parallel_size": 1,
        "enable_expert_parallel": False,
        "decode_context_parallel_size": 1,
        "gpu_memory_utilization": None,
        "kv_cache_dtype": "auto",
        "max_model_len": int(length),
        "attention_backend": None,
        "engine_args": {},
        "engine_env": env,
        "patches": [],
        "cpu_kv_cache_gib": kv_gib,
        "required_memory_bytes": needed,
        "min_shm_bytes": SHM_PER_WORKER_BYTES * local if tp > 1 else 0,
        "nnodes": nodes,
        "local_workers": local,
        "fits": fits,
        "verdict": "fits" if fits else "does_not_fit",
        "reasons": reasons,
        "plan": {
            "kv_cache_tokens": plan["kv_cache_tokens"],
            "kv_bytes_per_token": plan["kv_bytes_per_token"],
            "max_concurrency": plan["max_concurrency"],
            "weights_gib_per_gpu": plan["weights_gib_per_gpu"],
            "block_size": CPU_BLOCK_SIZE,
        },
    }


def cpu_plan_lines(result: dict[str, Any]) -> list[str]:
    """The plan as lines for the play's output."""
    plan = result["plan"]
    lines = [
        f"Device: CPU (vLLM CPU build {result['engine_version']}), TP {result['tensor_parallel_size']}, "
        f"max_model_len {result['max_model_len']}",
        f"Weights: {plan['weights_gib_per_gpu']:.3f} GiB; KV space {result['cpu_kv_cache_gib']} GiB per "
        f"worker: {plan['kv_cache_tokens']:,} tokens ({plan['kv_bytes_per_token']:.0f} B/token)",
        "Environment: " + ", ".join(f"{k}={v}" for k, v in result["engine_env"].items()),
        f"Verdict: {'FITS' if result['fits'] else 'DOES NOT FIT'}",
    ]
    return lines + [f"Planner: {r}" for r in result["reasons"]]
