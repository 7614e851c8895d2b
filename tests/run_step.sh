#!/usr/bin/env bash
# tests/run_step.sh - one step of `make test`: run it, show it, log it, and record one summary line.
#
#   tests/run_step.sh SUMMARY 'what the step is' 'shell command'
#   tests/run_step.sh --skip SUMMARY 'what the step is' 'why it was skipped'
#
# The command runs under bash -c with its output shown as it comes and kept in build/logs/. One line
# goes to SUMMARY: PASS, FAIL or SKIP, the seconds it took, what it was, and what it reported: the
# counts of a cmocka suite ("[  PASSED  ] 33 test(s)." ...), or the text of its "step-detail:"
# lines. Exit status 77 from the command means SKIP (a tool the step needs is missing). Exits with
# the command's status (0 for SKIP), so that make sees a failure; `make test` goes on regardless.
set -u
skip=0
if [ "${1:-}" = "--skip" ]; then skip=1; shift; fi
summary=$1 label=$2 cmd=$3
mkdir -p "$(dirname "$summary")/logs"

if [ "$skip" = 1 ]; then
  printf '\n==== SKIP: %s (%s)\n' "$label" "$cmd"
  printf '%-4s %7s  %s (%s)\n' SKIP "" "$label" "$cmd" >> "$summary"
  exit 0
fi

n=$(( $(wc -l < "$summary" 2>/dev/null || echo 0) + 1 ))
log=$(dirname "$summary")/logs/$(printf '%02d' "$n")-$(printf '%s' "$label" | tr -cs 'A-Za-z0-9' '-' | cut -c1-50).log
printf '\n==== %s\n' "$label"
t0=$(date +%s.%N)
bash -c "$cmd" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1fs", b - a }')

# what the step said about itself: cmocka's counts, or its step-detail lines
detail=$(awk '
  /^\[==========\] [0-9]+ test\(s\) run\./ { run += $2; seen = 1 }
  /^\[  PASSED  \] [0-9]+ test\(s\)\./      { pass += $4 }
  /^\[  FAILED  \] [0-9]+ test\(s\)/        { fail += $4 }
  /^\[  SKIPPED \] [0-9]+ test\(s\)/        { skip += $4 }
  /^step-detail: /                          { sub(/^step-detail: /, ""); d = d (d == "" ? "" : "; ") $0 }
  END {
    if (seen) printf "%d tests: %d passed, %d failed, %d skipped", run, pass, fail, skip
    if (d != "") printf "%s%s", seen ? "; " : "", d
  }' "$log")

case $rc in
  0)  status=PASS ;;
  77) status=SKIP; rc=0 ;;
  *)  status=FAIL; detail="${detail:+$detail; }exit status $rc, log $log" ;;
esac
printf '==== %s: %s (%s)\n' "$status" "$label" "$secs"
printf '%-4s %7s  %s%s\n' "$status" "$secs" "$label" "${detail:+: $detail}" >> "$summary"
exit "$rc"
