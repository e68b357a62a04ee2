"""Print the PTX of a few fixed variants as one JSON object, for tests/test_compile.py to read: those named on
the command line, else all.

Run in its own process, without the CUDA simulator (see compile_sample.py). With ``--serve`` it stays up and
answers each line of stdin (a JSON list of names) with one line: {"ptx": {name: text}} or {"error": traceback};
tests/test_compile.py keeps one such process per test worker, so that the interpreter, Numba and NVVM start once.
"""
import json
import os
import re
import sys
import traceback

from autotune.runtime.build import build_kernel
from autotune.runtime.compiler import load_source, ptx_of

SPLIT = {"BM": 32, "BN": 32, "BK": 8, "TM": 4, "TN": 4, "VEC": 4, "UNROLL_K": 1, "SPLIT_K": 2}
REDUCE = {"BLOCK": 128, "ITEMS": 2}
MMA = {"BM": 32, "BN": 32, "BK": 16, "TM": 2, "TN": 4, "VEC": 4, "UNROLL_K": 8}
WGMMA = {"BM": 128, "BN": 128, "BK": 64, "MMA": 16, "WGMMA": 1, "ASYNC_STAGES": 4}
WGMMA_TF32 = {"BM": 128, "BN": 128, "BK": 32, "MMA": 8, "WGMMA": 1, "ASYNC_STAGES": 0}
TILED = {"BM": 32, "BN": 64, "BK": 8, "TM": 4, "TN": 8, "VEC": 4, "UNROLL_K": 2, "THREAD_LAYOUT": "strided"}
GEMV = {"GEMV": 1, "BLOCK": 256, "KT": 32, "TL": 1, "TS": 4, "VEC": 4, "UNROLL_K": 2, "SPLIT_K": 1}
BATCH = {"batch": "strided"}
VARIANTS = {"tiled": ("matmul", "float32", TILED, {}),
            "atomic": ("matmul", "float32", {**SPLIT, "SPLIT_ADD": "atomic"}, {}),
            "vector": ("matmul", "float32", {**SPLIT, "SPLIT_ADD": "vector"}, {}),
            "last_block": ("matmul", "float32", {**SPLIT, "SPLIT_ADD": "last_block"}, {}),
            "int32_sum": ("reduce", "int32", {**REDUCE, "VEC": 4, "COMBINE": "atomic", "BLOCK_REDUCE": "shuffle"}, {"op": "sum", "axis": None}),
            "int32_dot": ("reduce", "int32", {**REDUCE, "VEC": 1, "ROW_SPLIT": 4, "BX": 32},
                          {"op": "dot", "axis": 0}),
            "int64_max": ("reduce", "int64", {**REDUCE, "VEC": 2, "COMBINE": "last_block", "BLOCK_REDUCE": "shuffle"}, {"op": "max", "axis": None}),
            "float16_sum": ("reduce", "float16", {**REDUCE, "VEC": 4, "ROW_SPLIT": 2, "BX": 32},
                            {"op": "sum", "axis": -2}),
            "bfloat16_sum": ("reduce", "bfloat16", {**REDUCE, "VEC": 4, "ROW_SPLIT": 2, "BX": 32},
                             {"op": "sum", "axis": -2}),
            "bfloat16_max": ("reduce", "bfloat16", {**REDUCE, "VEC": 4, "COMBINE": "last_block",
                                                    "BLOCK_REDUCE": "shuffle"}, {"op": "max", "axis": None}),
            "tf32": ("matmul", "float32", {**MMA, "MMA": 8}, {"precision": "tf32"}),
            "3xtf32": ("matmul", "float32", {**MMA, "MMA": 8}, {"precision": "3xtf32"}),
            "tf32_k4": ("matmul", "float32", {**MMA, "MMA": 4}, {"precision": "tf32"}),
            "ieee": ("matmul", "float32", MMA, {}),
            "fp64": ("matmul", "float64", {**MMA, "VEC": 2, "MMA": 8}, {}),
            "fp16": ("matmul", "float16", {**MMA, "MMA": 16, "UNROLL_K": 16, "A_SMEM": "mmajor", "ASYNC_STAGES": 2},
                     {}),
            "fp16_kmajor": ("matmul", "float16", {**MMA, "MMA": 16, "UNROLL_K": 16, "SPLIT_K": 2,
                                                  "SPLIT_ADD": "last_block"}, {}),
            "bf16": ("matmul", "bfloat16", {**MMA, "MMA": 16, "UNROLL_K": 16, "A_SMEM": "mmajor", "ASYNC_STAGES": 2},
                     {}),
            "wgmma_bf16": ("matmul", "bfloat16", WGMMA, {"layout": "tn"}),
            "fp16_to_f32": ("matmul", "float16", {**MMA, "MMA": 16, "UNROLL_K": 16}, {"out_dtype": "float32"}),
            "fp16_vec8": ("matmul", "float16", {**MMA, "BK": 32, "VEC": 8, "MMA": 16, "UNROLL_K": 16,
                                                "A_SMEM": "mmajor", "ASYNC_STAGES": 2}, {}),
            "fp16_vec8_staged": ("matmul", "float16", {**MMA, "BK": 32, "VEC": 8, "MMA": 16, "UNROLL_K": 16,
                                                       "A_SMEM": "mmajor", "ASYNC_STAGES": 0}, {}),
            "wgmma": ("matmul", "float16", WGMMA, {}),
            "wgmma_tt_f32": ("matmul", "float16", WGMMA, {"layout": "tt", "out_dtype": "float32"}),
            "wgmma_tma": ("matmul", "float16", {**WGMMA, "BN": 256, "TMA": 1}, {}),
            "wgmma_tma_split": ("matmul", "float16", {**WGMMA, "BN": 256, "TMA": 1, "SPLIT_K": 4,
                                                      "SPLIT_ADD": "last_block"}, {}),
            "wgmma_tma_persistent": ("matmul", "float16", {**WGMMA, "BN": 256, "ASYNC_STAGES": 4, "TMA": 1,
                                                           "SCHEDULE": "persistent"}, {}),
            "wgmma_tma_stream_k": ("matmul", "float16", {**WGMMA, "BN": 256, "ASYNC_STAGES": 3, "TMA": 1,
                                                         "SCHEDULE": "stream_k"}, {}),
            "wgmma_tma_stream_k_tn": ("matmul", "bfloat16", {**WGMMA, "BN": 128, "TMA": 1, "SCHEDULE": "stream_k"},
                                      {"layout": "tn"}),
            "wgmma_tma_tf32_persistent": ("matmul", "float32", {**WGMMA_TF32, "ASYNC_STAGES": 4, "TMA": 1,
                                                                "SCHEDULE": "persistent"},
                                          {"precision": "tf32"}),
            "wgmma_split_tt": ("matmul", "bfloat16", {**WGMMA, "ASYNC_STAGES": 3, "SPLIT_K": 2,
                                                      "SPLIT_ADD": "last_block"}, {"layout": "tt"}),
            "wgmma_tma_tt": ("matmul", "bfloat16", {**WGMMA, "TMA": 1}, {"layout": "tt"}),
            "wgmma_tma_deep": ("matmul", "float16", {**WGMMA, "BM": 64, "BN": 128, "ASYNC_STAGES": 8, "TMA": 1}, {}),
            "wgmma_tma_tf32": ("matmul", "float32", {**WGMMA_TF32, "BN": 256, "ASYNC_STAGES": 4, "TMA": 1},
                               {"precision": "tf32"}),
            "wgmma_3xtf32": ("matmul", "float32", WGMMA_TF32, {"precision": "3xtf32"}),
            "wgmma_tf32_tt": ("matmul", "float32", WGMMA_TF32, {"precision": "tf32", "layout": "tt"}),
            "wgmma_tf32_copies": ("matmul", "float32", {**WGMMA_TF32, "ASYNC_STAGES": 4}, {"precision": "tf32"}),
            # stacks in one launch (grid z) and the gemv kernel of skinny products
            "batched_tiled": ("matmul", "float32", TILED, BATCH),
            "batched_last_block": ("matmul", "float64", {**SPLIT, "VEC": 2, "SPLIT_ADD": "last_block"}, BATCH),
            "batched_fp16": ("matmul", "float16", {**MMA, "MMA": 16, "UNROLL_K": 16, "A_SMEM": "mmajor",
                                                   "ASYNC_STAGES": 2}, {**BATCH, "layout": "tt"}),
            "batched_wgmma": ("matmul", "bfloat16", WGMMA, {**BATCH, "layout": "nt"}),
            "batched_wgmma_tf32": ("matmul", "float32", WGMMA_TF32, {**BATCH, "precision": "3xtf32"}),
            "batched_wgmma_tma": ("matmul", "bfloat16", {**WGMMA, "TMA": 1}, {**BATCH, "layout": "tt"}),
            "wgmma_tma_pair": ("matmul", "float16", {**WGMMA, "BM": 64, "TMA": 1, "CLUSTER": 2}, {}),
            "batched_wgmma_pair": ("matmul", "bfloat16", {**WGMMA, "TMA": 1, "CLUSTER": 2},
                                   {**BATCH, "layout": "nt"}),
            "batched_wgmma_persistent": ("matmul", "float16", {**WGMMA, "BM": 64, "TMA": 1, "SCHEDULE": "persistent"},
                                         BATCH),
            "gemv_rows": ("matmul", "float32", GEMV, {"skinny": "n"}),
            "gemv_rows_bf16_batched": ("matmul", "bfloat16", {**GEMV, "VEC": 8, "TS": 8},
                                       {**BATCH, "skinny": "m", "layout": "nt"}),
            "gemv_cols_f16": ("matmul", "float16", {**GEMV, "KT": 8, "VEC": 8, "UNROLL_K": 4, "SPLIT_K": 4},
                              {"skinny": "m"}),
            "gemv_cols_f64": ("matmul", "float64", {**GEMV, "KT": 8, "VEC": 2, "TL": 2, "SPLIT_K": 2},
                              {"skinny": "n", "layout": "tn"}),
            "gemv_cols_f16_groups": ("matmul", "float16", {**GEMV, "KT": 8, "KW": 8, "VEC": 8, "UNROLL_K": 4},
                                     {"skinny": "m"})}


def statement_form() -> str:
    """The PTX of the "tiled" variant with each ``acc = mul_add(acc, a, b)`` written back as ``acc += a * b``."""
    kind, dtype, params, args = VARIANTS["tiled"]
    kernel = build_kernel(kind, params, dtype, **args)
    source, count = re.subn(r"(acc\d+_\d+) = mul_add\(\1, (a\d+), (b\d+)\)", r"\1 += \2 * \3", kernel.source)
    assert count == params["TM"] * params["TN"] * params["UNROLL_K"], count
    return ptx_of(getattr(load_source(source), kernel.kernel.py_func.__name__), kernel.signature)


def tf32_copy(name: str) -> str:
    """The PTX of one of autotune/families/matmul/tf32_copies.py's fixed kernels ("tf32_rows", "tf32_transpose")."""
    from autotune.families.matmul import tf32_copies

    kernel = tf32_copies.rounded_rows if name == "tf32_rows" else tf32_copies.rounded_transpose
    flag = ", boolean" if name == "tf32_rows" else ""
    return ptx_of(kernel, f"void(float32[::1], float32[::1], int64, int64, int64, int64{flag})")


ALL = [*VARIANTS, "tiled_statements", "tf32_rows", "tf32_transpose", "gemv_finish"]


def ptx(name: str) -> str:
    """The PTX of one named variant."""
    if name == "tiled_statements":
        return statement_form()
    if name.startswith("tf32_") and name not in VARIANTS:
        return tf32_copy(name)
    if name == "gemv_finish":  # the kernel rounding gemv_cols_f16's float32 workspace into C
        kind, dtype, params, args = VARIANTS["gemv_cols_f16"]
        (finish, signature), = build_kernel(kind, params, dtype, **args).helper_kernels()
        return ptx_of(finish, signature)
    kind, dtype, params, args = VARIANTS[name]
    kernel = build_kernel(kind, params, dtype, **args)
    return ptx_of(kernel.kernel, kernel.signature)


def serve() -> None:
    """Answer requests until stdin ends; whatever else writes to stdout (file descriptor 1) goes to stderr."""
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for line in sys.stdin:
        try:
            reply = {"ptx": {name: ptx(name) for name in json.loads(line)}}
        except Exception:  # said in the reply; the next request still gets an answer
            reply = {"error": traceback.format_exc()}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


def main():
    if sys.argv[1:] == ["--serve"]:
        serve()
        return
    print(json.dumps({name: ptx(name) for name in sys.argv[1:] or ALL}))


if __name__ == "__main__":
    main()
