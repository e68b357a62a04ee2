"""On the GPU: kernels launched from stored code (autotune/runtime/code_cache.py, driver_kernels.py) give NumPy's
results, from every place the code can come from, and the replayed calls cost what they cost before.

Each case runs in fresh processes, each time on fresh random data with the output poisoned with NaN first,
checked against float64 NumPy:

    compiled   an empty cache folder: the kernels compile through Numba, their code is stored and launched
    local      the same folder again: the code is loaded by the driver, the generated module never imported
    ahead      a new folder filled on the CPU (compile_ahead_report for cc 9.0, nvJitLink): loaded from there
    shipped    an empty folder and a shipped store built on the CPU (ship=): loaded from the shipped store
    damaged    the local folder with every stored file's last byte flipped: refused, compiled again, replaced

It also compares the registers of the code compiled on the GPU with those of the code compiled ahead (the same
LTO path), and times 2000 replayed calls of a 2^20 sum with and without out= with the code cache on and off
(AUTOTUNE_CODE_CACHE=0), in processes of their own. Exit status 1 when anything is wrong.

    python lab/code_cache_gpu.py [CASE ...]   (prints one line per case and state, then the host times;
                                               CASE: a name of CASES, default all)
"""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# name: (family, shape, dtype, parameters or "db:<key of an H100 entry>", family arguments)
CASES = {
    "sum 2^20+3": ("reduce", [(1 << 20) + 3], "float32", {}, {"op": "sum"}),
    "max with NaN": ("reduce", [100003], "float32", {"COMBINE": "two_pass"}, {"op": "max"}),
    "sum rows 257x1031": ("reduce", [257, 1031], "float32", {}, {"op": "sum", "axis": 1}),
    "sum columns 3x129x65": ("reduce", [3, 129, 65], "float32", {}, {"op": "sum", "axis": -2}),
    "matmul fp32 257x129x65": ("matmul", [257, 129, 65], "float32", "db:matmul/float32/nn/1000x1000x1000", {}),
    "matmul fp32 64 KB dynamic shared": ("matmul", [300, 200, 100], "float32",
                                         {"strategy": "tiled", "BM": 64, "BN": 64, "BK": 32, "TM": 4, "TN": 4,
                                          "ASYNC_STAGES": 4}, {}),
    "matmul tf32 on rounded copies": ("matmul", [256, 192, 100], "float32",
                                      "db:matmul/float32/nn/tf32/4096x4096x4096", {"precision": "tf32"}),
    "matmul 3xtf32": ("matmul", [256, 192, 100], "float32", "db:matmul/float32/nn/3xtf32/4096x4096x4096",
                      {"precision": "3xtf32"}),
    "matmul float64 mma": ("matmul", [130, 70, 50], "float64", "db:matmul/float64/nn/1000x1000x1000", {}),
    "matmul float16 wgmma TMA": ("matmul", [200, 136, 72], "float16", "db:matmul/float16/nn/1024x1024x1024", {}),
}

def python_path() -> str:
    """This checkout first, then the caller's own PYTHONPATH (packages installed beside the project)."""
    return os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)


CHILD = r"""
import json, sys
import numpy as np
from numba import cuda
from autotune.runtime import code_cache, driver_kernels
from autotune.runtime.build import build_kernel
from autotune.runtime.compiler import compile_ahead_report, load_ahead
from autotune.runtime.compiler import ResourceReport

family, shape, dtype, params, args, state, shipped = json.loads(sys.argv[1])
shape = tuple(shape)
if state == "shipped":
    code_cache.shipped_root = lambda: __import__("pathlib").Path(shipped)
if isinstance(params, str):
    from pathlib import Path
    from autotune.runtime.db import load_file
    entries = load_file(Path("tuned_db/nvidia-h100-80gb-hbm3.yaml")).entries
    params = next(e.params for e in entries if e.problem.key == params[3:])
k = build_kernel(family, params, dtype, **args)
if state == "ahead-build":
    compile_ahead_report(k, (9, 0), ship=__import__("pathlib").Path(shipped) if shipped else None)
    print(json.dumps({"ok": True}))
    sys.exit(0)
rng = np.random.default_rng()
if family == "matmul":
    m, n, kk = shape
    a = rng.standard_normal((m, kk)).astype(dtype)
    b = rng.standard_normal((kk, n)).astype(dtype)
    expected = a.astype(np.float64) @ b.astype(np.float64)
    out = cuda.to_device(np.full((m, n), np.nan, dtype=dtype))
    k(cuda.to_device(a), cuda.to_device(b), out=out)  # device arrays and out=: a recorded plan, replayed
    direct = k(a, b)  # host arrays: launched directly each call
    tol = {"tf32": 3e-3, "float16": 3e-3, "float64": 1e-12}.get(args.get("precision", dtype), 1e-5)
else:
    x = rng.standard_normal(shape).astype(np.float32)
    if args["op"] == "max":
        x[rng.integers(x.size)] = np.nan
    axis = args.get("axis")
    x64 = x.astype(np.float64)
    if args["op"] == "sum":
        expected = x64.sum() if axis is None else x64.sum(axis=1 if axis == -2 else axis)
    else:
        expected = np.max(x64)
    out = cuda.to_device(np.full(np.shape(expected) or (1,), np.nan, dtype=np.float32))  # a kernel's total: (1,)
    k(cuda.to_device(x), out=out)
    direct = k(x)
    tol = 1e-5
scale = max(1.0, float(np.nanmax(np.abs(expected))))
ok = True
for result in (out.copy_to_host(), np.asarray(direct)):
    got = result.astype(np.float64).reshape(np.shape(expected))
    ok = ok and bool(np.array_equal(np.isnan(got), np.isnan(expected))
                     and np.allclose(got, expected, rtol=tol, atol=tol * scale * (shape[-1] if family == "matmul"
                                                                                   else 1), equal_nan=True))
entry = load_ahead(k)[0]
report = ResourceReport.from_loaded(entry.kernel, (9, 0)).as_dict() if entry is not None else None
print(json.dumps({"ok": ok, "loads": driver_kernels.loads(), "report": report,
                  "imported": any(m.startswith("autotune_generated") for m in sys.modules)}))
"""

HOST = r"""
import sys, time
import numpy as np
from numba import cuda
import autotune
x = cuda.to_device(np.random.default_rng().standard_normal(1 << 20, dtype=np.float32))
r = cuda.device_array((), dtype=np.float32)
for use_out in (True, False):
    call = (lambda: autotune.sum(x, out=r)) if use_out else (lambda: autotune.sum(x))
    for _ in range(200):
        call()
    cuda.synchronize()
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(2000):
            call()
        times.append((time.perf_counter() - t0) / 2000 * 1e6)
        cuda.synchronize()
    print(f"{'with' if use_out else 'without'} out=: {min(times):.1f} us per call (best of 5 x 2000)")
"""


def child(case: tuple, state: str, cache: Path, shipped: str = "", setting: str = "1") -> dict:
    env = dict(os.environ, AUTOTUNE_CACHE_DIR=str(cache), AUTOTUNE_CODE_CACHE=setting, PYTHONPATH=python_path())
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps([*case, state, shipped])],
                          env=env, capture_output=True, text=True, cwd=ROOT)
    if done.returncode:
        return {"ok": False, "error": done.stderr[-2000:]}
    return json.loads(done.stdout.splitlines()[-1])


def flip_last_bytes(folder: Path) -> int:
    files = list(folder.rglob("*.code"))
    for path in files:
        data = bytearray(path.read_bytes())
        data[-1] ^= 0xFF
        path.write_bytes(bytes(data))
    return len(files)


def main() -> int:
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        names = sys.argv[1:] or list(CASES)
        unknown = [n for n in names if n not in CASES]
        if unknown:
            print(f"unknown case(s) {unknown}; known: {list(CASES)}")
            return 2
        for name in names:
            case = CASES[name]
            folder = tmp / name.replace(" ", "_")
            local, ahead, fresh, shipped = (folder / s for s in ("local", "ahead", "fresh", "ship"))
            results = {"compiled": child(case, "compiled", local, setting="local"),
                       "local": child(case, "local", local, setting="local")}
            child(case, "ahead-build", ahead)
            results["ahead"] = child(case, "ahead", ahead, setting="local")
            child(case, "ahead-build", tmp / "scratch", shipped=str(shipped))
            results["shipped"] = child(case, "shipped", fresh, shipped=str(shipped))
            flipped = flip_last_bytes(local / "code")
            results["damaged"] = child(case, "damaged", local, setting="local")
            expected = {"compiled": "compiled", "local": "local", "ahead": "local", "shipped": "shipped",
                        "damaged": "compiled"}
            for state, r in results.items():
                wanted = expected[state]
                good = r.get("ok") and set(r.get("loads", {})) <= {wanted, "numba"} and wanted in r.get("loads", {})
                good = good and (state in ("compiled", "damaged") or not r.get("imported"))
                failed += not good
                print(f"{'ok  ' if good else 'FAIL'} {name:34} {state:9} loads {r.get('loads')} "
                      f"imported {r.get('imported')}" + (f" ({flipped} files damaged)" if state == "damaged" else "")
                      + ("" if good else f"\n{r.get('error', r)}"), flush=True)
            gpu, cpu = results["compiled"].get("report"), results["ahead"].get("report")
            same = gpu == cpu
            failed += not same
            print(f"{'ok  ' if same else 'FAIL'} {name:34} registers compiled on the GPU {gpu and gpu['registers']}, "
                  f"ahead on the CPU {cpu and cpu['registers']}", flush=True)
        for setting in ("0", "1"):
            env = dict(os.environ, AUTOTUNE_CODE_CACHE=setting, AUTOTUNE_CACHE_DIR=str(tmp / "host"),
                       PYTHONPATH=python_path())
            done = subprocess.run([sys.executable, "-c", HOST], env=env, capture_output=True, text=True, cwd=ROOT)
            print(f"host time, code cache {'on' if setting == '1' else 'off'}:\n{done.stdout or done.stderr[-2000:]}",
                  flush=True)
    print("all good" if not failed else f"{failed} checks failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
