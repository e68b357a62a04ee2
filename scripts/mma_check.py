"""On the GPU: the fp64 tensor-core (MMA) matmul variants checked like `autotune selftest` does (NaN-poisoned
outputs, exact integer data and Freivalds' test against float64 NumPy), on every layout and the selftest's odd
shapes. The configurations cover each mma shape, staging path, edge mode, split-K and index width. With the cp.async
pipeline (ASYNC_STAGES > 0, now excluded for MMA) this check faulted now and then: benchmarks/NOTES.md item 19.
Usage (device tool, carry [".whl"]): python3 scripts/mma_check.py [layout ...]
"""
import sys

import numpy as np

from autotune.selftest import MATMUL_SHAPES, check_plan, compile_ahead

BASE = {"strategy": "tiled", "VEC": 2}
CONFIGS = [
    {**BASE, "BM": 128, "BN": 128, "BK": 16, "TM": 8, "TN": 8, "MMA": 4, "UNROLL_K": 16},
    {**BASE, "BM": 128, "BN": 128, "BK": 16, "TM": 8, "TN": 8, "MMA": 8, "UNROLL_K": 16},
    {**BASE, "BM": 128, "BN": 128, "BK": 32, "TM": 8, "TN": 8, "MMA": 16, "UNROLL_K": 16},
    {**BASE, "BM": 64, "BN": 64, "BK": 16, "TM": 4, "TN": 4, "MMA": 4, "UNROLL_K": 8, "EDGE": "clamp", "SPLIT_K": 2},
    {**BASE, "BM": 128, "BN": 64, "BK": 16, "TM": 8, "TN": 4, "MMA": 8, "UNROLL_K": 16, "PREFETCH": 0,
     "INDEX_BITS": 64},
    {**BASE, "BM": 64, "BN": 128, "BK": 8, "TM": 4, "TN": 8, "VEC": 1, "MMA": 4, "UNROLL_K": 8, "EDGE": "clamp"},
    {**BASE, "BM": 32, "BN": 32, "BK": 16, "TM": 2, "TN": 2, "MMA": 16, "UNROLL_K": 16, "SPLIT_K": 4,
     "MIN_BLOCKS": 2},
]


def main(layouts):
    plan = [("matmul", "float64", {"layout": layout}, MATMUL_SHAPES, CONFIGS) for layout in layouts]
    compile_ahead(plan)
    sys.exit(0 if check_plan(plan, np.random.default_rng()) else 1)


if __name__ == "__main__":
    main(sys.argv[1:] or ["nn", "tn", "nt", "tt"])
