#!/usr/bin/env bash
# On the lent GPU machine (device tool, carry [".whl"]): `autotune bench` for matmul and reduce against the
# committed tuned_db/, with CuPy/PyTorch/Numba peers timed in the same process. Tables and plots under $OUT.
# Usage: bash scripts/device-bench.sh "matmul --shape 4096x4096x4096" "reduce --shape 268435456"
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$PWD/.site" .whl/*.whl \
  && export PYTHONPATH="$PWD/.site:$PWD" || exit 1
export AUTOTUNE_CACHE_DIR="$PWD/.autotune-cache" PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
for run in "$@"; do
  timeout "${BENCH_TIMEOUT:-240}" python3 -m autotune bench $run --device 0 --out "$OUT" 2>>"$OUT/bench.log" | grep -v "^wrote"
done
