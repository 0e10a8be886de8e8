"""vllm_service's launcher for hosts without systemd (roles/vllm_service/files/vllm_launch.py) and the wait
module's reading of supervisord's status lines."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = ROOT / "roles" / "vllm_service" / "files" / "vllm_launch.py"
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

from vllm_args import systemd_env_value  # noqa: E402 - module_utils is put on sys.path above


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


launch = _load(LAUNCHER, "vllm_launch")
wait = _load(ROOT / "plugins" / "modules" / "vllm_service_wait.py", "vllm_service_wait")

HOSTILE = [
    "plain",
    "a \"b\" 'c' $HOME ${USER} %h %% \\n; x=1 # not a comment",
    "back\\\\slash`tick`",
    "=leading equals",
    "",
    "0|1",
]


@pytest.mark.parametrize("value", HOSTILE)
def test_env_values_round_trip_through_the_role_s_quoting(value):
    text = f"# comment\n\nNAME_1={systemd_env_value(value)}\n"
    assert launch.parse_env_file(text) == {"NAME_1": value}


def test_bad_env_lines_are_refused():
    with pytest.raises(ValueError, match="line 2"):
        launch.parse_env_file("A=1\nnot a line\n")


def test_stale_shm_files_of_the_user_are_removed(tmp_path):
    (tmp_path / "vllm_dist_abc").write_text("x")
    (tmp_path / "other").write_text("x")
    assert launch.clean_shm(tmp_path) == ["vllm_dist_abc"]
    assert [p.name for p in tmp_path.iterdir()] == ["other"]


def test_the_launcher_execs_with_a_clean_environment_from_the_file(tmp_path):
    env_file = tmp_path / "vllm.env"
    env_file.write_text(f"VLLM_X={systemd_env_value(HOSTILE[1])}\nVLLM_API_KEY={systemd_env_value('sk-1')}\n")
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "env_file": str(env_file),
                "argv": ["/usr/bin/env"],
                "home": "/var/lib/vllm",
                "user": "vllm",
                "nofile": 1024,
            }
        )
    )
    out = subprocess.run(
        [sys.executable, str(LAUNCHER), str(spec)],
        env={**os.environ, "SUPERVISOR_ENABLED": "1", "SECRET_OF_THE_SUPERVISOR": "x"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert out[0].startswith("vllm_launch: ")
    env = dict(line.split("=", 1) for line in out[1:])
    assert env["VLLM_X"] == HOSTILE[1] and env["VLLM_API_KEY"] == "sk-1"
    assert env["HOME"] == "/var/lib/vllm" and env["USER"] == "vllm"
    assert "SUPERVISOR_ENABLED" not in env and "SECRET_OF_THE_SUPERVISOR" not in env


@pytest.mark.parametrize(
    ("line", "active", "sub", "pid"),
    [
        ("vllm                             RUNNING   pid 4242, uptime 0:01:02", "active", "running", "4242"),
        ("vllm                             STARTING", "active", "starting", "0"),
        (
            "vllm                             BACKOFF   Exited too quickly (process log may have details)",
            "active",
            "auto-restart",
            "0",
        ),
        ("vllm                             EXITED    Dec 01 12:00 PM", "failed", "exited", "0"),
        ("vllm                             FATAL     Exited too quickly", "failed", "fatal", "0"),
        ("vllm                             STOPPED   Not started", "inactive", "stopped", "0"),
    ],
)
def test_supervisor_status_lines_map_onto_unit_states(line, active, sub, pid):
    state = wait.supervisor_state(line)
    assert (state["ActiveState"], state["SubState"], state["MainPID"]) == (active, sub, pid)
