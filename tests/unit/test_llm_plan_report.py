"""Unit tests for filter_plugins/llm_plan_report.py (settings from known issues, layout, selection, table)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import _collection
import pytest
import yaml
from ansible.errors import AnsibleFilterError

ROOT = Path(__file__).resolve().parents[2]
_SPEC = importlib.util.spec_from_file_location(
    "llm_plan_report_under_test", ROOT / "plugins" / "module_utils" / "llm_plan_report.py"
)
assert _SPEC is not None and _SPEC.loader is not None
rep = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(rep)


def _catalog(kind: str, name: str) -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "catalog" / kind / f"{name}.yml").read_text())
    return data["llm_model" if kind == "models" else "llm_hardware"]


KIMI = _catalog("models", "kimi_k2_5_nvfp4")
RTX = _catalog("hardware", "rtx_pro_6000_x8")
H200 = _catalog("hardware", "h200_x8")


def _plan(tokens: int, max_model_len: int, fits: bool | None = None, **extra: Any) -> dict[str, Any]:
    fitted = tokens >= max_model_len if fits is None else fits
    return {
        "weights_gib_per_gpu": 68.8,
        "kv_cache_gib_per_gpu": 14.5,
        "kv_bytes_per_token": 70272,
        "kv_cache_tokens": tokens,
        "max_concurrency": tokens / max_model_len,
        "fits": fitted,
        "reasons": [] if fitted else [f"{tokens} KV tokens < max_model_len {max_model_len}"],
        **extra,
    }


def _row(dtype: str, dcp: int, length: int, tokens: int, **kw: Any) -> dict[str, Any]:
    return {
        "kv_cache_dtype": dtype,
        "decode_context_parallel_size": dcp,
        "max_model_len": length,
        "plan": _plan(tokens, length, **kw),
    }


LAYOUT = {
    "tensor_parallel_size": 8,
    "pipeline_parallel_size": 1,
    "data_parallel_size": 1,
    "enable_expert_parallel": False,
    "decode_context_parallel_size": 1,
    "gpu_memory_utilization": 0.93,
    "kv_cache_dtype": None,
    "max_model_len": None,
}


# ---- version and condition handling ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0.22.0", (0, 22, 0)), ("v0.19.1rc2.dev5+g1", (0, 19, 1)), ("1.0", (1, 0))],
)
def test_version_tuple(text: str, expected: tuple[int, ...]) -> None:
    assert rep.version_tuple(text) == expected


def test_version_tuple_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="not a version"):
        rep.version_tuple("latest")


def test_condition_engine_version_bounds_are_half_open() -> None:
    when = {"engine_version_lt": "0.20.0"}
    assert rep.condition_matches(when, {"engine_version": "0.19.9"})
    assert not rep.condition_matches(when, {"engine_version": "0.20"})
    assert rep.condition_matches({"engine_version_ge": "0.20.0"}, {"engine_version": "0.20"})


def test_condition_unknown_fact_never_fires() -> None:
    assert not rep.condition_matches({"compute_capability": ["12.0"]}, {"compute_capability": None})
    assert rep.condition_matches({}, {})


def test_condition_unknown_key_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown condition key 'gpu_name'"):
        rep.condition_matches({"gpu_name": "x"}, {})


# ---- settings from the real catalog ---------------------------------------------------------------------


def test_kimi_on_sm120_old_engine_forces_triton_mla_bf16_and_the_patch() -> None:
    s = rep.llm_plan_settings(KIMI, RTX, "0.17.0")
    assert s["engine_args"]["attention-backend"] == "TRITON_MLA"
    assert s["kv_cache_dtypes_unavailable"] == ["fp8"]
    assert sorted(s["patches"]) == [
        "drop_kv_cache_quant_algo_config",
        "drop_kv_cache_quant_algo_hf_quant_config",
    ]
    assert s["engine_env"]["NCCL_P2P_LEVEL"] == "SYS"
    # No release picks FlashInferCuteDslNvFp4W4A16LinearKernel on SM12x (absent before 0.30.0, ranked
    # below the W4A4 kernels from then on): nothing disables it.
    assert "VLLM_DISABLED_KERNELS" not in s["engine_env"]
    assert s["recommends"] == {"decode_context_parallel_size": "tensor_parallel_size"}


def test_kimi_on_sm120_new_engine_needs_no_patch_but_keeps_triton_mla() -> None:
    s = rep.llm_plan_settings(KIMI, RTX, "0.30.0")
    assert s["engine_args"] == {"attention-backend": "TRITON_MLA"}
    assert s["patches"] == []
    assert "fp8" not in s["kv_cache_dtypes_unavailable"]
    assert "VLLM_DISABLED_KERNELS" not in s["engine_env"]
    assert any(n["setting"].startswith("no checkpoint patch on 0.30.0") for n in s["notes"])


def test_kimi_on_hopper_forces_nothing_model_specific() -> None:
    s = rep.llm_plan_settings(KIMI, H200, "0.17.0")
    assert s["engine_args"] == {}
    assert s["patches"] == []
    assert s["engine_env"] == {}
    # The "no checkpoint patch" note is only for hardware where the patch would otherwise apply.
    assert not any(n["setting"].startswith("no checkpoint patch") for n in s["notes"])


def test_issues_without_settings_are_still_reported() -> None:
    glm5 = _catalog("models", "glm5_nvfp4")
    on_sm120 = rep.llm_plan_settings(glm5, RTX, "0.33.0")
    reported = {n["id"] for n in on_sm120["notes"] if n["setting"] == "known issue"}
    assert {"sm120_sparse_mla_backend_limits", "glm5_mtp_breaks_tool_calls"} <= reported
    on_hopper = rep.llm_plan_settings(glm5, H200, "0.33.0")
    assert "sm120_sparse_mla_backend_limits" not in {n["id"] for n in on_hopper["notes"]}
    # Before 0.24.0 SM12.x had no sparse MLA backend at all: refused, with what would serve it.
    old = rep.llm_plan_settings(glm5, RTX, "0.22.0")
    assert [r["id"] for r in old["refusals"]] == ["sm120_sparse_mla_no_backend"]
    assert "0.24.0" in old["refusals"][0]["fix"] and "SGLang" in old["refusals"][0]["fix"]
    assert rep.llm_plan_settings(glm5, H200, "0.22.0")["refusals"] == []


def test_settings_reject_bad_engine_version() -> None:
    with pytest.raises(AnsibleFilterError, match=r"llm_plan_settings: engine_version 'latest'"):
        rep.llm_plan_settings(KIMI, RTX, "latest")


def test_settings_name_the_issue_with_a_bad_condition() -> None:
    model = {"known_issues": [{"id": "bad", "summary": "x", "sources": ["s"], "when": {"colour": ["red"]}}]}
    with pytest.raises(AnsibleFilterError, match=r"rule bad: unknown condition key\(s\) \['colour'\]"):
        rep.llm_plan_settings(model, RTX, "0.22.0")


# ---- layout ---------------------------------------------------------------------------------------------


def test_layout_override_beats_recommendation_beats_default() -> None:
    rec = {"tensor_parallel_size": 4, "layout": {"pipeline_parallel_size": 2}, "gpu_memory_utilization": 0.88}
    layout = rep.llm_plan_layout(rec, {"tensor_parallel_size": 2, "data_parallel_size": None}, RTX)
    assert layout["tensor_parallel_size"] == 2
    assert layout["pipeline_parallel_size"] == 2
    assert layout["data_parallel_size"] == 1
    assert layout["gpu_memory_utilization"] == 0.88


@pytest.mark.parametrize(
    ("rec", "overrides", "gpus", "expected"),
    [
        # The recommendation's replicas beside a TP the user chose: as many as still fit.
        ({"tensor_parallel_size": 1, "data_parallel_size": 2}, {"tensor_parallel_size": 2}, 2, (2, 1, 1)),
        ({"tensor_parallel_size": 1, "data_parallel_size": 8}, {"tensor_parallel_size": 2}, 8, (2, 1, 4)),
        ({"tensor_parallel_size": 1, "data_parallel_size": 8}, {"tensor_parallel_size": 1}, 8, (1, 1, 8)),
        # Pipeline stages shrink once the replicas are down to one; the user's DP stays.
        ({"tensor_parallel_size": 2, "pipeline_parallel_size": 4}, {"tensor_parallel_size": 4}, 8, (4, 2, 1)),
        ({"tensor_parallel_size": 4, "data_parallel_size": 2}, {"data_parallel_size": 4}, 8, (2, 1, 4)),
    ],
)
def test_layout_fits_the_unset_sizes_around_the_users(
    rec: dict[str, Any], overrides: dict[str, Any], gpus: int, expected: tuple[int, int, int]
) -> None:
    layout = rep.llm_plan_layout(rec, overrides, {**RTX, "gpu_count": gpus})
    got = tuple(layout[k] for k in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"))
    assert got == expected


def test_layout_too_large_for_the_profile_names_the_sizes_set() -> None:
    message = r"lower llm_plan_tensor_parallel_size=4 \(llm_tensor_parallel_size in the deploy playbooks\)"
    with pytest.raises(AnsibleFilterError, match=message):
        rep.llm_plan_layout({}, {"tensor_parallel_size": 4}, {**RTX, "gpu_count": 2})


def test_layout_defaults_fill_the_machine_and_use_the_profile_utilization() -> None:
    layout = rep.llm_plan_layout({}, {}, RTX)
    assert layout["tensor_parallel_size"] == 8
    assert layout["gpu_memory_utilization"] == RTX["recommended_gpu_memory_utilization"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"tensor_parallel_size": 8, "pipeline_parallel_size": 2}, "exceeds the 8 GPUs"),
        ({"tensor_parallel_size": 8, "decode_context_parallel_size": 3}, "must be >= 1 and divide TP 8"),
        ({"gpu_memory_utilization": 1.5}, r"must be in \(0, 1\]"),
        ({"tp": 8}, r"unknown override\(s\) \['tp'\]"),
    ],
)
def test_layout_errors_name_the_problem(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(AnsibleFilterError, match=message):
        rep.llm_plan_layout({}, overrides, RTX)


# ---- selection ------------------------------------------------------------------------------------------


def _assemble(rows: list[dict[str, Any]], settings: dict[str, Any], **layout: Any) -> dict[str, Any]:
    return rep.llm_plan_assemble(
        rows,
        model=KIMI,
        hardware=RTX,
        layout={**LAYOUT, **layout},
        settings=settings,
        engine_version="0.22.0",
    )


ROWS = [
    _row("bfloat16", 1, 131072, 200_000),
    _row("bfloat16", 8, 131072, 1_600_000),
    _row("fp8", 1, 131072, 400_000),
    _row("fp8", 8, 131072, 3_200_000),
    _row("fp8", 8, 32768, 3_200_000),
]


def test_select_highest_concurrency_at_the_largest_length() -> None:
    result = _assemble(ROWS, {"engine_args": {"attention-backend": "TRITON_MLA"}})
    assert (result["kv_cache_dtype"], result["decode_context_parallel_size"]) == ("fp8", 8)
    assert result["max_model_len"] == 131072
    assert result["fits"] is True
    assert result["verdict"] == "fits"
    assert result["attention_backend"] == "TRITON_MLA"
    assert result["plan"]["kv_cache_tokens"] == 3_200_000


def test_select_respects_the_layout_choice_when_it_fits() -> None:
    result = _assemble(ROWS, {}, kv_cache_dtype="bfloat16", decode_context_parallel_size=1)
    assert (result["kv_cache_dtype"], result["decode_context_parallel_size"]) == ("bfloat16", 1)


def test_select_skips_dtypes_the_engine_lacks() -> None:
    result = _assemble(ROWS, {"kv_cache_dtypes_unavailable": ["fp8"]})
    assert (result["kv_cache_dtype"], result["decode_context_parallel_size"]) == ("bfloat16", 8)


def test_target_length_from_layout() -> None:
    result = _assemble(ROWS, {}, max_model_len=32768)
    assert result["max_model_len"] == 32768


def test_nothing_fits_gives_verdict_and_reasons() -> None:
    rows = [_row("bfloat16", 1, 131072, 1000), _row("fp8", 1, 131072, 2000)]
    result = _assemble(rows, {})
    assert result["fits"] is False
    assert result["verdict"] == "does_not_fit"
    assert result["kv_cache_dtype"] == "fp8"
    assert any("2000 KV tokens" in r for r in result["reasons"])


def test_only_unavailable_dtypes_never_fit() -> None:
    result = _assemble([_row("fp8", 1, 131072, 400_000)], {"kv_cache_dtypes_unavailable": ["fp8"]})
    assert result["fits"] is False
    assert any("KV dtype this engine supports" in r for r in result["reasons"])


def test_assemble_rejects_empty_and_malformed_rows() -> None:
    with pytest.raises(AnsibleFilterError, match="no plan rows"):
        _assemble([], {})
    with pytest.raises(AnsibleFilterError, match="lacks"):
        _assemble([{"kv_cache_dtype": "fp8"}], {})


# ---- table ----------------------------------------------------------------------------------------------


def test_table_shows_weights_tokens_concurrency_and_forced_settings() -> None:
    settings = rep.llm_plan_settings(KIMI, RTX, "0.17.0")
    result = _assemble(ROWS, settings)
    lines = rep.llm_plan_table(result)
    text = "\n".join(lines)
    assert "Weights per GPU: 68.80 GiB" in text
    assert "8 x NVIDIA RTX PRO 6000 Blackwell" in text
    assert "SM 12.0" in text
    header = next(line for line in lines if "KV tokens" in line)
    assert [c.strip() for c in header.split("|")][:3] == ["pick", "KV dtype", "DCP"]
    picked = [line for line in lines if line.strip().startswith("*")]
    assert len(picked) == 1
    assert "1,600,000" in picked[0]
    assert "bfloat16" in picked[0]
    fp8_rows = [line for line in lines if "|" in line and " fp8 |" in line]
    assert fp8_rows
    assert all("n/a (engine)" in line for line in fp8_rows)
    assert "--attention-backend TRITON_MLA" in text
    assert "env NCCL_P2P_LEVEL=SYS" in text
    assert "patch hf_quant_config.json: remove quantization.kv_cache_quant_algo" in text
    assert "Verdict: FITS" in text
    assert "--decode-context-parallel-size 8" in text


def test_table_columns_line_up() -> None:
    lines = rep.llm_plan_table(_assemble(ROWS, {}))
    grid = [line for line in lines if line.count("|") == 8]
    assert len(grid) == 1 + len(ROWS)
    assert len({len(line) for line in grid}) == 1


def test_table_says_does_not_fit() -> None:
    lines = rep.llm_plan_table(_assemble([_row("bfloat16", 1, 131072, 5)], {}))
    assert any(line.startswith("Verdict: DOES NOT FIT") for line in lines)
    assert any(line.startswith("  reason: ") for line in lines)


def test_table_rejects_other_input() -> None:
    with pytest.raises(AnsibleFilterError, match="llm_plan_table: expects the llm_plan_result"):
        rep.llm_plan_table({"rows": []})


def test_filter_module_maps_names() -> None:
    assert set(_collection.filters("llm_plan_report")) == {
        "llm_plan_settings",
        "llm_plan_layout",
        "llm_plan_assemble",
        "llm_plan_table",
    }
