#!/usr/bin/env bash
# The issue-7 performance harness: every row of the target table, measured
# side by side in one run on this machine, with its configuration, medians,
# target and PASS/MISS; writes OUT/report.md and OUT/report.json.
#
#   bash bench/run_all.sh [--quick] [--out DIR] [--build-dir DIR] [...]
#
# --quick: a ~3 minute smoke (one round, short load windows); the default
# full run takes ~10 minutes on 2 quiet cores. `--help` lists every option;
# bench/run_all.py holds the logic and docs/performance.md ("Harness")
# describes each row. Needs BUILD/bin/{dserve,dserve-client,tokenizer_bench}
# and Debian's /usr/bin/python3 (torch, sentencepiece).
set -euo pipefail
exec /usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/run_all.py" "$@"
