#!/usr/bin/env bash
# Run the molecule scenarios given as arguments in two lanes: those named in PARALLEL_SCENARIOS one after
# another in a background chain (log in .cache/molecule-logs/background.log), the others one after another in
# the foreground. Exits non-zero when any of them failed, after both lanes have ended and the background log
# is printed.
# Why two lanes: most of a scenario's time is waiting (package installs, the engine's start-up, health polls),
# so two scenarios share this 2-core machine well; a third at once only slows the other two. Pick the lanes so
# that their sums are close (each scenario's time is in the stage table).
set -uo pipefail
cd "$(dirname "$0")/.."
# Plain "[scenario > action] Executing" lines: scripts/molecule-actions.sh times the actions from them.
export NO_COLOR=1
export STAGE_TIMES=${STAGE_TIMES:-$PWD/.cache/stage-times.tsv}
run() { scripts/stage-time.sh "molecule $1" bash -o pipefail -c 'molecule test -s "$0" 2>&1 | scripts/molecule-actions.sh' "$1"; }
logs=.cache/molecule-logs
mkdir -p "$logs"
in_parallel() { case " ${PARALLEL_SCENARIOS:-} " in *" $1 "*) return 0 ;; esac; return 1; }
# One lane: the scenarios for which "$1" (in_parallel or ! in_parallel) holds, in order; each runs even when an
# earlier one failed. Exit status 1 when any failed.
lane() {
  local want=$1 s rc=0
  shift
  for s in "$@"; do
    if [ "$want" = background ]; then in_parallel "$s" || continue; else in_parallel "$s" && continue; fi
    echo "=== molecule test -s $s ($want)"
    run "$s" || { echo "=== molecule test -s $s ($want): FAILED"; rc=1; }
  done
  return "$rc"
}

status=0
background=()
for s in "$@"; do in_parallel "$s" && background+=("$s"); done
pid=""
if [ "${#background[@]}" -gt 0 ]; then
  echo "=== in the background, one after another: ${background[*]} (log: $logs/background.log)"
  lane background "$@" >"$logs/background.log" 2>&1 &
  pid=$!
fi
lane foreground "$@" || status=1
if [ -n "$pid" ]; then
  if wait "$pid"; then rc=0; else rc=$?; status=1; fi
  echo "=== background lane (${background[*]}) ended with exit status $rc; its log:"
  cat "$logs/background.log"
fi
exit "$status"
