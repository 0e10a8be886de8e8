"""Issue 14: one model over several nodes of identical GPUs (TP inside a node, PP or DP across nodes).

The headline case is moonshotai/Kimi-K2-Instruct (block FP8, ~1 TB of weights, catalog/models/kimi_k2_fp8.yml)
on 2 nodes of 8 H200 (catalog/hardware/h200_x8.yml): vLLM's recipe runs it as TP 8 x PP 2 over two nodes
(../shared/research/llm_serving.md 2.2), because TP 8 inside one node leaves no room for the KV cache and
TP 16 would put every all-reduce on the network between the nodes.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.errors import AnsibleFilterError

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

import llm_capacity as lc  # noqa: E402

_SPEC = importlib.util.spec_from_file_location(
    "llm_plan_report_multinode", ROOT / "plugins" / "module_utils" / "llm_plan_report.py"
)
assert _SPEC is not None and _SPEC.loader is not None
rep = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(rep)

GIB = 2**30
MODELS = sorted((ROOT / "catalog" / "models").glob("*.yml"))
HARDWARE = sorted((ROOT / "catalog" / "hardware").glob("*.yml"))
TP_ACROSS = "TP across nodes would put every all-reduce on the network"


def _load(path: Path) -> dict[str, Any]:
    return next(iter(yaml.safe_load(path.read_text()).values()))


KIMI = _load(ROOT / "catalog/models/kimi_k2_fp8.yml")
TINY = _load(ROOT / "catalog/models/tiny_test.yml")
H200 = _load(ROOT / "catalog/hardware/h200_x8.yml")
CKPT_GIB = KIMI["checkpoint_bytes"] / GIB


def _role_args(model: dict[str, Any], hw: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """The arguments roles/llm_plan/tasks/main.yml passes to llm_recommend (256 sequences, bf16 + fp8)."""
    text = model["hf_config"].get("text_config", model["hf_config"])
    return {
        "gpu_memory_gib": hw["gpu_memory_gib"],
        "gpu_count": hw["gpu_count"],
        "checkpoint_gib": model["checkpoint_bytes"] / GIB,
        "compute_capability": str(hw["compute_capability"]),
        "vllm_version": "0.33.0",
        "target_max_model_len": min(131072, text["max_position_embeddings"]),
        "gpu_memory_utilization": hw["recommended_gpu_memory_utilization"],
        "max_num_seqs": 256,
        "kv_cache_dtypes": ["bfloat16", "fp8"],
    } | extra


@pytest.fixture(scope="module")
def kimi_2x8() -> dict[str, Any]:
    return lc.recommend_layout(KIMI["hf_config"], **_role_args(KIMI, H200, nodes=2))


# ---- the catalog entry -----------------------------------------------------------------------------------


def test_kimi_k2_entry_is_the_published_fp8_checkpoint() -> None:
    cfg = KIMI["hf_config"]
    assert (cfg["model_type"], cfg["architectures"]) == ("kimi_k2", ["DeepseekV3ForCausalLM"])
    assert cfg["quantization_config"] == {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "weight_block_size": [128, 128],
    }
    assert (cfg["num_hidden_layers"], cfg["n_routed_experts"], cfg["num_attention_heads"]) == (61, 384, 64)
    assert KIMI["checkpoint_shards"] == 61
    assert 950 < CKPT_GIB < 965  # ~1.03e12 bytes
    # The planner's split of the config (FP8 linears, BF16 embeddings/head/routers/norms) gives the same size.
    weights = lc.estimate_weights(
        lc.normalize_architecture(cfg), tp=1, pp=1, dp=1, expert_parallel=False, checkpoint_gib=None
    )
    assert weights["model_total_gib"] == pytest.approx(CKPT_GIB, rel=0.001)


# ---- Kimi-K2 FP8 on 2 x 8 H200 ---------------------------------------------------------------------------


def test_kimi_k2_plans_tp8_pp2_over_two_nodes(kimi_2x8: dict[str, Any]) -> None:
    rec = kimi_2x8
    assert rec["fits"], rec["reasons"]
    assert (rec["tensor_parallel_size"], rec["pipeline_parallel_size"], rec["data_parallel_size"]) == (
        8,
        2,
        1,
    )
    assert (rec["nnodes"], rec["gpus_per_node"]) == (2, 8)
    multinode = rec["multinode"]
    assert {k: multinode[k] for k in ("nnodes", "split", "local_world_size")} == {
        "nnodes": 2,
        "split": "pipeline",
        "local_world_size": 8,
    }
    why = multinode["why"]
    assert "at TP 8 alone the weights take" in why
    assert "PP 2 puts 1 stage on each node, TP 8 stays inside each node's NVLink" in why
    assert why.endswith(TP_ACROSS)
    assert any(r.startswith("2 nodes x 8 GPUs: ") and r.endswith(why) for r in rec["reasons"])


def test_kimi_k2_figures_are_consistent(kimi_2x8: dict[str, Any]) -> None:
    plan = kimi_2x8["plan"]
    # Half of the model per node, an eighth of that per GPU: checkpoint / 16 plus the few replicated tensors
    # (MLA down-projections, routers, norms) every rank holds whole.
    assert CKPT_GIB / 16 < plan["weights_gib_per_gpu"] < CKPT_GIB / 16 * 1.02
    stages = plan["stages"]
    assert [st["layers"] for st in stages] == lc.pp_partition(61, 2) == [31, 30]
    assert sum(st["weights_gib"] for st in stages) * 8 == pytest.approx(CKPT_GIB, rel=0.02)
    usable = H200["gpu_memory_gib"] * H200["recommended_gpu_memory_utilization"]
    assert plan["requested_memory_gib"] == pytest.approx(usable, abs=0.001)
    for st in stages:  # what vLLM leaves each stage's GPU for the KV cache
        graphs = st["cudagraph_gib"] if st["cudagraph_subtracted"] else 0.0
        used = (
            st["weights_gib"] + st["activation_peak_gib"] + st["non_torch_gib"] + graphs + st["kv_cache_gib"]
        )
        assert used == pytest.approx(usable, abs=0.01)
    assert plan["kv_cache_gib_per_gpu"] == pytest.approx(min(st["kv_cache_gib"] for st in stages), abs=0.001)
    # MLA: one latent of 512 + 64 per token and layer; the first (31-layer) stage limits the cache.
    dtype_bytes = 1 if plan["kv_cache_dtype"] == "fp8" else 2
    assert plan["kv_bytes_per_token_per_rank"] == 31 * 576 * dtype_bytes
    assert plan["layout"]["gpus"] == 16
    assert plan["max_concurrency"] >= 16


def test_one_node_does_not_hold_kimi_k2(kimi_2x8: dict[str, Any]) -> None:
    alone = lc.plan_memory(
        KIMI["hf_config"],
        gpu_memory_gib=H200["gpu_memory_gib"],
        tensor_parallel_size=8,
        gpu_memory_utilization=0.9,
        checkpoint_gib=CKPT_GIB,
        max_model_len=131072,
        gpu_count=8,
    )
    assert not alone["fits"]
    assert alone["weights_gib_per_gpu"] == pytest.approx(CKPT_GIB / 8, rel=0.02)
    assert any("no memory left for the KV cache" in r for r in alone["reasons"])
    # The best the planner finds inside one node (PP inside the node, if anything) serves far fewer requests.
    one = lc.recommend_layout(KIMI["hf_config"], **_role_args(KIMI, H200))
    assert "multinode" not in one
    if one["fits"]:
        served = one["plan"]["max_concurrency"] * one["data_parallel_size"]
        assert served * 10 < kimi_2x8["plan"]["max_concurrency"]


def test_no_layout_puts_tp_across_nodes(kimi_2x8: dict[str, Any]) -> None:
    assert kimi_2x8["candidates"]
    assert max(row["tp"] for row in kimi_2x8["candidates"]) == 8
    assert all(row["tp"] * row["pp"] * row["dp"] == 16 for row in kimi_2x8["candidates"])
    assert (
        "TP 16 x PP 1 x DP 1 skipped: tensor_parallel_size 16 exceeds the 8 GPUs of one node: " + TP_ACROSS
        in kimi_2x8["skipped_layouts"]
    )
    # Every candidate spreads over the nodes by whole stages or whole replicas.
    for row in kimi_2x8["candidates"]:
        assert row["pp"] % 2 == 0 or row["dp"] % 2 == 0, row


# ---- a small model: data parallel across nodes -----------------------------------------------------------


def test_small_model_gets_data_parallel_across_nodes() -> None:
    rec = lc.recommend_layout(TINY["hf_config"], **_role_args(TINY, H200, nodes=2))
    assert rec["fits"]
    assert (rec["tensor_parallel_size"], rec["pipeline_parallel_size"], rec["data_parallel_size"]) == (
        1,
        1,
        16,
    )
    assert rec["multinode"]["split"] == "data"
    assert rec["multinode"]["local_world_size"] == 8
    assert "the model fits one node (TP 1 x PP 1" in rec["multinode"]["why"]
    assert "DP 16 puts 8 replicas on each node, with no traffic between nodes" in rec["multinode"]["why"]


def test_replicas_over_some_of_the_nodes_are_not_planned() -> None:
    """On 4 nodes every layout is one instance over all nodes (DP 1) or whole replicas per node: two
    TP 8 x PP 2 replicas of two nodes each are left out, with the reason."""
    rec = lc.recommend_layout(KIMI["hf_config"], **_role_args(KIMI, H200, nodes=4))
    assert rec["fits"]
    split, dp = rec["multinode"]["split"], rec["data_parallel_size"]
    assert (split == "data" and dp % 4 == 0) or (split == "pipeline" and dp == 1)
    assert rec["tensor_parallel_size"] <= 8
    assert any(
        s.startswith(
            "TP 8 x PP 2 x DP 2 skipped: PP 2 x DP 2 gives the 4 nodes neither whole pipeline stages"
        )
        for s in rec["skipped_layouts"]
    )


# ---- nodes = 1 is the single-node planner, unchanged ----------------------------------------------------


@pytest.mark.parametrize("hw_path", HARDWARE, ids=lambda p: p.stem)
@pytest.mark.parametrize("model_path", MODELS, ids=lambda p: p.stem)
def test_one_node_is_the_single_node_plan(model_path: Path, hw_path: Path) -> None:
    model, hw = _load(model_path), _load(hw_path)
    args = _role_args(model, hw, vllm_version="0.22.0")
    default = lc.recommend_layout(model["hf_config"], **args)
    one = lc.recommend_layout(model["hf_config"], **args, nodes=1)
    assert default == one
    assert (one["nnodes"], one["gpus_per_node"]) == (1, hw["gpu_count"])
    assert "multinode" not in one
    assert not any("node" in s for s in one["skipped_layouts"])
    if not one["fits"]:
        assert one["reasons"][0].startswith(f"no layout of {hw['gpu_count']} GPU(s) fits")
    arch = lc.normalize_architecture(model["hf_config"])
    assert lc.candidate_layouts(arch, hw["gpu_count"]) == lc.candidate_layouts(arch, hw["gpu_count"], 1)


def test_nothing_fits_over_nodes_names_the_nodes() -> None:
    rec = lc.recommend_layout(
        KIMI["hf_config"], **_role_args(KIMI, _load(ROOT / "catalog/hardware/h100_x1.yml"), nodes=2)
    )
    assert rec["fits"] is False
    assert rec["reasons"][0].startswith("no layout of 2 x 1 GPU(s) fits")
    assert "multinode" not in rec
    assert rec["nnodes"] == 2


# ---- bad inputs ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("nodes", [0, -1, 1.5, "two", "", None, True, 10**6])
def test_bad_node_counts_are_refused(nodes: Any) -> None:
    with pytest.raises(lc.PlanInputError) as err:
        lc.recommend_layout(KIMI["hf_config"], **_role_args(KIMI, H200, nodes=nodes))
    assert err.value.field == "nodes"


def test_node_count_from_ansible_may_be_a_string() -> None:
    assert lc.check_nodes("2") == 2


@pytest.mark.parametrize(
    ("tp", "pp", "dp", "problem"),
    [
        (16, 1, 1, f"tensor_parallel_size 16 exceeds the 8 GPUs of one node: {TP_ACROSS}"),
        (3, 2, 1, "tensor_parallel_size 3 does not divide the 8 GPUs of one node"),
        (8, 1, 1, "PP 1 x DP 1 gives the 2 nodes neither whole pipeline stages of one instance"),
        (8, 2, 2, "the layout needs 16 GPUs on each of the 2 nodes, which have 8"),
        (8, 2, 1, None),
        (4, 2, 2, None),
        (2, 4, 1, None),
    ],
)
def test_node_problem(tp: int, pp: int, dp: int, problem: str | None) -> None:
    found = lc.node_problem(tp=tp, pp=pp, dp=dp, nodes=2, gpus_per_node=8)
    assert found == problem if problem is None else found.startswith(problem)


def test_node_split() -> None:
    assert lc.node_split(tp=8, pp=2, dp=1, nodes=2) == {
        "nnodes": 2,
        "split": "pipeline",
        "local_world_size": 8,
    }
    assert lc.node_split(tp=4, pp=2, dp=2, nodes=2) == {"nnodes": 2, "split": "data", "local_world_size": 8}
    assert lc.node_split(tp=4, pp=2, dp=1, nodes=2)["local_world_size"] == 4


# ---- the llm_plan role's filters --------------------------------------------------------------------------


def test_layout_takes_the_recommended_split(kimi_2x8: dict[str, Any]) -> None:
    layout = rep.llm_plan_layout(kimi_2x8, {}, H200, nodes=2)
    assert (layout["tensor_parallel_size"], layout["pipeline_parallel_size"]) == (8, 2)
    assert layout["nnodes"] == 2
    assert layout["multinode"] == kimi_2x8["multinode"]


def test_layout_on_one_node_has_no_multinode() -> None:
    layout = rep.llm_plan_layout({}, {}, H200)
    assert (layout["nnodes"], layout["multinode"]) == (1, None)
    assert (layout["tensor_parallel_size"], layout["pipeline_parallel_size"]) == (8, 1)


def test_layout_default_over_nodes_is_a_stage_per_node() -> None:
    layout = rep.llm_plan_layout({"fits": False}, {}, H200, nodes=2)
    assert (
        layout["tensor_parallel_size"],
        layout["pipeline_parallel_size"],
        layout["data_parallel_size"],
    ) == (8, 2, 1)
    assert layout["multinode"]["split"] == "pipeline"
    assert layout["multinode"]["why"].startswith(
        "the default, as no layout fits: PP 2 puts 1 stage on each node"
    )


def test_layout_override_of_the_split_says_so(kimi_2x8: dict[str, Any]) -> None:
    layout = rep.llm_plan_layout(
        kimi_2x8, {"tensor_parallel_size": 4, "pipeline_parallel_size": 4}, H200, nodes=2
    )
    assert layout["multinode"]["split"] == "pipeline"
    assert layout["multinode"]["why"].startswith(
        "set by the llm_plan_*_parallel_size overrides: PP 4 puts 2 stages"
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"tensor_parallel_size": 16, "pipeline_parallel_size": 1},
            r"exceeds the 8 GPUs of one node: TP across nodes",
        ),
        (
            {"tensor_parallel_size": 8, "pipeline_parallel_size": 1},
            r"gives the 2 nodes neither whole pipeline stages",
        ),
        ({"tensor_parallel_size": 8, "pipeline_parallel_size": 4}, r"exceeds the llm_plan_nodes=2 x 8 GPUs"),
    ],
)
def test_layout_refuses_tp_across_nodes(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(AnsibleFilterError, match=message):
        rep.llm_plan_layout({}, overrides, H200, nodes=2)


@pytest.mark.parametrize("nodes", [0, "x", None])
def test_layout_refuses_a_bad_node_count(nodes: Any) -> None:
    with pytest.raises(AnsibleFilterError, match="llm_plan_layout: llm_plan_nodes: expected an integer >= 1"):
        rep.llm_plan_layout({}, {}, H200, nodes=nodes)


def test_plan_result_and_table_show_the_nodes(kimi_2x8: dict[str, Any]) -> None:
    layout = rep.llm_plan_layout(kimi_2x8, {}, H200, nodes=2)
    settings = rep.llm_plan_settings(KIMI, H200, "0.33.0")
    rows = [
        {
            "kv_cache_dtype": dtype,
            "decode_context_parallel_size": layout["decode_context_parallel_size"],
            "max_model_len": 131072,
            "plan": lc.plan_memory(
                KIMI["hf_config"],
                gpu_memory_gib=H200["gpu_memory_gib"],
                tensor_parallel_size=8,
                pipeline_parallel_size=2,
                decode_context_parallel_size=layout["decode_context_parallel_size"],
                gpu_memory_utilization=layout["gpu_memory_utilization"],
                kv_cache_dtype=dtype,
                max_model_len=131072,
                max_num_seqs=256,
                checkpoint_gib=CKPT_GIB,
                gpu_count=16,
            ),
        }
        for dtype in ("bfloat16", "fp8")
    ]
    result = rep.llm_plan_assemble(
        rows, model=KIMI, hardware=H200, layout=layout, settings=settings, engine_version="0.33.0"
    )
    assert result["fits"], result["reasons"]
    assert (result["nnodes"], result["multinode"]) == (2, kimi_2x8["multinode"])
    lines = rep.llm_plan_table(result)
    text = "\n".join(lines)
    assert lines[1].startswith("Hardware: 2 nodes x 8 x NVIDIA H200, ")
    assert "Nodes:    2 x 8 GPUs = 16 GPUs; split by pipeline (whole pipeline stages on each node)" in text
    assert f"          why: {kimi_2x8['multinode']['why']}" in lines
    assert "--tensor-parallel-size 8 --pipeline-parallel-size 2 --data-parallel-size 1" in text


def test_one_node_plan_result_has_null_multinode() -> None:
    plan = lc.plan_memory(TINY["hf_config"], gpu_memory_gib=139.8, max_model_len=2048)
    row = {
        "kv_cache_dtype": "bfloat16",
        "decode_context_parallel_size": 1,
        "max_model_len": 2048,
        "plan": plan,
    }
    layout = rep.llm_plan_layout({}, {"tensor_parallel_size": 1}, H200)
    result = rep.llm_plan_assemble(
        [row], model=TINY, hardware=H200, layout=layout, settings={}, engine_version="0.33.0"
    )
    assert (result["nnodes"], result["multinode"]) == (1, None)
    assert not any(line.startswith("Nodes:") for line in rep.llm_plan_table(result))


# ---- bin/llm-plan --nodes ----------------------------------------------------------------------------------


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(KIMI["hf_config"]))
    return subprocess.run(
        [
            sys.executable,
            "-S",
            str(ROOT / "bin" / "llm-plan"),
            "--model-config",
            str(config),
            "--gpu-memory-gib",
            str(H200["gpu_memory_gib"]),
            "--checkpoint-gib",
            str(CKPT_GIB),
            "--gpu-memory-utilization",
            "0.9",
            "--max-model-len",
            "131072",
            "--gpu-count",
            "8",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_cli_plans_over_two_nodes(tmp_path: Path) -> None:
    out = _cli(
        tmp_path, "--tensor-parallel-size", "8", "--pipeline-parallel-size", "2", "--nodes", "2", "--json"
    )
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["fits"] is True
    assert plan["nnodes"] == 2
    assert {k: plan["multinode"][k] for k in ("split", "local_world_size")} == {
        "split": "pipeline",
        "local_world_size": 8,
    }
    assert "at TP 8 alone the weights take" in plan["multinode"]["why"]
    assert CKPT_GIB / 16 < plan["weights_gib_per_gpu"] < CKPT_GIB / 16 * 1.02


def test_cli_one_node_prints_nnodes_1(tmp_path: Path) -> None:
    out = _cli(tmp_path, "--tensor-parallel-size", "8", "--json")
    plan = json.loads(out.stdout)
    assert (plan["nnodes"], plan["multinode"]) == (1, None)
    assert plan["fits"] is False and out.returncode == 1  # TP 8 on one node: no room for the KV cache


def test_cli_refuses_tp_across_nodes(tmp_path: Path) -> None:
    out = _cli(tmp_path, "--tensor-parallel-size", "16", "--nodes", "2", "--json")
    assert out.returncode == 1
    assert json.loads(out.stdout)["fits"] is False
    assert (
        "llm-plan: --tensor-parallel-size: tensor_parallel_size 16 exceeds the 8 GPUs of one node"
        in out.stderr
    )


@pytest.mark.parametrize("nodes", ["0", "-2"])
def test_cli_refuses_a_bad_node_count(tmp_path: Path, nodes: str) -> None:
    out = _cli(tmp_path, "--tensor-parallel-size", "8", "--nodes", nodes)
    assert out.returncode == 2
    assert "llm-plan: --nodes: expected an integer >= 1" in out.stderr
