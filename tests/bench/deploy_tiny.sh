#!/usr/bin/env bash
# Benchmarks of the main command, playbooks/deploy_tiny.yml, on the `make demo` target (a local systemd
# container, vLLM's CPU build at TP 2, the tiny model from olah). Prints figures; asserts nothing about time.
#   - `make demo` to a verified endpoint: fresh container, package (uv) cache warm
#   - idempotent re-run of the whole deploy (goal <= 25 s, changed=0) and its task count (ok + skipped)
#   - deploy with one changed engine option (restart + verify) vs a bare start of the same command line in
#     the same container, both on an empty compile cache (a new option is a new config vLLM compiles),
#     paired, median of BENCH_PAIRS (default 3) (goal <= 1.5)
# Leaves nothing behind unless BENCH_KEEP_CONTAINER=1; BENCH_REUSE_DEMO=1 starts from a running demo.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
export PATH="$root/.venv/bin:$PATH" ANSIBLE_CONFIG="$root/ansible.cfg" ANSIBLE_NOCOLOR=1
export CONTAINERS_CONF="$root/molecule/_shared/containers.conf"
ctr=llmdeploy-demo
pairs=${BENCH_PAIRS:-3}
# shellcheck source=lib/common.sh
. "$root/tests/bench/lib/common.sh"
cleanup() { [ "${BENCH_KEEP_CONTAINER:-0}" = 1 ] || scripts/demo.sh down >/dev/null 2>&1 || true; }
trap cleanup EXIT
log=/tmp/bench_deploy_tiny.log
# One deploy run; prints the host's changed count, or the run's tail and fails.
deploy() {
  ansible-playbook -i inventory/demo playbooks/deploy_tiny.yml "$@" >"$log" 2>&1 || { tail -60 "$log" >&2; return 1; }
  sed -n "s/^$ctr *: ok=[0-9]* *changed=\([0-9]*\).*/\1/p" "$log" | tail -1
}

if [ "${BENCH_REUSE_DEMO:-0}" = 1 ] && podman container exists "$ctr"; then
  echo "== make demo: skipped (BENCH_REUSE_DEMO=1, $ctr is up)"
else
  echo "== make demo (fresh container, warm package cache)"
  scripts/demo.sh down >/dev/null
  t0=$(now)
  scripts/demo.sh up >/tmp/bench_demo.log 2>&1 || { tail -40 /tmp/bench_demo.log; exit 1; }
  echo "demo to verified endpoint: $(since "$t0") s"
fi

echo "== idempotent re-run of the whole deploy"
for i in 1 2; do
  t0=$(now)
  c=$(deploy)
  tasks=$(sed -n "s/^$ctr *: ok=\([0-9]*\) .*skipped=\([0-9]*\).*/\1 \2/p" "$log" | tail -1)
  echo "re-run $i: $(since "$t0") s, changed=$c, tasks $(echo "$tasks" | awk '{ print $1 + $2 " (ok " $1 ", skipped " $2 ")" }') (goal <= 25 s)"
  grep -o 'mode: [a-z]*' "$log" | head -1 | sed 's/^/  serve_verify /'
done

wait_answer=$(wait_answer_script llmdeploy-test/tiny-chat)

echo "== deploy with a changed option (restart, health wait, serve_verify) vs a bare start, $pairs pairs"
ratios=()
# vLLM compiles each new engine config (about 30 s of the CPU build's warm-up here), and keeps what it
# compiled in the service's cache: a bare start of the command line the playbook's start has just compiled
# would skip that work. Both starts of a pair therefore begin on an empty compile cache and do the same work.
clear_compile_cache() {
  podman exec "$ctr" sh -c 'rm -rf /var/lib/vllm/cache/vllm/torch_compile_cache
    find /var/lib/vllm/cache/torchinductor -mindepth 1 -delete'
}
for i in $(seq "$pairs"); do
  clear_compile_cache
  t0=$(now)
  c=$(deploy -e "{\"llm_engine_args\": {\"max_num_seqs\": $((16 + i))}}")
  playbook=$(since "$t0")
  podman exec "$ctr" systemctl stop vllm.service
  cmd=$(podman exec "$ctr" sed -n 's/^ExecStart=//p' /etc/systemd/system/vllm.service)
  clear_compile_cache
  podman exec "$ctr" sh -c 'find /dev/shm -maxdepth 1 -name "vllm_dist_*" -delete'
  t0=$(now)
  podman exec -d "$ctr" runuser -u vllm -- /bin/sh -c \
    "cd /var/lib/vllm; set -a; . /etc/vllm/vllm.env; set +a; exec $cmd >/tmp/bare.log 2>&1" >/dev/null
  podman exec "$ctr" /bin/sh -c "$wait_answer"
  bare=$(since "$t0")
  podman exec "$ctr" pkill -TERM -u vllm || true
  sleep 3
  podman exec "$ctr" systemctl start vllm.service
  podman exec "$ctr" /bin/sh -c "$wait_answer"
  ratio=$(awk -v a="$playbook" -v b="$bare" 'BEGIN { printf "%.2f", a / b }')
  ratios+=("$ratio")
  echo "pair $i: playbook start-to-verified $playbook s (changed=$c), bare start-to-answer $bare s, ratio $ratio"
done
median=$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
echo "median ratio playbook/bare: $median (goal <= 1.5)"
