"""Reductions in the CUDA simulator against float64 NumPy: every op, axis and parameter value."""
from contextlib import nullcontext

import numpy as np
import pytest
from checks import assert_launched_as_signed, assert_reduction_close, poisoned, small_integers
from numba import cuda

from autotune import build_kernel
from autotune.core.space import load_space
from autotune.families.reduce.reference import reference

SIZES_1D = [1, 31, 32, 33, 1023, 1025]
SHAPES_2D = [(1, 1), (3, 1025), (33, 31), (70, 7)]
SHAPES_3D = [(2, 3, 5), (3, 7, 9), (2, 11, 33), (5, 1, 4)]  # (outer, R, inner), reduced along R by axis -2
OPS = ["sum", "max", "min", "dot"]


def operands(rng, shape, dtype, op):
    x = rng.standard_normal(shape).astype(dtype)
    y = rng.standard_normal(shape).astype(dtype) if op == "dot" else None
    return x, y


def check(kernel, rng, shape, dtype, op, axis):
    x, y = operands(rng, shape, dtype, op)
    out_shape = (1,) if axis is None else (shape[0], shape[2]) if axis == -2 else (shape[1 - axis],)
    out = poisoned(out_shape, dtype)
    args = (cuda.to_device(x),) + ((cuda.to_device(y),) if y is not None else ())
    kernel(*args, out=out)
    got = out.copy_to_host()
    ref = reference(op, x, y, axis)
    terms = np.abs(x.astype(np.float64) * (y if y is not None else 1))
    abs_sum = terms.sum(axis=axis)
    n = x.size if axis is None else shape[axis]  # axis -2: the middle extent of a 3-D shape
    assert_reduction_close(got[0] if axis is None else got, ref, abs_sum, n, dtype)


# In the simulator every GPU thread is a Python thread: keep the parameters not under test small.
CHEAP = {"BLOCK": (32, 64), "WAVES": (1, 2), "ROW_SPLIT": (1, 2), "ITEMS": (1, 2), "BX": (32,)}


def covering(op, axis, dtype):
    """Configurations using every value the tuner may offer for ``dtype`` (the space for that dtype)."""
    family = {"op": op, "axis": axis}
    sample, uncovered = load_space("reduce").for_dtype(dtype, family).covering_sample(dtype=dtype, args=family,
                                                                                     cheap=CHEAP)
    assert not uncovered
    return sample


def rotated(shapes, index, params):
    """The shape for the ``index``-th configuration: rotating, so that together they use every shape.

    The simulator runs a Python thread per GPU thread, and a configuration that launches thousands of them
    (512- or 1024-thread blocks, 16 or more row splits) over many rows or columns takes minutes: those get
    the shapes of at most 33 x 31 elements, and a 512- or 1024-thread block per row the shapes of at most 3 rows
    (each row is a block-wide combine, a round of barriers across all those threads). Every (op, shape) and every (op, parameter value) pair is still
    checked; the GPU selftest (autotune selftest) runs every configuration on every shape.
    """
    if params.get("ROW_MODE") == "block" and params.get("BLOCK", 0) >= 512:  # a block-wide combine per row
        shapes = [s for s in shapes if s[0] <= 3] or shapes
    elif params.get("BLOCK", 0) >= 512 or params.get("ROW_SPLIT", 0) >= 16:
        shapes = [s for s in shapes if np.prod(s) <= 33 * 31] or shapes
    return shapes[index % len(shapes)]


@pytest.mark.parametrize("op", OPS)
def test_whole_array_every_parameter_value(op, rng):
    configs = covering(op, None, "float32")
    for i, params in enumerate(configs):
        k = build_kernel("reduce", params, op=op)
        check(k, rng, rotated([(n,) for n in SIZES_1D], i, {}), "float32", op, None)


@pytest.mark.parametrize("axis", [0, 1, -2])
@pytest.mark.parametrize("ops", [("sum",), ("max", "min"), ("dot",)], ids=["sum", "max-min", "dot"])
def test_axis_every_parameter_value(ops, axis, rng):
    """Every parameter value along each axis, for each op. max and min are mirror images (the comparison and the
    identity reversed): they share one covering sample and take its configurations in turn, so each value is
    checked with one of the two (test_max_and_min_propagate_nan_in_every_strategy runs both in every combine and
    row mode)."""
    shapes = SHAPES_3D if axis == -2 else SHAPES_2D
    for i, params in enumerate(covering(ops[0], axis, "float32")):
        op = ops[i % len(ops)]
        k = build_kernel("reduce", params, op=op, axis=axis)
        check(k, rng, rotated(shapes, i, params), "float32", op, axis)


def test_axis_spellings_name_one_problem():
    """-1 is axis 1; -2 of a 2-D shape is axis 0; axis 1 of a 3-D shape is -2: one key, one database entry."""
    from autotune.core.problem import Problem

    assert Problem("reduce", (4, 5), "float32", {"axis": -1}).key == Problem("reduce", (4, 5), "float32", {"axis": 1}).key
    assert Problem("reduce", (4, 5), "float32", {"axis": -2}).args["axis"] == 0
    assert Problem("reduce", (3, 4, 5), "float32", {"axis": 1}).key == "reduce/float32/sum/axis-2/3x4x5"
    with pytest.raises(ValueError, match="3-D shape"):
        Problem("reduce", (4,), "float32", {"axis": -2})
    with pytest.raises(ValueError, match="2-D shape"):
        Problem("reduce", (3, 4, 5), "float32", {"axis": 0})


@pytest.mark.parametrize("axis", [None, 0, 1])
@pytest.mark.parametrize("op", OPS)
def test_float64(op, axis, rng):
    k = build_kernel("reduce", {"BLOCK": 64, "VEC": 2}, "float64", op=op, axis=axis)
    check(k, rng, (1025,) if axis is None else (33, 31), "float64", op, axis)


@pytest.mark.parametrize("combine, n", [("last_block", 2_000_003), ("atomic", 1_048_573), ("two_pass", 1_048_583),
                                         ("atomic_last", 1_048_571)])
def test_millions_of_elements_exactly(combine, n, rng):
    """Every element counted exactly once: integer data sums exactly in float32."""
    x = small_integers(rng, (n,), np.float32)
    k = build_kernel("reduce", {"BLOCK": 32, "ITEMS": 8, "VEC": 4, "WAVES": 1, "COMBINE": combine}, op="sum")
    assert k(x) == x.astype(np.float64).sum()


def test_last_block_combine_with_one_block_and_with_several(rng):
    """A grid of one block writes its value directly; grids of several still combine through the counter, which
    calls in either order leave ready for the next."""
    k = build_kernel("reduce", {"BLOCK": 32, "ITEMS": 2, "VEC": 1, "WAVES": 1, "COMBINE": "last_block"}, op="sum")
    for n in (64, 200, 64, 1, 200):  # 64 = one block's chunk; 200 needs several blocks
        x = small_integers(rng, (n,), np.float32)
        assert k(x) == x.astype(np.float64).sum()


def test_integer_data_exact_along_axes(rng):
    x = small_integers(rng, (67, 259), np.float32)
    for axis, params in ((0, {"BLOCK": 64, "VEC": 4, "BX": 32, "ROW_SPLIT": 4}), (1, {"BLOCK": 64, "VEC": 4})):
        k = build_kernel("reduce", params, op="sum", axis=axis)
        np.testing.assert_array_equal(k(x), x.astype(np.float64).sum(axis=axis))


@pytest.mark.parametrize("combine", ["last_block", "atomic_last"])
def test_repeated_calls_reuse_the_counter_and_accumulator(combine, rng):
    """The last block resets the counter (and with the atomic COMBINE the accumulator) for the next call: each
    later call's maximum is smaller than the one before, so a total not reset to the identity would show."""
    k = build_kernel("reduce", {"BLOCK": 32, "COMBINE": combine, "WAVES": 2}, op="max")
    for shift in (30.0, 20.0, 10.0, 0.0):
        x = rng.standard_normal(5000).astype(np.float32) + np.float32(shift)
        assert k(x) == x.max()


@pytest.mark.parametrize("axis, params", [(None, {"BLOCK": 32, "COMBINE": "atomic", "WAVES": 2}),
                                          (None, {"BLOCK": 32, "COMBINE": "atomic_last", "WAVES": 2}),
                                          (0, {"BLOCK": 64, "BX": 32, "ROW_SPLIT": 4, "VEC": 2})])
def test_a_staged_workspace_holds_only_the_calls_own_sum(axis, params, rng):
    """float16 sums combined with atomics add into a float32 workspace kept between calls (atomic_last: its
    accumulator): repeated calls, and replays of a bound plan, each give that call's sum alone, never one added
    to an earlier call's."""
    from numba import cuda

    k = build_kernel("reduce", params, "float16", op="sum", axis=axis)
    shape = (300,) if axis is None else (37, 10)
    for _ in range(3):
        x = rng.integers(-8, 9, size=shape).astype(np.float16)
        np.testing.assert_array_equal(np.asarray(k(x), np.float64), np.sum(x.astype(np.float64), axis=axis))
    x = rng.integers(-8, 9, size=shape).astype(np.float16)
    want = np.sum(x.astype(np.float64), axis=axis)
    out = cuda.to_device(np.full(np.shape(want) or (1,), np.nan, np.float16))
    plan = k.bind(cuda.to_device(x), out=out)
    for _ in range(3):
        plan()
        np.testing.assert_array_equal(out.copy_to_host().astype(np.float64).reshape(np.shape(want)), want)


def test_unaligned_input_takes_the_scalar_path(rng):
    x = rng.standard_normal(1001).astype(np.float32)
    d = cuda.to_device(x)[1:]
    k = build_kernel("reduce", {"BLOCK": 32, "VEC": 4, "WAVES": 1}, op="sum")
    got = k(d).copy_to_host()[0]
    assert_reduction_close(got, x[1:].astype(np.float64).sum(), np.abs(x[1:]).sum(), 1000, np.float32)


def test_zero_size():
    assert build_kernel("reduce", {}, op="sum")(np.zeros(0, np.float32)) == 0
    np.testing.assert_array_equal(build_kernel("reduce", {}, op="sum", axis=0)(np.zeros((0, 3), np.float32)),
                                  np.zeros(3))
    with pytest.raises(ValueError, match="zero-size array to reduction operation max"):
        build_kernel("reduce", {}, op="max")(np.zeros(0, np.float32))


def test_input_errors():
    k = build_kernel("reduce", {}, op="sum", axis=1)
    with pytest.raises(ValueError, match="axis=1 needs a 2-D array"):
        k(np.ones(4, np.float32))
    with pytest.raises(ValueError, match="built for axis=1"):
        k(np.ones((2, 2), np.float32), axis=0)
    with pytest.raises(ValueError, match="must be C-contiguous"):
        k(np.ones((4, 4), np.float32).T)
    with pytest.raises(TypeError, match="dot takes two arrays"):
        build_kernel("reduce", {}, op="dot")(np.ones(3, np.float32))
    with pytest.raises(ValueError, match="differ in shape"):
        build_kernel("reduce", {}, op="dot")(np.ones(3, np.float32), np.ones(4, np.float32))
    with pytest.raises(TypeError, match="built for float32"):
        build_kernel("reduce", {}, op="sum")(np.ones(3, np.float64))


# NumPy's max and min propagate NaN: every way a variant combines values (lanes, block, blocks) must keep one.
NAN_STRATEGIES = [
    (None, {"BLOCK": 32, "ITEMS": 2, "VEC": 1, "WAVES": 2, "BLOCK_REDUCE": br, "COMBINE": combine})
    for br in ("shuffle", "tree", "serial") for combine in ("last_block", "atomic", "two_pass", "atomic_last")
] + [(1, {"BLOCK": 64, "ITEMS": 2, "ROW_MODE": "warp", "BLOCK_REDUCE": "shuffle"}),
     (1, {"BLOCK": 64, "ITEMS": 2, "VEC": 1, "ROW_MODE": "lanes8"}),
     (1, {"BLOCK": 32, "ITEMS": 1, "VEC": 2, "ROW_MODE": "lanes4"}),
     (1, {"BLOCK": 32, "ITEMS": 2, "VEC": 1, "ROW_MODE": "thread"}),
     (1, {"BLOCK": 32, "ITEMS": 1, "ROW_MODE": "block", "BLOCK_REDUCE": "tree"}),
     (1, {"BLOCK": 32, "ITEMS": 1, "ROW_MODE": "block", "BLOCK_REDUCE": "serial"}),
     (0, {"BLOCK": 64, "BX": 32, "ROW_SPLIT": 1, "VEC": 2}),
     (0, {"BLOCK": 64, "BX": 32, "ROW_SPLIT": 4, "VEC": 1})]


@pytest.mark.parametrize("axis, params", NAN_STRATEGIES)
@pytest.mark.parametrize("op", ["max", "min"])
def test_max_and_min_propagate_nan_in_every_strategy(op, axis, params, rng):
    k = build_kernel("reduce", params, op=op, axis=axis)
    if axis is None:
        for where in (0, 999, int(rng.integers(1000))):  # first, last and anywhere
            x = rng.standard_normal(1000).astype(np.float32)
            x[where] = np.nan
            assert np.isnan(k(x)), where
        x = rng.standard_normal(1000).astype(np.float32)
        x[rng.choice(1000, 2, replace=False)] = (np.inf, -np.inf)
        assert k(x) == getattr(np, op)(x)
        return
    x = rng.standard_normal((37, 29)).astype(np.float32)
    lines = np.moveaxis(x, axis, -1)  # a view: the lines reduced along
    lines[::3, rng.integers(lines.shape[1])] = np.nan
    lines[1::3, rng.integers(lines.shape[1])] = np.inf
    lines[2::3, rng.integers(lines.shape[1])] = -np.inf
    np.testing.assert_array_equal(k(x), getattr(np, op)(x, axis=axis))  # NaN where NumPy has NaN


@pytest.mark.parametrize("dtype, vec", [("float32", 2), ("float32", 4), ("float16", 8)])
@pytest.mark.parametrize("axis, shape", [(0, (77, 40)), (-2, (3, 77, 40))])
def test_down_columns_with_vectors_and_items_in_flight(dtype, vec, axis, shape, rng):
    """Down columns with whole vectors (the row length a multiple of VEC) and ITEMS rows in flight: rows that
    leave a remainder after the last whole group of ITEMS, columns that leave the last threads of the column range
    outside, one and two row splits; sums of integer data exact, max exact with a NaN planted in one column."""
    from autotune.core.dtypes import numpy_dtype

    reduced = 0 if axis == 0 else 1
    for split in (1, 2):
        params = {"BLOCK": 64, "BX": 32, "VEC": vec, "ITEMS": 4, "ROW_SPLIT": split}
        for op in ("sum", "max"):
            k = build_kernel("reduce", params, dtype, op=op, axis=axis)
            x = rng.integers(-50, 51, size=shape).astype(numpy_dtype(dtype))
            if op == "max":
                column, row = int(rng.integers(1, shape[-1])), int(rng.integers(shape[reduced]))
                np.moveaxis(x, reduced, -1)[..., column, row] = np.nan
            expected = getattr(np, op)(x.astype(np.float64), axis=reduced)
            out = cuda.to_device(np.full(expected.shape, np.nan, x.dtype))
            k(cuda.to_device(x), out=out)
            np.testing.assert_array_equal(out.copy_to_host(), expected.astype(x.dtype), err_msg=f"{op} {params}")


@pytest.mark.parametrize("mode", ["lanes16", "lanes8", "lanes4", "thread"])
def test_rows_shared_by_lanes_of_a_warp_match_numpy_on_odd_shapes(mode, rng):
    """A few lanes or one thread per row (short rows): rows shorter than one lane's vector, longer than a whole
    pass of the group, a row count that leaves the last warp and the last block partly idle (and, a thread per row,
    that fills whole passes of BLOCK * ITEMS rows), one row, no columns; sums of fresh random data against float64
    NumPy, the output poisoned with NaN first."""
    from numba import cuda

    for shape in [(37, 13), (1, 1), (3, 0), (70, 256), (129, 97), (256, 2), (300, 4)]:
        for vec, items in [(1, 1), (4, 2), (2, 4)]:
            k = build_kernel("reduce", {"BLOCK": 64, "ITEMS": items, "VEC": vec, "ROW_MODE": mode, "WAVES": 1},
                             op="sum", axis=1)
            x = rng.standard_normal(shape).astype(np.float32)
            out = cuda.to_device(np.full(shape[0], np.nan, np.float32))
            k(cuda.to_device(x), out=out)
            np.testing.assert_allclose(out.copy_to_host(), x.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-4,
                                       err_msg=f"{mode} {shape} VEC={vec} ITEMS={items}")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_nan_is_kept_by_the_atomic_combine_in_float64_too(dtype, rng):
    x = rng.standard_normal(3000).astype(dtype)
    x[1234] = np.nan
    for op in ("max", "min"):
        for combine in ("atomic", "atomic_last"):
            k = build_kernel("reduce", {"BLOCK": 32, "VEC": 1, "WAVES": 4, "COMBINE": combine}, dtype, op=op)
            assert np.isnan(k(x)), combine


def test_the_tuners_check_fails_a_variant_that_drops_nan(rng, monkeypatch):
    """The verification data of max/min hold NaN and infinities: a kernel returning the largest non-NaN value
    (what every variant did before) is a failed trial."""
    from autotune.core.problem import Problem
    from autotune.tuning.instance import Instance

    class DropsNan:
        def __call__(self, x, out):
            host = x.copy_to_host()
            out.copy_to_device(np.atleast_1d(np.nanmax(host, axis=None)).astype(np.float32))

    inst = Instance(Problem("reduce", (1000,), "float32", {"op": "max"}), rng)
    assert "data with NaN" in inst.check(DropsNan())
    assert inst.check(build_kernel("reduce", {"BLOCK": 32, "WAVES": 2}, op="max")) is None


@pytest.mark.parametrize("shape, axis, result_shape", [((0, 3), 1, (0,)), ((0, 0), 1, None), ((0, 3), 0, None),
                                                       ((3, 0), 1, None), ((3, 0), 0, (0,)), ((0,), None, None)])
def test_empty_reductions_follow_numpy(shape, axis, result_shape):
    """max over an empty result is an empty array; over an empty reduced extent it raises, as in NumPy."""
    k = build_kernel("reduce", {}, op="max", axis=axis)
    x = np.zeros(shape, np.float32)
    if result_shape is None:
        with pytest.raises(ValueError, match="zero-size array to reduction operation max"):
            k(x)
        with pytest.raises(ValueError):
            np.max(x, axis=axis)
    else:
        assert k(x).shape == result_shape == np.max(x, axis=axis).shape


@pytest.mark.parametrize("axis, params", [(None, {"BLOCK": 32, "COMBINE": "atomic", "WAVES": 2}),
                                          (0, {"BLOCK": 32, "BX": 32, "VEC": 1, "ROW_SPLIT": 4}),
                                          (1, {"BLOCK": 64, "VEC": 1})])
def test_out_overlapping_the_input_gives_numpys_result(axis, params, rng):
    """out= sharing bytes with x (not the same pointer: a slice of it) is computed into scratch first; the atomic
    combine and ROW_SPLIT zero out before x is read."""
    x = small_integers(rng, (64, 33), np.float32)
    d = cuda.to_device(x)
    n = 1 if axis is None else x.shape[1 - axis]
    out = d.reshape(x.size)[5:5 + n]
    k = build_kernel("reduce", params, op="sum", axis=axis)
    k(d, out=out)
    np.testing.assert_array_equal(out.copy_to_host(), np.atleast_1d(x.astype(np.float64).sum(axis=axis)))
    plan = k.bind(d, out=out)  # and replayed: the copy from scratch is part of the plan
    d.copy_to_device(x)
    plan()
    np.testing.assert_array_equal(out.copy_to_host(), np.atleast_1d(x.astype(np.float64).sum(axis=axis)))


@pytest.mark.parametrize("axis", [None, 0, 1])
@pytest.mark.parametrize("op", ["max", "min"])
def test_the_tuners_check_of_max_and_min_leaves_its_data_alone(op, axis, rng):
    """Planting infinities and NaNs for the extra check cases works on copies: the main case keeps the data its
    reference was computed from, so a right kernel passes every case (on every axis)."""
    from autotune.core.problem import Problem
    from autotune.tuning.instance import Instance

    shape = (1000,) if axis is None else (37, 29)
    problem = Problem("reduce", shape, "float32", {"op": op, "axis": axis})
    inst = Instance(problem, rng)
    main = inst.cases[0][0]
    assert not np.isnan(main.inputs[0]).any() and not np.isinf(main.inputs[0]).any()
    np.testing.assert_array_equal(main.expected, np.atleast_1d(reference(op, main.inputs[0], axis=axis)))
    assert [case.what for case, _ in inst.cases[1:]][-1] == "elements (data with NaN)"
    assert inst.check(build_kernel("reduce", {"BLOCK": 64, "VEC": 1}, op=op, axis=axis)) is None


@pytest.mark.parametrize("axis, params", NAN_STRATEGIES)
@pytest.mark.parametrize("op", ["nanmax", "nanmin"])
def test_nanmax_and_nanmin_skip_nan_in_every_strategy(op, axis, params, rng):
    """As np.nanmax and np.nanmin: NaN ignored, and NaN only where everything reduced was NaN."""
    k = build_kernel("reduce", params, op=op, axis=axis)
    shape = (1000,) if axis is None else (37, 29)
    x = rng.standard_normal(shape).astype(np.float32)
    x.flat[rng.choice(x.size, x.size // 3, replace=False)] = np.nan
    if axis is not None:
        np.moveaxis(x, axis, -1)[4] = np.nan  # one line of NaN only
    with np.errstate(invalid="ignore"), pytest.warns(RuntimeWarning) if axis is not None else nullcontext():
        expected = getattr(np, op)(x, axis=axis)
    np.testing.assert_array_equal(np.atleast_1d(k(x)), np.atleast_1d(expected))
    with pytest.raises(ValueError, match="zero-size array"):
        k(np.zeros((0,) if axis is None else (0, 0), np.float32))


# Each way a variant combines (atomics, last block, second pass; rows by warp or block; columns split or not) for
# the dtypes whose accumulator or result differs from the input's.
WIDENING_STRATEGIES = [
    ((523,), None, {"BLOCK": 32, "ITEMS": 2, "VEC": 2, "WAVES": 2, "BLOCK_REDUCE": "shuffle", "COMBINE": "atomic"}),
    ((523,), None, {"BLOCK": 32, "ITEMS": 1, "VEC": 2, "WAVES": 2, "BLOCK_REDUCE": "shuffle",
                    "COMBINE": "atomic_last"}),
    ((523,), None, {"BLOCK": 64, "ITEMS": 1, "VEC": 1, "WAVES": 2, "BLOCK_REDUCE": "tree", "COMBINE": "last_block"}),
    ((523,), None, {"BLOCK": 32, "ITEMS": 1, "VEC": 1, "WAVES": 1, "BLOCK_REDUCE": "serial", "COMBINE": "two_pass"}),
    ((5, 66), 1, {"BLOCK": 64, "ITEMS": 2, "VEC": 2, "ROW_MODE": "warp", "BLOCK_REDUCE": "shuffle"}),
    ((11, 66), 1, {"BLOCK": 32, "ITEMS": 2, "VEC": 2, "ROW_MODE": "lanes16"}),
    ((5, 66), 1, {"BLOCK": 32, "ITEMS": 1, "VEC": 1, "ROW_MODE": "block", "BLOCK_REDUCE": "tree"}),
    ((37, 6), 0, {"BLOCK": 64, "BX": 32, "ITEMS": 2, "ROW_SPLIT": 1, "VEC": 2}),
    ((37, 6), 0, {"BLOCK": 64, "BX": 32, "ITEMS": 1, "ROW_SPLIT": 4, "VEC": 1}),
    ((3, 19, 6), -2, {"BLOCK": 64, "BX": 32, "ITEMS": 1, "ROW_SPLIT": 2, "VEC": 2}),
]


@pytest.mark.filterwarnings("ignore:overflow encountered")  # the simulator's int64 scalars wrap, as the GPU's do
@pytest.mark.parametrize("shape, axis, params", WIDENING_STRATEGIES, ids=lambda v: str(v).replace(" ", ""))
@pytest.mark.parametrize("dtype", ["int32", "int64", "float16", "bfloat16"])
def test_narrow_and_integer_dtypes_in_every_combine(dtype, shape, axis, params, rng):
    """The tuner's own check (poisoned output, exact reference in the result's dtype, extremes planted for max
    and min) passes for each op; an int32 sum's result is int64, a float16 (bfloat16) one's float16 (bfloat16),
    and a 16-bit float variant that combines with atomics does so in a float32 workspace."""
    check_widening(dtype, shape, axis, params, rng, ("sum", "dot", "max", "nanmin"))


# 16-byte loads of 2-byte dtypes, with shapes whose ends (and, down columns, whose column counts) leave elements to
# the scalar path as well.
VEC8_STRATEGIES = [
    ((1031,), None, {"BLOCK": 32, "ITEMS": 2, "VEC": 8, "WAVES": 2, "BLOCK_REDUCE": "shuffle",
                     "COMBINE": "last_block"}),
    ((3, 520), 1, {"BLOCK": 32, "ITEMS": 1, "VEC": 8, "ROW_MODE": "warp", "BLOCK_REDUCE": "shuffle"}),
    ((37, 72), 0, {"BLOCK": 64, "BX": 32, "ITEMS": 1, "ROW_SPLIT": 2, "VEC": 8}),
    ((37, 70), 0, {"BLOCK": 64, "BX": 32, "ITEMS": 2, "ROW_SPLIT": 1, "VEC": 8}),
    ((3, 19, 40), -2, {"BLOCK": 64, "BX": 32, "ITEMS": 1, "ROW_SPLIT": 1, "VEC": 8}),
]


@pytest.mark.parametrize("shape, axis, params", VEC8_STRATEGIES, ids=lambda v: str(v).replace(" ", ""))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_two_byte_dtypes_with_sixteen_byte_loads(dtype, shape, axis, params, rng):
    check_widening(dtype, shape, axis, params, rng, ("sum", "max"))


def check_widening(dtype, shape, axis, params, rng, ops):
    from autotune.core.problem import Problem
    from autotune.families.reduce.config import staged
    from autotune.tuning.instance import Instance

    for op in ops:
        problem = Problem("reduce", shape, dtype, {"op": op, "axis": axis})
        kernel = build_kernel("reduce", params, dtype, op=op, axis=axis)
        assert problem.out_dtype == ("int64" if (dtype, op) == ("int32", "sum") else dtype)
        atomics = params.get("COMBINE") == "atomic" or params.get("ROW_SPLIT", 1) > 1  # into the output
        assert kernel.staged == (dtype in ("float16", "bfloat16") and atomics)
        assert staged(params, dtype, problem.args) == kernel.staged
        assert Instance(problem, rng).check(kernel) is None, (op, params)


def test_default_column_splits_fill_the_gpu_and_keep_rows_per_split():
    """Untuned column reductions split rows until about 1024 blocks, never below 64 rows per split, at most 1024;
    on narrow rows with as few threads across as the columns need."""
    from autotune.core.problem import Problem
    from autotune.core.registry import family
    from autotune.families.reduce.config import column_splits

    assert column_splits((8192, 8192), 256) == 32            # 32 column blocks x 32
    assert column_splits((65536, 256), 256) == 1024          # one column block: the most splits, 64 rows each
    assert column_splits((32768, 256), 256) == 512           # 64 rows each
    assert column_splits((59958656, 2), 2) == 1024           # one column block of a tall, narrow array
    assert column_splits((256, 65536), 256) == 4             # 256 rows: 64 each
    assert column_splits((37, 6), 256) == 1
    assert column_splits((64, 1024, 1024), 256) == 4         # axis -2: 64 x 1024 columns
    params = family("reduce").default_params(Problem("reduce", (8192, 8192), "int64", {"op": "sum", "axis": 0}))
    assert params == {"VEC": 2, "ROW_SPLIT": 16}             # 8-byte elements: half the columns per block
    params = family("reduce").default_params(Problem("reduce", (1 << 20, 3), "float32", {"op": "sum", "axis": 0}))
    assert params == {"BX": 1, "ROW_SPLIT": 1024}            # one thread across 4 columns (3 used) per row


# Fewer threads across than a warp (a warp reading several rows of a narrow array), on rows of a prime count and
# columns that leave a vector's lanes past the end, with row splits.
NARROW = [((131, 1), 0, {"BX": 1, "VEC": 1, "ROW_SPLIT": 4}), ((97, 3), 0, {"BX": 1, "VEC": 4, "ROW_SPLIT": 1}),
          ((97, 3), 0, {"BX": 2, "VEC": 2, "ROW_SPLIT": 16}), ((37, 5), 0, {"BX": 4, "VEC": 1, "ROW_SPLIT": 2}),
          ((3, 41, 3), -2, {"BX": 1, "VEC": 1, "ROW_SPLIT": 8}), ((2, 29, 6), -2, {"BX": 2, "VEC": 2, "ROW_SPLIT": 2}),
          ((2, 29, 6), -2, {"BX": 16, "VEC": 2, "ROW_SPLIT": 1})]


@pytest.mark.parametrize("shape, axis, params", NARROW, ids=lambda v: str(v).replace(" ", ""))
@pytest.mark.parametrize("op", OPS)
def test_narrow_column_blocks_give_numpys_result(op, shape, axis, params, rng):
    k = build_kernel("reduce", {"BLOCK": 32, "ITEMS": 2, **params}, op=op, axis=axis)
    check(k, rng, shape, "float32", op, axis)


def test_narrowed_threads_across_span_the_columns_in_a_power_of_two():
    from autotune.families.reduce.config import narrowed_bx

    assert [narrowed_bx(64, 2, n) for n in (1, 2, 3, 4, 5, 8, 9, 127, 128, 129, 1000)] == \
        [1, 1, 2, 2, 4, 4, 8, 64, 64, 64, 64]
    assert narrowed_bx(32, 4, 0) == 1 and narrowed_bx(1, 1, 1000) == 1


@pytest.mark.parametrize("axis", [0, -2])
def test_a_choice_for_a_narrow_array_takes_threads_across_and_row_splits_fitted_to_it(axis):
    """A configuration tuned on a wide array, chosen for a tall narrow one, gets as few threads across as the
    rows need and the row splits that fill a GPU with those blocks; so does one whose splits give less than half a
    wave of blocks walking long rows. On a wide array it stays as given."""
    from autotune.core.device import DeviceInfo
    from autotune.core.problem import Problem

    space, device = load_space("reduce"), DeviceInfo.from_record({"name": "x", "cc": "9.0", "sm_count": 132})
    args = {"op": "sum", "axis": axis}
    wide = space.validate({"BLOCK": 512, "ITEMS": 8, "VEC": 2, "ROW_SPLIT": 64, "BX": 32}, dtype="float32",
                          args=args)
    lead = (3,) if axis == -2 else ()

    def fitted(shape):
        problem = Problem("reduce", lead + shape, "float32", args)
        form = problem.impl.fit_config(wide, problem, device, space)
        assert space.validate(form, dtype="float32", args=args) == form
        return form

    most = 1024 if axis == 0 else 512  # one column block, or one for each of 3 matrices: 3 x 512 fill 1024
    assert fitted((59958656, 2)) == {**wide, "BX": 1, "ROW_SPLIT": most}
    assert fitted((6206720, 4)) == {**wide, "BX": 2, "ROW_SPLIT": most}
    assert fitted((3887488, 31)) == {**wide, "BX": 16, "ROW_SPLIT": most}
    assert fitted((300, 3)) == {**wide, "BX": 2, "ROW_SPLIT": 4}  # more splits would leave fewer than 64 rows
    assert fitted((65536, 4096)) == wide and fitted((100, 4096)) == {**wide, "ROW_SPLIT": 8}  # 8 rows a split
    # one column block of 64 splits: 64 blocks of 4096 rows, less than half a wave, given splits that fill the GPU
    # (3 matrices: 192 blocks, as given)
    assert fitted((262144, 64)) == ({**wide, "ROW_SPLIT": 1024} if axis == 0 else wide)
    unsplit = space.validate({**wide, "ROW_SPLIT": 1}, dtype="float32", args=args)  # tuned on a wide array
    problem = Problem("reduce", lead + (509504, 416), "float32", args)  # 7 blocks of 509504 rows each
    assert problem.impl.fit_config(unsplit, problem, device, space)["ROW_SPLIT"] == (256 if axis == 0 else 64)
    for shape in ((512, 512), (16384, 16384)):  # few blocks of few rows; most of a wave: as given
        problem = Problem("reduce", lead + shape, "float32", args)
        assert problem.impl.fit_config(unsplit, problem, device, space) == unsplit
    narrow = space.validate({**wide, "BX": 1, "ROW_SPLIT": 1024}, dtype="float32", args=args)  # tuned on 2 columns
    for shape, bx in (((100000, 4096), 32), ((100000, 5), 4), ((100000, 2), 1)):
        problem = Problem("reduce", lead + shape, "float32", args)
        back = problem.impl.fit_config(narrow, problem, device, space)
        assert back["BX"] == bx and back["ROW_SPLIT"] <= 1024 and 100000 // back["ROW_SPLIT"] >= 64


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_a_choice_along_short_rows_reduces_a_thread_per_row_and_matches_numpy(dtype, rng):
    """Along rows of at most SHORT_ROW elements any chosen form (a rule's, a nearby entry's, the default) becomes
    the space's thread-per-row start; longer rows and a tuned thread form keep theirs, except that along rows
    longer than THREAD_ROW_MAX a thread form gets a warp per row. The fitted forms run on fresh random data
    against float64 NumPy, the output poisoned with NaN first."""
    from numba import cuda

    from autotune.core.device import DeviceInfo
    from autotune.core.problem import Problem
    from autotune.families.reduce.family import SHORT_ROW, THREAD_ROW_MAX

    space, device = load_space("reduce"), DeviceInfo.from_record({"name": "x", "cc": "9.0", "sm_count": 132})
    args = {"op": "sum", "axis": 1}
    lanes = space.validate({"BLOCK": 256, "ITEMS": 8, "VEC": 2, "WAVES": 16, "ROW_MODE": "lanes16"}, dtype=dtype,
                           args=args)
    tuned = space.validate({"BLOCK": 512, "ITEMS": 2, "VEC": 1, "ROW_MODE": "thread"}, dtype=dtype, args=args)
    start = [s for s in space.starts if s.get("ROW_MODE") == "thread"]
    assert len(start) == 1
    for n in (1, 2, 3, SHORT_ROW, SHORT_ROW + 1, THREAD_ROW_MAX, THREAD_ROW_MAX + 1, 300):
        problem = Problem("reduce", (1001, n), dtype, args)
        form = problem.impl.fit_config(lanes, problem, device, space)
        default = space.validate(problem.impl.default_params(problem), dtype=dtype, args=args)
        if n <= SHORT_ROW:
            assert form == default == space.validate(start[0], dtype=dtype, args=args)
        else:
            assert form == lanes and default["ROW_MODE"] == "warp"
        kept = problem.impl.fit_config(tuned, problem, device, space)
        assert kept == (tuned if n <= THREAD_ROW_MAX else {**tuned, "ROW_MODE": "warp"})
        for params in (form, kept):
            k = build_kernel("reduce", params, dtype, op="sum", axis=1)
            x = rng.standard_normal((1001, n)).astype(dtype)
            out = cuda.to_device(np.full(1001, np.nan, dtype))
            k(cuda.to_device(x), out=out)
            np.testing.assert_allclose(out.copy_to_host().astype(np.float64), x.astype(np.float64).sum(axis=1),
                                       rtol=2e-3 if dtype == "float16" else 1e-5, atol=5e-3 if dtype == "float16"
                                       else 1e-5, err_msg=f"{dtype} n={n} {params}")


def test_bfloat16_conversions_of_the_simulator_are_round_to_nearest_even(rng):
    """The simulator's stand-ins of bf16_to_f32 and f32_to_bf16 (cvt.rn.bf16.f32 on the GPU) against ml_dtypes:
    every bfloat16 pattern widens exactly, and float32 values round to nearest, ties to even (exact ties both
    ways), overflowing to infinity, NaN staying NaN, the sign of zero kept."""
    import ml_dtypes

    module = build_kernel("reduce", {}, "bfloat16", op="sum").module
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)[::97]
    widened = np.array([module.bf16_to_f32(b) for b in bits], dtype=np.float32)
    np.testing.assert_array_equal(widened, bits.view(ml_dtypes.bfloat16).astype(np.float32))
    ties = (np.arange(0x3F80, 0x3F90, dtype=np.uint32) << 16 | 0x8000).view(np.float32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 3.4e38, -3.4e38, 1e-40, -1e-45], np.float32)
    values = np.concatenate([rng.standard_normal(2000).astype(np.float32) * 10.0 ** rng.integers(-30, 30, 2000),
                             ties, special]).astype(np.float32)
    got = np.array([module.f32_to_bf16(v) for v in values], dtype=np.uint16)
    want = values.astype(ml_dtypes.bfloat16)
    nan = np.isnan(values)
    np.testing.assert_array_equal(got[~nan], want[~nan].view(np.uint16))
    assert np.isnan(got[nan].view(ml_dtypes.bfloat16).astype(np.float32)).all()


@pytest.mark.parametrize("op, dtype, n, step", [("sum", "float32", 1, "memset"), ("dot", "float64", 1, "memset"),
                                                ("sum", "int64", 3, "memset"), ("max", "float32", 1, "fill"),
                                                ("min", "int32", 1, "fill"), ("sum", "float16", 1, "fill")])
def test_atomic_combines_start_from_a_memset_only_where_the_identity_is_zero_bits(op, dtype, n, step, monkeypatch):
    """On a GPU a sum's output is zeroed by a driver memset (no kernel launch), a max's or min's filled with its
    identity by the fill kernel; a memset writes whole 32-bit words, so an output of 2 bytes is filled."""
    from autotune.families.reduce import kernel as reduce_kernel

    k = build_kernel("reduce", {"COMBINE": "atomic", "VEC": 2}, dtype, op=op)
    k.simulator = False
    monkeypatch.setattr(reduce_kernel, "zero", lambda module, d, simulator, stream: ("memset", d.size))
    monkeypatch.setattr(reduce_kernel, "fill", lambda module, d, value, simulator, stream: ("fill", value))
    got = k._identity_step(cuda.device_array(n, dtype=dtype), 0)
    assert got[0] == step
    if step == "fill":
        want = reduce_kernel.identity(op, k.acc_dtype)
        assert got[1] == want and (op == "sum" or got[1] != 0)


@pytest.mark.parametrize("dtype, axis, params, op, names", [
    ("float32", None, {"COMBINE": "atomic"}, "max", ["fill"]),
    ("float32", None, {"COMBINE": "atomic"}, "sum", []),  # zeroed by a driver memset on the GPU
    ("float32", None, {"COMBINE": "atomic_last"}, "max", []),  # one launch: the last block stores the total
    ("bfloat16", None, {"COMBINE": "atomic_last"}, "sum", []),
    ("float64", None, {"COMBINE": "two_pass", "VEC": 2}, "min", ["finish"]),
    ("bfloat16", None, {"COMBINE": "two_pass"}, "sum", ["finish"]),
    ("float16", 0, {"ROW_SPLIT": 4}, "sum", ["store"]),
    ("bfloat16", 0, {"ROW_SPLIT": 4}, "max", ["fill", "store"]),
    ("int32", 1, {}, "sum", []),
])
def test_helper_kernels_are_those_a_call_launches_with_their_signatures(dtype, axis, params, op, names, monkeypatch):
    """``helper_kernels`` (compiled ahead with the variant by ``autotune warm`` and the tuner) names the module's
    kernels a call launches besides its own, each with the argument types it is launched with: a wrong or missing
    signature would leave a compile to the first call. In the simulator a sum's identity is a fill of 0 (a memset
    on the GPU), not counted."""
    import autotune.families.reduce.kernel as reduce_kernel
    import autotune.runtime.launch as launch
    from autotune.core.dtypes import numpy_dtype

    k = build_kernel("reduce", params, dtype, op=op, axis=axis)
    assert [helper.__name__ for helper, _ in k.helper_kernels()] == names
    for module in (launch, reduce_kernel):
        monkeypatch.setattr(module, "configure", lambda kernel, *a, **kw: kernel)
    launched = []
    monkeypatch.setattr(k, "_enqueue", lambda kernel, *args: launched.append((kernel, args)))  # k is cached
    shape = (1237,) if axis is None else (37, 41)  # a shape no other test builds launches for
    x = cuda.to_device(np.ones(shape, numpy_dtype(dtype)))
    k(x) if axis is None else k(x, axis=axis)
    helpers = [(kernel, args) for kernel, args in launched if kernel is not k.entry
               and not (kernel is k.module.fill and args[1] == 0)]
    assert [kernel.__name__ for kernel, _ in helpers] == names
    for (helper, signature), (kernel, args) in zip(k.helper_kernels(), helpers):
        assert kernel is helper
        assert_launched_as_signed(args, signature, helper.__name__)
