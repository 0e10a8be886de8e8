"""Shared helpers for the gpu_preflight unit tests: load the filter modules and the recorded fixtures."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

import gpu_checks  # noqa: E402  (plugins/module_utils is put on sys.path just above)
import gpu_facts  # noqa: E402
import nccl_env  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
SHARED_H200 = ROOT.parent / "shared" / "fixtures" / "h200x2"
__all__ = ["FIXTURES", "SHARED_H200", "gpu_checks", "gpu_facts", "load_probes", "nccl_env", "shared_file"]


def shared_file(name: str) -> str:
    """A file of ../shared/fixtures/h200x2 exactly as recorded; skip when that folder is absent."""
    path = SHARED_H200 / name
    if not path.is_file():
        pytest.skip(f"real recorded fixture {path} is absent (../shared is not beside this checkout)")
    return path.read_text()


def smi_sections() -> dict[str, str]:
    """smi.txt split at its `+ command` trace lines: command -> the output printed after it."""
    sections: dict[str, str] = {}
    current = None
    for line in shared_file("smi.txt").splitlines(keepends=True):
        if line.startswith("+ "):
            current = line[2:].strip()
            sections[current] = ""
        elif current is not None:
            sections[current] += line
    return sections


def load_probes(name: str | Path) -> dict[str, dict]:
    """A fixture directory in the role format, read as gpu_preflight_fixture_dir is read."""
    folder = Path(name) if isinstance(name, Path) else FIXTURES / name
    probes = {}
    for stdout in sorted(folder.glob("*.stdout")):
        probe = stdout.name[: -len(".stdout")]
        rc_file, err_file = folder / f"{probe}.rc", folder / f"{probe}.stderr"
        rc_text = rc_file.read_text().strip() if rc_file.is_file() else ""
        probes[probe] = {
            "rc": int(rc_text or 0),
            "stdout": stdout.read_text(),
            "stderr": err_file.read_text().strip() if err_file.is_file() else "",
        }
    return probes


def nccl_txt_results() -> dict[str, dict]:
    """nccl.txt (four environments) in the benchmark script's JSON shape: env label -> {results: [...]}."""
    runs: dict[str, dict] = {}
    label = None
    for line in shared_file("nccl.txt").splitlines():
        if line.startswith("== env:"):
            label = line[len("== env:") :].strip() or "default"
            runs[label] = {"results": []}
        match = re.match(r"allreduce (\d+) MiB world=\d+ (\d+) us busbw=([\d.]+) GB/s", line)
        if match and label is not None:
            mib, us, busbw = match.groups()
            runs[label]["results"].append(
                {"bytes": int(mib) * 2**20, "time_us": float(us), "busbw_gbps": float(busbw)}
            )
    return runs
