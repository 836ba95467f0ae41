#!/usr/bin/env bash
# Sets up from nothing, builds, and serves all three tasks (README's first
# command). Until `dserve train` ships demo models, the models served are
# small random-weight checkpoints (the Hugging Face goldens in ../shared)
# with a toy SentencePiece tokenizer; the outputs are meaningless but every
# code path is real. Ctrl-C (SIGTERM) drains and stops the server.
#   DSERVE_LISTEN (default 127.0.0.1:5001), DSERVE_METRICS (127.0.0.1:9090)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -eq 0 ]; then bash deploy/install-deps.sh; else sudo bash deploy/install-deps.sh; fi
shared=${DSERVE_SHARED_DIR:-$(cd .. && pwd)/shared}
bash deploy/build.sh -DDSERVE_SHARED_DIR="$shared"
models=build/demo-models
/usr/bin/python3 tests/data/make_test_models.py "$shared" "$models" >/dev/null
echo "== dserve forward on a golden checkpoint (Hugging Face parity input):"
head -c 300 <(echo '{"input_ids": [1, 25, 47, 300, 2]}' | build/bin/dserve forward --model "$models/classify")
echo
echo "== serving classify, answer, rerank; try:"
echo "   build/bin/dserve-client --target ${DSERVE_LISTEN:-127.0.0.1:5001} classify --model classify 'my parcel never arrived'"
exec build/bin/dserve serve \
  --model classify="$models/classify" --model answer="$models/answer" --model rerank="$models/rerank" \
  --listen "${DSERVE_LISTEN:-127.0.0.1:5001}" --metrics-listen "${DSERVE_METRICS:-127.0.0.1:9090}"
