"""bin/llm-plan --model ORG/NAME[@REV] against a real HF-protocol mirror (olah) serving the published configs.

Each repository holds the published config.json from tests/data/model_configs/ and weight files of known
sizes (the mirror's listing carries no sizes, so the CLI asks for each file's size as it would on a mirror).
The plan by repository id must be the plan of the same config.json with the same checkpoint size.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, Hub

pytestmark = pytest.mark.slow
CLI = ROOT / "bin" / "llm-plan"
CONFIGS = sorted(
    p
    for p in (ROOT / "tests" / "data" / "model_configs").glob("*.json")
    if not p.name.endswith(".hf_quant_config.json")
)
PLAN_ARGS = ["--gpu-memory-gib", "139.8", "--tensor-parallel-size", "8", "--max-model-len", "4096", "--json"]


def llm_plan(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CLI), *args], capture_output=True, text=True, check=False, env=env
    )


def publish(
    hub: Hub, repo: str, config: bytes, shard_bytes: tuple[int, ...] = (1_500_000, 4_096)
) -> tuple[str, int]:
    n = len(shard_bytes)
    files: dict[str, bytes | Path] = {
        "config.json": config,
        "tokenizer_config.json": b'{"chat_template": "{{ x }}"}',
    }
    for i, size in enumerate(shard_bytes, 1):
        files[f"model-{i:05d}-of-{n:05d}.safetensors"] = bytes([i]) * size
    files["model.safetensors.index.json"] = json.dumps({"metadata": {}, "weight_map": {}}).encode()
    return hub.make_repo(repo, files), sum(shard_bytes)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_plan_by_repo_id_is_the_plan_of_its_config(hub: Hub, tmp_path: Path, path: Path) -> None:
    repo = path.stem.replace("__", "/", 1)
    sha, total = publish(hub, repo, path.read_bytes())
    by_repo = llm_plan("--model", repo, "--hf-endpoint", hub.endpoint, *PLAN_ARGS)
    assert by_repo.returncode in (0, 1), by_repo.stderr
    plan = json.loads(by_repo.stdout)
    model = plan.pop("model")
    assert model["sha"] == sha and model["revision"] == "main" and model["repo"] == repo
    assert model["checkpoint_bytes"] == total and len(model["weight_files"]) == 2
    assert model["chat_template"] is True
    by_file = llm_plan("--model-config", str(path), "--checkpoint-gib", repr(total / 2**30), *PLAN_ARGS)
    assert by_file.returncode == by_repo.returncode
    assert plan == json.loads(by_file.stdout)

    pinned = llm_plan("--model", f"{repo}@{sha}", "--hf-endpoint", hub.endpoint, *PLAN_ARGS)
    assert json.loads(pinned.stdout)["model"]["sha"] == sha


def test_unknown_revision_lists_what_exists(hub: Hub) -> None:
    publish(hub, "acme/revisions", (CONFIGS[0]).read_bytes())
    out = llm_plan("--model", "acme/revisions@v9", "--hf-endpoint", hub.endpoint, *PLAN_ARGS)
    assert out.returncode == 2
    assert "acme/revisions has no revision 'v9'; its branches and tags: main" in out.stderr, out.stderr


def test_unknown_or_gated_repo_names_the_token_variable(hub: Hub) -> None:
    env = {"PATH": "/usr/bin:/bin", "HF_TOKEN_PATH": "/nonexistent"}
    out = llm_plan("--model", "acme/not-there", "--hf-endpoint", hub.endpoint, *PLAN_ARGS, env=env)
    assert out.returncode == 2
    assert "gated or private" in out.stderr and "HF_TOKEN" in out.stderr, out.stderr
    bad = llm_plan("--model", "not a repo", *PLAN_ARGS)
    assert bad.returncode == 2 and "is not ORG/NAME or ORG/NAME@REVISION" in bad.stderr
    dead = llm_plan("--model", "acme/x", "--hf-endpoint", "http://127.0.0.1:9", *PLAN_ARGS)
    assert dead.returncode == 2 and "cannot reach the hub at http://127.0.0.1:9" in dead.stderr


def _playbook(*extra: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
        "ANSIBLE_DEPRECATION_WARNINGS": "false",
    }
    cmd = [
        str(Path(sys.executable).parent / "ansible-playbook"),
        str(ROOT / "playbooks" / "plan.yml"),
        *extra,
    ]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=300)


def _facts(out: str, name: str = "llm_model") -> dict:
    """The last value the play set for a fact (from the JSON callback's output)."""
    found = None
    for play in json.loads(out)["plays"]:
        for task in play["tasks"]:
            res = task["hosts"].get("localhost", {})
            if name in res.get("ansible_facts", {}):
                found = res["ansible_facts"][name]
    assert found is not None, f"no {name} was set"
    return found


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_plan_playbook_by_repo_id(hub: Hub, path: Path) -> None:
    repo = "mirror-" + path.stem.replace("__", "/", 1)
    config = json.loads(path.read_text())
    sha, total = publish(hub, repo, path.read_bytes(), shard_bytes=(2_000_000,))
    out = _playbook(
        "-e",
        f"llm_model_repo={repo}",
        "-e",
        f"llm_hf_endpoint={hub.endpoint}",
        "-e",
        "llm_hardware_name=h200_x8",
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    stats = json.loads(out.stdout)["stats"]["localhost"]
    assert stats["changed"] == 0 and stats["failures"] == 0
    model = _facts(out.stdout)
    assert model["hf_repo"] == repo and model["hf_revision"] == sha
    assert model["hf_config"] == config
    assert model["checkpoint_bytes"] == total and model["checkpoint_shards"] == 1
    text = config.get("text_config", config)
    assert model["mla"] == bool(text.get("kv_lora_rank"))
    quant = (config.get("quantization_config") or {}).get("quant_method")
    dtype = text.get("torch_dtype") or text.get("dtype") or config.get("torch_dtype")
    expected = {"compressed-tensors": "compressed_tensors"}.get(quant, quant) if quant else None
    expected = expected or {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(dtype, "bf16")
    assert model["quant_format"] == expected
    plan = _facts(out.stdout, "llm_plan_result")
    assert plan["plan"]["kv_cache_tokens"] > 0 and plan["tensor_parallel_size"] >= 1


def test_an_architecture_the_release_lacks_is_refused_with_what_serves_it(hub: Hub, tmp_path: Path) -> None:
    config = json.loads((CONFIGS[0]).read_text()) | {"architectures": ["BailingMoeV3ForCausalLM"]}
    publish(hub, "acme/bailing", json.dumps(config).encode())
    old = llm_plan(
        "--model", "acme/bailing", "--hf-endpoint", hub.endpoint, *PLAN_ARGS, "--vllm-version", "0.22.0"
    )
    assert old.returncode == 1, old.stderr
    assert "not in vLLM 0.22.0's model registry: vLLM 0.32.0 has it" in json.loads(old.stdout)["reasons"][-1]
    new = llm_plan(
        "--model", "acme/bailing", "--hf-endpoint", hub.endpoint, *PLAN_ARGS, "--vllm-version", "0.32.0"
    )
    assert new.returncode == 0 and json.loads(new.stdout)["fits"], new.stderr
    out = _playbook("-e", "llm_model_repo=acme/bailing", "-e", f"llm_hf_endpoint={hub.endpoint}")
    assert out.returncode != 0
    assert "llm_model_repo=acme/bailing with llm_plan_vllm_version=0.22.0 is refused" in out.stdout, (
        out.stdout[-3000:]
    )
