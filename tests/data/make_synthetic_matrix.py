"""Writes tests/data/synthetic-matrix.json: a cross-time matrix of made-up timings for the CPU tests of rule fitting
and choosing (no GPU has measured it). Run from the repository root: python tests/data/make_synthetic_matrix.py

The shapes are matmul's float32 coverage set; the candidates are configurations of the search space; a cell's
time is the work over a rate that a candidate reaches on that shape by a simple model of tiled kernels: the
fraction of each tile holding real rows and columns, the fraction of the last wave of blocks that is busy (after
splitting K where the family's fit splits it), a per-candidate peak, and 3% log-normal noise from a fixed seed.
The model gives different shapes different winners, as real data do, which is all the tests need.
"""
import datetime
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from autotune.core.device import DeviceInfo  # noqa: E402
from autotune.core.problem import Problem  # noqa: E402
from autotune.core.registry import family  # noqa: E402
from autotune.core.space import load_space  # noqa: E402
from autotune.tuning.matrix import CrossMatrix, write_matrix  # noqa: E402

DEVICE = {"name": "Synthetic GPU", "cc": "9.0", "sm_count": 132}
CANDIDATES = [  # (configuration, relative peak)
    ({"BM": 128, "BN": 128, "BK": 8, "TM": 8, "TN": 8}, 1.00),
    ({"BM": 128, "BN": 256, "BK": 8, "TM": 8, "TN": 16, "WARP_ROWS": 4}, 1.06),
    ({"BM": 64, "BN": 64, "BK": 16, "TM": 4, "TN": 4}, 0.72),
    ({"BM": 64, "BN": 128, "BK": 16, "TM": 8, "TN": 4}, 0.85),
    ({"BM": 32, "BN": 64, "BK": 16, "TM": 4, "TN": 4, "VEC": 2}, 0.55),
    ({"BM": 128, "BN": 64, "BK": 16, "TM": 8, "TN": 4}, 0.86),
    ({"BM": 256, "BN": 128, "BK": 8, "TM": 16, "TN": 8}, 1.04),
    ({"BM": 16, "BN": 128, "BK": 16, "TM": 2, "TN": 8, "VEC": 2}, 0.50),
]
PEAK_TFLOPS = 50.0


def rate(params, shape, sm_count):
    M, N, K = shape
    bm, bn, split = params["BM"], params["BN"], params.get("SPLIT_K", 1)
    fill = (M / (math.ceil(M / bm) * bm)) * (N / (math.ceil(N / bn) * bn))
    blocks = math.ceil(M / bm) * math.ceil(N / bn) * split
    waves = blocks / (2 * sm_count)
    wave_fill = waves / math.ceil(waves)
    k_fill = min(1.0, K / (split * 512))  # short K slices pay their prologue
    return PEAK_TFLOPS * fill * wave_fill * (0.35 + 0.65 * k_fill)


def main():
    impl, space = family("matmul"), load_space("matmul")
    args = {"layout": "nn", "precision": "ieee", "out_dtype": None}
    device = DeviceInfo.from_record(DEVICE)
    shapes = impl.shape_set("coverage", "float32", args)
    candidates = [space.validate(c, dtype="float32", args=args) for c, _ in CANDIDATES]
    rng = np.random.default_rng(58)
    ms = []
    for shape in shapes:
        problem = Problem("matmul", shape, "float32", args)
        row = []
        for config, (_, peak) in zip(candidates, CANDIDATES):
            fitted = impl.fit_config(config, problem, device, space)
            tflops = rate(fitted, shape, device.sm_count) * peak
            row.append(round(problem.work / (tflops * 1e9) * math.exp(rng.normal(0, 0.03)), 6))
        ms.append(row)
    matrix = CrossMatrix(device=DEVICE, family="matmul", dtype="float32", args=args, shapes=shapes,
                         candidates=candidates, ms=ms, failed={}, shape_set="coverage",
                         command="python tests/data/make_synthetic_matrix.py (made-up timings)",
                         date=datetime.date(2026, 11, 27).isoformat())
    write_matrix(Path(__file__).with_name("synthetic-matrix.json"), matrix)


if __name__ == "__main__":
    main()
