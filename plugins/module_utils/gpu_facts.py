"""Parsers for the read-only probes of the gpu_preflight role.

Every function takes the text a command printed and returns plain data. They never run commands:
the role runs them (or reads recorded outputs from a fixture directory) and passes stdout here.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from ansible.errors import AnsibleFilterError

# Order of link kinds from best to worst, as nvidia-smi topo -m documents them.
LINK_RANK = {"NV": 0, "PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NUM = re.compile(r"^\s*(-?\d+(?:\.\d+)?)")


def _err(name: str, message: str, value: Any) -> AnsibleFilterError:
    shown = repr(value)
    if len(shown) > 200:
        shown = shown[:200] + "..."
    return AnsibleFilterError(f"{name}: {message} (got {shown})")


def _text(name: str, value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _err(name, "expected the text a command printed", value)
    return value


def _number(value: str) -> float | None:
    match = _NUM.match(value)
    return float(match.group(1)) if match else None


def _int_or_none(value: str | None) -> int | None:
    if value is None:
        return None
    number = _number(value)
    return int(number) if number is not None else None


def _na(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    return None if value in ("", "N/A", "[N/A]", "[Not Supported]", "Not Supported") else value


# --------------------------------------------------------------------------------------------------
# nvidia-smi
# --------------------------------------------------------------------------------------------------

_CSV_KEYS = {
    "index": "index",
    "name": "name",
    "uuid": "uuid",
    "pci.bus_id": "pci_bus_id",
    "memory.total": "memory_total_mib",
    "memory.used": "memory_used_mib",
    "memory.free": "memory_free_mib",
    "compute_cap": "compute_capability",
    "driver_version": "driver_version",
    "power.limit": "power_limit_w",
    "pcie.link.gen.max": "pcie_gen_max",
    "pcie.link.width.max": "pcie_width_max",
    "pcie.link.gen.current": "pcie_gen_current",
    "pcie.link.width.current": "pcie_width_current",
    "persistence_mode": "persistence_mode",
    "mig.mode.current": "mig_mode_current",
    "ecc.mode.current": "ecc_mode_current",
}
_CSV_INT = {"index", "memory_total_mib", "memory_used_mib", "memory_free_mib"}
_CSV_INT |= {"pcie_gen_max", "pcie_width_max", "pcie_gen_current", "pcie_width_current"}


def smi_csv(text: str, fields: list[str] | None = None) -> list[dict[str, Any]]:
    """Rows of `nvidia-smi --query-gpu` CSV output, keyed by snake_case names.

    With a header line (`--format=csv`) the field names come from it and unit suffixes such as
    ` [MiB]` are dropped; with `noheader`, pass the queried field names as `fields`.
    Numbers keep their unit out (`143771 MiB` -> 143771). Unknown fields keep their dotted name.
    """
    text = _text("gpu_smi_csv", text)
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    if fields is None:
        header = [re.sub(r"\s*\[.*\]$", "", cell.strip()) for cell in lines[0].split(",")]
        if "index" not in header and "name" not in header:
            raise _err("gpu_smi_csv", "no header line; pass fields= for noheader output", lines[0])
        fields, lines = header, lines[1:]
    rows = []
    for line in lines:
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != len(fields):
            raise _err("gpu_smi_csv", f"expected {len(fields)} columns", line)
        row: dict[str, Any] = {}
        for field, cell in zip(fields, cells, strict=True):
            key = _CSV_KEYS.get(field, field)
            value: Any = _na(cell)
            if value is not None and key in _CSV_INT:
                value = _int_or_none(value)
            elif value is not None and key == "power_limit_w":
                value = _number(value)
            row[key] = value
        rows.append(row)
    return rows


def _find(node: ET.Element, path: str) -> str | None:
    found = node.find(path)
    if found is None or found.text is None:
        return None
    return _na(found.text)


def _enabled(value: str | None) -> bool | None:
    if value is None:
        return None
    return value.strip().lower() == "enabled"


def smi_xml(text: str) -> dict[str, Any]:
    """Driver, CUDA and per-GPU state from `nvidia-smi -q -x`.

    Returns driver_version, cuda_version (the newest CUDA the driver supports) and gpus: a list
    with pci_bus_id, name, architecture, uuid, minor_number, memory_total_mib, persistence_mode,
    mig_current/mig_pending, ecc_current/ecc_pending, pcie gen/width (max and current), and the
    NVLink fabric state/status (N/A -> None on hosts without a fabric).
    """
    text = _text("gpu_smi_xml", text)
    try:
        root = ET.fromstring(text.strip())
    except ET.ParseError as exc:
        raise _err("gpu_smi_xml", f"not nvidia-smi -q -x output: {exc}", text) from exc
    if root.tag != "nvidia_smi_log":
        raise _err("gpu_smi_xml", "root element is not nvidia_smi_log", root.tag)
    gpus = []
    for gpu in root.findall("gpu"):
        width_max = _find(gpu, "pci/pci_gpu_link_info/link_widths/max_link_width")
        width_cur = _find(gpu, "pci/pci_gpu_link_info/link_widths/current_link_width")
        gpus.append(
            {
                "pci_bus_id": gpu.get("id"),
                "name": _find(gpu, "product_name"),
                "architecture": _find(gpu, "product_architecture"),
                "uuid": _find(gpu, "uuid"),
                "minor_number": _int_or_none(_find(gpu, "minor_number")),
                "memory_total_mib": _int_or_none(_find(gpu, "fb_memory_usage/total")),
                "persistence_mode": _enabled(_find(gpu, "persistence_mode")),
                "mig_current": _find(gpu, "mig_mode/current_mig"),
                "mig_pending": _find(gpu, "mig_mode/pending_mig"),
                "ecc_current": _find(gpu, "ecc_mode/current_ecc"),
                "ecc_pending": _find(gpu, "ecc_mode/pending_ecc"),
                "pcie_gen_max": _int_or_none(_find(gpu, "pci/pci_gpu_link_info/pcie_gen/max_link_gen")),
                "pcie_gen_current": _int_or_none(
                    _find(gpu, "pci/pci_gpu_link_info/pcie_gen/current_link_gen")
                ),
                "pcie_width_max": _int_or_none(width_max),
                "pcie_width_current": _int_or_none(width_cur),
                "fabric_state": _find(gpu, "fabric/state"),
                "fabric_status": _find(gpu, "fabric/status"),
            }
        )
    return {
        "driver_version": _find(root, "driver_version"),
        "cuda_version": _find(root, "cuda_version"),
        "attached_gpus": _int_or_none(_find(root, "attached_gpus")),
        "gpus": gpus,
    }


def _link_kind(cell: str) -> str:
    return "NV" if re.fullmatch(r"NV\d+", cell) else cell


def topo_summary(matrix: dict[str, dict[str, str]], numa: dict[str, str | None]) -> dict[str, Any]:
    """Classify the GPU-to-GPU links of a topo matrix.

    kind is one of single_gpu, nvlink_all_pairs, nvlink_partial, pcie_switch (PIX/PXB only),
    pcie_host_bridge (worst PHB/NODE: one socket), pcie_cross_socket (some pair is SYS).
    """
    gpus = sorted(matrix, key=lambda name: int(name[3:]))
    pairs = [(a, b, matrix[a][b]) for i, a in enumerate(gpus) for b in gpus[i + 1 :]]
    kinds = sorted({_link_kind(cell) for _, _, cell in pairs}, key=lambda k: LINK_RANK.get(k, 9))
    worst = kinds[-1] if kinds else None
    nv_pairs = sum(1 for _, _, cell in pairs if _link_kind(cell) == "NV")
    if not pairs:
        kind = "single_gpu"
    elif nv_pairs == len(pairs):
        kind = "nvlink_all_pairs"
    elif nv_pairs:
        kind = "nvlink_partial"
    elif worst == "SYS":
        kind = "pcie_cross_socket"
    elif worst in ("PHB", "NODE"):
        kind = "pcie_host_bridge"
    else:
        kind = "pcie_switch"
    numa_nodes = sorted({value for value in numa.values() if value is not None})
    return {
        "kind": kind,
        "gpu_pairs": len(pairs),
        "nvlink_pairs": nv_pairs,
        "all_pairs_nvlink": bool(pairs) and nv_pairs == len(pairs),
        "pcie_only": bool(pairs) and nv_pairs == 0,
        "cross_socket": any(_link_kind(cell) == "SYS" for _, _, cell in pairs),
        "link_kinds": kinds,
        "worst_link": worst,
        "numa_nodes": numa_nodes,
    }


def topo_matrix(text: str) -> dict[str, Any]:
    """Parse `nvidia-smi topo -m`.

    Returns matrix (GPUi -> GPUj -> cell, e.g. NV18, PIX, SYS), nics (NIC rows, if any, same shape
    for their GPU columns), cpu_affinity and numa_affinity per GPU (None for N/A), and summary
    (see topo_summary).
    """
    text = _text("gpu_topo_matrix", text)
    lines = [_ANSI.sub("", line) for line in text.splitlines()]
    header_at = next((i for i, line in enumerate(lines) if re.match(r"^\s+GPU0\b", line)), None)
    if header_at is None:
        raise _err("gpu_topo_matrix", "no header line starting with GPU0", text)
    header = [cell.strip() for cell in lines[header_at].split("\t") if cell.strip()]
    devices = [cell for cell in header if re.fullmatch(r"(GPU|NIC)\d+", cell)]
    extra = header[len(devices) :]
    matrix: dict[str, dict[str, str]] = {}
    nics: dict[str, dict[str, str]] = {}
    cpu: dict[str, str | None] = {}
    numa: dict[str, str | None] = {}
    for line in lines[header_at + 1 :]:
        if not line.strip() or line.startswith("Legend"):
            break
        cells = line.split("\t")
        label = cells[0].strip()
        if not re.fullmatch(r"(GPU|NIC)\d+", label):
            continue
        values = [cell.strip() for cell in cells[1 : 1 + len(devices)]]
        if len(values) != len(devices):
            raise _err("gpu_topo_matrix", f"row {label} has fewer than {len(devices)} cells", line)
        row = {dev: val for dev, val in zip(devices, values, strict=True) if dev != label}
        rest = [cell.strip() for cell in cells[1 + len(devices) :] if cell.strip()]
        info = dict(zip(extra, rest, strict=False))
        if label.startswith("GPU"):
            matrix[label] = {dev: val for dev, val in row.items() if dev.startswith("GPU")}
            cpu[label] = _na(info.get("CPU Affinity"))
            numa[label] = _na(info.get("NUMA Affinity"))
        else:
            nics[label] = {dev: val for dev, val in row.items() if dev.startswith("GPU")}
    if not matrix:
        raise _err("gpu_topo_matrix", "no GPU rows", text)
    return {
        "matrix": matrix,
        "nics": nics,
        "cpu_affinity": cpu,
        "numa_affinity": numa,
        "summary": topo_summary(matrix, numa),
    }


# --------------------------------------------------------------------------------------------------
# Driver versions
# --------------------------------------------------------------------------------------------------


def driver_proc_version(text: str) -> dict[str, Any]:
    """Kernel module version and flavour from /proc/driver/nvidia/version (absent -> None)."""
    text = _text("gpu_driver_proc_version", text)
    match = re.search(r"NVRM version:\s*(.*?)\s+(\d+\.\d+(?:\.\d+)?)\s", text + " ")
    if not match:
        return {"version": None, "open_kernel_module": None, "banner": None}
    banner = match.group(1)
    return {
        "version": match.group(2),
        "open_kernel_module": "Open Kernel Module" in banner,
        "banner": banner,
    }


def nvml_libraries(text: str) -> list[str]:
    """Sorted distinct versions of libnvidia-ml.so.X.Y[.Z] files named in a listing."""
    text = _text("gpu_nvml_libraries", text)
    found = set(re.findall(r"libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)\b", text))
    return sorted(found, key=version_key)


def nvml_error(text: str) -> dict[str, Any]:
    """Recognise an NVML start-up failure in nvidia-smi's output.

    mismatch is True for "Driver/library version mismatch" (the user-space library was upgraded
    and the old kernel module is still loaded: a reboot or module reload is needed);
    library_version is the "NVML library version: X" nvidia-smi prints with it.
    """
    text = _text("gpu_nvml_error", text)
    error = re.search(r"^(Failed to initialize NVML: .*|NVIDIA-SMI has failed because .*)$", text, re.M)
    library = re.search(r"NVML library version:\s*([\d.]+)", text)
    return {
        "error": error.group(1).strip() if error else None,
        "mismatch": bool(re.search(r"Driver/library version mismatch", text)),
        "library_version": library.group(1) if library else None,
    }


def nvcc_version(text: str) -> str | None:
    """Toolkit release (e.g. '13.0') from `nvcc --version`, or None when nvcc is absent."""
    text = _text("gpu_nvcc_version", text)
    match = re.search(r"release (\d+\.\d+)", text)
    return match.group(1) if match else None


def version_key(version: str) -> tuple[int, ...]:
    """Sortable tuple of a dotted version ('580.159.04' -> (580, 159, 4))."""
    if not isinstance(version, str) or not re.fullmatch(r"\d+(\.\d+)*", version.strip()):
        raise _err("gpu_version_key", "not a dotted numeric version", version)
    return tuple(int(part) for part in version.strip().split("."))


# --------------------------------------------------------------------------------------------------
# Host resources
# --------------------------------------------------------------------------------------------------


def df(text: str) -> dict[str, Any]:
    """`df -P -B1 PATH` -> size_bytes, avail_bytes and the mount point."""
    text = _text("gpu_df", text)
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) < 2 or not lines[0].startswith("Filesystem"):
        raise _err("gpu_df", "expected `df -P -B1` output with a header", text)
    cells = lines[-1].split()
    if len(cells) < 6:
        raise _err("gpu_df", "data line has fewer than 6 columns", lines[-1])
    return {
        "filesystem": cells[0],
        "size_bytes": int(cells[1]),
        "avail_bytes": int(cells[3]),
        "mount": " ".join(cells[5:]),
    }


def meminfo(text: str) -> dict[str, int | None]:
    """/proc/meminfo -> total_bytes and available_bytes."""
    text = _text("gpu_meminfo", text)
    values = {}
    for key in ("MemTotal", "MemAvailable"):
        match = re.search(rf"^{key}:\s+(\d+)\s*kB", text, re.M)
        values[key] = int(match.group(1)) * 1024 if match else None
    return {"total_bytes": values["MemTotal"], "available_bytes": values["MemAvailable"]}


def nofile(text: str) -> dict[str, int | None]:
    """Two lines, `ulimit -Sn` then `ulimit -Hn`; 'unlimited' -> None."""
    text = _text("gpu_nofile", text)
    cells = text.split()
    if len(cells) != 2:
        raise _err("gpu_nofile", "expected two lines: soft and hard open-file limit", text)
    parsed = [None if cell == "unlimited" else int(cell) for cell in cells]
    return {"soft": parsed[0], "hard": parsed[1]}


def python_version(text: str) -> str | None:
    """'Python 3.12.3' -> '3.12.3'."""
    text = _text("gpu_python_version", text)
    match = re.search(r"Python (\d+\.\d+(?:\.\d+)?)", text)
    return match.group(1) if match else None


def _hex_address(value: str) -> str:
    if len(value) == 8:
        packed = bytes.fromhex(value)[::-1]
        return ".".join(str(b) for b in packed)
    if len(value) == 32:
        words = [bytes.fromhex(value[i : i + 8])[::-1].hex() for i in range(0, 32, 8)]
        joined = "".join(words)
        return ":".join(joined[i : i + 4] for i in range(0, 32, 4))
    raise _err("gpu_tcp_listeners", "unexpected address width", value)


def tcp_listeners(text: str, port: int) -> list[dict[str, Any]]:
    """Sockets in LISTEN state on `port` from /proc/net/tcp and/or /proc/net/tcp6 text.

    Each item: address (dotted or full IPv6 hex groups), uid (the owner), inode.
    """
    text = _text("gpu_tcp_listeners", text)
    if not isinstance(port, int) or not 0 < port < 65536:
        raise _err("gpu_tcp_listeners", "port must be an integer 1-65535", port)
    found = []
    for line in text.splitlines():
        cells = line.split()
        if len(cells) < 10 or not cells[0].endswith(":") or cells[3] != "0A":
            continue
        address, _, hex_port = cells[1].partition(":")
        if int(hex_port, 16) != port:
            continue
        found.append({"address": _hex_address(address), "uid": int(cells[7]), "inode": int(cells[9])})
    return found


def passwd_uid(text: str) -> int | None:
    """uid from one `getent passwd USER` line; None when the user does not exist."""
    text = _text("gpu_passwd_uid", text)
    cells = text.strip().split(":")
    if len(cells) < 3 or not cells[2].isdigit():
        return None
    return int(cells[2])


def kernel_cmdline(text: str) -> dict[str, Any]:
    """IOMMU, ACS and PCIe power settings on the kernel command line.

    iommu_mode: 'off' (iommu=off or intel_iommu/amd_iommu=off), 'passthrough' (iommu=pt or
    amd_iommu=pt), 'on' (intel_iommu=on/amd_iommu=on/force without pt), or None (kernel default).
    """
    text = _text("gpu_kernel_cmdline", text)
    params: dict[str, str] = {}
    for token in text.split():
        key, _, value = token.partition("=")
        params[key] = value
    iommu = params.get("iommu")
    vendor = [params.get("intel_iommu"), params.get("amd_iommu")]
    mode = None
    if iommu == "off" or "off" in vendor:
        mode = "off"
    elif iommu == "pt" or "pt" in vendor:
        mode = "passthrough"
    elif any(v in ("on", "force") for v in vendor) or iommu in ("force", "on"):
        mode = "on"
    return {
        "iommu_mode": mode,
        "iommu_params": {k: params[k] for k in ("iommu", "intel_iommu", "amd_iommu") if k in params},
        "pci": params.get("pci"),
        "pcie_aspm": params.get("pcie_aspm"),
        "pcie_acs_override": params.get("pcie_acs_override"),
    }


def lspci_acs(text: str) -> list[dict[str, str]]:
    """Bridges whose ACSCtl redirects P2P (ReqRedir+ or CmpltRedir+) in `lspci -vvv` text.

    Works on the full output or a `grep -E '^[0-9a-f]|ACSCtl'` excerpt of it.
    """
    text = _text("gpu_lspci_acs", text)
    device = None
    found = []
    for line in text.splitlines():
        head = re.match(r"^([0-9a-fA-F:.]+)\s+(.*)$", line)
        if head and not line.startswith(("\t", " ")):
            device = {"bdf": head.group(1), "description": head.group(2)}
            continue
        if "ACSCtl:" in line and device and re.search(r"(ReqRedir|CmpltRedir)\+", line):
            found.append({**device, "acs_ctl": line.split("ACSCtl:", 1)[1].strip()})
    return found


# --------------------------------------------------------------------------------------------------
# All probes -> one facts dictionary
# --------------------------------------------------------------------------------------------------


def _probe(probes: dict[str, Any], name: str) -> tuple[int, str, str]:
    result = probes.get(name) or {}
    if not isinstance(result, dict):
        raise _err("gpu_facts_from_probes", f"probe {name} must be a dict with rc/stdout/stderr", result)
    rc = result.get("rc")
    # A command that cannot be started leaves rc 2 and the reason in msg (Ansible's command module).
    err = "\n".join(str(result.get(key)) for key in ("stderr", "msg") if result.get(key))
    return (127 if rc is None else int(rc), result.get("stdout") or "", err)


def _merge_gpus(rows: list[dict[str, Any]], xml: dict[str, Any], topo: dict[str, Any] | None) -> list:
    by_bus = {gpu["pci_bus_id"]: gpu for gpu in xml.get("gpus", [])}
    gpus = []
    for row in rows:
        detail = by_bus.get(row.get("pci_bus_id"), {})
        label = f"GPU{row.get('index')}"
        mig = detail.get("mig_current")
        ecc = detail.get("ecc_current")
        gpus.append(
            {
                "index": row.get("index"),
                "name": row.get("name"),
                "uuid": row.get("uuid"),
                "pci_bus_id": row.get("pci_bus_id"),
                "memory_total_mib": row.get("memory_total_mib"),
                "compute_capability": row.get("compute_capability"),
                "architecture": detail.get("architecture"),
                "persistence_mode": detail.get("persistence_mode"),
                "mig_mode": mig,
                "mig_enabled": mig is not None and mig.lower() == "enabled",
                "mig_pending": detail.get("mig_pending"),
                "ecc_mode": ecc,
                "pcie_gen_max": detail.get("pcie_gen_max", row.get("pcie_gen_max")),
                "pcie_gen_current": detail.get("pcie_gen_current"),
                "pcie_width_max": detail.get("pcie_width_max", row.get("pcie_width_max")),
                "pcie_width_current": detail.get("pcie_width_current"),
                "fabric_state": detail.get("fabric_state"),
                "fabric_status": detail.get("fabric_status"),
                "cpu_affinity": (topo or {}).get("cpu_affinity", {}).get(label),
                "numa_node": (topo or {}).get("numa_affinity", {}).get(label),
            }
        )
    return gpus


def _fabric(gpus: list[dict[str, Any]], switches: list[str], service: tuple[int, str]) -> dict[str, Any]:
    states = [g["fabric_state"] for g in gpus if g.get("fabric_state") is not None]
    needed = bool(switches) or bool(states)
    service_rc, service_out = service
    service_state = service_out.strip() if service_rc in (0, 3) and service_out.strip() else None
    if not needed:
        state = "not_needed"
    elif states:
        # Hopper and newer report the fabric per GPU: Completed/Success once the fabric manager
        # registered it; In Progress / Not Started while it is down or still starting.
        ok = all(g["fabric_state"] == "Completed" and g["fabric_status"] == "Success" for g in gpus)
        state = "ok" if ok else "down"
    elif service_state is not None:
        state = "ok" if service_state == "active" else "down"
    else:
        state = "unknown"
    return {
        "nvswitch_host": needed,
        "nvswitch_devices": switches,
        "gpu_fabric_states": [f"{g['fabric_state']}/{g['fabric_status']}" for g in gpus if g["fabric_state"]],
        "service_state": service_state,
        "state": state,
    }


def facts_from_probes(probes: dict[str, Any], port: int = 8000) -> dict[str, Any]:
    """Build gpu_preflight_facts from the role's probe results (name -> {rc, stdout, stderr}).

    Probe names: smi_csv, smi_xml, smi_topo, driver_proc, nvml_libs, nvswitch, fabricmanager,
    nvcc, cmdline, iommu_class, lspci_acs, meminfo, df, nofile, python, tcp, service_user.
    A probe that is missing or failed yields None/empty values, never an exception, so that the
    checks can name what is missing.
    """
    if not isinstance(probes, dict):
        raise _err("gpu_facts_from_probes", "expected a dict of probe results", probes)
    csv_rc, csv_out, csv_err = _probe(probes, "smi_csv")
    nvml = nvml_error(csv_out + "\n" + csv_err)
    rows = smi_csv(csv_out) if csv_rc == 0 and csv_out.strip() else []
    xml_rc, xml_out, _ = _probe(probes, "smi_xml")
    xml = smi_xml(xml_out) if xml_rc == 0 and xml_out.strip().startswith("<?xml") else {"gpus": []}
    topo_rc, topo_out, _ = _probe(probes, "smi_topo")
    topo = topo_matrix(topo_out) if topo_rc == 0 and "GPU0" in topo_out else None
    gpus = _merge_gpus(rows, xml, topo)

    proc = driver_proc_version(_probe(probes, "driver_proc")[1])
    libraries = nvml_libraries(_probe(probes, "nvml_libs")[1])
    kernel = proc["version"]
    mismatch = nvml["mismatch"] or bool(kernel and libraries and kernel not in libraries)
    if csv_rc == 0 and rows:
        error = None
    elif nvml["error"]:
        error = nvml["error"]
    elif csv_rc == 127 or "No such file" in csv_err or "Error executing command" in csv_err:
        error = f"nvidia-smi could not be run: not installed or not on PATH (rc {csv_rc})"
    else:
        error = (csv_err or csv_out).strip() or f"nvidia-smi exited with {csv_rc}"

    switches = [line.strip() for line in _probe(probes, "nvswitch")[1].splitlines() if line.strip()]
    fm_rc, fm_out, _ = _probe(probes, "fabricmanager")
    cmd = kernel_cmdline(_probe(probes, "cmdline")[1])
    iommu_devices = [line for line in _probe(probes, "iommu_class")[1].splitlines() if line.strip()]
    df_rc, df_out, df_err = _probe(probes, "df")
    nofile_rc, nofile_out, _ = _probe(probes, "nofile")
    py_rc, py_out, py_err = _probe(probes, "python")
    user_rc, user_out, _ = _probe(probes, "service_user")
    nvcc_rc, nvcc_out, _ = _probe(probes, "nvcc")
    models = sorted({g["name"] for g in gpus if g["name"]})
    return {
        "driver_present": error is None,
        "driver_error": error,
        "driver_version": (rows[0]["driver_version"] if rows else None) or xml.get("driver_version"),
        "cuda_driver_version": xml.get("cuda_version"),
        "toolkit_version": nvcc_version(nvcc_out) if nvcc_rc == 0 else None,
        "kernel_module_version": kernel,
        "open_kernel_module": proc["open_kernel_module"],
        "nvml_library_versions": libraries or ([nvml["library_version"]] if nvml["library_version"] else []),
        "nvml_mismatch": mismatch,
        "gpu_count": len(gpus),
        "gpu_models": models,
        "gpus": gpus,
        "topology": topo,
        "fabric": _fabric(gpus, switches, (fm_rc, fm_out)),
        "iommu": {
            **cmd,
            "active_units": iommu_devices,
            "acs_redirect": lspci_acs(_probe(probes, "lspci_acs")[1]),
        },
        "disk": df(df_out) if df_rc == 0 else {"error": df_err.strip() or df_out.strip() or f"rc {df_rc}"},
        "memory": meminfo(_probe(probes, "meminfo")[1]),
        "nofile": nofile(nofile_out) if nofile_rc == 0 else {"soft": None, "hard": None},
        "python_version": python_version(py_out + py_err) if py_rc == 0 else None,
        "port": {
            "port": port,
            "listeners": tcp_listeners(_probe(probes, "tcp")[1], port),
            "service_uid": passwd_uid(user_out) if user_rc == 0 else None,
        },
    }
