"""Unit tests for plugins/module_utils/sglang_args.py (SGLang argv from data) and its filter plugin."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import _collection
import pytest
import yaml
from ansible.errors import AnsibleFilterError

ROOT = Path(__file__).resolve().parents[2]
_PATH = ROOT / "plugins" / "module_utils" / "sglang_args.py"
_SPEC = importlib.util.spec_from_file_location("sglang_args_under_test", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
sa = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(sa)


def test_options_in_order_dashes_and_values() -> None:
    argv = sa.sglang_args(
        {"model_path": "/srv/m", "tp-size": 2, "mem_fraction_static": 0.85, "kv-cache-dtype": "fp8_e4m3"}
    )
    assert argv == [
        "--model-path",
        "/srv/m",
        "--tp-size",
        "2",
        "--mem-fraction-static",
        "0.85",
        "--kv-cache-dtype",
        "fp8_e4m3",
    ]


def test_null_and_false_are_dropped_true_is_a_bare_flag() -> None:
    argv = sa.sglang_args(
        {"attention-backend": None, "trust-remote-code": False, "enable-metrics": True, "port": 0},
    )
    assert argv == ["--enable-metrics", "--port", "0"]


def test_lists_repeat_values_mappings_become_compact_json() -> None:
    argv = sa.sglang_args(
        {"model-path": "/m"},
        {"cuda-graph-bs-decode": [1, 2, 4], "json_model_override_args": {"b": 1, "a": "x"}, "empty": []},
    )
    assert argv == [
        "--model-path",
        "/m",
        "--cuda-graph-bs-decode",
        "1",
        "2",
        "4",
        "--json-model-override-args",
        '{"a":"x","b":1}',
    ]


def test_extras_come_after_the_role_options_in_their_order() -> None:
    argv = sa.sglang_args({"port": 30000}, {"chunked_prefill_size": 8192, "enable-torch-compile": True})
    assert argv == ["--port", "30000", "--chunked-prefill-size", "8192", "--enable-torch-compile"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        # A role-owned key is owned whatever its value, null included.
        ({"attention-backend": "fa3"}, "extra option attention-backend is set by the role"),
        ({"tp_size": 4}, "extra option tp-size is set by the role"),
        # SGLang's aliases of role-owned options (server_args.py Arg(aliases=...)).
        ({"tensor-parallel-size": 4}, "tensor-parallel-size (SGLang's alias of tp-size)"),
        ({"model": "/other"}, "model (SGLang's alias of model-path)"),
        ({"data_parallel_size": 2}, "data-parallel-size (SGLang's alias of dp-size)"),
    ],
)
def test_extras_may_not_set_role_owned_options(extra: dict[str, object], message: str) -> None:
    options = {"model-path": "/m", "tp-size": 1, "dp-size": 1, "attention-backend": None}
    with pytest.raises(AnsibleFilterError, match=r"^sglang_args: ") as err:
        sa.sglang_args(options, extra)
    assert message in str(err.value)


def test_reserved_names_and_the_deprecated_alias_are_refused() -> None:
    options = {"cuda-graph-backend-decode": "disabled", "cuda-graph-backend-prefill": "disabled"}
    with pytest.raises(AnsibleFilterError, match="cuda-graph-config is set by the role"):
        sa.sglang_args(options, {"cuda_graph_config": {"decode": {"backend": "full"}}}, ["cuda-graph-config"])
    with pytest.raises(AnsibleFilterError) as err:
        sa.sglang_args(options, {"disable-cuda-graph": True})
    assert "disable-cuda-graph (SGLang's alias of cuda-graph-backend-decode)" in str(err.value)


@pytest.mark.parametrize("key", ["api-key", "api_key", "admin-api-key", "hf_token"])
def test_secrets_are_refused_without_showing_the_value(key: str) -> None:
    for options, extra in (({key: "sk-planted-77"}, {}), ({"port": 1}, {key: "sk-planted-77"})):
        with pytest.raises(AnsibleFilterError, match="would put a secret in argv") as err:
            sa.sglang_args(options, extra)
        assert "sk-planted-77" not in str(err.value)


@pytest.mark.parametrize(
    ("options", "extra", "reserved", "message"),
    [
        (["--model-path", "/m"], None, (), "expected a mapping of option names"),
        ({"--model-path": "/m"}, None, (), "no leading --"),
        ({"Model": "/m"}, None, (), "lower-case words"),
        ({"port": 1}, ["--x"], (), "extra options must be a mapping"),
        ({"port": 1}, {"x": object()}, (), "expected a string, a number"),
        ({"port": 1}, {"x": [True]}, (), "a boolean inside a list"),
        ({"port": 1}, {}, "cuda-graph-config", "reserved must be a list"),
        ({"port": 1}, {}, ["--bad"], "reserved option"),
    ],
)
def test_bad_input_names_the_plugin_and_the_value(
    options: object, extra: object, reserved: object, message: str
) -> None:
    with pytest.raises(AnsibleFilterError, match=r"^sglang_args: ") as err:
        sa.sglang_args(options, extra, reserved)  # type: ignore[arg-type]
    assert message in str(err.value)
    assert "(got " in str(err.value)


def test_filter_module_maps_the_filter() -> None:
    filters = _collection.filters("sglang_args")
    assert set(filters) == {"sglang_args"}
    argv = filters["sglang_args"]({"tp-size": 2}, {"log-level": "info"})
    assert argv == ["--tp-size", "2", "--log-level", "info"]


def test_the_role_names_a_variable_for_every_option_it_owns() -> None:
    variables = yaml.safe_load((ROOT / "roles" / "sglang_service" / "vars" / "main.yml").read_text())
    owned = set(variables["_sglang_service_options"])
    named = variables["_sglang_service_option_vars"]
    assert owned <= set(named)
    # Every alias the filter knows maps to a role-owned option, and the role names its variable.
    for alias, target in sa.ALIASES.items():
        assert target in owned and alias in named, alias
    for secret in sa.SECRET_OPTIONS:
        assert secret in named, secret
