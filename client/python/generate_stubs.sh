#!/bin/sh
# Generate the Python gRPC stubs the dserve_client package imports.
#
#   client/python/generate_stubs.sh [OUT]
#
# OUT defaults to client/python/dserve_client/_stubs (where the package looks
# when DSERVE_PYTHON_STUBS is not set). Needs protoc and grpc_python_plugin
# (Debian: protobuf-compiler, protobuf-compiler-grpc) or, instead, the
# grpcio-tools Python package (python3 -m grpc_tools.protoc).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${1:-$HERE/dserve_client/_stubs}
mkdir -p "$OUT"

run_protoc() {  # proto_path file
  if command -v protoc >/dev/null 2>&1 && command -v grpc_python_plugin >/dev/null 2>&1; then
    protoc --proto_path="$1" --python_out="$OUT" --grpc_out="$OUT" \
      --plugin=protoc-gen-grpc="$(command -v grpc_python_plugin)" "$2"
  elif ${PYTHON:-python3} -c 'import grpc_tools' >/dev/null 2>&1; then
    ${PYTHON:-python3} -m grpc_tools.protoc --proto_path="$1" --python_out="$OUT" \
      --grpc_python_out="$OUT" "$2"
  else
    echo "generate_stubs.sh: need protoc + grpc_python_plugin, or python3 -m grpc_tools" >&2
    exit 1
  fi
}

run_protoc "$ROOT/proto" dserve/v1/inference.proto
run_protoc "$HERE/proto" dserve_health/health.proto
echo "generate_stubs.sh: stubs in $OUT"
