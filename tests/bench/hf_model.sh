#!/usr/bin/env bash
# Benchmark: the hf_model role vs a plain `hf download` from the same olah mirror, and bytes re-fetched after
# an interruption. Prints figures (see tests/bench/hf_model_bench.py); options pass through, e.g. --shard-mb 200.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec .venv/bin/python tests/bench/hf_model_bench.py "$@"
