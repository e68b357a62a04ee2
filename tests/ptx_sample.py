"""Print the PTX of a few fixed matmul variants as one JSON object, for tests/test_compile.py to read.

Run in its own process, without the CUDA simulator (see compile_sample.py).
"""
import json

from autotune.build import build_kernel
from autotune.compiler import ptx_of

SPLIT = {"BM": 32, "BN": 32, "BK": 8, "TM": 4, "TN": 4, "VEC": 4, "UNROLL_K": 1, "SPLIT_K": 2}
VARIANTS = {"atomic": ("float32", {**SPLIT, "SPLIT_ADD": "atomic"}),
            "vector": ("float32", {**SPLIT, "SPLIT_ADD": "vector"}),
            "last_block": ("float32", {**SPLIT, "SPLIT_ADD": "last_block"})}


def main():
    out = {}
    for name, (dtype, params) in VARIANTS.items():
        kernel = build_kernel("matmul", params, dtype)
        out[name] = ptx_of(kernel.kernel, kernel.signature)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
