#!/usr/bin/env bash
# Benchmarks of the vllm_service role in the molecule/vllm_service container (real vLLM CPU build, TP=2).
# Prints figures; asserts nothing about time. Goals from issue 4:
#   - time to healthy through the playbook vs a bare server start in the same container: <= 1.2x
#   - wall time of an idempotent re-run of the full converge: <= 15 s with changed=0
# Both starts use the same warm compile cache, and both end with a real chat completion answered.
# Creates and converges the scenario's container when needed; destroys it at the end.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
export PATH="$root/.venv/bin:$PATH"
export ANSIBLE_CONFIG="$root/ansible.cfg"
export CONTAINERS_CONF="$root/molecule/_shared/containers.conf"
scenario=molecule/vllm_service
ctr=llmdeploy-vllm-service
keep=${BENCH_KEEP_CONTAINER:-0}

# shellcheck source=lib/common.sh
. "$root/tests/bench/lib/common.sh"

inv=$(mktemp --suffix=.yml)
cleanup() {
  rm -f "$inv"
  [ "$keep" = 1 ] || molecule destroy -s vllm_service >/dev/null 2>&1 || true
}
trap cleanup EXIT

echo "== converge (creates the container and deploys when needed)"
t0=$(now)
molecule converge -s vllm_service >/tmp/bench_vllm_service_converge.log 2>&1 ||
  { tail -50 /tmp/bench_vllm_service_converge.log; exit 1; }
echo "first converge: $(since "$t0") s"

cat >"$inv" <<INV
all:
  hosts:
    $ctr:
      ansible_connection: llmdeploy.llm.podman_exec
      ansible_host: $ctr
INV

in_ctr() { podman exec "$ctr" "$@"; }

wait_answer=$(wait_answer_script tiny-llama)

echo "== bare start: the unit's own command line, run by hand as the service user"
in_ctr systemctl stop vllm.service
cmd=$(in_ctr sed -n 's/^ExecStart=//p' /etc/systemd/system/vllm.service)
in_ctr sh -c 'find /dev/shm -maxdepth 1 -name "vllm_dist_*" -delete'
t0=$(now)
podman exec -d "$ctr" runuser -u vllm -- /bin/sh -c \
  "cd /var/lib/vllm; set -a; . /etc/vllm/vllm.env; set +a; exec $cmd >/tmp/bare.log 2>&1" >/dev/null
in_ctr /bin/sh -c "$wait_answer"
bare=$(since "$t0")
echo "bare start to first answer: $bare s"
in_ctr pkill -TERM -u vllm -f vllm.entrypoints.openai.api_server || true
in_ctr /bin/sh -c 'while pgrep -u vllm >/dev/null; do sleep 0.5; done; find /dev/shm -maxdepth 1 -name "vllm_dist_*" -delete'

echo "== through the playbook: unit and environment file removed, the role renders, starts and waits"
in_ctr rm -f /etc/systemd/system/vllm.service /etc/vllm/vllm.env
in_ctr systemctl daemon-reload
t0=$(now)
ansible-playbook -i "$inv" "$scenario/external_consumer.yml" >/tmp/bench_vllm_service_play.log 2>&1 ||
  { tail -40 /tmp/bench_vllm_service_play.log; exit 1; }
play=$(since "$t0")
grep -q "$ctr.*ok=" /tmp/bench_vllm_service_play.log || { echo "the playbook ran on no host"; exit 1; }
echo "playbook to first answer: $play s"
awk -v p="$play" -v b="$bare" 'BEGIN { printf "ratio playbook/bare: %.2f (goal <= 1.2)\n", p / b }'

echo "== idempotent re-run of the full converge (ml_env + model + vllm_service)"
t0=$(now)
ansible-playbook -i "$inv" "$scenario/converge.yml" >/tmp/bench_vllm_service_idem.log 2>&1 ||
  { tail -40 /tmp/bench_vllm_service_idem.log; exit 1; }
idem=$(since "$t0")
changed=$(grep -oE 'changed=[0-9]+' /tmp/bench_vllm_service_idem.log | tail -1 || echo "changed=?")
echo "idempotent converge: $idem s, $changed (goal <= 15 s, changed=0)"
echo "machine load average: $(cut -d' ' -f1-3 /proc/loadavg)"
