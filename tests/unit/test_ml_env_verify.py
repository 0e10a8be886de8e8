"""Unit tests for roles/ml_env/files/ml_env_verify.py, run the way the role runs it (a venv's python)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "roles/ml_env/files/ml_env_verify.py"


def verify(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False)


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
