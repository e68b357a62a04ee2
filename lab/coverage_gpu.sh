#!/usr/bin/env bash
# The GPU runs of issue 58 (coverage, held-out shapes, scaling), in calls of at most about 9 minutes each.
#
# Run from the project root on the GPU machine (README of ../shared/device: take .whl along; take autotune-out
# along too, which holds the studies, so that a later call resumes where this one stopped):
#
#   bash lab/coverage_gpu.sh coverage [CASE ...]   measure the coverage sets (default: every case below), resuming
#   bash lab/coverage_gpu.sh heldout  [CASE ...]   the held-out sets' cross-time matrices (no database write) and the
#                                                  fitted rules scored on them (after `fit`)
#   bash lab/coverage_gpu.sh bench    [CASE ...]   `autotune bench --held-out` per case, one GPU per case at a time
#   bash lab/coverage_gpu.sh scaling               shapes per hour on 1, 2 and 4 GPUs (cross-time matrix, warm
#                                                  compile cache) and of a search per shape on 4 GPUs
#   bash lab/coverage_gpu.sh fit                   fit the rules from the coverage matrices (CPU only; also local)
#
# CASE: f32 3xtf32 tf32 f16 bf16 f64 sum-all sum-0 sum-1 sum-m2 max-all max-0 max-1 max-m2, or 'matmul' / 'reduce'
# for those groups. DEVICES (default: every GPU; e.g. 1,2,3) are the GPUs the coverage phases use. BUDGET_S
# (default 540) bounds the call's wall time: no new shape is claimed once it is near, and a call that ends
# unfinished says so; call again (with autotune-out carried) to go on. SIMULATOR=1 runs the
# coverage phases in Numba's CUDA simulator on the families' tiny shapes (a dry run of this script, on a CPU).
# Everything written is packed into $OUT/issue58.tgz (tuned_db/, benchmarks/coverage/, benchmarks/*held-out*,
# autotune-out/studies/) with the log in $OUT/issue58.log; unpack it in the checkout (tar xzf) and commit.
set -uo pipefail
phase=${1:-coverage}
shift || true
BUDGET_S=${BUDGET_S:-540}
OUT=${OUT:-/tmp/issue58-out}
mkdir -p "$OUT"
start=$(date +%s)
log="$OUT/issue58.log"
exec > >(tee -a "$log") 2>&1

if [ -d .whl ] && [ ! -d .site ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$PWD/.site" \
    .whl/*.whl || exit 1
fi
export PYTHONPATH="$PWD/.site:$PWD"
export NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS=0
[ -n "${SIMULATOR:-}" ] && export NUMBA_ENABLE_CUDASIM=1
gpus=$(python3 -c "from numba import cuda; print(len(cuda.gpus))")
devices=${DEVICES:-$(seq -s, 0 $((gpus - 1)))}
slug=$(python3 -c "from autotune.core.device import current_device; print(current_device().slug)")
at() { python3 -m autotune "$@"; }
left() { echo $((BUDGET_S - ($(date +%s) - start))); }

case_args() {
  case $1 in
    f32) echo "matmul --dtype float32";;
    3xtf32) echo "matmul --dtype float32 --precision 3xtf32";;
    tf32) echo "matmul --dtype float32 --precision tf32";;
    f16) echo "matmul --dtype float16";;
    bf16) echo "matmul --dtype bfloat16";;
    f64) echo "matmul --dtype float64";;
    sum-all) echo "reduce --op sum --axis all";;
    sum-0) echo "reduce --op sum --axis 0";;
    sum-1) echo "reduce --op sum --axis 1";;
    sum-m2) echo "reduce --op sum --axis -2";;
    max-all) echo "reduce --op max --axis all";;
    max-0) echo "reduce --op max --axis 0";;
    max-1) echo "reduce --op max --axis 1";;
    max-m2) echo "reduce --op max --axis -2";;
    *) echo "unknown case $1" >&2; return 1;;
  esac
}
expand() {
  for c in "$@"; do
    case $c in
      matmul) echo f32 3xtf32 f16 bf16 f64 tf32;;
      reduce) echo sum-all sum-0 sum-1 sum-m2 max-all max-0 max-1 max-m2;;
      *) echo "$c";;
    esac
  done
}
cases=$(expand "${@:-matmul reduce}")

pack() {
  tar czf "$OUT/issue58.tgz" tuned_db benchmarks/coverage $(ls benchmarks/*held-out* 2>/dev/null) \
    autotune-out/studies 2>/dev/null
  echo "packed $(du -h "$OUT/issue58.tgz" | cut -f1) into $OUT/issue58.tgz after $(( $(date +%s) - start )) s"
}
trap pack EXIT

# One coverage command within the time left: claims stop 90 s before the budget (the shapes in flight finish),
# and `timeout` sends Ctrl-C 20 s before it (what is unfinished is given back and resumes in the next call).
covered() {
  local name=$1; shift
  local t; t=$(left)
  if [ "$t" -lt 120 ]; then echo "== $name: too little time left in this call; run again"; return 2; fi
  echo "== $name ($t s left)"
  timeout -s INT $((t - 20)) python3 -m autotune coverage $(case_args "$name") --device "$devices" \
    --time-limit $((t - 90)) ${SIMULATOR:+--simulator} "$@"
}

case $phase in
  coverage)
    for c in $cases; do covered "$c" || { [ $? = 2 ] && break; }; done
    ;;
  heldout)
    for c in $cases; do
      covered "$c" --set held-out --no-db \
        --matrix "benchmarks/coverage/$slug-$c-held-out.json" || { [ $? = 2 ] && break; }
      at rule score "benchmarks/coverage/$slug-$c-held-out.json" || true
    done
    ;;
  bench)
    # one case per GPU at a time; each writes its own tables and adds its rows to <gpu>-held-out.json (locked)
    set -- $cases
    while [ $# -gt 0 ]; do
      [ "$(left)" -lt 120 ] && { echo "== bench: too little time left in this call; the cases left: $*"; break; }
      pids=()
      for ((g = 0; g < gpus && $# > 0; g++)); do
        echo "== bench $1 on GPU $g"
        timeout -s INT $(( $(left) - 10 )) python3 -m autotune bench $(case_args "$1") --held-out --device "$g" \
          > "$OUT/bench-$1.txt" 2>&1 &
        pids+=($!)
        shift
      done
      wait "${pids[@]}"
    done
    cat benchmarks/"$slug"-held-out.md 2>/dev/null
    ;;
  scaling)
    # the first run pays the compiles (cold); the others load them from Numba's disk cache (warm)
    for n in 4 1 2 4; do
      d=$(seq -s, 0 $((n - 1)))
      tag="scale-$n-$(date +%s)"
      echo "== cross-time matrix, 24 f32 shapes on $n GPU(s) ($tag)"
      timeout -s INT $(( $(left) - 10 )) python3 -m autotune coverage matmul --dtype float32 --shapes 24 \
        --device "$d" --study "$tag" --no-db --matrix "/tmp/$tag.json" 2>&1 | grep -E "shapes/h|distinct|left"
    done
    echo "== a search per shape (20 s each), 8 f32 shapes on $gpus GPUs"
    timeout -s INT $(( $(left) - 10 )) python3 -m autotune coverage matmul --dtype float32 --shapes 8 \
      --method tune --budget-s 20 --trials 60 --device "$devices" --study "tune-scale-$(date +%s)" \
      --db /tmp/tune-db 2>&1 | grep -E "shapes/h|\[[0-9]"
    python3 - "$slug" <<'PY'
import sys, glob
from autotune.runtime.db import load_file, db_path
from autotune.tuning.matrix import read_matrix
from pathlib import Path
files = sorted(glob.glob("/tmp/scale-4-*.json"))
m = read_matrix(files[-1])
tuned = {e.problem.shape: e.median_ms for e in load_file(db_path(Path("/tmp/tune-db"), m.device["name"])).entries}
print("shape | cross-time best ms | search per shape ms | search / cross")
for i, s in enumerate(m.shapes):
    if s in tuned and m.best_ms(i):
        print(f"{'x'.join(map(str, s))} | {m.best_ms(i):.4g} | {tuned[s]:.4g} | {tuned[s] / m.best_ms(i):.3f}")
PY
    ;;
  fit)
    for f in benchmarks/coverage/"$slug"-*.json; do
      [ -e "$f" ] || { echo "no coverage matrices of $slug in benchmarks/coverage/"; break; }
      case $f in *-held-out.json) continue;; esac
      at rule fit "$f"
    done
    at db check
    ;;
  *) echo "unknown phase $phase"; exit 2;;
esac
