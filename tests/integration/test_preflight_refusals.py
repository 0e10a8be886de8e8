"""The gpu_preflight role run by ansible-playbook against localhost, fed by fixture directories.

Each bad case must be refused with changed=0 and a message naming the fact, the requirement and the fix.
Facts come from real recordings (tests/fixtures/h200x2_run from the lent 2x H200 machine,
tests/fixtures/no_driver from a host without the driver). The disk and port cases run their probes live
(df on a real directory, a real listening socket on /proc/net/tcp). One run per kind of refusal proves the
role's wiring; each check's refusals on edited recordings: unit tests (tests/unit/test_gpu_facts_checks.py).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
PLAY = ROOT / "tests" / "integration" / "gpu_preflight_play.yml"
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
REFUSE_TASK = "Refuse the host (nothing has been changed)"

H200_OK = {
    "gpu_preflight_tensor_parallel_size": 2,
    "gpu_preflight_engine_cuda_version": "13.0",
    "gpu_preflight_attention_backend": "FLASH_ATTN_MLA",
    "gpu_preflight_plan": {"fits": True, "reasons": []},
    "gpu_preflight_required_disk_bytes": 20 * 2**30,
}


def _listener() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    return sock


def _cases(tmp: Path, port: int) -> dict[str, dict]:
    """name -> {vars, expect: check name or None for success, args}."""
    h200 = str(FIXTURES / "h200x2_run")
    live_port = {"gpu_preflight_fixture_live_probes": ["tcp", "service_user"], "gpu_preflight_port": port}
    return {
        "passes": {"vars": {**H200_OK, "gpu_preflight_fixture_dir": h200}, "expect": None},
        "check_mode": {
            "vars": {**H200_OK, "gpu_preflight_fixture_dir": h200},
            "expect": None,
            "args": ["--check"],
        },
        "no_driver": {"vars": {**H200_OK, "gpu_preflight_fixture_dir": str(FIXTURES / "no_driver")}},
        "disk_space": {
            "vars": {
                **H200_OK,
                "gpu_preflight_fixture_dir": h200,
                "gpu_preflight_fixture_live_probes": ["df"],
                "gpu_preflight_model_dir": str(tmp / "models" / "not-yet-there"),
                "gpu_preflight_required_disk_bytes": 2**53,
            }
        },
        "port_in_use": {
            "vars": {
                **H200_OK,
                "gpu_preflight_fixture_dir": h200,
                **live_port,
                "gpu_preflight_service_user": "nobody",
            }
        },
        "port_held_by_own_service": {
            "vars": {
                **H200_OK,
                "gpu_preflight_fixture_dir": h200,
                **live_port,
                "gpu_preflight_service_user": _current_user(),
            },
            "expect": None,
        },
        "ignored": {
            "vars": {
                **H200_OK,
                "gpu_preflight_fixture_dir": h200,
                "gpu_preflight_tensor_parallel_size": 4,
                "gpu_preflight_ignore_assert_errors": True,
            },
            "expect": None,
        },
        "bad_cuda_variable": {
            "vars": {**H200_OK, "gpu_preflight_fixture_dir": h200, "gpu_preflight_engine_cuda_version": "13"},
            "expect": "input",
        },
    }


def _current_user() -> str:
    import pwd  # noqa: PLC0415  (POSIX only, like the role)

    return pwd.getpwuid(os.getuid()).pw_name


def _run(tmp: Path, name: str, case: dict) -> dict:
    extra = tmp / f"{name}.json"
    extra.write_text(json.dumps(case["vars"]))
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
        "ANSIBLE_LOCAL_TEMP": str(tmp / "ansible-tmp"),
    }
    argv = [str(ANSIBLE_PLAYBOOK), str(PLAY), "-e", f"@{extra}", *case.get("args", [])]
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"{name}: ansible-playbook printed no JSON report\n{proc.stdout}\n{proc.stderr}")
    return {"rc": proc.returncode, "report": report, "stderr": proc.stderr}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict]]:
    tmp = tmp_path_factory.mktemp("gpu_preflight")
    sock = _listener()
    try:
        cases = _cases(tmp, sock.getsockname()[1])
        with ThreadPoolExecutor(max_workers=4) as pool:
            futures = {name: pool.submit(_run, tmp, name, case) for name, case in cases.items()}
            results = {name: future.result() for name, future in futures.items()}
        for name, case in cases.items():
            results[name]["expect"] = case.get("expect", name)
        yield results
    finally:
        sock.close()


def _name(task: dict) -> str:
    """Task name without the 'role : ' prefix the json callback adds."""
    return task["task"]["name"].split(" : ", 1)[-1]


def _task(report: dict, name: str) -> dict | None:
    for play in report["plays"]:
        for task in play["tasks"]:
            if _name(task) == name:
                return task["hosts"]["localhost"]
    return None


def _failed_task(report: dict) -> dict:
    for play in report["plays"]:
        for task in play["tasks"]:
            host = task["hosts"]["localhost"]
            if host.get("failed"):
                return {"name": _name(task), **host}
    raise AssertionError("no task failed")


# One run per kind of refusal: a recorded host without the driver, and the two checks whose probes run live
# (df, /proc/net/tcp). Every check's refusals on edited recordings: tests/unit/test_gpu_facts_checks.py.
REFUSALS = ["no_driver", "disk_space", "port_in_use"]


@pytest.mark.parametrize("case", REFUSALS)
def test_refused_before_any_change(runs: dict, case: str) -> None:
    result = runs[case]
    stats = result["report"]["stats"]["localhost"]
    assert result["rc"] != 0, f"{case} was not refused"
    assert stats["changed"] == 0 and stats["failures"] == 1
    failed = _failed_task(result["report"])
    assert failed["name"] == REFUSE_TASK
    message = failed["msg"]
    assert f"[{case}] fact gpu_preflight" in message
    assert "requirement: " in message and "fix: " in message
    assert message.count("] fact ") == 1, f"{case} should fail one check only: {message}"


def test_refusal_details(runs: dict) -> None:
    def msg(case: str) -> str:
        return _failed_task(runs[case]["report"])["msg"]

    assert "nvidia-smi could not be run" in msg("no_driver")
    assert "9007199254740992" in msg("disk_space")
    assert "127.0.0.1 (uid " in msg("port_in_use") and "service user nobody" in msg("port_in_use")


@pytest.mark.parametrize("case", ["passes", "check_mode", "port_held_by_own_service"])
def test_good_host_passes_unchanged(runs: dict, case: str) -> None:
    result = runs[case]
    assert result["rc"] == 0, result["stderr"]
    assert result["report"]["stats"]["localhost"]["changed"] == 0
    summary = _task(result["report"], "Show the GPU host facts")
    assert summary is not None
    assert "GPUs: 2 x NVIDIA H200 (compute capability 9.0, 143771 MiB each)" in summary["msg"][0]
    nccl = _task(result["report"], "Show the chosen NCCL environment")
    assert nccl["msg"][0] == "# NCCL profile: nvlink_all_pairs (chosen by the gpu_preflight role)"


def test_ignore_assert_errors_turns_refusals_into_warnings(runs: dict) -> None:
    result = runs["ignored"]
    assert result["rc"] == 0 and result["report"]["stats"]["localhost"]["changed"] == 0
    warned = _task(result["report"], "Carry on despite failed checks (gpu_preflight_ignore_assert_errors)")
    assert warned["msg"][0].startswith("IGNORED") and "[gpu_count]" in warned["msg"][1]


def test_bad_variable_refused_by_name(runs: dict) -> None:
    result = runs["bad_cuda_variable"]
    assert result["rc"] != 0 and result["report"]["stats"]["localhost"]["changed"] == 0
    failed = _failed_task(result["report"])
    assert failed["name"] == "Check parallelism, CUDA version and sizes"
    assert "gpu_preflight_engine_cuda_version" in failed["msg"] and "like '13.0'" in failed["msg"]
