#!/usr/bin/env bash
# The failing assertions of the last tap run, by file (`solo`: of test/*.solo.ts, else of the rest):
# a CI log shows only its tail, and the suite's failures scroll past long before the solo slot ends.
shopt -s globstar nullglob
for f in .tap/test-results/**/*.tap; do
  case "$f" in *.solo.ts.tap) [ "${1:-}" = solo ] || continue ;; *) [ "${1:-}" = solo ] && continue ;; esac
  # A file that outlived its tests ends with a failure but no failing assertion: its lines say what it held (test/linger.ts).
  if grep -qE '^not ok|^# lingering' "$f"; then
    echo "FAILED ${f#.tap/test-results/}"
    grep -E '^ *not ok|^# lingering' "$f" | sed 's/^/  /'
  fi
done
