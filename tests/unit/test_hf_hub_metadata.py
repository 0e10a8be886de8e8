"""Unit tests of the pure parts of plugins/module_utils/hf_hub_metadata.py (the network part runs against
olah in tests/integration/test_plan_by_repo.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugins" / "module_utils"))

import hf_hub_metadata as hub


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("Qwen/Qwen3-14B", ("Qwen/Qwen3-14B", "main")),
        ("nvidia/Kimi-K2.5-NVFP4@v1.0", ("nvidia/Kimi-K2.5-NVFP4", "v1.0")),
        ("a/b@" + "0" * 40, ("a/b", "0" * 40)),
    ],
)
def test_model_spec(spec: str, expected: tuple[str, str]) -> None:
    assert hub.parse_model_spec(spec) == expected


@pytest.mark.parametrize("spec", ["Qwen3-14B", "a/b/c", "a/b@", "a/b@x@y", "../x", "a /b"])
def test_bad_model_spec(spec: str) -> None:
    with pytest.raises(hub.HubError, match="is not ORG/NAME"):
        hub.parse_model_spec(spec)


def test_weight_files_prefer_safetensors_then_bin_then_gguf() -> None:
    both = {"a.safetensors": 1, "pytorch_model.bin": 2, "config.json": 3}
    assert hub.weight_files(both) == {"a.safetensors": 1}
    assert hub.weight_files({"pytorch_model-00001-of-00002.bin": 5, "x.txt": 1}) == {
        "pytorch_model-00001-of-00002.bin": 5
    }
    assert hub.weight_files({"UD-Q4_K_XL/m-00001-of-00002.gguf": 7}) == {
        "UD-Q4_K_XL/m-00001-of-00002.gguf": 7
    }
    assert hub.weight_files({"config.json": 1}) == {}


def test_token_comes_from_the_environment_or_its_file(tmp_path: Path) -> None:
    assert hub.token_from_env({"HF_TOKEN": " hf_abc \n"}) == "hf_abc"
    token = tmp_path / "token"
    token.write_text("hf_from_file\n")
    assert hub.token_from_env({"HF_TOKEN_PATH": str(token)}) == "hf_from_file"
    assert hub.token_from_env({"HF_TOKEN_PATH": str(tmp_path / "missing")}) == ""
