"""bin/llm-plan against real vLLM 0.22.0 start-up logs recorded on NVIDIA H200s.

Records: tests/data/vllm_logs_h200.jsonl, raw logs and model configs under tests/data/vllm_logs_h200/.

The calibration data is vLLM 0.19 on H100; these runs check the planner on another GPU and version.
They were recorded by tests/gpu/record_vllm_logs.sh with random-weight models built on the machine
(tests/gpu/make_tiny_models.py); the records are made from the raw logs by tests/gpu/vllm_log_records.py.
Same bar as the calibration test: given the logged KV memory (--kv-cache-memory-gib) the token count
within 0.5 %; given the logged weights (--weights-gib-per-gpu) the available KV memory within 3 %.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest
from _gpu_runs import vllm_log_records

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "vllm_logs_h200.jsonl"
CLI = ROOT / "bin" / "llm-plan"
TOKEN_TOLERANCE = 0.005
KV_MEMORY_TOLERANCE = 0.03


RECORDS = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
IDS = [r["id"] for r in RECORDS]

# vLLM 0.22 logs "GPU KV cache size" as int(max_concurrency x max_model_len)
# (vllm/v1/core/kv_cache_utils.py `_report_kv_cache_config`); 0.19 logged num_blocks // groups x block.
# For hybrid sliding-window models the two differ; the planner still uses the 0.19 formula.
# Records the planner is known to miss on the 0.22 token formula: none since it follows
# int(max_concurrency x max_model_len) (kv_cache_utils._report_kv_cache_config).
FORMULA_XFAIL: dict[str, str] = {}


def cli_plan(record: dict, **given: float) -> dict:
    """Run bin/llm-plan as a user would, with the record's settings."""
    args = [
        "--model-config", str(ROOT / record["model_config"]),
        "--gpu-memory-gib", str(record["gpu_mem_gib"]),
        "--tensor-parallel-size", str(record["tp"]),
        "--pipeline-parallel-size", str(record["pp"]),
        "--decode-context-parallel-size", str(record["dcp"]),
        "--gpu-memory-utilization", str(record["gpu_memory_utilization"]),
        "--kv-cache-dtype", "fp8" if record["kv_cache_dtype"].startswith("fp8") else "auto",
        "--max-model-len", str(record["max_model_len"]),
        "--vllm-version", record["vllm_version"],
        "--json",
    ]  # fmt: skip
    for key in ("max_num_seqs", "max_num_batched_tokens"):
        if record[key] is not None:
            args += ["--" + key.replace("_", "-"), str(record[key])]
    if record["enforce_eager"]:
        args.append("--enforce-eager")
    for key, value in given.items():
        args += ["--" + key.replace("_", "-"), str(value)]
    out = subprocess.run([sys.executable, str(CLI), *args], capture_output=True, text=True, check=False)
    # Exit 1 is a plan that does not fit (still printed, with fits: false); anything else is a failure.
    assert out.returncode in (0, 1) and json.loads(out.stdout)["fits"] == (out.returncode == 0), out.stderr
    return json.loads(out.stdout)


def _xfail_formula(record: dict):
    reason = FORMULA_XFAIL.get(record["id"])
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return pytest.param(record, id=record["id"], marks=marks)


def test_records_present():
    assert len(RECORDS) >= 2
    assert {r["gpu"] for r in RECORDS} == {"NVIDIA H200"}
    assert {r["vllm_version"] for r in RECORDS} == {"0.22.0"}


@pytest.mark.parametrize("record", RECORDS, ids=IDS)
def test_record_matches_raw_log(record):
    # The committed figures are what the raw log says, not hand-typed numbers.
    run_dir = ROOT / record["raw_log"]
    assert vllm_log_records.record(run_dir.parent, ROOT) == record
    assert json.loads((ROOT / record["model_config"]).read_text())["architectures"]


@pytest.mark.parametrize("record", RECORDS, ids=IDS)
def test_logged_tokens_are_concurrency_times_length(record):
    # What vLLM 0.22 itself does (see FORMULA_XFAIL); checks the record, not the planner.
    expected = record["max_concurrency"] * record["max_model_len"]
    assert record["kv_cache_tokens"] == pytest.approx(expected, rel=1e-4)


@pytest.mark.parametrize("record", RECORDS, ids=IDS)
def test_tokens_from_logged_kv_memory(record):
    plan = cli_plan(record, kv_cache_memory_gib=record["kv_cache_gib"])
    err = (plan["kv_cache_tokens"] - record["kv_cache_tokens"]) / record["kv_cache_tokens"]
    assert abs(err) <= TOKEN_TOLERANCE, f"{record['id']}: token count off by {err:+.3%}"


@pytest.mark.parametrize("record", RECORDS, ids=IDS)
def test_kv_memory_from_logged_weights(record):
    plan = cli_plan(record, weights_gib_per_gpu=record["weights_gib_per_gpu"])
    err = (plan["kv_cache_gib_per_gpu"] - record["kv_cache_gib"]) / record["kv_cache_gib"]
    assert abs(err) <= KV_MEMORY_TOLERANCE, f"{record['id']}: KV memory off by {err:+.2%}"


@pytest.mark.parametrize("record", RECORDS, ids=IDS)
def test_max_concurrency_from_logged_kv_memory(record):
    plan = cli_plan(record, kv_cache_memory_gib=record["kv_cache_gib"])
    assert plan["max_concurrency"] == pytest.approx(record["max_concurrency"], rel=TOKEN_TOLERANCE)


@pytest.mark.parametrize("record", [_xfail_formula(r) for r in RECORDS])
def test_planner_tokens_follow_vllm_022_formula(record):
    # Stricter than the 0.5 % bar: the planner's token figure must be vLLM 0.22's own formula applied to
    # the planner's concurrency (rounding of the logged GiB aside).
    plan = cli_plan(record, kv_cache_memory_gib=record["kv_cache_gib"])
    expected = plan["max_concurrency"] * record["max_model_len"]
    assert plan["kv_cache_tokens"] == pytest.approx(expected, rel=1e-4)


# --- CUDA-graph memory estimate (vLLM 0.21-0.26: gpu_model_runner.profile_cudagraph_memory) -----------

sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))
import llm_capacity  # noqa: E402


def _raw_graph_lines(record: dict) -> list[str]:
    text = (ROOT / record["raw_log"]).read_text()
    return [
        line for line in text.splitlines() if "first-capture" in line or "Profiling CUDA graph memory" in line
    ]


def test_default_capture_sizes_match_the_logged_graph_counts():
    # Every record logs "PIECEWISE=51 (largest=512), FULL=51 (largest=512)" for 1024 sequences, 8192 tokens.
    sizes = llm_capacity.cudagraph_capture_sizes(1024, 8192)
    assert (len(sizes), max(sizes)) == (51, 512)
    for record in RECORDS:
        assert any("PIECEWISE=51 (largest=512), FULL=51 (largest=512)" in x for x in _raw_graph_lines(record))
    # Smaller batches: capture up to 2 x max_num_seqs, FULL only for decode batches <= max_num_seqs.
    assert llm_capacity.cudagraph_capture_sizes(8, 8192) == [1, 2, 4, 8, 16]
    assert llm_capacity.cudagraph_capture_sizes(256, 100) == [1, 2, 4, *range(8, 100, 8), 100]
    tiny = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 128}
    arch = llm_capacity.normalize_architecture(tiny | {"vocab_size": 100})
    est = llm_capacity.estimate_cudagraph_profile_gib(
        arch, [0, 1], tp=1, ep=False, max_num_seqs=256, mnbt=2048
    )
    assert est["graphs"] == {"PIECEWISE": 51, "FULL": 35}


@pytest.mark.parametrize("record", RECORDS, ids=IDS)
def test_cudagraph_estimate_follows_the_logged_formula(record):
    # max(first captures) + sum over modes of (n - 1) x per-graph, read from the raw log; the planner's
    # figure is the same formula with its modelled first capture and the 1 MiB floor.
    first, per = [], []
    for line in _raw_graph_lines(record):
        if "first-capture" in line:
            words = line.split()
            first.append(float(words[words.index("MiB") - 1]))
            n = int(line.split("(")[-1].split("-")[0])
            per.append((n - 1) * float(words[words.index("per-graph") - 2]))
    assert len(first) == 2
    logged_gib = (max(first) + sum(per)) / 1024
    assert logged_gib == pytest.approx(record["cudagraph_estimate_gib"], abs=0.005)
    plan = cli_plan(record, weights_gib_per_gpu=record["weights_gib_per_gpu"])
    assert plan["cudagraph_subtracted"]
    assert plan["cudagraph_gib"] == pytest.approx(logged_gib, abs=0.01)


def test_cudagraph_estimate_grows_with_the_layer_width_not_the_layer_count():
    # Per-graph cost is the second capture, which reuses the pool: layers do not add to it; a wide layer's
    # 512-token working set raises the first capture above the fixed floor.
    small = {"hidden_size": 1024, "num_hidden_layers": 8, "num_attention_heads": 16, "vocab_size": 32000}
    small["intermediate_size"] = 2816
    deep = small | {"num_hidden_layers": 80}
    wide = small | {"hidden_size": 8192, "intermediate_size": 28672, "num_attention_heads": 64}

    def gib(cfg, tp=1):
        arch = llm_capacity.normalize_architecture(cfg)
        layers = list(range(arch["num_hidden_layers"]))
        est = llm_capacity.estimate_cudagraph_profile_gib(
            arch, layers, tp=tp, ep=False, max_num_seqs=1024, mnbt=8192
        )
        return est["gib"]

    assert gib(deep) == gib(small) == pytest.approx((64 + 50 + 50) / 1024)
    assert gib(wide) > gib(small) + 0.05
    assert gib(wide, tp=4) < gib(wide)


def test_cudagraph_term_by_version():
    record = RECORDS[0]
    base = {"weights_gib_per_gpu": record["weights_gib_per_gpu"]}
    v019 = cli_plan(record | {"vllm_version": "0.19.0"}, **base)
    v022 = cli_plan(record, **base)
    v028 = cli_plan(record | {"vllm_version": "0.28.0"}, **base)
    assert not v019["cudagraph_subtracted"] and v022["cudagraph_subtracted"] and v028["cudagraph_subtracted"]
    # 0.21-0.26: the profiled estimate; from 0.27 the H100 fit stands in for graphs + consumed-memory residue.
    assert v022["cudagraph_gib"] < 0.2 < v028["cudagraph_gib"]
    assert v019["kv_cache_gib_per_gpu"] - v022["kv_cache_gib_per_gpu"] == pytest.approx(
        v022["cudagraph_gib"], abs=2e-3
    )
    eager = cli_plan(record | {"enforce_eager": True}, **base)
    assert eager["cudagraph_gib"] == 0 and eager["kv_cache_gib_per_gpu"] > v022["kv_cache_gib_per_gpu"]


def test_model_runner_v2_architectures_get_no_graph_estimate():
    # vLLM 0.22's DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES is {Qwen3ForCausalLM}; V2's profile_cudagraph_memory
    # returns 0 up to 0.28. The recorded Llama ran on V1 (its log has the first-capture lines).
    record = RECORDS[0]
    assert _raw_graph_lines(record)
    config = json.loads((ROOT / record["model_config"]).read_text())
    assert not llm_capacity.v2_runner_skips_graph_estimate(config["architectures"], (0, 22, 0))
    assert llm_capacity.v2_runner_skips_graph_estimate(["Qwen3ForCausalLM"], (0, 22, 0))
    assert llm_capacity.v2_runner_skips_graph_estimate(["LlamaForCausalLM"], (0, 24, 0))
    assert not llm_capacity.v2_runner_skips_graph_estimate(["LlamaForCausalLM"], (0, 25, 0))
    assert not llm_capacity.v2_runner_skips_graph_estimate(["Qwen3ForCausalLM"], (0, 19, 0))
    qwen3 = config | {"architectures": ["Qwen3ForCausalLM"]}
    v1 = llm_capacity.plan_memory(
        config, gpu_memory_gib=139.8, weights_gib_per_gpu=0.3, max_model_len=4096, vllm_version="0.22.0"
    )
    v2 = llm_capacity.plan_memory(
        qwen3, gpu_memory_gib=139.8, weights_gib_per_gpu=0.3, max_model_len=4096, vllm_version="0.22.0"
    )
    assert v1["cudagraph_gib"] > 0.1 and v2["cudagraph_gib"] == 0
    assert v2["kv_cache_gib_per_gpu"] - v1["kv_cache_gib_per_gpu"] == pytest.approx(
        v1["cudagraph_gib"], abs=2e-3
    )


def test_batch_defaults_of_160_gib_gpus_from_0_28():
    # vllm/engine/arg_utils.py get_batch_defaults: >= 160 GiB (B200) gets 16384 batched tokens from 0.28.
    config = json.loads((ROOT / RECORDS[0]["model_config"]).read_text())

    def batch(gib: float, version: str) -> tuple[int, int]:
        plan = llm_capacity.plan_memory(config, gpu_memory_gib=gib, vllm_version=version, max_model_len=4096)
        return plan["max_num_seqs"], plan["max_num_batched_tokens"]

    assert batch(178.4, "0.28.0") == (1024, 16384)
    assert batch(178.4, "0.27.1") == batch(139.8, "0.28.0") == (1024, 8192)
    assert batch(44.99, "0.28.0") == (256, 2048)
