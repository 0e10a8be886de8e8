"""hf_model on two hosts: one downloads from a real hub (olah), the other gets its copy through the role's
one-time rsync daemon (hf_model_sync_method rsyncd), over TCP only.

The two hosts are this machine twice (connection local), each with its own hf_model_local_dir and helper
directory; the daemon binds 127.0.0.2 (hf_model_sync_address) and the receiver pulls from it with the real
rsync client, which the role installs when it is missing. Nothing is mocked: an unreachable port is a real
firewall rule (iptables REJECT on 127.0.0.2:<port>, removed afterwards) and an address that is not the
download host's is one the daemon cannot bind.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import Hub, _free_port, run_playbook, sha256
from hf_model_repos import safetensors_model

pytestmark = pytest.mark.slow

REPO = "acme/synced"
PLAY = """---
- name: hf_model on two hosts
  hosts: all
  gather_facts: false
  roles:
    - role: llmdeploy.llm.hf_model
  post_tasks:
    - name: Save the role's result for the test
      ansible.builtin.copy:
        content: "{{ hf_model_result | to_nice_json }}"
        dest: "{{ result_file }}"
        mode: "0644"
      changed_when: false
"""


def daemons() -> str:
    """Every rsync daemon on this machine (the role's must all be gone after each run)."""
    proc = subprocess.run(["pgrep", "-af", "rsync --daemon"], capture_output=True, text=True, check=False)
    return proc.stdout.strip()


def recaps(stdout: str) -> dict[str, dict[str, int]]:
    out = {}
    for line in stdout.splitlines():
        if line.startswith("node-") and "ok=" in line:
            host, counters = line.split(":", 1)
            out[host.strip()] = {k: int(v) for k, v in (p.split("=") for p in counters.split())}
    assert {"node-a", "node-b"} <= set(out), stdout[-3000:]
    return out


def task_output(stdout: str, task: str) -> str:
    """What a task printed, from its TASK line to the next one."""
    return stdout.split(f"TASK [llmdeploy.llm.hf_model : {task}", 1)[1].split("\nTASK [", 1)[0]


def flat(text: str) -> str:
    return " ".join(text.split())


@dataclass
class Cluster:
    hub: Hub
    base: Path
    sha: str
    hub_sha256: dict[str, str]
    port: int
    first: subprocess.CompletedProcess[str] | None = None

    def node(self, name: str) -> Path:
        return self.base / name

    def model_dir(self, name: str) -> Path:
        return self.node(name) / "models" / "acme--synced"

    def run(
        self, receiver: str = "node-b", *flags: str, third: str = "", **extra: object
    ) -> subprocess.CompletedProcess[str]:
        """ansible-playbook on node-a (downloads, serves) and node-b, whose model directory is ``receiver``'s
        (a fresh name = a host without a copy); with ``third``, also node-x with that directory."""
        nodes = [("node-a", "127.0.0.2", "node-a"), ("node-b", "127.0.0.3", receiver)]
        nodes += [("node-x", "127.0.0.4", third)] if third else []
        hosts = {}
        for host, addr, d in nodes:
            hosts[host] = {
                "ansible_connection": "local",
                "ansible_host": addr,
                "ansible_python_interpreter": sys.executable,
                "hf_model_local_dir": str(self.model_dir(d)),
                # the receivers share one helper directory (the same files), node-a has its own
                "hf_model_helper_dir": str(self.node("node-a" if host == "node-a" else "node-b") / "helpers"),
                "result_file": str(self.node(d) / "result.json"),
            }
        inventory = self.base / "inventory.json"
        inventory.write_text(json.dumps({"all": {"hosts": hosts}}))
        play = self.base / "play.yml"
        play.write_text(PLAY)
        extra_vars = {
            "hf_model_repo": REPO,
            "hf_model_revision": "main",
            "hf_model_endpoint": self.hub.endpoint,
            "hf_model_xet": False,
            "hf_model_python": sys.executable,
            "hf_model_disk_margin_bytes": 0,
            "hf_model_poll_interval_s": 1,
            "hf_model_sync_address": "127.0.0.2",
            "hf_model_sync_port": self.port,
            **extra,
        }
        return run_playbook(play, extra_vars, args=("-i", str(inventory), *flags), timeout=300)

    def assert_no_daemon_left(self, node: str = "node-a") -> None:
        assert daemons() == "", f"an rsync daemon is still running: {daemons()}"
        leftovers = sorted(p.name for p in (self.node(node) / "helpers").glob("rsyncd.*"))
        assert leftovers == [], f"the daemon's private directory was not removed: {leftovers}"


@pytest.fixture(scope="module")
def cluster(hub: Hub, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    base = tmp_path_factory.mktemp("sync")
    files = safetensors_model(base / "src", shards=3, shard_bytes=3_000_000)
    hub_sha256 = {
        n: sha256(p) if isinstance(p, Path) else hashlib.sha256(p).hexdigest() for n, p in files.items()
    }
    sha = hub.make_repo(REPO, files)
    assert daemons() == "", f"an rsync daemon was already running before the test: {daemons()}"
    cluster = Cluster(hub=hub, base=base, sha=sha, hub_sha256=hub_sha256, port=_free_port())
    # The first run, which every test builds on: node-a downloads, node-b pulls from node-a's daemon.
    cluster.first = cluster.run(
        "node-b", "--diff"
    )  # --diff shows the daemon's configuration (no secret in it)
    yield cluster


def test_second_host_gets_a_verified_copy_over_rsyncd_then_rerun_changes_nothing(cluster: Cluster) -> None:
    first = cluster.first
    assert first is not None
    assert first.returncode == 0, first.stdout[-8000:] + first.stderr[-3000:]
    out = flat(first.stdout)
    counts = recaps(first.stdout)
    assert counts["node-a"]["changed"] > 0 and counts["node-b"]["changed"] > 0

    # node-a downloaded every file once from the hub; node-b fetched nothing from it.
    assert len(cluster.hub.file_gets(REPO)) == len(cluster.hub_sha256)
    assert "fetched 6 files" in out
    # node-b's copy came from node-a's daemon on 127.0.0.2:<port>.
    assert f"Start the daemon on 127.0.0.2:{cluster.port}" in out
    assert "changed: [node-b]" in task_output(first.stdout, "Rsyncd | Pull the model from node-a")
    # One read-only module of node-a's directory, only node-b's address (127.0.0.1 toward 127.0.0.2) allowed,
    # a user and a secrets file; the secret itself is never printed.
    conf = task_output(first.stdout, "Rsyncd | Write the daemon's configuration")
    for line in (
        "use chroot = no",
        "[model]",
        f"path = {cluster.model_dir('node-a')}",
        "read only = yes",
        "auth users = hf_model",
        "hosts allow = 127.0.0.1",
        "hosts deny = *",
        "exclude = .cache/huggingface/download/*.incomplete .hf_model/progress.json",
    ):
        assert line in conf, conf
    assert "secrets file = " in conf and "/rsyncd.secrets" in conf
    assert re.search(r"hf_model:[A-Za-z0-9]{40}", first.stdout + first.stderr) is None, (
        "the secret was printed"
    )

    # Both copies are byte-identical to what the hub serves, and node-b's marker is current for the revision.
    for node in ("node-a", "node-b"):
        d = cluster.model_dir(node)
        assert {n: sha256(d / n) for n in cluster.hub_sha256} == cluster.hub_sha256, node
        marker = json.loads((d / ".hf_model" / "complete.json").read_text())
        assert marker["repo"] == REPO and marker["revision"] == cluster.sha
        assert sorted(f["path"] for f in marker["files"]) == sorted(cluster.hub_sha256)
        for f in marker["files"]:
            st = (d / f["path"]).stat()
            assert st.st_size == f["size"], (node, f)
            if f.get("mtime_ns") is not None:
                assert st.st_mtime_ns == f["mtime_ns"], (node, f)
        result = json.loads((cluster.node(node) / "result.json").read_text())
        assert result["revision"] == cluster.sha and result["complete"] is True
    b = cluster.model_dir("node-b")
    assert not (b / ".hf_model" / "progress.json").exists(), "the download's progress file was copied"
    cluster.assert_no_daemon_left()

    # Second run: both copies current, nothing to sync, so no daemon is started and nothing changes.
    gets = len(cluster.hub.file_gets(REPO))
    second = cluster.run()
    assert second.returncode == 0, second.stdout[-8000:]
    assert {h: c["changed"] for h, c in recaps(second.stdout).items()} == {"node-a": 0, "node-b": 0}
    assert "Rsyncd |" not in second.stdout, "the second run went into the rsync daemon tasks"
    assert len(cluster.hub.file_gets(REPO)) == gets
    cluster.assert_no_daemon_left()


def default_ipv4() -> str:
    """This machine's default IPv4 address the way ansible's network facts find it (the route to 8.8.8.8)."""
    proc = subprocess.run(
        ["ip", "-4", "route", "get", "8.8.8.8"], capture_output=True, text=True, check=False
    )
    m = re.search(r"\bsrc (\S+)", proc.stdout)
    return m.group(1) if proc.returncode == 0 and m else ""


def test_check_mode_starts_nothing_then_the_default_address_serves_the_copy(cluster: Cluster) -> None:
    """Two receivers without a current copy: node-b with node-c's directory (someone else's file in it, no
    marker) and node-x with a directory that holds an older revision of this model (its marker, a shard the
    new revision lacks). Check mode: no daemon, nothing changed. Then, with hf_model_sync_address left empty,
    the daemon listens on node-a's default IPv4 address and both get the copy; the older revision's shard is
    removed, the foreign file is kept."""
    address = default_ipv4()
    if not address:
        pytest.skip("this machine has no default IPv4 route")
    foreign = cluster.model_dir("node-c") / "notes-of-someone-else.txt"
    foreign.parent.mkdir(parents=True)
    foreign.write_text("not part of the model\n")
    older = cluster.model_dir("node-x")
    (older / ".hf_model").mkdir(parents=True)
    (older / "model-old.safetensors").write_bytes(b"x" * 1000)
    marker = json.loads((cluster.model_dir("node-a") / ".hf_model" / "complete.json").read_text())
    marker["revision"] = "0" * 40
    (older / ".hf_model" / "complete.json").write_text(json.dumps(marker))

    dry = cluster.run("node-c", "--check", third="node-x", hf_model_sync_address="")
    assert dry.returncode == 0, dry.stdout[-8000:]
    assert {h: c["changed"] for h, c in recaps(dry.stdout).items()} == {"node-a": 0, "node-b": 0, "node-x": 0}
    assert flat(dry.stdout).count("role of this host: sync") == 2  # both saw they lack a copy ...
    assert "Rsyncd |" not in dry.stdout  # ... and nothing was started for them
    assert sorted(p.name for p in cluster.model_dir("node-c").iterdir()) == [foreign.name]
    assert (older / "model-old.safetensors").exists()
    cluster.assert_no_daemon_left()

    real = cluster.run("node-c", third="node-x", hf_model_sync_address="")
    assert real.returncode == 0, real.stdout[-8000:]
    assert "ok: [node-a]" in task_output(
        real.stdout, "Rsyncd | Read the download host's default IPv4 address"
    )
    assert f"Start the daemon on {address}:{cluster.port}" in flat(real.stdout)
    for d in (cluster.model_dir("node-c"), older):
        assert {n: sha256(d / n) for n in cluster.hub_sha256} == cluster.hub_sha256
        marker = json.loads((d / ".hf_model" / "complete.json").read_text())
        assert marker["revision"] == cluster.sha
    assert foreign.read_text() == "not part of the model\n"
    assert not (older / "model-old.safetensors").exists()
    cluster.assert_no_daemon_left()


@pytest.mark.skipif(shutil.which("iptables") is None, reason="needs iptables for a real firewall rule")
def test_port_closed_by_firewall_fails_with_the_fix_and_stops_the_daemon(cluster: Cluster) -> None:
    rule = ["INPUT", "-p", "tcp", "-d", "127.0.0.2", "--dport", str(cluster.port)]
    rule += ["-j", "REJECT", "--reject-with", "tcp-reset"]
    added = subprocess.run(["iptables", "-I", *rule], capture_output=True, text=True, check=False)
    if added.returncode != 0:
        pytest.skip(f"cannot add a firewall rule here: {added.stderr.strip()}")
    try:
        proc = cluster.run("node-d")
    finally:
        subprocess.run(["iptables", "-D", *rule], check=True)
    assert proc.returncode != 0, proc.stdout[-6000:]
    out = flat(proc.stdout)
    assert "fatal: [node-b]" in proc.stdout
    # rsync exits 10 with "Connection refused" here; a CI sandbox's network stack gave exit 32 with no
    # message for the same rule. The message must carry whatever rsync returned, never claim success.
    failed = re.search(
        re.escape(
            f"hf_model: node-b could not copy {REPO}@{cluster.sha[:12]} from the rsync daemon on node-a at "
            f"127.0.0.2:{cluster.port} (rsync exit "
        )
        + r"(\d+):",
        out,
    )
    assert failed and int(failed.group(1)) != 0, out[-4000:]
    if failed.group(1) == "10":
        assert "Connection refused" in out
    assert f"Open TCP port {cluster.port} on node-a to the other hosts" in out
    assert "set hf_model_sync_address" in out and "hf_model_shared_path: true" in out
    assert "hf_model_sync_method: ssh" in out
    # node-a started the daemon, then stopped it in `always` although the pull failed.
    assert "changed: [node-a]" in task_output(proc.stdout, "Rsyncd | Stop the daemon")
    assert recaps(proc.stdout)["node-a"]["failed"] == 0
    cluster.assert_no_daemon_left()
    assert not (cluster.model_dir("node-d") / ".hf_model" / "complete.json").exists()


def start_stale_daemon(cluster: Cluster) -> subprocess.Popen[bytes]:
    """What a run cut short (controller killed before `always`) leaves on node-a: its private directory in the
    helper directory and its daemon, still listening."""
    d = cluster.node("node-a") / "helpers" / "rsyncd.interrupted"
    d.mkdir(mode=0o700)
    conf = d / "rsyncd.conf"
    conf.write_text(
        f"use chroot = no\nlog file = {d}/rsyncd.log\n[model]\n    path = {cluster.model_dir('node-a')}\n"
        "    read only = yes\n"
    )
    port = _free_port()
    argv = ["rsync", "--daemon", "--no-detach", f"--config={conf}", "--address=127.0.0.2", f"--port={port}"]
    proc = subprocess.Popen(argv, start_new_session=True)
    (d / "rsyncd.pid").write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.2", port), timeout=1).close()
            return proc
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, "the stale daemon did not start"
            time.sleep(0.1)


def test_address_not_on_the_download_host_fails_with_the_fix_and_leaves_no_daemon(cluster: Cluster) -> None:
    """Also: a daemon an interrupted run left behind is stopped and its directory removed first."""
    foreign = "203.0.113.77"  # TEST-NET-3, documentation only: no address of this machine
    with socket.socket() as s, pytest.raises(OSError):
        s.bind((foreign, 0))
    stale = start_stale_daemon(cluster)
    try:
        proc = cluster.run("node-e", hf_model_sync_address=foreign)
        stale.wait(timeout=10)  # ended by the role (SIGTERM; rsync then exits 0), reaped here
    finally:
        if stale.poll() is None:
            stale.kill()
            stale.wait()
    assert "changed: [node-a] => (item=" in task_output(
        proc.stdout, "Rsyncd | Stop daemons left by an interrupted run"
    )
    assert proc.returncode != 0, proc.stdout[-6000:]
    out = flat(proc.stdout)
    started = f"hf_model: the rsync daemon on node-a did not start on {foreign}:{cluster.port}"
    assert started in out, out[-4000:]
    assert "Cannot assign requested address" in out
    assert "Set hf_model_sync_address to an address of node-a itself" in out
    assert "node-b cannot get acme/synced from node-a: its rsync daemon is not running there" in out
    cluster.assert_no_daemon_left()
    assert not (cluster.model_dir("node-e") / ".hf_model" / "complete.json").exists()


def test_unknown_sync_method_refused_before_any_change(cluster: Cluster) -> None:
    proc = cluster.run("node-f", hf_model_sync_method="scp")
    assert proc.returncode != 0
    out = flat(proc.stdout)
    assert 'hf_model: hf_model_sync_method="scp" is not a copy method.' in out, out[-3000:]
    assert "Set it to 'rsyncd'" in out and "or 'ssh'" in out
    assert all(c["changed"] == 0 for c in recaps(proc.stdout).values())
    assert not cluster.node("node-f").exists()
