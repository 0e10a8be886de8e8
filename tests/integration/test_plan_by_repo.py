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
import yaml
from conftest import ROOT, Hub
from gated_hub import gated_hub

pytestmark = pytest.mark.slow
CLI = ROOT / "bin" / "llm-plan"
CONFIGS = sorted(
    p
    for p in (ROOT / "tests" / "data" / "model_configs").glob("*.json")
    if not p.name.endswith(".hf_quant_config.json")
)
# The playbooks' wiring is run for one published config of each kind: dense Llama, Qwen3 MoE, MLA + MoE,
# multimodal FP8, gpt-oss (MXFP4), compressed-tensors, AWQ.
FAMILY_CONFIGS = [
    p
    for p in CONFIGS
    if p.stem
    in {
        "meta-llama__Llama-3.1-8B-Instruct",
        "Qwen__Qwen3-30B-A3B",
        "deepseek-ai__DeepSeek-V2-Lite-Chat",
        "Qwen__Qwen3-VL-30B-A3B-Instruct-FP8",
        "openai__gpt-oss-20b",
        "RedHatAI__Meta-Llama-3.1-8B-Instruct-quantized.w4a16",
        "Qwen__Qwen3-14B-AWQ",
    }
]
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


def _ansible_playbook(playbook: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """ansible-playbook playbooks/<playbook> with the JSON callback, from the checkout."""
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
        "ANSIBLE_DEPRECATION_WARNINGS": "false",
    }
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), str(ROOT / "playbooks" / playbook), *extra]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=300)


def _playbook(*extra: str) -> subprocess.CompletedProcess[str]:
    return _ansible_playbook("plan.yml", *extra)


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


def test_an_architecture_the_release_lacks_is_refused_with_what_serves_it(hub: Hub, tmp_path: Path) -> None:
    config = json.loads((CONFIGS[0]).read_text()) | {"architectures": ["BailingMoeV3ForCausalLM"]}
    publish(hub, "acme/bailing", json.dumps(config).encode())
    old = llm_plan(
        "--model", "acme/bailing", "--hf-endpoint", hub.endpoint, *PLAN_ARGS, "--vllm-version", "0.22.0"
    )
    assert old.returncode == 1, old.stderr
    assert (
        "not in vLLM 0.22.0's model registry: vLLM 0.32.0, 0.33.0 has it"
        in json.loads(old.stdout)["reasons"][-1]
    )
    new = llm_plan(
        "--model", "acme/bailing", "--hf-endpoint", hub.endpoint, *PLAN_ARGS, "--vllm-version", "0.32.0"
    )
    assert new.returncode == 0 and json.loads(new.stdout)["fits"], new.stderr
    out = _playbook(
        "-e",
        "llm_model_repo=acme/bailing",
        "-e",
        f"llm_hf_endpoint={hub.endpoint}",
        "-e",
        "llm_plan_vllm_version=0.22.0",
    )
    assert out.returncode != 0
    assert "(acme/bailing) with llm_plan_vllm_version=0.22.0 on rtx_pro_6000_x8 is refused" in out.stdout, (
        out.stdout[-3000:]
    )
    assert "Instead: vLLM 0.32.0, 0.33.0 has it" in out.stdout
    # The deploy refuses it too, in plan mode, before any host, naming its own inputs.
    deploy = _deploy_plan(
        "-e",
        "llm_model_repo=acme/bailing",
        "-e",
        f"llm_hf_endpoint={hub.endpoint}",
        "-e",
        "llm_vllm_version=0.22.0",
    )
    assert deploy.returncode != 0
    assert (
        "llm_model_repo=acme/bailing with llm_vllm_version=0.22.0 on llm_hardware_name=rtx_pro_6000_x8"
        " is refused" in deploy.stdout
    )
    # The default release has it: planned.
    assert (
        _playbook("-e", "llm_model_repo=acme/bailing", "-e", f"llm_hf_endpoint={hub.endpoint}").returncode
        == 0
    )


def _assert_plan_playbook_model(
    out: subprocess.CompletedProcess[str], repo: str, sha: str, total: int
) -> None:
    """plan.yml's model and plan for a repository published with one weight file of ``total`` bytes."""
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    stats = json.loads(out.stdout)["stats"]["localhost"]
    assert stats["changed"] == 0 and stats["failures"] == 0
    model = _facts(out.stdout)
    config = model["hf_config"]
    assert model["hf_repo"] == repo and model["hf_revision"] == sha
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


def _deploy_plan(*extra: str) -> subprocess.CompletedProcess[str]:
    return _ansible_playbook("deploy_model.yml", "-e", "llm_deploy_plan_only=true", *extra)


def _families(config: dict) -> list[str]:
    """The families the rules are keyed by, read from the config here independently of the code under test."""
    text = config.get("text_config", config)
    found = []
    if text.get("kv_lora_rank"):
        found.append("mla")
        if text.get("index_topk"):
            found.append("sparse_mla")
    experts = next(
        (text[k] for k in ("n_routed_experts", "num_experts", "num_local_experts") if k in text), 0
    )
    if (experts or 0) > 1:
        found.append("moe")
    if config.get("vision_config") or config.get("audio_config"):
        found.append("multimodal")
    return found


@pytest.mark.parametrize("path", FAMILY_CONFIGS, ids=lambda p: p.stem)
def test_deploy_plan_mode_by_repo_id(hub: Hub, path: Path) -> None:
    """deploy_model.yml -e llm_model_repo=... in plan mode: the model is read on the controller at one commit,
    its derived values follow its config, and the deploy's plan is plan.yml's plan of the same repository.
    One config per family (the values derived from every config: tests/unit/test_model_entry.py; the hub
    read of every config: test_plan_by_repo_id_is_the_plan_of_its_config above)."""
    repo = "deploy-" + path.stem.replace("__", "/", 1)
    config = json.loads(path.read_text())
    sha, total = publish(hub, repo, path.read_bytes(), shard_bytes=(3_000_000,))
    common = (
        "-e",
        f"llm_model_repo={repo}",
        "-e",
        f"llm_hf_endpoint={hub.endpoint}",
        "-e",
        "llm_hardware_name=h200_x8",
    )
    out = _deploy_plan(*common, "-e", "llm_vllm_version=0.32.0")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert json.loads(out.stdout)["stats"]["localhost"]["changed"] == 0
    model = _facts(out.stdout)
    assert (model["hf_repo"], model["hf_revision"], model["checkpoint_bytes"]) == (repo, sha, total)
    assert model["hf_config"] == config
    assert model["families"] == _families(config)
    assert model["supports_dcp"] == ("mla" in model["families"] and "sparse_mla" not in model["families"])
    text = config.get("text_config", config)
    family = config.get("model_type") or text.get("model_type")
    if family in ("qwen3", "qwen3_moe") and "Coder" not in repo:
        assert (model["tool_call_parser"], model["reasoning_parser"]) == ("hermes", "qwen3")
    elif family == "llama":
        assert (model["tool_call_parser"], model["reasoning_parser"]) == ("llama3_json", None)
    elif family == "gpt_oss":
        assert (model["tool_call_parser"], model["reasoning_parser"]) == ("openai", "openai_gptoss")
    if model["tool_call_parser"] is None:
        assert model["parsers_note"].startswith("none:")
    plan = _facts(out.stdout, "llm_plan_result")
    assert plan["engine_version"] == "0.32.0" and plan["hf_repo"] == repo
    by_plan = _playbook(*common, "-e", "llm_plan_vllm_version=0.32.0")
    _assert_plan_playbook_model(by_plan, repo, sha, total)
    assert _facts(by_plan.stdout)["hf_config"] == config
    same = _facts(by_plan.stdout, "llm_plan_result")
    for key in (
        "tensor_parallel_size",
        "kv_cache_dtype",
        "max_model_len",
        "engine_args",
        "engine_env",
        "plan",
    ):
        assert plan[key] == same[key], key


def test_a_catalog_model_by_repo_id_is_its_catalog_plan(hub: Hub, tmp_path: Path) -> None:
    """tiny_test published on the mirror at its catalog size: by repository id the catalog entry is found by
    its hf_repo and laid over what the hub says, and the plan is the catalog entry's plan."""
    entry = yaml.safe_load((ROOT / "catalog" / "models" / "tiny_test.yml").read_text())["llm_model"]
    sha, total = publish(
        hub,
        entry["hf_repo"],
        json.dumps(entry["hf_config"]).encode(),
        shard_bytes=(entry["checkpoint_bytes"],),
    )
    by_name = _playbook("-e", "llm_model_name=tiny_test", "-e", "llm_hardware_name=h200_x1")
    by_repo = _playbook(
        "-e",
        f"llm_model_repo={entry['hf_repo']}",
        "-e",
        f"llm_hf_endpoint={hub.endpoint}",
        "-e",
        "llm_hardware_name=h200_x1",
    )
    assert by_name.returncode == 0 and by_repo.returncode == 0, by_repo.stdout[-3000:]
    a, b = _facts(by_name.stdout, "llm_plan_result"), _facts(by_repo.stdout, "llm_plan_result")
    model = _facts(by_repo.stdout)
    assert model["hf_revision"] == sha and model["checkpoint_bytes"] == total == entry["checkpoint_bytes"]
    # The catalog's own values win: parsers, probes, quality threshold, engine options.
    for key in (
        "tool_call_parser",
        "reasoning_parser",
        "quality_probes",
        "quality_min_pass_ratio",
        "engine_args",
        "id",
    ):
        assert model[key] == entry[key], key
    # Everything but the revision: the catalog names a branch, the hub read resolved it to its commit.
    assert b["hf_revision"] == sha and a["hf_revision"] == "main"
    assert {k: v for k, v in a.items() if k != "hf_revision"} == {
        k: v for k, v in b.items() if k != "hf_revision"
    }


@pytest.mark.parametrize(
    ("name", "version"),
    [
        ("kimi_k2_5_nvfp4", "0.17.1"),  # old enough for the checkpoint patches and BF16-only KV
        ("kimi_k2_5_nvfp4", "0.33.0"),
        ("glm5_nvfp4", "0.33.0"),
        ("glm5_ud_q4_k_xl_gguf", "0.33.0"),
    ],
)
def test_big_catalog_models_by_repo_id_keep_their_settings(hub: Hub, name: str, version: str) -> None:
    """The frontier entries published with their recorded configs (and small weight files): by repository id
    the same rules fire, the same patches apply and the same parsers are used as from the catalog alone."""
    entry = yaml.safe_load((ROOT / "catalog" / "models" / f"{name}.yml").read_text())["llm_model"]
    # The weight files the entry downloads: its GGUF variant's parts, else safetensors.
    weight = entry["gguf"]["first_part"] if entry.get("gguf") else "model-00001-of-00001.safetensors"
    files: dict[str, bytes | Path] = {
        "config.json": json.dumps(entry["hf_config"]).encode(),
        "tokenizer_config.json": b'{"chat_template": "{{ x }}"}',
        weight: b"\x01" * 2_000_000,
    }
    if entry.get("hf_quant_config"):
        files["hf_quant_config.json"] = json.dumps(entry["hf_quant_config"]).encode()
    repo = entry["hf_repo"]
    hub.make_repo(repo, files)
    common = ("-e", "llm_hardware_name=rtx_pro_6000_x8", "-e", f"llm_plan_vllm_version={version}")
    by_name = _playbook("-e", f"llm_model_name={name}", *common)
    by_repo = _playbook("-e", f"llm_model_repo={repo}", "-e", f"llm_hf_endpoint={hub.endpoint}", *common)
    assert by_name.returncode == 0 and by_repo.returncode == 0, by_repo.stdout[-3000:]
    a, b = _facts(by_name.stdout, "llm_plan_result"), _facts(by_repo.stdout, "llm_plan_result")
    for key in (
        "engine_args",
        "engine_env",
        "patches",
        "kv_cache_dtypes_unavailable",
        "families",
        "refusals",
    ):
        assert a[key] == b[key], key
    assert [n["id"] for n in a["settings_notes"]] == [n["id"] for n in b["settings_notes"]]
    model = _facts(by_repo.stdout)
    assert (model["tool_call_parser"], model["reasoning_parser"]) == (
        entry["tool_call_parser"],
        entry["reasoning_parser"],
    )


def test_a_gated_repo_needs_the_token_and_the_token_stays_secret(hub: Hub, tmp_path: Path) -> None:
    token = "hf_gatedSECRET123456789"
    repo = "gated/Qwen3-1.7B"
    publish(hub, repo, (ROOT / "tests/data/model_configs/Qwen__Qwen3-1.7B.json").read_bytes())
    with gated_hub(hub.endpoint, {repo}, token) as gate:
        env = {"PATH": "/usr/bin:/bin", "HF_TOKEN_PATH": "/nonexistent"}
        bare = llm_plan("--model", repo, "--hf-endpoint", gate.endpoint, *PLAN_ARGS, env=env)
        assert bare.returncode == 2
        assert f"{repo} is a gated repository and no token was given (HTTP 401)" in bare.stderr, bare.stderr
        assert "HF_TOKEN" in bare.stderr
        wrong = llm_plan(
            "--model", repo, "--hf-endpoint", gate.endpoint, *PLAN_ARGS, env={**env, "HF_TOKEN": "hf_nope"}
        )
        assert wrong.returncode == 2 and "the token given has no access to it (HTTP 403)" in wrong.stderr
        ok = llm_plan(
            "--model", repo, "--hf-endpoint", gate.endpoint, *PLAN_ARGS, env={**env, "HF_TOKEN": token}
        )
        assert ok.returncode == 0, ok.stderr
        assert token not in ok.stdout + ok.stderr

        refused = _playbook("-e", f"llm_model_repo={repo}", "-e", f"llm_hf_endpoint={gate.endpoint}")
        assert refused.returncode != 0
        assert (
            "no token was given" in refused.stdout
            and "hf_token (an ansible-vault variable)" in refused.stdout
        )
        secrets = tmp_path / "vault.yml"
        secrets.write_text(f"hf_token: {token}\n")
        planned = _playbook(
            "-e", f"llm_model_repo={repo}", "-e", f"llm_hf_endpoint={gate.endpoint}", "-e", f"@{secrets}"
        )
        assert planned.returncode == 0, planned.stdout[-3000:]
        assert _facts(planned.stdout)["hf_repo"] == repo
        assert token not in planned.stdout + planned.stderr
        # The token travelled as the bearer header only.
        assert set(gate.seen_auth) <= {f"Bearer {token}", "Bearer hf_nope"}


def test_a_catalog_entry_of_another_repository_is_refused(hub: Hub) -> None:
    publish(hub, "acme/other-model", (ROOT / "tests/data/model_configs/Qwen__Qwen3-1.7B.json").read_bytes())
    out = _deploy_plan(
        "-e",
        "llm_model_repo=acme/other-model",
        "-e",
        f"llm_hf_endpoint={hub.endpoint}",
        "-e",
        "llm_model_name=tiny_test",
    )
    assert out.returncode != 0
    assert "llm_model_repo=acme/other-model and llm_model_name=tiny_test" in out.stdout
    assert "unset llm_model_name" in out.stdout


def test_the_deploy_refuses_a_revision_that_does_not_exist_listing_what_does(hub: Hub) -> None:
    publish(
        hub, "acme/revisions-deploy", (ROOT / "tests/data/model_configs/Qwen__Qwen3-1.7B.json").read_bytes()
    )
    out = _deploy_plan(
        "-e",
        "llm_model_repo=acme/revisions-deploy",
        "-e",
        "llm_model_revision=v9",
        "-e",
        f"llm_hf_endpoint={hub.endpoint}",
    )
    assert out.returncode != 0
    assert "llm_model_repo=acme/revisions-deploy@v9: acme/revisions-deploy has no revision 'v9'" in out.stdout
    assert "its branches and tags: main" in out.stdout
    assert json.loads(out.stdout)["stats"]["localhost"]["changed"] == 0


def test_a_gguf_repository_of_several_variants_is_narrowed_by_allow_patterns(hub: Hub) -> None:
    repo = "plan-by-repo/variants-GGUF"
    config = (ROOT / "tests/data/model_configs/Qwen__Qwen3-1.7B.json").read_bytes()
    files: dict[str, bytes | Path] = {
        "config.json": config,
        "Q4_K_M/tiny-Q4_K_M-00001-of-00002.gguf": b"GGUF" + b"\0" * 300_000,
        "Q4_K_M/tiny-Q4_K_M-00002-of-00002.gguf": b"GGUF" + b"\0" * 200_000,
        "Q8_0/tiny-Q8_0.gguf": b"GGUF" + b"\0" * 900_000,
        "mmproj-F16.gguf": b"GGUF" + b"\0" * 50_000,
    }
    hub.make_repo(repo, files)
    both = llm_plan("--model", repo, "--hf-endpoint", hub.endpoint, *PLAN_ARGS)
    assert both.returncode == 2
    assert "holds 2 GGUF models (Q4_K_M/tiny-Q4_K_M.gguf, Q8_0/tiny-Q8_0.gguf)" in both.stderr, both.stderr
    one = llm_plan("--model", repo, "--hf-endpoint", hub.endpoint, "--allow-pattern", "Q4_K_M/*", *PLAN_ARGS)
    assert one.returncode in (0, 1), one.stderr
    model = json.loads(one.stdout)["model"]
    assert sorted(model["weight_files"]) == [
        "Q4_K_M/tiny-Q4_K_M-00001-of-00002.gguf",
        "Q4_K_M/tiny-Q4_K_M-00002-of-00002.gguf",
    ]
    assert model["checkpoint_bytes"] == 500_008
    refused = _playbook("-e", f"llm_model_repo={repo}", "-e", f"llm_hf_endpoint={hub.endpoint}")
    assert refused.returncode != 0 and "hf_allow_patterns" in refused.stdout


def test_a_gguf_repository_without_config_names_the_catalog_route(hub: Hub) -> None:
    hub.make_repo("plan-by-repo/bare-GGUF", {"tiny-Q8_0.gguf": b"GGUF" + b"\0" * 1000})
    out = llm_plan("--model", "plan-by-repo/bare-GGUF", "--hf-endpoint", hub.endpoint, *PLAN_ARGS)
    assert out.returncode == 2
    assert "has no config.json" in out.stderr and "--hf-config-path" in out.stderr
    assert "catalog/models/glm5_ud_q4_k_xl_gguf.yml" in out.stderr


def test_allow_patterns_that_match_nothing_are_refused_listing_the_files(hub: Hub) -> None:
    publish(hub, "acme/no-match", (ROOT / "tests/data/model_configs/Qwen__Qwen3-1.7B.json").read_bytes())
    out = llm_plan(
        "--model", "acme/no-match", "--hf-endpoint", hub.endpoint, "--allow-pattern", "Q4/*", *PLAN_ARGS
    )
    assert out.returncode == 2
    assert "no weight file matches the allow patterns ['Q4/*']" in out.stderr
    assert "model-00001-of-00002.safetensors" in out.stderr
