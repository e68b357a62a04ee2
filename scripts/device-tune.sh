#!/usr/bin/env bash
# On the lent GPU machine (device tool, carry [".whl"]): real tuning runs into tuned_db/, copied to $OUT.
# Usage: bash scripts/device-tune.sh 'matmul --shape 4096x4096x4096 --trials 60' 'reduce --op sum --shape 268435456'
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$PWD/.site" .whl/*.whl \
  && export PYTHONPATH="$PWD/.site:$PWD" || exit 1
export AUTOTUNE_CACHE_DIR="$PWD/.autotune-cache" PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
for run in "$@"; do
  echo "== autotune $run --device 0"
  timeout "${TUNE_TIMEOUT:-300}" python3 -m autotune $run --device 0 2>"$OUT/tune-$(echo $run | tr -c 'a-z0-9' '_' | cut -c1-40).log" \
    | tee -a "$OUT/tables.md"
done
cp tuned_db/*.yaml "$OUT/" 2>/dev/null
tail -c 3000 "$OUT"/tune-*.log | grep -a "fail\|error\|Error" | head -20
