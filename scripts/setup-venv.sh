#!/usr/bin/env bash
# Create .venv with the pinned controller tools (requirements-dev.txt). Re-running is cheap: uv skips
# what is already installed. Works on a fresh Debian/Ubuntu machine with python3 and pip.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${VENV:-.venv}
if [ ! -x "$venv/bin/python" ]; then
  if ! python3 -m venv "$venv" 2>/dev/null; then
    # Debian/Ubuntu ship venv separately; fall back to virtualenv from PyPI.
    rm -rf "$venv"
    python3 -m pip install --user -q virtualenv
    python3 -m virtualenv -q "$venv"
  fi
fi
"$venv/bin/python" -m pip install -q --upgrade pip uv==0.13.9
"$venv/bin/uv" pip install -q --python "$venv/bin/python" -r requirements-dev.txt
# The checkout is the collection llmdeploy.llm; ansible.cfg's collections_path finds it here under its
# FQCN, so nothing is installed or copied and edits take effect at once.
mkdir -p .collections/ansible_collections/llmdeploy
ln -sfn ../../.. .collections/ansible_collections/llmdeploy/llm
touch "$venv/.installed"
