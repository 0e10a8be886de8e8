"""What the tests of the recorded GPU runs (tests/fixtures/h*_*/) share: the engine-log parser, the
ansible-playbook recap, and bin/llm-plan on a catalog model as the deploy would plan it."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "bin" / "llm-plan"

_spec = importlib.util.spec_from_file_location("vllm_log_records", ROOT / "tests/gpu/vllm_log_records.py")
vllm_log_records = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(vllm_log_records)


def recap(log: str) -> dict[str, int]:
    """The counts of the (first) host line of a playbook log's PLAY RECAP."""
    line = log.split("PLAY RECAP", 1)[1].splitlines()[1]
    return {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", line)}


def card_gib(hardware: str) -> float:
    return yaml.safe_load((ROOT / "catalog" / "hardware" / f"{hardware}.yml").read_text())["llm_hardware"][
        "gpu_memory_gib"
    ]


def plan(
    tmp: Path, model: str, gpu_memory_gib: float, vllm_version: str, max_model_len: int, **given: float
) -> dict:
    """bin/llm-plan --json at TP 1 and utilization 0.9; ``given`` adds --kv-cache-memory-gib and the like."""
    entry = yaml.safe_load((ROOT / "catalog" / "models" / f"{model}.yml").read_text())["llm_model"]
    # The deploy serves the float32 tiny chat checkpoint in bfloat16 (catalog engine_args dtype).
    path = tmp / f"{model}-config.json"
    path.write_text(json.dumps(entry["hf_config"] | {"torch_dtype": "bfloat16"}))
    args = [
        "--model-config",
        str(path),
        "--gpu-memory-gib",
        str(gpu_memory_gib),
        "--tensor-parallel-size",
        "1",
    ]
    args += ["--gpu-memory-utilization", "0.9", "--max-model-len", str(max_model_len)]
    args += ["--vllm-version", vllm_version, "--json"]
    for key, value in given.items():
        args += ["--" + key.replace("_", "-"), str(value)]
    out = subprocess.run([sys.executable, str(CLI), *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)
