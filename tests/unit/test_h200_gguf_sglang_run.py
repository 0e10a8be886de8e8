"""The GGUF and SGLang deployments on the lent one-GPU H200 (tests/gpu/deploy_on_gpu.sh), checked from what
came back (tests/fixtures/h200x1_gguf_sglang/, see tests/gpu/README.md):

- gguf_deploy.log: deploy_model.yml with tiny_test_gguf on vLLM 0.22.0's own GGUF loader, the parts merged
  by hf_model, the base model's config and tokenizer given to the engine; serve_verify passed with the quant
  level in the report.
- sglang_deploy.log: deploy_model.yml -e llm_engine=sglang (SGLang 0.5.17): health, chat, quality probes,
  reasoning split, throughput and the KV pool the planner predicted with SGLang's accounting; the tiny model's
  tool calls under SGLang's constrained decoding were refused by the gate.
- sglang_beside_vllm.log / sglang_engine_beside_vllm.log: the same deploy while the vLLM service still held
  the GPU: SGLang sized its pool from the little memory left, the gate saw 9.3 % of the planned tokens, and
  the engine then died allocating NCCL memory.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from llm_capacity import plan_memory  # plugins/module_utils is on sys.path (tests/unit/conftest.py)
from llm_capacity.sglang import sglang_kv_pool

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "tests" / "fixtures" / "h200x1_gguf_sglang"
H200 = yaml.safe_load((ROOT / "catalog" / "hardware" / "h200_x1.yml").read_text())["llm_hardware"]


def _checks(log: str) -> dict[str, str]:
    """serve_verify's check table (last report in the log): name -> 'pass'/'FAIL' and detail."""
    rows = re.findall(r"- '\| (\w+) \| (pass|FAIL) \| ([^|]*)", log)
    return {name: f"{result} {detail.strip()}" for name, result, detail in rows}


def _text(name: str) -> str:
    return " ".join((RUN / name).read_text().split())


def test_gguf_deployment_verified_on_vllm_with_the_merged_file_and_the_base_config() -> None:
    log = _text("gguf_deploy.log")
    assert "# serve_verify: llmdeploy-test/tiny-chat-GGUF (PASS)" in log
    checks = _checks((RUN / "gguf_deploy.log").read_text())
    assert all(v.startswith("pass") for v in checks.values()), checks
    assert checks["quality"].startswith("pass 6/6 probes answered")
    # The report names the quant level the merge read from the file.
    assert "- quantization: GGUF Q8_0 (MOSTLY_Q8_0, 8.52 bits per weight): quantized weights" in log
    assert "Merge split GGUF parts into /var/lib/llm/models/tiny_test_gguf@main.merged-a23ed0a3" in log
    # vLLM loaded the merged file (beside the parts' source, never over it), the base config and tokenizer
    # (the engine log of the first starts, which died on missing dependencies: see the next test).
    args = re.search(r"non-default args: (\{.*?\})", _text("vllm_engine_gguf_first_starts.log")).group(1)
    assert re.search(
        r"'model': '/var/lib/llm/models/tiny_test_gguf@main\.merged-[0-9a-f]{8}/tiny-chat-Q8_0\.gguf'", args
    )
    assert (
        "'tokenizer': '/srv/llm-src/tiny-chat'" in args
        and "'hf_config_path': '/srv/llm-src/tiny-chat'" in args
    )
    observed, planned = map(int, re.search(r"observed (\d+) tokens vs planned (\d+)", log).groups())
    assert abs(observed / planned - 1) < 0.002


def test_vllm_022_needed_humming_kernels_and_pyelftools_for_gguf() -> None:
    """vLLM 0.22.0 imports humming (humming-kernels, which imports elftools) for any quantized checkpoint,
    GGUF included; the staged wheel list had neither, so the first starts died before loading."""
    engine = (RUN / "vllm_engine_gguf_first_starts.log").read_text()
    assert "ModuleNotFoundError: No module named 'humming'" in engine
    assert "ModuleNotFoundError: No module named 'elftools'" in engine
    # tests/gpu/deploy_on_gpu.sh adds .stage/extra (humming-kernels 0.1.10, pyelftools) to the wheelhouse.
    assert ".stage/extra" in (ROOT / "tests" / "gpu" / "deploy_on_gpu.sh").read_text()


def _sglang_plan() -> dict:
    """The SGLang pool the deploy planned for tiny_test on the lent H200 (llm_plan: vLLM's layout and weights,
    then SGLang 0.5.17's accounting), recomputed with today's code."""
    model = yaml.safe_load((ROOT / "catalog" / "models" / "tiny_test.yml").read_text())["llm_model"]
    vllm = plan_memory(
        model["hf_config"],
        gpu_memory_gib=H200["gpu_memory_gib"],
        tensor_parallel_size=1,
        gpu_memory_utilization=0.9,
        kv_cache_dtype="bfloat16",
        max_model_len=256,
        checkpoint_gib=model["checkpoint_bytes"] / 2**30,
        vllm_version="0.22.0",
    )
    return sglang_kv_pool(
        model["hf_config"],
        weights_gib_per_gpu=vllm["weights_gib_per_gpu"],
        gpu_memory_gib=H200["gpu_memory_gib"],
        nvidia_smi_memory_mib=H200["gpu_memory_mib_cuda"],
        tensor_parallel_size=1,
        kv_cache_dtype="bfloat16",
        compute_capability="9.0",
        context_length=256,
    )


def test_sglang_served_the_model_and_its_kv_pool_matches_sglangs_accounting() -> None:
    log = _text("sglang_deploy.log")
    checks = _checks((RUN / "sglang_deploy.log").read_text())
    for name in ("health", "models", "chat", "quality", "reasoning_split", "throughput", "kv_cache"):
        assert checks[name].startswith("pass"), (name, checks[name])
    assert checks["quality"].startswith("pass 6/6 probes answered")
    observed, planned = map(int, re.search(r"observed (\d+) tokens vs planned (\d+)", log).groups())
    plan = _sglang_plan()
    # The figure the run planned is what the planner gives today, and SGLang allocated within 0.1 % of it.
    assert planned == plan["max_total_tokens"] == 131_656_214
    assert plan["mem_fraction_static"] == 0.903 and plan["mem_fraction_static_default"]
    assert abs(observed / planned - 1) < 0.001, (observed, planned)


def test_sglang_gate_refused_the_tiny_models_tool_calls() -> None:
    """The tiny model learned vLLM's tool-call forms; SGLang constrains tool_choice to a JSON array of
    {name, parameters} from the first token (function_call/utils.py get_json_schema_constraint), and the
    arguments came out empty: the gate refused the endpoint.

    The recorded run also found a defect, fixed since: this deploy re-ran after the one beside vLLM (whose
    rollback had stopped the new service); the service files were unchanged, so the run only started it, and
    the rollback after the failed gate was skipped ('Put the last verified service back' skipping). A service
    a run starts now counts as that run's change (vllm_service tasks/service.yml, supervisord.yml)."""
    log = _text("sglang_deploy.log")
    checks = _checks((RUN / "sglang_deploy.log").read_text())
    assert checks["tool_call_required"].startswith("FAIL") and checks["tool_call_named"].startswith("FAIL")
    assert 'get_weather(": ")' in checks["tool_call_required"]
    assert "# serve_verify: llmdeploy-test/tiny-chat (FAIL)" in log
    rollback = r"TASK \[Put the last verified service back when the new one failed the gate\] \*+ skipping"
    assert re.search(rollback, log)
    roles = ROOT / "roles" / "vllm_service" / "tasks"
    assert "Note a service this run started" in (roles / "service.yml").read_text()
    assert "Note a program this run started" in (roles / "supervisord.yml").read_text()


def test_the_service_ran_as_its_own_user_with_the_key_outside_argv() -> None:
    spec = json.loads((RUN / "service" / "sglang.launch.json").read_text())
    argv = spec["argv"]
    assert spec["user"] == "sglang" and spec["env_file"] == "/etc/sglang/sglang.env"
    assert argv[1] == "/usr/local/libexec/llmdeploy/sglang_serve.py"
    assert argv[argv.index("--mem-fraction-static") + 1] == "0.903"
    assert argv[argv.index("--kv-cache-dtype") + 1] == "bfloat16"
    assert (
        argv[argv.index("--reasoning-parser") + 1] == "deepseek-r1"
    )  # vLLM's deepseek_r1, SGLang's spelling
    assert not any("api-key" in a for a in argv)


def test_beside_a_running_vllm_sglang_sized_its_pool_from_the_memory_left_and_the_gate_said_so() -> None:
    engine = (RUN / "sglang_engine_beside_vllm.log").read_text()
    tokens = int(re.search(r"max_total_num_tokens=(\d+)", engine).group(1))
    assert tokens == 12_223_253
    assert "Failed to CUDA calloc" in engine
    log = _text("sglang_beside_vllm.log")
    assert "kv_cache | FAIL | observed 12223253 tokens vs planned 131656214 (9.3%)" in log
