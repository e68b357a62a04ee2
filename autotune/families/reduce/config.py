"""What a reduction implies: its result's shape and dtype, its accumulator and identity, and what a
configuration launches (kernel arguments, staging, row splits). Shared by the family, the kernel object and the
NumPy-style functions."""
from __future__ import annotations

import math

import numpy as np

from ...core.dtypes import HALF

OPS = ("sum", "max", "min", "dot", "nanmax", "nanmin")
ORDERED = ("max", "min", "nanmax", "nanmin")  # checked also on data with extreme values (infinities, NaN)
DTYPES = ("float32", "float64", "float16", "bfloat16", "int32", "int64")
# NaN is the identity of nanmax and nanmin: fmax(NaN, x) = x, and a line of only NaN stays NaN, as in NumPy.
_IDENTITY = {"sum": 0.0, "dot": 0.0, "max": -math.inf, "min": math.inf, "nanmax": math.nan, "nanmin": math.nan}


MAX_ROW_SPLIT = 1024  # the space's largest ROW_SPLIT


def column_splits(shape: tuple[int, ...], columns_per_block: int, target_blocks: int = 1024,
                  min_rows: int = 64) -> int:
    """Row splits (a power of two up to MAX_ROW_SPLIT) that bring the column kernel to about ``target_blocks``
    blocks (8 per SM of a 132-SM GPU) while each split keeps at least ``min_rows`` rows: without splits a few
    thousand columns give the kernel only a few dozen blocks, and a tall array of a few columns one block, and the
    GPU idles."""
    rows, blocks = max(1, shape[-2]), column_blocks(shape, columns_per_block)
    split = 1
    while split < MAX_ROW_SPLIT and blocks * split < target_blocks and rows // (2 * split) >= min_rows:
        split *= 2
    return split


def column_blocks(shape: tuple[int, ...], columns_per_block: int) -> int:
    """Blocks of ``columns_per_block`` columns the column kernel needs across an array of ``shape`` (rows
    ``shape[-2]``), before any row split."""
    return -(-math.prod(shape) // max(1, shape[-2]) // columns_per_block)


def narrowed_bx(bx: int, vec: int, columns: int) -> int:
    """The threads across columns a column kernel of ``bx`` threads, ``vec`` columns each, needs for rows of
    ``columns`` elements: the smallest power of two whose vectors span them, at most ``bx``. Threads past a row's
    end load nothing, and with fewer of them across, one warp's loads cover several consecutive rows of a narrow
    array in one piece of memory."""
    need = max(1, -(-columns // vec))
    return min(bx, 1 << (need - 1).bit_length())


def result_shape(shape: tuple[int, ...], axis) -> tuple[int, ...]:
    """The output of a reduction of ``shape`` in one of the family's forms (see the module docstring)."""
    if axis is None:
        return (1,)
    return (shape[0], shape[2]) if axis == -2 else (shape[1 - axis],)


def result_dtype(op: str, dtype: str) -> str:
    """NumPy's result dtype: a sum of int32 is int64 (``np.sum`` widens integers narrower than the platform's
    on 64-bit systems); every other reduction keeps the input's dtype (``np.max``, ``np.dot`` of int32: int32)."""
    return "int64" if op == "sum" and dtype == "int32" else dtype


def accumulator_dtype(op: str, dtype: str) -> str:
    """What partial results are kept in: float16 and bfloat16 in float32; int32 sums and dots in int64 (a dot's
    products and sums wrap modulo 2**64, and truncated to int32 that is the int32 wraparound NumPy's dot gives);
    otherwise the input's dtype."""
    if dtype in HALF:
        return "float32"
    return "int64" if dtype == "int32" and op in ("sum", "dot") else dtype


def uses_atomics(params, args) -> bool:
    """Whether a variant combines blocks' results with atomics into its output (which must first hold the
    identity; COMBINE atomic_last combines into an accumulator of its own, which its last block stores)."""
    if args["axis"] is None:
        return params["COMBINE"] == "atomic"
    return args["axis"] in (0, -2) and params["ROW_SPLIT"] > 1


def row_lanes(row_mode: str) -> int:
    """Threads that reduce one row in a warp-based row mode: 32 for ``warp``, N for ``lanesN``, 1 for ``thread``."""
    if row_mode == "thread":
        return 1
    return 32 if row_mode == "warp" else int(row_mode.removeprefix("lanes"))


def rows_per_block(params) -> int:
    """Rows a block reduces per pass along axis 1: one (``block``), a row per group of lanes, or ITEMS rows per
    thread (``thread``)."""
    mode = params["ROW_MODE"]
    if mode == "block":
        return 1
    if mode == "thread":
        return params["BLOCK"] * params["ITEMS"]
    return params["BLOCK"] // row_lanes(mode)


def staged(params, dtype: str, args) -> bool:
    """float16 and bfloat16 results combined with atomics go through a float32 workspace, then a store kernel:
    there are no 16-bit atomics that accumulate in float32."""
    return dtype in HALF and uses_atomics(params, args)


def kernel_out_dtype(params, dtype: str, args) -> str:
    """The dtype of the ``out`` the variant's main kernel writes: the result's, or the workspace's if staged."""
    return accumulator_dtype(args["op"], dtype) if staged(params, dtype, args) else result_dtype(args["op"], dtype)


def identity(op: str, acc: str) -> float | int:
    """The reduction's identity in the accumulator's dtype (integers have no infinity: their extremes)."""
    if np.dtype(acc).kind == "i" and op in ORDERED:
        info = np.iinfo(acc)
        return int(info.min if op.endswith("max") else info.max)
    return _IDENTITY[op]


def identity_source(value: float | int) -> str:
    """The identity as template source: an integer literal, 0, math.inf, -math.inf or math.nan."""
    if isinstance(value, int) or value == 0:
        return str(int(value))
    if math.isnan(value):
        return "math.nan"
    return "-math.inf" if value < 0 else "math.inf"


def kernel_args(params, args) -> tuple[str, ...]:
    """The arguments a variant's main kernel takes: only those it uses (y for dot; the partials and the
    counter as its COMBINE needs them; vec_ok where loads are vectors)."""
    names = ["X"] + (["Y"] if args["op"] == "dot" else [])
    if args["axis"] is None:
        combine = params["COMBINE"]
        names += ["n"] + (["partial"] if combine != "atomic" else [])
        names += ["counter"] if combine in ("last_block", "atomic_last") else []
        names += ["out"] if combine != "two_pass" else []
    else:
        names += ["M", "N"] + (["L"] if args["axis"] == -2 else []) + ["out"]
        names += ["rows_per_split"] if args["axis"] in (0, -2) else []
    return tuple(names + (["vec_ok"] if params["VEC"] > 1 else []))
