"""Capacity planner: will a model fit a GPU layout under vLLM, and with how much KV cache.

Pure functions over a Hugging Face ``config.json`` dict. The memory accounting follows vLLM's own
start-up algorithm (see docs/planner.md for the source paths):

* ``vllm/v1/worker/gpu_worker.py`` ``determine_available_memory``: the KV budget of a worker is
  ``total * gpu_memory_utilization - (weights + peak activation + non-torch memory)``, minus the
  profiled CUDA-graph memory where ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` is on (the default
  since 0.21; 0.19 only logs it). ``--kv-cache-memory-bytes`` replaces the whole budget.
* ``vllm/v1/kv_cache_interface.py``: page size of a layer = ``block_size * kv_heads * (k_dim + v_dim)
  * dtype_bytes``; MLA stores one latent "head" of ``kv_lora_rank + qk_rope_head_dim`` elements
  (``fp8_ds_mla``: 656 bytes per token); sliding-window / chunked layers only need their window.
* ``vllm/v1/core/kv_cache_utils.py``: layers are grouped (hybrid models: groups of equal size, padded),
  ``num_blocks = memory // page_size // group_size``, the minimum over all workers (PP stages) is
  used, the logged token count is ``num_blocks // num_groups * block_size * dcp``, and the maximum
  concurrency is ``num_blocks / blocks needed by one max_model_len request``.

The activation, non-torch and CUDA-graph terms cannot be derived from a config alone; they are
modelled from what the profile run does (a dummy forward of ``max_num_batched_tokens`` tokens and a
dummy sampler run over ``max_num_seqs`` rows of vocabulary-wide logits) with coefficients measured on
real vLLM start-up logs (``../shared/data/vllm_memory_calibration.jsonl``). Each coefficient is named
below with what it stands for.

The module imports only the standard library; Ansible is optional so ``bin/llm-plan`` runs with a
bare ``python3``.
"""

from __future__ import annotations

import fnmatch
import functools
import math
import re
from typing import Any

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # bin/llm-plan runs without Ansible installed

    class AnsibleFilterError(Exception):  # type: ignore[no-redef]
        """Stand-in when Ansible is not importable."""


GIB = 1024**3
# vLLM's default KV block size on CUDA (vllm/config/cache.py; platforms/cuda.py sets 16 when unset).
DEFAULT_BLOCK_SIZE = 16
# vllm/model_executor/layers/vocab_parallel_embedding.py DEFAULT_VOCAB_PADDING_SIZE.
VOCAB_PADDING = 64
# Newest vLLM whose behaviour this planner models by default (the version on the project's GPU hosts).
DEFAULT_VLLM_VERSION = "0.22.0"
# CUDA-graph memory is subtracted from the KV budget by default from this version on
# (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS; 0.19 logs "will be enabled by default", 0.22 applies it).
CUDAGRAPH_SUBTRACTED_SINCE = (0, 21, 0)
# Model Runner V2 (vllm/v1/worker/gpu/model_runner.py) is the default for these architectures (vllm/config/
# vllm.py DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES of each release); up to 0.28 its profile_cudagraph_memory
# returns 0, so nothing is subtracted for them. 0.21 has no x86 wheel to read; 0.22's list is assumed.
_V2_RUNNER_ARCHITECTURES = (
    ((0, 21, 0), frozenset({"Qwen3ForCausalLM"})),
    ((0, 23, 0), frozenset({"LlamaForCausalLM", "MistralForCausalLM", "Qwen3ForCausalLM"})),
    (
        (0, 24, 0),
        frozenset(
            {"DeepseekV2ForCausalLM", "GraniteMoeForCausalLM", "LlamaForCausalLM", "MistralForCausalLM"}
            | {"Qwen2MoeForCausalLM", "Qwen3ForCausalLM"}
        ),
    ),
    ((0, 25, 0), frozenset({"DeepseekV2ForCausalLM", "GraniteMoeForCausalLM", "Qwen2MoeForCausalLM"})),
    (
        (0, 26, 0),
        frozenset({"DeepseekV2ForCausalLM", "GraniteMoeForCausalLM", "Qwen2MoeForCausalLM"})
        | frozenset(
            {"InklingForCausalLM", "InklingForConditionalGeneration", "LongcatFlashNgramForCausalLM"}
        ),
    ),
)
# From 0.27.0 vllm/utils/mem_utils.py memory_profiling charges "total consumed" (free memory since the
# worker's first snapshot) plus the transient headroom (torch peak - allocated), instead of weights +
# torch peak increase + non-torch increase (0.19-0.26). Consumed memory includes freed profile-run blocks
# that a small later allocation pins past empty_cache(); vLLM limits that only from 0.31 (gpu_worker.py
# _scoped_allocator_max_split around profile_run). The pinned share is allocator-dependent and not
# derivable from a config, so from 0.27 the planner keeps its H100 graph-memory fit (which the three
# vLLM 0.28 L40S records match within 1.1-3.5 %) as the stand-in for graphs plus that residue.
CONSUMED_ACCOUNTING_SINCE = (0, 27, 0)
# From 0.29 Model Runner V2 serves every supported model and its estimate (vllm/v1/worker/gpu/
# cudagraph_utils.py profile_cudagraph_memory) captures every PIECEWISE graph and extrapolates FULL ones
# from the largest: the real capture footprint, which the H100 fit above describes.
V2_RUNNER_EVERYWHERE_SINCE = (0, 29, 0)


def v2_runner_skips_graph_estimate(architectures: list[str], version: tuple[int, int, int]) -> bool:
    """True where vLLM 0.21-0.26 runs the model on Model Runner V2, whose graph estimate is 0 (0.27-0.28
    do too, but there the planner's stand-in term also carries the consumed-memory residue)."""
    listed: frozenset[str] = frozenset()
    for since, names in _V2_RUNNER_ARCHITECTURES:
        if version >= since:
            listed = names
    return CUDAGRAPH_SUBTRACTED_SINCE <= version < CONSUMED_ACCOUNTING_SINCE and bool(
        listed.intersection(architectures)
    )


# "GPU KV cache size" is logged as int(max_concurrency * max_model_len) from this version on (PRs #38364 /
# #40694): this project's own vLLM 0.22.0 recording on an H200 shows it for Gemma 3
# (tests/data/vllm_logs_h200.jsonl r02_gemma3_tp1_bf16, exact), v0.27.1's kv_cache_utils.py has it, while
# 0.19.0 (issue #40691) and 0.16.1rc1 (a Qwen3.5-9B log) print num_blocks // groups * block. 0.20 and
# 0.21 are not pinned; 0.22 is the first version seen with it.
REPORT_FROM_CONCURRENCY_SINCE = (0, 22, 0)
# First release assumed to carry vLLM PR #34597 (FP8 KV for TRITON_MLA). The PR merged after
# 2026-02-28 (issue #35577 still quotes the NotImplementedError) and before 2026-05-24 (PR #35695
# closed as implemented upstream); the release is not pinned from the sources, so this is the
# conservative bound the catalog uses too.
TRITON_MLA_FP8_SINCE = (0, 20, 0)
# vllm/engine/arg_utils.py: API-server defaults on GPUs with >= 70 GiB (A100 excepted) vs smaller ones.
LARGE_GPU_GIB = 70.0
DEFAULTS_LARGE_GPU = {"max_num_seqs": 1024, "max_num_batched_tokens": 8192}
DEFAULTS_SMALL_GPU = {"max_num_seqs": 256, "max_num_batched_tokens": 2048}
# From 0.28 GPUs with >= 160 GiB (B200 / B300) default to 16384 batched tokens for the API server too
# (vllm/engine/arg_utils.py get_batch_defaults; absent in 0.27.1).
HUGE_GPU_GIB = 160.0
HUGE_GPU_SINCE = (0, 28, 0)
DEFAULTS_HUGE_GPU = {"max_num_seqs": 1024, "max_num_batched_tokens": 16384}
# fused_moe processes at most this many tokens per chunk (vllm/envs.py VLLM_FUSED_MOE_CHUNK_SIZE).
FUSED_MOE_CHUNK = 16 * 1024

# --- Profile-run coefficients (measured on vLLM 0.19 H100 logs; see docs/planner.md) -------------
# The dummy sampler run holds about this many float32 copies of the [max_num_seqs, vocab] logits at
# its peak (logits, float32 copy, probabilities / top-k-top-p scratch).
SAMPLER_FP32_COPIES = 3.71
# Before 0.17 the default sampler filters top-k / top-p with PyTorch's sort (vllm/v1/sample/ops/
# topk_topp_sampler.py apply_top_k_top_p; the Triton kernel arrives in 0.17; the FlashInfer sampler is
# opt-in from 0.13 and an optional extra before 0.12). Live at its peak, in float32-copy units, counted
# from that code: bf16 logits kept by the dummy run (0.5), their float32 copy (1), sorted values (1),
# int64 indices (2), top-k bool mask (0.25), top-p probabilities / cumsum (1), top-p mask (0.25) and the
# scattered result (1).
SAMPLER_SORT_FP32_COPIES = 7.0
TRITON_TOPK_TOPP_SINCE = (0, 17, 0)
# Hidden-state buffers of the dummy forward still alive while the sampler runs, in units of
# max_num_batched_tokens x hidden x 2 bytes.
HIDDEN_COPIES = 1.2
# Transient peak of one dense decoder layer in the forward pass, in [tokens x width x 2 bytes] units:
# about 3 intermediate-wide (gate_up output and its activation) and 7 hidden-wide tensors.
FORWARD_INTERMEDIATE_COPIES = 3.0
FORWARD_HIDDEN_COPIES = 7.0
# Memory allocated outside PyTorch during the profile run (CUDA context growth, cuBLAS workspaces).
NON_TORCH_BASE_GIB = 0.25
NON_TORCH_BASE_PP_GIB = 0.07
# NCCL communicators and custom all-reduce buffers of a TP group: ~1.84 GiB at TP 2, ~1.94 at TP 4
# (H100 NVLink); grows by ~0.105 GiB per doubling of the group.
ALLREDUCE_TP2_GIB = 1.835
ALLREDUCE_PER_DOUBLING_GIB = 0.105
# PCIe-only GPUs: no NVLS / symmetric-memory buffers, and vLLM disables its custom all-reduce beyond
# two PCIe GPUs (device_communicators/custom_all_reduce.py), leaving NCCL's ring buffers. Assumed, not
# measured here; it reproduces the Kimi-K2.5 8x RTX PRO 6000 figure (docs/planner.md).
ALLREDUCE_PCIE_GIB = 0.25
# CUDA-graph memory as captured after the KV cache (what vLLM 0.19 logs as "CUDAGraph memory", H100 fit):
# fixed part plus a part per decoder layer on the rank. Informational only: 0.19 does not subtract it.
CUDAGRAPH_BASE_GIB = 0.35
CUDAGRAPH_PER_LAYER_GIB = 0.0185
# From 0.21 vLLM subtracts its own *estimate* (gpu_model_runner.profile_cudagraph_memory): per mode it
# captures the two largest sizes into a scratch pool and measures free memory; first capture + (n - 1) x
# the second capture, floored at 1 MiB per graph ("driver overhead"); the modes share one pool, so the
# total is max(first captures) + sum of the per-graph parts. Measured first captures on this project's
# H200 / vLLM 0.22.0 / torch 2.11 recordings (tests/data/vllm_logs_h200): 62-64 MiB for both 1024-wide
# models, whose 512-token layer transient is only 15-24 MiB, so the floor is fixed cost (allocator
# segments of the warm-up and capture pools, library workspaces), not activations. Assumed: the first
# capture grows with the layer transient of the largest captured batch once that exceeds the floor.
CUDAGRAPH_FIRST_CAPTURE_MIN_GIB = 64 / 1024
CUDAGRAPH_PER_GRAPH_GIB = 1 / 1024
# vllm/config/vllm.py _set_cudagraph_sizes: largest capture size min(2 x max_num_seqs, 512).
CUDAGRAPH_MAX_CAPTURE_SIZE = 512

_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 2, "float": 2, "auto": 2}
# config.json "mamba_ssm_dtype" (Qwen3.5 ships "float32"): vLLM keeps the recurrent (temporal) state in
# that dtype (vllm/model_executor/layers/mamba/mamba_utils.py MambaStateDtypeCalculator); the conv state
# stays in the model dtype.
_STATE_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
_KV_DTYPES = {"auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2"}


class PlanInputError(ValueError):
    """Bad planner input. ``field`` is the keyword argument (or config key) at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.detail = message


# ----------------------------------------------------------------------------------------------
# Small helpers
# ----------------------------------------------------------------------------------------------


def parse_version(version: str) -> tuple[int, int, int]:
    """'0.22.0' / 'v0.19.1rc1' / '0.23.1rc1.dev1018+g8aba' -> (0, 22, 0) etc."""
    match = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?", str(version).strip())
    if not match:
        raise PlanInputError("vllm_version", f"expected X.Y.Z, got {version!r}")
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _int_field(cfg: dict[str, Any], key: str, *, required: bool = True, default: Any = None) -> Any:
    value = cfg.get(key, default)
    if value is None:
        if required:
            raise PlanInputError(f"hf_config.{key}", "missing from the model config (config.json)")
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise PlanInputError(f"hf_config.{key}", f"expected a non-negative number, got {value!r}")
    return int(value)


def _numeric(value: Any, kind: type) -> Any:
    # Ansible variables can arrive as strings ("8", "0.93"); accept those, never booleans.
    if isinstance(value, str):
        try:
            return kind(value.strip())
        except ValueError:
            return value
    return value


def _positive_int(name: str, value: Any) -> int:
    value = _numeric(value, int)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlanInputError(name, f"expected an integer >= 1, got {value!r}")
    return value


def _positive_float(name: str, value: Any, *, upper: float | None = None) -> float:
    value = _numeric(value, float)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise PlanInputError(name, f"expected a number > 0, got {value!r}")
    if upper is not None and value > upper:
        raise PlanInputError(name, f"expected a number <= {upper}, got {value!r}")
    return float(value)


def _flag(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "yes", "1", "false", "no", "0", ""):
        return value.strip().lower() in ("true", "yes", "1")
    raise PlanInputError(name, f"expected true or false, got {value!r}")


def _pow2_divisors(n: int) -> list[int]:
    return [d for d in (1, 2, 4, 8, 16, 32, 64) if d <= n and n % d == 0]


# ----------------------------------------------------------------------------------------------
# Architecture normalisation
# ----------------------------------------------------------------------------------------------


# Values transformers fills in when a published config.json leaves them out (configuration_*.py).
_MODEL_TYPE_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {
        "vocab_size": 262208,
        "sliding_window_pattern": 6,
        "max_position_embeddings": 131072,
        "tie_word_embeddings": True,
    },
    "gemma2": {"tie_word_embeddings": True},
    "gemma": {"tie_word_embeddings": True},
}


def _text_config(hf_config: dict[str, Any]) -> dict[str, Any]:
    text = dict(hf_config)
    for key in ("text_config", "language_config", "llm_config"):
        sub = hf_config.get(key)
        if isinstance(sub, dict) and sub.get("num_hidden_layers") is not None:
            text = {k: v for k, v in hf_config.items() if k not in ("text_config", "vision_config")}
            text.update(sub)
            break
    for key, value in _MODEL_TYPE_DEFAULTS.get(str(text.get("model_type", "")), {}).items():
        text.setdefault(key, value)
    return text


def _layer_kinds(text: dict[str, Any], layers: int, warnings: list[str]) -> tuple[list[str], int | None]:
    """Attention kind of every decoder layer and the window (sliding or chunk) length."""
    model_type = str(text.get("model_type", ""))
    window = text.get("sliding_window")
    layer_types = text.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        if len(layer_types) != layers:
            raise PlanInputError(
                "hf_config.layer_types", f"has {len(layer_types)} entries for {layers} layers"
            )
        mapping = {
            "full_attention": "full",
            "sliding_attention": "sliding",
            "chunked_attention": "chunked",
            "linear_attention": "linear",
            "mamba": "linear",
        }
        kinds = []
        for entry in layer_types:
            kind = mapping.get(str(entry))
            if kind is None:
                warnings.append(f"layer type {entry!r} is not modelled; counted as full attention")
                kind = "full"
            kinds.append(kind)
        if "sliding" in kinds and not window:
            raise PlanInputError("hf_config.sliding_window", "sliding layers listed but no window size")
        return kinds, window
    pattern = text.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        # Nemotron-H style: M = mamba, * = attention, - = MLP only (no cache).
        kinds = ["full" if c == "*" else "linear" if c == "M" else "none" for c in pattern]
        return kinds, None
    interval = text.get("full_attention_interval")
    if isinstance(interval, int) and interval > 0:  # Qwen3-Next: 3 linear-attention layers per full one
        return ["full" if (i + 1) % interval == 0 else "linear" for i in range(layers)], None
    chunk = text.get("attention_chunk_size")
    if chunk and model_type.startswith("llama4"):
        nope = text.get("no_rope_layers") or []
        if len(nope) == layers:
            uses_rope = [bool(x) for x in nope]
        else:  # transformers' default: every 4th layer is a NoPE (global) layer
            step = int(text.get("no_rope_layer_interval") or 4)
            uses_rope = [(i + 1) % step != 0 for i in range(layers)]
        return ["chunked" if rope else "full" for rope in uses_rope], int(chunk)
    pattern_n = text.get("sliding_window_pattern")
    if window and isinstance(pattern_n, int) and pattern_n > 1:  # Gemma 3: 5 local then 1 global
        return ["full" if (i + 1) % pattern_n == 0 else "sliding" for i in range(layers)], window
    if window and model_type == "gemma2":  # vLLM gemma2.py: even layers slide
        return ["sliding" if i % 2 == 0 else "full" for i in range(layers)], window
    if window and text.get("use_sliding_window", True) is not False:
        max_window_layers = text.get("max_window_layers")
        if model_type.startswith("qwen") and isinstance(max_window_layers, int):
            return ["sliding" if i >= max_window_layers else "full" for i in range(layers)], window
        return ["sliding"] * layers, window
    return ["full"] * layers, None


def _linear_state(text: dict[str, Any]) -> dict[str, Any] | None:
    """Shape of a Gated DeltaNet (linear_*) or Mamba2 (mamba_* / ssm_*) layer's recurrent state."""
    if text.get("linear_num_value_heads"):
        return {
            "type": "gdn",
            "k_heads": int(text.get("linear_num_key_heads") or text["linear_num_value_heads"]),
            "k_dim": int(text.get("linear_key_head_dim") or 128),
            "v_heads": int(text["linear_num_value_heads"]),
            "v_dim": int(text.get("linear_value_head_dim") or 128),
            "kernel": int(text.get("linear_conv_kernel_dim") or 4),
            "ssm_bytes": _STATE_DTYPE_BYTES.get(str(text.get("mamba_ssm_dtype") or "")),
        }
    if text.get("mamba_num_heads") and text.get("ssm_state_size"):
        return {
            "type": "mamba2",
            "heads": int(text["mamba_num_heads"]),
            "head_dim": int(text.get("mamba_head_dim") or 64),
            "state": int(text["ssm_state_size"]),
            "groups": int(text.get("n_groups") or text.get("mamba_n_groups") or 1),
            "kernel": int(text.get("conv_kernel") or text.get("mamba_d_conv") or 4),
            "ssm_bytes": _STATE_DTYPE_BYTES.get(str(text.get("mamba_ssm_dtype") or "")),
        }
    return None


def _derived_max_len(text: dict[str, Any]) -> int | None:
    """Default max_model_len. vllm/config/model.py: YaRN scaling gives original x factor."""
    length = text.get("max_position_embeddings")
    rope = text.get("rope_scaling") or text.get("rope_parameters")
    if isinstance(rope, dict) and (rope.get("rope_type") or rope.get("type")) == "yarn":
        original, factor = rope.get("original_max_position_embeddings"), rope.get("factor")
        if original and factor:
            return max(int(original * factor), int(length or 0))
    return int(length) if length else None


def _moe_layers(text: dict[str, Any], layers: int, experts: int) -> list[bool]:
    if not experts:
        return [False] * layers
    if isinstance(text.get("moe_layers"), list) and text["moe_layers"]:
        chosen = {int(i) for i in text["moe_layers"]}
        return [i in chosen for i in range(layers)]
    first_dense = int(text.get("first_k_dense_replace") or 0)
    freq = int(text.get("moe_layer_freq") or 1)
    step = int(text.get("decoder_sparse_step") or text.get("interleave_moe_layer_step") or 1)
    mlp_only = {int(i) for i in (text.get("mlp_only_layers") or [])}
    flags = []
    for i in range(layers):
        moe = i >= first_dense and (i - first_dense) % freq == 0 and (i + 1) % step == 0
        flags.append(moe and i not in mlp_only)
    return flags


def _vision_params(hf_config: dict[str, Any], hidden: int) -> int:
    vision = hf_config.get("vision_config")
    if not isinstance(vision, dict):
        return 0
    h = vision.get("hidden_size") or vision.get("vt_hidden_size") or vision.get("embed_dim")
    n = vision.get("num_hidden_layers") or vision.get("vt_num_hidden_layers") or vision.get("depth")
    inter = vision.get("intermediate_size") or vision.get("vt_intermediate_size") or (4 * (h or 0))
    if not h or not n:
        return 0
    # Per ViT block: qkv + out projections (4 h^2) and a two-matrix MLP; plus a projector into the LM
    # (merged patches of 4 x h to the text hidden size).
    return int(n) * (4 * int(h) * int(h) + 2 * int(h) * int(inter)) + 4 * int(h) * hidden


def normalize_architecture(hf_config: dict[str, Any]) -> dict[str, Any]:
    """Reduce a published config.json to the values the planner needs."""
    if not isinstance(hf_config, dict) or not hf_config:
        raise PlanInputError("hf_config", "expected the model's config.json as a non-empty mapping")
    text = _text_config(hf_config)
    warnings: list[str] = []
    hidden = _int_field(text, "hidden_size")
    layers = _int_field(text, "num_hidden_layers")
    heads = _int_field(text, "num_attention_heads")
    vocab = _int_field(text, "vocab_size")
    if not hidden or not layers or not heads or not vocab:
        raise PlanInputError("hf_config", "hidden_size, num_hidden_layers, heads and vocab_size must be > 0")
    kv_heads = _int_field(text, "num_key_value_heads", required=False, default=heads) or heads
    head_dim = _int_field(text, "head_dim", required=False, default=None) or hidden // heads
    kv_lora = text.get("kv_lora_rank")
    mla = isinstance(kv_lora, int) and kv_lora > 0
    experts = 0
    for key in ("n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts"):
        if isinstance(text.get(key), int) and text[key] > 0:
            experts = int(text[key])
            break
    top_k = int(text.get("num_experts_per_tok") or text.get("experts_per_token") or text.get("moe_topk") or 0)
    intermediate = _int_field(text, "intermediate_size", required=False, default=0)
    moe_intermediate = _int_field(text, "moe_intermediate_size", required=False, default=0) or intermediate
    dense_intermediate = _int_field(text, "intermediate_size_mlp", required=False, default=0) or intermediate
    shared_intermediate = 0
    if experts:
        if text.get("n_shared_experts"):
            shared_intermediate = int(text["n_shared_experts"]) * moe_intermediate
        elif text.get("shared_expert_intermediate_size"):
            shared_intermediate = int(text["shared_expert_intermediate_size"])
        elif str(text.get("model_type", "")).startswith("llama4"):
            shared_intermediate = intermediate  # one shared expert of the expert width
    kinds, window = _layer_kinds(text, layers, warnings)
    linear_state = _linear_state(text)
    if "linear" in kinds and linear_state is None:
        warnings.append(
            "linear-attention / mamba layers of an unknown kind: their per-sequence state is not counted"
        )
    dtype_name = str(text.get("torch_dtype") or text.get("dtype") or "bfloat16")
    quant = text.get("quantization_config") or hf_config.get("quantization_config")
    arch = {
        "model_type": str(hf_config.get("model_type") or text.get("model_type") or ""),
        "architectures": list(hf_config.get("architectures") or text.get("architectures") or []),
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "vocab_size": vocab,
        "intermediate_size": dense_intermediate,
        "max_position_embeddings": _derived_max_len(text),
        "tie_word_embeddings": bool(text.get("tie_word_embeddings", hf_config.get("tie_word_embeddings"))),
        "dtype": dtype_name,
        "dtype_bytes": _DTYPE_BYTES.get(dtype_name, 2),
        "use_mla": mla,
        "kv_lora_rank": int(kv_lora) if mla else None,
        "qk_rope_head_dim": int(text.get("qk_rope_head_dim") or 64) if mla else None,
        "qk_nope_head_dim": int(text.get("qk_nope_head_dim") or 128) if mla else None,
        "v_head_dim": int(text.get("v_head_dim") or 128) if mla else None,
        "q_lora_rank": text.get("q_lora_rank") if mla else None,
        "sparse_indexer": mla and text.get("index_topk") is not None,
        "index_head_dim": int(text.get("index_head_dim") or 128),
        "index_n_heads": int(text.get("index_n_heads") or 64),
        "num_experts": experts,
        "num_experts_per_tok": top_k,
        "moe_intermediate_size": moe_intermediate if experts else 0,
        "shared_expert_intermediate_size": shared_intermediate,
        "moe_layers": _moe_layers(text, layers, experts),
        "mtp_layers": int(text.get("num_nextn_predict_layers") or 0),
        "layer_kinds": kinds,
        "window": window,
        "vision_params": _vision_params(hf_config, hidden),
        "linear_state": linear_state if "linear" in kinds else None,
        "quantization_config": quant if isinstance(quant, dict) else None,
        "warnings": warnings,
    }
    return arch


# ----------------------------------------------------------------------------------------------
# Quantization -> bytes per parameter
# ----------------------------------------------------------------------------------------------


def quantization_scheme(arch: dict[str, Any]) -> dict[str, Any]:
    """Bytes per weight of quantized linear layers, the modules left unquantized, checkpoint KV dtype."""
    qc = arch.get("quantization_config") or {}
    if not qc and arch.get("runtime_quantization"):  # vLLM --quantization on an unquantized checkpoint
        qc = {"quant_method": arch["runtime_quantization"]}
    base = float(arch["dtype_bytes"])
    method = str(qc.get("quant_method") or qc.get("quantization", {}).get("quant_algo") or "none").lower()
    inner = qc.get("quantization") if isinstance(qc.get("quantization"), dict) else qc
    ignore = list(
        qc.get("ignore")
        or qc.get("exclude_modules")
        or inner.get("exclude_modules")
        or qc.get("modules_to_not_convert")
        or qc.get("ignored_layers")
        or []
    )
    kv = None
    bpp = base
    name = method
    if method in ("none", ""):
        name = "none"
    elif method == "fp8":  # e.g. DeepSeek-V3 block FP8: 1 byte + one fp32 scale per 128x128 block
        bpp = 1.0 + 4.0 / (128 * 128)
    elif method in ("modelopt", "modelopt_fp4", "nvfp4", "fp8_modelopt"):
        algo = str(inner.get("quant_algo") or "").upper()
        if "FP4" in algo:  # 4-bit E2M1 + one FP8 E4M3 scale per 16 weights
            bpp, name = 0.5 + 1.0 / 16, "nvfp4"
        elif "FP8" in algo:
            bpp, name = 1.0, "fp8"
        elif "INT4" in algo or "W4A" in algo:
            bpp, name = 0.5 + 2.0 / 128, "int4"
        if str(inner.get("kv_cache_quant_algo") or "").upper().startswith("FP8"):
            kv = "fp8"
    elif method == "compressed-tensors":
        groups = qc.get("config_groups") or {}
        weights = {}
        for group in groups.values():
            if isinstance(group, dict) and isinstance(group.get("weights"), dict):
                weights = group["weights"]
                break
        bits = int(weights.get("num_bits") or 16)
        wtype = str(weights.get("type") or "int")
        fmt = str(qc.get("format") or "")
        gsize = weights.get("group_size")
        if bits == 4 and (wtype == "float" or "nvfp4" in fmt):
            bpp, name = 0.5 + 1.0 / 16, "nvfp4"
        elif bits < 16:
            scale = 2.0 / int(gsize) if gsize else 0.0
            bpp, name = bits / 8.0 + scale, f"{wtype}{bits}"
        kv_scheme = qc.get("kv_cache_scheme")
        if isinstance(kv_scheme, dict) and int(kv_scheme.get("num_bits") or 16) == 8:
            kv = "fp8"
    elif method == "mxfp4":  # 4-bit E2M1 + one E8M0 scale per 32 weights
        bpp = 0.5 + 1.0 / 32
    elif method in ("gptq", "awq", "gptq_marlin", "awq_marlin"):
        bits = int(qc.get("bits") or qc.get("w_bit") or 4)
        gsize = int(qc.get("group_size") or qc.get("q_group_size") or 128)
        bpp = bits / 8.0 + 4.0 / max(gsize, 1)
    elif method == "bitsandbytes":
        bpp = 0.5 + 0.5 / 64 if qc.get("load_in_4bit") else 1.0
    else:
        arch["warnings"].append(
            f"quantization method {method!r} is not modelled; weights counted at {base} B"
        )
    return {"method": name, "bytes_per_param": bpp, "ignore": ignore, "kv_cache_dtype": kv, "base": base}


def _module_ignored(name: str, patterns: list[str]) -> bool:
    return _module_ignored_cached(name, tuple(str(p) for p in patterns))


@functools.lru_cache(maxsize=65536)
def _module_ignored_cached(name: str, patterns: tuple[str, ...]) -> bool:
    candidates = (name, "language_model." + name, "model.language_model." + name.removeprefix("model."))
    for raw in patterns:
        pattern = str(raw)
        for cand in candidates:
            if pattern.startswith("re:"):
                if re.search(pattern[3:], cand):
                    return True
            elif (
                cand == pattern
                or cand.startswith(pattern + ".")
                or fnmatch.fnmatchcase(cand, pattern)
                or fnmatch.fnmatchcase(cand, pattern + ".*")
                or fnmatch.fnmatchcase(cand, "*." + pattern)
            ):
                return True
    return False


# ----------------------------------------------------------------------------------------------
# Weights per GPU
# ----------------------------------------------------------------------------------------------


def pp_partition(num_layers: int, pp: int) -> list[int]:
    """Layers per pipeline stage as vllm/distributed/utils.py get_pp_indices splits them."""
    if num_layers < pp:
        raise PlanInputError("pipeline_parallel_size", f"{pp} stages for only {num_layers} layers")
    per = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):  # the remainder goes to the stages before the last
        per[-i] += 1
    return per


def _stage_of_layers(num_layers: int, pp: int) -> list[int]:
    stages = []
    for stage, count in enumerate(pp_partition(num_layers, pp)):
        stages.extend([stage] * count)
    return stages


def parameter_inventory(arch: dict[str, Any]) -> list[dict[str, Any]]:
    """Weight tensors by sharding rule: tp, kv (GQA k/v), vocab, expert, replicated."""
    h = arch["hidden_size"]
    inv: list[dict[str, Any]] = []

    def add(name: str, params: float, rule: str, where: Any, quant: bool = True) -> None:
        inv.append({"name": name, "params": float(params), "rule": rule, "where": where, "quant": quant})

    add("model.embed_tokens", arch["vocab_size"] * h, "vocab", "first", quant=False)
    heads, kvh, hd = arch["num_attention_heads"], arch["num_key_value_heads"], arch["head_dim"]
    for i in range(arch["num_hidden_layers"]):
        p = f"model.layers.{i}"
        add(f"{p}.input_layernorm", 2 * h, "replicated", i, quant=False)
        state = arch.get("linear_state")
        if arch["layer_kinds"][i] == "linear" and state:
            if state["type"] == "gdn":  # in_proj_qkvz + in_proj_ba, out_proj
                kd, vd = state["k_heads"] * state["k_dim"], state["v_heads"] * state["v_dim"]
                add(f"{p}.linear_attn.in_proj", h * (2 * kd + 2 * vd + 2 * state["v_heads"]), "tp", i)
                add(f"{p}.linear_attn.out_proj", vd * h, "tp", i)
            else:  # Mamba2 in_proj (z, x, B, C, dt) and out_proj
                inner = state["heads"] * state["head_dim"]
                width = 2 * inner + 2 * state["groups"] * state["state"] + state["heads"]
                add(f"{p}.mixer.in_proj", h * width, "tp", i)
                add(f"{p}.mixer.out_proj", inner * h, "tp", i)
        elif arch["layer_kinds"][i] == "none":
            pass
        elif arch["use_mla"]:
            nope, rope, v = arch["qk_nope_head_dim"], arch["qk_rope_head_dim"], arch["v_head_dim"]
            q_lora = arch["q_lora_rank"]
            if q_lora:
                add(f"{p}.self_attn.q_a_proj", h * q_lora, "replicated", i)
                add(f"{p}.self_attn.q_b_proj", q_lora * heads * (nope + rope), "tp", i)
            else:
                add(f"{p}.self_attn.q_proj", h * heads * (nope + rope), "tp", i)
            add(f"{p}.self_attn.kv_a_proj_with_mqa", h * (arch["kv_lora_rank"] + rope), "replicated", i)
            add(f"{p}.self_attn.kv_b_proj", arch["kv_lora_rank"] * heads * (nope + v), "tp", i)
            add(f"{p}.self_attn.o_proj", heads * v * h, "tp", i)
            if arch["sparse_indexer"]:
                idx = arch["index_head_dim"] * arch["index_n_heads"]
                add(
                    f"{p}.self_attn.indexer",
                    (q_lora or h) * idx + h * (arch["index_head_dim"] + 64),
                    "replicated",
                    i,
                )
        else:
            add(f"{p}.self_attn.q_proj", h * heads * hd, "tp", i)
            add(f"{p}.self_attn.k_proj", h * kvh * hd, "kv", i)
            add(f"{p}.self_attn.v_proj", h * kvh * hd, "kv", i)
            add(f"{p}.self_attn.o_proj", heads * hd * h, "tp", i)
        if arch["moe_layers"][i]:
            e, mi = arch["num_experts"], arch["moe_intermediate_size"]
            add(f"{p}.mlp.gate", h * e, "replicated", i, quant=False)
            add(f"{p}.mlp.experts", e * 3 * h * mi, "expert", i)
            if arch["shared_expert_intermediate_size"]:
                add(f"{p}.mlp.shared_experts", 3 * h * arch["shared_expert_intermediate_size"], "tp", i)
        elif arch["intermediate_size"]:
            add(f"{p}.mlp", 3 * h * arch["intermediate_size"], "tp", i)
    add("model.norm", h, "replicated", "last", quant=False)
    add("lm_head", arch["vocab_size"] * h, "vocab", "last", quant=False)
    if arch["vision_params"]:
        add("vision_tower", arch["vision_params"], "vision", "first", quant=False)
    return inv


def _bytes_per_param(entry: dict[str, Any], scheme: dict[str, Any]) -> float:
    if not entry["quant"] or scheme["method"] == "none":
        return scheme["base"]
    if _module_ignored(entry["name"], scheme["ignore"]):
        return scheme["base"]
    return scheme["bytes_per_param"]


def estimate_weights(
    arch: dict[str, Any],
    *,
    tp: int,
    pp: int,
    dp: int,
    expert_parallel: bool,
    checkpoint_gib: float | None,
    mm_encoder_tp_mode: str = "weights",
    language_model_only: bool = False,
) -> dict[str, Any]:
    """Weight GiB on one GPU of each PP stage, from the config (scaled to the checkpoint if given)."""
    scheme = quantization_scheme(arch)
    inv = parameter_inventory(arch)
    stage_of = _stage_of_layers(arch["num_hidden_layers"], pp)
    padded_vocab = _cdiv(arch["vocab_size"], VOCAB_PADDING) * VOCAB_PADDING
    ep = tp * dp if expert_parallel else 1
    local_experts = _cdiv(arch["num_experts"], ep) if arch["num_experts"] else 0
    kvh = arch["num_key_value_heads"]
    total_bytes = 0.0
    per_stage = [0.0] * pp
    per_stage_replicated = [0.0] * pp
    for entry in inv:
        nbytes = entry["params"] * _bytes_per_param(entry, scheme)
        total_bytes += nbytes
        if entry["rule"] == "vision" and language_model_only:
            continue
        where = entry["where"]
        stages = [0] if where == "first" else [pp - 1] if where == "last" else [stage_of[where]]
        rule = entry["rule"]
        if rule == "tp":
            local = nbytes / tp
        elif rule == "kv":  # each rank holds max(1, kv_heads / tp) heads (replicated when tp > kv_heads)
            local = nbytes * max(1, kvh // tp) / kvh
        elif rule == "vocab":  # vocab padded to 64 then split over TP
            local = nbytes * _cdiv(padded_vocab, tp) / arch["vocab_size"]
        elif rule == "expert":
            local = nbytes * local_experts / arch["num_experts"] if expert_parallel else nbytes / tp
        elif rule == "vision":
            local = nbytes if mm_encoder_tp_mode == "data" else nbytes / tp
        else:
            local = nbytes
        for stage in stages:
            per_stage[stage] += local
            if rule in ("replicated",) or (rule == "vision" and mm_encoder_tp_mode == "data"):
                per_stage_replicated[stage] += local
    if arch["tie_word_embeddings"] and pp == 1:  # lm_head shares the embedding tensor
        head = next(e for e in inv if e["name"] == "lm_head")
        shared = head["params"] * scheme["base"] * _cdiv(padded_vocab, tp) / arch["vocab_size"]
        per_stage[pp - 1] -= shared
        total_bytes -= head["params"] * scheme["base"]
    scale = 1.0
    if checkpoint_gib is not None:
        # The checkpoint also carries MTP layers vLLM does not load without speculative decoding.
        mtp_bytes = arch["mtp_layers"] * total_bytes / max(arch["num_hidden_layers"], 1)
        scale = checkpoint_gib * GIB / (total_bytes + mtp_bytes)
    stages_gib = [round(b * scale / GIB, 3) for b in per_stage]
    return {
        "weights_gib_per_gpu_by_stage": stages_gib,
        "replicated_gib_per_gpu_by_stage": [round(b * scale / GIB, 3) for b in per_stage_replicated],
        "model_total_gib": round(total_bytes * scale / GIB, 3),
        "estimate_scale": round(scale, 4),
        "quantization": {k: v for k, v in scheme.items() if k != "ignore"},
        "source": "checkpoint_gib" if checkpoint_gib is not None else "config_estimate",
    }


# ----------------------------------------------------------------------------------------------
# KV cache layout
# ----------------------------------------------------------------------------------------------


def resolve_kv_dtype(kv_cache_dtype: str, arch: dict[str, Any], warnings: list[str]) -> tuple[str, float]:
    if kv_cache_dtype not in _KV_DTYPES:
        raise PlanInputError(
            "kv_cache_dtype", f"expected one of {sorted(_KV_DTYPES)}, got {kv_cache_dtype!r}"
        )
    if kv_cache_dtype == "auto":
        ckpt = quantization_scheme(arch)["kv_cache_dtype"]
        if ckpt:
            warnings.append(
                "kv_cache_dtype auto adopts the checkpoint's FP8 KV recipe (vLLM PR #29980); "
                "pass bfloat16 explicitly to keep a 16-bit cache"
            )
            return "fp8", 1.0
        return arch["dtype"], float(arch["dtype_bytes"])
    if kv_cache_dtype.startswith("fp8"):
        return "fp8", 1.0
    return kv_cache_dtype, 2.0


def _linear_state_bytes(arch: dict[str, Any], tp: int) -> int | None:
    """Recurrent state of one linear-attention / Mamba layer on one rank, in bytes.

    Gated DeltaNet (Qwen3-Next, vllm/model_executor/models/qwen3_next.py) and Mamba2
    (mamba_mixer2.py): a conv state of (conv_dim / tp, kernel - 1) in the model dtype and a temporal
    state in the config's mamba_ssm_dtype (model dtype when absent; mamba_ssm_cache_dtype "auto").
    Qwen3.5-27B's float32 state makes vLLM log "Setting attention block size to 1568 tokens" with an
    FP8 cache (784 with BF16); a 16-bit state would give 800 / 400.
    """
    state = arch.get("linear_state")
    if not state:
        return None
    dtype = arch["dtype_bytes"]
    ssm = state.get("ssm_bytes") or dtype
    if state["type"] == "gdn":
        conv_dim = 2 * state["k_heads"] * state["k_dim"] + state["v_heads"] * state["v_dim"]
        temporal = _cdiv(state["v_heads"], tp) * state["k_dim"] * state["v_dim"]
    else:
        conv_dim = state["heads"] * state["head_dim"] + 2 * state["groups"] * state["state"]
        temporal = _cdiv(state["heads"], tp) * state["head_dim"] * state["state"]
    return _cdiv(conv_dim, tp) * (state["kernel"] - 1) * dtype + temporal * ssm


def kv_layer_specs(arch: dict[str, Any], *, tp: int, kv_dtype: str, kv_bytes: float) -> list[dict[str, Any]]:
    """Per-layer KV spec on one rank: kind, bytes per token (or state bytes), window."""
    specs = []
    state_bytes = _linear_state_bytes(arch, tp)
    for i, kind in enumerate(arch["layer_kinds"]):
        if kind == "none":
            continue
        if kind == "linear":
            if state_bytes is not None:
                specs.append(
                    {
                        "layer": i,
                        "kind": "mamba",
                        "bytes_per_token": 0,
                        "state_bytes": state_bytes,
                        "window": None,
                    }
                )
            continue
        if arch["use_mla"]:
            latent = arch["kv_lora_rank"] + arch["qk_rope_head_dim"]
            # kv_cache_interface.py MLAAttentionSpec: the latent is one head kept whole on every TP rank;
            # sparse (DSA) MLA with an FP8 cache uses the packed fp8_ds_mla layout of 656 bytes.
            per_token = 656 if (arch["sparse_indexer"] and kv_dtype == "fp8") else latent * kv_bytes
            specs.append({"layer": i, "kind": "mla", "bytes_per_token": per_token, "window": None})
            if arch["sparse_indexer"]:
                # DeepSeek-V3.2 / GLM-5 indexer keys: fp8 head_dim plus one fp32 scale per 128 (uint8 pages).
                idx = arch["index_head_dim"] + arch["index_head_dim"] // 128 * 4
                specs.append({"layer": i, "kind": "indexer", "bytes_per_token": idx, "window": None})
            continue
        heads_per_rank = max(1, arch["num_key_value_heads"] // tp)
        per_token = 2 * heads_per_rank * arch["head_dim"] * kv_bytes
        specs.append(
            {
                "layer": i,
                "kind": kind,
                "bytes_per_token": per_token,
                "window": arch["window"] if kind != "full" else None,
            }
        )
    return specs


def _group_layers(specs: list[dict[str, Any]], hybrid: bool, block_size: int) -> list[dict[str, Any]]:
    """kv_cache_utils.py get_kv_cache_groups: one group, one uniform-type group, or equal-size groups.

    Each group carries its page (bytes per block per layer) and block (tokens per block).
    """
    if not specs:
        return []
    if not hybrid:
        specs = [
            dict(s, kind="full" if s["kind"] in ("sliding", "chunked") else s["kind"], window=None)
            for s in specs
        ]
    attn = [s for s in specs if s["kind"] != "mamba"]
    if len(attn) < len(specs) and attn:
        # models/config.py HybridAttentionMambaModelConfig: the attention block grows (in steps of 16
        # tokens) until an attention page holds a Mamba state; the Mamba page is padded to it.
        per_token = max(s["bytes_per_token"] for s in attn)
        state = max(s["state_bytes"] for s in specs if s["kind"] == "mamba")
        block_size = max(block_size, 16 * _cdiv(int(state), int(16 * per_token)))
    for s in specs:
        s["block"] = block_size
        s["page"] = s["bytes_per_token"] * block_size
    for s in specs:
        if s["kind"] == "mamba":
            s["page"] = max(x["page"] for x in specs)
    keys = {(s["kind"], s["page"]) for s in specs}
    if len(keys) == 1:
        first = specs[0]
        return [
            {
                "kind": first["kind"],
                "window": first["window"],
                "page": first["page"],
                "block": block_size,
                "members": specs,
            }
        ]
    kinds = {s["kind"] for s in specs}
    if kinds <= {"full", "mla", "indexer"}:
        # All layers need a slot for every token: UniformTypeKVCacheSpecs, one group, page = sum.
        return [{"kind": "uniform_type", "window": None, "page": None, "block": block_size, "members": specs}]
    # unify_kv_cache_spec_page_size: smaller pages get proportionally larger blocks.
    max_page = max(s["page"] for s in specs)
    for s in specs:
        if s["page"] != max_page:
            if max_page % s["page"]:
                raise PlanInputError("hf_config", "layer page sizes cannot be unified (vLLM raises too)")
            s["block"] = s["block"] * (max_page // s["page"])
            s["page"] = max_page
    by_type: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for s in specs:
        by_type.setdefault((s["kind"], s["block"]), []).append(s)
    sizes = [len(v) for v in by_type.values()]
    group_size = min(sizes)
    if max(sizes) < group_size * 1.5:
        group_size = max(sizes)
    groups = []
    for (kind, blk), members in by_type.items():
        count = _cdiv(len(members), group_size)
        for g in range(count):
            groups.append(
                {
                    "kind": kind,
                    "window": members[0]["window"],
                    "page": max_page,
                    "block": blk,
                    "members": members[g::count],
                }
            )
    return groups


def _blocks_per_request(
    group: dict[str, Any], *, max_model_len: int, dcp: int, mnbt: int, mamba_cache_mode: str = "none"
) -> int:
    """Blocks one request of max_model_len needs in a group (KVCacheSpec.max_memory_usage_bytes)."""
    block = group["block"]
    if group["kind"] == "mamba":
        # "none": one state per sequence. "align" (prefix caching on a hybrid model): the running state
        # plus the last block-aligned checkpoint, 2 blocks: a Qwen3.5-27B-geometry log with prefix
        # caching reports 2.31x for 208 blocks = 84 attention blocks + 3 linear groups x 2.
        return 2 if mamba_cache_mode == "align" else 1
    if group["kind"] == "sliding":
        return _cdiv(min(group["window"] - 1 + mnbt, max_model_len), block) + 1
    if group["kind"] == "chunked":
        return _cdiv(min(group["window"] + mnbt, max_model_len), block)
    return _cdiv(_cdiv(max_model_len, dcp), block)


def kv_capacity(
    groups: list[dict[str, Any]],
    stage_memory_bytes: list[float],
    stage_of_layer: list[int],
    *,
    dcp: int,
    max_model_len: int,
    max_num_batched_tokens: int,
    mamba_cache_mode: str = "none",
    report_from_concurrency: bool = False,
) -> dict[str, Any]:
    """num_blocks (min over stages), logged token count and maximum concurrency, as vLLM computes them.

    The logged "GPU KV cache size" is ``num_blocks // groups * block * dcp`` up to vLLM 0.19 at least
    (issue #40691); 0.22 and later log ``int(max_concurrency * max_model_len)``
    (``report_from_concurrency``, PRs #38364 / #40694), which differs for hybrid models.
    """
    pp = len(stage_memory_bytes)
    blocks_by_stage = []
    page_by_stage = []
    for stage in range(pp):
        if groups and groups[0]["kind"] == "uniform_type":
            page = sum(m["page"] for m in groups[0]["members"] if stage_of_layer[m["layer"]] == stage)
            nblocks = int(stage_memory_bytes[stage] // page) if page else 0
        else:
            counts = [sum(1 for m in g["members"] if stage_of_layer[m["layer"]] == stage) for g in groups]
            group_size = max(counts) if counts else 0
            page = groups[0]["page"] if groups else 0
            nblocks = int(stage_memory_bytes[stage] // page // group_size) if group_size else 0
            page *= group_size
        blocks_by_stage.append(max(nblocks, 0))
        page_by_stage.append(page)
    num_blocks = min(blocks_by_stage) if blocks_by_stage else 0
    n_groups = max(len(groups), 1)
    min_block = min((g["block"] for g in groups), default=DEFAULT_BLOCK_SIZE)
    need = sum(
        _blocks_per_request(
            g,
            max_model_len=max_model_len,
            dcp=dcp,
            mnbt=max_num_batched_tokens,
            mamba_cache_mode=mamba_cache_mode,
        )
        for g in groups
    )
    if report_from_concurrency and need:
        tokens = int(num_blocks / need * max_model_len)
    else:
        tokens = num_blocks // n_groups * min_block * dcp
    return {
        "num_blocks": num_blocks,
        "num_blocks_by_stage": blocks_by_stage,
        "bytes_per_block_by_stage": page_by_stage,
        "kv_cache_groups": len(groups),
        "block_size": min_block,
        "blocks_per_request": need,
        "kv_cache_tokens": tokens,
        "max_concurrency": round(num_blocks / need, 2) if need else 0.0,
    }


def max_model_len_that_fits(
    groups: list[dict[str, Any]], num_blocks: int, *, dcp: int, mnbt: int, mamba_cache_mode: str = "none"
) -> int:
    """Largest max_model_len whose single request fits in num_blocks (vLLM's estimate on failure)."""
    lo, hi, best = 1, 1 << 26, 0
    while lo <= hi:
        mid = (lo + hi) // 2
        need = sum(
            _blocks_per_request(g, max_model_len=mid, dcp=dcp, mnbt=mnbt, mamba_cache_mode=mamba_cache_mode)
            for g in groups
        )
        if need <= num_blocks:
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


# ----------------------------------------------------------------------------------------------
# Non-KV memory of the profile run
# ----------------------------------------------------------------------------------------------


def estimate_activation_gib(
    arch: dict[str, Any],
    *,
    tp: int,
    stage: int,
    pp: int,
    expert_parallel: bool,
    max_num_seqs: int,
    mnbt: int,
    sampler_copies: float = SAMPLER_FP32_COPIES,
) -> float:
    """Peak torch memory of vLLM's profile run on one GPU of a stage (gpu_model_runner.profile_run)."""
    h = arch["hidden_size"]
    tokens = mnbt
    stage_layers = [i for i, s in enumerate(_stage_of_layers(arch["num_hidden_layers"], pp)) if s == stage]
    persistent = 0.0
    if stage > 0:  # hidden states and residual received from the previous stage
        persistent += 2 * tokens * h * 2
    if any(arch["moe_layers"][i] for i in stage_layers):
        # fused_moe workspaces (persistent): [M, top_k, max(2I, H)] and [M, top_k, I] plus the output.
        inter = arch["moe_intermediate_size"] if expert_parallel else _cdiv(arch["moe_intermediate_size"], tp)
        m = min(tokens, FUSED_MOE_CHUNK)
        persistent += m * arch["num_experts_per_tok"] * (max(2 * inter, h) + inter) * 2 + m * h * 2
    dense = [i for i in stage_layers if not arch["moe_layers"][i] and arch["intermediate_size"]]
    inter_rank = _cdiv(arch["intermediate_size"], tp) if dense else 0
    forward = tokens * 2 * (FORWARD_INTERMEDIATE_COPIES * inter_rank + FORWARD_HIDDEN_COPIES * h)
    sampler = 0.0
    if stage == pp - 1:
        rows = min(max_num_seqs, tokens)
        sampler = sampler_copies * rows * arch["vocab_size"] * 4 + HIDDEN_COPIES * tokens * h * 2
    return (persistent + max(forward, sampler)) / GIB


def estimate_non_torch_gib(*, tp: int, pp: int, interconnect: str = "nvlink") -> float:
    base = NON_TORCH_BASE_GIB if pp == 1 else NON_TORCH_BASE_PP_GIB
    if tp > 1 and interconnect == "pcie":
        base += ALLREDUCE_PCIE_GIB
    elif tp > 1:
        base += ALLREDUCE_TP2_GIB + ALLREDUCE_PER_DOUBLING_GIB * math.log2(tp / 2)
    return base


def estimate_cudagraph_gib(layers_on_rank: int, max_num_seqs: int = 1024) -> float:
    """Profiled CUDA-graph memory. The coefficients hold for the default capture sizes up to 512
    (vllm/config/compilation.py: largest capture size min(2 x max_num_seqs, 512)); smaller batches
    capture fewer and smaller graphs, scaled here by the largest size (rough)."""
    largest = min(2 * max_num_seqs, 512)
    scale = 0.3 + 0.7 * largest / 512
    return (CUDAGRAPH_BASE_GIB + CUDAGRAPH_PER_LAYER_GIB * layers_on_rank) * scale


def cudagraph_capture_sizes(max_num_seqs: int, max_num_batched_tokens: int) -> list[int]:
    """vLLM's default cudagraph_capture_sizes (vllm/config/vllm.py ``_set_cudagraph_sizes``, 0.21-0.28):
    1, 2, 4, steps of 8 below 256, steps of 16 from 256, up to min(2 x max_num_seqs, 512,
    max_num_batched_tokens), plus max_num_batched_tokens itself when it is within that bound."""
    cap = min(2 * max_num_seqs, CUDAGRAPH_MAX_CAPTURE_SIZE, max_num_batched_tokens)
    sizes = {i for i in (1, 2, 4) if i <= cap}
    sizes.update(range(8, min(cap + 1, 256), 8))
    if cap >= 256:
        sizes.update(range(256, cap + 1, 16))
    if max_num_batched_tokens <= cap:
        sizes.add(max_num_batched_tokens)
    return sorted(sizes)


def _graph_layer_transient_bytes(
    arch: dict[str, Any], layers: list[int], *, tp: int, ep: bool, tokens: int
) -> float:
    """Working set of one decoder layer for a captured batch of ``tokens`` (same units as the profile
    run's forward transient; fused-MoE workspaces for MoE layers)."""
    h = arch["hidden_size"]
    best = float(tokens * 2 * FORWARD_HIDDEN_COPIES * h)
    if any(not arch["moe_layers"][i] for i in layers) and arch["intermediate_size"]:
        inter = _cdiv(arch["intermediate_size"], tp)
        best = max(best, tokens * 2 * (FORWARD_INTERMEDIATE_COPIES * inter + FORWARD_HIDDEN_COPIES * h))
    if any(arch["moe_layers"][i] for i in layers):
        inter = arch["moe_intermediate_size"] if ep else _cdiv(arch["moe_intermediate_size"], tp)
        k = arch["num_experts_per_tok"]
        best = max(
            best, tokens * k * (max(2 * inter, h) + inter) * 2 + tokens * h * 2 * FORWARD_HIDDEN_COPIES
        )
    return best


def estimate_cudagraph_profile_gib(
    arch: dict[str, Any], layers: list[int], *, tp: int, ep: bool, max_num_seqs: int, mnbt: int
) -> dict[str, Any]:
    """vLLM >= 0.21's CUDA-graph estimate for the default FULL_AND_PIECEWISE mode
    (gpu_model_runner.profile_cudagraph_memory; capture keys from cudagraph_dispatcher
    .initialize_cudagraph_keys: PIECEWISE for every capture size, FULL for the uniform-decode sizes
    <= max_num_seqs)."""
    sizes = cudagraph_capture_sizes(max_num_seqs, mnbt)
    modes = {"PIECEWISE": sizes, "FULL": [s for s in sizes if s <= max_num_seqs]}
    first = {}
    per_graph = {}
    for mode, descs in modes.items():
        if not descs:
            continue
        transient = _graph_layer_transient_bytes(arch, layers, tp=tp, ep=ep, tokens=max(descs)) / GIB
        first[mode] = max(CUDAGRAPH_FIRST_CAPTURE_MIN_GIB, transient)
        per_graph[mode] = CUDAGRAPH_PER_GRAPH_GIB * (len(descs) - 1)
    total = max(first.values(), default=0.0) + sum(per_graph.values())
    return {"gib": total, "graphs": {m: len(d) for m, d in modes.items()}, "largest": max(sizes, default=0)}


# ----------------------------------------------------------------------------------------------
# Divisibility
# ----------------------------------------------------------------------------------------------


def _fp8_weight_block_n(arch: dict[str, Any]) -> int | None:
    qc = arch.get("quantization_config") or {}
    block = qc.get("weight_block_size")
    if str(qc.get("quant_method") or "").lower() == "fp8" and isinstance(block, list) and block:
        return int(block[0])
    return None


def check_divisibility(
    arch: dict[str, Any], *, tp: int, pp: int, dp: int, ep: bool, dcp: int
) -> list[dict[str, str]]:
    """Constraints vLLM enforces at start-up: each entry names the input at fault and why."""
    problems: list[dict[str, str]] = []

    def bad(field: str, message: str) -> None:
        problems.append({"field": field, "message": message})

    heads, kvh = arch["num_attention_heads"], arch["num_key_value_heads"]
    if heads % tp:
        bad(
            "tensor_parallel_size",
            f"num_attention_heads {heads} is not divisible by tensor_parallel_size {tp}",
        )
    if not arch["use_mla"]:
        if tp >= kvh and tp % kvh:
            bad(
                "tensor_parallel_size",
                f"tensor_parallel_size {tp} is not a multiple of num_key_value_heads {kvh}",
            )
        if tp < kvh and kvh % tp:
            bad(
                "tensor_parallel_size",
                f"num_key_value_heads {kvh} is not divisible by tensor_parallel_size {tp}",
            )
    if arch["num_hidden_layers"] < pp:
        bad(
            "pipeline_parallel_size",
            f"pipeline_parallel_size {pp} exceeds num_hidden_layers {arch['num_hidden_layers']}",
        )
    if arch["num_experts"]:
        inter = arch["moe_intermediate_size"]
        if ep:
            ep_size = tp * dp
            if arch["num_experts"] % ep_size:
                bad(
                    "enable_expert_parallel",
                    f"num_experts {arch['num_experts']} is not divisible by the expert-parallel size "
                    f"{ep_size} (tensor_parallel_size x data_parallel_size)",
                )
        elif inter % tp:
            bad(
                "tensor_parallel_size",
                f"moe_intermediate_size {inter} is not divisible by tensor_parallel_size {tp}",
            )
    if arch["intermediate_size"] and arch["intermediate_size"] % tp:
        bad(
            "tensor_parallel_size",
            f"intermediate_size {arch['intermediate_size']} is not divisible by tensor_parallel_size {tp}",
        )
    block_n = _fp8_weight_block_n(arch)
    if block_n:
        # Block-FP8 checkpoints (e.g. DeepSeek-V3, Qwen3 FP8): each rank's slice of a column-parallel weight
        # must be whole blocks (vllm/model_executor/layers/quantization/fp8.py validate_block_quant_shapes).
        widths = {"intermediate_size": arch["intermediate_size"]}
        if arch["num_experts"] and not ep:
            widths["moe_intermediate_size"] = arch["moe_intermediate_size"]
        for name, width in widths.items():
            if width and width % tp == 0 and (width // tp) % block_n:
                bad(
                    "tensor_parallel_size",
                    f"{name} {width} / tensor_parallel_size {tp} = {width // tp} is not a multiple of "
                    f"the FP8 weight block {block_n}",
                )
    if dcp > 1:
        if tp % dcp:
            bad(
                "decode_context_parallel_size",
                f"tensor_parallel_size {tp} is not divisible by decode_context_parallel_size {dcp}",
            )
        elif not arch["use_mla"]:
            # Each DCP group must share the same KV heads: tp / kv_heads must be a multiple of dcp.
            replicas = max(tp // kvh, 1)
            if replicas % dcp:
                bad(
                    "decode_context_parallel_size",
                    f"decode_context_parallel_size {dcp} needs tensor_parallel_size / num_key_value_heads "
                    f"({tp}/{kvh}) to be a multiple of it",
                )
        if any(k in ("sliding", "chunked") for k in arch["layer_kinds"]):
            bad(
                "decode_context_parallel_size",
                "decode context parallel does not support sliding-window / chunked attention",
            )
    return problems


# ----------------------------------------------------------------------------------------------
# The plan
# ----------------------------------------------------------------------------------------------


def plan_memory(
    hf_config: dict[str, Any],
    *,
    gpu_memory_gib: float,
    tensor_parallel_size: int = 1,
    pipeline_parallel_size: int = 1,
    data_parallel_size: int = 1,
    enable_expert_parallel: bool = False,
    decode_context_parallel_size: int = 1,
    gpu_memory_utilization: float = 0.9,
    kv_cache_dtype: str = "auto",
    max_model_len: int | None = None,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    weights_gib_per_gpu: float | None = None,
    checkpoint_gib: float | None = None,
    kv_cache_memory_gib: float | None = None,
    vllm_version: str = DEFAULT_VLLM_VERSION,
    gpu_count: int | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
    enforce_eager: bool = False,
    disable_hybrid_kv_cache_manager: bool = False,
    mm_encoder_tp_mode: str = "weights",
    language_model_only: bool = False,
    quantization: str | None = None,
    interconnect: str = "nvlink",
    mamba_cache_mode: str = "none",
) -> dict[str, Any]:
    """Memory plan of one vLLM instance on identical GPUs. See docs/planner.md for every key."""
    gpu_memory_gib = _positive_float("gpu_memory_gib", gpu_memory_gib)
    tp = _positive_int("tensor_parallel_size", tensor_parallel_size)
    pp = _positive_int("pipeline_parallel_size", pipeline_parallel_size)
    dp = _positive_int("data_parallel_size", data_parallel_size)
    dcp = _positive_int("decode_context_parallel_size", decode_context_parallel_size)
    block = _positive_int("block_size", block_size)
    util = _positive_float("gpu_memory_utilization", gpu_memory_utilization, upper=1.0)
    version = parse_version(vllm_version)
    enable_expert_parallel = _flag("enable_expert_parallel", enable_expert_parallel)
    enforce_eager = _flag("enforce_eager", enforce_eager)
    disable_hybrid_kv_cache_manager = _flag(
        "disable_hybrid_kv_cache_manager", disable_hybrid_kv_cache_manager
    )
    language_model_only = _flag("language_model_only", language_model_only)
    if weights_gib_per_gpu is not None and checkpoint_gib is not None:
        raise PlanInputError(
            "weights_gib_per_gpu", "give either weights_gib_per_gpu or checkpoint_gib, not both"
        )
    if weights_gib_per_gpu is not None:
        weights_gib_per_gpu = _positive_float("weights_gib_per_gpu", weights_gib_per_gpu)
    if checkpoint_gib is not None:
        checkpoint_gib = _positive_float("checkpoint_gib", checkpoint_gib)
    if kv_cache_memory_gib is not None:
        kv_cache_memory_gib = _positive_float("kv_cache_memory_gib", kv_cache_memory_gib)
    if gpu_count is not None:
        gpu_count = _positive_int("gpu_count", gpu_count)
    if interconnect not in ("nvlink", "pcie"):
        raise PlanInputError("interconnect", f"expected 'nvlink' or 'pcie', got {interconnect!r}")
    if mamba_cache_mode not in ("none", "align"):
        raise PlanInputError("mamba_cache_mode", f"expected 'none' or 'align', got {mamba_cache_mode!r}")
    if mm_encoder_tp_mode not in ("weights", "data"):
        raise PlanInputError(
            "mm_encoder_tp_mode", f"expected 'weights' or 'data', got {mm_encoder_tp_mode!r}"
        )
    arch = normalize_architecture(hf_config)
    if quantization is not None:
        if quantization not in ("fp8", "mxfp4", "bitsandbytes"):
            raise PlanInputError("quantization", f"expected fp8, mxfp4 or bitsandbytes, got {quantization!r}")
        arch["runtime_quantization"] = quantization
    warnings = list(arch["warnings"])
    reasons: list[str] = []
    defaults = DEFAULTS_LARGE_GPU if gpu_memory_gib >= LARGE_GPU_GIB else DEFAULTS_SMALL_GPU
    if gpu_memory_gib >= HUGE_GPU_GIB and version >= HUGE_GPU_SINCE:
        defaults = DEFAULTS_HUGE_GPU
    seqs = (
        _positive_int("max_num_seqs", max_num_seqs) if max_num_seqs is not None else defaults["max_num_seqs"]
    )
    mnbt = (
        _positive_int("max_num_batched_tokens", max_num_batched_tokens)
        if max_num_batched_tokens is not None
        else defaults["max_num_batched_tokens"]
    )
    derived_len = arch["max_position_embeddings"]
    model_len = (
        _positive_int("max_model_len", max_model_len)
        if max_model_len is not None
        else int(derived_len or 8192)
    )
    if derived_len and model_len > int(derived_len):
        reasons.append(
            f"max_model_len {model_len} exceeds the model's max_position_embeddings {derived_len} "
            "(vLLM refuses unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)"
        )
    world = tp * pp * dp
    if gpu_count is not None and world > gpu_count:
        reasons.append(
            f"the layout needs {world} GPUs (TP {tp} x PP {pp} x DP {dp}) but gpu_count is {gpu_count}"
        )
    elif gpu_count is not None and world < gpu_count:
        warnings.append(f"the layout uses {world} of {gpu_count} GPUs")
    input_errors = check_divisibility(arch, tp=tp, pp=pp, dp=dp, ep=enable_expert_parallel, dcp=dcp)
    reasons.extend(e["message"] for e in input_errors)
    kv_dtype, kv_bytes = resolve_kv_dtype(kv_cache_dtype, arch, warnings)

    # Weights per GPU of each PP stage.
    if weights_gib_per_gpu is not None:
        weights_by_stage = [float(weights_gib_per_gpu)] * pp
        weights_info: dict[str, Any] = {"source": "weights_gib_per_gpu"}
    else:
        weights_info = estimate_weights(
            arch,
            tp=tp,
            pp=pp,
            dp=dp,
            expert_parallel=enable_expert_parallel,
            checkpoint_gib=checkpoint_gib,
            mm_encoder_tp_mode=mm_encoder_tp_mode,
            language_model_only=language_model_only,
        )
        weights_by_stage = weights_info["weights_gib_per_gpu_by_stage"]

    requested = gpu_memory_gib * util
    stage_of = _stage_of_layers(arch["num_hidden_layers"], pp)
    cudagraph_applied = version >= CUDAGRAPH_SUBTRACTED_SINCE and not enforce_eager
    v2_skip = v2_runner_skips_graph_estimate(list(hf_config.get("architectures") or []), version)
    # The Triton top-k / top-p kernel serves batches of 8 rows and more (apply_top_k_top_p).
    sort_sampler = version < TRITON_TOPK_TOPP_SINCE or min(seqs, mnbt) < 8
    stages = []
    for s in range(pp):
        layers_here = stage_of.count(s)
        act = estimate_activation_gib(
            arch,
            tp=tp,
            stage=s,
            pp=pp,
            expert_parallel=enable_expert_parallel,
            max_num_seqs=seqs,
            mnbt=mnbt,
            sampler_copies=SAMPLER_SORT_FP32_COPIES if sort_sampler else SAMPLER_FP32_COPIES,
        )
        non_torch = estimate_non_torch_gib(tp=tp, pp=pp, interconnect=interconnect)
        if enforce_eager or (cudagraph_applied and v2_skip):
            graphs = 0.0
        elif cudagraph_applied and version < CONSUMED_ACCOUNTING_SINCE:
            stage_layers = [i for i, st in enumerate(stage_of) if st == s]
            graphs = estimate_cudagraph_profile_gib(
                arch, stage_layers, tp=tp, ep=enable_expert_parallel, max_num_seqs=seqs, mnbt=mnbt
            )["gib"]
        else:
            graphs = estimate_cudagraph_gib(layers_here, seqs)
        if kv_cache_memory_gib is not None:
            avail = float(kv_cache_memory_gib)
        else:
            avail = requested - weights_by_stage[s] - act - non_torch - (graphs if cudagraph_applied else 0.0)
        stages.append(
            {
                "stage": s,
                "layers": layers_here,
                "weights_gib": round(weights_by_stage[s], 3),
                "activation_peak_gib": round(act, 3),
                "non_torch_gib": round(non_torch, 3),
                "cudagraph_gib": round(graphs, 3),
                "cudagraph_subtracted": cudagraph_applied,
                "kv_cache_gib": round(avail, 3),
            }
        )
    specs = kv_layer_specs(arch, tp=tp, kv_dtype=kv_dtype, kv_bytes=kv_bytes)
    # Chunked local attention turns the hybrid manager off unless
    # VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE is set (vllm/config/vllm.py).
    hybrid = not disable_hybrid_kv_cache_manager and "chunked" not in arch["layer_kinds"]
    groups = _group_layers(specs, hybrid, block)
    memory = [max(st["kv_cache_gib"], 0.0) * GIB for st in stages]
    cap = kv_capacity(
        groups,
        memory,
        stage_of,
        dcp=dcp,
        max_model_len=model_len,
        max_num_batched_tokens=mnbt,
        mamba_cache_mode=mamba_cache_mode,
        report_from_concurrency=version >= REPORT_FROM_CONCURRENCY_SINCE,
    )
    bytes_by_stage = [
        sum(sp["bytes_per_token"] for sp in specs if stage_of[sp["layer"]] == s) for s in range(pp)
    ]
    limiting = min(range(pp), key=lambda s: cap["num_blocks_by_stage"][s])
    per_token = bytes_by_stage[limiting]

    kv_gib = min(st["kv_cache_gib"] for st in stages)
    max_weights = max(weights_by_stage)
    if max_weights >= requested:
        reasons.append(
            f"weights {max_weights:.2f} GiB per GPU exceed gpu_memory_utilization x memory "
            f"({util} x {gpu_memory_gib} = {requested:.2f} GiB)"
        )
    if kv_gib <= 0:
        reasons.append(
            f"no memory left for the KV cache ({kv_gib:.2f} GiB): raise gpu_memory_utilization, "
            "use more GPUs or a smaller quantization"
        )
    elif cap["blocks_per_request"] > cap["num_blocks"]:
        fit_len = max_model_len_that_fits(
            groups, cap["num_blocks"], dcp=dcp, mnbt=mnbt, mamba_cache_mode=mamba_cache_mode
        )
        reasons.append(
            f"one request of max_model_len {model_len} needs {cap['blocks_per_request']} KV blocks but only "
            f"{cap['num_blocks']} fit; the largest max_model_len that fits is {fit_len}"
        )
    if cap["max_concurrency"] and cap["max_concurrency"] < seqs and not reasons:
        warnings.append(
            f"at most {cap['max_concurrency']} requests of {model_len} tokens fit at once "
            f"(max_num_seqs {seqs}); longer queues or preemption under full load"
        )
    if kv_dtype == "fp8" and arch["use_mla"]:
        warnings.append("FP8 MLA cache needs an attention backend with FP8 support (see llm_recommend)")
    result = {
        "fits": not reasons,
        "reasons": reasons,
        "input_errors": input_errors,
        "warnings": warnings,
        "weights_gib_per_gpu": round(max_weights, 3),
        "kv_cache_gib_per_gpu": round(kv_gib, 3),
        "kv_cache_dtype": kv_dtype,
        "kv_bytes_per_token": round(per_token / dcp, 2),
        "kv_bytes_per_token_per_rank": per_token,
        "kv_cache_tokens": cap["kv_cache_tokens"],
        "kv_cache_tokens_all_replicas": cap["kv_cache_tokens"] * dp,
        "max_concurrency": cap["max_concurrency"],
        "max_model_len": model_len,
        "max_num_seqs": seqs,
        "max_num_batched_tokens": mnbt,
        "block_size": cap["block_size"],
        "num_gpu_blocks": cap["num_blocks"],
        "kv_cache_groups": cap["kv_cache_groups"],
        "blocks_per_request": cap["blocks_per_request"],
        "requested_memory_gib": round(requested, 3),
        "activation_peak_gib": max(st["activation_peak_gib"] for st in stages),
        "non_torch_gib": stages[0]["non_torch_gib"],
        "cudagraph_gib": max(st["cudagraph_gib"] for st in stages),
        "cudagraph_subtracted": cudagraph_applied,
        "kv_cache_memory_source": "kv_cache_memory_gib"
        if kv_cache_memory_gib is not None
        else "profile_estimate",
        "stages": stages,
        "weights": weights_info,
        "layout": {
            "tensor_parallel_size": tp,
            "pipeline_parallel_size": pp,
            "data_parallel_size": dp,
            "enable_expert_parallel": bool(enable_expert_parallel),
            "decode_context_parallel_size": dcp,
            "gpus": world,
            "gpu_memory_gib": gpu_memory_gib,
            "gpu_memory_utilization": util,
            "interconnect": interconnect,
            "vllm_version": ".".join(map(str, version)),
        },
        "architecture": {
            k: v
            for k, v in arch.items()
            if k
            not in ("quantization_config", "warnings", "moe_layers", "layer_kinds", "runtime_quantization")
        }
        | {
            "attention_layers": {k: arch["layer_kinds"].count(k) for k in sorted(set(arch["layer_kinds"]))},
            "moe_layer_count": sum(arch["moe_layers"]),
        },
    }
    return result


# ----------------------------------------------------------------------------------------------
# Layout recommendation
# ----------------------------------------------------------------------------------------------


def mla_backend(compute_capability: str | None, vllm_version: str) -> dict[str, Any]:
    """MLA decode backend vLLM picks on a GPU generation and whether it takes an FP8 cache.

    docs/design/attention_backends.md: FLASHINFER_MLA / CUTLASS_MLA are SM 10.x, FLASHMLA SM 9.x-10.x,
    FLASH_ATTN_MLA SM 9.x (no FP8); TRITON_MLA runs anywhere and is the only one on SM 12.x.
    """
    version = parse_version(vllm_version)
    if compute_capability is None:
        return {"backend": None, "fp8_kv": True, "block_size": DEFAULT_BLOCK_SIZE, "reason": "GPU unknown"}
    match = re.match(r"^(\d+)(?:\.(\d+))?$", str(compute_capability).strip())
    if not match:
        raise PlanInputError(
            "compute_capability", f"expected MAJOR.MINOR such as '12.0', got {compute_capability!r}"
        )
    major = int(match.group(1))
    if major == 10:
        return {"backend": "FLASHINFER_MLA", "fp8_kv": True, "block_size": 64, "reason": "SM 10.x"}
    if major == 9:
        # FLASH_ATTN_MLA is picked first on Hopper (seen on H200 with vLLM 0.22) but has no FP8 cache;
        # an FP8 cache moves to FLASHMLA (block 64).
        return {
            "backend": "FLASH_ATTN_MLA",
            "fp8_kv": True,
            "fp8_backend": "FLASHMLA",
            "block_size": DEFAULT_BLOCK_SIZE,
            "fp8_block_size": 64,
            "reason": "SM 9.x: FLASH_ATTN_MLA for a 16-bit cache, FLASHMLA for FP8",
        }
    fp8 = version >= TRITON_MLA_FP8_SINCE
    reason = f"SM {compute_capability}: TRITON_MLA is the only MLA decode backend; " + (
        "it takes an FP8 cache (vLLM PR #34597)"
        if fp8
        else f"FP8 KV needs vLLM PR #34597 (assumed from {'.'.join(map(str, TRITON_MLA_FP8_SINCE))})"
    )
    return {"backend": "TRITON_MLA", "fp8_kv": fp8, "block_size": DEFAULT_BLOCK_SIZE, "reason": reason}


def _backend_block(backend: dict[str, Any] | None, kv_dtype: str) -> int:
    if not backend:
        return DEFAULT_BLOCK_SIZE
    if kv_dtype.startswith("fp8"):
        return backend.get("fp8_block_size", backend["block_size"])
    return backend["block_size"]


def recommend_layout(
    hf_config: dict[str, Any],
    *,
    gpu_memory_gib: float,
    gpu_count: int,
    checkpoint_gib: float | None = None,
    weights_gib_per_gpu: float | None = None,
    compute_capability: str | None = None,
    vllm_version: str = DEFAULT_VLLM_VERSION,
    target_max_model_len: int | None = None,
    gpu_memory_utilization: float = 0.9,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    kv_cache_dtypes: list[str] | None = None,
    mm_encoder_tp_mode: str = "weights",
    interconnect: str = "nvlink",
    target_concurrency: float = 16.0,
) -> dict[str, Any]:
    """Search TP/PP/DCP and KV dtype for the given GPUs; return the layout that fits with the reasons.

    Preference: no pipeline stages if possible, then room for ``target_concurrency`` requests of the
    target context, then the cheaper settings (16-bit KV, no or small DCP), then the most KV tokens.
    """
    target_concurrency = _positive_float("target_concurrency", target_concurrency)
    gpus = _positive_int("gpu_count", gpu_count)
    arch = normalize_architecture(hf_config)
    notes: list[str] = []
    backend = None
    dtypes = list(kv_cache_dtypes or ["bfloat16", "fp8"])
    if arch["use_mla"]:
        backend = mla_backend(compute_capability, vllm_version)
        if backend["backend"]:
            notes.append(f"attention backend {backend['backend']}: {backend['reason']}")
        if not backend["fp8_kv"] and "fp8" in dtypes:
            dtypes.remove("fp8")
            notes.append("FP8 KV is not available on this backend/version: KV stays bfloat16")
        if compute_capability and str(compute_capability).startswith("12"):
            notes.append("SM 12.x: leave FlashInfer allreduce fusion, DeepGEMM and TRTLLM attention off")
    model_max = int(arch["max_position_embeddings"] or 8192)
    target = target_max_model_len or model_max
    layouts, skipped = candidate_layouts(arch, gpus)

    def search(length: int) -> list[dict[str, Any]]:
        found = []
        for tp, pp, dp in layouts:
            for dcp in _pow2_divisors(tp) if arch["use_mla"] else [1]:
                if check_divisibility(arch, tp=tp, pp=pp, dp=dp, ep=False, dcp=dcp):
                    continue
                for dtype in dtypes:
                    found.append(
                        plan_memory(
                            hf_config,
                            gpu_memory_gib=gpu_memory_gib,
                            tensor_parallel_size=tp,
                            pipeline_parallel_size=pp,
                            data_parallel_size=dp,
                            decode_context_parallel_size=dcp,
                            gpu_memory_utilization=gpu_memory_utilization,
                            kv_cache_dtype=dtype,
                            max_model_len=length,
                            max_num_seqs=max_num_seqs,
                            max_num_batched_tokens=max_num_batched_tokens,
                            weights_gib_per_gpu=weights_gib_per_gpu if pp == 1 else None,
                            checkpoint_gib=checkpoint_gib,
                            vllm_version=vllm_version,
                            gpu_count=gpus,
                            block_size=_backend_block(backend, dtype),
                            mm_encoder_tp_mode=mm_encoder_tp_mode,
                            interconnect=interconnect,
                        )
                    )
        return found

    candidates = search(target)
    fitting = [p for p in candidates if p["fits"]]
    if not fitting and target_max_model_len is None and candidates:
        # Like vLLM's max_model_len auto-fit: shorten the context to what the best layout holds.
        usable = [p for p in candidates if p["kv_cache_gib_per_gpu"] > 0 and p["num_gpu_blocks"] > 0]
        if usable:
            best_len = max(
                max_model_len_that_fits(
                    [{"kind": "full", "window": None, "block": p["block_size"]}],
                    p["num_gpu_blocks"],
                    dcp=p["layout"]["decode_context_parallel_size"],
                    mnbt=p["max_num_batched_tokens"],
                )
                for p in usable
            )
            target = min(model_max, best_len // 1024 * 1024)
            if target >= 1024:
                notes.append(
                    f"the model's {model_max:,}-token context does not fit; max_model_len {target:,}"
                )
                candidates = search(target)
                fitting = [p for p in candidates if p["fits"]]
    if not fitting:
        reasons = [f"no layout of {gpus} GPU(s) fits at max_model_len {target:,}"]
        if candidates:
            best_effort = max(candidates, key=lambda p: p["kv_cache_gib_per_gpu"])
            lay = best_effort["layout"]
            reasons.append(
                f"closest: TP {lay['tensor_parallel_size']} x PP {lay['pipeline_parallel_size']} x DP "
                f"{lay['data_parallel_size']}, KV {best_effort['kv_cache_dtype']}"
            )
            reasons.extend(best_effort["reasons"])
        else:
            best_effort = None
        reasons.extend(skipped)
        return {
            "fits": False,
            "reasons": reasons,
            "notes": notes,
            "attention_backend": backend["backend"] if backend else None,
            "max_model_len": target,
            "plan": best_effort,
            "candidates": _candidate_table(candidates),
            "skipped_layouts": skipped,
        }

    def score(p: dict[str, Any]) -> tuple[Any, ...]:
        lay = p["layout"]
        # Fewest pipeline stages (PP adds bubbles); then room for target_concurrency requests of
        # max_model_len over all DP replicas; then the smallest model instance (fewer TP ranks, more
        # DP replicas: less communication per token); then the cheaper settings (16-bit cache, smaller
        # DCP: DCP adds an all-gather per decode step); then the most KV tokens over all replicas.
        return (
            -lay["pipeline_parallel_size"],
            min(p["max_concurrency"] * lay["data_parallel_size"], target_concurrency),
            -lay["tensor_parallel_size"],
            p["kv_cache_dtype"] != "fp8",
            -lay["decode_context_parallel_size"],
            p["kv_cache_tokens_all_replicas"],
        )

    best = max(fitting, key=score)
    lay = best["layout"]
    reasons = [
        f"TP {lay['tensor_parallel_size']} x PP {lay['pipeline_parallel_size']} x DP "
        f"{lay['data_parallel_size']}: {best['weights_gib_per_gpu']:.1f} GiB weights per GPU, "
        f"{best['kv_cache_gib_per_gpu']:.1f} GiB KV",
        f"{best['kv_cache_tokens']:,} KV tokens per replica with {best['kv_cache_dtype']} KV; "
        f"{best['max_concurrency']}x requests of {target:,} tokens per replica",
    ]
    if lay["data_parallel_size"] > 1:
        reasons.append(
            f"the model fits {lay['tensor_parallel_size'] * lay['pipeline_parallel_size']} GPU(s): "
            f"{lay['data_parallel_size']} data-parallel replicas use the rest"
        )
    if lay["decode_context_parallel_size"] > 1 and best["kv_cache_dtype"] == "fp8" and arch["use_mla"]:
        notes.append("FP8 KV together with DCP on MLA needs vLLM PR #34795 in the installed build")
    if lay["decode_context_parallel_size"] > 1:
        reasons.append(
            "decode context parallel shards the MLA latent cache over tokens instead of duplicating it on "
            f"every TP rank: x{lay['decode_context_parallel_size']} tokens"
        )
    return {
        "fits": True,
        "tensor_parallel_size": lay["tensor_parallel_size"],
        "pipeline_parallel_size": lay["pipeline_parallel_size"],
        "data_parallel_size": lay["data_parallel_size"],
        "decode_context_parallel_size": lay["decode_context_parallel_size"],
        "kv_cache_dtype": best["kv_cache_dtype"],
        "gpu_memory_utilization": lay["gpu_memory_utilization"],
        "max_model_len": target,
        "attention_backend": (
            backend.get("fp8_backend", backend["backend"])
            if backend and best["kv_cache_dtype"] == "fp8"
            else (backend["backend"] if backend else None)
        ),
        "reasons": reasons,
        "notes": notes,
        "plan": best,
        "candidates": _candidate_table(candidates),
        "skipped_layouts": skipped,
    }


def candidate_layouts(arch: dict[str, Any], gpus: int) -> tuple[list[tuple[int, int, int]], list[str]]:
    """(TP, PP, DP) splits of the GPUs vLLM would start, and why the others are left out.

    TP and PP are powers of two; DP takes the GPUs one TP x PP instance leaves. A split vLLM refuses
    (check_divisibility: heads, KV heads, intermediate sizes, more stages than layers) is skipped.
    """
    valid: list[tuple[int, int, int]] = []
    skipped: list[str] = []
    for tp in _pow2_divisors(gpus):
        for pp in _pow2_divisors(gpus // tp):
            dp = gpus // (tp * pp)
            problems = check_divisibility(arch, tp=tp, pp=pp, dp=dp, ep=False, dcp=1)
            if problems:
                skipped.append(
                    f"TP {tp} x PP {pp} x DP {dp} skipped: " + "; ".join(x["message"] for x in problems)
                )
            else:
                valid.append((tp, pp, dp))
    return valid, skipped


def _candidate_table(candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "tp": p["layout"]["tensor_parallel_size"],
            "pp": p["layout"]["pipeline_parallel_size"],
            "dp": p["layout"]["data_parallel_size"],
            "dcp": p["layout"]["decode_context_parallel_size"],
            "kv_cache_dtype": p["kv_cache_dtype"],
            "kv_cache_tokens": p["kv_cache_tokens"],
            "max_concurrency": p["max_concurrency"],
            "fits": p["fits"],
        }
        for p in candidates
    ]
