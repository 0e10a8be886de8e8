#!/usr/bin/env bash
# Filter molecule's output (stdin to stdout, unchanged) and print at the end how long each of the scenario's
# actions took, from molecule's own "[scenario > action] Executing" / "Executed" lines. Each action's time is
# also appended to $STAGE_TIMES as "molecule SCENARIO ACTION" (marked as a part of the scenario) when that
# variable is set.
set -uo pipefail
declare -a order=()
declare -A took=()
current=""
started=0
while IFS= read -r line; do
  printf '%s\n' "$line"
  if [[ $line =~ \[([A-Za-z0-9_.-]+)\ \>\ ([A-Za-z0-9_]+)\]\ Executing ]]; then
    current="${BASH_REMATCH[1]} ${BASH_REMATCH[2]}"
    started=$EPOCHSECONDS
  elif [[ -n $current && $line =~ \]\ Executed ]]; then
    key=$current
    [[ -v took[$key] ]] || order+=("$key")
    took[$key]=$((${took[$key]:-0} + EPOCHSECONDS - started))
    current=""
  fi
done
[ "${#order[@]}" -gt 0 ] || exit 0
echo "=== molecule action wall times (s)"
for key in "${order[@]}"; do
  printf '%-40s %6d\n' "$key" "${took[$key]}"
  [ -z "${STAGE_TIMES:-}" ] || printf 'molecule %s\t%d\t0\tpart\n' "$key" "${took[$key]}" >>"$STAGE_TIMES"
done
