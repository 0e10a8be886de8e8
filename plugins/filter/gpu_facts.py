"""Filter plugin: maps filter names onto the pure functions of module_utils/gpu_facts.py."""

from __future__ import annotations

from typing import Any

from ansible_collections.llmdeploy.llm.plugins.module_utils.gpu_facts import (
    df,
    driver_proc_version,
    facts_from_probes,
    kernel_cmdline,
    lspci_acs,
    meminfo,
    nofile,
    nvcc_version,
    nvml_error,
    nvml_libraries,
    passwd_uid,
    python_version,
    smi_csv,
    smi_xml,
    tcp_listeners,
    topo_matrix,
    version_key,
)

DOCUMENTATION = r"""
name: gpu_facts
short_description: Parse nvidia-smi, /proc and shell probe outputs into GPU host facts
description:
  - C(gpu_smi_csv) parses C(nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]).
  - C(gpu_smi_xml) parses C(nvidia-smi -q -x).
  - C(gpu_topo_matrix) parses C(nvidia-smi topo -m) and summarises the interconnect.
  - C(gpu_driver_proc_version) parses C(/proc/driver/nvidia/version) (the kernel module).
  - C(gpu_nvml_libraries) reads user-space NVML versions from C(libnvidia-ml.so.X.Y.Z) file names.
  - C(gpu_nvml_error) recognises NVML start-up errors such as the driver/library version mismatch.
  - C(gpu_nvcc_version) parses C(nvcc --version).
  - C(gpu_df) parses C(df -P -B1 PATH); C(gpu_meminfo) parses C(/proc/meminfo);
    C(gpu_nofile) parses C(ulimit -Sn; ulimit -Hn); C(gpu_python_version) parses C(python3 --version).
  - C(gpu_tcp_listeners) parses C(/proc/net/tcp) and C(/proc/net/tcp6) for sockets listening on a port.
  - C(gpu_passwd_uid) parses one C(getent passwd USER) line.
  - C(gpu_kernel_cmdline) parses C(/proc/cmdline) for IOMMU/ACS/ASPM settings.
  - C(gpu_lspci_acs) lists PCI bridges whose ACS control redirects peer-to-peer traffic.
  - C(gpu_facts_from_probes) turns the whole probe dictionary of the role into C(gpu_preflight_facts).
"""

EXAMPLES = r"""
- name: Parse the GPU list
  ansible.builtin.set_fact:
    gpus: "{{ smi_csv.stdout | gpu_smi_csv }}"
- name: Interconnect summary
  ansible.builtin.debug:
    msg: "{{ (topo.stdout | gpu_topo_matrix).summary.kind }}"
"""

RETURN = r"""
_value:
  description: Plain dictionaries and lists; see each function's docstring.
  type: raw
"""


class FilterModule:
    """Map filter names to the parsers above."""

    def filters(self) -> dict[str, Any]:
        return {
            "gpu_smi_csv": smi_csv,
            "gpu_smi_xml": smi_xml,
            "gpu_topo_matrix": topo_matrix,
            "gpu_driver_proc_version": driver_proc_version,
            "gpu_nvml_libraries": nvml_libraries,
            "gpu_nvml_error": nvml_error,
            "gpu_nvcc_version": nvcc_version,
            "gpu_version_key": version_key,
            "gpu_df": df,
            "gpu_meminfo": meminfo,
            "gpu_nofile": nofile,
            "gpu_python_version": python_version,
            "gpu_tcp_listeners": tcp_listeners,
            "gpu_passwd_uid": passwd_uid,
            "gpu_kernel_cmdline": kernel_cmdline,
            "gpu_lspci_acs": lspci_acs,
            "gpu_facts_from_probes": facts_from_probes,
        }
