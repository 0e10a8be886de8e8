"""NCCL/engine environment chosen by plugins/module_utils/nccl_env.py from the detected interconnect.

The NVLink case is the real 2x H200 recording; the PCIe case is the hand-written 8x RTX PRO 6000
fixture. The benchmark comparison runs on the real all-reduce figures of ../shared/fixtures/h200x2/nccl.txt
and tests/fixtures/h200x2_run/nccl_bench.json.
"""

from __future__ import annotations

import json

import pytest
from _gpu_probe_fixtures import FIXTURES, gpu_facts, load_probes, nccl_env, nccl_txt_results
from ansible.errors import AnsibleFilterError


def facts(name: str) -> dict:
    return gpu_facts.facts_from_probes(load_probes(name))


def names(profile: dict) -> dict[str, str]:
    return {item["name"]: item["value"] for item in profile["env"]}


def test_nvlink_host_keeps_defaults_and_never_ll() -> None:
    profile = nccl_env.choose_env(facts("h200x2_run"), {"tensor_parallel_size": 2, "pcie_proto_ll": True})
    assert profile["profile"] == "nvlink_all_pairs"
    assert profile["env"] == [] and profile["engine_args"] == []
    assert "330 GB/s" in profile["notes"][0] and "117 GB/s" in profile["notes"][0]


def test_nvlink_host_drops_an_ll_override() -> None:
    overrides = {"NCCL_PROTO": "LL", "NCCL_DEBUG": "WARN"}
    profile = nccl_env.choose_env(facts("h200x2_run"), {"tensor_parallel_size": 2, "overrides": overrides})
    assert names(profile) == {"NCCL_DEBUG": "WARN"}
    assert any("Ignored override NCCL_PROTO=LL" in w for w in profile["warnings"])


def test_recorded_profile_on_the_gpu_host_matches() -> None:
    recorded = json.loads((FIXTURES / "h200x2_run" / "nccl_profile.json").read_text())
    assert nccl_env.choose_env(facts("h200x2_run"), {"tensor_parallel_size": 2}) == recorded


def test_pcie_cross_socket_workstation() -> None:
    profile = nccl_env.choose_env(facts("rtx_pro_6000_x8"), {"tensor_parallel_size": 8})
    assert profile["profile"] == "pcie_cross_socket"
    assert names(profile) == {"NCCL_P2P_LEVEL": "SYS"}
    assert [a["arg"] for a in profile["engine_args"]] == ["--disable-custom-all-reduce"]
    assert all(item["why"] for item in profile["env"] + profile["engine_args"])
    warnings = " ".join(profile["warnings"])
    assert "IOMMU in translation mode" in warnings and "iommu=pt" in warnings
    assert "00:01.1" in warnings and "80:01.1" not in warnings  # only the bridge with ReqRedir+
    assert "pcie_aspm=off" in warnings
    assert any("pipeline parallelism" in note for note in profile["notes"])


def test_pcie_ll_is_an_opt_in() -> None:
    profile = nccl_env.choose_env(
        facts("rtx_pro_6000_x8"), {"tensor_parallel_size": 8, "pcie_proto_ll": True}
    )
    assert names(profile) == {"NCCL_P2P_LEVEL": "SYS", "NCCL_PROTO": "LL"}
    assert "opt-in" in profile["env"][1]["why"]


def test_two_pcie_gpus_in_one_socket_keep_custom_all_reduce() -> None:
    data = facts("rtx_pro_6000_x8")
    data["topology"]["summary"] = gpu_facts.topo_summary(
        {"GPU0": {"GPU1": "NODE"}, "GPU1": {"GPU0": "NODE"}}, {"GPU0": "0", "GPU1": "0"}
    )
    data["iommu"] = {"iommu_mode": "passthrough", "active_units": [], "acs_redirect": [], "pcie_aspm": "off"}
    profile = nccl_env.choose_env(data, {"tensor_parallel_size": 2})
    assert profile["profile"] == "pcie_host_bridge"
    assert names(profile) == {"NCCL_P2P_LEVEL": "SYS"}
    assert profile["engine_args"] == [] and profile["warnings"] == []


def test_single_gpu_and_unknown_topology() -> None:
    assert nccl_env.choose_env(facts("h200x2_run"), {"tensor_parallel_size": 1})["profile"] == "single_gpu"
    unknown = nccl_env.choose_env(facts("no_driver"), {"tensor_parallel_size": 2})
    assert unknown["env"] == [] and "topology unknown" in unknown["warnings"][0]


def test_env_file_fragment() -> None:
    profile = nccl_env.choose_env(facts("rtx_pro_6000_x8"), {"tensor_parallel_size": 8})
    text = nccl_env.env_file(profile)
    lines = text.splitlines()
    at = lines.index("NCCL_P2P_LEVEL=SYS")
    assert lines[at - 1].startswith("# PCIe-only host (worst GPU link SYS)")
    assert lines[0] == "# NCCL profile: pcie_cross_socket (chosen by the gpu_preflight role)"
    assert text.endswith("\n")


def test_bad_overrides() -> None:
    with pytest.raises(AnsibleFilterError, match="gpu_nccl_env: overrides"):
        nccl_env.choose_env(facts("h200x2_run"), {"overrides": {"nccl_proto": "LL"}})
    with pytest.raises(AnsibleFilterError, match="gpu_nccl_env: expected gpu_preflight_facts"):
        nccl_env.choose_env({}, {})


def test_bench_compare_on_the_measured_nvlink_figures() -> None:
    runs = nccl_txt_results()
    assert set(runs) == {
        "default",
        "NCCL_P2P_LEVEL=SYS",
        "NCCL_PROTO=LL NCCL_P2P_LEVEL=SYS",
        "NCCL_P2P_DISABLE=1",
    }
    ll = nccl_env.bench_compare(runs["default"], runs["NCCL_PROTO=LL NCCL_P2P_LEVEL=SYS"])
    assert ll["slower"] is True and ll["bytes"] == 2**30
    assert (ll["default_busbw_gbps"], ll["chosen_busbw_gbps"]) == (329.8, 116.7)
    assert ll["ratio"] == pytest.approx(0.354, abs=0.001)
    sys_level = nccl_env.bench_compare(runs["default"], runs["NCCL_P2P_LEVEL=SYS"])
    assert sys_level["slower"] is False
    assert nccl_env.bench_compare(runs["default"], runs["NCCL_P2P_DISABLE=1"])["slower"] is True


def test_bench_compare_tolerance_edge() -> None:
    base = {"results": [{"bytes": 1024, "busbw_gbps": 100.0}]}
    assert nccl_env.bench_compare(base, {"results": [{"bytes": 1024, "busbw_gbps": 95.0}]})["slower"] is False
    assert nccl_env.bench_compare(base, {"results": [{"bytes": 1024, "busbw_gbps": 94.9}]})["slower"] is True


def test_bench_compare_reproduces_the_gpu_run() -> None:
    recorded = json.loads((FIXTURES / "h200x2_run" / "nccl_bench.json").read_text())
    again = nccl_env.bench_compare(recorded["default_run"], recorded["chosen_run"])
    assert again == {key: recorded[key] for key in again}
    assert recorded["slower"] is False and recorded["default_run"]["nccl_version"] == "2.28.9"
    assert recorded["chosen_busbw_gbps"] > 300  # NVLink figure, not a PCIe or P2P-disabled one
    script_output = "Setting OMP_NUM_THREADS ...\n" + json.dumps(recorded["default_run"])
    assert nccl_env.bench_compare(script_output, recorded["chosen_run"]) == again


def test_bench_compare_errors() -> None:
    with pytest.raises(AnsibleFilterError, match="no JSON line"):
        nccl_env.bench_compare("Traceback ...", {"results": []})
    a = {"results": [{"bytes": 1, "busbw_gbps": 1.0}]}
    b = {"results": [{"bytes": 2, "busbw_gbps": 1.0}]}
    with pytest.raises(AnsibleFilterError, match="different sizes"):
        nccl_env.bench_compare(a, b)
