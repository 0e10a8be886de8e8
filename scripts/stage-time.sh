#!/usr/bin/env bash
# Run one stage of `make test` and record its wall time: `stage-time.sh NAME CMD...` appends
# "NAME<TAB>seconds<TAB>exit status" to $STAGE_TIMES (default .cache/stage-times.tsv), prints the time when the
# stage ends (also when it fails) and exits with the command's status. `stage-time.sh --report` prints the
# table of the stages recorded so far, their sum and the wall time since `stage-time.sh --reset` emptied it.
# Rows with a fourth field "part" (molecule's actions, written by molecule-actions.sh) are shown indented and
# left out of the sum, as their scenario's row already counts them. Stages run in parallel (PARALLEL_SCENARIOS)
# overlap, so the sum can exceed the wall time.
set -uo pipefail
cd "$(dirname "$0")/.."
times=${STAGE_TIMES:-.cache/stage-times.tsv}
mkdir -p "$(dirname "$times")"
case "${1:-}" in
  --reset) : >"$times"; date +%s >"$times.start"; exit 0 ;;
  --report)
    [ -s "$times" ] || { echo "no stage timings recorded in $times"; exit 0; }
    echo "=== stage wall times (s)"
    awk -F'\t' '$4 == "part" { printf "  %-38s %6d\n", $1, $2; next }
      { printf "%-40s %6d%s\n", $1, $2, ($3 == 0 ? "" : "  FAILED (" $3 ")"); sum += $2 }
      END { printf "%-40s %6d\n", "sum of the stages", sum }' "$times"
    [ -s "$times.start" ] && echo "wall time since the reset: $(($(date +%s) - $(cat "$times.start"))) s"
    exit 0 ;;
esac
name=${1:?usage: stage-time.sh NAME CMD... | --report | --reset}
shift
start=$(date +%s)
"$@"
rc=$?
elapsed=$(($(date +%s) - start))
printf '%s\t%d\t%d\n' "$name" "$elapsed" "$rc" >>"$times"
echo "=== stage $name: ${elapsed} s (exit status $rc)"
exit "$rc"
