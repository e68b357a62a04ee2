"""On the GPU: how long a fresh process waits for its first tuned kernel call, with an empty kernel cache and
with the cache filled by an earlier process (or by `autotune warm`).

Each sample is a new Python process that imports autotune, looks up the committed winner, calls it on device
arrays and synchronises. Two times: the call's (lookup, first call and synchronisation, timed in the process) and
the whole process's wall clock from start to exit (interpreter, imports, CUDA context, data), as a user sees it.
Cold samples each get a new empty `AUTOTUNE_CACHE_DIR`; warm samples share one that a first process filled.

    python lab/first_call.py [--runs 3] [--matmul 4096x4096x4096] [--reduce 1048576]   (prints a Markdown table)
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

CALL = """
import sys, time, numpy as np
from numba import cuda
import autotune
family, shape = sys.argv[1], tuple(int(v) for v in sys.argv[2].split("x"))
rng = np.random.default_rng()
if family == "matmul":
    m, n, k = shape
    a = cuda.to_device(rng.standard_normal((m, k), dtype=np.float32))
    b = cuda.to_device(rng.standard_normal((k, n), dtype=np.float32))
    t0 = time.perf_counter()
    r = autotune.get_best_kernel("matmul", shape)(a, b)
else:
    x = cuda.to_device(rng.standard_normal(shape, dtype=np.float32))
    t0 = time.perf_counter()
    r = autotune.get_best_kernel("reduce", shape)(x)
cuda.synchronize()
print(time.perf_counter() - t0)
"""


def one_process(family: str, shape: str, cache_dir: str) -> tuple[float, float]:
    """(the call's seconds, the process's seconds)."""
    env = dict(os.environ, AUTOTUNE_CACHE_DIR=cache_dir)
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CALL, family, shape], env=env, check=True, capture_output=True,
                          text=True)
    return float(done.stdout.split()[-1]), time.perf_counter() - t0


def samples(family: str, shape: str, runs: int) -> tuple[list, list]:
    with tempfile.TemporaryDirectory() as root:
        cold = [one_process(family, shape, os.path.join(root, f"cold{i}")) for i in range(runs)]
        warm_dir = os.path.join(root, "cold0")
        warm = [one_process(family, shape, warm_dir) for _ in range(runs)]
    return cold, warm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--matmul", default="4096x4096x4096")
    parser.add_argument("--reduce", default="1048576")
    args = parser.parse_args()
    print("| first call | cache | call, s (median; runs) | process, s (median; runs) |\n| --- | --- | --- | --- |")
    for family, shape in (("matmul", args.matmul), ("reduce", args.reduce)):
        for cache, found in zip(("empty", "filled"), samples(family, shape, args.runs)):
            cells = [f"{statistics.median(v):.2f}; {', '.join(f'{t:.2f}' for t in v)}" for v in zip(*found)]
            print(f"| {family} {shape} | {cache} | {cells[0]} | {cells[1]} |", flush=True)


if __name__ == "__main__":
    main()
