#!/usr/bin/env bash
# Runs the gpu_preflight role for real on the lent GPU machine, from the repository root there.
# Needs the ansible wheels in .stage/ansible-wheels (see tests/gpu/README.md for the local call).
# Writes logs and the recorded probe outputs (tests/fixtures/h200x2_run format) under $OUT.
# Usage: run_preflight_on_gpu.sh [STEP...]   (steps 1-4 by default, 5 = the slower-environment warning)
set -uo pipefail
OUT=${OUT:-/tmp/gpu_preflight_out}
rec=/tmp/h200x2_run
mkdir -p "$OUT" "$rec"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/ans .stage/ansible-wheels/*.whl || exit 1
export PYTHONPATH=/tmp/ans ANSIBLE_CONFIG="$PWD/ansible.cfg" ANSIBLE_HOME=/tmp/ans-home ANSIBLE_FORCE_COLOR=0
playbook() { python3 -c 'import sys; from ansible.cli.playbook import main; sys.argv[0] = "ansible-playbook"; main()' "$@"; }
run() { local name=$1; shift; echo "=== $name: ansible-playbook $*"; { time playbook "$@"; } >"$OUT/$name.log" 2>&1; echo "rc=$?"; grep -A1 'PLAY RECAP' "$OUT/$name.log" | tail -1; }

nvidia-smi -L
steps=${*:-1 2 3 4}
for step in $steps; do
  case $step in
    1) # Real probes, recorded; checks; NCCL choice; the all-reduce benchmark with both environments.
       run run1_bench tests/gpu/preflight_gpu.yml --tags all,nccl_bench -e gpu_preflight_record_dir=$rec -e gpu_run_out=$rec
       grep -E 'all-reduce|busbw|WARNING' "$OUT/run1_bench.log" | head -20
       tar czf "$OUT/h200x2_run.tgz" -C /tmp h200x2_run ;;
    2) # Again without recording: must report changed=0.
       run run2_idempotent tests/gpu/preflight_gpu.yml ;;
    3) # Check mode works (the probes still run: check_mode false).
       run run3_check tests/gpu/preflight_gpu.yml --check ;;
    4) # A refusal on real hardware: TP=4 on 2 GPUs, and an SM10-only MLA backend on Hopper.
       run run4_refuse tests/gpu/preflight_gpu.yml -e gpu_preflight_tensor_parallel_size=4 -e gpu_preflight_attention_backend=CUTLASS_MLA
       grep -o 'gpu_preflight refused.*' "$OUT/run4_refuse.log" | head -1 ;;
    5) # The >5 % warning on real hardware: operator overrides NCCL_P2P_DISABLE=1 (slower) and NCCL_PROTO=LL
       # (must be dropped on NVLink); the benchmark must warn.
       run run5_slower_env tests/gpu/preflight_gpu.yml --tags all,nccl_bench \
         -e '{"gpu_preflight_nccl_env_overrides": {"NCCL_P2P_DISABLE": "1", "NCCL_PROTO": "LL"}}'
       grep -E 'Ignored override|all-reduce|WARNING' "$OUT/run5_slower_env.log" | head -20 ;;
  esac
done
