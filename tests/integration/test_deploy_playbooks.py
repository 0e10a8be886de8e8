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
    assert "TASK [llmdeploy.llm.ml_env : " not in out


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
    assert "TASK [llmdeploy.llm.ml_env : " not in out


def test_glm5_nvfp4_on_sglang_plans_with_sglangs_accounting_and_renders_its_command_line():
    proc = _run("deploy_glm5_nvfp4.yml", "-e", "llm_engine=sglang", "-e", "llm_deploy_plan_only=true")
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 0, out[-3000:]
    # SGLang's own figure, stated as such: mem_fraction_static over weights + KV (its default rule on 96 GB).
    assert "SGLang 0.5.17 accounting" in out and "mem_fraction_static 0.833 (SGLang default rule)" in out
    assert re.search(
        r"KV pool [0-9.]+ GiB per GPU, [0-9]+ tokens \(bfloat16, attention backend dsa\)", out
    ), out
    # The command line the service would run: the plan's TP and KV dtype, the fraction, the parsers; no key.
    command = re.search(r"msg: (/opt/ml-env-sglang/bin/python \S+/sglang_serve.py .*?--enable-metrics)", out)
    assert command, out[-4000:]
    argv = command.group(1).split()
    expected = {
        "--tp-size": "8",
        "--kv-cache-dtype": "bfloat16",
        "--mem-fraction-static": "0.833",
        "--tool-call-parser": "glm47",
        "--reasoning-parser": "glm45",
    }
    assert {flag: argv[argv.index(flag) + 1] for flag in expected} == expected, argv
    assert "--api-key" not in argv
    assert recap(proc.stdout)["changed"] == 0


@pytest.mark.parametrize(
    ("playbook", "extra", "reason"),
    [
        ("deploy_kimi.yml", [], "the catalog entry lists engines vllm"),
        ("deploy_glm5_gguf.yml", [], "a GGUF checkpoint is served by vLLM here"),
    ],
)
def test_sglang_is_refused_where_it_was_not_checked(playbook, extra, reason):
    proc = _run(playbook, "-e", "llm_engine=sglang", "-e", "llm_deploy_plan_only=true", *extra)
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0
    assert "llm_engine=sglang is refused for" in out and reason in out, out[-3000:]
    assert "Fix: deploy it with llm_engine=vllm" in out


def test_users_tp_beside_the_recommended_replicas_plans_instead_of_failing():
    # The recommendation for the tiny model on 2 GPUs is TP 1 x DP 2; TP 2 from the user takes both GPUs.
    proc = _run(
        "deploy_tiny.yml",
        *("-e", "llm_hardware_name=h200_x2", "-e", "llm_tensor_parallel_size=2"),
        *("-e", "llm_deploy_plan_only=true"),
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "layout TP 2 x PP 1 x DP 1" in out, out[-3000:]
    assert "llm_plan_tensor_parallel_size" not in out


def test_replan_on_the_real_host_keeps_the_engine_and_the_users_tp():
    # Planned for 8x RTX PRO 6000, run on the recorded 2x H200 host (check mode: nothing changes): the
    # re-plan must use the same inputs as the first plan, SGLang's figures and TP 2 included.
    proc = _run(
        "deploy_tiny.yml",
        "--check",
        *("-e", "llm_engine=sglang", "-e", "llm_tensor_parallel_size=2"),
        "-e",
        f"gpu_preflight_fixture_dir={FIXTURES / 'h200x2_run'}",
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    replan = out.split("Re-plan for the GPUs this host really has]", 1)[1]
    replan = replan.split(" : Refuse an unfit host", 1)[0]
    assert re.search(r"Hardware: 2 x NVIDIA H200", replan), replan[-3000:]
    assert "layout TP 2 x PP 1 x DP 1" in replan, replan[-3000:]
    assert "SGLang 0.5.17 accounting" in replan, replan[-3000:]
