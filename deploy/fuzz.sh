#!/usr/bin/env bash
# Runs the libFuzzer targets of the fuzz build (tests/fuzz), all at once, and
# writes a per-fuzzer log and a summary table (executions, exec/s, coverage
# cov/ft, corpus, peak RSS, wall and CPU time, crashes). Exits 1 when a
# fuzzer crashed (the crashing input is saved in OUT/TARGET/crash-*).
#
#   bash deploy/fuzz.sh --build --minutes 30               # every fuzzer, 30 min, nice 19
#   bash deploy/fuzz.sh --seconds 60 fuzz_tokenizer         # one fuzzer, one minute
#   bash deploy/fuzz.sh --cpu-minutes 30                    # each until it has had 30 CPU minutes
#
# Options:
#   --minutes N | --seconds N   run time of each fuzzer (default 60 s)
#   --cpu-minutes N             run each fuzzer in runs of --seconds (default then
#                               600) until its CPU time reaches N minutes: the
#                               measure that counts on a shared, busy machine
#                               (the runs continue one corpus; figures are summed)
#   --build-dir DIR             the fuzz build (default build-fuzz)
#   --build                     configure (clang++, -DDSERVE_FUZZ=ON) and build it first
#   --out DIR                   logs, crashes, summary (default BUILD/fuzz-runs/DATE)
#   --nice N                    niceness of the fuzzers (default 19: the machine stays usable)
#   --rss-limit-mb N            libFuzzer -rss_limit_mb and -malloc_limit_mb (default 1536)
#   --summarize DIR             only write DIR/summary.md from the logs of an earlier
#                               or still running campaign (e.g. one stopped with
#                               pkill -INT -f build-fuzz/bin/fuzz_)
#   --fresh                     new inputs go to OUT/TARGET/corpus instead of the
#                               persistent BUILD/fuzz-corpus/TARGET
#   TARGET...                   fuzz_* names (default: every fuzzer built)
# Seeds: tests/fuzz/corpus/TARGET (read, never written); dictionary:
# tests/fuzz/dictionaries/TARGET.dict when present.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

seconds=""
cpu_minutes=0
build_dir=build-fuzz
build=0
out=""
nice_level=19
rss_mb=1536
fresh=0
summarize=""
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) seconds=$(( $2 * 60 )); shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --cpu-minutes) cpu_minutes=$2; shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    --build) build=1; shift ;;
    --out) out=$2; shift 2 ;;
    --nice) nice_level=$2; shift 2 ;;
    --rss-limit-mb) rss_mb=$2; shift 2 ;;
    --fresh) fresh=1; shift ;;
    --summarize) summarize=$2; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done

case "$cpu_minutes" in ''|*[!0-9]*) echo "fuzz.sh: --cpu-minutes takes whole minutes, got '$cpu_minutes'" >&2; exit 2 ;; esac
if [ -z "$seconds" ]; then
  if [ "$cpu_minutes" -gt 0 ]; then seconds=600; else seconds=60; fi
fi

if [ -n "$summarize" ]; then
  out=$(cd "$summarize" && pwd) || { echo "fuzz.sh: no campaign directory $summarize" >&2; exit 2; }
  targets=()
  for d in "$out"/fuzz_*/; do [ -f "$d/time" ] && targets+=("$(basename "$d")"); done
  [ ${#targets[@]} -gt 0 ] || { echo "fuzz.sh: no fuzzer logs in $out" >&2; exit 2; }
fi

if [ -z "$summarize" ] && [ "$build" -eq 1 ]; then
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}
  export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}
  if [ ! -f "$build_dir/CMakeCache.txt" ]; then
    cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_COMPILER=clang++ -DDSERVE_FUZZ=ON
  fi
  cmake --build "$build_dir" -j "${DSERVE_JOBS:-$(nproc)}"
fi
if [ -z "$summarize" ]; then
build_dir=$(cd "$build_dir" 2>/dev/null && pwd) || { echo "fuzz.sh: no build directory $build_dir; use --build" >&2; exit 2; }
bin=$build_dir/bin
if [ ${#targets[@]} -eq 0 ]; then
  for f in "$bin"/fuzz_*; do [ -x "$f" ] && targets+=("$(basename "$f")"); done
fi
if [ ${#targets[@]} -eq 0 ]; then
  echo "fuzz.sh: no fuzzers in $bin; build them with --build (needs clang)" >&2
  exit 2
fi
for t in "${targets[@]}"; do
  [ -x "$bin/$t" ] || { echo "fuzz.sh: $bin/$t is not built" >&2; exit 2; }
done
out=${out:-$build_dir/fuzz-runs/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
out=$(cd "$out" && pwd)

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

if [ "$cpu_minutes" -gt 0 ]; then
  echo "fuzz.sh: ${#targets[@]} fuzzers, each until ${cpu_minutes} CPU min (runs of ${seconds}s, nice ${nice_level}, rss limit ${rss_mb} MB) -> $out"
else
  echo "fuzz.sh: ${#targets[@]} fuzzers x ${seconds}s (nice ${nice_level}, rss limit ${rss_mb} MB) -> $out"
fi
pids=()
for t in "${targets[@]}"; do
  dir=$out/$t
  mkdir -p "$dir"
  if [ "$fresh" -eq 1 ]; then corpus=$dir/corpus; else corpus=$build_dir/fuzz-corpus/$t; fi
  mkdir -p "$corpus"
  args=(-max_total_time="$seconds" -rss_limit_mb="$rss_mb" -malloc_limit_mb="$rss_mb" -timeout=60
        -print_final_stats=1 -artifact_prefix="$dir/" "$corpus")
  [ -d "tests/fuzz/corpus/$t" ] && args+=("$root/tests/fuzz/corpus/$t")
  [ -f "tests/fuzz/dictionaries/$t.dict" ] && args=(-dict="$root/tests/fuzz/dictionaries/$t.dict" "${args[@]}")
  echo "$corpus" > "$dir/corpus_dir"
  (
    # One line "wall user sys" per run in $dir/time; the log holds every run.
    TIMEFORMAT='%R %U %S'
    : > "$dir/log"
    : > "$dir/time"
    while true; do
      rc=0
      { time nice -n "$nice_level" "$bin/$t" "${args[@]}" >> "$dir/log" 2>&1 || rc=$?; } 2>> "$dir/time"
      [ "$rc" -eq 0 ] && [ "$cpu_minutes" -gt 0 ] || break  # 72: stopped with SIGINT
      cpu=$(awk '{c += $2 + $3} END {print int(c)}' "$dir/time")
      [ "$cpu" -lt $(( cpu_minutes * 60 )) ] || break
    done
    echo "$rc" > "$dir/rc"
  ) &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || true; done
fi  # not --summarize

# Summary: figures from libFuzzer's final stats and last status line.
summary=$out/summary.md
{
  echo "| target | runs | wall min | CPU min | executions | exec/CPU-s | cov | ft | corpus (files / bytes) | peak RSS MB | crashes | slow units |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
} > "$summary"
failed=0
for t in "${targets[@]}"; do
  dir=$out/$t
  log=$dir/log
  read -r runs wall cpu < <(awk '{n++; w += $1; c += $2 + $3} END {printf "%d %.1f %.1f\n", n, w, c}' "$dir/time")
  rc=$(cat "$dir/rc" 2>/dev/null || echo running)  # 72: stopped with SIGINT (libFuzzer's interrupt exit code)
  # Summed over the runs (executions) or the largest (peak RSS).
  stat() { grep -o "stat::$1: *[0-9]*" "$log" | grep -o '[0-9]*$' |
           awk -v how="$2" '{s += $1; if ($1 > m) m = $1; n++} END {if (!n) print "?"; else print (how == "max" ? m : s)}'; }
  execs=$(stat number_of_executed_units sum)
  status_line=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -1 || true)
  field() { echo "$status_line" | grep -oE "$1: [0-9]+" | grep -oE '[0-9]+$' || echo "?"; }
  corpus=$(cat "$dir/corpus_dir")
  files=$(find "$corpus" -type f | wc -l)
  bytes=$(find "$corpus" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')
  crashes=$(find "$dir" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
            -o -name 'oom-*' \) | wc -l)
  # Inputs over libFuzzer's -report_slow_units (10 s wall): not failures, but
  # worth a look; a fuzzer stopped with SIGSTOP reports one when it resumes.
  slow=$(find "$dir" -maxdepth 1 -type f -name 'slow-unit-*' | wc -l)
  if [ "$crashes" -gt 0 ] || { [ "$rc" != 0 ] && [ "$rc" != 72 ] && [ "$rc" != running ]; }; then
    failed=1
    [ "$crashes" -eq 0 ] && crashes="exit $rc"
  elif [ "$rc" = 72 ]; then
    crashes="0 (stopped)"
  elif [ "$rc" = running ]; then
    crashes="0 (running)"
  fi
  printf '| %s | %s | %.1f | %.1f | %s | %s | %s | %s | %s / %s | %s | %s | %s |\n' "$t" "$runs" \
    "$(awk -v w="$wall" 'BEGIN {print w / 60}')" "$(awk -v c="$cpu" 'BEGIN {print c / 60}')" \
    "$execs" "$(awk -v e="$execs" -v c="$cpu" 'BEGIN {if (c > 0 && e != "?") printf "%d", e / c; else print "?"}')" \
    "$(field cov)" "$(field ft)" "$files" "$bytes" "$(stat peak_rss_mb max)" "$crashes" "$slow" >> "$summary"
done
cat "$summary"
if [ "$failed" -ne 0 ]; then
  echo "fuzz.sh: a fuzzer failed; see $out/TARGET/log and the crash-* inputs there" >&2
  for t in "${targets[@]}"; do
    t_rc=$(cat "$out/$t/rc" 2>/dev/null || echo running)
    if [ "$t_rc" != 0 ] && [ "$t_rc" != 72 ] && [ "$t_rc" != running ]; then
      echo "---- $t (exit $t_rc): last lines of $out/$t/log" >&2
      tail -n 40 "$out/$t/log" >&2
    fi
  done
  exit 1
fi
