"""path_states (read on the host) and path_needs_change (judged on the controller)."""

from __future__ import annotations

import grp as grp_module
import hashlib
import json
import os
import pwd as pwd_module
import sys
from pathlib import Path

import pytest
from _collection import ROOT, filters, run_module

sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))
from path_states import accounts, path_needs_change, path_states


@pytest.fixture
def tree(tmp_path: Path) -> dict:
    (tmp_path / "d").mkdir(mode=0o750)
    os.chmod(tmp_path / "d", 0o750)
    (tmp_path / "d" / "f").write_text("hello\n")
    os.chmod(tmp_path / "d" / "f", 0o644)
    return {
        "root": tmp_path,
        "states": path_states([str(tmp_path / "d"), str(tmp_path / "d" / "f"), str(tmp_path / "x")]),
    }


def test_states_read_type_mode_owner_and_checksum(tree: dict) -> None:
    root, states = tree["root"], tree["states"]
    f = states[str(root / "d" / "f")]
    assert f["type"] == "file" and f["mode"] == "0644"
    assert f["sha1"] == hashlib.sha1(b"hello\n").hexdigest()
    assert states[str(root / "d")]["type"] == "directory" and "sha1" not in states[str(root / "d")]
    assert states[str(root / "x")] == {"exists": False}


def test_a_path_as_asked_needs_no_change(tree: dict) -> None:
    root, states = tree["root"], tree["states"]
    me = states[str(root / "d" / "f")]["owner"]
    assert not path_needs_change(states, str(root / "d" / "f"), mode="0644", owner=me, content="hello\n")
    assert not path_needs_change(states, str(root / "d"), state="directory", mode=0o750)


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("f", {"content": "hello"}),  # one byte less: another checksum
        ("f", {"mode": "0755"}),
        ("f", {"owner": "no-such-owner"}),
        ("f", {"group": "no-such-group"}),
        ("f", {"state": "directory"}),
        ("f", {"sha1": "0" * 40}),
        ("d", {"state": "file"}),
        ("x", {}),
        ("not-probed", {}),
    ],
)
def test_any_difference_needs_the_task(tree: dict, name: str, kwargs: dict) -> None:
    path = str(tree["root"] / "d" / name) if name in ("f", "not-probed") else str(tree["root"] / name)
    assert path_needs_change(tree["states"], path, **kwargs)


def test_the_filter_names_itself_on_bad_input() -> None:
    needs_change = filters("path_states")["path_needs_change"]
    with pytest.raises(Exception, match="path_needs_change: states must be"):
        needs_change(["not", "a", "dict"], "/etc/x")
    with pytest.raises(Exception, match="path_needs_change: state must be file or directory"):
        needs_change({}, "/etc/x", state="link")


def test_the_module_reads_in_one_call_and_reports_relative_paths(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")

    def run(args: dict) -> dict:
        return run_module("path_states", args)

    out = run({"paths": [str(tmp_path / "f"), str(tmp_path / "g")]})
    assert out["changed"] is False
    assert out["paths"][str(tmp_path / "f")]["sha1"] == hashlib.sha1(b"x").hexdigest()
    assert out["paths"][str(tmp_path / "g")] == {"exists": False}
    assert run({"paths": ["etc/x"]})["paths"]["etc/x"] == {"exists": False, "error": "not an absolute path"}


def test_a_secret_file_is_compared_through_the_key_and_its_checksum_is_not_returned(tmp_path: Path) -> None:
    (tmp_path / "env").write_text("VLLM_API_KEY=s3cret\n")
    path, key = str(tmp_path / "env"), "k" * 32
    states = path_states([path], secret_paths=[path], secret_key=key)
    assert "sha1" not in states[path]
    assert hashlib.sha1(b"VLLM_API_KEY=s3cret\n").hexdigest() not in json.dumps(states)
    assert not path_needs_change(states, path, content="VLLM_API_KEY=s3cret\n", secret_key=key)
    assert path_needs_change(states, path, content="VLLM_API_KEY=other\n", secret_key=key)
    assert path_needs_change(states, path, content="VLLM_API_KEY=s3cret\n", secret_key="x" * 32)


@pytest.mark.parametrize("secret", [False, True])
def test_a_copy_is_judged_against_its_source(tmp_path: Path, secret: bool) -> None:
    for name, text in (("src", "a\n"), ("same", "a\n"), ("other", "b\n")):
        (tmp_path / name).write_text(text)
    paths = [str(tmp_path / n) for n in ("src", "same", "other", "missing")]
    states = path_states(paths, secret_paths=paths if secret else [], secret_key="k" * 16)
    src = paths[0]
    assert not path_needs_change(states, paths[1], same_content_as=src)
    assert path_needs_change(states, paths[2], same_content_as=src)
    assert path_needs_change(states, paths[1], same_content_as=paths[3])


def test_accounts_read_users_with_their_group_and_leave_out_absent_ones() -> None:
    me = pwd_module.getpwuid(os.getuid())
    found = accounts(
        [me.pw_name, "no-such-user-xyz"], [grp_module.getgrgid(me.pw_gid).gr_name, "no-such-group-xyz"]
    )
    assert list(found["users"]) == [me.pw_name]
    assert found["users"][me.pw_name]["home"] == me.pw_dir
    assert found["users"][me.pw_name]["group"] == grp_module.getgrgid(me.pw_gid).gr_name
    assert list(found["groups"]) == [grp_module.getgrgid(me.pw_gid).gr_name]


def test_links_are_followed_and_marked(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "to-d").symlink_to(tmp_path / "d")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    states = path_states([str(tmp_path / "to-d"), str(tmp_path / "d"), str(tmp_path / "dangling")])
    assert states[str(tmp_path / "to-d")]["type"] == "directory" and states[str(tmp_path / "to-d")]["islink"]
    assert not states[str(tmp_path / "d")]["islink"]
    assert states[str(tmp_path / "to-d")]["link_target"] == str(tmp_path / "d")
    assert states[str(tmp_path / "dangling")] == {
        "exists": False,
        "islink": True,
        "link_target": str(tmp_path / "nowhere"),
    }
