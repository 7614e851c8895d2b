#!/usr/bin/env bash
# tests/summary.sh SUMMARY MAKE_STATUS SECONDS - the end of `make test`: print every step's line
# (written by tests/run_step.sh) and the totals; exit 1 if a step failed, if make itself failed
# (a step that could not even start), or if no step ran.
set -u
summary=$1 mk=${2:-0} secs=${3:-?}
echo
echo "==== make test summary ($summary) ===================================================="
if [ -s "$summary" ]; then cat "$summary"; else echo "(no step ran)"; fi
pass=$(grep -c '^PASS' "$summary" 2>/dev/null); fail=$(grep -c '^FAIL' "$summary" 2>/dev/null)
skip=$(grep -c '^SKIP' "$summary" 2>/dev/null)
[ "$mk" = 0 ] || echo "make exited with status $mk (a step could not run; see the output above)"
verdict=PASSED
if [ "${fail:-0}" != 0 ] || [ "$mk" != 0 ] || [ "${pass:-0}" = 0 ]; then verdict=FAILED; fi
echo "==== make test $verdict: ${pass:-0} passed, ${fail:-0} failed, ${skip:-0} skipped, ${secs} s wall ===="
[ "$verdict" = PASSED ]
