"""The per-model deploy playbooks, run for real against localhost up to the point a GPU host is needed.

- plan mode prints the plan and contacts no host;
- on a host without the NVIDIA driver (real recording) the preflight refuses before any change;
- on the real 2x H200 recording, a Kimi deployment planned for 8x RTX PRO 6000 is re-planned for the GPUs
  the host really has and refused because it does not fit, again with nothing changed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import recap

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
FIXTURES = ROOT / "tests" / "fixtures"

pytestmark = pytest.mark.slow


def _run(playbook: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    return subprocess.run(
        [str(ANSIBLE_PLAYBOOK), f"playbooks/{playbook}", *extra],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.parametrize("playbook", ["deploy_kimi.yml", "deploy_glm5_nvfp4.yml", "deploy_glm5_gguf.yml"])
def test_plan_mode_prints_the_plan_and_changes_nothing(playbook):
    proc = _run(playbook, "-e", "llm_deploy_plan_only=true")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "Weights per GPU" in out
    assert "Verdict:" in out
    counters = recap(proc.stdout)
    assert counters["changed"] == 0
    # Plan mode ends before the preflight: no probe of the host ran.
    assert "gpu_preflight" not in out


def test_kimi_plan_mode_names_the_sm120_settings():
    proc = _run("deploy_kimi.yml", "-e", "llm_deploy_plan_only=true")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "TRITON_MLA" in out
    assert "NCCL_P2P_LEVEL=SYS" in out


def test_host_without_driver_is_refused_before_any_change():
    proc = _run("deploy_kimi.yml", "-e", f"gpu_preflight_fixture_dir={FIXTURES / 'no_driver'}")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "refused localhost before any change" in out
    assert "[no_driver]" in out
    assert recap(proc.stdout)["changed"] == 0
    # The first host-changing role never started.
    assert "TASK [ml_env" not in out


def test_real_h200_host_is_replanned_and_refused_when_kimi_does_not_fit():
    proc = _run("deploy_kimi.yml", "-e", f"gpu_preflight_fixture_dir={FIXTURES / 'h200x2_run'}")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    # Re-planned for the recorded host: 2 x NVIDIA H200.
    assert "Re-plan for the GPUs this host really has" in out
    assert re.search(r"Hardware: 2 x NVIDIA H200", out), out[-4000:]
    assert "refused localhost before any change" in out
    assert "[plan_does_not_fit]" in out
    assert recap(proc.stdout)["changed"] == 0
    assert "TASK [ml_env" not in out
