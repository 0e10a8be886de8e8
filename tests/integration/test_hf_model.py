"""The hf_model role run for real (ansible-playbook, connection local) against olah serving test repos."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, Hub, recap, run_playbook, sha256
from conftest import hf_model_role_vars as role_vars
from gguf import GGUFReader
from hf_model_repos import random_file, safetensors_model, split_gguf

pytestmark = pytest.mark.slow
PLAY = ROOT / "tests" / "integration" / "playbooks" / "hf_model.yml"


def snapshot(d: Path) -> dict[str, tuple[int, int, int]]:
    """inode, size and mtime of every model file (not the role's own state)."""
    return {
        str(p.relative_to(d)): (p.stat().st_ino, p.stat().st_size, p.stat().st_mtime_ns)
        for p in d.rglob("*")
        if p.is_file() and ".cache" not in p.parts and ".hf_model" not in p.parts
    }


def check(proc: subprocess.CompletedProcess[str]) -> dict[str, int]:
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    return recap(proc.stdout)


def test_fresh_download_verified_then_rerun_touches_nothing(hub: Hub, tmp_path: Path) -> None:
    files = safetensors_model(tmp_path / "src")
    expected = {
        n: sha256(p) if isinstance(p, Path) else hashlib.sha256(p).hexdigest() for n, p in files.items()
    }
    sha = hub.make_repo("acme/fresh", files)
    v = role_vars(hub, tmp_path, "acme/fresh", "main")
    dest = Path(str(v["hf_model_local_dir"]))

    first = run_playbook(PLAY, v)
    assert recap_changed(first) > 0
    assert {n: sha256(dest / n) for n in expected} == expected
    marker = json.loads((dest / ".hf_model" / "complete.json").read_text())
    assert marker["revision"] == sha and marker["repo"] == "acme/fresh"
    assert sorted(f["path"] for f in marker["files"]) == sorted(expected)
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["revision"] == sha and result["downloaded"] is True
    assert "fetched 6 files" in first.stdout
    gets = len(hub.file_gets("acme/fresh"))
    assert gets == len(expected)

    before = snapshot(dest)
    second = run_playbook(PLAY, v)
    assert check(second)["changed"] == 0
    assert snapshot(dest) == before
    assert len(hub.file_gets("acme/fresh")) == gets, "the re-run downloaded data"
    assert "complete (marker matches, nothing to transfer)" in " ".join(second.stdout.split()), second.stdout

    # Pinned to the commit sha, a re-run does not even ask the hub.
    api_calls = len(hub.requests())
    pinned = run_playbook(PLAY, {**v, "hf_model_revision": sha})
    assert check(pinned)["changed"] == 0
    assert len(hub.requests()) == api_calls


def recap_changed(proc: subprocess.CompletedProcess[str]) -> int:
    return check(proc)["changed"]


def test_unknown_repo_and_revision_refused(hub: Hub, tmp_path: Path) -> None:
    hub.make_repo("acme/known", {"config.json": b"{}"})
    v = role_vars(hub, tmp_path, "acme/missing", "main")
    proc = run_playbook(PLAY, v)
    assert proc.returncode != 0
    assert "hf_model_repo 'acme/missing' was not found" in proc.stdout
    bad_rev = "0" * 40
    proc = run_playbook(PLAY, role_vars(hub, tmp_path, "acme/known", bad_rev))
    assert proc.returncode != 0
    assert f"hf_model_revision '{bad_rev}' does not exist in 'acme/known'" in proc.stdout
    assert not Path(str(v["hf_model_local_dir"])).exists()
    assert not (tmp_path / "models").exists()


def test_bad_variable_refused_before_any_change(hub: Hub, tmp_path: Path) -> None:
    v = role_vars(hub, tmp_path, "not a repo", "main")
    proc = run_playbook(PLAY, v)
    assert proc.returncode != 0
    assert "set hf_model_repo to 'org/name'" in proc.stdout
    assert not (tmp_path / "helpers").exists()


def test_disk_too_small_refused_before_any_transfer(hub: Hub, tmp_path: Path) -> None:
    sha = hub.make_repo("acme/huge", safetensors_model(tmp_path / "src", shards=2))
    v = role_vars(hub, tmp_path, "acme/huge", sha, hf_model_disk_margin_bytes=2**60)
    proc = run_playbook(PLAY, v)
    assert proc.returncode != 0
    assert "not enough free space for acme/huge" in proc.stdout
    assert "missing" in proc.stdout and "hf_model_disk_margin_bytes" in proc.stdout
    assert hub.file_gets("acme/huge") == []
    assert not Path(str(v["hf_model_local_dir"])).exists()


def test_truncated_and_corrupted_shards_refetched(hub: Hub, tmp_path: Path) -> None:
    files = safetensors_model(tmp_path / "src", shards=3)
    hub.make_repo("acme/damaged", files)
    v = role_vars(hub, tmp_path, "acme/damaged", "main")
    dest = Path(str(v["hf_model_local_dir"]))
    check(run_playbook(PLAY, v))
    good = {
        p: sha256(dest / p) for p in ("model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors")
    }
    untouched = snapshot(dest)["model-00003-of-00003.safetensors"]

    truncated = dest / "model-00001-of-00003.safetensors"
    with truncated.open("r+b") as fh:
        fh.truncate(truncated.stat().st_size // 2)
    corrupted = dest / "model-00002-of-00003.safetensors"
    with corrupted.open("r+b") as fh:  # same size, different bytes
        fh.seek(corrupted.stat().st_size // 2)
        fh.write(b"\xff" * 64)
    gets = hub.file_gets("acme/damaged")

    proc = run_playbook(PLAY, v)
    assert check(proc)["changed"] > 0
    new = hub.file_gets("acme/damaged")[len(gets) :]
    assert sorted(line.split("/resolve/")[1].split()[0].split("/", 1)[1] for line in new) == sorted(good)
    assert {p: sha256(dest / p) for p in good} == good
    assert snapshot(dest)["model-00003-of-00003.safetensors"] == untouched
    assert "fetched 2 files" in proc.stdout, proc.stdout


def _progress(dest: Path) -> dict[str, object]:
    try:
        return json.loads((dest / ".hf_model" / "progress.json").read_text())
    except (OSError, ValueError):
        return {}


def _download_pids(helper_dir: Path) -> list[int]:
    script = str(helper_dir / "hf_model_download.py")
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if script.encode() in argv:
            pids.append(int(proc.name))
    return pids


def test_interrupted_download_resumes_without_refetching_finished_files(hub: Hub, tmp_path: Path) -> None:
    files = safetensors_model(tmp_path / "src", shards=4, big_bytes=1)
    files["model-00004-of-00004.safetensors"] = random_file(tmp_path / "big.bin", 120_000_000)
    hub.make_repo("acme/resume", files)
    v = role_vars(hub, tmp_path, "acme/resume", "main", hf_model_max_workers=4)
    dest = Path(str(v["hf_model_local_dir"]))
    big = "model-00004-of-00004.safetensors"

    vars_file = tmp_path / "vars.json"
    vars_file.write_text(json.dumps(v))
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")}
    play = subprocess.Popen(
        [str(Path(sys.executable).parent / "ansible-playbook"), str(PLAY), "-e", f"@{vars_file}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    partial_dir = dest / ".cache" / "huggingface" / "download"
    deadline = time.monotonic() + 120
    killed = False
    try:
        while time.monotonic() < deadline and not killed:
            progress = _progress(dest)
            partial = list(partial_dir.glob("*.incomplete")) if partial_dir.exists() else []
            sizes = [p.stat().st_size for p in partial if p.exists()]
            if (
                progress.get("in_flight") == [big]
                and progress.get("files_done") == len(files) - 1
                and sizes
                and sizes[0] > 5e6
            ):
                for pid in _download_pids(tmp_path / "helpers"):
                    os.kill(pid, signal.SIGKILL)
                killed = True
            time.sleep(0.05)
    finally:
        os.killpg(play.pid, signal.SIGKILL)
        play.wait()
    assert killed, "the download finished or never started before it could be interrupted"
    assert not (dest / big).exists()
    assert not (dest / ".hf_model" / "complete.json").exists()
    finished = dict(snapshot(dest).items())
    assert set(finished) == {n for n in files if n != big}
    gets = hub.file_gets("acme/resume")

    proc = run_playbook(PLAY, v)
    assert check(proc)["changed"] > 0
    new = hub.file_gets("acme/resume")[len(gets) :]
    assert [line.split("/resolve/")[1].split()[0].split("/", 1)[1] for line in new] == [big]
    after = snapshot(dest)
    assert {n: after[n] for n in finished} == finished
    assert sha256(dest / big) == sha256(hub.lfs_object("acme/resume", big))
    assert not list(partial_dir.glob("*.incomplete"))


def test_split_gguf_merged_and_readable(hub: Hub, tmp_path: Path) -> None:
    files, tensors = split_gguf(tmp_path / "src")
    hub.make_repo("acme/tiny-GGUF", files)
    v = role_vars(hub, tmp_path, "acme/tiny-GGUF", "main")
    dest = Path(str(v["hf_model_local_dir"]))
    check(run_playbook(PLAY, v))
    merged = dest / "tiny-Q8.gguf"
    reader = GGUFReader(merged)
    assert reader.get_field("split.count") is None
    got = {t.name: t.data for t in reader.tensors}
    assert sorted(got) == sorted(tensors)
    for name, arr in tensors.items():
        assert (got[name].reshape(arr.shape) == arr).all()
    assert reader.get_field("general.name").contents() == "tiny"
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["gguf_files"] == [str(merged)]
    # Idempotent: the merged file is part of the marker.
    before = snapshot(dest)
    assert check(run_playbook(PLAY, v))["changed"] == 0
    assert snapshot(dest) == before


def test_prune_old_removes_other_downloads_only(hub: Hub, tmp_path: Path) -> None:
    old_sha = hub.make_repo("acme/evolving", {"config.json": b'{"v": 1}', "w.bin": os.urandom(300_000)})
    new_sha = hub.make_repo("acme/evolving", {"config.json": b'{"v": 2}'})
    root = tmp_path / "models"
    old = role_vars(hub, tmp_path, "acme/evolving", old_sha, hf_model_local_dir=str(root / "evolving-old"))
    check(run_playbook(PLAY, old))
    old_bytes = json.loads((root / "evolving-old" / ".hf_model" / "complete.json").read_text())["total_bytes"]
    unrelated = root / "not-a-download"
    unrelated.mkdir()
    (unrelated / "keep.txt").write_text("no marker here")
    new = role_vars(
        hub,
        tmp_path,
        "acme/evolving",
        new_sha,
        hf_model_local_dir=str(root / "evolving-new"),
        hf_model_prune_old=True,
        hf_model_prune_root=str(root),
    )
    proc = run_playbook(PLAY, new)
    check(proc)
    assert not (root / "evolving-old").exists()
    assert (root / "evolving-new" / "config.json").read_text() == '{"v": 2}'
    assert (unrelated / "keep.txt").exists()
    assert f"({old_bytes} bytes); keeping {root / 'evolving-new'}" in " ".join(proc.stdout.split()), (
        proc.stdout
    )
    # The deployed model is never a candidate: pruning again removes nothing.
    assert check(run_playbook(PLAY, new))["changed"] == 0
    assert (root / "evolving-new" / "config.json").exists()


def test_check_mode_changes_nothing(hub: Hub, tmp_path: Path) -> None:
    sha = hub.make_repo("acme/checked", safetensors_model(tmp_path / "src", shards=2))
    v = role_vars(hub, tmp_path, "acme/checked", sha)
    dest = Path(str(v["hf_model_local_dir"]))
    fresh = run_playbook(PLAY, v, args=("--check",))
    assert fresh.returncode == 0, fresh.stdout[-4000:]
    assert not dest.exists() and not (tmp_path / "helpers").exists()
    assert "so the hub is not probed" in " ".join(fresh.stdout.split()), fresh.stdout
    check(run_playbook(PLAY, v))
    before = snapshot(dest)
    gets = len(hub.file_gets("acme/checked"))
    again = run_playbook(PLAY, v, args=("--check", "--diff"))
    assert check(again)["changed"] == 0
    assert snapshot(dest) == before and len(hub.file_gets("acme/checked")) == gets


def test_token_reaches_the_host_only_as_a_private_file(hub: Hub, tmp_path: Path) -> None:
    secret = "hf_TESTTOKEN_do_not_log_4242"
    sha = hub.make_repo("acme/gated", {"config.json": b"{}"})
    v = role_vars(hub, tmp_path, "acme/gated", sha, hf_model_token=secret)
    proc = run_playbook(PLAY, v, args=("-vv",))
    check(proc)
    assert secret not in proc.stdout and secret not in proc.stderr
    token_file = tmp_path / "helpers" / "token"
    assert token_file.read_text() == secret
    assert token_file.stat().st_mode & 0o777 == 0o600
    # Without a token the stored one is removed.
    check(run_playbook(PLAY, {**v, "hf_model_token": ""}))
    assert not token_file.exists()


def test_weights_already_on_the_host_are_checked_in_place(hub: Hub, tmp_path: Path) -> None:
    # A pre-copied folder (no hub at all: the endpoint is a closed port) is served where it is.
    src = tmp_path / "shared" / "acme--local"
    for name, content in safetensors_model(tmp_path / "build").items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_bytes(content.read_bytes() if isinstance(content, Path) else content)
    v = role_vars(
        hub,
        tmp_path,
        "acme/local",
        "main",
        hf_model_source_dir=str(src),
        hf_model_endpoint="http://127.0.0.1:9",
    )
    before = snapshot(src)
    first = run_playbook(PLAY, v)
    check(first)
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["dir"] == str(src) and result["source"] == "local" and result["downloaded"] is False
    assert int(result["files"]) == len(before)
    assert snapshot(src) == before and not (src / ".hf_model").exists()
    assert not Path(str(v["hf_model_local_dir"])).exists()
    assert "checked in place" in first.stdout
    assert check(run_playbook(PLAY, v))["changed"] == 0

    # A shard cut short by an interrupted copy is refused, naming the variable and the file.
    shard = sorted(src.glob("*.safetensors"))[1]
    shard.write_bytes(shard.read_bytes()[:-100])
    bad = run_playbook(PLAY, v)
    assert bad.returncode != 0
    text = " ".join(bad.stdout.split())
    assert f"hf_model_source_dir={src} on localhost is not a usable model" in text, text[-3000:]
    assert f"{shard.name}: " in text and "truncated or padded" in text
