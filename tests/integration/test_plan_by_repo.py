"""bin/llm-plan --model ORG/NAME[@REV] against a real HF-protocol mirror (olah) serving the published configs.

Each repository holds the published config.json from tests/data/model_configs/ and weight files of known
sizes (the mirror's listing carries no sizes, so the CLI asks for each file's size as it would on a mirror).
The plan by repository id must be the plan of the same config.json with the same checkpoint size.
"""

from __future__ import annotations

import json
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
