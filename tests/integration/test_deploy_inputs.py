"""Deploy inputs are refused on the controller, before any host is contacted, naming the variable and the fix.

Each case runs playbooks/deploy_tiny.yml against the default inventory (localhost): a refusal must come from
playbooks/tasks/inputs.yml, so no probe ran and nothing changed, and the run must not end in a traceback.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = ROOT / "playbooks" / "deploy_tiny.yml"
SECRET = "sk-planted-input-3f9a"
HF_SECRET = "hf_planted_token_9c21"
# What a deploy would create on the target (localhost here): none of it may appear or change on a refusal.
HOST_PATHS = [
    Path("/var/lib/llm"),
    Path("/opt/ml-env"),
    Path("/etc/vllm"),
    Path("/etc/systemd/system/vllm.service"),
]


def _host_state() -> list[tuple[str, float | None]]:
    return [(str(p), p.stat().st_mtime if p.exists() else None) for p in HOST_PATHS]


def _run(
    tmp_path: Path, extra: dict[str, object], playbook: Path = PLAYBOOK
) -> subprocess.CompletedProcess[str]:
    vars_file = tmp_path / "vars.json"
    vars_file.write_text(json.dumps(extra))
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), str(playbook), "-e", f"@{vars_file}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


BAD = [
    ({"llm_device": "tpu"}, "llm_device"),
    ({"llm_deploy_plan_only": "ture"}, "llm_deploy_plan_only"),
    ({"llm_prune_old_models": "ture"}, "llm_prune_old_models"),
    ({"llm_api_public": "maybe"}, "llm_api_public"),
    ({"llm_tensor_parallel_size": 0}, "llm_tensor_parallel_size"),
    ({"llm_tensor_parallel_size": "two"}, "llm_tensor_parallel_size"),
    ({"llm_cpu_kv_cache_gib": "lots"}, "llm_cpu_kv_cache_gib"),
    ({"llm_cpu_kv_cache_gib": -1}, "llm_cpu_kv_cache_gib"),
    ({"llm_max_model_len": [65536]}, "llm_max_model_len"),
    ({"llm_max_model_len": "65536 tokens"}, "llm_max_model_len"),
    ({"llm_api_host": "0.0.0.0"}, "llm_api_host"),
    ({"llm_api_host": "0.0.0.0", "llm_api_public": True, "llm_api_key": ""}, "llm_api_host"),
    ({"llm_api_host": "0.0.0.0", "llm_api_public": "yes please"}, "llm_api_host"),
    ({"llm_api_port": 70000}, "llm_api_port"),
    ({"llm_api_port": "http"}, "llm_api_port"),
    ({"llm_api_port": 80}, "llm_api_port"),
    ({"llm_served_model_name": "m\n[Service]\nExecStartPre=/bin/sh -c id"}, "llm_served_model_name"),
    ({"llm_served_model_name": "a b"}, "llm_served_model_name"),
    ({"llm_service_user": "root"}, "llm_service_user"),
    ({"llm_service_user": "vllm\nUser=root"}, "llm_service_user"),
    ({"llm_model_dir": "/"}, "llm_model_dir"),
    ({"llm_model_dir": "/usr/"}, "llm_model_dir"),
    ({"llm_model_dir": "relative/models"}, "llm_model_dir"),
    ({"llm_env_path": "/etc"}, "llm_env_path"),
    ({"llm_engine_env": {"lower_case": "1"}}, "llm_engine_env"),
    ({"llm_engine_env": ["VLLM_X=1"]}, "llm_engine_env"),
    ({"llm_engine_args": {"tensor_parallel_size": 8}}, "llm_engine_args"),
    ({"llm_engine_args": {"api-key": SECRET}}, "llm_engine_args"),
    ({"llm_nccl_env": {"CUDA_VISIBLE_DEVICES": "0"}}, "llm_nccl_env"),
    ({"llm_model_revision": "main; rm -rf /"}, "llm_model_revision"),
    # Typos and names the deploy does not read.
    ({"llm_deploy_plan_onyl": True}, "llm_deploy_plan_onyl"),
    ({"llm_api_prot": 8080}, "llm_api_prot"),
    ({"llm_plan_max_model_len": 4096}, "llm_plan_max_model_len"),
    # Strings where numbers belong, numbers out of range.
    ({"llm_deploy_plan_only": 2}, "llm_deploy_plan_only"),
    ({"llm_max_model_len": 2**40}, "llm_max_model_len"),
    ({"llm_start_timeout_minutes": 0}, "llm_start_timeout_minutes"),
    ({"llm_cpu_kv_cache_gib": 1.5}, "llm_cpu_kv_cache_gib"),
    ({"llm_tensor_parallel_size": 100000}, "llm_tensor_parallel_size"),
    # Paths that escape or hit system directories.
    ({"llm_model_dir": "/srv/models/../../etc"}, "llm_model_dir"),
    ({"llm_model_dir": "/var/lib"}, "llm_model_dir"),
    ({"llm_env_path": "/opt/ml env"}, "llm_env_path"),
    # Values that would change the meaning of the environment file, the unit or argv.
    ({"llm_engine_env": {"VLLM_X": "1\nHF_TOKEN=stolen"}}, "llm_engine_env"),
    ({"llm_engine_env": {"VLLM_API_KEY": SECRET}}, "llm_engine_env"),
    ({"llm_nccl_env": {"NCCL_P2P_LEVEL": "SYS\n[Service]\nUser=root"}}, "llm_nccl_env"),
    ({"llm_engine_args": {"chat_template": "x\nExecStartPre=/bin/sh -c id"}}, "llm_engine_args"),
    ({"llm_engine_args": {"--max-num-seqs": 8}}, "llm_engine_args"),
    ({"llm_served_model_name": "tiny%n"}, "llm_served_model_name"),
    ({"llm_api_key": SECRET + "\nVLLM_X=1"}, "llm_api_key"),
    ({"hf_token": HF_SECRET + " two"}, "hf_token"),
    ({"llm_hf_endpoint": f"https://user:{HF_SECRET}@mirror.example"}, "llm_hf_endpoint"),
    ({"llm_api_host": ""}, "llm_api_host"),
    ({"llm_api_host": "0.0.0.0", "llm_api_public": True, "llm_api_key": "short"}, "llm_api_host"),
    # Refused once the catalog entry is known (still on the controller).
    ({"llm_vllm_version": "0.18.0"}, "llm_vllm_version"),
    ({"llm_vllm_version": "0.40.0"}, "llm_vllm_version"),
    ({"llm_vllm_version": "latest"}, "llm_vllm_version"),
    ({"llm_max_model_len": 300}, "llm_max_model_len"),
]


@pytest.mark.parametrize(("extra", "variable"), BAD, ids=[f"{v}-{i}" for i, (_, v) in enumerate(BAD)])
def test_bad_input_is_refused_before_any_host_is_contacted(
    tmp_path: Path, extra: dict[str, object], variable: str
) -> None:
    before = _host_state()
    result = _run(tmp_path, {"llm_api_key": SECRET, "hf_token": HF_SECRET, **extra})
    out = result.stdout + result.stderr
    assert result.returncode != 0, out[-3000:]
    assert "Traceback" not in out
    assert f"{variable}=" in out and re.search(r" is refused( \(entries [^)]+\))?: ", out), out[-3000:]
    # Nothing ran on a host: the first host task is the preflight's probe; nothing appeared or changed.
    assert "Read the host facts" not in out and "changed=0" in out
    assert _host_state() == before
    assert SECRET not in out and HF_SECRET not in out


@pytest.mark.parametrize("tp", [2, 3, 16])
def test_a_layout_that_cannot_serve_kimi_names_the_deploy_input(tmp_path: Path, tp: int) -> None:
    """Too few GPUs for the weights, TP not dividing the heads, more GPUs than the profile has: each is
    refused on the controller naming llm_tensor_parallel_size, not the planner role's variables."""
    before = _host_state()
    result = _run(tmp_path, {"llm_tensor_parallel_size": tp}, ROOT / "playbooks" / "deploy_kimi.yml")
    out = result.stdout + result.stderr
    assert result.returncode != 0 and "Traceback" not in out
    assert "llm_tensor_parallel_size" in out and "llm_plan_tensor_parallel_size" not in out, out[-3000:]
    assert "Read the host facts" not in out and _host_state() == before


def test_several_bad_inputs_are_reported_together(tmp_path: Path) -> None:
    out = "".join(_run(tmp_path, {"llm_device": "tpu", "llm_api_port": 0, "llm_model_dir": "/"}).stdout)
    for variable in ("llm_device", "llm_api_port", "llm_model_dir"):
        assert f"{variable}=" in out


def test_public_bind_with_opt_in_and_key_passes_the_inputs(tmp_path: Path) -> None:
    result = _run(
        tmp_path,
        {
            "llm_api_host": "0.0.0.0",
            "llm_api_public": True,
            "llm_api_key": SECRET,
            "llm_deploy_plan_only": True,
        },
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert "is refused" not in result.stdout
