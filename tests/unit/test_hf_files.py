"""Unit tests of plugins/module_utils/hf_files.py (pure functions)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugins" / "module_utils"))

import _collection
import hf_files as hf

GIB = 1 << 30
FILES = [
    {"path": "config.json", "size": 100, "sha256": None},
    {"path": "model-00001-of-00002.safetensors", "size": 4 * GIB, "sha256": "a" * 64},
    {"path": "model-00002-of-00002.safetensors", "size": 2 * GIB, "sha256": "b" * 64},
]


def test_disk_requirement_counts_only_missing_files_plus_margin() -> None:
    present = {"model-00001-of-00002.safetensors": 4 * GIB, "config.json": 7}  # config.json truncated
    r = hf.hf_disk_requirement(FILES, present, free_bytes=2 * GIB, margin_bytes=GIB)
    assert r["total_bytes"] == 6 * GIB + 100
    assert r["present_bytes"] == 4 * GIB
    assert r["to_fetch_bytes"] == 2 * GIB + 100
    assert r["required_bytes"] == 3 * GIB + 100
    assert r["missing_bytes"] == GIB + 100
    assert r["ok"] is False
    assert hf.hf_disk_requirement(FILES, present, free_bytes=4 * GIB, margin_bytes=GIB)["ok"] is True


def test_disk_requirement_accepts_stat_dicts() -> None:
    present = {p["path"]: {"size": p["size"], "mtime_ns": 1} for p in FILES}
    r = hf.hf_disk_requirement(FILES, present, free_bytes=0)
    assert r["to_fetch_bytes"] == 0 and r["ok"] is True


def test_disk_requirement_adds_merged_size_of_split_gguf() -> None:
    parts = [{"path": f"Q4/m-{i:05d}-of-00003.gguf", "size": 10 * GIB} for i in (1, 2, 3)]
    r = hf.hf_disk_requirement(parts, {}, free_bytes=50 * GIB)
    assert (
        r["merged_bytes"] == 30 * GIB and r["required_bytes"] == 60 * GIB and r["missing_bytes"] == 10 * GIB
    )
    assert hf.hf_disk_requirement(parts, {}, free_bytes=50 * GIB, gguf_merge=False)["ok"] is True
    # Once merged, the merged file no longer needs room.
    done = {p["path"]: p["size"] for p in parts} | {"Q4/m.gguf": 30 * GIB}
    assert hf.hf_disk_requirement(parts, done, free_bytes=0)["required_bytes"] == 0


@pytest.mark.parametrize("bad", [-1, "10", 1.5])
def test_disk_requirement_rejects_bad_sizes(bad: object) -> None:
    with pytest.raises(AnsibleFilterError, match="hf_disk_requirement"):
        hf.hf_disk_requirement(FILES, {}, free_bytes=bad)  # type: ignore[arg-type]


def test_disk_requirement_rejects_bad_listing() -> None:
    with pytest.raises(AnsibleFilterError, match="integer 'size'"):
        hf.hf_disk_requirement([{"path": "x"}], {}, 0)


def test_split_gguf_groups_and_missing_parts() -> None:
    groups = hf.hf_split_gguf_groups(
        [
            "UD-Q4_K_XL/GLM-5-UD-Q4_K_XL-00001-of-00003.gguf",
            "UD-Q4_K_XL/GLM-5-UD-Q4_K_XL-00003-of-00003.gguf",
            "a.gguf",
        ]
    )
    (g,) = groups.values()
    assert g["first"] == "UD-Q4_K_XL/GLM-5-UD-Q4_K_XL-00001-of-00003.gguf"
    assert g["merged"] == "UD-Q4_K_XL/GLM-5-UD-Q4_K_XL.gguf"
    assert g["missing"] == ["UD-Q4_K_XL/GLM-5-UD-Q4_K_XL-00002-of-00003.gguf"]
    assert hf.hf_split_gguf_groups(["model.safetensors"]) == {}


def test_split_gguf_conflicting_counts() -> None:
    with pytest.raises(AnsibleFilterError, match="parts"):
        hf.hf_split_gguf_groups(["m-00001-of-00002.gguf", "m-00002-of-00003.gguf", "m-00001-of-00003.gguf"])


def test_lfs_pointer_detection() -> None:
    pointer = "version https://git-lfs.github.com/spec/v1\noid sha256:" + "0" * 64 + "\nsize 12\n"
    assert hf.hf_is_lfs_pointer(pointer) is True
    assert hf.hf_is_lfs_pointer(pointer.encode()) is True
    assert hf.hf_is_lfs_pointer(b"GGUF\x03\x00\x00\x00") is False
    with pytest.raises(AnsibleFilterError):
        hf.hf_is_lfs_pointer(12)  # type: ignore[arg-type]


def test_verify_files_reports_each_problem() -> None:
    local = {
        "config.json": {"size": 100},
        "model-00001-of-00002.safetensors": {"size": 4 * GIB, "sha256": "f" * 64},
    }
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00003-of-00003.safetensors"}}
    problems = {p["path"]: p["problem"] for p in hf.hf_verify_files(FILES, local, index)}
    assert problems["model-00001-of-00002.safetensors"].startswith("sha256 ")
    assert problems["model-00002-of-00002.safetensors"] == "missing"
    assert problems["model-00003-of-00003.safetensors"] == "named by the index but not in the repository"
    assert "config.json" not in problems


def test_verify_files_clean_copy_and_pointer() -> None:
    local = {f["path"]: {"size": f["size"], "sha256": f["sha256"]} for f in FILES}
    assert hf.hf_verify_files(FILES, local, {"weight_map": {"x": "model-00002-of-00002.safetensors"}}) == []
    local["model-00002-of-00002.safetensors"]["head"] = b"version https://git-lfs.github.com/spec/v1\n"
    (p,) = hf.hf_verify_files(FILES, local)
    assert p["problem"].startswith("Git-LFS pointer")
    assert hf.hf_verify_files(FILES, local | {"model-00002-of-00002.safetensors": {"size": 1}})[0][
        "problem"
    ] == (f"size 1 != expected {2 * GIB}")


def test_marker_current() -> None:
    marker = {
        "format": 1,
        "repo": "org/m",
        "revision": "c" * 40,
        "files": [{"path": "a", "size": 3, "mtime_ns": 5}, {"path": "b", "size": 4}],
    }
    local = {"a": {"size": 3, "mtime_ns": 5}, "b": 4}
    assert hf.hf_marker_current(marker, "org/m", "c" * 40, local) is True
    assert hf.hf_marker_current(marker, "org/m", "d" * 40, local) is False
    assert hf.hf_marker_current(marker, "org/other", "c" * 40, local) is False
    assert (
        hf.hf_marker_current(marker, "org/m", "c" * 40, {**local, "a": {"size": 3, "mtime_ns": 6}}) is False
    )
    assert hf.hf_marker_current(marker, "org/m", "c" * 40, {"a": {"size": 3, "mtime_ns": 5}}) is False
    assert hf.hf_marker_current(None, "org/m", "c" * 40, local) is False
    assert hf.hf_marker_current({**marker, "format": 0}, "org/m", "c" * 40, local) is False


def test_prune_candidates_never_the_deployed_dir() -> None:
    markers = [
        [{"repo": "o/a", "revision": "1", "total_bytes": 10}, "/m/a-old"],
        [{"repo": "o/a", "revision": "2", "total_bytes": 20}, "/m/a-new"],
        [{"repo": "o/b", "total_bytes": 30}, "/m"],  # above the deployed dir
        {"dir": "/m/a-new/sub", "total_bytes": 1},  # inside it
        {"dir": "/m/c", "total_bytes": 5, "repo": "o/c", "revision": "9"},
    ]
    out = hf.hf_prune_candidates(markers, ["/m/a-new/"])
    assert [c["dir"] for c in out] == ["/m/a-old", "/m/c"]
    assert sum(c["bytes"] for c in out) == 15
    with pytest.raises(AnsibleFilterError, match="keep_dirs"):
        hf.hf_prune_candidates(markers, [])
    with pytest.raises(AnsibleFilterError, match="marker"):
        hf.hf_prune_candidates(["x"], ["/m/a"])


def test_sync_plan_downloads_once_per_host_group() -> None:
    hosts = ["gpu1", "gpu2", "gpu3"]
    assert hf.hf_sync_plan(hosts, "gpu2", False) == {"gpu1": "sync", "gpu2": "download", "gpu3": "sync"}
    assert hf.hf_sync_plan(hosts, "gpu1", True) == {"gpu1": "download", "gpu2": "shared", "gpu3": "shared"}
    assert list(hf.hf_sync_plan(["one"], "one", False).values()) == ["download"]
    with pytest.raises(AnsibleFilterError, match="hf_model_download_host"):
        hf.hf_sync_plan(hosts, "gpu9", False)
    with pytest.raises(AnsibleFilterError, match="no hosts"):
        hf.hf_sync_plan([], "gpu1", False)


def test_filter_module_maps_every_filter() -> None:
    names = _collection.filters("hf_files")
    assert set(names) == {n for n in dir(hf) if n.startswith("hf_") and callable(getattr(hf, n))}
