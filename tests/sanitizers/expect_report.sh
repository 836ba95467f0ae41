#!/bin/sh
# usage: expect_report.sh REGEX COMMAND [ARGS...]
# Passes when COMMAND exits non-zero and its output (stdout + stderr) matches
# the extended regex REGEX: a sanitizer reported the planted bug and stopped.
regex=$1
shift
out=$("$@" 2>&1)
code=$?
printf '%s\n' "$out"
echo "expect_report.sh: exit code $code"
if [ "$code" -eq 0 ]; then
  echo "expect_report.sh: FAIL: exit code 0, expected a sanitizer stop"
  exit 1
fi
if ! printf '%s\n' "$out" | grep -Eq -- "$regex"; then
  echo "expect_report.sh: FAIL: no line matches '$regex'"
  exit 1
fi
echo "expect_report.sh: reported as expected"
