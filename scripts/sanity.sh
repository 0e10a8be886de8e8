#!/usr/bin/env bash
# `ansible-test sanity` on the collection (make test's lint stage). ansible-test needs the collection at
# .../ansible_collections/llmdeploy/llm and, in a git checkout, lists files through git (the symlink under
# .collections resolves to the checkout, whose .cache is ignored), so the files git tracks (staged ones
# included) are copied to such a tree outside the checkout (a few MB, about 1 s).
# Its tools (pylint, pycodestyle, voluptuous, antsibull-changelog, ...) are ansible-test's own pinned
# requirements for this ansible-core, installed once into .venv-sanity with uv; ansible-test then makes one
# venv per test from them (under ~/.ansible/test/venv, kept between runs).
# Arguments are passed to ansible-test (e.g. --test pylint).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
venv=$repo/.venv-sanity
core=$(.venv/bin/python -c 'import ansible.release as r; print(r.__version__)')
reqs=$(.venv/bin/python -c 'import ansible_test, os; print(os.path.join(os.path.dirname(ansible_test.__file__), "_data", "requirements"))')
if [ ! -f "$venv/.installed-$core" ]; then
  rm -rf "$venv"
  .venv/bin/uv venv -q --python "$(.venv/bin/python -c 'import sys; print(sys.executable)')" "$venv"
  args=()
  for f in "$reqs"/sanity.*.txt; do args+=(-r "$f"); done
  .venv/bin/uv pip install -q --python "$venv/bin/python" "ansible-core==$core" "${args[@]}"
  touch "$venv/.installed-$core"
fi
# ansible-test bootstraps pip into each test venv with a script it downloads from ci-files.testing.ansible.com
# (not reachable from these machines) unless that script is in its cache. This stand-in does the same from
# PyPI: the interpreter's bundled pip (ensurepip), then pip installs the versions ansible-test asked for.
pip_version=$("$venv/bin/python" -c 'import ansible_test._internal.python_requirements as p, ansible_test._internal.util as u; print(p.get_venv_packages(type("P", (), {"version": "3.11"})())["pip"])' 2>/dev/null || echo 24.2)
cache=$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py
mkdir -p "$(dirname "$cache")"
cat >"$cache.new" <<'PY'
# llmdeploy stand-in for get-pip.py (scripts/sanity.sh): bundled pip first, then the requested packages.
import ensurepip
import os
import subprocess
import sys

env = dict(os.environ)
ensurepip.bootstrap()
# (ensurepip sets PIP_CONFIG_FILE=/dev/null in os.environ: the second pip gets the caller's environment, so
# it reads the machine's pip configuration, e.g. the CA bundle of an intercepting proxy.)
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install", "-q", *args], env=env))
PY
mv "$cache.new" "$cache"
tree=${SANITY_TREE:-${TMPDIR:-/tmp}/llmdeploy-sanity-$(id -u)}/ansible_collections/llmdeploy/llm
rm -rf "$tree"
mkdir -p "$tree"
git ls-files -c -z | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C "$tree"
cd "$tree"
PATH=$venv/bin:$PATH ansible-test sanity --python 3.11 --color no "$@"
