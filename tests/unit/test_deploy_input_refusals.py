"""Every bad deploy input of the refusal table, against the contract's code (module_utils/deploy_inputs.py).

The values are what a user gives in an extra-vars file or the inventory (JSON types). Each must be refused
naming the variable, with no secret in any message. tests/integration/test_deploy_inputs.py runs the deploy
playbook once per kind of refusal to prove the wiring (controller only, changed=0, no host contact).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

import deploy_inputs as di  # noqa: E402 - module_utils is put on sys.path above

SECRET = "sk-planted-input-3f9a"
HF_SECRET = "hf_planted_token_9c21"
TINY = yaml.safe_load((ROOT / "catalog" / "models" / "tiny_test.yml").read_text())["llm_model"]

# (extra vars, the variable the refusal must name)
REFUSED: list[tuple[dict[str, Any], str]] = [
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
    # Refused once the catalog entry is known (engine_problems, still on the controller).
    ({"llm_vllm_version": "0.18.0"}, "llm_vllm_version"),
    ({"llm_vllm_version": "0.40.0"}, "llm_vllm_version"),
    ({"llm_vllm_version": "latest"}, "llm_vllm_version"),
    ({"llm_max_model_len": 300}, "llm_max_model_len"),
]


def _refusals(extra: dict[str, Any]) -> list[str]:
    """What roles/deploy/tasks/inputs.yml and then load_catalog.yml refuse for these extra vars, in that order
    (the second only runs when the first passed), for the default inventory (a GPU host)."""
    given = {"llm_api_key": SECRET, "hf_token": HF_SECRET, **extra}
    problems = di.input_problems(given)
    if problems:
        return problems
    return di.engine_problems(
        TINY,
        given.get("llm_device", "gpu"),
        given.get("llm_vllm_version", "0.33.0"),
        given.get("llm_max_model_len"),
        given.get("llm_engine_env"),
    )


@pytest.mark.parametrize(("extra", "variable"), REFUSED, ids=[f"{v}-{i}" for i, (_, v) in enumerate(REFUSED)])
def test_bad_input_is_refused_by_name_without_secrets(extra: dict[str, Any], variable: str) -> None:
    problems = _refusals(extra)
    assert any(p.startswith(f"{variable}=") for p in problems), problems
    assert all(re.match(r"^[a-z_.]+=.* is refused( \(entries [^)]+\))?: \S", p) for p in problems), problems
    assert not any(SECRET in p or HF_SECRET in p for p in problems), problems


def test_the_table_passes_without_its_bad_value() -> None:
    """The base every case adds to is accepted: each refusal comes from the case's own value."""
    assert _refusals({}) == []


def test_several_bad_inputs_are_reported_together() -> None:
    problems = _refusals({"llm_device": "tpu", "llm_api_port": 0, "llm_model_dir": "/"})
    assert sorted(p.split("=", 1)[0] for p in problems) == ["llm_api_port", "llm_device", "llm_model_dir"]
