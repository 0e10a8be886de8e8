"""Unit tests for plugins/module_utils/vllm_args.py (vLLM argv from data, systemd quoting)."""

from __future__ import annotations

import importlib.util
import shlex
from pathlib import Path

import _collection
import pytest
from ansible.errors import AnsibleFilterError

_PATH = Path(__file__).resolve().parents[2] / "plugins" / "module_utils" / "vllm_args.py"
_SPEC = importlib.util.spec_from_file_location("vllm_args_under_test", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
va = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(va)


def test_options_in_order_with_dashes() -> None:
    argv = va.vllm_args({"model": "/srv/m", "tensor_parallel_size": 2, "max-model-len": 256})
    assert argv == ["--model", "/srv/m", "--tensor-parallel-size", "2", "--max-model-len", "256"]


def test_none_and_false_are_left_out_true_is_a_flag() -> None:
    argv = va.vllm_args(
        {"kv_cache_dtype": None, "trust_remote_code": False, "enable_auto_tool_choice": True, "port": 0}
    )
    assert argv == ["--enable-auto-tool-choice", "--port", "0"]


def test_float_list_and_mapping_values() -> None:
    argv = va.vllm_args(
        {
            "gpu_memory_utilization": 0.92,
            "served_model_name": ["a", "b"],
            "hf_overrides": {"b": 1, "a": "x"},
            "empty_list": [],
        }
    )
    assert argv == [
        "--gpu-memory-utilization",
        "0.92",
        "--served-model-name",
        "a",
        "b",
        "--hf-overrides",
        '{"a":"x","b":1}',
    ]


def test_extra_words_appended_verbatim() -> None:
    assert va.vllm_args({"port": 8000}, ["--seed", "1", "--max-num-seqs=4"]) == [
        "--port",
        "8000",
        "--seed",
        "1",
        "--max-num-seqs=4",
    ]


@pytest.mark.parametrize("key", ["api_key", "api-key", "hf_token"])
def test_secret_options_refused(key: str) -> None:
    with pytest.raises(AnsibleFilterError, match=r"vllm_args: .*secret.*vllm_service_"):
        va.vllm_args({key: "s3cret"})


@pytest.mark.parametrize("raw", ["--api-key", "--api_key=s3cret", "--hf-token=x"])
def test_secret_in_extra_refused(raw: str) -> None:
    with pytest.raises(AnsibleFilterError, match="secret"):
        va.vllm_args({}, [raw, "s3cret"])


@pytest.mark.parametrize(
    ("options", "extra", "message"),
    [
        ("--model x", None, "expected a mapping"),
        ({"--model": "x"}, None, "option names"),
        ({"Model": "x"}, None, "option names"),
        ({"model": object()}, None, "expected a string, a number"),
        ({"served_model_name": [True]}, None, "boolean inside a list"),
        ({}, "--seed 1", "list of strings"),
        ({}, [1], "list of strings"),
    ],
)
def test_bad_input_names_the_filter(options: object, extra: object, message: str) -> None:
    with pytest.raises(AnsibleFilterError, match=f"vllm_args: .*{message}"):
        va.vllm_args(options, extra)


def _systemd_split(line: str) -> list[str]:
    """Undo systemd_exec_args for the subset it emits (double quotes, backslash escapes, %% and $$)."""
    words = shlex.split(line.replace("\\n", "\n"), posix=True)
    return [w.replace("%%", "%").replace("$$", "$") for w in words]


def test_exec_args_plain_words_unquoted() -> None:
    line = va.systemd_exec_args(["/opt/ml-env/bin/python", "-m", "vllm.entrypoints.openai.api_server"])
    assert line == "/opt/ml-env/bin/python -m vllm.entrypoints.openai.api_server"


@pytest.mark.parametrize(
    "word",
    ['{"a":"x","b":1}', "with space", "100%", "$HOME", "back\\slash", 'q"uote', "two\nlines", ""],
)
def test_exec_args_round_trip(word: str) -> None:
    line = va.systemd_exec_args(["/bin/prog", word])
    assert _systemd_split(line) == ["/bin/prog", word]
    # systemd would expand a lone % or $; every one must be doubled.
    assert "%" not in line.replace("%%", "")
    assert "$" not in line.replace("$$", "")


@pytest.mark.parametrize("argv", [[], "x", ["relative/prog"], ["/bin/prog", 3]])
def test_exec_args_bad_input(argv: object) -> None:
    with pytest.raises(AnsibleFilterError, match="systemd_exec_args: "):
        va.systemd_exec_args(argv)


@pytest.mark.parametrize(
    ("value", "quoted"),
    [
        ("0|1", '"0|1"'),
        (1, '"1"'),
        (True, '"1"'),
        ('a"b', '"a\\"b"'),
        ("$X `y` \\z", '"\\$X \\`y\\` \\\\z"'),
    ],
)
def test_env_value_quoting(value: object, quoted: str) -> None:
    assert va.systemd_env_value(value) == quoted


@pytest.mark.parametrize("value", ["a\nb", None, ["x"]])
def test_env_value_bad_input(value: object) -> None:
    with pytest.raises(AnsibleFilterError, match="systemd_env_value: "):
        va.systemd_env_value(value)


def test_env_name() -> None:
    assert va.systemd_env_name("NCCL_IB_DISABLE") == "NCCL_IB_DISABLE"
    for bad in ("1X", "A-B", "", None):
        with pytest.raises(AnsibleFilterError, match="systemd_env_name: "):
            va.systemd_env_name(bad)


def test_filter_module_maps_every_filter() -> None:
    assert set(_collection.filters("vllm_args")) == {
        "vllm_args",
        "systemd_exec_args",
        "systemd_env_value",
        "systemd_env_name",
    }


def test_secret_refusal_does_not_echo_the_secret() -> None:
    with pytest.raises(AnsibleFilterError) as caught:
        va.vllm_args({}, ["--api-key=sk-planted-5e1f"])
    assert "sk-planted-5e1f" not in str(caught.value) and "--api-key=<hidden>" in str(caught.value)
