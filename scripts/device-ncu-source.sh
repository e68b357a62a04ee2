#!/usr/bin/env bash
# On the lent H100 (device tool, carry [".whl"]): Nsight Compute's per-instruction stall sampling (SourceCounters)
# of the tuned matmul and cuBLAS on one shape, exported as the source page's SASS CSV: $OUT/ours.csv, $OUT/cublas.csv.
# Summarise with: python3 scripts/stall_mix.py ours.csv cublas.csv
# Usage: bash scripts/device-ncu-source.sh [MxNxK] [dtype]
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$PWD/.site" .whl/*.whl \
  && export PYTHONPATH="$PWD/.site:$PWD" || exit 1
export AUTOTUNE_CACHE_DIR="$PWD/.autotune-cache" PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 300 ncu --clock-control none -k regex:'matmul|gemm' --section SourceCounters --section WarpStateStats \
  -o "$OUT/src" -f python3 scripts/ncu_matmul.py "${1:-4096x4096x4096}" "${2:-float32}" 2>&1 | tail -3
ncu -i "$OUT/src.ncu-rep" --page source --csv --print-source sass --kernel-name regex:matmul > "$OUT/ours.csv"
ncu -i "$OUT/src.ncu-rep" --page source --csv --print-source sass --kernel-name regex:gemm > "$OUT/cublas.csv"
rm -f "$OUT/src.ncu-rep"
