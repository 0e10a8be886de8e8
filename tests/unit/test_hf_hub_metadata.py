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


def test_gguf_models_count_split_parts_once_and_skip_projectors() -> None:
    names = [
        "UD-Q4_K_XL/GLM-5-UD-Q4_K_XL-00001-of-00002.gguf",
        "UD-Q4_K_XL/GLM-5-UD-Q4_K_XL-00002-of-00002.gguf",
        "Q8_0/GLM-5-Q8_0-00001-of-00003.gguf",
        "model-Q4_K_M.gguf",
        "mmproj-F16.gguf",
        "README.md",
    ]
    assert hub.gguf_models(names) == [
        "Q8_0/GLM-5-Q8_0.gguf",
        "UD-Q4_K_XL/GLM-5-UD-Q4_K_XL.gguf",
        "model-Q4_K_M.gguf",
    ]
    assert hub.gguf_models(names[:2]) == ["UD-Q4_K_XL/GLM-5-UD-Q4_K_XL.gguf"]


@pytest.mark.parametrize(
    ("name", "patterns", "expected"),
    [
        ("UD-Q4_K_XL/a-00001-of-00002.gguf", ["UD-Q4_K_XL/*"], True),
        ("Q8_0/a-00001-of-00002.gguf", ["UD-Q4_K_XL/*"], False),
        ("model.safetensors", None, True),
        ("model.safetensors", [], True),
        ("x/model-Q4_K_M.gguf", ["*Q4_K_M*"], True),
    ],
)
def test_allow_patterns_match_like_the_download(
    name: str, patterns: list[str] | None, expected: bool
) -> None:
    assert hub.allowed(name, patterns) is expected
