"""SGLang 0.5.17 KV pool sizing (plugins/module_utils/llm_capacity/sglang.py), with worked examples."""

from __future__ import annotations

import json
import pathlib
import sys

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

import llm_capacity as lc  # noqa: E402
from llm_capacity import sglang as sg  # noqa: E402

CONFIGS = ROOT / "tests" / "data" / "model_configs"
GIB = 1024**3


def _catalog(kind: str, name: str) -> dict:
    data = yaml.safe_load((ROOT / "catalog" / kind / f"{name}.yml").read_text())
    return next(iter(data.values()))


def _config(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


# --- mem_fraction_static default rule ------------------------------------------------------------


def test_default_rule_24gib_card():
    # 24 GiB tier: chunked prefill 2048, decode graphs up to 24; no 10 GiB floor below 60 GiB.
    # 512 + 1.5 x 2048 + 1/8 x 1024 + 2 x 24 + 8 x 42 prefill graph sizes = 4096 MiB.
    rule = sg.sglang_default_mem_fraction_static(24576, tp=1)
    assert rule["prefill_cuda_graph_sizes"] == 42
    assert rule["reserved_mib"] == 4096
    assert rule["mem_fraction_static"] == 0.833


def test_default_rule_mla_without_dsa_has_no_prefill_graphs():
    # H200 (nvidia-smi 143771 MiB), DeepSeek-V2-style MLA: no breakable prefill graphs for MLA without DSA.
    rule = sg.sglang_default_mem_fraction_static(143771, tp=1, use_mla=True)
    assert not rule["prefill_cuda_graph"]
    assert rule["reserved_mib"] == 512 + 8192 * 1.5 + 128 + 256 * 2
    assert rule["mem_fraction_static"] == round((143771 - 13440) / 143771, 3) == 0.907


def test_default_rule_floor_and_disabled_graphs():
    rule = sg.sglang_default_mem_fraction_static(
        81090.56, tp=1, chunked_prefill_size=2048, disable_cuda_graph=True
    )
    # 512 + 3072 + 128 = 3712 MiB, raised to the 10 GiB floor on a GPU over 60 GiB.
    assert rule["cuda_graph_reserve_mib"] == 0
    assert rule["reserved_mib"] == 10240
    assert rule["mem_fraction_static"] == round((81090.56 - 10240) / 81090.56, 3)


def test_prefill_graph_sizes():
    assert sg.prefill_graph_batch_sizes(32) == [4, 8, 12, 16, 20, 24, 28, 32]
    assert len(sg.prefill_graph_batch_sizes(8192)) == 58
    assert sg.prefill_graph_batch_sizes(8192)[-1] == 8192


# --- cell size ------------------------------------------------------------------------------------


def _vllm_bytes(arch: dict, tp: int, fp8: bool) -> int:
    specs = lc.kv_layer_specs(
        arch, tp=tp, kv_dtype="fp8" if fp8 else "bfloat16", kv_bytes=1.0 if fp8 else 2.0
    )
    return int(sum(s["bytes_per_token"] for s in specs))


@pytest.mark.parametrize("tp", [1, 2, 8, 16])
@pytest.mark.parametrize("fp8", [False, True])
def test_gqa_and_mla_cells_match_the_planners_vllm_bytes(tp, fp8):
    for name in ("meta-llama__Llama-3.1-8B-Instruct", "deepseek-ai__DeepSeek-V2-Lite-Chat"):
        arch = lc.normalize_architecture(_config(name))
        kv_dtype, kv_bytes = ("fp8_e4m3", 1) if fp8 else ("bfloat16", 2)
        cell = sg.sglang_cell_bytes(arch, tp=tp, kv_dtype=kv_dtype, kv_bytes=kv_bytes)
        assert cell == _vllm_bytes(arch, tp, fp8), name


def test_llama_8b_cell():
    arch = lc.normalize_architecture(_config("meta-llama__Llama-3.1-8B-Instruct"))
    # 32 layers x 8 KV heads / TP 2 x (128 + 128) x 2 bytes; heads are replicated beyond TP 8.
    assert sg.sglang_cell_bytes(arch, tp=2, kv_dtype="bfloat16", kv_bytes=2) == 32 * 4 * 256 * 2
    assert sg.sglang_cell_bytes(arch, tp=16, kv_dtype="bfloat16", kv_bytes=2) == 32 * 1 * 256 * 2


def test_asymmetric_v_head_dim_sums_k_and_v():
    arch = lc.normalize_architecture(_config("meta-llama__Llama-3.1-8B-Instruct"))
    cell = sg.sglang_cell_bytes(arch, tp=1, kv_dtype="bfloat16", kv_bytes=2, v_head_dim=64)
    assert cell == 32 * 8 * (128 + 64) * 2


def test_glm5_dsa_cells_by_dtype_and_kernel():
    arch = lc.normalize_architecture(_catalog("models", "glm5_nvfp4")["hf_config"])
    # BF16: 576-element latent x 2 bytes + 132-byte FP8 indexer key (128 + one fp32 scale), 78 layers.
    assert sg.sglang_cell_bytes(arch, tp=8, kv_dtype="bfloat16", kv_bytes=2) == 78 * (1152 + 132)
    # FP8 with per-128 scales and a BF16 rope (flashmla_kv / flashinfer_sparse_mla): 512 + 16 + 128 = 656.
    fp8 = sg.sglang_cell_bytes(
        arch, tp=8, kv_dtype="fp8_e4m3", kv_bytes=1, dsa_backend="flashinfer_sparse_mla"
    )
    assert fp8 == 78 * (656 + 132) == _vllm_bytes(arch, 8, True)
    # The trtllm DSA kernel keeps the plain 576-byte FP8 latent.
    assert sg.sglang_cell_bytes(arch, tp=8, kv_dtype="fp8_e4m3", kv_bytes=1, dsa_backend="trtllm") == 78 * (
        576 + 132
    )


def test_hybrid_layer_kinds_are_refused():
    arch = lc.normalize_architecture(_config("google__gemma-3-27b-it"))
    with pytest.raises(lc.PlanInputError, match="hybrid SWA"):
        sg.sglang_cell_bytes(arch, tp=1, kv_dtype="bfloat16", kv_bytes=2)


# --- kv dtype, backends ---------------------------------------------------------------------------


def test_kv_dtype_resolution():
    glm = lc.normalize_architecture(_catalog("models", "glm5_nvfp4")["hf_config"])
    llama = lc.normalize_architecture(_config("meta-llama__Llama-3.1-8B-Instruct"))
    w: list[str] = []
    assert sg.resolve_sglang_kv_dtype("auto", glm, major=12, warnings=w) == ("fp8_e4m3", 1)
    assert sg.resolve_sglang_kv_dtype("auto", glm, major=9, warnings=w) == ("bfloat16", 2)
    assert sg.resolve_sglang_kv_dtype("auto", llama, major=9, warnings=w) == ("bfloat16", 2)
    assert sg.resolve_sglang_kv_dtype("fp8", llama, major=9, warnings=w) == ("fp8_e4m3", 1)
    assert sg.resolve_sglang_kv_dtype("bf16", llama, major=None, warnings=w) == ("bfloat16", 2)
    with pytest.raises(lc.PlanInputError, match="DSA"):
        sg.resolve_sglang_kv_dtype("fp8_e5m2", glm, major=12, warnings=w)
    with pytest.raises(lc.PlanInputError):
        sg.resolve_sglang_kv_dtype("nvfp4", llama, major=12, warnings=w)


def test_default_backends():
    glm = lc.normalize_architecture(_catalog("models", "glm5_nvfp4")["hf_config"])
    dsv2 = lc.normalize_architecture(_config("deepseek-ai__DeepSeek-V2-Lite-Chat"))
    llama = lc.normalize_architecture(_config("meta-llama__Llama-3.1-8B-Instruct"))
    assert sg.default_attention_backend(glm, 12) == "dsa"
    assert [sg.default_attention_backend(dsv2, m) for m in (9, 10, 12)] == ["fa3", "flashinfer", "triton"]
    assert [sg.default_attention_backend(llama, m) for m in (9, 10, 12)] == [
        "fa3",
        "trtllm_mha",
        "flashinfer",
    ]
    assert sg.default_dsa_decode_backend(glm, "fp8_e4m3", 12) == "flashinfer_sparse_mla"
    assert sg.default_dsa_decode_backend(glm, "fp8_e4m3", 10) == "trtllm"
    assert sg.default_dsa_decode_backend(glm, "fp8_e4m3", 9) == "flashmla_kv"
    assert sg.default_dsa_decode_backend(glm, "bfloat16", 12) == "trtllm"


def test_flashinfer_mla_with_fp8_warns():
    plan = sg.sglang_kv_pool(
        _config("deepseek-ai__DeepSeek-V2-Lite-Chat"),
        weights_gib_per_gpu=30.0,
        gpu_memory_gib=95.59,
        kv_cache_dtype="fp8_e4m3",
        compute_capability="12.0",
        attention_backend="flashinfer",
    )
    assert any("casts each layer's whole FP8 KV buffer" in w for w in plan["warnings"])


# --- worked examples ------------------------------------------------------------------------------


def test_worked_example_tiny_llama_on_h100():
    """catalog tiny_test (2 layers, 2 KV heads of 64) on one H100 (79.19 GiB), all SGLang defaults.

    Rule (nvidia-smi not recorded: 79.19 x 1024 = 81090.56 MiB, the 60-90 GiB tier): chunked prefill 8192,
    decode graphs to 256; reserve 512 + 1.5 x 8192 + 128 + 2 x 256 + 8 x 58 = 13904 MiB, so
    mem_fraction_static = round(67186.56 / 81090.56, 3) = 0.829. Pre-load free 79.19 - 0.75 = 78.44 GiB;
    pool = 78.44 x 0.829 - 0.01 = 65.0168 GiB; cell = 2 x 2 x (64 + 64) x 2 = 1024 bytes.
    """
    cfg = _catalog("models", "tiny_test")["hf_config"]
    plan = sg.sglang_kv_pool(cfg, weights_gib_per_gpu=0.01, gpu_memory_gib=79.19, compute_capability="9.0")
    assert plan["mem_fraction_static"] == 0.829
    assert plan["mem_fraction_static_default"] is True
    assert plan["mem_fraction_static_rule"]["reserved_mib"] == 13904
    assert plan["preload_overhead_gib"] == 0.75
    assert plan["cell_size_bytes"] == 1024
    assert plan["attention_backend"] == "fa3"
    assert plan["page_size"] == 1
    assert plan["kv_pool_bytes_per_gpu"] == int((78.44 * 0.829 - 0.01) * GIB)
    assert plan["max_total_tokens"] == plan["kv_pool_bytes_per_gpu"] // 1024 == 68_175_014
    assert plan["context_length"] == 256
    assert plan["max_running_requests"] == 4096
    assert "SGLang 0.5.17" in plan["note"]
    assert plan["fits"]


def _glm5_on_rtx_pro(**kw):
    model = _catalog("models", "glm5_nvfp4")
    hw = _catalog("hardware", "rtx_pro_6000_x8")
    arch = lc.normalize_architecture(model["hf_config"])
    weights = lc.estimate_weights(
        arch, tp=8, pp=1, dp=1, expert_parallel=False, checkpoint_gib=model["checkpoint_bytes"] / GIB
    )["weights_gib_per_gpu_by_stage"][0]
    args = {
        "weights_gib_per_gpu": weights,
        "gpu_memory_gib": hw["gpu_memory_gib"],
        "tensor_parallel_size": hw["gpu_count"],
        "compute_capability": hw["compute_capability"],
        "nvidia_smi_memory_mib": hw["nvidia_smi_memory_total_mib"],
        "interconnect": hw["interconnect"],
    }
    args.update(kw)
    return weights, sg.sglang_kv_pool(model["hf_config"], **args)


def test_worked_example_glm5_nvfp4_on_8x_rtx_pro_6000_bf16():
    """GLM-5 NVFP4 (78 MLA+DSA layers) at TP 8 on RTX PRO 6000 (SM 12.0, 97887 MiB in nvidia-smi).

    Rule (over 90, under 160 GiB; TP 8): chunked prefill 8192, decode graphs to 512, MLA prefill graphs
    capped at 2048 with a flat 1.5 GiB; reserve 512 + 12288 + 1024 + 1024 + 1536 = 16384 MiB, so
    mem_fraction_static = round(81503 / 97887, 3) = 0.833. Weights 53.98 GiB per GPU (planner estimate of
    the 440 GB checkpoint); pre-load free 95.59 - 1.0 (context 0.5 + PCIe NCCL 0.25 + base 0.25) = 94.59 GiB;
    pool = 94.59 x 0.833 - 53.98 = 24.81 GiB. BF16 cell 78 x (1152 + 132) = 100152 bytes -> 265984 tokens
    (page 64). The remainder 94.59 x 0.167 = 15.80 GiB holds activations, graphs and req_to_token.
    """
    weights, plan = _glm5_on_rtx_pro(kv_cache_dtype="bfloat16")
    assert round(weights, 2) == 53.98
    assert plan["mem_fraction_static"] == 0.833
    assert plan["mem_fraction_static_rule"]["reserved_mib"] == 16384
    assert plan["attention_backend"] == "dsa"
    assert plan["page_size"] == 64
    assert plan["cell_size_bytes"] == 100152
    pool = int((94.59 * 0.833 - weights) * GIB)
    assert plan["kv_pool_bytes_per_gpu"] == pool
    assert plan["kv_pool_gib_per_gpu"] == 24.81
    assert plan["max_total_tokens"] == pool // 100152 // 64 * 64 == 265_984
    assert plan["remainder_gib"] == round(94.59 * (1 - 0.833), 3)
    # 202752-token context: max_running_requests is max(min(tokens / ctx x 512, 4096), 2048) = 2048, and the
    # req_to_token table (2049 x 202756 x 4 bytes, 1.55 GiB) comes out of the remainder.
    assert plan["max_running_requests"] == 2048
    assert plan["req_to_token_bytes"] == 2049 * 202756 * 4


def test_worked_example_glm5_nvfp4_fp8_default_on_sm120():
    """kv_cache_dtype auto on SM 12.0: SGLang picks fp8_e4m3 for DSA models and the flashinfer_sparse_mla
    DSA kernel for GLM; cell 78 x (656 + 132) = 61464 bytes -> 433408 tokens in the same 24.81 GiB."""
    _, plan = _glm5_on_rtx_pro()
    assert plan["kv_cache_dtype"] == "fp8_e4m3"
    assert plan["dsa_decode_backend"] == "flashinfer_sparse_mla"
    assert plan["cell_size_bytes"] == 61464
    assert plan["max_total_tokens"] == 433_408


def test_explicit_fraction_cap_and_failure():
    weights, plan = _glm5_on_rtx_pro(
        kv_cache_dtype="bfloat16", mem_fraction_static=0.9, max_total_tokens=100_000
    )
    assert plan["mem_fraction_static_default"] is False
    assert plan["mem_fraction_static_rule"] is None
    assert plan["kv_pool_bytes_per_gpu"] == int((94.59 * 0.9 - weights) * GIB)
    assert plan["max_total_tokens"] == 100_000 // 64 * 64
    _, tight = _glm5_on_rtx_pro(mem_fraction_static=0.5)
    assert not tight["fits"]
    assert tight["max_total_tokens"] == 0
    assert "raise it above 0.571" in tight["reasons"][0]


def test_input_errors():
    cfg = _catalog("models", "tiny_test")["hf_config"]
    with pytest.raises(lc.PlanInputError, match="mem_fraction_static"):
        sg.sglang_kv_pool(cfg, weights_gib_per_gpu=1, gpu_memory_gib=80, mem_fraction_static=1.5)
    with pytest.raises(lc.PlanInputError, match="weights_gib_per_gpu"):
        sg.sglang_kv_pool(cfg, weights_gib_per_gpu=-1, gpu_memory_gib=80)
    with pytest.raises(lc.PlanInputError, match="compute_capability"):
        sg.sglang_kv_pool(cfg, weights_gib_per_gpu=1, gpu_memory_gib=80, compute_capability="sm90")
