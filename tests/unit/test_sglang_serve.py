"""sglang_service's entry point (roles/sglang_service/files/sglang_serve.py): the API key from the
environment is appended in-process, never taken from argv, and redacted from the log. SGLang itself is not
imported: main() takes the runner as an argument."""

from __future__ import annotations

import importlib.util
import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

SHIM = Path(__file__).resolve().parents[2] / "roles" / "sglang_service" / "files" / "sglang_serve.py"
_SPEC = importlib.util.spec_from_file_location("sglang_serve_under_test", SHIM)
assert _SPEC is not None and _SPEC.loader is not None
shim = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(shim)

ARGS = ["--model-path", "/srv/m", "--port", "30000", "--enable-metrics"]


@pytest.fixture
def restore_record_factory() -> Iterator[None]:
    factory = logging.getLogRecordFactory()
    try:
        yield
    finally:
        logging.setLogRecordFactory(factory)


def test_the_key_from_the_environment_is_appended() -> None:
    argv = shim.build_argv(ARGS, {"LLMDEPLOY_API_KEY": "sk-test-1"})
    assert argv == [*ARGS, "--api-key", "sk-test-1"]


def test_without_a_key_the_arguments_pass_unchanged() -> None:
    assert shim.build_argv(ARGS, {}) == ARGS
    assert shim.build_argv(ARGS, {"LLMDEPLOY_API_KEY": ""}) == ARGS


@pytest.mark.parametrize("word", ["--api-key", "--api-key=sk-planted-5", "--admin-api-key"])
def test_a_key_on_the_command_line_is_refused(word: str) -> None:
    with pytest.raises(shim.ShimError, match="on the command line is refused") as err:
        shim.build_argv([*ARGS, word, "sk-planted-5"], {})
    assert "sk-planted-5" not in str(err.value)


@pytest.mark.parametrize("key", ["sk x\n", " sk", "sk\x00"])
def test_a_key_with_whitespace_or_control_characters_is_refused(key: str) -> None:
    with pytest.raises(shim.ShimError, match="LLMDEPLOY_API_KEY holds whitespace"):
        shim.build_argv(ARGS, {"LLMDEPLOY_API_KEY": key})


def test_main_runs_the_runner_with_the_key(restore_record_factory: None) -> None:
    seen: list[list[str]] = []
    assert shim.main(ARGS, {"LLMDEPLOY_API_KEY": "sk-test-2"}, seen.append) == 0
    assert seen == [[*ARGS, "--api-key", "sk-test-2"]]


def test_main_refuses_with_status_2_and_runs_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[list[str]] = []
    assert shim.main([*ARGS, "--api-key=sk-planted-6"], {}, seen.append) == 2
    assert seen == []
    err = capsys.readouterr().err
    assert "--api-key on the command line is refused" in err and "sk-planted-6" not in err


def test_the_key_is_redacted_from_log_records(
    restore_record_factory: None, caplog: pytest.LogCaptureFixture
) -> None:
    def runner(argv: list[str]) -> None:
        # What SGLang 0.5.17 logs at start (entrypoints/engine.py: logger.info(f"{server_args=}")).
        engine_log = logging.getLogger("sglang.srt.entrypoints.engine")
        engine_log.warning("server_args=ServerArgs(api_key=%r)", argv[-1])

    with caplog.at_level(logging.INFO):
        assert shim.main(ARGS, {"LLMDEPLOY_API_KEY": "sk-test-3"}, runner) == 0
    assert "sk-test-3" not in caplog.text
    assert "api_key='<redacted>'" in caplog.text


def test_run_launch_server_runs_the_module_as_main(tmp_path: Path) -> None:
    # A stand-in package `sglang.launch_server` that records what `python -m` would give it, and whether the
    # key shows in the process's command line as the kernel keeps it (what `ps` and other users see).
    package = tmp_path / "sglang"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "launch_server.py").write_text(
        "import json, sys\n"
        "if __name__ == '__main__':\n"
        "    cmdline = open('/proc/self/cmdline', 'rb').read()\n"
        "    print(json.dumps({'argv': sys.argv[1:], 'file': sys.argv[0].endswith('launch_server.py'),\n"
        "                      'key_in_cmdline': b'sk-test-4' in cmdline}))\n"
    )
    result = subprocess.run(
        [sys.executable, str(SHIM), *ARGS],
        env={"PYTHONPATH": str(tmp_path), "LLMDEPLOY_API_KEY": "sk-test-4", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(result.stdout) == {
        "argv": [*ARGS, "--api-key", "sk-test-4"],
        "file": True,
        "key_in_cmdline": False,
    }
