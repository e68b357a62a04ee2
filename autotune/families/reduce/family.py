"""The reduction family: sum, max, min and dot (sum of a*b) over a whole array or along one axis.

Every reduction of a C-contiguous array is one of four forms (``autotune.sum`` and friends bring any call to
one): ``axis=None`` treats the array as flat; ``axis=1`` of an (M, N) array reduces along rows (one result per
row), ``axis=0`` down columns (one result per column), and ``axis=-2`` of an (outer, R, inner) array reduces
the middle extent, one result per (outer, inner) pair: columns of ``outer`` stacked matrices. ``axis=-1`` is
``axis=1``; on a 2-D shape ``axis=-2`` is ``axis=0`` and on a 3-D shape ``axis=1`` is ``axis=-2``. max and min follow NumPy: a NaN anywhere in what is reduced
makes the result NaN; nanmax and nanmin skip NaN, as ``np.nanmax`` and ``np.nanmin`` do.

dtypes are NumPy's: float32, float64, float16, bfloat16 (ml_dtypes', see autotune/core/dtypes.py), int32 and int64 in;
the result's dtype is NumPy's (an int32 sum is int64, everything else keeps its dtype: ``np.dot`` of int32 is
int32). float16 and bfloat16 accumulate in float32 (as CuPy and PyTorch do: one rounding, at the end), integer sums
and dots in int64, wrapping as NumPy's do.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ...core.family import Case, FamilyArg, KernelFamily
from ...core.oracle import compare_exact, unwritten
from .config import (
    DTYPES,
    OPS,
    ORDERED,
    accumulator_dtype,
    column_blocks,
    column_splits,
    identity,
    identity_source,
    kernel_args,
    kernel_out_dtype,
    narrowed_bx,
    result_dtype,
    result_shape,
    row_lanes,
    staged,
)
from .reference import expected_result, with_values_planted

HERE = Path(__file__).resolve().parent
WARP = 32
LONG_SPLIT_ROWS = 1024  # rows a block of a column reduction that fills less than half a wave walks at most, as given
MIN_SPLIT_ROWS = 8  # rows each row split of a column reduction keeps at least, where a rule fits it to a shape
SHORT_ROW = 4  # rows of at most this many elements are reduced a thread per row (fit_config)
THREAD_ROW_MAX = 32  # a thread-per-row form chosen for rows longer than this is given a warp per row (fit_config)

class ReduceFamily(KernelFamily):
    name = "reduce"
    summary = "sum/max/min/dot reductions"
    shape_help = "N (--axis all: a flat array), M x N (--axis 0 or 1) or O x R x I (--axis -2: along R)"
    dtypes = DTYPES
    args = (FamilyArg("op", OPS, "sum", "the operation: sum, max, min, dot (sum of a*b), or nanmax, nanmin "
                                         "(NaN ignored, as np.nanmax)"),
            FamilyArg("axis", (None, 0, 1, -2), None, "all (the whole array, flat); 0 or 1 of an (M, N) array; "
                      "-2: the middle of an (outer, R, inner) array", none_means="all"))
    unit = "GB/s"
    baseline = {"BLOCK": 256, "ITEMS": 1, "VEC": 1, "BLOCK_REDUCE": "tree", "COMBINE": "two_pass"}
    suite = ("1024", "65536", "1048576", "16777216", "268435456")
    dry_run_shapes = ("4099",)
    measurement_free_modules = ("coverage.py", "functions.py")  # shape sets; NumPy-style functions
    reference_peers = ("cupy.sum", "cupy.max", "cupy.min", "cupy.dot", "cupy (a*b).sum", "cupy.nanmax", "cupy.nanmin")

    def __init__(self):
        self.space_file = HERE / "space.yaml"
        self.template_dir = HERE / "templates"

    def family_args(self, **given: Any) -> dict[str, Any]:
        """As the protocol's, with ``axis=-1`` read as 1: the last axis of a 2-D shape, and the same kernel."""
        if given.get("axis") in (-1, "-1"):
            given["axis"] = 1
        return super().family_args(**given)

    def canonical_args(self, shape, args) -> dict[str, Any]:
        """One name per problem: axis -2 of a 2-D shape is axis 0; axis 1 of a 3-D shape is axis -2."""
        axis = args["axis"]
        if axis == -2 and len(shape) == 2:
            return {**args, "axis": 0}
        if axis == 1 and len(shape) == 3:
            return {**args, "axis": -2}
        return args

    def check_shape(self, shape, args) -> None:
        axis, rank = args["axis"], len(shape)
        if axis in (0, 1) and rank != 2:
            raise ValueError(f"reduce along axis {axis} needs a 2-D shape, got {'x'.join(map(str, shape))}")
        if axis == -2 and rank != 3:
            raise ValueError(f"reduce along axis -2 needs a 3-D shape (outer, R, inner), got "
                             f"{'x'.join(map(str, shape))}")

    def rule_features(self, rank: int) -> tuple:
        """An (outer, R, inner) shape is measured by its outputs, outer * inner, and by R: the outputs against the
        GPU's threads and the length each walks are what a configuration answers to, wherever the outputs lie. On
        the H200's matrix of sums along axis -2 this chose better than the three dimensions alone on shapes the
        rule was not fitted on (benchmarks/NOTES.md item 64). Other ranks: the dimensions alone."""
        return ((0, 2), 1) if rank == 3 else tuple(range(rank))

    def key_tag(self, args) -> str:
        axis = args["axis"]
        return f"{args['op']}/{'all' if axis is None else f'axis{axis}'}"

    def work(self, problem) -> float:
        inputs = 2 if problem.args["op"] == "dot" else 1
        return float(inputs * math.prod(problem.shape) * np.dtype(problem.dtype).itemsize)

    def out_shape(self, problem) -> tuple[int, ...]:
        return result_shape(problem.shape, problem.args["axis"])

    def out_dtype(self, problem) -> str:
        return result_dtype(problem.args["op"], problem.dtype)

    def templates(self) -> list[str]:
        return ["_common.j2", "reduce.py.j2"]

    def template(self, params) -> str:
        return "reduce.py.j2"

    def template_context(self, params, dtype, args, simulator) -> dict[str, Any]:
        acc = accumulator_dtype(args["op"], dtype)
        return {**params, **args, "dtype": dtype, "SIM": simulator, "ACC": acc, "WIDEN": acc != dtype,
                "KOUT": kernel_out_dtype(params, dtype, args), "STAGED": staged(params, dtype, args),
                "LANES": row_lanes(params["ROW_MODE"]) if params.get("ROW_MODE", "block") != "block" else None,
                "identity": identity_source(identity(args["op"], acc)), "ARGS": kernel_args(params, args),
                "description": f"reduce {args['op']} axis={args['axis']} {dtype} {dict(params)}"}

    def make_kernel(self, module, params, dtype, args, source, simulator):
        from .kernel import ReduceKernel

        return ReduceKernel(self, module, params, dtype, args, source, simulator)

    def threads(self, params) -> int:
        return params["BLOCK"]

    def shared_bytes(self, params, itemsize: int) -> int:
        """Shared memory holds accumulators, up to twice as wide as the input (float16 in float32, int32 sums in
        int64): the bound for the wider one."""
        return (2 * params["BLOCK"] + 1) * 2 * itemsize

    # -- data and oracle ----------------------------------------------------------------------------
    def inputs(self, problem, rng, purpose):
        """x (and y for dot). Float check data of sums are integers in [-8, 8], never all zero: partial sums are
        random walks far below 2**24 even for 2**28 elements, so a sum accumulated in float32 is exact or wrong.
        Float max and min get standard-normal data: distinct values, and max/min round nothing (``verification``
        adds copies with infinities and NaNs). Integer data span the whole dtype, so an int32 sum that overflowed
        an int32 accumulator, or a dot that lost its wraparound, is caught. Timing data are standard normal."""
        count = 2 if problem.args["op"] == "dot" else 1
        dtype = np.dtype(problem.dtype)
        arrays = []
        for _ in range(count):
            if dtype.kind == "i":
                x = rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, size=problem.shape, dtype=dtype,
                                 endpoint=True)
            elif purpose == "check" and problem.args["op"] not in ORDERED:
                x = rng.integers(-8, 9, size=problem.shape, dtype=np.int8).astype(problem.dtype)
                x.flat[0] = 1
            else:
                x = rng.standard_normal(problem.shape, dtype=np.float32).astype(problem.dtype)
            arrays.append(x)
        return arrays

    def verification(self, problem, inputs, rng) -> list[Case]:
        """The check data, and for max and min the same data with +inf and -inf planted, then with NaNs planted
        (integers: the dtype's least and greatest values): over the whole array at random elements (NaN also,
        apart, at the last); along an axis in about half of the results' lines, so that the other lines still
        check the values."""
        op, axis = problem.args["op"], problem.args["axis"]
        cases = [Case(tuple(inputs), expected_result(op, inputs, axis))]
        if op not in ORDERED:
            return cases
        x = inputs[0]
        if x.dtype.kind == "i":
            extremes = (("extreme values", (np.iinfo(x.dtype).min, np.iinfo(x.dtype).max)),)
        else:
            extremes = (("infinities", (np.inf, -np.inf)), ("NaN", (np.nan,)))
        for what, values in extremes:
            for planted in with_values_planted(x, axis, values, rng, also_last=what == "NaN"):
                cases.append(Case((planted,), expected_result(op, [planted], axis), f"elements (data with {what})"))
        return cases

    def verify(self, problem, case, got, rng) -> str | None:
        return unwritten(got, case.expected) or compare_exact(got, case.expected, case.what)

    # -- search -------------------------------------------------------------------------------------
    def seeds(self):
        return [("seed tree+2nd pass", dict(self.baseline))]

    def default_params(self, problem) -> dict[str, Any]:
        """Vectors of 16 bytes at most; along short rows, a thread per row (``short_rows_form``); down columns, as
        many threads across as the rows' columns need (``narrowed_bx``) and enough row splits to fill a GPU (see
        column_splits)."""
        params = {"VEC": 2} if np.dtype(problem.dtype).itemsize == 8 else {}
        axis = problem.args["axis"]
        if axis is None or (axis == 1 and problem.shape[-1] > SHORT_ROW):
            return params
        from ...core.space import load_space

        space = load_space(self.name)
        chosen = {**space.defaults(problem.args), **params}
        if axis == 1:
            return short_rows_form(chosen, problem, space)
        bx = narrowed_bx(chosen["BX"], chosen["VEC"], problem.shape[-1])
        if bx != chosen["BX"]:
            params["BX"] = bx
        params["ROW_SPLIT"] = column_splits(problem.shape, bx * chosen["VEC"])
        return params

    # -- coverage -----------------------------------------------------------------------------------
    def fit_config(self, params, problem, device, space) -> dict[str, Any]:
        """Along rows of at most SHORT_ROW elements, a form that reduces them a thread per row, and along rows
        longer than THREAD_ROW_MAX none (``short_rows_form``). Down columns: on rows narrower than the
        configuration's columns per block, as many threads across as they need (``narrowed_bx``), and a
        configuration of fewer threads across than a warp (tuned on narrow
        rows) as many as these rows need up to a warp, each with the row splits that fill a GPU with those
        blocks (``column_splits``; the configuration's own were fitted to another array). Threads across kept,
        the configuration's own row splits, unless they give less than half a wave of blocks, each of more than
        LONG_SPLIT_ROWS rows: then those (a form tuned unsplit on wide arrays would walk a tall one's columns in
        a few blocks, benchmarks/NOTES.md item 63; on small arrays the fastest forms are few blocks of a few
        hundred rows, so short ones keep theirs). Then at most as many row splits as leave each split
        MIN_SPLIT_ROWS rows (a split of 64 that served 16384 rows would give a 64-row matrix one row per block,
        each combined with an atomic). The rest as given."""
        given, params = params, dict(params)
        if problem.args["axis"] == 1:
            return short_rows_form(params, problem, space)
        if problem.args["axis"] not in (0, -2) or "BX" not in params:
            return params
        widest = max(params["BX"], WARP)  # a narrow form was tuned for narrow rows: these may need up to a warp
        bx = narrowed_bx(widest, params["VEC"], problem.shape[-1])
        split = params.get("ROW_SPLIT", 1)
        if bx != params["BX"] or (column_blocks(problem.shape, bx * params["VEC"]) * split < device.sm_count / 2
                                  and problem.shape[-2] // split > LONG_SPLIT_ROWS):
            params["BX"], params["ROW_SPLIT"] = bx, column_splits(problem.shape, bx * params["VEC"])
        if params.get("ROW_SPLIT", 1) > 1:
            rows = problem.shape[-2]
            split = params["ROW_SPLIT"]
            while split > 1 and rows // split < MIN_SPLIT_ROWS:
                split //= 2
            params["ROW_SPLIT"] = split
        if params == dict(given):
            return params
        checked = space.checked_or_none(params, dtype=problem.dtype, args=problem.args)
        return checked if checked is not None else dict(given)

    def shape_set(self, name, dtype, args) -> list[tuple[int, ...]]:
        from .coverage import shape_set

        return shape_set(name, dtype, args)

    def shape_set_rule(self) -> str:
        from .coverage import rule_text

        return rule_text()

    # -- optional -----------------------------------------------------------------------------------
    def peers(self, problem, inputs: Sequence) -> dict[str, Any]:
        op, axis = problem.args["op"], problem.args["axis"]
        found: dict[str, Any] = {}
        try:
            import cupy

            found.update(_cupy_calls(cupy, op, axis, [cupy.asarray(a) for a in inputs]))
        except ImportError:
            pass
        try:
            import torch

            found.update(_torch_calls(torch, op, axis, [torch.as_tensor(a, device="cuda") for a in inputs]))
        except ImportError:
            pass
        if axis is None and op in ("sum", "max", "min"):
            from numba import cuda

            fn = {"sum": lambda a, b: a + b, "max": lambda a, b: max(a, b), "min": lambda a, b: min(a, b)}[op]
            reducer = cuda.reduce(fn)
            flat = inputs[0].reshape(inputs[0].size)
            found["numba cuda.reduce"] = lambda: reducer(flat)
        return found

    def selftest_cases(self, small: bool):
        one_d = [(n,) for n in (1, 31, 32, 33, 1023, 1025, 4_000_037)]
        two_d = [(1, 1), (3, 1025), (33, 31), (130, 7), (1031, 2053), (4099, 3)]  # the last: rows of a few elements
        three_d = [(2, 3, 5), (3, 33, 31), (7, 130, 9), (5, 1031, 413)]
        return [(dtype, {"op": op, "axis": axis}, shapes)
                for dtype in self.dtypes[:1 if small else None] for op in OPS
                for axis, shapes in ((None, one_d[:5] if small else one_d), (0, two_d[:3] if small else two_d),
                                     (1, two_d[:3] if small else two_d), (-2, three_d[:2] if small else three_d))]

    def bench_name(self, problem) -> str:
        axis = problem.args["axis"]
        return f"reduce-{problem.args['op']}" + ("" if axis is None else f"-axis{axis}") + \
            ("" if problem.dtype == "float32" else f"-{problem.dtype}")


def _cupy_calls(cupy, op, axis, xs):
    if op == "dot":
        if axis is None:
            a, b = xs[0].ravel(), xs[1].ravel()
            return {"cupy.dot": lambda: cupy.dot(a, b), "cupy (a*b).sum": lambda: (xs[0] * xs[1]).sum()}
        return {"cupy (a*b).sum": lambda: (xs[0] * xs[1]).sum(axis=axis)}
    fn = getattr(cupy, op)
    return {f"cupy.{op}": lambda: fn(xs[0], axis=axis)}


def _torch_calls(torch, op, axis, ts):
    if op.startswith("nan"):
        return {}  # PyTorch has no NaN-skipping max or min
    if op == "dot":
        if axis is None:
            a, b = ts[0].ravel(), ts[1].ravel()
            return {"torch.dot": lambda: torch.dot(a, b)}
        return {"torch (a*b).sum": lambda: (ts[0] * ts[1]).sum(dim=axis)}
    if axis is None:
        fn = {"sum": torch.sum, "max": torch.max, "min": torch.min}[op]
        return {f"torch.{op}": lambda: fn(ts[0])}
    fn = {"sum": lambda t: t.sum(dim=axis), "max": lambda t: t.amax(dim=axis), "min": lambda t: t.amin(dim=axis)}[op]
    return {f"torch.{op}": lambda: fn(ts[0])}




family = ReduceFamily()


def short_rows_form(params: dict[str, Any], problem, space) -> dict[str, Any]:
    """Along rows of at most SHORT_ROW elements, a thread-per-row form: ``params`` if it is one, else the space's
    start of ROW_MODE thread (where the space has one valid here). Every other row mode gives a row 4 lanes or
    more, most of them idle on rows of a few elements, each loading a few bytes: such forms read at a few per cent
    of the memory's speed (benchmarks/NOTES.md item 65). Along rows longer than THREAD_ROW_MAX, a thread-per-row
    form (tuned on short rows) becomes the same with a warp per row: one thread walking a long row alone reads
    one element a step, its warp's loads a row length apart. Other rows and forms: ``params``."""
    n = problem.shape[-1]
    if n > THREAD_ROW_MAX and params.get("ROW_MODE") == "thread":
        warp = space.checked_or_none({**params, "ROW_MODE": "warp"}, dtype=problem.dtype, args=problem.args)
        return warp if warp is not None else params
    if n > SHORT_ROW or params.get("ROW_MODE") == "thread":
        return params
    for start in space.starts:
        if start.get("ROW_MODE") == "thread":
            form = space.checked_or_none(start, dtype=problem.dtype, args=problem.args)
            if form is not None:
                return form
    return params
