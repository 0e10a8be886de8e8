#!/usr/bin/env bash
# Run the molecule scenarios given as arguments: those named in PARALLEL_SCENARIOS start first, in the
# background (log in .cache/molecule-logs/), the others one after another in the foreground. Exits non-zero
# when any of them failed, after all have ended and the background logs are printed.
# Why in parallel: most of a scenario's time is waiting (package installs, the engine's start-up, health
# polls), and CI's 90-minute limit does not leave room for the two-node scenario after the others.
set -uo pipefail
cd "$(dirname "$0")/.."
# Plain "[scenario > action] Executing" lines: scripts/molecule-actions.sh times the actions from them.
export NO_COLOR=1
export STAGE_TIMES=${STAGE_TIMES:-$PWD/.cache/stage-times.tsv}
run() { scripts/stage-time.sh "molecule $1" bash -o pipefail -c 'molecule test -s "$0" 2>&1 | scripts/molecule-actions.sh' "$1"; }
logs=.cache/molecule-logs
mkdir -p "$logs"
in_parallel() { case " ${PARALLEL_SCENARIOS:-} " in *" $1 "*) return 0 ;; esac; return 1; }

status=0
pids=()
names=()
for s in "$@"; do
  in_parallel "$s" || continue
  echo "=== molecule test -s $s (in the background; log: $logs/$s.log)"
  run "$s" >"$logs/$s.log" 2>&1 &
  pids+=("$!")
  names+=("$s")
done
for s in "$@"; do
  in_parallel "$s" && continue
  echo "=== molecule test -s $s"
  run "$s" || { echo "=== molecule test -s $s: FAILED"; status=1; }
done
for i in "${!pids[@]}"; do
  if wait "${pids[$i]}"; then rc=0; else rc=$?; status=1; fi
  echo "=== molecule test -s ${names[$i]} (background) ended with exit status $rc; its log:"
  cat "$logs/${names[$i]}.log"
done
exit "$status"
