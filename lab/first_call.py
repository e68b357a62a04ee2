"""On the GPU: how long a fresh process waits for its first tuned kernel call, in each state of the caches.

Each sample is a new Python process that imports Numba and autotune, makes its data on the device, then times
its first call (``autotune.matmul(A, B)``, ``autotune.sum(x)``, ``autotune.matmul(A, B, precision="3xtf32")``:
database lookup, kernel build, launch and synchronisation; imports excluded) and reports where each launched
kernel's code came from. The process's whole wall clock (interpreter, imports, CUDA context, data) is timed too.

    compiled  empty cache folder, shipped code ignored (AUTOTUNE_CODE_CACHE=local): every kernel compiles
    fresh     empty cache folder, the code shipped with the package (tuned_db/code): a fresh install's first call
    cached    the cache folder a `compiled` process filled: the code cache is read
    numba     that folder, code cache off (AUTOTUNE_CODE_CACHE=0): Numba loads from its own disk cache (the path
              before the code cache)

The fresh state needs the shipped code of the entries (`autotune warm --cc 9.0 --ship`, committed in tuned_db/code);
a sample whose code came from elsewhere says so. Targets (issue 57): a cached 4096^3 fp32 matmul at most 0.3 s,
a fresh install's at most 2 s.

    python lab/first_call.py [--runs 3] [--cases matmul,sum,3xtf32] [--states compiled,fresh,cached,numba]
                             [--profile cached]                  (prints a Markdown table; --profile: cProfile)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CASES = {"matmul": "4096x4096x4096", "sum": "1048576", "3xtf32": "4096x4096x4096"}
STATES = ("compiled", "fresh", "cached", "numba")
SETTING = {"compiled": "local", "fresh": "1", "cached": "1", "numba": "0"}

CALL = """
import json, sys, time
import numpy as np
from numba import cuda
import autotune
case, shape, profile = sys.argv[1], tuple(int(v) for v in sys.argv[2].split("x")), sys.argv[3] == "1"
rng = np.random.default_rng()
if case == "sum":
    x = cuda.to_device(rng.standard_normal(shape, dtype=np.float32))
    call = lambda: autotune.sum(x)
else:
    m, n, k = shape
    a = cuda.to_device(rng.standard_normal((m, k), dtype=np.float32))
    b = cuda.to_device(rng.standard_normal((k, n), dtype=np.float32))
    precision = "3xtf32" if case == "3xtf32" else "ieee"
    call = lambda: autotune.matmul(a, b, precision=precision)
cuda.synchronize()
if profile:
    import cProfile, io, pstats
    profiler = cProfile.Profile()
    profiler.enable()
t0 = time.perf_counter()
call()
cuda.synchronize()
seconds = time.perf_counter() - t0
if profile:
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(30)
    print(text.getvalue(), file=sys.stderr)
from autotune.runtime import driver_kernels
origins = sorted(driver_kernels.loads()) or ["numba"]
imported = any(m.startswith("autotune_generated") for m in sys.modules)
print(json.dumps({"seconds": seconds, "origins": origins, "module_imported": imported}))
"""


def one_process(case: str, cache_dir: str, state: str, profile: bool = False) -> tuple[dict, float]:
    """(the child's report, the process's seconds)."""
    env = dict(os.environ, AUTOTUNE_CACHE_DIR=cache_dir, AUTOTUNE_CODE_CACHE=SETTING[state])
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CALL, case, CASES[case], "1" if profile else "0"], env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode:
        raise RuntimeError(f"{case} ({state}) failed:\n{done.stderr[-3000:]}")
    if profile:
        print(done.stderr, file=sys.stderr)
    return json.loads(done.stdout.splitlines()[-1]), wall


def samples(case: str, runs: int, states: list[str], root: str) -> dict[str, list]:
    """Each state's samples; the compiled samples each start from an empty folder, the first of which then serves
    the cached and numba states."""
    found: dict[str, list] = {}
    filled = os.path.join(root, f"{case}-filled")
    one_process(case, filled, "compiled")  # fills the code cache and Numba's disk cache
    for state in states:
        if state == "compiled":
            found[state] = [one_process(case, os.path.join(root, f"{case}-empty{i}"), state) for i in range(runs)]
        elif state == "fresh":
            found[state] = [one_process(case, os.path.join(root, f"{case}-fresh{i}"), state) for i in range(runs)]
        else:
            found[state] = [one_process(case, filled, state) for _ in range(runs)]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--states", default=",".join(STATES))
    parser.add_argument("--profile", choices=STATES, help="print a cProfile of one more first call in this state")
    args = parser.parse_args()
    cases, states = args.cases.split(","), args.states.split(",")
    print("| first call | state | call, s (median; runs) | process, s (median) | code from |\n"
          "| --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as root:
        for case in cases:
            for state, found in samples(case, args.runs, states, root).items():
                calls = [report["seconds"] for report, _ in found]
                walls = [wall for _, wall in found]
                origins = sorted({o for report, _ in found for o in report["origins"]})
                imported = " (module imported)" if any(report["module_imported"] for report, _ in found) else ""
                print(f"| {case} {CASES[case]} | {state} | {statistics.median(calls):.3f}; "
                      f"{', '.join(f'{c:.3f}' for c in calls)} | {statistics.median(walls):.2f} | "
                      f"{', '.join(origins)}{imported} |", flush=True)
            if args.profile:
                folder = os.path.join(root, f"{case}-filled" if args.profile in ("cached", "numba")
                                      else f"{case}-profile")
                one_process(case, folder, args.profile, profile=True)


if __name__ == "__main__":
    main()
