"""The deploy input contract (module_utils/deploy_inputs.py): pure checks, one refusal per problem."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

import deploy_inputs as di  # noqa: E402 - module_utils is put on sys.path above

SECRET = "sk-unit-planted-0b7e5d"
GOOD = {
    "llm_model_name": "tiny_test",
    "llm_device": "cpu",
    "llm_api_host": "127.0.0.1",
    "llm_api_port": 8000,
    "llm_api_key": SECRET,
    "hf_token": "hf_abc123",
    "llm_engine_env": {"VLLM_LOGGING_LEVEL": "DEBUG"},
    "llm_engine_args": {"max_num_seqs": 8, "compilation_config": {"level": 0}},
    "llm_nccl_env": {"NCCL_DEBUG": "WARN"},
    "llm_model_dir": "/var/lib/llm/models",
    "llm_hf_endpoint": "http://127.0.0.1:8090",
    "llm_plan_context_lengths": [4096],
    "llm_model": {"id": "tiny_test"},
}


def test_good_inputs_pass():
    assert di.input_problems(GOOD) == []


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("llm_deploy_plan_only", "ture"),
        ("llm_deploy_plan_only", 2),
        ("llm_api_port", 0),
        ("llm_api_port", 65536),
        ("llm_api_port", 443),
        ("llm_api_port", True),
        ("llm_tensor_parallel_size", 1.5),
        ("llm_max_model_len", "65536 tokens"),
        ("llm_max_model_len", 2**27),
        ("llm_cpu_kv_cache_gib", 1.5),
        ("llm_start_timeout_minutes", 0),
        ("llm_model_dir", "/var/lib"),
        ("llm_model_dir", "/srv/models/../../etc"),
        ("llm_model_dir", "/srv/my models"),
        ("llm_env_path", "/usr/local/"),
        ("llm_api_host", ""),
        ("llm_api_host", "host;rm"),
        ("llm_api_key", "two words"),
        ("llm_api_key", 'quote"d'),
        ("hf_token", "hf_x\nHF_TOKEN=y"),
        ("llm_hf_endpoint", "http://user:pass@mirror:8090"),
        ("llm_hf_endpoint", "ftp://mirror"),
        ("llm_engine_env", {"X": "a\nb"}),
        ("llm_engine_env", {"VLLM_API_KEY": "x"}),
        ("llm_nccl_env", {"NCCL_P2P_LEVEL": "SYS\n[Service]"}),
        ("llm_engine_args", {"chat_template": "a\nExecStartPre=/bin/sh"}),
        ("llm_engine_args", {"Bad Key": 1}),
        ("llm_engine_args", {"served_model_name": "x"}),
        ("llm_model_revision", "../../x"),
        ("llm_model_name", "../etc/passwd"),
        ("llm_service_user", "daemon"),
        ("llm_served_model_name", "100%"),
    ],
)
def test_each_bad_value_is_refused_by_name(name, value):
    problems = di.input_problems({**GOOD, name: value})
    assert len(problems) >= 1
    assert all(re.match(r"^[a-z_]+=.* is refused( \(entries [^)]+\))?: \S", p) for p in problems)
    assert any(p.startswith(f"{name}=") for p in problems)
    assert not any(SECRET in p for p in problems)


def test_secrets_are_masked_in_refusals():
    problems = di.input_problems({**GOOD, "llm_api_key": SECRET + " x", "hf_token": "hf token"})
    assert problems == [
        'hf_token="<hidden, 8 characters>" is refused: ' + di.INPUTS["hf_token"].fix,
        f'llm_api_key="<hidden, {len(SECRET) + 2} characters>" is refused: ' + di.INPUTS["llm_api_key"].fix,
    ]


def test_unknown_name_suggests_the_closest_input():
    (problem,) = di.input_problems({**GOOD, "llm_deploy_plan_onyl": True})
    assert problem.startswith(
        "llm_deploy_plan_onyl=true is refused: not a deploy input (did you mean llm_deploy_plan_only?"
    )


def test_plan_variables_the_deploy_sets_are_refused_naming_the_deploy_input():
    (problem,) = di.input_problems({**GOOD, "llm_plan_max_model_len": 4096})
    assert "the deploy sets it from llm_max_model_len" in problem


@pytest.mark.parametrize(
    ("host", "public", "key", "ok"),
    [
        ("0.0.0.0", False, SECRET, False),
        ("0.0.0.0", True, "", False),
        ("0.0.0.0", True, "short", False),
        ("0.0.0.0", "yes please", SECRET, False),
        ("0.0.0.0", True, SECRET, True),
        ("::1", False, "", True),
        ("127.0.0.2", False, "", True),
        ("localhost", False, "", True),
        ("10.0.0.5", True, SECRET, True),
    ],
)
def test_public_bind_needs_opt_in_and_a_key(host, public, key, ok):
    problems = di.input_problems({**GOOD, "llm_api_host": host, "llm_api_public": public, "llm_api_key": key})
    assert (not any(p.startswith("llm_api_host=") for p in problems)) is ok


MODEL = {"id": "m", "engine_min_version": "0.19.0", "hf_config": {"max_position_embeddings": 4096}}


@pytest.mark.parametrize(
    ("device", "version", "length", "env", "refused"),
    [
        ("gpu", "0.22.0", None, {}, []),
        ("gpu", "0.18.2", None, {}, ["llm_vllm_version"]),
        ("gpu", "0.40.0", None, {}, ["llm_vllm_version"]),
        ("cpu", "0.40.0", None, {}, []),
        ("gpu", "x.y", None, {}, ["llm_vllm_version"]),
        ("cpu", "0.32.0", 8192, {}, ["llm_max_model_len"]),
        ("cpu", "0.32.0", 8192, {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}, []),
        ("cpu", "0.32.0", 4096, {}, []),
    ],
)
def test_engine_version_and_context_against_the_catalog(device, version, length, env, refused):
    problems = di.engine_problems(MODEL, device, version, length, env)
    assert [p.split("=", 1)[0] for p in problems] == refused


def test_the_docs_list_every_input():
    doc = (ROOT / "docs" / "deploy-inputs.md").read_text()
    assert [n for n in di.INPUTS if f"| `{n}` |" not in doc] == []


def test_every_llm_variable_of_the_bundled_inventories_is_an_input():
    names = set()
    for path in (ROOT / "inventory").rglob("*.yml"):
        data = yaml.safe_load(path.read_text()) or {}
        names |= {k for k in data if isinstance(k, str) and k.startswith("llm_")}
    assert names and [n for n in sorted(names) if n not in di.INPUTS] == []


@pytest.mark.parametrize(
    ("path", "ok"),
    [
        ("/var/lib/llm/models", True),
        ("/srv/models/m@main", True),
        ("/", False),
        ("/usr/local/", False),
        ("/var/lib", False),
        ("/opt", False),
        ("/srv/m/../../etc", False),
        ("/srv/./m", False),
        ("relative", False),
        ("/srv/with space", False),
        (None, False),
    ],
)
def test_own_dir(path, ok):
    assert di.is_own_dir(path) is ok


@pytest.mark.parametrize("repo", ["Qwen/Qwen3-32B", "meta-llama/Llama-3.1-8B-Instruct", "a/b.c-d_e"])
def test_a_repository_id_is_a_deploy_input(repo: str) -> None:
    assert di.input_problems({"llm_model_repo": repo}) == []


@pytest.mark.parametrize(
    "repo", ["Qwen3-32B", "Qwen/Qwen3/32B", "../etc/passwd", "Qwen/..", "Qwen/Qwen3-32B@main", "a/b c", "", 7]
)
def test_a_bad_repository_id_is_refused_naming_the_revision_variable(repo: object) -> None:
    problems = di.input_problems({"llm_model_repo": repo})
    assert len(problems) == 1 and problems[0].startswith("llm_model_repo=")
    assert "is refused: a hub repository id ORG/NAME" in problems[0] and "llm_model_revision" in problems[0]


def test_passthrough_engine_args_drop_what_the_deploy_sets() -> None:
    given = {
        "max-model-len": 99,
        "tensor-parallel-size": 8,
        "moe-backend": "triton",
        "dtype": "bfloat16",
        "seed": 1,
    }
    assert di.passthrough_engine_args(given, ["dtype", "max-num-seqs"]) == {
        "moe-backend": "triton",
        "seed": 1,
    }
    assert (
        set(di.ROLE_OWNED_ARGS) & set(di.passthrough_engine_args(dict.fromkeys(di.ROLE_OWNED_ARGS, 1)))
        == set()
    )
    with pytest.raises(TypeError):
        di.passthrough_engine_args(["moe-backend"])
