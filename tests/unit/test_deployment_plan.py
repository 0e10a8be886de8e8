"""plan_deployment (plugins/module_utils/deployment_plan.py): the one call that builds llm_plan_result, for a
hardware profile and for the GPUs a host really has, and the llm_deployment_plan filter that maps onto it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.errors import AnsibleFilterError

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

import deployment_plan as dp  # noqa: E402
import llm_capacity as lc  # noqa: E402
from _collection import filters  # noqa: E402
from llm_capacity.sglang import sglang_kv_pool  # noqa: E402

GIB = 2**30
VERSION = "0.33.0"
MODELS = sorted(p.stem for p in (ROOT / "catalog" / "models").glob("*.yml"))
HARDWARE = sorted(p.stem for p in (ROOT / "catalog" / "hardware").glob("*.yml"))


def _model(name: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / "catalog" / "models" / f"{name}.yml").read_text())["llm_model"]


def _hardware(name: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / "catalog" / "hardware" / f"{name}.yml").read_text())["llm_hardware"]


def _live(profile: dict[str, Any], **facts: Any) -> dict[str, Any]:
    """The profile with what gpu_preflight found on a host (roles/deploy/tasks/host_preflight.yml)."""
    return profile | {"id": "gpu-host-1"} | facts


@pytest.mark.parametrize("hardware", HARDWARE)
@pytest.mark.parametrize("model", MODELS)
def test_every_catalog_pair_gives_a_verdict_and_the_plan_of_its_layout(model: str, hardware: str) -> None:
    result = dp.plan_deployment(_model(model), _hardware(hardware), vllm_version=VERSION)
    assert result["model_id"] == _model(model)["id"]
    assert result["verdict"] in ("fits", "does_not_fit")
    assert result["fits"] is (result["verdict"] == "fits")
    tp, pp = result["tensor_parallel_size"], result["pipeline_parallel_size"]
    assert tp * pp * result["data_parallel_size"] <= _hardware(hardware)["gpu_count"]
    # The chosen plan is the planner's own figure for that layout, not a copy of another row.
    direct = lc.plan_memory(
        _model(model)["hf_config"],
        gpu_memory_gib=float(_hardware(hardware)["gpu_memory_gib"]),
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        data_parallel_size=result["data_parallel_size"],
        enable_expert_parallel=result["enable_expert_parallel"],
        decode_context_parallel_size=result["decode_context_parallel_size"],
        gpu_memory_utilization=result["gpu_memory_utilization"],
        kv_cache_dtype=result["kv_cache_dtype"],
        max_model_len=result["max_model_len"],
        max_num_seqs=256,
        checkpoint_gib=_model(model)["checkpoint_bytes"] / GIB,
        vllm_version=VERSION,
        gpu_count=_hardware(hardware)["gpu_count"],
        interconnect="pcie" if _hardware(hardware).get("interconnect") == "pcie" else "nvlink",
    )
    assert result["plan"]["kv_cache_tokens"] == direct["kv_cache_tokens"]
    assert "sglang" not in result


def test_the_live_host_keeps_the_engine_and_the_users_tensor_parallel_size() -> None:
    """Issue 26's first defect: the re-plan for unlike GPUs dropped the engine and the user's TP."""
    profile = _hardware("h200_x2")
    inputs = {"vllm_version": VERSION, "engine": "sglang", "overrides": {"tensor_parallel_size": 2}}
    on_profile = dp.plan_deployment(_model("tiny_test"), profile, **inputs)
    live = _live(profile, gpu_name="NVIDIA H100 80GB HBM3", gpu_memory_gib=79.2, compute_capability="9.0")
    on_host = dp.plan_deployment(_model("tiny_test"), live, **inputs)
    for result in (on_profile, on_host):
        assert result["engine"] == "sglang"
        assert result["tensor_parallel_size"] == 2
        assert result["sglang"]["tp"] == 2
    assert on_host["hardware_id"] == "gpu-host-1"
    # Only the hardware differs: the smaller cards give a smaller pool.
    assert on_host["sglang"]["max_total_tokens"] < on_profile["sglang"]["max_total_tokens"]


def test_sglang_pool_is_sglang_accounting_for_the_picked_layout() -> None:
    model, hardware = _model("tiny_test"), _hardware("h100_x1")
    result = dp.plan_deployment(model, hardware, vllm_version=VERSION, engine="sglang")
    direct = sglang_kv_pool(
        model["hf_config"],
        weights_gib_per_gpu=result["plan"]["weights_gib_per_gpu"],
        gpu_memory_gib=float(hardware["gpu_memory_gib"]),
        nvidia_smi_memory_mib=hardware.get("gpu_memory_mib_cuda"),
        tensor_parallel_size=1,
        kv_cache_dtype="bfloat16" if result["kv_cache_dtype"] in ("bfloat16", "float16") else "fp8_e4m3",
        compute_capability=str(hardware["compute_capability"]),
        context_length=result["max_model_len"],
    )
    assert result["sglang"]["max_total_tokens"] == direct["max_total_tokens"]
    given = dp.plan_deployment(
        model, hardware, vllm_version=VERSION, engine="sglang", sglang_mem_fraction_static="0.5"
    )
    assert given["sglang"]["mem_fraction_static"] == 0.5
    assert given["sglang"]["max_total_tokens"] < result["sglang"]["max_total_tokens"]


def test_context_lengths_stop_at_the_models_limit_unless_one_is_given() -> None:
    """tiny_test was trained for 256 positions: the requested 32768 and 131072 are planned as 256."""
    plain = dp.plan_deployment(_model("tiny_test"), _hardware("h200_x1"), vllm_version=VERSION)
    assert plain["max_model_len"] == 256
    assert {row["max_model_len"] for row in plain["rows"]} == {256}
    fixed = dp.plan_deployment(
        _model("tiny_dsv3"), _hardware("h200_x1"), vllm_version=VERSION, overrides={"max_model_len": 4096}
    )
    assert fixed["max_model_len"] == 4096
    assert {row["max_model_len"] for row in fixed["rows"]} == {4096}


def test_mla_models_are_also_planned_with_decode_context_parallel_across_tp() -> None:
    mla = _model("tiny_dsv3")
    # The catalog entry opts out; derived, MLA without the sparse indexer shards its latent cache.
    assert mla.pop("supports_dcp") is False
    tp2 = {"tensor_parallel_size": 2}
    result = dp.plan_deployment(mla, _hardware("h200_x2"), vllm_version=VERSION, overrides=tp2)
    assert {row["decode_context_parallel_size"] for row in result["rows"]} == {1, 2}
    opted_out = dp.plan_deployment(
        _model("tiny_dsv3"), _hardware("h200_x2"), vllm_version=VERSION, overrides={"tensor_parallel_size": 2}
    )
    assert {row["decode_context_parallel_size"] for row in opted_out["rows"]} == {1}
    dense = dp.plan_deployment(
        _model("tiny_test"), _hardware("h200_x2"), vllm_version=VERSION, overrides={"tensor_parallel_size": 2}
    )
    assert {row["decode_context_parallel_size"] for row in dense["rows"]} == {1}


def test_inputs_typed_as_extra_vars_give_the_same_plan() -> None:
    """-e key=value gives strings; the plan converts them rather than reading "2" as a sequence."""
    model, hardware = _model("kimi_k2_fp8"), _hardware("h200_x8")
    typed = dp.plan_deployment(
        model,
        hardware,
        vllm_version=VERSION,
        nodes=2,
        overrides={"gpu_memory_utilization": 0.9},
        max_num_seqs=128,
        allow_long_max_model_len=False,
    )
    strings = dp.plan_deployment(
        model,
        hardware,
        vllm_version=VERSION,
        nodes="2",
        overrides={"gpu_memory_utilization": "0.9", "tensor_parallel_size": ""},
        max_num_seqs="128",
        allow_long_max_model_len="false",
    )
    assert strings == typed
    assert typed["nnodes"] == 2


@pytest.mark.parametrize(
    ("inputs", "named"),
    [
        ({"nodes": "two"}, "nodes must be a whole number >= 1, got 'two'"),
        ({"nodes": 0}, "nodes must be a whole number >= 1, got 0"),
        ({"engine": "tgi"}, "engine must be one of ['vllm', 'sglang'], got 'tgi'"),
        ({"kv_cache_dtypes": "fp8"}, "kv_cache_dtypes must be a non-empty subset"),
        ({"kv_cache_dtypes": ["fp4"]}, "got ['fp4']"),
        ({"context_lengths": []}, "context_lengths must be a non-empty list"),
        ({"overrides": {"tp": 2}}, "overrides has unknown keys ['tp']"),
        ({"overrides": {"tensor_parallel_size": "2.5"}}, "tensor_parallel_size must be a whole number"),
        ({"overrides": {"gpu_memory_utilization": 1.5}}, "gpu_memory_utilization must be null or in (0, 1]"),
        ({"allow_long_max_model_len": "maybe"}, "allow_long_max_model_len must be true or false"),
    ],
)
def test_bad_inputs_are_refused_by_name(inputs: dict[str, Any], named: str) -> None:
    with pytest.raises(dp.DeploymentPlanError) as err:
        dp.plan_deployment(_model("tiny_test"), _hardware("h200_x1"), vllm_version=VERSION, **inputs)
    assert named in str(err.value)


@pytest.mark.parametrize(
    ("model", "hardware", "named"),
    [
        ({"id": "m", "hf_repo": "o/m", "checkpoint_bytes": 1}, {"gpu_count": 1}, "hf_config mapping"),
        (None, {}, "hf_config mapping"),
        ("tiny_test", {"gpu_count": 0, "gpu_memory_gib": 80}, "hardware.gpu_count must be a whole number"),
        ("tiny_test", {"gpu_count": 1, "gpu_memory_gib": "lots"}, "hardware.gpu_memory_gib must be > 0"),
    ],
)
def test_malformed_entries_are_refused_by_name(model: Any, hardware: dict[str, Any], named: str) -> None:
    with pytest.raises(dp.DeploymentPlanError) as err:
        dp.plan_deployment(_model(model) if model == "tiny_test" else model, hardware, vllm_version=VERSION)
    assert named in str(err.value)


def test_the_filter_names_itself_in_errors_and_returns_the_same_plan() -> None:
    plan = filters("llm_deployment_plan")["llm_deployment_plan"]
    model, hardware = _model("tiny_test"), _hardware("h100_x1")
    direct = dp.plan_deployment(model, hardware, vllm_version=VERSION)
    assert plan(model, hardware, vllm_version=VERSION) == direct
    with pytest.raises(AnsibleFilterError, match=r"^llm_deployment_plan: nodes must be"):
        plan(model, hardware, vllm_version=VERSION, nodes="x")
    with pytest.raises(AnsibleFilterError, match=r"^llm_deployment_plan: .*unexpected keyword"):
        plan(model, hardware, vllm_version=VERSION, tensor_parallel_size=2)
