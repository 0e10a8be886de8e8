"""playbooks/plan.yml end to end: real ansible-playbook runs, printed numbers checked against the planner."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = ROOT / "playbooks" / "plan.yml"
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"

sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))
import llm_capacity as cap  # noqa: E402

ROW = re.compile(
    r"^\s*(?P<pick>\*?)\s*\|\s*(?P<dtype>\w+)\s*\|\s*(?P<dcp>\d+)\s*\|\s*(?P<len>[\d,]+)\s*\|\s*(?P<bpt>[\d,.]+)\s*\|"
    r"\s*(?P<kvgib>[\d,.-]+)\s*\|\s*(?P<tokens>[\d,]+)\s*\|\s*(?P<conc>[\d,.]+)\s*\|\s*(?P<fits>.+?)\s*$"
)
ENGINE = re.compile(
    r"layout TP (\d+) x PP (\d+) x DP (\d+), expert parallel (on|off), gpu_memory_utilization ([\d.]+)"
)


def _run(*extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run(
        [str(ANSIBLE_PLAYBOOK), str(PLAYBOOK), *extra],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _catalog(kind: str, name: str) -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "catalog" / kind / f"{name}.yml").read_text())
    return data["llm_model" if kind == "models" else "llm_hardware"]


def _interconnect(hw: dict[str, Any]) -> str:
    """The role plans PCIe-only hosts without NVLink all-reduce buffers (roles/llm_plan/vars/main.yml)."""
    return "pcie" if hw.get("interconnect") == "pcie" else "nvlink"


def _recap_ok(out: str) -> None:
    recap = re.search(r"localhost\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", out)
    assert recap, out[-2000:]
    assert recap.group(2) == "0", "the plan must not change anything"
    assert (recap.group(3), recap.group(4)) == ("0", "0")


def _parse(out: str) -> tuple[dict[str, Any], list[dict[str, str]]]:
    engine = ENGINE.search(out)
    assert engine, out[-3000:]
    layout = {
        "tp": int(engine.group(1)),
        "pp": int(engine.group(2)),
        "dp": int(engine.group(3)),
        "ep": engine.group(4) == "on",
        "util": float(engine.group(5)),
    }
    weights = re.search(r"Weights per GPU: ([\d,.]+) GiB", out)
    assert weights
    layout["weights"] = float(weights.group(1).replace(",", ""))
    rows = [m.groupdict() for line in out.splitlines() if (m := ROW.match(line))]
    assert rows, out[-3000:]
    return layout, rows


def _row_plan(model: dict, hw: dict, layout: dict, row: dict, vllm_version: str) -> dict:
    """The planner's own answer for one printed table row under the printed layout."""
    return cap.plan_memory(
        model["hf_config"],
        gpu_memory_gib=hw["gpu_memory_gib"],
        tensor_parallel_size=layout["tp"],
        pipeline_parallel_size=layout["pp"],
        data_parallel_size=layout["dp"],
        enable_expert_parallel=layout["ep"],
        decode_context_parallel_size=int(row["dcp"]),
        gpu_memory_utilization=layout["util"],
        kv_cache_dtype=row["dtype"],
        max_model_len=int(row["len"].replace(",", "")),
        max_num_seqs=256,
        checkpoint_gib=model["checkpoint_bytes"] / 2**30,
        vllm_version=vllm_version,
        gpu_count=hw["gpu_count"],
        interconnect=_interconnect(hw),
    )


def _check_against_planner(
    out: str, model_name: str, hardware_name: str, vllm_version: str = cap.DEFAULT_VLLM_VERSION
) -> list[dict]:
    model, hw = _catalog("models", model_name), _catalog("hardware", hardware_name)
    layout, rows = _parse(out)
    checkpoint_gib = model["checkpoint_bytes"] / 2**30
    # The printed layout is the planner's own recommendation (no overrides given).
    rec = cap.recommend_layout(
        model["hf_config"],
        gpu_memory_gib=hw["gpu_memory_gib"],
        gpu_count=hw["gpu_count"],
        checkpoint_gib=checkpoint_gib,
        compute_capability=hw["compute_capability"],
        vllm_version=vllm_version,
        target_max_model_len=max(int(r["len"].replace(",", "")) for r in rows),
        gpu_memory_utilization=hw["recommended_gpu_memory_utilization"],
        max_num_seqs=256,
        kv_cache_dtypes=["bfloat16", "fp8"],
        interconnect=_interconnect(hw),
    )
    if rec["fits"]:
        assert (layout["tp"], layout["pp"], layout["dp"]) == (
            rec["tensor_parallel_size"],
            rec["pipeline_parallel_size"],
            rec["data_parallel_size"],
        )
    picked = [r for r in rows if r["pick"] == "*"]
    assert len(picked) == 1
    plans = []
    for row in rows:
        plan = _row_plan(model, hw, layout, row, vllm_version)
        assert int(row["tokens"].replace(",", "")) == plan["kv_cache_tokens"], row
        assert row["conc"] == f"{plan['max_concurrency']:,.2f}", row
        assert row["kvgib"] == f"{plan['kv_cache_gib_per_gpu']:,.2f}", row
        if row["fits"] in ("yes", "no"):
            assert (row["fits"] == "yes") == plan["fits"], row
        if row["pick"]:
            assert layout["weights"] == pytest.approx(plan["weights_gib_per_gpu"], abs=0.006)
        plans.append({**row, "plan": plan})
    return plans


def test_default_is_kimi_on_8x_rtx_pro_6000() -> None:
    result = _run()
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    _recap_ok(out)
    assert "Kimi-K2.5 NVFP4" in out
    assert "8 x NVIDIA RTX PRO 6000 Blackwell" in out
    plans = _check_against_planner(out, "kimi_k2_5_nvfp4", "rtx_pro_6000_x8")
    # bf16 and fp8 KV at 128k context are both on the table.
    at_128k = {(p["dtype"], p["dcp"]) for p in plans if p["len"] == "131,072"}
    assert {"bfloat16", "fp8"} <= {d for d, _ in at_128k}
    assert any(dcp != "1" for _, dcp in at_128k), "a DCP > 1 row for long context"
    # FP8 halves the MLA cache per token relative to BF16 at the same DCP.
    per_token = {(p["dtype"], p["dcp"]): p["plan"]["kv_bytes_per_token"] for p in plans}
    assert per_token[("fp8", "1")] * 2 == pytest.approx(per_token[("bfloat16", "1")])
    assert "Verdict: FITS" in out
    # SM120 settings forced by the catalog's known issues and the PCIe hardware profile.
    assert "--attention-backend TRITON_MLA" in out
    assert "env NCCL_P2P_LEVEL=SYS" in out
    assert f"no checkpoint patch on {cap.DEFAULT_VLLM_VERSION}" in out
    assert "the planner models vLLM 0.10-0.33; 0.22.0 is the release run on real GPUs here" in out
    assert "recommend decode_context_parallel_size" in out


def test_old_engine_forces_bf16_kv_and_the_checkpoint_patch() -> None:
    result = _run("-e", "llm_plan_vllm_version=0.17.0")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    _recap_ok(out)
    plans = _check_against_planner(out, "kimi_k2_5_nvfp4", "rtx_pro_6000_x8", vllm_version="0.17.0")
    assert all(p["fits"] == "n/a (engine)" for p in plans if p["dtype"] == "fp8")
    assert [p["dtype"] for p in plans if p["pick"]] == ["bfloat16"]
    assert "patch hf_quant_config.json: remove quantization.kv_cache_quant_algo" in out
    assert "patch config.json: remove quantization_config.kv_cache_quant_algo" in out


@pytest.mark.parametrize(
    ("model", "hardware"),
    [
        ("glm5_nvfp4", "h200_x8"),
        ("tiny_test", "h100_x1"),
        ("glm5_ud_q4_k_xl_gguf", "rtx_pro_6000_x8"),
        ("tiny_test", "h200_x8"),
        ("kimi_k2_5_nvfp4", "h200_x2"),
    ],
)
def test_other_catalog_combinations(model: str, hardware: str) -> None:
    result = _run("-e", f"llm_model_name={model}", "-e", f"llm_hardware_name={hardware}")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    _recap_ok(out)
    _check_against_planner(out, model, hardware)
    assert f"({_catalog('models', model)['hf_repo']}@main)" in out


def test_tiny_model_on_eight_gpus_runs_data_parallel() -> None:
    """Regression: the recommender proposed PP 8 for a 2-layer model and the play failed."""
    result = _run("-e", "llm_model_name=tiny_test", "-e", "llm_hardware_name=h200_x8")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    layout, _ = _parse(out)
    assert (layout["tp"], layout["pp"], layout["dp"]) == (1, 1, 8)
    assert "--data-parallel-size 8" in out
    assert "Verdict: FITS" in out


def test_nothing_fits_reports_why() -> None:
    result = _run("-e", "llm_model_name=kimi_k2_5_nvfp4", "-e", "llm_hardware_name=h200_x2")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    assert "Verdict: DOES NOT FIT" in out
    assert "exceed gpu_memory_utilization" in out


def test_check_mode_plans_too() -> None:
    result = _run("--check", "-e", "llm_model_name=tiny_test", "-e", "llm_hardware_name=h100_x1")
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert "Verdict: FITS" in result.stdout


@pytest.mark.parametrize(
    ("variable", "other"),
    [("llm_model_name", "llm_hardware_name=h200_x8"), ("llm_hardware_name", "llm_model_name=tiny_test")],
)
def test_unknown_names_fail_and_list_the_catalog(variable: str, other: str) -> None:
    result = _run("-e", f"{variable}=no_such_entry", "-e", other)
    out = result.stdout + result.stderr
    assert result.returncode != 0
    assert f"{variable}=no_such_entry is not in catalog/" in out
    listed = "kimi_k2_5_nvfp4" if variable == "llm_model_name" else "rtx_pro_6000_x8"
    assert listed in out
    assert "Show the plan" not in out


def test_misfit_fails_only_when_asked_and_after_printing() -> None:
    args = ("-e", "llm_model_name=kimi_k2_5_nvfp4", "-e", "llm_hardware_name=h100_x1")
    report = _run(*args)
    assert report.returncode == 0, (report.stdout + report.stderr)[-3000:]
    assert "Verdict: DOES NOT FIT" in report.stdout
    strict = _run(*args, "-e", "llm_plan_fail_when_not_fits=true")
    out = strict.stdout + strict.stderr
    assert strict.returncode != 0
    assert "Verdict: DOES NOT FIT" in out, out[-3000:]
    assert "kimi_k2_5_nvfp4 does not fit h100_x1" in out
    assert "llm_plan_tensor_parallel_size" in out


def test_bad_override_names_the_variable() -> None:
    result = _run("-e", '{"llm_plan_kv_cache_dtypes": ["int3"]}')
    out = result.stdout + result.stderr
    assert result.returncode != 0
    assert "llm_plan_kv_cache_dtypes must be a non-empty subset" in out


def test_layout_override_is_planned() -> None:
    result = _run("-e", "llm_plan_tensor_parallel_size=8", "-e", "llm_plan_pipeline_parallel_size=1")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    layout, _ = _parse(out)
    assert (layout["tp"], layout["pp"]) == (8, 1)
    _check_against_planner_rows_only(out)


def _check_against_planner_rows_only(out: str) -> None:
    """With overrides the layout is not the recommendation; the rows must still be the planner's."""
    model, hw = _catalog("models", "kimi_k2_5_nvfp4"), _catalog("hardware", "rtx_pro_6000_x8")
    layout, rows = _parse(out)
    for row in rows:
        plan = _row_plan(model, hw, layout, row, cap.DEFAULT_VLLM_VERSION)
        assert int(row["tokens"].replace(",", "")) == plan["kv_cache_tokens"], row
