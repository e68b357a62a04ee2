"""Compile a covering sample of every kernel family for sm_90 with the real compiler (no GPU needed).

Run by tests/test_compile.py in its own process: the CUDA simulator, which the other tests use, and the
real compiler cannot share one. Prints one JSON line per variant: family, parameters and the ptxas report.

    python tests/compile_sample.py [WORKERS]   every variant of ``items()``, in a pool of WORKERS (default 2)
    python tests/compile_sample.py -           the variants given as a JSON list on stdin, in this process
    python tests/compile_sample.py --draw      draw the covering samples again into tests/data/covering-sample.json

The test hands each of its shards a slice of ``items()`` (computed in the test's process) the second way. The
covering samples are drawn once and kept in tests/data/covering-sample.json: drawing them from many candidates per
value (``CANDIDATES``) makes variants cheaper to compile (about 90 CPU-seconds for the samples against 125 at 8
candidates) but takes half a minute, more than a test process should spend on it. tests/test_compile.py checks
that the kept samples are still valid configurations that take every value of every parameter; where a search
space changed so that they are not, draw them again.
"""
import json
import sys
from pathlib import Path

from autotune.core.space import load_space
from autotune.runtime.build import build_kernel
from autotune.runtime.compiler import resource_report
from autotune.tuning.worker import CompilePool

# Together these use every value of every parameter of both families, both dtypes and transposed operands (with
# GEMV_EXTRA below: the gemv kernel's parameters apply to skinny problems alone).
FAMILIES = [("matmul", "float32", {"layout": "nn"}), ("matmul", "float64", {"layout": "tt"}),
            ("reduce", "float32", {"op": "sum", "axis": None}), ("reduce", "float32", {"op": "dot", "axis": 0}),
            ("reduce", "float32", {"op": "max", "axis": 1}), ("reduce", "float64", {"op": "min", "axis": None})]


# Parameters not being pinned are drawn from values that keep the unrolled source short: compile time grows
# with the statement count (TM*TN*UNROLL_K, and the cp.async pipeline's copies) in Numba's front end. Each value
# is still compiled once.
CHEAP = {"matmul": {"UNROLL_K": (1, 2), "TM": (1, 2), "TN": (1, 2), "BK": (8,), "ASYNC_STAGES": (0,),
                    "BM": (16, 32, 64), "BN": (16, 32, 64)},
         "reduce": {}}


# Besides the covering samples: a cp.async pipeline whose tiles (64 KB) need dynamic shared memory, the deepest
# mma (k = 16 needs UNROLL_K >= 16, which the cheap values above leave out), and split-K summed by the last block
# with tiles of exactly 48 KB of static shared memory (a shared flag word once pushed such a kernel over the limit);
# float16's 16-byte copies (VEC 8, which the float32 and float64 samples cannot use) and the wgmma kernels (WGMMA,
# BK 64: 16-bit only, compiled for sm_90a; cp.async-fed, and TMA-fed, persistent for bfloat16 and Stream-K for
# float16, and in pairs of blocks (CLUSTER 2)); and reductions of the narrow and integer dtypes at their widest unrolling (float16's with 16-byte loads).
EXTRA = [("matmul", "float32", {"layout": "nn"},
          {"strategy": "tiled", "BM": 64, "BN": 64, "BK": 32, "TM": 4, "TN": 4, "VEC": 4, "THREAD_LAYOUT": "strided",
           "UNROLL_K": 4, "ASYNC_STAGES": 4}),
         ("matmul", "float64", {"layout": "nn"},
          {"strategy": "tiled", "BM": 32, "BN": 32, "BK": 16, "TM": 2, "TN": 2, "VEC": 2, "MMA": 16, "UNROLL_K": 16,
           "MIN_BLOCKS": 2}),
         ("matmul", "float32", {"layout": "nn"},
          {"strategy": "tiled", "BM": 64, "BN": 128, "BK": 32, "TM": 4, "TN": 4, "VEC": 4, "UNROLL_K": 2, "PREFETCH": 1,
           "SPLIT_K": 2, "SPLIT_ADD": "last_block"}),
         ("matmul", "float16", {"layout": "nn"},
          {"strategy": "tiled", "BM": 32, "BN": 32, "BK": 32, "MMA": 16, "WGMMA": 0, "TM": 2, "TN": 4, "VEC": 8,
           "UNROLL_K": 16, "A_SMEM": "mmajor", "ASYNC_STAGES": 2}),
         ("matmul", "float16", {"layout": "tn"},
          {"strategy": "tiled", "BM": 256, "BN": 128, "BK": 64, "MMA": 16, "WGMMA": 1, "TMA": 0, "ASYNC_STAGES": 3}),
         ("matmul", "bfloat16", {"layout": "nt"},
          {"strategy": "tiled", "BM": 128, "BN": 256, "BK": 64, "MMA": 16, "WGMMA": 1, "TMA": 1, "ASYNC_STAGES": 3,
           "SCHEDULE": "persistent"}),
         ("matmul", "float16", {"layout": "tn"},
          {"strategy": "tiled", "BM": 64, "BN": 128, "BK": 64, "MMA": 16, "WGMMA": 1, "TMA": 1, "ASYNC_STAGES": 4,
           "SCHEDULE": "stream_k"}),
         ("matmul", "float16", {"layout": "nn"},
          {"strategy": "tiled", "BM": 128, "BN": 256, "BK": 64, "MMA": 16, "WGMMA": 1, "TMA": 1, "ASYNC_STAGES": 4,
           "SCHEDULE": "tile", "SPLIT_K": 4, "SPLIT_ADD": "last_block"}),
         ("matmul", "bfloat16", {"layout": "tt"},
          {"strategy": "tiled", "BM": 128, "BN": 128, "BK": 64, "MMA": 16, "WGMMA": 1, "TMA": 0, "ASYNC_STAGES": 3,
           "SPLIT_K": 2, "SPLIT_ADD": "last_block"}),
         ("matmul", "bfloat16", {"layout": "nt"},
          {"strategy": "tiled", "BM": 128, "BN": 64, "BK": 64, "MMA": 16, "WGMMA": 1, "TMA": 1, "ASYNC_STAGES": 8,
           "CLUSTER": 2}),
         ("matmul", "float16", {"layout": "tt"},
          {"strategy": "tiled", "BM": 128, "BN": 128, "BK": 64, "MMA": 16, "WGMMA": 1, "TMA": 1, "ASYNC_STAGES": 6,
           "SCHEDULE": "persistent", "CLUSTER": 1}),
         ("reduce", "int32", {"op": "sum", "axis": 1}, {"BLOCK": 256, "ITEMS": 4, "VEC": 4, "ROW_MODE": "block"}),
         ("reduce", "float16", {"op": "nanmax", "axis": None}, {"BLOCK": 512, "ITEMS": 8, "VEC": 8, "COMBINE": "atomic"}),
         ("reduce", "float32", {"op": "max", "axis": None},
          {"BLOCK": 512, "ITEMS": 4, "VEC": 2, "COMBINE": "atomic_last"}),
         ("reduce", "bfloat16", {"op": "sum", "axis": None}, {"BLOCK": 256, "ITEMS": 4, "VEC": 8, "COMBINE": "atomic_last"}),
         ("reduce", "int64", {"op": "dot", "axis": -2}, {"BLOCK": 256, "ITEMS": 8, "VEC": 2, "ROW_SPLIT": 8}),
         ("reduce", "bfloat16", {"op": "dot", "axis": 1}, {"BLOCK": 128, "ITEMS": 4, "VEC": 8, "ROW_MODE": "thread"})]


# The gemv kernel of skinny problems (M or N at most 16): every value of BLOCK, KT, KW, TL and TS in six variants, both
# forms on both sides, every dtype (float16 and bfloat16 split through the float32 workspace), and a tiled variant
# of a skinny problem (GEMV 0); far fewer than a covering sample of the skinny family, which would draw the tiled
# kernel's values again.
def _gemv(block, kt, tl, ts, vec, unroll, split, bits=32, kw=1):
    return {"strategy": "tiled", "GEMV": 1, "BLOCK": block, "KT": kt, "KW": kw, "TL": tl, "TS": ts, "VEC": vec,
            "UNROLL_K": unroll, "SPLIT_K": split, "INDEX_BITS": bits}


GEMV_EXTRA = [("matmul", "float32", {"layout": "nn", "skinny": "n"}, _gemv(64, 1, 1, 16, 4, 2, 1)),
              ("matmul", "float32", {"layout": "tn", "skinny": "m"}, _gemv(128, 2, 2, 2, 2, 1, 2, kw=4)),
              ("matmul", "float16", {"layout": "nt", "skinny": "m"}, _gemv(256, 4, 4, 4, 8, 1, 4, kw=8)),
              ("matmul", "float64", {"layout": "tt", "skinny": "n"}, _gemv(512, 8, 1, 8, 2, 2, 1, kw=16)),
              ("matmul", "bfloat16", {"layout": "nn", "skinny": "n"}, _gemv(64, 16, 2, 8, 8, 1, 2, kw=2)),
              ("matmul", "float32", {"layout": "nn", "skinny": "m"}, _gemv(128, 32, 1, 1, 4, 8, 16, 64)),
              ("matmul", "float32", {"layout": "nn", "skinny": "n"},
               {"strategy": "tiled", "GEMV": 0, "BM": 16, "BN": 16, "BK": 8, "TM": 2, "TN": 2, "VEC": 1,
                "UNROLL_K": 1})]


def compile_one(item):
    kind, dtype, family, params = item
    kernel = build_kernel(kind, params, dtype, **family)
    try:
        report = resource_report(kernel.kernel, kernel.signature, cc=(9, 0)).as_dict()
        return {"kind": kind, "dtype": dtype, "family": family, "params": params, "report": report}
    except Exception as exc:
        return {"kind": kind, "dtype": dtype, "family": family, "params": params, "error": f"{exc}"}


SAMPLES = Path(__file__).parent / "data" / "covering-sample.json"
CANDIDATES = 64  # configurations drawn per pinned value (SearchSpace.covering_sample), the cheapest kept


def drawn_samples() -> list:
    """(kind, dtype, family arguments, parameters) of the covering samples of FAMILIES, drawn now (seeded)."""
    found = []
    for kind, dtype, family in FAMILIES:
        sample, _ = load_space(kind).covering_sample(dtype=dtype, args=family, seed=5, cheap=CHEAP[kind],
                                                    candidates=CANDIDATES)
        found += [[kind, dtype, family, params] for params in sample]
    return found


def kept_samples() -> list:
    """The covering samples as drawn into SAMPLES."""
    return [tuple(item) for item in json.loads(SAMPLES.read_text())]


def items() -> list:
    """(kind, dtype, family arguments, parameters) of every variant: the kept covering samples, then the extras."""
    return kept_samples() + EXTRA + GEMV_EXTRA


def main():
    if sys.argv[1:] == ["--draw"]:
        SAMPLES.write_text("[\n" + ",\n".join(json.dumps(item) for item in drawn_samples()) + "\n]\n")
        print(f"wrote {len(kept_samples())} variants to {SAMPLES}")
        return
    if sys.argv[1:] == ["-"]:  # one after another here: a test worker has one CPU of its own (tests/conftest.py)
        for item in json.load(sys.stdin):
            print(json.dumps(compile_one(item)), flush=True)
        return
    with CompilePool(int(sys.argv[1]) if len(sys.argv) > 1 else 2) as pool:
        for result in pool.map(compile_one, items()):
            print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
