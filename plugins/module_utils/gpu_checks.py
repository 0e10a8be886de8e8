"""Refusal rules of the gpu_preflight role, as one pure function over its facts."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError

try:
    from .gpu_facts import version_key
except ImportError:  # imported as a top-level module (unit tests put module_utils on sys.path)
    from gpu_facts import version_key


# Minimum Linux x86_64 driver for each CUDA toolkit release (its GA build), from NVIDIA's
# "CUDA Toolkit and Corresponding Driver Versions" table in the CUDA Toolkit release notes
# (docs.nvidia.com/cuda/cuda-toolkit-release-notes, Table 3). Minor-version compatibility may
# let older drivers of the same major run some builds; this check is deliberately strict.
CUDA_MIN_DRIVER = {
    "11.8": "520.61.05",
    "12.0": "525.60.13",
    "12.1": "530.30.02",
    "12.2": "535.54.03",
    "12.3": "545.23.06",
    "12.4": "550.54.14",
    "12.5": "555.42.02",
    "12.6": "560.28.03",
    "12.8": "570.26",
    "12.9": "575.51.03",
    "13.0": "580.65.06",
    "13.1": "590.44.01",
}

# vLLM MLA decode backends and the compute-capability majors they accept, read from
# vllm/v1/attention/backends/mla/*.py `supports_compute_capability` (None = any CUDA GPU).
MLA_BACKEND_MAJORS: dict[str, tuple[int, ...] | None] = {
    "CUTLASS_MLA": (10,),
    "FLASHINFER_MLA": (10,),
    "FLASHINFER_MLA_SPARSE": (10,),
    "FLASHMLA": (9, 10),
    "FLASHMLA_SPARSE": (9, 10),
    "FLASH_ATTN_MLA": (9,),
    "TRITON_MLA": None,
}

DEFAULTS: dict[str, Any] = {
    "tensor_parallel_size": 1,
    "pipeline_parallel_size": 1,
    "engine_cuda_version": "",
    "plan": None,
    "required_disk_bytes": 0,
    "disk_margin_bytes": 0,
    "attention_backend": "",
    "port": None,
    "service_user": "",
    "min_open_files": 0,
}


def _err(name: str, message: str, value: Any) -> AnsibleFilterError:
    return AnsibleFilterError(f"{name}: {message} (got {value!r})")


def min_driver_for_cuda(cuda: str) -> str | None:
    """Minimum driver for CUDA 'X.Y' (or 'X.Y.Z'); None when the table has no entry."""
    if not isinstance(cuda, str) or not cuda.strip():
        raise _err("gpu_min_driver_for_cuda", "expected a CUDA version such as '13.0'", cuda)
    major_minor = ".".join(cuda.strip().split(".")[:2])
    return CUDA_MIN_DRIVER.get(major_minor)


def mla_backends_for(compute_capability: str) -> list[str]:
    """MLA backends whose supports_compute_capability accepts this 'major.minor'."""
    try:
        major = int(str(compute_capability).split(".", maxsplit=1)[0])
    except ValueError as exc:
        raise _err(
            "gpu_mla_backends_for", "expected a compute capability such as '12.0'", compute_capability
        ) from exc
    return sorted(name for name, majors in MLA_BACKEND_MAJORS.items() if majors is None or major in majors)


def problem(
    check: str, fact: str, found: Any, requirement: str, fix: str, *, severity: str = "error"
) -> dict:
    message = f"[{check}] fact {fact} = {found}; requirement: {requirement}; fix: {fix}"
    return {
        "check": check,
        "severity": severity,
        "fact": fact,
        "found": found,
        "requirement": requirement,
        "fix": fix,
        "message": message,
    }


def _gib(value: int) -> str:
    return f"{value / 2**30:.1f} GiB"


def _driver_checks(facts: dict[str, Any], req: dict[str, Any]) -> list[dict]:
    if facts.get("nvml_mismatch"):
        return [
            problem(
                "nvml_mismatch",
                "gpu_preflight_facts.kernel_module_version / nvml_library_versions",
                f"{facts.get('kernel_module_version')} / {facts.get('nvml_library_versions')}",
                "the loaded kernel module and the user-space NVML library have the same version",
                "the driver was upgraded without a reboot: reboot the host (or unload and reload the "
                "nvidia kernel modules with no GPU process running), then run the play again",
            )
        ]
    if not facts.get("driver_present"):
        return [
            problem(
                "no_driver",
                "gpu_preflight_facts.driver_present",
                f"false ({facts.get('driver_error')})",
                "nvidia-smi runs and lists the GPUs (NVIDIA driver installed and loaded)",
                "install the NVIDIA driver (e.g. the nvidia.nvidia_driver role or the distribution "
                "packages), reboot, and check that `nvidia-smi` lists every GPU",
            )
        ]
    problems = []
    cuda = str(req.get("engine_cuda_version") or "")
    driver = facts.get("driver_version")
    if cuda and driver:
        needed = min_driver_for_cuda(cuda)
        reported = facts.get("cuda_driver_version")
        too_old = needed is not None and version_key(driver) < version_key(needed)
        too_old = too_old or bool(reported and version_key(reported) < version_key(cuda))
        if too_old:
            problems.append(
                problem(
                    "driver_too_old",
                    f"gpu_preflight_facts.driver_version (supports CUDA {reported or 'unknown'})",
                    driver,
                    f"driver >= {needed or '(not in the table)'} and supporting CUDA >= {cuda}, for an "
                    f"engine built with CUDA {cuda} (gpu_preflight_engine_cuda_version; NVIDIA CUDA "
                    "release notes, table of toolkit driver versions)",
                    "upgrade the NVIDIA driver, or choose an engine build for an older CUDA "
                    "(set gpu_preflight_engine_cuda_version to match it)",
                )
            )
    return problems


def _gpu_checks(facts: dict[str, Any], req: dict[str, Any]) -> list[dict]:
    problems = []
    gpus = facts.get("gpus") or []
    tp = int(req["tensor_parallel_size"])
    pp = int(req["pipeline_parallel_size"])
    if len(gpus) < tp * pp:
        problems.append(
            problem(
                "gpu_count",
                "gpu_preflight_facts.gpu_count",
                len(gpus),
                f">= tensor_parallel_size x pipeline_parallel_size = {tp} x {pp} = {tp * pp}",
                "lower gpu_preflight_tensor_parallel_size / gpu_preflight_pipeline_parallel_size "
                "(and the engine's) to fit the GPUs present, or deploy to a host with more GPUs",
            )
        )
    used = gpus[: tp * pp]
    for start in range(0, len(used), tp):
        group = used[start : start + tp]
        names = sorted({f"{g['name']} ({g['memory_total_mib']} MiB)" for g in group})
        if len(names) > 1:
            problems.append(
                problem(
                    "mixed_gpu_models",
                    f"gpu_preflight_facts.gpus[{start}:{start + len(group)}].name",
                    ", ".join(names),
                    "every GPU of one tensor-parallel group is the same model with the same memory",
                    "expose only identical GPUs to the service (CUDA_VISIBLE_DEVICES in the service "
                    "environment) or lower the tensor-parallel size",
                )
            )
    mig = [g["index"] for g in used if g.get("mig_enabled")]
    if mig:
        problems.append(
            problem(
                "mig_enabled",
                "gpu_preflight_facts.gpus[*].mig_mode",
                f"Enabled on GPU {', '.join(str(i) for i in mig)}",
                "MIG disabled on the GPUs the engine uses (a MIG slice cannot join NCCL tensor parallelism)",
                "run `nvidia-smi -i <gpu> -mig 0` as root with no GPU process running (a GPU reset or "
                "reboot may be needed), then run the play again",
            )
        )
    fabric = facts.get("fabric") or {}
    if fabric.get("state") == "down":
        problems.append(
            problem(
                "fabric_manager_down",
                "gpu_preflight_facts.fabric.state",
                f"down ({', '.join(fabric.get('gpu_fabric_states') or []) or fabric.get('service_state')})",
                "on an NVSwitch host the fabric manager has registered every GPU (fabric state "
                "Completed, status Success)",
                "install nvidia-fabricmanager of exactly the driver's version and "
                "`systemctl enable --now nvidia-fabricmanager`; CUDA fails with error 802 without it",
            )
        )
    elif fabric.get("state") == "unknown":
        problems.append(
            problem(
                "fabric_manager_unknown",
                "gpu_preflight_facts.fabric.state",
                "unknown",
                "the fabric manager state can be read on an NVSwitch host",
                "check `systemctl status nvidia-fabricmanager` by hand",
                severity="warning",
            )
        )
    off = [g["index"] for g in used if g.get("persistence_mode") is False]
    if off:
        problems.append(
            problem(
                "persistence_mode_off",
                "gpu_preflight_facts.gpus[*].persistence_mode",
                f"Disabled on GPU {', '.join(str(i) for i in off)}",
                "persistence mode on (faster, steadier engine starts)",
                "enable nvidia-persistenced (`systemctl enable --now nvidia-persistenced`)",
                severity="warning",
            )
        )
    backend = str(req.get("attention_backend") or "").upper()
    if backend and used:
        problems.extend(_backend_checks(backend, used))
    return problems


def _backend_checks(backend: str, used: list[dict[str, Any]]) -> list[dict]:
    if backend not in MLA_BACKEND_MAJORS:
        return [
            problem(
                "attention_backend_unchecked",
                "gpu_preflight_attention_backend",
                backend,
                f"one of {', '.join(sorted(MLA_BACKEND_MAJORS))} to be checked here",
                "none needed if you know the backend runs on this GPU; vLLM checks it at start",
                severity="warning",
            )
        ]
    majors = MLA_BACKEND_MAJORS[backend]
    if any(g.get("compute_capability") is None for g in used):
        return [
            problem(
                "attention_backend_unchecked",
                "gpu_preflight_facts.gpus[*].compute_capability",
                "unknown (nvidia-smi did not report compute_cap)",
                f"a known compute capability to check {backend} against",
                "upgrade the driver (compute_cap is reported by current nvidia-smi)",
                severity="warning",
            )
        ]
    caps = sorted({str(g.get("compute_capability")) for g in used})
    bad = [cap for cap in caps if majors is not None and int(cap.split(".")[0]) not in majors]
    if not bad:
        return []
    return [
        problem(
            "attention_backend_unsupported",
            "gpu_preflight_facts.gpus[*].compute_capability",
            ", ".join(bad),
            f"{backend} needs compute capability {' or '.join(f'{m}.x' for m in majors or ())} "
            "(vLLM supports_compute_capability)",
            f"use an MLA backend this GPU has: {', '.join(mla_backends_for(bad[0]))} "
            "(set the model's attention backend / gpu_preflight_attention_backend accordingly)",
        )
    ]


def host_checks(facts: dict[str, Any], req: dict[str, Any]) -> list[dict]:
    problems = []
    plan = req.get("plan")
    if isinstance(plan, dict) and plan.get("fits") is False:
        reasons = plan.get("reasons") or ["(the plan gave no reasons)"]
        problems.append(
            problem(
                "plan_does_not_fit",
                "gpu_preflight_plan.fits",
                "false: " + "; ".join(str(r) for r in reasons),
                "the capacity planner's verdict for this model on these GPUs is fits = true",
                "follow the planner's reasons: more GPUs or memory, a smaller quantisation, a shorter "
                "max_model_len or a lower max_num_seqs",
            )
        )
    required = int(req.get("required_disk_bytes") or 0)
    if required > 0:
        disk = facts.get("disk") or {}
        margin = int(req.get("disk_margin_bytes") or 0)
        avail = disk.get("avail_bytes")
        if avail is None:
            problems.append(
                problem(
                    "disk_unknown",
                    "gpu_preflight_facts.disk",
                    disk.get("error"),
                    "the free space of gpu_preflight_model_dir can be measured",
                    "check that gpu_preflight_model_dir is an absolute path on a mounted file system",
                )
            )
        elif avail < required + margin:
            problems.append(
                problem(
                    "disk_space",
                    "gpu_preflight_facts.disk.avail_bytes",
                    f"{avail} ({_gib(avail)} free on {disk.get('mount')})",
                    f">= gpu_preflight_required_disk_bytes + gpu_preflight_disk_margin_bytes = "
                    f"{required} + {margin} ({_gib(required + margin)})",
                    "free space on that file system or point gpu_preflight_model_dir (and the model "
                    "download directory) at a larger one",
                )
            )
    port = facts.get("port") or {}
    own = port.get("service_uid")
    foreign = [item for item in port.get("listeners") or [] if own is None or item["uid"] != own]
    if foreign:
        shown = ", ".join(f"{item['address']} (uid {item['uid']})" for item in foreign)
        problems.append(
            problem(
                "port_in_use",
                "gpu_preflight_facts.port.listeners",
                shown,
                f"TCP port {port.get('port')} is free or held by the service user "
                f"{req.get('service_user') or '(none given)'} "
                f"({'no such user yet' if own is None else f'uid {own}'})",
                f"stop what listens there (`ss -ltnp 'sport = :{port.get('port')}'` names it) or choose "
                "another port (llm_api_port in the deploy playbooks; gpu_preflight_port and the service's "
                "port where the roles are used alone)",
            )
        )
    soft = (facts.get("nofile") or {}).get("soft")
    wanted = int(req.get("min_open_files") or 0)
    if wanted and soft is not None and soft < wanted:
        problems.append(
            problem(
                "open_files",
                "gpu_preflight_facts.nofile.soft",
                soft,
                f">= {wanted} open files (gpu_preflight_min_open_files)",
                "the service unit sets LimitNOFILE itself; raise the limit for interactive use in "
                "/etc/security/limits.d if you start the engine by hand",
                severity="warning",
            )
        )
    return problems


def preflight_problems(facts: dict[str, Any], requirements: dict[str, Any] | None = None) -> list[dict]:
    """Every problem on this host for these requirements (see DEFAULTS for the keys)."""
    if not isinstance(facts, dict) or "driver_present" not in facts:
        raise _err("gpu_preflight_problems", "expected gpu_preflight_facts (gpu_facts_from_probes)", facts)
    req = {**DEFAULTS, **(requirements or {})}
    for key in ("tensor_parallel_size", "pipeline_parallel_size"):
        if not isinstance(req[key], int) or req[key] < 1:
            raise _err("gpu_preflight_problems", f"{key} must be an integer >= 1", req[key])
    plan = req.get("plan")
    if plan not in (None, {}) and (not isinstance(plan, dict) or "fits" not in plan):
        raise _err("gpu_preflight_problems", "plan must be a dict with 'fits' and 'reasons'", plan)
    problems = _driver_checks(facts, req)
    if facts.get("driver_present") and not facts.get("nvml_mismatch"):
        problems.extend(_gpu_checks(facts, req))
    problems.extend(host_checks(facts, req))
    return problems
