"""Unit tests of filter_plugins/llm_capacity.py: KV layout, weights, memory terms, checks, verdicts."""

from __future__ import annotations

import json
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

import _collection  # noqa: E402  (tests/unit is on sys.path under pytest: rootdir-relative import)
import llm_capacity as lc  # noqa: E402

CONFIGS = ROOT / "tests" / "data" / "model_configs"
GIB = 1024**3


def config(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


LLAMA8B = "meta-llama__Llama-3.1-8B-Instruct"
DSV2 = "deepseek-ai__DeepSeek-V2-Lite-Chat"
GEMMA = "google__gemma-3-27b-it"
GPTOSS = "openai__gpt-oss-20b"
SCOUT = "meta-llama__Llama-4-Scout-17B-16E-Instruct"
QWEN3MOE = "Qwen__Qwen3-30B-A3B"
MIXTRAL = "mistralai__Mixtral-8x7B-Instruct-v0.1"
H100 = {"gpu_memory_gib": 79.19, "gpu_memory_utilization": 0.95, "max_model_len": 8192}


def plan(name: str, **kw):
    args = dict(H100)
    args.update(kw)
    return lc.plan_memory(config(name), **args)


# --- architecture -----------------------------------------------------------------------------


def test_head_dim_defaults_to_hidden_over_heads():
    cfg = {"hidden_size": 2048, "num_hidden_layers": 2, "num_attention_heads": 16, "vocab_size": 1000}
    arch = lc.normalize_architecture(cfg)
    assert arch["head_dim"] == 128
    assert arch["num_key_value_heads"] == 16  # absent -> MHA


def test_nested_text_config_and_top_level_quantization():
    cfg = {
        "model_type": "kimi_k25",
        "quantization_config": {
            "quant_method": "modelopt",
            "quant_algo": "NVFP4",
            "kv_cache_quant_algo": "FP8",
        },
        "text_config": json.loads((CONFIGS / f"{DSV2}.json").read_text()),
    }
    arch = lc.normalize_architecture(cfg)
    assert arch["use_mla"] and arch["kv_lora_rank"] == 512 and arch["num_hidden_layers"] == 27
    scheme = lc.quantization_scheme(arch)
    assert scheme["method"] == "nvfp4" and scheme["bytes_per_param"] == pytest.approx(0.5625)
    assert scheme["kv_cache_dtype"] == "fp8"


def test_gemma3_defaults_and_sliding_pattern():
    arch = lc.normalize_architecture(config(GEMMA))
    assert arch["vocab_size"] == 262208  # transformers default, absent from the published text_config
    assert arch["layer_kinds"].count("full") == 10 and arch["layer_kinds"].count("sliding") == 52
    assert arch["layer_kinds"][5] == "full" and arch["layer_kinds"][0] == "sliding"


def test_llama4_chunked_layers_from_default_nope_interval():
    arch = lc.normalize_architecture(config(SCOUT))
    assert arch["layer_kinds"].count("chunked") == 36 and arch["layer_kinds"].count("full") == 12
    assert arch["window"] == 8192


def test_moe_layer_selection():
    ds = lc.normalize_architecture(config(DSV2))
    assert ds["moe_layers"][0] is False and all(ds["moe_layers"][1:])  # first_k_dense_replace 1
    assert ds["shared_expert_intermediate_size"] == 2 * 1408
    qw = lc.normalize_architecture(config(QWEN3MOE))
    assert qw["num_experts"] == 128 and sum(qw["moe_layers"]) == 48


def test_missing_key_names_the_config_field():
    with pytest.raises(lc.PlanInputError) as err:
        lc.normalize_architecture({"num_hidden_layers": 2, "num_attention_heads": 2, "vocab_size": 10})
    assert err.value.field == "hf_config.hidden_size"


def test_layer_types_length_is_checked():
    cfg = dict(config(GPTOSS), layer_types=["full_attention"] * 3)
    with pytest.raises(lc.PlanInputError, match="layer_types"):
        lc.normalize_architecture(cfg)


# --- KV bytes per token ------------------------------------------------------------------------


@pytest.mark.parametrize(("tp", "heads_per_rank"), [(1, 8), (2, 4), (8, 1), (16, 1)])
def test_gqa_heads_split_by_tp_and_replicated_beyond_kv_heads(tp, heads_per_rank):
    p = plan(LLAMA8B, tensor_parallel_size=tp, kv_cache_memory_gib=10)
    assert p["kv_bytes_per_token_per_rank"] == 32 * 2 * heads_per_rank * 128 * 2


def test_mla_latent_whole_on_every_tp_rank():
    per_rank = [plan(DSV2, tensor_parallel_size=tp, kv_cache_memory_gib=10) for tp in (1, 2, 4)]
    assert {p["kv_bytes_per_token_per_rank"] for p in per_rank} == {27 * (512 + 64) * 2}
    assert len({p["kv_cache_tokens"] for p in per_rank}) == 1


def test_mla_fp8_halves_bytes():
    p = plan(DSV2, kv_cache_dtype="fp8", kv_cache_memory_gib=10)
    assert p["kv_bytes_per_token_per_rank"] == 27 * 576


def test_dcp_shards_mla_over_tokens():
    one = plan(DSV2, tensor_parallel_size=4, kv_cache_memory_gib=20)
    four = plan(DSV2, tensor_parallel_size=4, decode_context_parallel_size=4, kv_cache_memory_gib=20)
    assert four["kv_cache_tokens"] == 4 * one["kv_cache_tokens"]
    assert four["kv_bytes_per_token"] == pytest.approx(one["kv_bytes_per_token"] / 4)
    assert four["max_concurrency"] == pytest.approx(4 * one["max_concurrency"], rel=0.01)


def test_sparse_mla_uses_fp8_ds_mla_and_indexer_pages():
    cfg = dict(config(DSV2), index_topk=2048, index_head_dim=128, index_n_heads=64)
    p = lc.plan_memory(cfg, gpu_memory_gib=80, kv_cache_dtype="fp8", kv_cache_memory_gib=10)
    assert p["kv_bytes_per_token_per_rank"] == 27 * (656 + 132)
    bf16 = lc.plan_memory(cfg, gpu_memory_gib=80, kv_cache_dtype="bfloat16", kv_cache_memory_gib=10)
    assert bf16["kv_bytes_per_token_per_rank"] == 27 * (1152 + 132)
    assert bf16["kv_cache_groups"] == 1  # MLA + indexer: one uniform-type group


def test_fp8_doubles_tokens_of_a_given_budget():
    bf16 = plan(LLAMA8B, kv_cache_memory_gib=58.11)
    fp8 = plan(LLAMA8B, kv_cache_memory_gib=58.11, kv_cache_dtype="fp8")
    assert fp8["kv_cache_tokens"] == pytest.approx(2 * bf16["kv_cache_tokens"], abs=16)


def test_auto_kv_dtype_follows_checkpoint_recipe():
    cfg = dict(
        config(LLAMA8B),
        quantization_config={"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "FP8"},
    )
    p = lc.plan_memory(cfg, gpu_memory_gib=80, kv_cache_memory_gib=10)
    assert p["kv_cache_dtype"] == "fp8"
    assert any("29980" in w for w in p["warnings"])


# --- hybrid / sliding window groups -------------------------------------------------------------


def test_gemma_hybrid_groups_and_reported_tokens():
    p = plan(GEMMA, kv_cache_memory_gib=19.53, vllm_version="0.19.0")
    # 10 full + 52 sliding layers -> group size 10 -> 1 full + 6 sliding groups (2 padding slots).
    assert p["kv_cache_groups"] == 7
    blocks = int(19.53 * GIB // (16 * 16 * 128 * 2 * 2) // 10)
    assert p["num_gpu_blocks"] == blocks
    assert p["kv_cache_tokens"] == blocks // 7 * 16
    # A request of 8192 tokens: 512 full blocks + 6 sliding groups x (cdiv(1023 + 8192, 16)... capped) + 1.
    assert p["blocks_per_request"] == 512 + 6 * 513
    # vLLM 0.22 logs the context the pool holds at max_model_len instead (same blocks).
    new = plan(GEMMA, kv_cache_memory_gib=19.53, vllm_version="0.22.0")
    assert new["num_gpu_blocks"] == blocks
    assert new["kv_cache_tokens"] == int(blocks / (512 + 6 * 513) * 8192)


def test_disabling_hybrid_manager_counts_every_layer_as_full():
    hybrid = plan(GEMMA, kv_cache_memory_gib=19.53)
    flat = plan(GEMMA, kv_cache_memory_gib=19.53, disable_hybrid_kv_cache_manager=True)
    assert flat["kv_cache_groups"] == 1
    assert flat["kv_cache_tokens"] == int(19.53 * GIB // (62 * 16 * 8192)) * 16
    # At 8k the 1024-token window saves nothing and the hybrid groups carry 8 padding layers ...
    assert flat["max_concurrency"] > hybrid["max_concurrency"]
    # ... at 128k the sliding layers' savings dominate.
    hybrid_long = plan(GEMMA, kv_cache_memory_gib=19.53, max_model_len=131072)
    flat_long = plan(
        GEMMA, kv_cache_memory_gib=19.53, max_model_len=131072, disable_hybrid_kv_cache_manager=True
    )
    assert hybrid_long["max_concurrency"] > 3 * flat_long["max_concurrency"]


def test_sliding_window_saves_concurrency_at_long_context():
    kw = {"tensor_parallel_size": 2, "kv_cache_memory_gib": 59.32, "vllm_version": "0.19.0"}
    short = plan(GPTOSS, max_model_len=8192, **kw)
    long = plan(GPTOSS, max_model_len=131072, **kw)
    assert short["kv_cache_tokens"] == long["kv_cache_tokens"]
    # Sliding layers need only window + batch tokens, so 16x the context costs far less than 16x blocks.
    assert long["max_concurrency"] > short["max_concurrency"] / 16 * 1.5


# Shape of a Qwen3-Next style hybrid (Gated DeltaNet + full attention every 4th layer); illustrative.
QWEN3_NEXT_LIKE = {
    "model_type": "qwen3_next",
    "hidden_size": 2048,
    "num_hidden_layers": 48,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "full_attention_interval": 4,
    "linear_num_value_heads": 32,
    "linear_num_key_heads": 16,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "num_experts": 512,
    "num_experts_per_tok": 10,
    "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512,
    "intermediate_size": 5120,
    "vocab_size": 151936,
    "max_position_embeddings": 262144,
}


def test_gated_deltanet_hybrid_pads_attention_blocks_to_the_state():
    p = lc.plan_memory(
        QWEN3_NEXT_LIKE, gpu_memory_gib=80, kv_cache_memory_gib=10, max_model_len=32768, vllm_version="0.19.0"
    )
    state = (8192 // 1) * 3 * 2 + 32 * 128 * 128 * 2  # conv (conv_dim x 3) + temporal state, bf16
    attn_per_token = 2 * 2 * 256 * 2
    block = 16 * -(-state // (16 * attn_per_token))
    assert p["block_size"] == block == 544
    # 12 attention + 36 linear layers -> 1 + 3 groups of 12, pages of block x attention bytes.
    assert p["kv_cache_groups"] == 4
    blocks = int(10 * GIB // (block * attn_per_token) // 12)
    assert p["num_gpu_blocks"] == blocks
    assert p["kv_cache_tokens"] == blocks // 4 * block
    assert p["blocks_per_request"] == -(-32768 // block) + 3  # one state block per linear group
    assert p["kv_bytes_per_token_per_rank"] == 12 * attn_per_token


def test_tp_shards_the_linear_attention_state():
    one = lc.plan_memory(QWEN3_NEXT_LIKE, gpu_memory_gib=80, kv_cache_memory_gib=10)
    two = lc.plan_memory(QWEN3_NEXT_LIKE, gpu_memory_gib=80, kv_cache_memory_gib=10, tensor_parallel_size=2)
    assert two["block_size"] == one["block_size"]  # state and attention heads both halve
    assert two["kv_cache_tokens"] >= 2 * one["kv_cache_tokens"] - 2 * one["block_size"]


# --- pipeline / expert parallel -------------------------------------------------------------------


def test_pp_partition_matches_vllm():
    assert lc.pp_partition(32, 2) == [16, 16]
    assert lc.pp_partition(61, 4) == [15, 15, 16, 15]
    assert lc.pp_partition(62, 4) == [15, 16, 16, 15]
    with pytest.raises(lc.PlanInputError, match="pipeline_parallel_size"):
        lc.pp_partition(3, 4)


def test_pp_stages_have_own_budgets_and_the_smaller_one_limits():
    p = plan(LLAMA8B, pipeline_parallel_size=2, weights_gib_per_gpu=7.51, vllm_version="0.19.0")
    first, last = p["stages"]
    assert last["activation_peak_gib"] > first["activation_peak_gib"]  # sampler on the last stage
    assert p["kv_cache_gib_per_gpu"] == last["kv_cache_gib"]
    assert p["num_gpu_blocks"] == min(p["num_gpu_blocks"] for _ in p["stages"])
    assert p["kv_bytes_per_token_per_rank"] == 16 * 2 * 8 * 128 * 2


def test_pp_weights_split_layers_and_end_pieces():
    one = plan(LLAMA8B)
    two = plan(LLAMA8B, pipeline_parallel_size=2)
    stages = two["weights"]["weights_gib_per_gpu_by_stage"]
    assert sum(stages) == pytest.approx(one["weights_gib_per_gpu"], rel=1e-3)
    assert max(stages) < one["weights_gib_per_gpu"] * 0.55


def test_expert_parallel_splits_experts_over_tp_times_dp():
    tp2 = plan(QWEN3MOE, tensor_parallel_size=2)
    ep = plan(QWEN3MOE, tensor_parallel_size=2, data_parallel_size=2, enable_expert_parallel=True)
    no_ep = plan(QWEN3MOE, tensor_parallel_size=2, data_parallel_size=2)
    assert no_ep["weights_gib_per_gpu"] == pytest.approx(tp2["weights_gib_per_gpu"])  # DP replicates
    assert ep["weights_gib_per_gpu"] < tp2["weights_gib_per_gpu"] * 0.6


def test_expert_parallel_divisibility_names_the_flag():
    p = plan(MIXTRAL, tensor_parallel_size=1, data_parallel_size=3, enable_expert_parallel=True)
    assert not p["fits"]
    assert p["input_errors"][0]["field"] == "enable_expert_parallel"


# --- divisibility -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "kw", "field"),
    [
        (LLAMA8B, {"tensor_parallel_size": 3}, "tensor_parallel_size"),
        (LLAMA8B, {"tensor_parallel_size": 16}, None),  # 16 is a multiple of 8 KV heads: replication
        (
            LLAMA8B,
            {"tensor_parallel_size": 2, "decode_context_parallel_size": 2},
            "decode_context_parallel_size",
        ),
        (LLAMA8B, {"tensor_parallel_size": 16, "decode_context_parallel_size": 2}, None),
        (
            DSV2,
            {"tensor_parallel_size": 4, "decode_context_parallel_size": 8},
            "decode_context_parallel_size",
        ),
        (
            GEMMA,
            {"tensor_parallel_size": 2, "decode_context_parallel_size": 2},
            "decode_context_parallel_size",
        ),
    ],
)
def test_divisibility(name, kw, field):
    p = plan(name, kv_cache_memory_gib=10, **kw)
    fields = {e["field"] for e in p["input_errors"]}
    if field is None:
        assert not fields
    else:
        assert field in fields and not p["fits"]


# --- weights --------------------------------------------------------------------------------------


def test_checkpoint_split_keeps_replicated_parts_whole():
    cfg = config(DSV2)
    w1 = lc.plan_memory(cfg, gpu_memory_gib=80, checkpoint_gib=29.3)
    w8 = lc.plan_memory(
        cfg, gpu_memory_gib=80, tensor_parallel_size=8, checkpoint_gib=29.3, decode_context_parallel_size=1
    )
    assert w1["weights_gib_per_gpu"] == pytest.approx(29.3, rel=0.01)
    replicated = w8["weights"]["replicated_gib_per_gpu_by_stage"][0]
    assert replicated > 0
    # Sharded parts divide by 8, replicated ones (MLA kv_a_proj, norms, router) stay whole.
    expected = (w1["weights_gib_per_gpu"] - replicated) / 8 + replicated
    assert w8["weights_gib_per_gpu"] == pytest.approx(expected, rel=0.01)
    assert w8["weights_gib_per_gpu"] > w1["weights_gib_per_gpu"] / 8 + replicated * 0.8


def test_quantized_weights_from_config():
    w4 = plan("RedHatAI__Meta-Llama-3.1-8B-Instruct-quantized.w4a16")
    bf16 = plan(LLAMA8B)
    assert 5.0 < w4["weights_gib_per_gpu"] < 5.6  # logged 5.38 GiB: lm_head/embeddings stay 16-bit
    runtime_fp8 = plan(LLAMA8B, quantization="fp8")
    assert runtime_fp8["weights_gib_per_gpu"] < bf16["weights_gib_per_gpu"] * 0.6


def test_mxfp4_keeps_ignored_modules_16_bit():
    cfg = config(GPTOSS)
    arch = lc.normalize_architecture(cfg)
    scheme = lc.quantization_scheme(arch)
    attn = {"name": "model.layers.3.self_attn.q_proj", "quant": True}
    experts = {"name": "model.layers.3.mlp.experts", "quant": True}
    assert lc._bytes_per_param(attn, scheme) == 2.0
    assert lc._bytes_per_param(experts, scheme) == pytest.approx(0.53125)


# --- memory terms and versions ---------------------------------------------------------------------


def test_cudagraph_memory_subtracted_from_0_21():
    old = plan(LLAMA8B, weights_gib_per_gpu=14.99, vllm_version="0.19.0")
    new = plan(LLAMA8B, weights_gib_per_gpu=14.99, vllm_version="0.21.0")
    assert not old["cudagraph_subtracted"] and new["cudagraph_subtracted"]
    assert old["kv_cache_gib_per_gpu"] - new["kv_cache_gib_per_gpu"] == pytest.approx(
        new["cudagraph_gib"], abs=2e-3
    )
    eager = plan(LLAMA8B, weights_gib_per_gpu=14.99, vllm_version="0.21.0", enforce_eager=True)
    assert eager["kv_cache_gib_per_gpu"] == pytest.approx(old["kv_cache_gib_per_gpu"], abs=1e-3)


def test_cudagraph_estimate_shrinks_with_small_batches():
    assert lc.estimate_cudagraph_gib(32, 4) < 0.5 * lc.estimate_cudagraph_gib(32, 1024)
    assert lc.estimate_cudagraph_gib(32, 256) == lc.estimate_cudagraph_gib(32, 1024)  # both capture up to 512


def test_yarn_scaling_sets_the_default_context():
    cfg = dict(
        config(QWEN3MOE),
        max_position_embeddings=32768,
        rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
    )
    assert lc.normalize_architecture(cfg)["max_position_embeddings"] == 131072
    assert lc.plan_memory(cfg, gpu_memory_gib=80, kv_cache_memory_gib=50)["max_model_len"] == 131072


def test_activation_grows_with_batch_and_sampler_rows():
    small = plan(LLAMA8B, max_num_seqs=256, max_num_batched_tokens=2048)
    big = plan(LLAMA8B, max_num_seqs=1024, max_num_batched_tokens=8192)
    assert big["activation_peak_gib"] > small["activation_peak_gib"] * 2


def test_vllm_defaults_depend_on_gpu_size():
    assert plan(LLAMA8B)["max_num_seqs"] == 1024
    small = lc.plan_memory(config(LLAMA8B), gpu_memory_gib=47.5, max_model_len=4096)
    assert (small["max_num_seqs"], small["max_num_batched_tokens"]) == (256, 2048)


def test_non_torch_grows_with_tp():
    assert lc.estimate_non_torch_gib(tp=1, pp=1) < lc.estimate_non_torch_gib(tp=2, pp=1)
    assert lc.estimate_non_torch_gib(tp=2, pp=1) < lc.estimate_non_torch_gib(tp=8, pp=1)


# --- verdicts -------------------------------------------------------------------------------------------


def test_weights_too_large_is_reported():
    p = plan("Qwen__Qwen2.5-72B-Instruct", tensor_parallel_size=1)
    assert not p["fits"]
    assert any("exceed" in r for r in p["reasons"])


def test_context_too_long_names_the_length_that_fits():
    p = plan(LLAMA8B, kv_cache_memory_gib=1.0, max_model_len=16384)
    assert not p["fits"]
    reason = next(r for r in p["reasons"] if "largest max_model_len" in r)
    fit_len = int(reason.rsplit(" ", 1)[1])
    assert fit_len == int(1.0 * GIB // (32 * 16 * 4096)) * 16
    assert plan(LLAMA8B, kv_cache_memory_gib=1.0, max_model_len=fit_len)["fits"]


def test_max_model_len_beyond_model_limit():
    p = plan(MIXTRAL, tensor_parallel_size=2, max_model_len=65536)
    assert any("max_position_embeddings" in r for r in p["reasons"])


def test_gpu_count_smaller_than_layout():
    p = plan(LLAMA8B, tensor_parallel_size=4, gpu_count=2)
    assert not p["fits"] and any("gpu_count" in r for r in p["reasons"])


def test_json_keys_present():
    p = plan(LLAMA8B)
    for key in (
        "weights_gib_per_gpu",
        "kv_cache_gib_per_gpu",
        "kv_bytes_per_token",
        "kv_cache_tokens",
        "max_concurrency",
        "fits",
        "reasons",
    ):
        assert key in p
    json.dumps(p)


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"tensor_parallel_size": 0}, "tensor_parallel_size"),
        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
        ({"gpu_memory_gib": -1}, "gpu_memory_gib"),
        ({"kv_cache_dtype": "int4"}, "kv_cache_dtype"),
        ({"vllm_version": "latest"}, "vllm_version"),
        ({"weights_gib_per_gpu": 5, "checkpoint_gib": 10}, "weights_gib_per_gpu"),
        ({"max_model_len": 0}, "max_model_len"),
        ({"quantization": "int3"}, "quantization"),
    ],
)
def test_bad_inputs_raise_naming_the_input(kw, field):
    with pytest.raises(lc.PlanInputError) as err:
        plan(LLAMA8B, **kw)
    assert err.value.field == field
    assert isinstance(err.value, ValueError)


def test_numeric_strings_from_ansible_are_accepted():
    as_text = plan(LLAMA8B, tensor_parallel_size="2", gpu_memory_utilization="0.95", kv_cache_memory_gib="10")
    assert (
        as_text["kv_cache_tokens"]
        == plan(LLAMA8B, tensor_parallel_size=2, kv_cache_memory_gib=10)["kv_cache_tokens"]
    )
    with pytest.raises(lc.PlanInputError, match="tensor_parallel_size"):
        plan(LLAMA8B, tensor_parallel_size="two")
    with pytest.raises(lc.PlanInputError, match="tensor_parallel_size"):
        plan(LLAMA8B, tensor_parallel_size=True)
    off = plan(QWEN3MOE, tensor_parallel_size=2, data_parallel_size=2, enable_expert_parallel="false")
    assert off["layout"]["enable_expert_parallel"] is False
    with pytest.raises(lc.PlanInputError, match="enable_expert_parallel"):
        plan(QWEN3MOE, enable_expert_parallel="maybe")


# --- recommendation ------------------------------------------------------------------------------


def test_mla_backend_by_compute_capability_and_version():
    assert lc.mla_backend("12.0", "0.17.1") == {
        "backend": "TRITON_MLA",
        "fp8_kv": False,
        "block_size": 16,
        "reason": lc.mla_backend("12.0", "0.17.1")["reason"],
    }
    # The 0.18.0 sdist is the first whose TRITON_MLA takes an FP8 cache.
    assert lc.mla_backend("12.0", "0.18.0")["fp8_kv"] is True
    assert lc.mla_backend("12.0", "0.22.0")["fp8_kv"] is True
    assert lc.mla_backend("9.0", "0.22.0")["backend"] == "FLASH_ATTN_MLA"
    assert lc.mla_backend("9.0", "0.22.0")["fp8_backend"] == "FLASHMLA"
    assert lc.mla_backend("10.0", "0.22.0")["backend"] == "FLASHINFER_MLA"
    with pytest.raises(lc.PlanInputError, match="compute_capability"):
        lc.mla_backend("sm120", "0.22.0")


def test_recommend_uses_dcp_and_fp8_only_when_needed():
    cfg = config(DSV2)
    kw = {"gpu_memory_gib": 24, "gpu_count": 4, "compute_capability": "12.0", "target_max_model_len": 131072}
    old = lc.recommend_layout(cfg, vllm_version="0.17.0", **kw)
    assert old["fits"] and old["attention_backend"] == "TRITON_MLA"
    assert old["kv_cache_dtype"] == "bfloat16"  # no FP8 on TRITON_MLA before PR #34597
    assert old["decode_context_parallel_size"] == old["tensor_parallel_size"] == 4
    new = lc.recommend_layout(cfg, vllm_version="0.22.0", **kw)
    assert new["kv_cache_dtype"] == "fp8" and new["plan"]["max_concurrency"] >= 16
    assert new["plan"]["kv_cache_tokens"] > old["plan"]["kv_cache_tokens"]
    # A short context needs neither: 16-bit cache, no DCP, and the smallest TP whose DP replicas
    # together hold 16 requests.
    short = lc.recommend_layout(cfg, vllm_version="0.22.0", **dict(kw, target_max_model_len=8192))
    assert short["kv_cache_dtype"] == "bfloat16" and short["decode_context_parallel_size"] == 1
    assert short["tensor_parallel_size"] * short["data_parallel_size"] == 4
    assert short["tensor_parallel_size"] < 4
    assert short["plan"]["max_concurrency"] * short["data_parallel_size"] >= 16


def test_recommend_shortens_context_when_the_full_one_does_not_fit():
    r = lc.recommend_layout(config(LLAMA8B), gpu_memory_gib=24, gpu_count=1, gpu_memory_utilization=0.9)
    assert r["fits"] and r["max_model_len"] < 131072 and r["max_model_len"] % 1024 == 0
    assert any("does not fit" in n for n in r["notes"])
    assert (
        lc.plan_memory(config(LLAMA8B), gpu_memory_gib=24, max_model_len=r["max_model_len"] + 16384)["fits"]
        is False
    )


def test_data_parallel_replicas_multiply_tokens():
    p = plan(LLAMA8B, data_parallel_size=2, kv_cache_memory_gib=10)
    assert p["kv_cache_tokens_all_replicas"] == 2 * p["kv_cache_tokens"]


def test_recommend_reports_no_fit():
    r = lc.recommend_layout(config("Qwen__Qwen2.5-72B-Instruct"), gpu_memory_gib=24, gpu_count=2)
    assert r["fits"] is False and r["reasons"]


# --- Ansible filter ------------------------------------------------------------------------------------


def test_filter_module_maps_names_and_wraps_errors():
    filters = _collection.filters("llm_capacity")
    assert set(filters) == {"llm_plan", "llm_recommend", "llm_sglang_plan"}
    out = filters["llm_plan"](config(LLAMA8B), gpu_memory_gib=80)
    assert out["fits"]
    with pytest.raises(lc.AnsibleFilterError, match=r"llm_plan: tensor_parallel_size"):
        filters["llm_plan"](config(LLAMA8B), gpu_memory_gib=80, tensor_parallel_size=-1)
    with pytest.raises(lc.AnsibleFilterError, match="llm_recommend"):
        filters["llm_recommend"](config(LLAMA8B), gpu_memory_gib=80, gpu_count=0)


# --- report formula by version, hybrid state -------------------------------------------------------


def test_token_report_switches_to_concurrency_times_length_from_0_22():
    """Full attention: both vLLM formulas give the same count; sliding-window groups: the newer one counts
    what the pool holds at max_model_len (blocks / blocks per request x length)."""
    dense = {v: plan(LLAMA8B, kv_cache_memory_gib=10, vllm_version=v) for v in ("0.19.0", "0.22.0")}
    assert dense["0.19.0"]["kv_cache_tokens"] == dense["0.22.0"]["kv_cache_tokens"]
    long = {"tensor_parallel_size": 2, "kv_cache_memory_gib": 10, "max_model_len": 131072}
    old = plan(GPTOSS, vllm_version="0.19.0", **long)
    new = plan(GPTOSS, vllm_version="0.22.0", **long)
    assert old["num_gpu_blocks"] == new["num_gpu_blocks"]
    assert old["kv_cache_tokens"] == old["num_gpu_blocks"] // 2 * 16
    assert new["kv_cache_tokens"] == int(new["num_gpu_blocks"] / new["blocks_per_request"] * 131072)
    # At 131,072 tokens a sliding layer holds only its window (+ a batch): the pool serves more context.
    assert new["kv_cache_tokens"] > old["kv_cache_tokens"]


def test_hybrid_state_dtype_and_align_mode():
    cfg = config("Qwen__Qwen3.5-27B")
    fp32 = lc.plan_memory(cfg, gpu_memory_gib=80, max_model_len=32768, kv_cache_memory_gib=20)
    bf16_cfg = json.loads(json.dumps(cfg))
    del bf16_cfg["text_config"]["mamba_ssm_dtype"]
    bf16 = lc.plan_memory(bf16_cfg, gpu_memory_gib=80, max_model_len=32768, kv_cache_memory_gib=20)
    assert (fp32["block_size"], bf16["block_size"]) == (784, 400)  # float32 temporal state doubles the page
    align = lc.plan_memory(
        cfg, gpu_memory_gib=80, max_model_len=32768, kv_cache_memory_gib=20, mamba_cache_mode="align"
    )
    assert align["blocks_per_request"] == fp32["blocks_per_request"] + 3  # 3 linear groups, 2 blocks each
    with pytest.raises(lc.PlanInputError, match="mamba_cache_mode"):
        lc.plan_memory(cfg, gpu_memory_gib=80, mamba_cache_mode="all")


def test_flashinfer_mla_block_follows_the_release():
    # 0.17.1's platforms/cuda.py forced 64; from 0.18.0 the backend's smallest supported size (32) is taken.
    assert lc.mla_backend("10.0", "0.17.1")["block_size"] == 64
    assert lc.mla_backend("10.0", "0.18.0")["block_size"] == 32
    assert lc.mla_backend("10.0", "0.33.0")["block_size"] == 32


@pytest.mark.parametrize(("version", "util"), [("0.19.1", 0.9), ("0.20.0", 0.92), ("0.33.0", 0.92)])
def test_vllm_default_gpu_memory_utilization_by_release(version, util):
    assert lc.default_gpu_memory_utilization(version) == util


def test_sparse_mla_backends_by_gpu_and_release():
    assert lc.sparse_mla_backend("9.0", "0.22.0")["backend"] == "FLASHMLA_SPARSE"
    assert lc.sparse_mla_backend("12.0", "0.23.0")["backend"] is None
    assert lc.sparse_mla_backend("12.0", "0.24.0")["backend"] == "FLASHINFER_MLA_SPARSE_SM120"
    assert lc.sparse_mla_backend("12.0", "0.33.0")["block_size"] == 64
