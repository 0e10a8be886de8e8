"""hf_model + model_patch run for real: the Kimi-K2.5-NVFP4 catalog patches on an olah-served checkpoint."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from conftest import ROOT, Hub, hf_model_role_vars, recap, run_playbook
from hf_model_repos import safetensors_model

pytestmark = pytest.mark.slow
PLAY = ROOT / "tests" / "integration" / "playbooks" / "model_patch.yml"
CATALOG = ROOT / "catalog" / "models" / "kimi_k2_5_nvfp4.yml"
SM120_OLD_ENGINE = {
    "compute_capability": "12.0",
    "engine_version": "0.16.0",
    "attention_backend": "TRITON_MLA",
}

HF_QUANT = {
    "producer": {"name": "modelopt", "version": "0.37.0"},
    "quantization": {
        "quant_algo": "NVFP4",
        "kv_cache_quant_algo": "FP8",
        "group_size": 16,
        "exclude_modules": ["lm_head"],
    },
}
CONFIG = {
    "architectures": ["KimiK25ForConditionalGeneration"],
    "text_config": {"hidden_size": 7168, "kv_lora_rank": 512},
    "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"},
}


def tree_digest(d: Path) -> dict[str, str]:
    return {
        str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(d.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


@pytest.fixture(scope="module")
def kimi_repo(hub: Hub, tmp_path_factory: pytest.TempPathFactory) -> str:
    files = safetensors_model(tmp_path_factory.mktemp("kimi-src"), shards=2)
    files["config.json"] = json.dumps(CONFIG, indent=2).encode()
    files["hf_quant_config.json"] = json.dumps(HF_QUANT, indent=2).encode()
    hub.make_repo("nvidia/Kimi-K2.5-NVFP4-tiny", files)
    return "nvidia/Kimi-K2.5-NVFP4-tiny"


def play_vars(hub: Hub, tmp: Path, repo: str, facts: dict[str, str]) -> dict[str, object]:
    return hf_model_role_vars(
        hub,
        tmp,
        repo,
        "main",
        hf_model_local_dir=str(tmp / "models" / "kimi"),
        catalog_file=str(CATALOG),
        model_patch_overlay_dir=str(tmp / "overlays" / "kimi"),
        model_patch_facts=facts,
    )


def run(v: dict[str, object]) -> dict[str, int]:
    proc = run_playbook(PLAY, v)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    return recap(proc.stdout)


def test_sm120_patch_applied_in_overlay_only_when_condition_holds(
    hub: Hub, kimi_repo: str, tmp_path: Path
) -> None:
    v = play_vars(hub, tmp_path, kimi_repo, SM120_OLD_ENGINE)
    run(v)
    source = tmp_path / "models" / "kimi"
    overlay = tmp_path / "overlays" / "kimi"
    original = tree_digest(source)
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["model_dir"] == str(overlay) and result["overlay"] is True
    assert sorted(result["applied"]) == [
        "drop_kv_cache_quant_algo_config",
        "drop_kv_cache_quant_algo_hf_quant_config",
    ]

    patched_quant = json.loads((overlay / "hf_quant_config.json").read_text())
    assert "kv_cache_quant_algo" not in patched_quant["quantization"]
    assert patched_quant["quantization"]["quant_algo"] == "NVFP4"
    patched_cfg = json.loads((overlay / "config.json").read_text())
    assert "kv_cache_quant_algo" not in patched_cfg["quantization_config"]
    assert patched_cfg["text_config"] == CONFIG["text_config"]
    for name in ("model-00001-of-00002.safetensors", "model.safetensors.index.json", "README.md"):
        assert (overlay / name).is_symlink() and (overlay / name).resolve() == (source / name).resolve()
    assert not (overlay / "config.json").is_symlink()
    assert json.loads((source / "hf_quant_config.json").read_text()) == HF_QUANT

    # Idempotent, and the download cache is byte-for-byte what the hub served.
    assert run(v)["changed"] == 0
    assert tree_digest(source) == original

    # A newer engine (TRITON_MLA has FP8 KV): nothing applies, the overlay is removed, the source is served.
    run({**v, "model_patch_facts": {**SM120_OLD_ENGINE, "engine_version": "0.22.0"}})
    result = json.loads((tmp_path / "result.json").read_text())
    assert result == {**result, "model_dir": str(source), "overlay": False, "applied": []}
    assert not overlay.exists()
    assert tree_digest(source) == original

    # Hopper (no SM120 condition) or an unknown fact: not applied either.
    for facts in ({**SM120_OLD_ENGINE, "compute_capability": "9.0"}, {"compute_capability": "12.0"}):
        run({**v, "model_patch_facts": facts})
        assert json.loads((tmp_path / "result.json").read_text())["applied"] == []
        assert not overlay.exists()

    # Back to the condition: rebuilt over the same source, still without touching it.
    run(v)
    assert not (overlay / "hf_quant_config.json").is_symlink()
    assert tree_digest(source) == original


def test_overlay_dir_not_ours_refused(hub: Hub, kimi_repo: str, tmp_path: Path) -> None:
    overlay = tmp_path / "overlays" / "kimi"
    overlay.mkdir(parents=True)
    (overlay / "precious.txt").write_text("not made by the role")
    proc = run_playbook(PLAY, play_vars(hub, tmp_path, kimi_repo, SM120_OLD_ENGINE))
    assert proc.returncode != 0
    assert "was not made by this role" in proc.stdout
    assert (overlay / "precious.txt").read_text() == "not made by the role"
