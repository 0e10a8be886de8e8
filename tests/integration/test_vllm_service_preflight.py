"""vllm_service: bad input fails in preflight, naming the variable and the fix, before any host change.

Runs the real role with ansible-playbook against localhost; every case stops in tasks/preflight.yml (or the
argument_specs validation), which only asserts, so the host is not touched.
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
  hosts: localhost
  connection: local
  gather_facts: false
  roles:
    - role: vllm_service
"""
GOOD = {
    "vllm_service_model_path": "/srv/models/m",
    "ansible_python_interpreter": sys.executable,
}


def _run(tmp_path: Path, extra: dict[str, object]) -> subprocess.CompletedProcess[str]:
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    vars_file = tmp_path / "vars.json"
    vars_file.write_text(json.dumps({**GOOD, **extra}))
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
    }
    return subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            "localhost,",
            "--tags",
            "vllm_service_preflight",
            "-e",
            f"@{vars_file}",
            str(play),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
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
    ],
)
def test_bad_input_is_refused_with_the_variable_named(
    tmp_path: Path, extra: dict[str, object], expected: str
) -> None:
    result = _run(tmp_path, extra)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert expected in " ".join(output.split()), output


@pytest.mark.parametrize(
    "extra",
    [
        {"vllm_service_host": "0.0.0.0", "vllm_service_api_key": "sk-role-key-4d2a"},
        {"vllm_service_host": "0.0.0.0", "vllm_service_allow_unauthenticated": True},
        {"vllm_service_host": "::1"},
    ],
)
def test_network_bind_with_a_key_or_the_opt_in_passes(tmp_path: Path, extra: dict[str, object]) -> None:
    result = _run(tmp_path, extra)
    assert result.returncode == 0, result.stdout + result.stderr


def test_good_input_passes_preflight(tmp_path: Path) -> None:
    result = _run(tmp_path, {"vllm_service_tensor_parallel_size": 2, "vllm_service_max_model_len": 256})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "failed=0" in result.stdout


def test_a_refused_secret_is_not_echoed(tmp_path: Path) -> None:
    result = _run(tmp_path, {"vllm_service_extra_args": ["--api-key=sk-planted-91c4"]})
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "would put a secret in argv" in " ".join(output.split())
    assert "sk-planted-91c4" not in output
