"""Every refusal of plugins/module_utils/gpu_checks.py, on facts parsed from the fixtures.

Bad cases start from a real recording (h200x2_run, no_driver) or the hand-written RTX PRO 6000 fixture
and change one recorded output the way the failing host would print it.
"""

from __future__ import annotations

import pytest
from _gpu_probe_fixtures import gpu_checks, gpu_facts, load_probes
from ansible.errors import AnsibleFilterError

H200_OK = {
    "tensor_parallel_size": 2,
    "engine_cuda_version": "13.0",
    "attention_backend": "FLASH_ATTN_MLA",
    "plan": {"fits": True, "reasons": []},
    "required_disk_bytes": 20 * 2**30,
    "disk_margin_bytes": 10 * 2**30,
    "port": 8000,
    "service_user": "vllm",
}


def facts(name: str, edit=None, port: int = 8000) -> dict:
    probes = load_probes(name)
    if edit:
        edit(probes)
    return gpu_facts.facts_from_probes(probes, port=port)


def errors(found: list[dict]) -> list[str]:
    return [p["check"] for p in found if p["severity"] == "error"]


def only_error(found: list[dict], check: str) -> dict:
    assert errors(found) == [check], [p["message"] for p in found]
    problem = next(p for p in found if p["check"] == check)
    assert problem["fact"] in problem["message"]
    assert "requirement: " + problem["requirement"] in problem["message"]
    assert "fix: " + problem["fix"] in problem["message"]
    return problem


def replace(probe: str, old: str, new: str):
    def edit(probes: dict) -> None:
        assert old in probes[probe]["stdout"], f"{old!r} not in {probe}"
        probes[probe]["stdout"] = probes[probe]["stdout"].replace(old, new)

    return edit


# ------------------------------------------------------------------ hosts that pass


def test_real_h200_host_passes_with_one_warning() -> None:
    found = gpu_checks.preflight_problems(facts("h200x2_run"), {**H200_OK, "min_open_files": 65536})
    assert errors(found) == []
    assert [p["check"] for p in found] == ["open_files"]


def test_handwritten_rtx_host_passes_tp8_with_triton_mla() -> None:
    req = {"tensor_parallel_size": 8, "engine_cuda_version": "13.0", "attention_backend": "TRITON_MLA"}
    assert gpu_checks.preflight_problems(facts("rtx_pro_6000_x8"), req) == []


# ------------------------------------------------------------------ refusals


def test_no_driver() -> None:
    problem = only_error(gpu_checks.preflight_problems(facts("no_driver"), H200_OK), "no_driver")
    assert "nvidia-smi could not be run" in problem["found"]
    assert "install the NVIDIA driver" in problem["fix"]


def test_driver_too_old_for_the_engine_cuda() -> None:
    found = gpu_checks.preflight_problems(facts("h200x2_run"), {**H200_OK, "engine_cuda_version": "13.1"})
    problem = only_error(found, "driver_too_old")
    assert problem["found"] == "580.159.04"
    assert "590.44.01" in problem["requirement"] and "CUDA >= 13.1" in problem["requirement"]


def test_driver_reporting_older_cuda_than_the_engine() -> None:
    older = replace("smi_xml", "<cuda_version>13.0</cuda_version>", "<cuda_version>12.9</cuda_version>")
    found = gpu_checks.preflight_problems(facts("h200x2_run", older), H200_OK)
    assert "supports CUDA 12.9" in only_error(found, "driver_too_old")["fact"]


def test_min_driver_table() -> None:
    assert gpu_checks.min_driver_for_cuda("13.0") == "580.65.06"
    assert gpu_checks.min_driver_for_cuda("12.8.1") == "570.26"
    assert gpu_checks.min_driver_for_cuda("99.0") is None
    with pytest.raises(AnsibleFilterError, match="gpu_min_driver_for_cuda"):
        gpu_checks.min_driver_for_cuda("")


def test_nvml_mismatch_from_nvidia_smi() -> None:
    def mismatch(probes: dict) -> None:
        message = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.159"
        for name in ("smi_csv", "smi_xml", "smi_topo"):
            probes[name] = {"rc": 18, "stdout": message, "stderr": ""}

    problem = only_error(
        gpu_checks.preflight_problems(facts("h200x2_run", mismatch), H200_OK), "nvml_mismatch"
    )
    assert "reboot" in problem["fix"]


def test_nvml_mismatch_from_library_files() -> None:
    edit = replace("nvml_libs", "libnvidia-ml.so.580.159.04", "libnvidia-ml.so.580.190.01")
    found = gpu_checks.preflight_problems(facts("h200x2_run", edit), H200_OK)
    assert "580.159.04 / ['580.190.01']" in only_error(found, "nvml_mismatch")["found"]


def test_fewer_gpus_than_tp_times_pp() -> None:
    found = gpu_checks.preflight_problems(facts("h200x2_run"), {**H200_OK, "pipeline_parallel_size": 2})
    assert "2 x 2 = 4" in only_error(found, "gpu_count")["requirement"]


def test_mixed_models_in_one_tp_group() -> None:
    maxq = "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"
    edit = replace("smi_csv", "3, NVIDIA RTX PRO 6000 Blackwell Workstation Edition", f"3, {maxq}")
    found = gpu_checks.preflight_problems(facts("rtx_pro_6000_x8", edit), {"tensor_parallel_size": 8})
    assert maxq in only_error(found, "mixed_gpu_models")["found"]
    # Two TP=4 groups: only the first holds the odd card.
    split = gpu_checks.preflight_problems(
        facts("rtx_pro_6000_x8", edit), {"tensor_parallel_size": 4, "pipeline_parallel_size": 2}
    )
    assert only_error(split, "mixed_gpu_models")["fact"] == "gpu_preflight_facts.gpus[0:4].name"


def test_plan_does_not_fit() -> None:
    plan = {"fits": False, "reasons": ["weights 71.2 GiB per GPU exceed 65.0 GiB usable"]}
    found = gpu_checks.preflight_problems(facts("h200x2_run"), {**H200_OK, "plan": plan})
    assert "weights 71.2 GiB" in only_error(found, "plan_does_not_fit")["found"]


def test_plan_must_have_fits() -> None:
    with pytest.raises(AnsibleFilterError, match="gpu_preflight_problems: plan must be a dict"):
        gpu_checks.preflight_problems(facts("h200x2_run"), {"plan": {"reasons": []}})


def test_disk_below_checkpoint_plus_margin() -> None:
    free = 137378267136
    found = gpu_checks.preflight_problems(facts("h200x2_run"), {**H200_OK, "required_disk_bytes": free})
    problem = only_error(found, "disk_space")
    assert str(free) in problem["found"] and "on /" in problem["found"]
    just_fits = {**H200_OK, "required_disk_bytes": free - 10 * 2**30}
    assert errors(gpu_checks.preflight_problems(facts("h200x2_run"), just_fits)) == []


def test_disk_not_measured() -> None:
    def broken(probes: dict) -> None:
        probes["df"] = {"rc": 1, "stdout": "", "stderr": "df: /nowhere: No such file or directory"}

    found = gpu_checks.preflight_problems(facts("h200x2_run", broken), H200_OK)
    assert "No such file" in only_error(found, "disk_unknown")["found"]


def test_mig_enabled() -> None:
    xml_before = "<current_mig>Disabled</current_mig>"

    def mig_on_gpu1(probes: dict) -> None:
        text = probes["smi_xml"]["stdout"]
        at = text.index(xml_before, text.index('<gpu id="00000000:00:07.0">'))
        probes["smi_xml"]["stdout"] = (
            text[:at] + "<current_mig>Enabled</current_mig>" + text[at + len(xml_before) :]
        )

    found = gpu_checks.preflight_problems(facts("h200x2_run", mig_on_gpu1), H200_OK)
    problem = only_error(found, "mig_enabled")
    assert problem["found"] == "Enabled on GPU 1" and "-mig 0" in problem["fix"]


def test_fabric_manager_down_on_nvswitch_host() -> None:
    edit = replace("smi_xml", "<state>Completed</state>", "<state>In Progress</state>")
    found = gpu_checks.preflight_problems(facts("h200x2_run", edit), H200_OK)
    problem = only_error(found, "fabric_manager_down")
    assert "In Progress" in problem["found"] and "nvidia-fabricmanager" in problem["fix"]


def test_fabric_manager_service_on_pre_hopper_nvswitch_host() -> None:
    def nvswitch(probes: dict) -> None:
        probes["nvswitch"] = {"rc": 0, "stdout": "0\n1\n2\n3\n4\n5", "stderr": ""}
        probes["fabricmanager"] = {"rc": 3, "stdout": "failed", "stderr": ""}

    found = gpu_checks.preflight_problems(facts("rtx_pro_6000_x8", nvswitch), {"tensor_parallel_size": 8})
    assert only_error(found, "fabric_manager_down")["found"] == "down (failed)"


@pytest.mark.parametrize("backend", ["FLASHINFER_MLA", "CUTLASS_MLA", "FLASHMLA", "FLASH_ATTN_MLA"])
def test_sm120_lacks_backend(backend: str) -> None:
    found = gpu_checks.preflight_problems(
        facts("rtx_pro_6000_x8"), {"tensor_parallel_size": 8, "attention_backend": backend}
    )
    problem = only_error(found, "attention_backend_unsupported")
    assert problem["found"] == "12.0" and "TRITON_MLA" in problem["fix"]
    assert "FLASHINFER_MLA" not in problem["fix"]


def test_hopper_backends() -> None:
    assert gpu_checks.mla_backends_for("9.0") == [
        "FLASHMLA",
        "FLASHMLA_SPARSE",
        "FLASH_ATTN_MLA",
        "TRITON_MLA",
    ]
    found = gpu_checks.preflight_problems(
        facts("h200x2_run"), {**H200_OK, "attention_backend": "cutlass_mla"}
    )
    assert "10.x" in only_error(found, "attention_backend_unsupported")["requirement"]
    other = gpu_checks.preflight_problems(facts("h200x2_run"), {**H200_OK, "attention_backend": "FLASH_ATTN"})
    assert [p["check"] for p in other] == ["attention_backend_unchecked"]


def _listen(uid: int):
    line = (
        f"   5: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000 {uid:5d}        0 "
        "31337 1 0000000000000000 100 0 0 10 0"
    )

    def edit(probes: dict) -> None:
        probes["tcp"]["stdout"] += "\n" + line

    return edit


def test_port_taken_by_someone_else() -> None:
    found = gpu_checks.preflight_problems(
        facts("rtx_pro_6000_x8", _listen(1000)), {"tensor_parallel_size": 8}
    )
    problem = only_error(found, "port_in_use")
    assert problem["found"] == "127.0.0.1 (uid 1000)" and "uid 998" in problem["requirement"]


def test_port_held_by_our_own_service_is_fine() -> None:
    found = gpu_checks.preflight_problems(facts("rtx_pro_6000_x8", _listen(998)), {"tensor_parallel_size": 8})
    assert found == []


def test_port_of_a_missing_service_user() -> None:
    found = gpu_checks.preflight_problems(facts("h200x2_run", _listen(0)), H200_OK)
    # Seen on the GPU (2026-12-07): SGLang's first deploy beside a vLLM service, before its user exists.
    problem = only_error(found, "port_in_use")
    assert "(no such user yet)" in problem["requirement"] and "None" not in problem["requirement"]
    assert "sport = :8000" in problem["fix"] and "llm_api_port" in problem["fix"]


def test_persistence_off_is_a_warning() -> None:
    edit = replace(
        "smi_xml",
        "<persistence_mode>Enabled</persistence_mode>",
        "<persistence_mode>Disabled</persistence_mode>",
    )
    found = gpu_checks.preflight_problems(facts("h200x2_run", edit), H200_OK)
    assert errors(found) == [] and [p["check"] for p in found] == ["persistence_mode_off"]


def test_bad_requirements() -> None:
    with pytest.raises(AnsibleFilterError, match="tensor_parallel_size must be an integer"):
        gpu_checks.preflight_problems(facts("h200x2_run"), {"tensor_parallel_size": 0})
    with pytest.raises(AnsibleFilterError, match="expected gpu_preflight_facts"):
        gpu_checks.preflight_problems({}, {})


def test_unknown_compute_capability_is_only_a_warning() -> None:
    edit = replace("smi_csv", "143771 MiB, 9.0,", "143771 MiB, [N/A],")
    found = gpu_checks.preflight_problems(facts("h200x2_run", edit), H200_OK)
    assert errors(found) == [] and [p["check"] for p in found] == ["attention_backend_unchecked"]
    with pytest.raises(AnsibleFilterError, match="gpu_mla_backends_for"):
        gpu_checks.mla_backends_for("sm_x")
