"""Publish the tiny chat model (catalog/models/tiny_test.yml) as an olah mirror: llmdeploy-test/tiny-chat.

Three commits of one repository, so deployments can switch between revisions of the same model:
``random`` (untrained weights: the quality gate must fail), ``retrained`` (seed 1) and ``trained`` (seed 0,
the branch ``main``). The models are trained with train_tiny_chat.py under a Python that has torch
(``--python``; default: the vLLM CPU venv of the integration tests, created when missing) and cached by
the hash of the trainer and the catalog entry. Prints and writes ``<out>/revisions.json``.

Usage: python tests/models/publish_tiny_chat.py OUT_DIR [--python PY]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TRAINER = HERE / "train_tiny_chat.py"
CATALOG = ROOT / "catalog" / "models" / "tiny_test.yml"
REPO = "llmdeploy-test/tiny-chat"
FILES = [
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
]
# Commit order: main ends on the trained model.
BUILDS = {"random": ["--random"], "retrained": ["--seed", "1"], "trained": ["--seed", "0"]}

sys.path.insert(0, str(HERE))
from hub_mirror import make_repo  # noqa: E402  (this directory is put on sys.path above)


def _default_python() -> Path:
    sys.path.insert(0, str(ROOT / "tests" / "integration"))
    import tiny_vllm  # noqa: PLC0415  (the vLLM venv is built only when no --python is given)

    tiny_vllm._ensure_vllm_venv()
    return tiny_vllm.VLLM_PY


def build(python: Path, kind: str) -> Path:
    digest = hashlib.sha256(TRAINER.read_bytes() + CATALOG.read_bytes()).hexdigest()[:12]
    final = ROOT / ".cache" / "tiny-chat" / digest / kind
    if not (final / "model.safetensors").exists():
        # A build of its own (two scenarios may build at once); the first complete one is kept.
        tmp = final.with_name(f".{kind}.{os.getpid()}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run([str(python), str(TRAINER), str(tmp), *BUILDS[kind]], check=True, timeout=900)
        if (final / "model.safetensors").exists():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            shutil.rmtree(final, ignore_errors=True)
            tmp.rename(final)
    return final


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="the mirror directory (olah mirrors-path)")
    ap.add_argument("--python", type=Path, help="a Python with torch, transformers and tokenizers")
    args = ap.parse_args()
    python = args.python or _default_python()
    shutil.rmtree(args.out / "models" / REPO, ignore_errors=True)
    revisions = {}
    for kind in BUILDS:
        model = build(python, kind)
        files = {name: model / name for name in FILES}
        revisions[kind] = make_repo(args.out, REPO, files, move=False)
    revisions["repo"] = REPO
    (args.out / "revisions.json").write_text(json.dumps(revisions, indent=1) + "\n")
    print(json.dumps(revisions))


if __name__ == "__main__":
    main()
