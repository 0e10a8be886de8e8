"""Choose the NCCL/engine environment from the detected GPU interconnect."""

from __future__ import annotations

import json
import re
from typing import Any

from ansible.errors import AnsibleFilterError

MEASURED_LL = (
    "measured on 2x H200 NVLink (NCCL 2.28.9, 1 GiB bf16 all-reduce): default 330 GB/s, "
    "NCCL_PROTO=LL 117 GB/s"
)
_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")


def _err(name: str, message: str, value: Any) -> AnsibleFilterError:
    return AnsibleFilterError(f"{name}: {message} (got {value!r})")


def _set(env: list[dict[str, str]], name: str, value: str, why: str) -> None:
    env[:] = [item for item in env if item["name"] != name]
    env.append({"name": name, "value": value, "why": why})


def _pcie_warnings(facts: dict[str, Any]) -> list[str]:
    iommu = facts.get("iommu") or {}
    warnings = []
    mode = iommu.get("iommu_mode")
    if mode == "on" or (mode is None and iommu.get("active_units")):
        warnings.append(
            "IOMMU in translation mode (kernel command line "
            f"{iommu.get('iommu_params') or 'has no iommu setting'}, active units "
            f"{len(iommu.get('active_units') or [])}): GPU peer-to-peer over PCIe can hang NCCL "
            "(vllm#33041, NVIDIA/nccl#1999). Fix: boot with iommu=pt (or amd_iommu=off/intel_iommu=off); "
            "fallback: NCCL_P2P_DISABLE=1 via gpu_preflight_nccl_env_overrides."
        )
    for bridge in iommu.get("acs_redirect") or []:
        warnings.append(
            f"PCI bridge {bridge['bdf']} has ACS redirect on ({bridge['acs_ctl']}): P2P goes through the "
            "root complex or is blocked. Fix: disable ACS in the BIOS or with "
            f"`setpci -s {bridge['bdf']} ECAP_ACS+6.w=0000` at boot (NCCL troubleshooting, nccl#2079)."
        )
    if iommu.get("pcie_aspm") != "off":
        warnings.append(
            "pcie_aspm=off is not on the kernel command line: 8-GPU PCIe workstations have seen "
            "'Surprise Link Down' errors under load with ASPM on (add pcie_aspm=off pcie_port_pm=off)."
        )
    return warnings


def _pcie_profile(facts: dict[str, Any], opts: dict[str, Any], gpus: int, profile: dict) -> None:
    summary = (facts.get("topology") or {}).get("summary") or {}
    env = profile["env"]
    _set(
        env,
        "NCCL_P2P_LEVEL",
        "SYS",
        f"PCIe-only host (worst GPU link {summary.get('worst_link')}): let NCCL use P2P over every "
        "PCIe path, through host bridges and across sockets; NCCL 2.28 under-rates AMD CPU links "
        "(AMD_BW 16) and otherwise picks slow SYS/SHM routes (the reference 8x RTX PRO 6000 setting)",
    )
    if opts.get("pcie_proto_ll"):
        _set(
            env,
            "NCCL_PROTO",
            "LL",
            "opt-in (gpu_preflight_nccl_pcie_proto_ll): low-latency protocol for the small all-reduces "
            "of single-user decoding on PCIe (32 KB all-reduce 48 -> 26 us on 8x RTX PRO 6000); it caps "
            f"large-message bandwidth, never use it with NVLink ({MEASURED_LL})",
        )
    cross = bool(summary.get("cross_socket"))
    if cross or gpus > 2:
        where = "across CPU sockets (SYS links)" if cross else f"between {gpus} PCIe-only GPUs"
        profile["engine_args"].append(
            {
                "arg": "--disable-custom-all-reduce",
                "why": f"tensor parallelism {where}: vLLM's custom all-reduce needs fast P2P between all "
                "ranks; on PCIe it is slower than NCCL for 8 GPUs across sockets or hangs with IOMMU/ACS "
                "(vllm#33041); vLLM also turns it off itself above 2 PCIe GPUs, this makes it explicit",
            }
        )
    if cross:
        profile["notes"].append(
            "GPUs sit on several NUMA nodes "
            f"({', '.join(summary.get('numa_nodes') or [])}): vLLM's docs suggest pipeline parallelism "
            "across the slow boundary when tensor parallelism over PCIe is the bottleneck."
        )
    profile["warnings"].extend(_pcie_warnings(facts))


def choose_env(facts: dict[str, Any], options: dict[str, Any] | None = None) -> dict[str, Any]:
    """NCCL/engine profile for this host: see DOCUMENTATION."""
    if not isinstance(facts, dict) or "topology" not in facts:
        raise _err("gpu_nccl_env", "expected gpu_preflight_facts", facts)
    opts = {"tensor_parallel_size": 1, "pipeline_parallel_size": 1, "pcie_proto_ll": False, "overrides": {}}
    opts.update(options or {})
    overrides = opts["overrides"] or {}
    if not isinstance(overrides, dict) or not all(_NAME.match(str(k)) for k in overrides):
        raise _err("gpu_nccl_env", "overrides must map upper-case variable names to values", overrides)
    gpus = int(opts["tensor_parallel_size"]) * int(opts["pipeline_parallel_size"])
    summary = (facts.get("topology") or {}).get("summary") or {}
    kind = summary.get("kind") or "unknown"
    profile: dict[str, Any] = {"profile": kind, "env": [], "engine_args": [], "warnings": [], "notes": []}
    if gpus < 2 or kind == "single_gpu":
        profile["profile"] = "single_gpu"
        profile["notes"].append("One GPU in use: no collective communication, NCCL defaults kept.")
    elif kind in ("nvlink_all_pairs", "nvlink_partial"):
        profile["notes"].append(
            f"NVLink between GPUs ({summary.get('nvlink_pairs')}/{summary.get('gpu_pairs')} pairs): NCCL "
            f"defaults kept. NCCL_PROTO=LL is never set here ({MEASURED_LL}); NCCL_P2P_DISABLE=1 measured "
            "29 GB/s there."
        )
        if kind == "nvlink_partial":
            profile["warnings"].append(
                "Only some GPU pairs have NVLink: keep each tensor-parallel group inside an NVLink "
                "island, or use pipeline parallelism across the PCIe boundary."
            )
    elif kind.startswith("pcie_"):
        _pcie_profile(facts, opts, gpus, profile)
    else:
        profile["warnings"].append("GPU topology unknown (nvidia-smi topo -m failed): NCCL defaults kept.")
    nvlink = kind.startswith("nvlink")
    for name, value in overrides.items():
        if nvlink and name == "NCCL_PROTO" and "LL" in str(value).upper().split(","):
            profile["warnings"].append(
                f"Ignored override NCCL_PROTO={value}: this host has NVLink ({MEASURED_LL})."
            )
            continue
        _set(profile["env"], name, str(value), "set by the operator (gpu_preflight_nccl_env_overrides)")
    return profile


def env_file(profile: dict[str, Any]) -> str:
    """Environment-file fragment: notes as comments, then '# why' and NAME=value per variable."""
    if not isinstance(profile, dict) or "env" not in profile:
        raise _err("gpu_nccl_env_file", "expected the dict gpu_nccl_env returns", profile)
    lines = [f"# NCCL profile: {profile.get('profile')} (chosen by the gpu_preflight role)"]
    lines += [f"# {note}" for note in profile.get("notes") or []]
    for item in profile["env"]:
        lines.append(f"# {item['why']}")
        lines.append(f"{item['name']}={item['value']}")
    return "\n".join(lines) + "\n"


def _busbw(result: Any, name: str) -> tuple[int, float]:
    if isinstance(result, str):
        lines = [line for line in result.splitlines() if line.strip().startswith("{")]
        if not lines:
            raise _err("gpu_nccl_bench_compare", f"{name}: no JSON line in the benchmark output", result)
        result = json.loads(lines[-1])
    rows = (result or {}).get("results") if isinstance(result, dict) else None
    if not rows:
        raise _err("gpu_nccl_bench_compare", f"{name}: no results", result)
    largest = max(rows, key=lambda row: row["bytes"])
    return int(largest["bytes"]), float(largest["busbw_gbps"])


def bench_compare(default: Any, chosen: Any, tolerance: float = 0.05) -> dict[str, Any]:
    """Compare bus bandwidth at the largest message size; slower when chosen < default*(1-tolerance)."""
    size, base = _busbw(default, "default")
    size_chosen, ours = _busbw(chosen, "chosen")
    if size != size_chosen:
        raise _err("gpu_nccl_bench_compare", "the two runs used different sizes", (size, size_chosen))
    ratio = ours / base if base else 0.0
    slower = ratio < 1.0 - float(tolerance)
    verdict = "SLOWER than" if slower else "within tolerance of"
    return {
        "bytes": size,
        "default_busbw_gbps": base,
        "chosen_busbw_gbps": ours,
        "ratio": round(ratio, 4),
        "slower": slower,
        "message": f"all-reduce {size / 2**20:.0f} MiB: chosen env {ours:.1f} GB/s, default {base:.1f} GB/s "
        f"(ratio {ratio:.3f}): chosen env is {verdict} the default ({tolerance:.0%})",
    }
