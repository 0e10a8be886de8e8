"""Parsers of plugins/module_utils/gpu_facts.py on the real recorded outputs (../shared/fixtures/h200x2 and
tests/fixtures/h200x2_run, recorded by the role on the lent 2x H200 machine), the real no-driver
recording and the hand-written 8x RTX PRO 6000 fixture."""

from __future__ import annotations

import json

import _collection
import pytest
from _gpu_probe_fixtures import FIXTURES, gpu_facts, load_probes, shared_file, smi_sections
from ansible.errors import AnsibleFilterError

CSV_FULL = (
    "nvidia-smi --query-gpu=index,name,uuid,memory.total,memory.used,memory.free,compute_cap,"
    "driver_version,pci.bus_id,power.limit,pcie.link.gen.max,pcie.link.width.max --format=csv"
)
CSV_BARE = (
    "nvidia-smi --query-gpu=index,name,memory.total,compute_cap,driver_version --format=csv,noheader,nounits"
)


# ------------------------------------------------------------------ shared/fixtures/h200x2, as recorded


def test_shared_csv_with_header_and_units() -> None:
    rows = gpu_facts.smi_csv(smi_sections()[CSV_FULL])
    assert [r["index"] for r in rows] == [0, 1]
    assert {r["name"] for r in rows} == {"NVIDIA H200"}
    assert rows[0]["uuid"] == "GPU-c5a16fcb-f8b2-6bf0-eebf-088ae96fb442"
    assert rows[1]["pci_bus_id"] == "00000000:00:07.0"
    assert rows[0]["memory_total_mib"] == 143771
    assert rows[0]["memory_free_mib"] == 143156
    assert rows[0]["compute_capability"] == "9.0"
    assert rows[0]["driver_version"] == "580.159.04"
    assert rows[0]["power_limit_w"] == 700.0
    assert (rows[0]["pcie_gen_max"], rows[0]["pcie_width_max"]) == (5, 16)


def test_shared_csv_noheader_nounits_needs_field_names() -> None:
    text = smi_sections()[CSV_BARE]
    rows = gpu_facts.smi_csv(text, fields=["index", "name", "memory.total", "compute_cap", "driver_version"])
    assert rows == [
        {
            "index": i,
            "name": "NVIDIA H200",
            "memory_total_mib": 143771,
            "compute_capability": "9.0",
            "driver_version": "580.159.04",
        }
        for i in (0, 1)
    ]
    with pytest.raises(AnsibleFilterError, match="gpu_smi_csv: no header line"):
        gpu_facts.smi_csv(text)


def test_shared_topology_is_nvlink_all_pairs() -> None:
    topo = gpu_facts.topo_matrix(smi_sections()["nvidia-smi topo -m"])
    assert topo["matrix"] == {"GPU0": {"GPU1": "NV18"}, "GPU1": {"GPU0": "NV18"}}
    assert topo["cpu_affinity"] == {"GPU0": "0-31", "GPU1": "0-31"}
    assert topo["numa_affinity"] == {"GPU0": "0", "GPU1": "0"}
    summary = topo["summary"]
    assert summary["kind"] == "nvlink_all_pairs"
    assert summary["all_pairs_nvlink"] and not summary["pcie_only"] and not summary["cross_socket"]
    assert summary["numa_nodes"] == ["0"]


def test_shared_versions() -> None:
    sections = smi_sections()
    assert gpu_facts.nvcc_version(sections["nvcc --version"]) == "13.0"
    proc = gpu_facts.driver_proc_version(sections["cat /proc/driver/nvidia/version"])
    assert proc["version"] == "580.159.04"
    assert proc["open_kernel_module"] is True
    assert gpu_facts.python_version(sections["python3 --version"]) == "3.12.3"


def test_shared_xml() -> None:
    xml = gpu_facts.smi_xml(shared_file("smi_q.xml"))
    assert (xml["driver_version"], xml["cuda_version"], xml["attached_gpus"]) == ("580.159.04", "13.0", 2)
    first = xml["gpus"][0]
    assert first["pci_bus_id"] == "00000000:00:06.0"
    assert first["architecture"] == "Hopper"
    assert first["memory_total_mib"] == 143771
    assert first["persistence_mode"] is True
    assert (first["mig_current"], first["ecc_current"]) == ("Disabled", "Enabled")
    assert (first["pcie_gen_current"], first["pcie_width_current"]) == (5, 16)
    assert (first["fabric_state"], first["fabric_status"]) == ("Completed", "Success")


def test_shared_xml_agrees_with_the_text_report() -> None:
    text = shared_file("smi_q.txt")
    xml = gpu_facts.smi_xml(shared_file("smi_q.xml"))
    assert text.count("Persistence Mode                                   : Enabled") == len(xml["gpus"])
    assert "CUDA Version                                           : 13.0" in text


# ------------------------------------------------ tests/fixtures/h200x2_run (the role recorded it)


def test_role_recording_parses_to_the_facts_recorded_on_the_gpu_host() -> None:
    recorded = json.loads((FIXTURES / "h200x2_run" / "facts.json").read_text())
    facts = gpu_facts.facts_from_probes(load_probes("h200x2_run"), port=8000)
    assert json.loads(json.dumps(facts)) == recorded


def test_role_recording_facts() -> None:
    facts = gpu_facts.facts_from_probes(load_probes("h200x2_run"), port=8000)
    assert facts["driver_present"] and facts["driver_error"] is None
    assert (facts["gpu_count"], facts["gpu_models"]) == (2, ["NVIDIA H200"])
    assert (facts["driver_version"], facts["cuda_driver_version"], facts["toolkit_version"]) == (
        "580.159.04",
        "13.0",
        "13.0",
    )
    assert facts["kernel_module_version"] == "580.159.04"
    assert facts["nvml_library_versions"] == ["580.159.04"]
    assert facts["nvml_mismatch"] is False
    gpu = facts["gpus"][1]
    assert gpu["compute_capability"] == "9.0" and gpu["numa_node"] == "0" and gpu["cpu_affinity"] == "0-31"
    assert gpu["mig_enabled"] is False and gpu["ecc_mode"] == "Enabled" and gpu["persistence_mode"] is True
    assert facts["topology"]["summary"]["kind"] == "nvlink_all_pairs"
    assert facts["fabric"]["nvswitch_host"] and facts["fabric"]["state"] == "ok"
    assert facts["disk"] == {
        "filesystem": "/dev/vda",
        "size_bytes": 270553174016,
        "avail_bytes": 137378267136,
        "mount": "/",
    }
    assert facts["memory"]["total_bytes"] > 200 * 2**30
    assert facts["nofile"] == {"soft": 20000, "hard": 20000}
    assert facts["python_version"] == "3.12.3"
    assert facts["port"] == {"port": 8000, "listeners": [], "service_uid": None}
    assert facts["iommu"]["iommu_mode"] is None and facts["iommu"]["acs_redirect"] == []


def test_role_recording_same_hardware_as_the_shared_recording() -> None:
    run = gpu_facts.smi_xml((FIXTURES / "h200x2_run" / "smi_xml.stdout").read_text())
    shared = gpu_facts.smi_xml(shared_file("smi_q.xml"))
    keys = ("name", "memory_total_mib", "pcie_gen_max", "pcie_width_max", "mig_current", "ecc_current")
    assert [[g[k] for k in keys] for g in run["gpus"]] == [[g[k] for k in keys] for g in shared["gpus"]]
    assert run["driver_version"] == shared["driver_version"]


def test_tcp_listener_on_another_port() -> None:
    tcp = (FIXTURES / "h200x2_run" / "tcp.stdout").read_text()
    assert gpu_facts.tcp_listeners(tcp, 2024) == [{"address": "0.0.0.0", "uid": 0, "inode": 4576}]
    assert gpu_facts.tcp_listeners(tcp, 8099) == []  # 0x1FA3 is in state 06 (TIME_WAIT), not LISTEN


# ------------------------------------------------ no driver (real), hand-written RTX PRO 6000


def test_no_driver_recording() -> None:
    facts = gpu_facts.facts_from_probes(load_probes("no_driver"))
    assert facts["driver_present"] is False
    assert "nvidia-smi could not be run" in facts["driver_error"]
    assert facts["gpu_count"] == 0 and facts["topology"] is None
    assert facts["kernel_module_version"] is None
    assert facts["toolkit_version"] == "13.0"  # that machine has the toolkit but no driver
    assert facts["disk"]["avail_bytes"] > 0


def test_rtx_pro_6000_handwritten() -> None:
    facts = gpu_facts.facts_from_probes(load_probes("rtx_pro_6000_x8"))
    assert facts["gpu_count"] == 8
    assert facts["gpu_models"] == ["NVIDIA RTX PRO 6000 Blackwell Workstation Edition"]
    assert {g["compute_capability"] for g in facts["gpus"]} == {"12.0"}
    assert [g["numa_node"] for g in facts["gpus"]] == ["0"] * 4 + ["1"] * 4
    summary = facts["topology"]["summary"]
    assert summary["kind"] == "pcie_cross_socket" and summary["pcie_only"] and summary["cross_socket"]
    assert summary["link_kinds"] == ["NODE", "SYS"] and summary["gpu_pairs"] == 28
    assert facts["toolkit_version"] is None
    assert facts["fabric"]["state"] == "not_needed" and facts["fabric"]["service_state"] == "inactive"
    assert facts["iommu"]["active_units"] == ["ivhd0", "ivhd1", "ivhd2", "ivhd3"]
    assert [b["bdf"] for b in facts["iommu"]["acs_redirect"]] == ["00:01.1"]
    assert facts["port"]["service_uid"] == 998
    assert facts["nofile"] == {"soft": 1024, "hard": 1048576}


# ------------------------------------------------------------------ edge cases and errors


def test_nvml_mismatch_message() -> None:
    text = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.95\n"
    assert gpu_facts.nvml_error(text) == {
        "error": "Failed to initialize NVML: Driver/library version mismatch",
        "mismatch": True,
        "library_version": "580.95",
    }
    assert gpu_facts.nvml_error("")["error"] is None


def test_driver_not_loaded_message() -> None:
    text = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure ..."
    got = gpu_facts.nvml_error(text)
    assert got["error"].startswith("NVIDIA-SMI has failed") and got["mismatch"] is False


def test_topology_kinds() -> None:
    def kind(cells: dict[str, str]) -> str:
        matrix = {"GPU0": {"GPU1": cells["01"]}, "GPU1": {"GPU0": cells["01"]}}
        return gpu_facts.topo_summary(matrix, {"GPU0": "0", "GPU1": None})["kind"]

    assert kind({"01": "PIX"}) == "pcie_switch"
    assert kind({"01": "PHB"}) == "pcie_host_bridge"
    assert kind({"01": "SYS"}) == "pcie_cross_socket"
    assert gpu_facts.topo_summary({"GPU0": {}}, {})["kind"] == "single_gpu"
    partial = {
        "GPU0": {"GPU1": "NV4", "GPU2": "SYS"},
        "GPU1": {"GPU0": "NV4", "GPU2": "SYS"},
        "GPU2": {"GPU0": "SYS", "GPU1": "SYS"},
    }
    assert gpu_facts.topo_summary(partial, {})["kind"] == "nvlink_partial"


def test_kernel_cmdline_iommu_modes() -> None:
    assert gpu_facts.kernel_cmdline("ro amd_iommu=on iommu=pt")["iommu_mode"] == "passthrough"
    assert gpu_facts.kernel_cmdline("ro intel_iommu=on")["iommu_mode"] == "on"
    assert gpu_facts.kernel_cmdline("ro iommu=off pcie_aspm=off")["iommu_mode"] == "off"
    assert gpu_facts.kernel_cmdline("ro pcie_aspm=off")["pcie_aspm"] == "off"


def test_ipv6_listener_and_passwd() -> None:
    line = (
        "   0: 00000000000000000000000001000000:1F40 00000000000000000000000000000000:0000 0A "
        "00000000:00000000 00:00000000 00000000   998        0 4242 1 0000000000000000 100 0 0 10 0"
    )
    assert gpu_facts.tcp_listeners(line, 8000) == [
        {"address": "0000:0000:0000:0000:0000:0000:0000:0001", "uid": 998, "inode": 4242}
    ]
    assert gpu_facts.passwd_uid("vllm:x:998:998::/var/lib/vllm:/usr/sbin/nologin") == 998
    assert gpu_facts.passwd_uid("") is None


@pytest.mark.parametrize(
    ("func", "value", "pattern"),
    [
        (gpu_facts.smi_xml, "<html/>", "gpu_smi_xml: root element"),
        (gpu_facts.smi_xml, "not xml", "gpu_smi_xml: not nvidia-smi -q -x output"),
        (gpu_facts.topo_matrix, "no matrix here", "gpu_topo_matrix: no header"),
        (gpu_facts.df, "42", "gpu_df: expected `df -P -B1`"),
        (gpu_facts.nofile, "1024", "gpu_nofile: expected two lines"),
        (gpu_facts.smi_csv, 42, "gpu_smi_csv: expected the text"),
        (gpu_facts.version_key, "5.x", "gpu_version_key: not a dotted"),
    ],
)
def test_bad_input_names_the_filter(func, value, pattern) -> None:
    with pytest.raises(AnsibleFilterError, match=pattern):
        func(value)


def test_tcp_listeners_rejects_bad_port() -> None:
    with pytest.raises(AnsibleFilterError, match="gpu_tcp_listeners: port"):
        gpu_facts.tcp_listeners("", 0)


def test_filter_module_maps_names() -> None:
    filters = _collection.filters("gpu_facts")
    assert filters["gpu_facts_from_probes"].__qualname__ == gpu_facts.facts_from_probes.__qualname__
    assert all(name.startswith("gpu_") for name in filters)


def test_topology_with_nic_rows_and_nic_legend() -> None:
    # Layout of `nvidia-smi topo -m` on a host with a NIC (NIC columns, NIC rows, a NIC Legend).
    text = (
        "\t\x1b[4mGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
        "GPU0\t X \tPIX\tPXB\t0-15\t0\t\tN/A\n"
        "GPU1\tPIX\t X \tPXB\t0-15\t0\t\tN/A\n"
        "NIC0\tPXB\tPXB\t X \t\t\t\t\n"
        "\nLegend:\n\n  X    = Self\n\nNIC Legend:\n\n  NIC0: mlx5_0\n"
    )
    topo = gpu_facts.topo_matrix(text)
    assert topo["matrix"] == {"GPU0": {"GPU1": "PIX"}, "GPU1": {"GPU0": "PIX"}}
    assert topo["nics"] == {"NIC0": {"GPU0": "PXB", "GPU1": "PXB"}}
    assert topo["summary"]["kind"] == "pcie_switch" and topo["numa_affinity"]["GPU1"] == "0"
