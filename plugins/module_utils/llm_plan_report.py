"""Turn capacity plans into a deployment decision and a table a person reads.

The memory arithmetic lives in the llm_capacity package (filters ``llm_plan``/``llm_recommend``); this module
only combines their results with the catalog's known issues and formats them. Pure functions, stdlib only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError

try:  # the collection's module_utils package, or the directory itself on sys.path (unit tests, bin/)
    from . import known_issues as _rules
    from . import llm_capacity as _capacity
    from . import model_entry as _entry
except ImportError:
    import known_issues as _rules  # type: ignore[no-redef]
    import llm_capacity as _capacity  # type: ignore[no-redef]
    import model_entry as _entry  # type: ignore[no-redef]

_KV_DTYPES = ("auto", "bfloat16", "fp8")
_SPLIT_KEYS = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")
_LAYOUT_KEYS = (
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "enable_expert_parallel",
    "decode_context_parallel_size",
    "gpu_memory_utilization",
    "kv_cache_dtype",
    "max_model_len",
)


def _fail(filter_name: str, message: str) -> AnsibleFilterError:
    return AnsibleFilterError(f"{filter_name}: {message}")


def version_tuple(version: str) -> tuple[int, ...]:
    """'0.19.1rc2.dev5' -> (0, 19, 1); only the leading numeric release part counts."""
    match = re.match(r"^\s*v?(\d+(?:\.\d+)*)", str(version))
    if not match:
        raise ValueError(f"not a version: {version!r}")
    return tuple(int(part) for part in match.group(1).split("."))


def condition_matches(when: Mapping[str, Any] | None, facts: Mapping[str, Any]) -> bool:
    """True when every key of a catalog or rule ``when`` mapping holds for ``facts`` (known_issues.py)."""
    return _rules.condition_matches(when, facts)


def _note(rule_id: str, setting: str, reason: str) -> dict[str, str]:
    return {"id": rule_id, "setting": setting, "reason": " ".join(str(reason).split())}


def _apply(issue: Mapping[str, Any], out: dict[str, Any]) -> None:
    """Record what one fired rule forces, recommends or refuses (and the line the plan prints for it)."""
    rid, summary, notes = str(issue["id"]), str(issue["summary"]), out["notes"]
    forces = issue.get("forces") or {}
    if issue.get("refuses"):
        out["refusals"].append({"id": rid, "reason": " ".join(summary.split()), "fix": str(issue["refuses"])})
        notes.append(_note(rid, "refused", f"{summary} Instead: {issue['refuses']}"))
    elif not any(forces.values()) and not issue.get("recommends"):
        # Nothing to set automatically: still a fact the operator must see.
        notes.append(_note(rid, "known issue", summary))
    for flag, value in (forces.get("engine_args") or {}).items():
        out["engine_args"][str(flag)] = value
        notes.append(_note(rid, f"--{flag} {value}", summary))
    for var, value in (forces.get("engine_env") or {}).items():
        out["engine_env"][str(var)] = str(value)
        notes.append(_note(rid, f"env {var}={value}", summary))
    for dtype in forces.get("kv_cache_dtypes_unavailable") or []:
        if dtype not in out["kv_cache_dtypes_unavailable"]:
            out["kv_cache_dtypes_unavailable"].append(str(dtype))
        notes.append(_note(rid, f"no {dtype} KV cache", summary))
    for flag in forces.get("engine_args_absent") or []:
        notes.append(_note(rid, f"leave out {flag}", summary))
    for key, value in (issue.get("recommends") or {}).items():
        out["recommends"][str(key)] = value
        notes.append(_note(rid, f"recommend {key} = {value}", summary))


def _patch_notes(model: Mapping[str, Any], facts: Mapping[str, Any], out: dict[str, Any]) -> None:
    for patch in model.get("patches") or []:
        fired = condition_matches(patch.get("when"), facts)
        if fired:
            out["patches"].append(str(patch["id"]))
            out["notes"].append(
                _note(
                    patch["id"],
                    f"patch {patch['file']}: {patch['action']} {patch['json_path']}",
                    patch["reason"],
                )
            )
            continue
        out["patches_not_needed"].append(str(patch["id"]))
        when = {k: v for k, v in (patch.get("when") or {}).items() if not k.startswith("engine_version")}
        if patch.get("alternative") and condition_matches(when, facts):
            out["notes"].append(
                _note(patch["id"], f"no checkpoint patch on {facts['engine_version']}", patch["alternative"])
            )


def llm_plan_settings(
    model: Mapping[str, Any],
    hardware: Mapping[str, Any],
    engine_version: str,
    kv_cache_dtype: str = "auto",
    rules_path: str | None = None,
) -> dict[str, Any]:
    """Settings forced by the known-issue rules (catalog/known_issues.yml, then the model's own
    known_issues), its patches and the hardware profile, plus what the engine release refuses.

    Returns engine_args, engine_env, kv_cache_dtypes_unavailable, recommends, patches (those whose condition
    matches, i.e. the model_patch role must apply them), patches_not_needed, refusals ({id, reason, fix}:
    rules with ``refuses`` and an architecture missing from the release's model registry), families and
    notes: one line per fired rule with its id and reason.
    """
    name = "llm_plan_settings"
    if not isinstance(model, Mapping) or not isinstance(hardware, Mapping):
        raise _fail(name, "expects the catalog model dict and the hardware profile dict")
    try:
        version_tuple(engine_version)
    except ValueError as exc:
        raise _fail(name, f"engine_version {engine_version!r} is not a version like 0.22.0") from exc
    model = _entry.model_complete(model)
    try:
        issues = _rules.rules_for(model, _rules.load_rules(rules_path))
        model_facts = _rules.model_facts(model)
    except _rules.RuleError as exc:
        raise _fail(name, str(exc)) from exc
    facts: dict[str, Any] = {
        "compute_capability": hardware.get("compute_capability"),
        "interconnect": hardware.get("interconnect"),
        "gpu_count": hardware.get("gpu_count"),
        "engine_version": engine_version,
        "kv_cache_dtype": kv_cache_dtype,
        "attention_backend": None,
        **model_facts,
    }
    hw_env = {str(k): str(v) for k, v in (hardware.get("engine_env") or {}).items()}
    out: dict[str, Any] = {
        "engine_args": {},
        "engine_env": dict(hw_env),
        "kv_cache_dtypes_unavailable": [],
        "recommends": {},
        "patches": [],
        "patches_not_needed": [],
        "refusals": [],
        "families": model_facts["families"],
        "notes": [
            _note(f"hardware:{hardware.get('id', '?')}", f"env {k}={v}", "hardware profile")
            for k, v in hw_env.items()
        ],
    }
    for issue in issues:
        try:
            fired = condition_matches(issue.get("when"), facts)
        except ValueError as exc:
            raise _fail(name, f"known issue {issue.get('id')!r}: {exc}") from exc
        if fired:
            _apply(issue, out)
    facts["attention_backend"] = out["engine_args"].get("attention-backend")
    try:
        _patch_notes(model, facts, out)
    except ValueError as exc:
        raise _fail(name, f"a patch of {model.get('id')!r}: {exc}") from exc
    config = model.get("hf_config") if isinstance(model.get("hf_config"), Mapping) else {}
    problems, arch_notes = _entry.architecture_problems(config, engine_version)
    for problem in problems:
        out["refusals"].append(
            {"id": "vllm_model_registry", "reason": problem, "fix": problem.partition(": ")[2]}
        )
        out["notes"].append(_note("vllm_model_registry", "refused", problem))
    out["notes"].extend(_note("vllm_model_registry", "note", n) for n in arch_notes)
    for problem in _entry.parser_problems(model, engine_version):
        out["refusals"].append(
            {"id": "vllm_parser_registry", "reason": problem, "fix": problem.partition("; ")[2]}
        )
        out["notes"].append(_note("vllm_parser_registry", "refused", problem))
    return out


def _pick(recommendation: Mapping[str, Any], key: str) -> Any:
    """A value from a recommendation, flat or nested under layout/settings."""
    if key in recommendation and recommendation[key] is not None:
        return recommendation[key]
    for section in ("layout", "settings", "recommended"):
        inner = recommendation.get(section)
        if isinstance(inner, Mapping) and inner.get(key) is not None:
            return inner[key]
    return None


def llm_plan_layout(
    recommendation: Mapping[str, Any] | None,
    overrides: Mapping[str, Any] | None,
    hardware: Mapping[str, Any],
    nodes: Any = 1,
) -> dict[str, Any]:
    """Final layout: an override wins, then the recommendation, then a plain default.

    Defaults: TP = GPUs / PP, PP = the node count (1 on one node), DP = DCP = 1, EP off,
    gpu_memory_utilization from the hardware profile's recommended value (else 0.9). ``nodes`` identical
    nodes of the profile's ``gpu_count`` GPUs: TP stays inside a node, PP or DP splits the nodes (the
    layout gets ``nnodes`` and ``multinode``: null on one node). Raises when the layout needs more GPUs
    than there are, or puts TP across nodes.
    """
    name = "llm_plan_layout"
    rec = recommendation if isinstance(recommendation, Mapping) else {}
    given = {k: v for k, v in (overrides or {}).items() if v is not None and v != ""}
    unknown = sorted(set(given) - set(_LAYOUT_KEYS))
    if unknown:
        raise _fail(name, f"unknown override(s) {unknown}; known: {list(_LAYOUT_KEYS)}")
    gpu_count = int(hardware.get("gpu_count") or 0)
    if gpu_count < 1:
        raise _fail(name, f"hardware gpu_count must be >= 1, got {hardware.get('gpu_count')!r}")
    try:
        nodes = _capacity.check_nodes(nodes)
    except _capacity.PlanInputError as exc:
        raise _fail(name, f"llm_plan_nodes: {exc.detail}") from exc

    def choose(key: str, default: Any) -> Any:
        if key in given:
            return given[key]
        value = _pick(rec, key)
        return default if value is None else value

    pp = int(choose("pipeline_parallel_size", nodes))
    dp = int(choose("data_parallel_size", 1))
    tp = int(choose("tensor_parallel_size", max(1, gpu_count * nodes // max(1, pp * dp))))
    tp, pp, dp = _fit_unset_sizes(tp, pp, dp, given=given, gpus=gpu_count * nodes, nodes=nodes)
    layout = {
        "tensor_parallel_size": tp,
        "pipeline_parallel_size": pp,
        "data_parallel_size": dp,
        "enable_expert_parallel": bool(choose("enable_expert_parallel", False)),
        "decode_context_parallel_size": _dcp_for(tp, given, rec),
        "gpu_memory_utilization": float(
            choose("gpu_memory_utilization", hardware.get("recommended_gpu_memory_utilization") or 0.9)
        ),
        "kv_cache_dtype": choose("kv_cache_dtype", None),
        "max_model_len": choose("max_model_len", None),
    }
    for key in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
        if layout[key] < 1:
            raise _fail(name, f"{key} must be >= 1, got {layout[key]}")
    gpus = f"{gpu_count}" if nodes == 1 else f"llm_plan_nodes={nodes} x {gpu_count}"
    if tp * pp * dp > gpu_count * nodes:
        raise _fail(
            name,
            f"layout TP {tp} x PP {pp} x DP {dp} = {tp * pp * dp} GPUs exceeds the {gpus} GPUs of "
            f"hardware profile {hardware.get('id')!r}; lower {_set_sizes(given)}",
        )
    dcp = layout["decode_context_parallel_size"]
    if dcp < 1 or tp % dcp:
        raise _fail(name, f"decode_context_parallel_size {dcp} must be >= 1 and divide TP {tp}")
    if not 0.0 < layout["gpu_memory_utilization"] <= 1.0:
        raise _fail(name, f"gpu_memory_utilization must be in (0, 1], got {layout['gpu_memory_utilization']}")
    layout["nnodes"] = nodes
    layout["multinode"] = _multinode(name, rec, given, layout, hardware=hardware, nodes=nodes)
    return layout


def _fit_unset_sizes(
    tp: int, pp: int, dp: int, *, given: Mapping[str, Any], gpus: int, nodes: int
) -> tuple[int, int, int]:
    """TP, PP and DP with the sizes the user left unset shrunk until the layout fits ``gpus``.

    The recommendation's split is made for its own TP: taken as is beside a TP the user chose, it can ask
    for more GPUs than there are (TP 2 beside the recommended DP 2 on 2 GPUs). Replicas go first, then
    pipeline stages (in whole stages per node), then TP; a size the user set is never changed.
    """
    if tp * pp * dp <= gpus:
        return tp, pp, dp
    if "data_parallel_size" not in given:
        dp = max(1, gpus // max(1, tp * pp))
    if tp * pp * dp > gpus and "pipeline_parallel_size" not in given:
        pp = max(1, min(pp, gpus // max(1, tp * dp)))
        if nodes > 1 and pp >= nodes:
            pp -= pp % nodes  # whole stages per node
    if tp * pp * dp > gpus and "tensor_parallel_size" not in given:
        tp = max(1, gpus // max(1, pp * dp))
    return tp, pp, dp


def _set_sizes(given: Mapping[str, Any]) -> str:
    """The parallel sizes the user set, by variable name (the deploy playbooks' name for TP too)."""
    deploy_name = {"tensor_parallel_size": " (llm_tensor_parallel_size in the deploy playbooks)"}
    named = [f"llm_plan_{k}={given[k]}{deploy_name.get(k, '')}" for k in _SPLIT_KEYS if k in given]
    return " or ".join(named) if named else "the parallel sizes"


def _multinode(
    name: str,
    rec: Mapping[str, Any],
    given: Mapping[str, Any],
    layout: Mapping[str, Any],
    *,
    hardware: Mapping[str, Any],
    nodes: int,
) -> dict[str, Any] | None:
    """How the layout spreads over the nodes (None on one node): the recommendation's split and why when
    the layout is the recommended one, else the split the overrides (or the defaults) give."""
    if nodes == 1:
        return None
    gpu_count = int(hardware["gpu_count"])
    tp, pp, dp = (int(layout[k]) for k in _SPLIT_KEYS)
    problem = _capacity.node_problem(tp=tp, pp=pp, dp=dp, nodes=nodes, gpus_per_node=gpu_count)
    if problem:
        raise _fail(
            name,
            f"layout TP {tp} x PP {pp} x DP {dp} on llm_plan_nodes={nodes} nodes of {gpu_count} GPUs is "
            f"refused: {problem}. Keep TP inside a node and split the nodes by pipeline stages or replicas, "
            f"e.g. llm_plan_tensor_parallel_size={gpu_count} llm_plan_pipeline_parallel_size={nodes}",
        )
    recommended = rec.get("multinode")
    same = all(_pick(rec, k) == layout[k] for k in _SPLIT_KEYS)
    if isinstance(recommended, Mapping) and same:
        return dict(recommended)
    split = _capacity.node_split(tp=tp, pp=pp, dp=dp, nodes=nodes)
    overridden = set(given) & set(_SPLIT_KEYS)
    if overridden:
        lead = "set by the llm_plan_*_parallel_size overrides"
    else:
        lead = "the recommended layout" if rec.get("fits") else "the default, as no layout fits"
    interconnect = "pcie" if hardware.get("interconnect") == "pcie" else "nvlink"
    why = _capacity.multinode_why(split, tp=tp, pp=pp, dp=dp, interconnect=interconnect, lead=lead)
    return split | {"why": why}


def _dcp_for(tp: int, given: Mapping[str, Any], rec: Mapping[str, Any]) -> int:
    """DCP as given; else the recommendation's, reduced to a divisor of TP when TP was overridden."""
    if "decode_context_parallel_size" in given:
        return int(given["decode_context_parallel_size"])
    recommended = _pick(rec, "decode_context_parallel_size")
    return math.gcd(tp, int(recommended)) if recommended and tp >= 1 else 1


def _row_key(row: Mapping[str, Any]) -> tuple[Any, ...]:
    return (row["kv_cache_dtype"], int(row["decode_context_parallel_size"]), int(row["max_model_len"]))


def llm_plan_assemble(
    rows: Sequence[Mapping[str, Any]],
    *,
    model: Mapping[str, Any],
    hardware: Mapping[str, Any],
    layout: Mapping[str, Any],
    settings: Mapping[str, Any],
    engine_version: str,
    target_max_model_len: int | None = None,
    recommendation: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Pick the row to deploy and build the documented ``llm_plan_result`` fact.

    Each row is {kv_cache_dtype, decode_context_parallel_size, max_model_len, plan} with ``plan`` the
    dict returned by ``llm_plan``. Selection: rows at the target max_model_len (the layout's, else the
    given target, else the largest planned length) whose KV dtype the engine supports; the layout's
    KV dtype/DCP when that row fits, otherwise the fitting row with the highest max_concurrency. When
    none fits, the verdict is ``does_not_fit`` and the reasons say why.
    """
    name = "llm_plan_assemble"
    if not rows:
        raise _fail(
            name, "no plan rows; llm_plan_kv_cache_dtypes and llm_plan_context_lengths must not be empty"
        )
    for row in rows:
        missing = {"kv_cache_dtype", "decode_context_parallel_size", "max_model_len", "plan"} - set(row)
        if missing or not isinstance(row.get("plan"), Mapping):
            raise _fail(name, f"row {row!r} lacks {sorted(missing) or ['plan dict']}")
    unavailable = set(settings.get("kv_cache_dtypes_unavailable") or [])
    lengths = sorted({int(r["max_model_len"]) for r in rows})
    target = layout.get("max_model_len") or target_max_model_len or lengths[-1]
    target = int(target)
    candidates = [
        r for r in rows if int(r["max_model_len"]) == target and r["kv_cache_dtype"] not in unavailable
    ]
    fitting = [r for r in candidates if r["plan"].get("fits")]
    wanted = (layout.get("kv_cache_dtype"), int(layout.get("decode_context_parallel_size") or 1), target)
    chosen = next((r for r in fitting if _row_key(r) == wanted), None)
    if chosen is None and fitting:
        chosen = max(fitting, key=lambda r: float(r["plan"].get("max_concurrency") or 0.0))
    reasons: list[str] = []
    if chosen is None:
        pool = candidates or [r for r in rows if int(r["max_model_len"]) == target] or list(rows)
        chosen = max(pool, key=lambda r: float(r["plan"].get("max_concurrency") or 0.0))
        if not candidates:
            reasons.append(f"no plan at max_model_len {target} with a KV dtype this engine supports")
        reasons.extend(str(x) for x in chosen["plan"].get("reasons") or [])
    plan = chosen["plan"]
    refusals = [dict(r) for r in settings.get("refusals") or []]
    fits = bool(plan.get("fits")) and chosen["kv_cache_dtype"] not in unavailable and not refusals
    reasons[:0] = [
        r["reason"]
        if r["id"] in ("vllm_model_registry", "vllm_parser_registry")
        else f"{r['id']}: {r['reason']} Instead: {r['fix']}"
        for r in refusals
    ]
    engine_args = dict(settings.get("engine_args") or {})
    return {
        "model_id": model.get("id"),
        "model_name": model.get("display_name") or model.get("id"),
        "hf_repo": model.get("hf_repo"),
        "hf_revision": model.get("hf_revision"),
        "hardware_id": hardware.get("id"),
        "hardware": {
            k: hardware.get(k)
            for k in ("gpu_name", "gpu_count", "gpu_memory_gib", "compute_capability", "interconnect")
        },
        # Nodes of this hardware profile the plan spans, and how the layout splits them (null on one node).
        "nnodes": int(layout.get("nnodes") or 1),
        "multinode": dict(layout["multinode"]) if layout.get("multinode") else None,
        "engine": "vllm",
        "engine_version": engine_version,
        "engine_versions_modeled": _capacity.modeled_range_text(),
        "engine_version_run_on_real_gpus": _capacity.PROVEN_VLLM_VERSION,
        "tensor_parallel_size": int(layout["tensor_parallel_size"]),
        "pipeline_parallel_size": int(layout["pipeline_parallel_size"]),
        "data_parallel_size": int(layout["data_parallel_size"]),
        "enable_expert_parallel": bool(layout["enable_expert_parallel"]),
        "decode_context_parallel_size": int(chosen["decode_context_parallel_size"]),
        "kv_cache_dtype": chosen["kv_cache_dtype"],
        "gpu_memory_utilization": float(layout["gpu_memory_utilization"]),
        "max_model_len": int(chosen["max_model_len"]),
        "attention_backend": engine_args.get("attention-backend"),
        "engine_args": engine_args,
        "engine_env": dict(settings.get("engine_env") or {}),
        "patches": list(settings.get("patches") or []),
        "fits": fits,
        "verdict": "fits" if fits else "does_not_fit",
        "reasons": reasons if not fits else [],
        "plan": dict(plan),
        "rows": [dict(r) for r in rows],
        "settings_notes": list(settings.get("notes") or []),
        "kv_cache_dtypes_unavailable": sorted(unavailable),
        "refusals": refusals,
        "families": list(settings.get("families") or []),
        "recommendation": {key: list((recommendation or {}).get(key) or []) for key in ("reasons", "notes")},
    }


def _num(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def _whole(value: Any) -> Any:
    """4464.0 -> 4464, so byte counts print without decimals."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _grid(header: Sequence[str], body: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(header)]

    def fmt(cells: Sequence[str]) -> str:
        return " | ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True))

    return [fmt(header), "-+-".join("-" * w for w in widths), *(fmt(r) for r in body)]


def _nodes_lines(multinode: Mapping[str, Any] | None, hw: Mapping[str, Any]) -> list[str]:
    """The node split of a plan over several nodes (nothing on one node)."""
    if not multinode:
        return []
    nodes, split, per_node = multinode["nnodes"], multinode["split"], int(hw.get("gpu_count") or 0)
    share = "whole pipeline stages" if split == "pipeline" else "whole data-parallel replicas"
    return [
        f"Nodes:    {nodes} x {per_node} GPUs = {nodes * per_node} GPUs; split by {split} ({share} on each "
        f"node), {multinode['local_world_size']} GPUs of the layout per node",
        f"          why: {multinode['why']}",
    ]


def _inputs_line(result: Mapping[str, Any]) -> str:
    """What the plan was asked for, as read (a user sees that -e values arrived as meant)."""
    rows = result.get("rows") or []
    lengths = sorted({int(r["max_model_len"]) for r in rows if r.get("max_model_len") is not None})
    dtypes = sorted({str(r["kv_cache_dtype"]) for r in rows if r.get("kv_cache_dtype") is not None})
    return (
        f"Planned:  context lengths {', '.join(f'{n:,}' for n in lengths) or '-'}; "
        f"KV dtypes {', '.join(dtypes) or '-'}; max_model_len {int(result.get('max_model_len') or 0):,}"
    )


def llm_plan_table(result: Mapping[str, Any]) -> list[str]:
    """Render an ``llm_plan_result`` as lines: header, plan grid, decision, forced settings."""
    name = "llm_plan_table"
    if not isinstance(result, Mapping) or "rows" not in result or "plan" not in result:
        raise _fail(name, "expects the llm_plan_result dict built by llm_plan_assemble")
    hw = result.get("hardware") or {}
    plan = result["plan"]
    unavailable = set(result.get("kv_cache_dtypes_unavailable") or [])
    nodes = int(result.get("nnodes") or 1)
    node_count = "" if nodes == 1 else f"{nodes} nodes x "
    lines = [
        f"Model:    {result.get('model_name')} "
        f"({result.get('hf_repo')}@{result.get('hf_revision') or 'main'})",
        (
            f"Hardware: {node_count}{hw.get('gpu_count')} x {hw.get('gpu_name')}, "
            f"{_num(hw.get('gpu_memory_gib'))} GiB each, "
            f"SM {hw.get('compute_capability')}, {hw.get('interconnect')}"
        ),
        *_nodes_lines(result.get("multinode"), hw),
        (
            f"Engine:   {result.get('engine')} {result.get('engine_version')}; layout TP "
            f"{result['tensor_parallel_size']} x PP {result['pipeline_parallel_size']} x DP "
            f"{result['data_parallel_size']}, expert parallel "
            f"{'on' if result['enable_expert_parallel'] else 'off'}, "
            f"gpu_memory_utilization {result['gpu_memory_utilization']}"
        ),
        (
            f"          the planner models vLLM {result.get('engine_versions_modeled', '?')}; "
            f"{result.get('engine_version_run_on_real_gpus', '?')} is the release run on real GPUs here"
        ),
        _inputs_line(result),
        f"Weights per GPU: {_num(plan.get('weights_gib_per_gpu'))} GiB",
        "",
    ]
    header = [
        "pick",
        "KV dtype",
        "DCP",
        "max_model_len",
        "KV B/token",
        "KV GiB/GPU",
        "KV tokens",
        "concurrency",
        "fits",
    ]
    body = []
    for row in result["rows"]:
        p = row["plan"]
        fits = _num(bool(p.get("fits")))
        if row["kv_cache_dtype"] in unavailable:
            fits = "n/a (engine)"
        picked = (
            row["kv_cache_dtype"] == result["kv_cache_dtype"]
            and int(row["decode_context_parallel_size"]) == result["decode_context_parallel_size"]
            and int(row["max_model_len"]) == result["max_model_len"]
        )
        body.append(
            [
                "*" if picked else "",
                str(row["kv_cache_dtype"]),
                str(row["decode_context_parallel_size"]),
                _num(int(row["max_model_len"])),
                _num(_whole(p.get("kv_bytes_per_token"))),
                _num(p.get("kv_cache_gib_per_gpu")),
                _num(p.get("kv_cache_tokens")),
                _num(p.get("max_concurrency")),
                fits,
            ]
        )
    lines.extend(_grid(header, body))
    lines.append("")
    verdict = "FITS" if result.get("fits") else "DOES NOT FIT"
    lines.append(
        f"Verdict: {verdict}: --tensor-parallel-size {result['tensor_parallel_size']} "
        f"--pipeline-parallel-size {result['pipeline_parallel_size']} "
        f"--data-parallel-size {result['data_parallel_size']} "
        f"--decode-context-parallel-size {result['decode_context_parallel_size']} "
        f"--kv-cache-dtype {result['kv_cache_dtype']} --max-model-len {result['max_model_len']} "
        f"--gpu-memory-utilization {result['gpu_memory_utilization']} "
        f"({_num(plan.get('kv_cache_tokens'))} KV tokens, concurrency {_num(plan.get('max_concurrency'))})"
    )
    lines.extend(f"  reason: {r}" for r in result.get("reasons") or [])
    advice = result.get("recommendation") or {}
    # When nothing fits the planner's reasons repeat the ones printed above.
    said = [*(advice.get("reasons") or [])] if result.get("fits") else []
    lines.extend(f"Planner: {r}" for r in [*said, *(advice.get("notes") or [])])
    notes = result.get("settings_notes") or []
    lines.append(
        "Settings forced by the hardware profile and known issues, and issues to know:"
        if notes
        else "No forced settings, no known issues."
    )
    lines.extend(f"  - {n['setting']}  [{n['id']}] {n['reason']}" for n in notes)
    return lines
