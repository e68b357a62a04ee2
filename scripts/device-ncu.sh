#!/usr/bin/env bash
# On the lent H100 (device tool, carry [".whl"]): Nsight Compute on the tuned matmul and cuBLAS for each shape
# (dtype:shape arguments), reports under $OUT. Clocks left alone (--clock-control none), as METHOD.md asks.
# Usage: bash scripts/device-ncu.sh float32:4096x4096x4096 float64:4096x4096x4096
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$PWD/.site" .whl/*.whl \
  && export PYTHONPATH="$PWD/.site:$PWD" || exit 1
export AUTOTUNE_CACHE_DIR="$PWD/.autotune-cache" PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
METRICS=l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,smsp__inst_executed_op_shared_ld.sum,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio
for arg in "$@"; do
  dtype=${arg%%:*}; shape=${arg#*:}
  timeout 300 ncu --clock-control none -k regex:'matmul|gemm|cutlass|xmma' --section SpeedOfLight --section WarpStateStats \
    --section SchedulerStats --section Occupancy --section LaunchStats --metrics "$METRICS" \
    python3 scripts/ncu_matmul.py "$shape" "$dtype" > "$OUT/ncu-$dtype-$shape.txt" 2>&1
  echo "== $arg: $(grep -c '^  [a-zA-Z_].*(' "$OUT/ncu-$dtype-$shape.txt") kernels profiled"
done
