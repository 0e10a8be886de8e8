"""Deploy inputs are refused on the controller, before any host is contacted, naming the variable and the fix.

Each case runs playbooks/deploy_tiny.yml against the default inventory (localhost): a refusal must come from
playbooks/tasks/inputs.yml, so no probe ran and nothing changed, and the run must not end in a traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = ROOT / "playbooks" / "deploy_tiny.yml"
SECRET = "sk-planted-input-3f9a"


def _run(tmp_path: Path, extra: dict[str, object]) -> subprocess.CompletedProcess[str]:
    vars_file = tmp_path / "vars.json"
    vars_file.write_text(json.dumps(extra))
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), str(PLAYBOOK), "-e", f"@{vars_file}"],
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
]


@pytest.mark.parametrize(("extra", "variable"), BAD, ids=[f"{v}-{i}" for i, (_, v) in enumerate(BAD)])
def test_bad_input_is_refused_before_any_host_is_contacted(
    tmp_path: Path, extra: dict[str, object], variable: str
) -> None:
    result = _run(tmp_path, {"llm_api_key": SECRET, **extra})
    out = result.stdout + result.stderr
    assert result.returncode != 0, out[-3000:]
    assert "Traceback" not in out
    assert f"{variable}=" in out and "is refused" in out, out[-3000:]
    # Nothing ran on a host: the first host task is the preflight's probe.
    assert "Read the host facts" not in out and "changed=0" in out
    assert SECRET not in out


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
