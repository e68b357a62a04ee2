#!/usr/bin/env bash
# On the lent GPU machine (device tool, carry [".whl"]): correctness of every parameter value on real hardware
# (`autotune selftest`, arguments passed through) and the Numba disk cache across processes. Logs under $OUT.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$PWD/.site" .whl/*.whl \
  && export PYTHONPATH="$PWD/.site:$PWD" || exit 1
export AUTOTUNE_CACHE_DIR="$PWD/.autotune-cache" PYTHONUNBUFFERED=1 NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS=0
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
timeout "${SELFTEST_TIMEOUT:-400}" python3 -m autotune selftest --device 0 "$@" 2>&1 | tee "$OUT/selftest.log" | grep -a "FAIL\|selftest:\|compiled"
# A second process must load a generated kernel from Numba's disk cache instead of compiling it again.
cat > /tmp/cache_probe.py <<'PY'
import sys, time, numpy as np
from numba import cuda
t0 = time.perf_counter()
from autotune import get_best_kernel
k = get_best_kernel("reduce", (1 << 20,), db="/nonexistent")
x = cuda.to_device(np.ones(1 << 20, np.float32)); r = k(x); cuda.synchronize()
t1 = time.perf_counter()
for _ in range(100): k(x)
cuda.synchronize(); t2 = time.perf_counter()
print(f"{sys.argv[1]} process: first call {1e3*(t1-t0):.0f} ms, cache hits {sum(k.kernel.stats.cache_hits.values())}, "
      f"misses {sum(k.kernel.stats.cache_misses.values())}, then {1e6*(t2-t1)/100:.1f} us per call, result {r.copy_to_host()[0]}")
PY
python3 /tmp/cache_probe.py first 2>/dev/null | tail -1
python3 /tmp/cache_probe.py second 2>/dev/null | tail -1
