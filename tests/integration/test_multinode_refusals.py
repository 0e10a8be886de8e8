"""A multi-node group (llm_multinode) is refused before any host changes: on the controller when it has one
host or its hosts were given different inputs, and after the read-only probes when a worker cannot reach the
head. Real ansible-playbook runs of playbooks/deploy_tiny.yml against two local "hosts"."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"

pytestmark = pytest.mark.slow


def _changed(stdout: str) -> int:
    """The PLAY RECAP's changed counts, summed over the hosts (there must be a recap)."""
    counts = [
        int(line.split("changed=")[1].split()[0]) for line in stdout.splitlines() if " changed=" in line
    ]
    assert counts, stdout[-3000:]
    return sum(counts)


def _deploy(tmp_path: Path, hosts: dict, group_vars: dict) -> tuple[subprocess.CompletedProcess[str], str]:
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = {
        "all": {
            "children": {
                "gpu_hosts": {"hosts": {h: {**local, **v} for h, v in hosts.items()}, "vars": group_vars}
            }
        }
    }
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(inventory))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", str(path), "playbooks/deploy_tiny.yml"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return proc, proc.stdout + proc.stderr


def test_hosts_given_different_inputs_are_refused_on_the_controller(tmp_path):
    proc, out = _deploy(
        tmp_path,
        {
            "node-a": {"llm_vllm_version": "0.33.0"},
            "node-b": {"llm_vllm_version": "0.22.0", "llm_api_key": "k" * 20},
        },
        {"llm_multinode": True},
    )
    assert proc.returncode != 0
    assert (
        'llm_vllm_version differs between the hosts of the group (node-a: "0.33.0", node-b: "0.22.0")' in out
    )
    assert "llm_api_key differs between the hosts of the group (node-a: <unset>, node-b: <hidden>)" in out
    assert "k" * 20 not in out
    assert _changed(proc.stdout) == 0
    # Refused before the plan and before any probe of a host.
    assert "gpu_preflight" not in out and "TASK [llmdeploy.llm.ml_env : " not in out


def test_a_group_of_one_host_is_refused(tmp_path):
    proc, out = _deploy(tmp_path, {"node-a": {}}, {"llm_multinode": True})
    assert proc.returncode != 0
    assert "llm_multinode=true needs at least two hosts in llm_deploy_hosts (gpu_hosts has node-a)" in out
    assert _changed(proc.stdout) == 0


def _cpu_group(tmp_path: Path, **extra: object) -> dict:
    # Where a run that got past the preflight would write: the test's own directories, never the machine's.
    return {
        "llm_multinode": True,
        "llm_device": "cpu",
        "llm_tensor_parallel_size": 2,
        "llm_env_path": str(tmp_path / "env"),
        "llm_model_dir": str(tmp_path / "models"),
        **extra,
    }


def test_an_interface_the_host_lacks_is_refused_after_the_probes(tmp_path):
    proc, out = _deploy(
        tmp_path, {"node-a": {}, "node-b": {}}, _cpu_group(tmp_path, llm_multinode_ifname="nosuchif0")
    )
    assert proc.returncode != 0
    assert "llm_multinode_ifname='nosuchif0' is not an interface of this host" in out, out[-4000:]
    assert _changed(proc.stdout) == 0
    assert "ml_env" not in out


@pytest.fixture
def dropped_port():
    """A loopback port whose packets a firewall drops (iptables, root): a connect times out."""
    port = 29677
    rule = ["OUTPUT", "-p", "tcp", "-d", "127.0.0.1", "--dport", str(port), "-j", "DROP"]
    try:
        subprocess.run(["iptables", "-I", *rule], check=True, capture_output=True, timeout=30)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"no iptables to drop a port here: {exc}")
    try:
        yield port
    finally:
        subprocess.run(["iptables", "-D", *rule], check=False, capture_output=True, timeout=30)


def test_a_head_port_the_workers_cannot_reach_is_refused_after_the_probes(tmp_path, dropped_port):
    proc, out = _deploy(
        tmp_path,
        {"node-a": {}, "node-b": {}},
        _cpu_group(tmp_path, llm_multinode_master_addr="127.0.0.1", llm_multinode_master_port=dropped_port),
    )
    assert proc.returncode != 0
    assert (
        f"node-b cannot reach the head at 127.0.0.1:{dropped_port} (timeout): open TCP {dropped_port}" in out
    ), out[-4000:]
    assert _changed(proc.stdout) == 0
    assert "ml_env" not in out
