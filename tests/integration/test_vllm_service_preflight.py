"""vllm_service: bad input fails in preflight, naming the variable and the fix, before any host change.

Runs the real role with one ansible-playbook run, one local inventory host per case (the forks run them side
by side); every bad case stops in tasks/preflight.yml (or the argument_specs validation), which only asserts,
so the host is not touched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLAY = """
- name: vllm_service preflight only
  hosts: all
  connection: local
  gather_facts: false
  roles:
    - role: vllm_service
"""
GOOD = {
    "vllm_service_model_path": "/srv/models/m",
    "ansible_python_interpreter": sys.executable,
}


def _messages(result: object) -> list[str]:
    """Every msg in a task result, loop items included."""
    if isinstance(result, list):
        return [m for r in result for m in _messages(r)]
    if not isinstance(result, dict):
        return []
    own = [str(result["msg"])] if "msg" in result else []
    return own + _messages(result.get("results", []))


def _run_cases(tmp_path: Path, cases: list[dict[str, object]]) -> tuple[dict[str, dict], str]:
    """One ansible-playbook run, one inventory host per case (host vars: the case over GOOD), in parallel
    through the forks. Returns each host's stats and failure message, and the whole output."""
    hosts = {f"case-{i}": {**GOOD, **extra} for i, extra in enumerate(cases)}
    inventory = tmp_path / "hosts.json"
    inventory.write_text(json.dumps({"all": {"hosts": hosts}}))
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
    }
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            str(inventory),
            "--tags",
            "vllm_service_preflight",
            str(play),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    report = json.loads(proc.stdout)
    results = {}
    for host in hosts:
        failed = [
            task["hosts"][host]
            for play_ in report["plays"]
            for task in play_["tasks"]
            if task["hosts"].get(host, {}).get("failed")
        ]
        results[host] = {"stats": report["stats"][host], "msg": " ".join(_messages(failed))}
    return results, proc.stdout + proc.stderr


BAD = [
    ({"vllm_service_model_path": ""}, "vllm_service_model_path must be the absolute path"),
    ({"vllm_service_model_path": "models/m"}, "vllm_service_model_path must be the absolute path"),
    ({"vllm_service_user": "root"}, "vllm_service_user must name a dedicated unprivileged user"),
    ({"vllm_service_enable_auto_tool_choice": True}, "needs vllm_service_tool_call_parser"),
    ({"vllm_service_gpu_memory_utilization": 1.5}, "vllm_service_gpu_memory_utilization is a fraction"),
    ({"vllm_service_tensor_parallel_size": 0}, "vllm_service_tensor_parallel_size must be a positive"),
    ({"vllm_service_engine_args": {"tensor_parallel_size": 4}}, "which the role builds from its own"),
    ({"vllm_service_env": [{"name": "VLLM_API_KEY", "value": "x"}]}, "secrets go in vllm_service_hf"),
    ({"vllm_service_extra_args": ["--api-key", "x"]}, "would put a secret in argv"),
    ({"vllm_service_port": "http"}, "vllm_service_port"),
    # Hostile values aimed at the root-owned unit file.
    (
        {"vllm_service_served_model_name": "m\n[Service]\nExecStartPre=/bin/touch /tmp/pwned"},
        "vllm_service_served_model_name=",
    ),
    ({"vllm_service_model_path": "/srv/m\nExecStartPre=/bin/sh"}, "vllm_service_model_path="),
    ({"vllm_service_name": "../../etc/cron.d/x"}, "vllm_service_name="),
    ({"vllm_service_user": "vllm\nUser=root"}, "vllm_service_user="),
    ({"vllm_service_config_dir": "/etc/vllm dir"}, "vllm_service_config_dir="),
    # Directories the role would create, chown to the service user and leave writable in the sandbox.
    ({"vllm_service_home": "/"}, "vllm_service_home="),
    ({"vllm_service_cache_dir": "/var/lib"}, "vllm_service_cache_dir="),
    ({"vllm_service_config_dir": "/etc"}, "vllm_service_config_dir="),
    ({"vllm_service_read_write_paths": ["/srv/a b"]}, "vllm_service_read_write_paths="),
    # A network bind without an API key needs its own opt-in.
    ({"vllm_service_host": "0.0.0.0"}, "vllm_service_host="),
    ({"vllm_service_host": "10.1.2.3", "vllm_service_api_key": ""}, "vllm_service_allow_unauthenticated"),
    # A refused secret is not echoed.
    ({"vllm_service_extra_args": ["--api-key=sk-planted-91c4"]}, "would put a secret in argv"),
]
GOOD_CASES: list[dict[str, object]] = [
    {"vllm_service_host": "0.0.0.0", "vllm_service_api_key": "sk-role-key-4d2a"},
    {"vllm_service_host": "0.0.0.0", "vllm_service_allow_unauthenticated": True},
    {"vllm_service_host": "::1"},
    {"vllm_service_tensor_parallel_size": 2, "vllm_service_max_model_len": 256},
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, dict], str]:
    return _run_cases(tmp_path_factory.mktemp("vllm_service_preflight"), [e for e, _ in BAD] + GOOD_CASES)


@pytest.mark.parametrize(("index", "expected"), [(i, m) for i, (_, m) in enumerate(BAD)])
def test_bad_input_is_refused_with_the_variable_named(runs, index: int, expected: str) -> None:
    results, _ = runs
    result = results[f"case-{index}"]
    assert result["stats"]["failures"] == 1 and result["stats"]["changed"] == 0, result
    assert expected in " ".join(result["msg"].split()), result["msg"]


@pytest.mark.parametrize("index", range(len(GOOD_CASES)))
def test_good_input_and_network_bind_with_a_key_or_the_opt_in_pass(runs, index: int) -> None:
    results, _ = runs
    result = results[f"case-{len(BAD) + index}"]
    assert result["stats"]["failures"] == 0 and result["stats"]["changed"] == 0, result


def test_a_refused_secret_is_not_echoed(runs) -> None:
    _, output = runs
    assert "sk-planted-91c4" not in output
