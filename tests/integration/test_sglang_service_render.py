"""sglang_service: the SGLang command, unit and environment it renders, and its preflight refusals.

Runs the real role with ansible-playbook against localhost, like test_vllm_service_preflight.py: the
refusals stop in the preflights (assertions only), and the render runs the whole role in check mode on this
host as on a fresh one (no user, no unit: nothing is changed), with --diff showing the unit it would write.
The environment file holds secrets, so the role never shows it (no_log, no diff); the same play then renders
vllm_service's environment and unit templates into a temporary directory with the variables sglang_service
passes to vllm_service, read from roles/sglang_service/tasks/main.yml itself.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "sglang_service"
VLLM_ROLE = ROOT / "roles" / "vllm_service"
API_KEY = "sk-sglang-render-5e1f"
HF_TOKEN = "hf_render_token_8c2d"
PREFLIGHT_PLAY = """
- name: sglang_service preflight only
  hosts: localhost
  connection: local
  gather_facts: false
  roles:
    - role: sglang_service
"""


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_NOCOLOR": "1",
    }


def _playbook(
    tmp_path: Path, play: str, extra: dict[str, object], args: list[str]
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "play.yml").write_text(play)
    vars_file = tmp_path / "vars.json"
    vars_file.write_text(json.dumps({"ansible_python_interpreter": sys.executable, **extra}))
    return subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            "localhost,",
            "-e",
            f"@{vars_file}",
            *args,
            str(tmp_path / "play.yml"),
        ],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=600,
        check=False,
    )


def _model_dir(tmp_path: Path, config: dict[str, object]) -> Path:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(config))
    return model


def _preflight(tmp_path: Path, extra: dict[str, object]) -> subprocess.CompletedProcess[str]:
    model = _model_dir(tmp_path, {"architectures": ["LlamaForCausalLM"]})
    return _playbook(
        tmp_path,
        PREFLIGHT_PLAY,
        {"sglang_service_model_path": str(model), **extra},
        ["--tags", "sglang_service_preflight,vllm_service_preflight"],
    )


# --- preflight refusals: each names the variable, the value and the fix


MLA_SM120 = {"sglang_service_compute_capabilities": ["12.0"], "sglang_service_mla": True}


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"sglang_service_model_path": ""}, "sglang_service_model_path must be the absolute path"),
        ({"sglang_service_model_path": "models/m"}, "sglang_service_model_path must be the absolute path"),
        (
            {"sglang_service_tp_size": 0},
            "sglang_service_tp_size=0 is refused: it must be a whole number from 1",
        ),
        ({"sglang_service_dp_size": -2}, "sglang_service_dp_size=-2 is refused"),
        ({"sglang_service_context_length": 0}, "sglang_service_context_length=0 is refused"),
        ({"sglang_service_mem_fraction_static": 1.5}, "sglang_service_mem_fraction_static=1.5 is refused"),
        (
            {"sglang_service_kv_cache_dtype": "fp8"},
            'sglang_service_kv_cache_dtype="fp8" is not one of SGLang 0.5.17',
        ),
        (
            {"sglang_service_attention_backend": "flash_attn"},
            'sglang_service_attention_backend="flash_attn" is not one',
        ),
        ({"sglang_service_sampling_backend": "torch"}, 'sglang_service_sampling_backend="torch" is not one'),
        (
            {"sglang_service_tool_call_parser": "kimi-k2"},
            'sglang_service_tool_call_parser="kimi-k2" is not one',
        ),
        ({"sglang_service_reasoning_parser": "deepseek_r1"}, 'sglang_service_reasoning_parser="deepseek_r1"'),
        ({"sglang_service_mla": "maybe"}, 'sglang_service_mla must be auto, true or false (got "maybe")'),
        ({"sglang_service_host": "0.0.0.0"}, 'sglang_service_host="0.0.0.0" is refused without an API key'),
        (
            {"sglang_service_extra_args": {"api-key": "x"}},
            "sglang_service_extra_args sets api-key (value hidden)",
        ),
        (
            {"sglang_service_extra_args": {"hf_token": "x"}},
            "sglang_service_extra_args sets hf-token (value hidden)",
        ),
        (
            {"sglang_service_extra_args": {"tensor-parallel-size": 4}},
            "sglang_service_extra_args sets tensor-parallel-size, which the role builds from its own "
            "variables: use sglang_service_tp_size",
        ),
        (
            {"sglang_service_extra_args": {"model": "/x", "kv_cache_dtype": "fp8_e4m3"}},
            "use sglang_service_model_path, sglang_service_kv_cache_dtype",
        ),
        (
            {"sglang_service_extra_args": {"disable-cuda-graph": True}},
            "use sglang_service_disable_cuda_graph",
        ),
        (
            {"sglang_service_env": [{"name": "LLMDEPLOY_API_KEY", "value": "x"}]},
            'Environment entry "LLMDEPLOY_API_KEY" in sglang_service_nccl_env/sglang_service_env is refused',
        ),
        (
            {"sglang_service_env": [{"name": "SGLANG_CACHE_DIR", "value": "/x"}]},
            "the role sets SGLANG_CACHE_DIR, SGLANG_DG_CACHE_DIR, FLASHINFER_WORKSPACE_BASE",
        ),
        # The reference story: FlashInfer MLA + FP8 KV on SM120 casts the whole cache to BF16 per decode step.
        (
            {
                **MLA_SM120,
                "sglang_service_attention_backend": "flashinfer",
                "sglang_service_kv_cache_dtype": "fp8_e4m3",
            },
            "sglang_service_kv_cache_dtype=fp8_e4m3 with the flashinfer attention backend",
        ),
        (
            {
                **MLA_SM120,
                "sglang_service_kv_cache_dtype": "fp8_e5m2",
                "sglang_service_extra_args": {"decode-attention-backend": "flashinfer"},
            },
            "Set sglang_service_attention_backend to trtllm_mla with sglang_service_kv_cache_dtype fp8_e4m3",
        ),
        (
            {**MLA_SM120, "sglang_service_attention_backend": "trtllm_mla"},
            "sglang_service_attention_backend=trtllm_mla with sglang_service_kv_cache_dtype=auto is refused",
        ),
        (
            {**MLA_SM120, "sglang_service_attention_backend": "cutedsl_mla"},
            "sglang_service_attention_backend=cutedsl_mla is refused on compute capability 12.0",
        ),
        # Unsafe values are still refused by vllm_service's own preflight, under its variable's name.
        ({"sglang_service_name": "../../etc/cron.d/x"}, "vllm_service_name="),
        ({"sglang_service_user": "root"}, "vllm_service_user"),
        ({"sglang_service_home": "/"}, "vllm_service_home="),
    ],
)
def test_bad_input_is_refused_with_the_variable_named(
    tmp_path: Path, extra: dict[str, object], expected: str
) -> None:
    result = _preflight(tmp_path, extra)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert expected in " ".join(output.split()), output


def test_the_mla_rule_reads_config_json_and_gpu_preflight_facts(tmp_path: Path) -> None:
    model = _model_dir(tmp_path, {"architectures": ["DeepseekV3ForCausalLM"], "kv_lora_rank": 512})
    common = {
        "sglang_service_model_path": str(model),
        "sglang_service_attention_backend": "flashinfer",
        "sglang_service_kv_cache_dtype": "fp8_e4m3",
    }
    tags = ["--tags", "sglang_service_preflight,vllm_service_preflight"]
    facts = {
        "gpu_preflight_facts": {"gpus": [{"compute_capability": "12.0"}, {"compute_capability": "12.0"}]}
    }
    refused = _playbook(tmp_path, PREFLIGHT_PLAY, {**common, **facts}, tags)
    assert refused.returncode != 0 and "64.6 ms of an 86 ms step" in " ".join(refused.stdout.split())
    # The same on Hopper, or on SM120 with a model without MLA, passes.
    hopper = {"gpu_preflight_facts": {"gpus": [{"compute_capability": "9.0"}]}}
    assert _playbook(tmp_path, PREFLIGHT_PLAY, {**common, **hopper}, tags).returncode == 0
    (model / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    passed = _playbook(tmp_path, PREFLIGHT_PLAY, {**common, **facts}, tags)
    assert passed.returncode == 0, passed.stdout + passed.stderr


@pytest.mark.parametrize(
    "extra",
    [
        {"sglang_service_host": "0.0.0.0", "sglang_service_api_key": API_KEY},
        {"sglang_service_host": "0.0.0.0", "sglang_service_allow_unauthenticated": True},
        # The fixes the refusal names pass.
        {
            **MLA_SM120,
            "sglang_service_attention_backend": "trtllm_mla",
            "sglang_service_kv_cache_dtype": "fp8_e4m3",
        },
        {
            **MLA_SM120,
            "sglang_service_attention_backend": "triton",
            "sglang_service_kv_cache_dtype": "fp8_e4m3",
        },
        {
            **MLA_SM120,
            "sglang_service_attention_backend": "flashinfer",
            "sglang_service_kv_cache_dtype": "auto",
        },
        {**MLA_SM120, "sglang_service_kv_cache_dtype": "fp8_e4m3"},
    ],
)
def test_good_input_passes(tmp_path: Path, extra: dict[str, object]) -> None:
    result = _preflight(tmp_path, extra)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_refused_secret_is_not_echoed(tmp_path: Path) -> None:
    result = _preflight(tmp_path, {"sglang_service_extra_args": {"api_key": "sk-planted-31aa"}})
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "value hidden" in output
    assert "sk-planted-31aa" not in output


# --- the render


def _include_vars() -> dict[str, str]:
    """The variables sglang_service passes to vllm_service (its include_role task's vars)."""
    tasks = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text())
    (include,) = [t for t in tasks if "ansible.builtin.include_role" in t]
    assert include["ansible.builtin.include_role"]["name"] == "llmdeploy.llm.vllm_service"
    return include["vars"]


def _render_play(out: Path) -> str:
    # vllm_service's defaults and vars are the included role's own (not exported to the play): pass them, and
    # over them sglang_service's mapping, to the same templates the role renders.
    variables = {
        **yaml.safe_load((VLLM_ROLE / "defaults" / "main.yml").read_text()),
        **yaml.safe_load((VLLM_ROLE / "vars" / "main.yml").read_text()),
        **_include_vars(),
    }
    render = [
        {
            "name": f"Render {name}",
            "ansible.builtin.template": {
                "src": str(VLLM_ROLE / "templates" / template),
                "dest": str(out / name),
                "mode": "0600",
            },
            "vars": variables,
            "check_mode": False,
            "no_log": True,
        }
        for template, name in (("vllm.env.j2", "sglang.env"), ("vllm.service.j2", "sglang.service"))
    ]
    play = [
        {
            "name": "sglang_service in check mode, then its templates rendered",
            "hosts": "localhost",
            "connection": "local",
            "gather_facts": False,
            "roles": [{"role": "sglang_service"}],
            "tasks": render,
        }
    ]
    return yaml.safe_dump(play, sort_keys=False)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    tmp_path = tmp_path_factory.mktemp("sglang_render")
    out = tmp_path / "out"
    out.mkdir()
    model = _model_dir(tmp_path, {"architectures": ["DeepseekV3ForCausalLM"], "kv_lora_rank": 512})
    extra = {
        "sglang_service_model_path": str(model),
        "sglang_service_served_model_name": "org/model",
        "sglang_service_manager": "systemd",
        "sglang_service_host": "0.0.0.0",
        "sglang_service_api_key": API_KEY,
        "sglang_service_hf_token": HF_TOKEN,
        "sglang_service_tp_size": 8,
        "sglang_service_attention_backend": "trtllm_mla",
        "sglang_service_kv_cache_dtype": "fp8_e4m3",
        "sglang_service_mem_fraction_static": 0.88,
        "sglang_service_context_length": 131072,
        "sglang_service_tool_call_parser": "kimi_k2",
        "sglang_service_reasoning_parser": "kimi_k2",
        "sglang_service_trust_remote_code": True,
        "sglang_service_disable_cuda_graph": True,
        "sglang_service_compute_capabilities": ["12.0"],
        "sglang_service_extra_args": {
            "chunked-prefill-size": 8192,
            "enable-cache-report": True,
            "log-level": None,
        },
        "sglang_service_nccl_env": [{"name": "NCCL_P2P_LEVEL", "value": "SYS", "why": "PCIe only"}],
    }
    result = _playbook(tmp_path, _render_play(out), extra, ["--check", "--diff"])
    return result, out


def _unit_diff(stdout: str) -> str:
    """The unit as the role's check-mode --diff shows it (the added lines)."""
    marker = stdout.index("TASK [llmdeploy.llm.vllm_service : Render the systemd unit]")
    block = stdout[marker:].split("\nTASK [", 1)[0]
    return "\n".join(
        line[1:] for line in block.splitlines() if line.startswith("+") and not line.startswith("+++")
    )


def test_the_role_runs_in_check_mode_without_showing_a_secret(
    rendered: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    result, _out = rendered
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-5000:]
    assert re.search(r"localhost\s+: ok=\d+ .*failed=0", result.stdout)
    assert API_KEY not in output and HF_TOKEN not in output


def test_the_unit_runs_the_shim_with_sglangs_flags_and_no_secret(
    rendered: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    result, out = rendered
    for unit in (_unit_diff(result.stdout), (out / "sglang.service").read_text()):
        (exec_start,) = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
        argv = shlex.split(exec_start.removeprefix("ExecStart="))
        model = str(Path(argv[argv.index("--model-path") + 1]))
        assert argv == [
            "/opt/ml-env/bin/python",
            "/usr/local/libexec/llmdeploy/sglang_serve.py",
            "--model-path", model,
            "--served-model-name", "org/model",
            "--host", "0.0.0.0",
            "--port", "30000",
            "--tp-size", "8",
            "--dp-size", "1",
            "--attention-backend", "trtllm_mla",
            "--kv-cache-dtype", "fp8_e4m3",
            "--mem-fraction-static", "0.88",
            "--context-length", "131072",
            "--tool-call-parser", "kimi_k2",
            "--reasoning-parser", "kimi_k2",
            "--trust-remote-code",
            "--enable-metrics",
            "--cuda-graph-backend-decode", "disabled",
            "--cuda-graph-backend-prefill", "disabled",
            "--chunked-prefill-size", "8192",
            "--enable-cache-report",
        ]  # fmt: skip
        assert "User=sglang" in unit and "EnvironmentFile=/etc/sglang/sglang.env" in unit
        assert "Description=OpenAI-compatible server sglang_serve.py (org/model)" in unit
        assert API_KEY not in unit and HF_TOKEN not in unit and "--api-key" not in unit


def test_the_environment_file_holds_the_secrets_and_the_sglang_caches(
    rendered: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    result, out = rendered
    assert result.returncode == 0
    env = (out / "sglang.env").read_text()
    lines = dict(line.split("=", 1) for line in env.splitlines() if line and not line.startswith("#"))
    assert lines["LLMDEPLOY_API_KEY"] == f'"{API_KEY}"'
    assert lines["HF_TOKEN"] == f'"{HF_TOKEN}"'
    assert "VLLM_API_KEY" not in lines
    assert lines["NCCL_P2P_LEVEL"] == '"SYS"'
    for name, sub in (
        ("SGLANG_CACHE_DIR", "sglang"),
        ("SGLANG_DG_CACHE_DIR", "deep_gemm"),
        ("FLASHINFER_WORKSPACE_BASE", "flashinfer"),
        ("TRITON_CACHE_DIR", "triton"),
        ("TORCHINDUCTOR_CACHE_DIR", "torchinductor"),
        ("XDG_CACHE_HOME", "xdg"),
    ):
        assert lines[name] == f'"/var/lib/sglang/cache/{sub}"', name
    assert re.fullmatch(r'"[0-9a-f]{40}"', lines["LLMDEPLOY_SGLANG_SHIM_SHA1"])
    assert list(lines).index("NCCL_P2P_LEVEL") < list(lines).index("SGLANG_CACHE_DIR")


def test_the_role_writes_the_environment_file_0640_and_never_shows_it() -> None:
    # The rendering above is this test's; the role's own task is vllm_service's (mode, no_log, no diff).
    tasks = yaml.safe_load((VLLM_ROLE / "tasks" / "service.yml").read_text())
    (env_task,) = [t for t in tasks if t["name"] == "Render the environment file"]
    assert env_task["ansible.builtin.template"]["mode"] == "0640"
    assert env_task["ansible.builtin.template"]["owner"] == "root"
    assert env_task["no_log"] is True and env_task["diff"] is False
