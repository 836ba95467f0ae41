#!/usr/bin/env bash
# Sanitizer build and test run (docs/reliability.md, "Sanitizer builds"):
#   bash deploy/sanitize.sh address,undefined   # -> build-asan/
#   bash deploy/sanitize.sh thread              # -> build-tsan/
# Configures with -DDSERVE_SANITIZE=..., builds everything and runs ctest in
# that folder (the sanitizer options and suppression files come from the test
# properties, tests/sanitizers/*.supp). Extra arguments go to ctest, e.g.
#   bash deploy/sanitize.sh thread -R 'batching\.|worker_pool\.'
# Environment: DSERVE_BUILD_DIR (default build-asan / build-tsan), DSERVE_JOBS
# (build parallelism, default nproc), DSERVE_SHARED_DIR (goldens, ../shared),
# DSERVE_CTEST_JOBS (default nproc).
# The thread build needs the abseil source of the installed libabsl-dev (one
# file of it is compiled with TSan annotations, see cmake/DserveSanitize.cmake);
# it is fetched once with `apt-get source` into the build folder.
set -euo pipefail
cd "$(dirname "$0")/.."
usage() { echo "usage: bash deploy/sanitize.sh address,undefined|thread [ctest args...]" >&2; exit 2; }
[ $# -ge 1 ] || usage
sanitize=$1; shift
case "$sanitize" in
  address,undefined|undefined,address|address|undefined) default_dir=build-asan ;;
  thread) default_dir=build-tsan ;;
  *) usage ;;
esac
build_dir=${DSERVE_BUILD_DIR:-$default_dir}
shared=${DSERVE_SHARED_DIR:-$(cd .. && pwd)/shared}
extra=()

if [ "$sanitize" = thread ]; then
  version=$(dpkg-query -W -f='${Version}' libabsl-dev)
  absl_src="$PWD/$build_dir/_deps/abseil-$version"
  if [ ! -f "$absl_src/absl/synchronization/mutex.cc" ]; then
    echo "sanitize.sh: fetching the abseil $version source (apt-get source, own lists in $build_dir/_deps)"
    deps="$PWD/$build_dir/_deps"
    apt_dir="$deps/apt"
    mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$deps/download"
    # Source lines for the suites the binary packages come from.
    grep -h '^URIs:\|^Suites:' /etc/apt/sources.list.d/*.sources 2>/dev/null | paste - - |
      awk '{for (i = 4; i <= NF; i++) print "deb-src", $2, $i, "main"}' > "$apt_dir/sources.list"
    grep -h '^deb ' /etc/apt/sources.list 2>/dev/null | sed 's/^deb /deb-src /' >> "$apt_dir/sources.list" || true
    apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o "Dir::Etc::SourceParts=-"
              -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -o Debug::NoLocking=1
              -o APT::Sandbox::User="$(id -un)")
    apt-get "${apt_opts[@]}" update -qq
    (cd "$deps/download" && apt-get "${apt_opts[@]}" source --download-only -qq "abseil=$version")
    orig=$(ls "$deps"/download/abseil_*.orig.tar.gz)
    rm -rf "$absl_src.tmp" && mkdir -p "$absl_src.tmp"
    tar -xzf "$orig" -C "$absl_src.tmp" --strip-components=1
    # Debian's patches must leave mutex.cc alone (we compile the upstream file).
    debian_tar=$(ls "$deps"/download/abseil_*.debian.tar.*)
    if tar -xOf "$debian_tar" --wildcards 'debian/patches/*' | grep -q '^+++ .*absl/synchronization/mutex.cc'; then
      echo "sanitize.sh: Debian's abseil $version patches mutex.cc; apply debian/patches first" >&2
      exit 1
    fi
    mv "$absl_src.tmp" "$absl_src"
  fi
  extra+=(-DDSERVE_ABSL_SOURCE_DIR="$absl_src")
fi

DSERVE_BUILD_DIR="$build_dir" bash deploy/build.sh -DDSERVE_SHARED_DIR="$shared" \
  -DDSERVE_SANITIZE="$sanitize" "${extra[@]}"
rm -f "$build_dir"/tests/e2e/scratch/*.log  # logs of earlier runs
set +e
ctest --test-dir "$build_dir" --output-on-failure -j "${DSERVE_CTEST_JOBS:-$(nproc)}" "$@"
status=$?
set -e
# Servers started by the e2e tests write their stderr to logs: a sanitizer
# report there kills the server (halt_on_error), and is listed here too.
reports=$(grep -lE 'ERROR: (Address|Leak)Sanitizer|WARNING: ThreadSanitizer|runtime error:' \
  "$build_dir"/tests/e2e/scratch/*.log 2>/dev/null || true)
if [ -n "$reports" ]; then
  echo "sanitize.sh: sanitizer reports in server logs:" >&2
  echo "$reports" >&2
  status=1
fi
exit $status
