"""The host_probes module run as Ansible runs it: a separate Python process with its arguments on stdin."""

from __future__ import annotations

import pytest
from _collection import run_module


def run(args: dict) -> dict:
    return run_module("host_probes", args)


def test_each_probe_reports_in_order_like_a_looped_command() -> None:
    out = run(
        {
            "probes": {"echo": ["sh", "-c", "printf 'a\\nb\\n\\n'; echo err >&2; exit 3"], "true": ["true"]},
            "names": ["true", "echo"],
        }
    )
    assert out["changed"] is False
    assert [r["item"] for r in out["results"]] == ["true", "echo"]
    echo = out["results"][1]
    assert (echo["rc"], echo["stdout"], echo["stderr"]) == (3, "a\nb", "err")


def test_a_missing_command_is_rc_127_and_the_module_does_not_fail() -> None:
    out = run({"probes": {"smi": ["nvidia-smi-not-installed-here"]}, "names": ["smi"]})
    assert "failed" not in out
    assert out["results"][0]["rc"] == 127
    assert "No such file" in out["results"][0]["stderr"]


def test_a_probe_past_its_timeout_is_rc_124() -> None:
    out = run({"probes": {"slow": ["sleep", "5"]}, "names": ["slow"], "timeout": 0.2})
    assert out["results"][0]["rc"] == 124
    assert "timed out" in out["results"][0]["stderr"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"probes": {"a": ["true"]}, "names": ["b"]}, "names ['b'] are not keys"),
        ({"probes": {"a": []}, "names": ["a"]}, "probes ['a'] must each be a non-empty list"),
    ],
)
def test_bad_arguments_fail_naming_the_probe(args: dict, message: str) -> None:
    out = run(args)
    assert out["failed"] is True
    assert message in out["msg"]


def test_report_files_writes_only_what_differs(tmp_path) -> None:
    def write(files: dict) -> dict:
        return run_module("report_files", {"dir": str(tmp_path / "r" / "h"), "files": files})

    assert write({"a.json": "{}\n", "b.md": "x\n"})["written"] == ["a.json", "b.md"]
    assert (tmp_path / "r" / "h" / "b.md").read_text() == "x\n"
    again = write({"a.json": "{}\n", "b.md": "y\n"})
    assert (again["changed"], again["written"]) == (True, ["b.md"])
    assert write({"a.json": "{}\n", "b.md": "y\n"})["changed"] is False
    assert "without a slash" in write({"../x": ""})["msg"]
