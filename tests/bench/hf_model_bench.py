"""Benchmark of the hf_model role against a plain `hf download`, both from the same olah mirror.

Prints: throughput of each (median of N alternating runs), their ratio (goal >= 0.95), and after a download
killed in the middle of the largest file, which files the resumed run fetched again and how many bytes
(goal: at most one file). Figures, not assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from conftest import VENV_BIN, Hub, run_playbook, start_hub, stop_hub  # noqa: E402
from hf_model_repos import random_file, safetensors_model  # noqa: E402

PLAY = ROOT / "tests" / "integration" / "playbooks" / "hf_model.yml"
REPO = "bench/model"


def role_vars(endpoint: str, work: Path, dest: Path, workers: int, verify: bool = True) -> dict[str, object]:
    return {
        "hf_model_repo": REPO,
        "hf_model_revision": "main",
        "hf_model_local_dir": str(dest),
        "hf_model_endpoint": endpoint,
        "hf_model_xet": False,
        "hf_model_python": sys.executable,
        "hf_model_helper_dir": str(work / "helpers"),
        "hf_model_disk_margin_bytes": 0,
        "hf_model_poll_interval_s": 15,
        "hf_model_max_workers": workers,
        "hf_model_verify_sha256": verify,
        "result_file": str(work / "result.json"),
    }


def plain(endpoint: str, dest: Path, workers: int) -> float:
    env = {
        **os.environ,
        "HF_ENDPOINT": endpoint,
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    }
    t = time.monotonic()
    subprocess.run(
        [str(VENV_BIN / "hf"), "download", REPO, "--local-dir", str(dest), "--max-workers", str(workers)],
        check=True,
        env=env,
        capture_output=True,
    )
    return time.monotonic() - t


def role(endpoint: str, work: Path, dest: Path, workers: int, verify: bool = True) -> tuple[float, float]:
    t = time.monotonic()
    proc = run_playbook(PLAY, role_vars(endpoint, work, dest, workers, verify))
    wall = time.monotonic() - t
    if proc.returncode != 0:
        raise SystemExit(proc.stdout[-4000:])
    progress = json.loads((dest / ".hf_model" / "progress.json").read_text())
    return wall, float(progress["elapsed_s"])


def helper_pids(helper_dir: Path) -> list[int]:
    script = str(helper_dir / "hf_model_download.py").encode()
    pids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if script in (p / "cmdline").read_bytes().split(b"\0"):
                    pids.append(int(p.name))
            except OSError:
                pass
    return pids


def interrupted(hub: Hub, work: Path, dest: Path, sizes: dict[str, int], workers: int) -> None:
    """Kill the download helper once half the bytes are on disk, resume, and count what is fetched again."""
    v = role_vars(hub.endpoint, work, dest, workers)
    vars_file = work / "vars.json"
    vars_file.write_text(json.dumps(v))
    total = sum(sizes.values())
    start = len(hub.file_gets(REPO))
    play = subprocess.Popen(
        [str(VENV_BIN / "ansible-playbook"), str(PLAY), "-e", f"@{vars_file}"],
        cwd=ROOT,
        env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    partial_dir = dest / ".cache" / "huggingface" / "download"
    partial_bytes = 0
    deadline = time.monotonic() + 900
    try:
        while time.monotonic() < deadline and not partial_bytes:
            partial = list(partial_dir.glob("*.incomplete")) if partial_dir.exists() else []
            in_flight = sum(f.stat().st_size for f in partial if f.exists())
            done = sum(s for n, s in sizes.items() if (dest / n).is_file() and (dest / n).stat().st_size == s)
            if in_flight and done + in_flight >= total // 2:
                for pid in helper_pids(work / "helpers"):
                    os.kill(pid, signal.SIGKILL)
                partial_bytes = in_flight
            time.sleep(0.05)
    finally:
        os.killpg(play.pid, signal.SIGKILL)
        play.wait()
    done_before = {n for n, s in sizes.items() if (dest / n).is_file() and (dest / n).stat().st_size == s}
    first_run = len(hub.file_gets(REPO))
    started = {_name(line) for line in hub.file_gets(REPO)[start:first_run]}
    run_playbook(PLAY, v)
    again = [_name(line) for line in hub.file_gets(REPO)[first_run:]]
    refetched = [n for n in again if n in started]
    complete_mb = sum(sizes[n] for n in done_before) / 1e6
    print(
        f"interruption, {workers} worker(s): killed with {len(done_before)}/{len(sizes)} files complete "
        f"({complete_mb:.0f} MB) and {partial_bytes / 1e6:.1f} MB in partial files"
    )
    print(
        f"  resumed run: {len(refetched)} file(s) fetched again {refetched} "
        f"({sum(sizes[n] for n in refetched) / 1e6:.1f} MB, {partial_bytes / 1e6:.1f} MB of it "
        "transferred twice); "
        f"finished files fetched again: {len([n for n in again if n in done_before])}; "
        f"files fetched for the first time: {len(again) - len(refetched)} (goal: at most one file again)"
    )


def _name(log_line: str) -> str:
    return log_line.split("/resolve/")[1].split(maxsplit=1)[0].split("/", 1)[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--shard-mb", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=8)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hf_model_bench.") as tmp:
        work = Path(tmp)
        hub = start_hub(work / "olah")
        try:
            files = safetensors_model(work / "src", shards=args.shards, shard_bytes=1000)
            for i in range(1, args.shards + 1):
                name = f"model-{i:05d}-of-{args.shards:05d}.safetensors"
                files[name] = random_file(work / f"shard{i}.bin", args.shard_mb * 1_000_000 + i * 1000)
            sizes = {n: (p.stat().st_size if isinstance(p, Path) else len(p)) for n, p in files.items()}
            total = sum(sizes.values())
            hub.make_repo(REPO, files)
            print(
                f"repo: {len(sizes)} files, {total / 1e6:.1f} MB, olah at {hub.endpoint}, "
                f"{args.workers} workers"
            )
            plain_t, role_wall, role_dl, nover_dl = [], [], [], []
            for r in range(args.runs):
                order = ("plain", "role", "noverify") if r % 2 == 0 else ("noverify", "role", "plain")
                for kind in order:
                    dest = work / f"{kind}-{r}"
                    if kind == "plain":
                        plain_t.append(plain(hub.endpoint, dest, args.workers))
                    elif kind == "noverify":
                        nover_dl.append(role(hub.endpoint, work, dest, args.workers, verify=False)[1])
                    else:
                        w, d = role(hub.endpoint, work, dest, args.workers)
                        role_wall.append(w)
                        role_dl.append(d)
                    subprocess.run(["rm", "-rf", str(dest)], check=True)

            def mbps(t: float) -> float:
                return total / 1e6 / t

            p, rw, rd = statistics.median(plain_t), statistics.median(role_wall), statistics.median(role_dl)
            print(
                f"plain hf download : {p:6.1f} s  {mbps(p):7.1f} MB/s  "
                f"(runs: {[round(x, 1) for x in plain_t]})"
            )
            print(
                f"role, whole play  : {rw:6.1f} s  {mbps(rw):7.1f} MB/s  "
                f"(runs: {[round(x, 1) for x in role_wall]})"
            )
            print(f"role, download+verify phase: {rd:6.1f} s  {mbps(rd):7.1f} MB/s")
            nv = statistics.median(nover_dl)
            print(
                f"role, download phase with hf_model_verify_sha256 false: {nv:6.1f} s  {mbps(nv):7.1f} MB/s"
            )
            print(
                f"ratio role/plain throughput: whole play {p / rw:.2f}x, "
                f"download+verify phase {p / rd:.2f}x, without sha256 {p / nv:.2f}x (goal >= 0.95x)"
            )
            interrupted(hub, work, work / "interrupted-8", sizes, args.workers)
            interrupted(hub, work, work / "interrupted-1", sizes, 1)
        finally:
            stop_hub(hub)


if __name__ == "__main__":
    main()
