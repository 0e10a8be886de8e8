"""Deploy inputs are refused on the controller, before any host is contacted, naming the variable and the fix.

Each case runs playbooks/deploy_tiny.yml against the default inventory (localhost): a refusal must come
from roles/deploy/tasks/inputs.yml or load_catalog.yml, so no probe ran and nothing changed, and the run
must not end in a traceback. One run per kind of refusal proves the wiring; the values are tested against
the contract's code in tests/unit/test_deploy_input_refusals.py.
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


# One run per kind of refusal; every bad value of the table is checked against the contract's code in
# tests/unit/test_deploy_input_refusals.py. (extra vars, the variables the refusal must name)
BAD = [
    # Plain values of the wrong type or range, several at once: all reported in one refusal.
    (
        {"llm_device": "tpu", "llm_api_port": "http", "llm_model_dir": "/"},
        ["llm_device", "llm_api_port", "llm_model_dir"],
    ),
    # A mapping with one bad entry (the refusal names the entry).
    ({"llm_engine_env": {"lower_case": "1"}}, ["llm_engine_env"]),
    # A typo of an input, and a planner variable the deploy sets itself.
    ({"llm_api_prot": 8080}, ["llm_api_prot"]),
    ({"llm_plan_max_model_len": 4096}, ["llm_plan_max_model_len"]),
    # Secrets in bad values: named, never shown.
    (
        {"llm_api_key": SECRET + "\nVLLM_X=1", "llm_hf_endpoint": f"https://user:{HF_SECRET}@mirror.example"},
        ["llm_api_key", "llm_hf_endpoint"],
    ),
    # A cross-field rule: a public bind without the opt-in.
    ({"llm_api_host": "0.0.0.0"}, ["llm_api_host"]),
    # Refused once the catalog entry is known (still on the controller).
    ({"llm_vllm_version": "0.18.0", "llm_max_model_len": 300}, ["llm_vllm_version", "llm_max_model_len"]),
]


@pytest.mark.parametrize(("extra", "variables"), BAD, ids=["-".join(v) for _, v in BAD])
def test_bad_input_is_refused_before_any_host_is_contacted(
    tmp_path: Path, extra: dict[str, object], variables: list[str]
) -> None:
    before = _host_state()
    result = _run(tmp_path, {"llm_api_key": SECRET, "hf_token": HF_SECRET, **extra})
    out = result.stdout + result.stderr
    assert result.returncode != 0, out[-3000:]
    assert "Traceback" not in out
    for variable in variables:
        assert f"{variable}=" in out, out[-3000:]
    assert re.search(r" is refused( \(entries [^)]+\))?: ", out), out[-3000:]
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


def test_a_list_given_as_text_is_refused_naming_the_form_to_give(tmp_path: Path) -> None:
    """`-e llm_plan_context_lengths=65536` gives a string; read as a list it was 6, 5, 5, 3, 6. The role's
    typed-input check refuses it (and every other list given as text) before the plan, naming the form."""
    before = _host_state()
    extra = {"llm_plan_context_lengths": "65536", "llm_plan_kv_cache_dtypes": "fp8,bfloat16"}
    result = _run(tmp_path, extra, ROOT / "playbooks" / "deploy_kimi.yml")
    out = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0 and "Traceback" not in out
    assert "llmdeploy.llm.llm_plan: 2 variable(s) refused" in out, out[-3000:]
    assert """-e '{"llm_plan_context_lengths": [65536]}'""" in out
    assert """-e '{"llm_plan_kv_cache_dtypes": ["fp8", "bfloat16"]}'""" in out
    assert "Verdict:" not in out and "Read the host facts" not in out and _host_state() == before
