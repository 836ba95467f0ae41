#!/usr/bin/env bash
# Prints the N slowest tests of a ctest log (default 15), slowest first:
#   bash deploy/slowest-tests.sh build/ctest.log [N]
# ctest prints one line per finished test:
#   " 12/392 Test  #57: e2e.hot_reload ..................   Passed   48.31 sec"
set -euo pipefail
log=${1:?usage: slowest-tests.sh CTEST_LOG [N]}
n=${2:-15}
[ -f "$log" ] || { echo "slowest-tests.sh: no log $log" >&2; exit 1; }
lines=$(sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) .* ([0-9]+\.[0-9]+) sec$/\2 \1/p' "$log" | sort -rn)
count=$(printf '%s\n' "$lines" | grep -c . || true)
total=$(printf '%s\n' "$lines" | awk '{s += $1} END {printf "%.1f", s}')
echo "slowest $n of $count tests (sum of test times ${total} s):"
# awk reads all of its input (head would close the pipe early: SIGPIPE, and
# with pipefail a failed script).
printf '%s\n' "$lines" | awk -v n="$n" 'NR <= n {printf "  %8.2f s  %s\n", $1, $2}'
