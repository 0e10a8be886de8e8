"""Unit tests for roles/ml_env/files/ml_env_verify.py, run the way the role runs it (a venv's python)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "roles/ml_env/files/ml_env_verify.py"


def verify(*args: str, python: str = sys.executable) -> subprocess.CompletedProcess[str]:
    return subprocess.run([python, str(SCRIPT), *args], capture_output=True, text=True, check=False)


def test_versions_are_reported_and_compared() -> None:
    ok = verify("--expect", f"pytest={pytest.__version__}", "json")
    assert ok.returncode == 0, ok.stderr
    report = json.loads(ok.stdout)
    assert report["modules"]["pytest"] == pytest.__version__
    assert report["prefix"] == sys.prefix
    bad = verify("--expect", "pytest=0.0.1")
    assert bad.returncode == 1
    assert f"pytest.__version__ is '{pytest.__version__}', expected '0.0.1'" in bad.stderr


def test_local_version_tags_are_ignored_in_the_comparison() -> None:
    assert verify("--expect", f"pytest={pytest.__version__}+cu130").returncode == 0


def test_failed_import_names_module_and_error() -> None:
    res = verify("no_such_module_here")
    assert res.returncode == 1
    assert "import no_such_module_here failed: ModuleNotFoundError" in res.stderr


def test_file_check_counts_recorded_files() -> None:
    res = verify("--files")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["files_checked"] > 1000


def _dist(site: Path, name: str, files: dict[str, int]) -> None:
    info = site / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    rows = [f"{path},sha256=x,{size}" for path, size in files.items()]
    rows += [f"{info.name}/METADATA,sha256=x,{(info / 'METADATA').stat().st_size}", f"{info.name}/RECORD,,"]
    (info / "RECORD").write_text("\n".join(rows) + "\n")


def test_a_path_two_distributions_install_is_sound_when_it_matches_either(tmp_path: Path) -> None:
    # Seen on the H100 with vLLM 0.33.0's wheelhouse: torch-c-dlpack-ext and another wheel both install a
    # top-level build_backend.py; the one installed last wins and the other's RECORD no longer matches.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python3*/site-packages"))
    (site / "build_backend.py").write_text("x" * 100)
    _dist(site, "first", {"build_backend.py": 40})
    _dist(site, "second", {"build_backend.py": 100})
    python = str(venv / "bin/python")
    ok = verify("--files", python=python)
    assert ok.returncode == 0, ok.stderr
    (site / "build_backend.py").write_text("x" * 7)
    bad = verify("--files", python=python)
    assert bad.returncode == 1
    assert "build_backend.py has 7 bytes, RECORD says " in bad.stderr
    assert "40 (first 1.0)" in bad.stderr
    assert "100 (second 1.0)" in bad.stderr
