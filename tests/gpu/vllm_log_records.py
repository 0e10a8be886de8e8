"""Turn recorded vLLM start-up logs into planner test records (one JSON object per run).

Reads RUN_DIR/vllm.log (+ config.json) for each run directory given and prints JSON lines; the figures
are taken from the log text only, so `tests/unit/test_h200_recorded_logs.py` can re-parse the raw logs
and check the committed records against them.
Usage: python3 vllm_log_records.py RUN_DIR... > tests/data/vllm_logs_h200.jsonl
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

PATTERNS = {
    "vllm_version": r"Initializing a V1 LLM engine \(v([\d.]+)\)",
    "weights_gib_per_gpu": r"Model loading took ([\d.]+) GiB",
    "kv_cache_gib": r"Available KV cache memory: ([\d.]+) GiB",
    "kv_cache_tokens": r"GPU KV cache size: ([\d,]+) tokens",
    "max_concurrency": r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x",
    "cudagraph_estimate_gib": r"Estimated CUDA graph memory: ([\d.]+) GiB total",
}
# gpu_worker's DEBUG summary, printed after the KV cache is sized.
PROFILE = re.compile(
    r"Free memory on device \(([\d.]+)/([\d.]+) GiB\) on startup\. .*?Actual usage is ([\d.]+) GiB for "
    r"weight, ([\d.]+) GiB for peak activation, ([\d.]+) GiB for non-torch memory, and ([\d.]+) GiB for "
    r"CUDAGraph memory"
)
ARGS = re.compile(r"non-default args: (\{.*\})")


def _number(text: str) -> float | int:
    text = text.replace(",", "")
    return float(text) if "." in text else int(text)


def parse_log(text: str) -> dict:
    """The figures one vLLM start-up log reports (first occurrence: rank 0 for TP > 1)."""
    out: dict = {}
    for key, pattern in PATTERNS.items():
        m = re.search(pattern, text)
        out[key] = (m.group(1) if key == "vllm_version" else _number(m.group(1))) if m else None
    m = PROFILE.search(text)
    names = ("free_gib_at_start", "gpu_mem_gib", "profiled_weights_gib", "peak_activation_gib")
    names += ("non_torch_gib", "cudagraph_actual_gib")
    out.update(
        dict.fromkeys(names) if m is None else {n: float(v) for n, v in zip(names, m.groups(), strict=True)}
    )
    if "Using FlashInfer for top-p & top-k sampling" in text:
        out["sampler"] = "flashinfer"
    elif "using PyTorch-native sampler" in text:
        out["sampler"] = "pytorch-native"
    else:
        out["sampler"] = None
    m = ARGS.search(text)
    out["args"] = ast.literal_eval(m.group(1)) if m else None
    return out


def record(run_dir: Path, root: Path) -> dict:
    log = parse_log((run_dir / "vllm.log").read_text())
    args = log.pop("args") or {}
    kv_dtype = args.get("kv_cache_dtype", "auto")
    return {
        "id": run_dir.name,
        "model_config": str((run_dir / "config.json").relative_to(root)),
        "raw_log": str((run_dir / "vllm.log").relative_to(root)),
        "gpu": "NVIDIA H200",
        "gpu_mem_gib": log.pop("gpu_mem_gib"),
        "vllm_version": log.pop("vllm_version"),
        "tp": args.get("tensor_parallel_size", 1),
        "pp": args.get("pipeline_parallel_size", 1),
        "dcp": args.get("decode_context_parallel_size", 1),
        "kv_cache_dtype": kv_dtype,
        "max_model_len": args["max_model_len"],
        "gpu_memory_utilization": args.get("gpu_memory_utilization", 0.9),
        "enforce_eager": args.get("enforce_eager", False),
        "max_num_seqs": args.get("max_num_seqs"),
        "max_num_batched_tokens": args.get("max_num_batched_tokens"),
        **log,
    }


def main() -> None:
    root = Path(__file__).resolve().parents[2]
    for arg in sys.argv[1:]:
        print(json.dumps(record(Path(arg).resolve(), root)))


if __name__ == "__main__":
    main()
