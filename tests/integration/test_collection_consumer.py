"""The collection as another project uses it: built, installed with ansible-galaxy, used from outside.

tests/consumer/setup.sh builds the tarball and installs it into an empty collections path of a project in a
temporary directory; nothing of the checkout is on that project's paths. The vllm_service part of the same
consumer runs in the molecule scenario (it needs the systemd container).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"
SETUP = ROOT / "tests" / "consumer" / "setup.sh"


def _env(config: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(config), ANSIBLE_NOCOLOR="1", PATH=f"{VENV_BIN}:{os.environ['PATH']}")
    return env


def _play(project: Path, *args: str, config: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), *args],
        cwd=project,
        env=_env(config or project / "ansible.cfg"),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("consumer")
    assert ROOT not in dest.parents
    done = subprocess.run(
        [str(SETUP), str(dest)], env=_env(dest / "ansible.cfg"), capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return dest


def test_installed_collection_is_plain_files(project: Path) -> None:
    installed = project / "collections" / "ansible_collections" / "llmdeploy" / "llm"
    manifest = json.loads((installed / "MANIFEST.json").read_text())
    dependencies = {"ansible.posix": ">=1.5.0", "community.general": ">=9.0.0"}
    assert manifest["collection_info"]["dependencies"] == dependencies
    assert [p for p in installed.rglob("*") if p.is_symlink()] == []
    for role in (ROOT / "roles").iterdir():
        assert (installed / "roles" / role.name / "meta" / "argument_specs.yml").is_file(), role.name
    assert (installed / "plugins" / "filter" / "llm_capacity.py").is_file()
    assert not (installed / "tests").exists() and not (installed / ".venv").exists()


def _consumer_plan(out: str) -> dict:
    # The YAML callback folds long messages; the JSON survives joining the lines with a space.
    match = re.search(r"CONSUMER-PLAN (\{[^}]*\})", re.sub(r"\s+", " ", out))
    assert match, out[-3000:]
    return json.loads(match.group(1))


def test_llm_plan_from_the_installed_collection(project: Path) -> None:
    installed = _play(project, "plan.yml")
    out = installed.stdout + installed.stderr
    assert installed.returncode == 0, out[-3000:]
    assert "llmdeploy.llm.llm_plan" in out
    plan = _consumer_plan(out)
    assert plan["verdict"] == "fits" and plan["tensor_parallel_size"] == 1
    # The same play through the checkout's collection gives the same figures: the tarball is complete.
    checkout = _play(project, "plan.yml", config=ROOT / "ansible.cfg")
    assert checkout.returncode == 0, (checkout.stdout + checkout.stderr)[-3000:]
    assert _consumer_plan(checkout.stdout) == plan
    assert plan["kv_cache_tokens"] > 100_000


def test_argument_specs_refuse_a_wrong_type(project: Path) -> None:
    proc = _play(project, "bad_type.yml")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "llm_plan_max_num_seqs" in out and "int" in out
    assert "Validating arguments against arg spec" in out
    assert "Ask the planner" not in out  # no task of the role ran


def test_collection_playbooks_run_by_fqcn(project: Path) -> None:
    plan = _play(
        project, "llmdeploy.llm.plan", "-e", "llm_model_name=glm5_nvfp4", "-e", "llm_hardware_name=h200_x8"
    )
    out = plan.stdout + plan.stderr
    assert plan.returncode == 0, out[-3000:]
    assert "Verdict: FITS" in out
    deploy = _play(
        project,
        "llmdeploy.llm.deploy_kimi",
        "-e",
        "llm_deploy_plan_only=true",
        "-e",
        "llm_deploy_hosts=localhost",
    )
    out = deploy.stdout + deploy.stderr
    assert deploy.returncode == 0, out[-3000:]
    assert "Verdict:" in out and "TRITON_MLA" in out
    assert "gpu_preflight" not in out
