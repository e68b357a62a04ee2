"""autotune.sum/max/min/nanmax/nanmin/dot/matmul against NumPy in the CUDA simulator: 1-D to 4-D arrays,
every axis (negative, tuples), keepdims, transposed views, stacks of matrices, NaN-poisoned outputs, the empty
and refused cases, and streams."""
import warnings
from dataclasses import replace

import numpy as np
import pytest
from checks import assert_matmul_close, poisoned, small_integers
from numba import cuda

import autotune
from autotune.families.reduce import functions as reduce_functions
from autotune.runtime import arrays, calls, streams
from autotune.runtime.launch import Memset, PackedLaunch, Plan

OPS = {"sum": np.sum, "max": np.max, "min": np.min, "nanmax": np.nanmax, "nanmin": np.nanmin}
SHAPES = [(7,), (3, 5), (2, 3, 5), (2, 1, 3, 4)]


@pytest.fixture(autouse=True)
def empty_database(tmp_path, monkeypatch):
    """No tuned entries: every shape takes the family's default (the fallback announced by a warning)."""
    monkeypatch.setenv("AUTOTUNE_DB", str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", autotune.TunedKernelWarning)
        yield


def axes_of(ndim):
    """Every single axis (positive and negative), the adjacent pairs, all axes, and no axis."""
    single = [a for a in range(ndim)] + [-1]
    pairs = [(a, a + 1) for a in range(ndim - 1)]
    return [None, *single, *pairs, tuple(range(ndim)), ()]


def data(rng, shape, op, dtype):
    """Integers for sums (exact in float32), normal data with a NaN planted for max and min."""
    if op == "sum":
        return small_integers(rng, shape, dtype)
    x = rng.standard_normal(shape).astype(dtype)
    if x.size > 2:
        x.flat[rng.integers(x.size)] = np.nan
    return x


def expected(op, x, axis, keepdims):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return OPS[op](x.astype(np.float64), axis=axis, keepdims=keepdims)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_reductions_match_numpy_on_every_axis(rng, op, shape):
    dtype = np.float32 if len(shape) % 2 else np.float64
    x = data(rng, shape, op, dtype)
    for index, axis in enumerate(axes_of(len(shape))):
        for keepdims in (False, True) if index % 2 else (False,):
            got = getattr(autotune, op)(x, axis=axis, keepdims=keepdims)
            want = expected(op, x, axis, keepdims)
            assert np.shape(got) == np.shape(want), (axis, keepdims)
            assert np.asarray(got).dtype == dtype
            np.testing.assert_array_equal(got, want.astype(dtype), err_msg=f"axis={axis} keepdims={keepdims}")


@pytest.mark.parametrize("op", ["sum", "max"])
def test_transposed_views_reduce_in_place(rng, op):
    """An F-contiguous array (x.T) reduces along the matching axis of its C-contiguous base."""
    base = data(rng, (4, 3, 5), op, np.float32)
    x = base.T  # shape (5, 3, 4), F-contiguous
    for axis in (None, 0, 1, 2, -1, (0, 1), (1, 2)):
        np.testing.assert_array_equal(getattr(autotune, op)(x, axis=axis), expected(op, x, axis, False).astype(np.float32))
    d = cuda.to_device(base).reshape(base.size).reshape((5, 3, 4), order="F")  # a device array's transposed view
    got = getattr(autotune, op)(d, axis=1)
    assert got.shape == (5, 4)
    np.testing.assert_array_equal(got.copy_to_host(), expected(op, x, 1, False).astype(np.float32))


def test_device_inputs_give_device_results_and_fill_out(rng):
    x = small_integers(rng, (6, 7, 3), np.float32)
    d = cuda.to_device(x)
    total = autotune.sum(d)
    assert total.shape == () and total.copy_to_host() == x.sum()
    out = poisoned((6, 3), np.float32)
    assert autotune.sum(d, axis=1, out=out) is out
    np.testing.assert_array_equal(out.copy_to_host(), x.sum(axis=1))
    out = poisoned((6, 3), np.float32)
    autotune.max(d, axis=-2, out=out)  # a second call of the shape reuses the kept kernel
    np.testing.assert_array_equal(out.copy_to_host(), x.max(axis=1))
    with pytest.raises(ValueError, match="shape"):
        autotune.sum(d, axis=1, out=poisoned((6, 7), np.float32))
    host_out = np.full((6, 3), np.nan, np.float32)  # a host out gets the result copied in
    assert autotune.sum(d, axis=1, out=host_out) is host_out
    np.testing.assert_array_equal(host_out, x.sum(axis=1))


def test_empty_arrays_as_numpy(rng):
    z = np.zeros((3, 0, 2), np.float32)
    np.testing.assert_array_equal(autotune.sum(z, axis=1), np.zeros((3, 2), np.float32))
    assert autotune.sum(z) == 0
    assert autotune.max(z, axis=0).shape == (0, 2)
    with pytest.raises(ValueError, match="no identity"):
        autotune.max(z, axis=1)
    with pytest.raises(ValueError, match="no identity"):
        autotune.min(z)


def test_refused_calls_say_why(rng):
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    with pytest.raises(np.exceptions.AxisError):
        autotune.sum(x, axis=3)
    with pytest.raises(ValueError, match="duplicate"):
        autotune.sum(x, axis=(1, -2))
    with pytest.raises(ValueError, match="not adjacent"):
        autotune.sum(x, axis=(0, 2))
    with pytest.raises(TypeError, match="uint8"):
        autotune.sum(x.astype(np.uint8))
    with pytest.raises(TypeError, match="int32"):
        autotune.matmul(x[0].astype(np.int32), x[0].T.astype(np.int32))
    with pytest.raises(TypeError, match="dtype=float64"):
        autotune.sum(x, dtype=np.float64)
    with pytest.raises(TypeError, match="dtype=int32 is not supported; a sum of int32 gives int64"):
        autotune.sum(x.astype(np.int32), dtype=np.int32)
    assert autotune.sum(x, dtype="f4") == pytest.approx(x.astype(np.float64).sum(), rel=1e-5)
    with pytest.raises(ValueError, match="strided view"):
        autotune.sum(cuda.to_device(x)[:, ::2])
    with pytest.raises(TypeError, match="axis"):
        autotune.sum(x, axis=1.0)
    with pytest.raises(TypeError):
        np.sum(x, axis=[0, 1])
    with pytest.raises(TypeError, match="axis must be"):  # as NumPy: a list is no axis
        autotune.sum(x, axis=[0, 1])
    for order in (">", "<"):  # the one not native: its bytes would reach the GPU as they are
        swapped = x.astype(x.dtype.newbyteorder(order))
        if swapped.dtype.isnative:
            continue
        assert np.sum(swapped) == pytest.approx(np.sum(x))
        with pytest.raises(ValueError, match="byte order"):
            autotune.sum(swapped)
        out = np.full((3, 4), np.nan, swapped.dtype)  # a host out= gets the result through NumPy's copy, converted
        assert autotune.sum(x, axis=2, out=out) is out
        np.testing.assert_allclose(out, x.astype(np.float64).sum(axis=2), rtol=1e-5, atol=1e-5)
        with pytest.raises(ValueError, match="byte order"):
            autotune.matmul(swapped[0], x[0].T.copy())


def test_over_no_axis_as_numpy_converting_where_it_does_and_a_0d_result_is_a_scalar(rng):
    """A reduction over no axis (a 0-d input, ``axis=()``) is the array itself, converted where NumPy converts it
    (an int32 sum is int64: the kernel over a unit axis); any 0-d result is a NumPy scalar, with keepdims too."""
    x = rng.integers(-2**31, 2**31 - 1, size=(3, 37), dtype=np.int32)
    for axis in ((), None):
        for keepdims in (False, True):
            data = x if axis == () else np.array(x[1, 5])
            got, want = autotune.sum(data, axis=axis, keepdims=keepdims), np.sum(data, axis=axis, keepdims=keepdims)
            assert type(got) is type(want) and got.dtype == want.dtype == np.int64 and np.shape(got) == np.shape(want)
            np.testing.assert_array_equal(got, want)
    for op in ("sum", "max", "nanmin"):
        v = np.array(rng.standard_normal(), dtype=np.float32)
        for kwargs in ({"keepdims": True}, {"axis": ()}, {"axis": (), "keepdims": True}, {}):
            got, want = getattr(autotune, op)(v, **kwargs), getattr(np, op)(v, **kwargs)
            assert type(got) is type(want) is np.float32 and got == want, (op, kwargs)
    v = np.array(rng.standard_normal(), dtype=np.float32)
    for op in ("sum", "max", "nanmin"):  # NumPy takes axis 0 or -1 of a 0-d array as no axis, not (0,)
        for axis in (0, -1):
            assert getattr(autotune, op)(v, axis=axis) == getattr(np, op)(v, axis=axis) == v
        for axis in ((0,), 1):
            with pytest.raises(np.exceptions.AxisError):
                getattr(autotune, op)(v, axis=axis)
    y = x.astype(np.float32).copy(order="F")
    y[0, 0] = np.nan
    out = np.full(y.shape, 7.0, np.float32, order="F")
    assert autotune.nanmax(y, axis=(), out=out) is out
    np.testing.assert_array_equal(out, y)


def test_axis_and_keepdims_numpy_refuses_are_refused_even_after_a_replayed_call(rng):
    """NumPy refuses ``axis=True`` (a bool is no axis) and ``keepdims='no'`` (no integer); so does autotune, also
    where an earlier call on the same device array with ``axis=1`` is kept for replay (True == 1 as a key)."""
    x = rng.standard_normal((3, 4)).astype(np.float32)
    for kwargs in ({"axis": True}, {"axis": (0, False)}, {"axis": np.bool_(True)}, {"keepdims": "no"},
                   {"keepdims": None}, {"keepdims": np.True_}):
        with pytest.raises(TypeError):
            np.sum(x, **kwargs)
        with pytest.raises(TypeError, match="axis must be|keepdims must be"):
            autotune.sum(x, **kwargs)
    d = cuda.to_device(x)
    out = poisoned((3,), np.float32)
    autotune.sum(d, axis=1, out=out)
    autotune.sum(d, axis=1, out=out)  # kept and replayed
    with pytest.raises(TypeError, match="axis must be"):
        autotune.sum(d, axis=True, out=out)
    # float32 rounding against the float64 sum, bounded by the magnitudes summed (a row's sum may cancel to near 0)
    np.testing.assert_allclose(autotune.sum(x, axis=1, keepdims=1), x.astype(np.float64).sum(1, keepdims=True),
                               rtol=1e-6, atol=4 * np.finfo(np.float32).eps * np.abs(x).sum(1).max())


def wide_integers(rng, shape, dtype):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


@pytest.mark.filterwarnings("ignore:overflow encountered")  # the simulator's int64 scalars wrap, as the GPU's do
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_reductions_are_numpys_to_the_last_bit(rng, dtype):
    """Values over the whole dtype: an int32 sum is int64 (and would overflow an int32 accumulator), int64 sums
    wrap as NumPy's do, max and min keep the dtype; F-ordered views and every axis form; poisoned out=."""
    for shape, axes in (((1031,), (None,)), ((5, 37), (None, 0, -1)), ((3, 37, 5), (1, -1, (0, 1)))):
        x = wide_integers(rng, shape, dtype)
        for view in (x, x.T) if len(shape) == 2 else (x,):
            for op in ("sum", "min", "nanmax"):  # integer max is nanmax's code
                for axis in axes:
                    got, want = getattr(autotune, op)(view, axis=axis), OPS[op](view, axis=axis)
                    assert np.asarray(got).dtype == want.dtype and np.array_equal(got, want), (op, shape, axis)
    x = wide_integers(rng, (6, 41), dtype)
    out = poisoned((6,), np.int64 if dtype == np.int32 else dtype)
    autotune.sum(cuda.to_device(x), axis=1, out=out)
    np.testing.assert_array_equal(out.copy_to_host(), x.sum(axis=1))
    assert autotune.sum(x, dtype="i8") == x.sum()
    a, b = wide_integers(rng, (1031,), dtype), wide_integers(rng, (1031,), dtype)
    got = autotune.dot(a, b)
    assert isinstance(got, dtype) and got == np.dot(a, b)  # wrapped in the input's dtype, as NumPy's dot
    zero = autotune.sum(np.zeros((3, 0), dtype), axis=1)
    assert zero.dtype == x.sum().dtype and not zero.any()


def test_float16_reductions_accumulate_in_float32(rng):
    """float16 results, accumulated in float32 and rounded once: integer data sum exactly (to the float16 nearest
    the exact sum, past 2048 where float16 stops counting by ones, which a float16 accumulator would miss); max and
    min exact, NaN included; every axis form."""
    for shape, axes in (((4099,), (None,)), ((37, 5), (0, 1)), ((3, 37, 5), (1, 2))):
        x = (rng.integers(0, 9, size=shape) + 2).astype(np.float16)
        for axis in axes:
            got = autotune.sum(x, axis=axis)
            assert np.asarray(got).dtype == np.float16
            np.testing.assert_array_equal(got, x.astype(np.float64).sum(axis=axis).astype(np.float16))
        y = data(rng, shape, "max", np.float16)
        for op in ("max", "nanmin"):
            for axis in axes:
                np.testing.assert_array_equal(getattr(autotune, op)(y, axis=axis), expected(op, y, axis, False))
    a, b = small_integers(rng, (1000,), np.float16), small_integers(rng, (1000,), np.float16)
    assert autotune.dot(a, b) == np.float16(a.astype(np.float64) @ b.astype(np.float64))


def test_bfloat16_reductions_accumulate_in_float32(rng):
    """bfloat16 in, bfloat16 out (ml_dtypes' dtype, as NumPy gives with it), accumulated in float32 and rounded
    once: integer sums past 256, where bfloat16 stops counting by ones, are the bfloat16 nearest the exact sum;
    max and min exact with NaN and infinities; every axis form, keepdims, dtype= naming the result's dtype."""
    import ml_dtypes

    bf16 = np.dtype(ml_dtypes.bfloat16)
    for shape, axes in (((1031,), (None,)), ((37, 5), (0, -1)), ((3, 11, 5), (1, 2))):
        x = (rng.integers(0, 9, size=shape) + 2).astype(bf16)
        for axis in axes:
            got = autotune.sum(x, axis=axis, keepdims=True, dtype="bfloat16")
            assert np.asarray(got).dtype == bf16
            np.testing.assert_array_equal(got, x.astype(np.float64).sum(axis=axis, keepdims=True).astype(bf16))
        y = data(rng, shape, "max", np.float32)
        y.flat[rng.choice(y.size, 3, replace=False)] = [np.inf, -np.inf, -0.0]
        y = y.astype(bf16)
        for op in ("max", "nanmin"):
            for axis in axes:
                got = np.asarray(getattr(autotune, op)(y, axis=axis))
                want = expected(op, y.astype(np.float32), axis, False).astype(bf16)
                assert got.dtype == bf16  # NumPy's testing sees NaN only in its own float dtypes: compare widened
                np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))
    a, b = small_integers(rng, (1000,), bf16), small_integers(rng, (1000,), bf16)
    assert autotune.dot(a, b) == bf16.type(a.astype(np.float64) @ b.astype(np.float64))
    with pytest.raises(TypeError, match="dtype=float32 is not supported"):
        autotune.sum(a, dtype=np.float32)



def test_matmul_of_bfloat16_is_float16s_twin(rng):
    """bfloat16 in, bfloat16 out (float32 sums rounded once: integer data give the bfloat16 nearest the exact sums,
    past 256 where bfloat16 stops counting by ones), or float32 with dtype=np.float32; a transposed operand is
    read in place; out= of another dtype is refused."""
    import ml_dtypes

    bf16 = np.dtype(ml_dtypes.bfloat16)
    A = rng.integers(7, 9, size=(9, 8)).astype(bf16)
    B = rng.integers(7, 9, size=(6, 8)).astype(bf16).T
    exact = A.astype(np.float64) @ B.astype(np.float64)
    assert exact.min() > 256
    got = autotune.matmul(A, B)
    assert got.dtype == bf16 and got.shape == (9, 6)
    # np.dot's dtype, PyTorch's and JAX's; np.matmul's float32 is ml_dtypes' missing loop (README, "follow NumPy")
    assert np.dot(A, B).dtype == bf16 and np.matmul(A, B).dtype == np.float32
    np.testing.assert_array_equal(got.astype(np.float64), exact.astype(bf16).astype(np.float64))
    wide = autotune.matmul(A, B, dtype=np.float32)
    assert wide.dtype == np.float32
    np.testing.assert_array_equal(wide, exact)
    with pytest.raises(TypeError, match="dtype=float64 is not supported for bfloat16 operands"):
        autotune.matmul(A, B, dtype=np.float64)


def test_dot_is_numpys(rng):
    a, b = (small_integers(rng, (37,), np.float64) for _ in range(2))
    got = autotune.dot(a, b)
    assert isinstance(got, np.float64) and got == a @ b
    A, B = rng.standard_normal((5, 4)), rng.standard_normal((4, 3))
    assert_matmul_close(autotune.dot(A, B), A, B)
    with pytest.raises(ValueError, match="not aligned"):
        autotune.dot(a, b[:-1])
    with pytest.raises(ValueError, match="1-D or two 2-D"):
        autotune.dot(A[None], B)


MATMUL_CASES = [
    ((5, 7), (7, 3)), ((1, 1), (1, 1)), ((13, 1), (1, 11)),
    ((7,), (7, 3)), ((5, 7), (7,)), ((7,), (7,)),
    ((2, 5, 7), (7, 3)), ((5, 7), (3, 7, 3)), ((2, 1, 5, 7), (3, 7, 3)),
]


@pytest.mark.parametrize("a_shape,b_shape", MATMUL_CASES, ids=str)
def test_matmul_matches_numpy(rng, a_shape, b_shape):
    A, B = rng.standard_normal(a_shape).astype(np.float32), rng.standard_normal(b_shape).astype(np.float32)
    got, want = autotune.matmul(A, B), A.astype(np.float64) @ B
    assert np.shape(got) == want.shape and np.asarray(got).dtype == np.float32
    if want.ndim == 0:
        assert isinstance(got, np.float32)
    A64, B64 = A.astype(np.float64), B.astype(np.float64)
    bound = 2 * A.shape[-1] * np.finfo(np.float32).eps * np.matmul(np.abs(A64), np.abs(B64))
    assert not np.isnan(got).any()
    assert (np.abs(np.asarray(got) - want) <= bound).all()


@pytest.mark.parametrize("layout", ["nn", "tn", "nt", "tt"])
def test_matmul_takes_transposed_views_without_layout(rng, layout):
    A = rng.standard_normal((6, 5)).astype(np.float32)
    B = rng.standard_normal((5, 4)).astype(np.float32)
    a = np.asfortranarray(A) if layout[0] == "t" else A
    b = np.asfortranarray(B) if layout[1] == "t" else B
    out = poisoned((6, 4), np.float32)
    assert autotune.matmul(cuda.to_device(a), cuda.to_device(b), out=out) is out
    assert_matmul_close(out.copy_to_host(), A, B)


def test_a_numpy_stack_of_transposed_matrices_is_read_as_the_same_stack_on_the_device(rng):
    """``A.transpose(0, 2, 1)`` of a NumPy stack (no axis order of it is C- or F-contiguous, but its elements fill
    one block) is copied as that block and read in place, matrix by matrix, as the device stack is; a view with
    gaps is still refused, naming the copy to make."""
    A = rng.standard_normal((3, 5, 4)).astype(np.float32).transpose(0, 2, 1)
    B = rng.standard_normal((3, 2, 5)).astype(np.float32).transpose(0, 2, 1)
    for got, b in ((autotune.matmul(A, B[0].copy()), lambda i: B[0]), (autotune.matmul(A, B), lambda i: B[i])):
        assert isinstance(got, np.ndarray) and got.shape == (3, 4, 2)
        for i in range(3):
            assert_matmul_close(got[i], A[i], b(i))
    with pytest.raises(ValueError, match="strided view"):
        autotune.matmul(A[:, :, ::2], B[:, ::2])


def test_matmul_empty_and_refused(rng):
    np.testing.assert_array_equal(autotune.matmul(np.ones((3, 0), np.float32), np.ones((0, 2), np.float32)),
                                  np.zeros((3, 2), np.float32))
    assert autotune.matmul(np.ones((0, 4), np.float32), np.ones((4, 2), np.float32)).shape == (0, 2)
    with pytest.raises(ValueError, match="do not align"):
        autotune.matmul(np.ones((3, 4), np.float32), np.ones((5, 2), np.float32))
    with pytest.raises(ValueError, match="broadcast"):
        autotune.matmul(np.ones((2, 3, 4), np.float32), np.ones((3, 4, 2), np.float32))
    with pytest.raises(TypeError, match="promote"):
        autotune.matmul(np.ones((3, 4), np.float32), np.ones((4, 2), np.float64))
    with pytest.raises(ValueError, match="scalar"):
        autotune.matmul(np.array(2, np.float32), np.ones((4, 2), np.float32))
    with pytest.raises(ValueError, match="precision tf32 is for float32 matmul"):
        autotune.matmul(np.ones((3, 0)), np.ones((0, 2)), precision="tf32")
    with pytest.raises(ValueError, match="precision 'fp16' is not one of"):
        autotune.matmul(np.ones((3, 4), np.float32), np.ones((4, 2), np.float32), precision="fp16")


def test_matmul_at_a_tf32_precision(rng):
    """precision reaches the lookup: an untuned shape gets the tensor-core default, whose simulated TF32 products
    leave the error of TF32-rounded operands (not fp32's), and 3xtf32 stays at fp32's level. (M and N above 16: a
    skinny shape would take the gemv kernel, whose fp32 sums serve every precision.)"""
    A, B = (rng.standard_normal(s).astype(np.float32) for s in ((17, 16), (16, 18)))
    exact = A.astype(np.float64) @ B
    errors = {p: np.abs(autotune.matmul(A, B, precision=p) - exact).max() for p in ("tf32", "3xtf32")}
    assert 1e-5 < errors["tf32"] < 1e-2 and errors["3xtf32"] < 1e-5, errors


def test_matmul_of_float16_is_numpys(rng):
    """float16 in, float16 out (NumPy's result type), summed in float32 on the tensor-core default of an untuned
    shape: integer data give the float16 nearest the exact sums, past 2048 where float16 stops counting by ones
    (K = 48 products of 49 to 64)."""
    A = (rng.integers(7, 9, size=(9, 48))).astype(np.float16)
    B = (rng.integers(7, 9, size=(48, 6))).astype(np.float16)
    got = autotune.matmul(A, B)
    assert got.dtype == np.float16 and got.shape == (9, 6)
    exact = A.astype(np.float64) @ B
    assert exact.max() > 2048
    np.testing.assert_array_equal(got, exact.astype(np.float16))


def test_matmul_dtype_float32_of_float16_operands(rng):
    """dtype=np.float32 of float16 operands: NumPy's result (float32 sums, not rounded to float16); other requests
    are refused, as the operands' own dtype is accepted."""
    A = (rng.integers(7, 9, size=(5, 48))).astype(np.float16)
    B = (rng.integers(7, 9, size=(48, 3))).astype(np.float16)
    got = autotune.matmul(A, B, dtype=np.float32)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, np.matmul(A, B, dtype=np.float32))
    assert autotune.matmul(A, B, dtype="float16").dtype == np.float16
    with pytest.raises(TypeError, match="dtype=float64 is not supported for float16 operands"):
        autotune.matmul(A, B, dtype=np.float64)
    with pytest.raises(TypeError, match="dtype=float32 is not supported for float64 operands"):
        autotune.matmul(A.astype(np.float64), B.astype(np.float64), dtype=np.float32)


class _ProtocolStream:
    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


def test_stream_arguments_are_read_in_every_form():
    assert streams.stream_handle(_ProtocolStream(1234)) == 1234
    assert streams.stream_handle(type("TorchLike", (), {"cuda_stream": 77})()) == 77
    assert streams.stream_handle(type("CupyLike", (), {"ptr": 99})()) == 99
    assert streams.stream_handle(5) == 5
    for bad in ("s", 1.5, True, object()):
        with pytest.raises(TypeError):
            streams.stream_handle(bad)
    with pytest.raises(ValueError):
        streams.stream_handle(-1)
    # the simulator runs everything at once: every stream is its default one, and calls take them all
    assert streams.as_stream(None) == streams.as_stream(cuda.stream()) == streams.as_stream(_ProtocolStream(9)) == 0


def test_calls_take_a_stream(rng):
    x = small_integers(rng, (9, 4), np.float32)
    for stream in (None, 0, cuda.stream(), _ProtocolStream(42)):
        np.testing.assert_array_equal(autotune.sum(x, axis=0, stream=stream), x.sum(axis=0))
        assert_matmul_close(autotune.matmul(x, x.T.copy(), stream=stream), x, x.T.copy())


def test_problem_forms():
    assert reduce_functions.problem_form(1, 10, 1) == ((10,), None)
    assert reduce_functions.problem_form(4, 10, 1) == ((4, 10), 1)
    assert reduce_functions.problem_form(1, 10, 3) == ((10, 3), 0)
    assert reduce_functions.problem_form(2, 10, 3) == ((2, 10, 3), -2)
    assert calls.collapse((2, 3, 4, 5), (1, 2)) == (2, 12, 5)


class _Interfaced:
    """Stands for a device array by its CUDA Array Interface alone (the simulator's arrays have none)."""

    def __init__(self, pointer, stream=None):
        self.__cuda_array_interface__ = {"data": (pointer, False), "shape": (4,), "strides": None, "typestr": "<f4",
                                         "version": 3, "stream": stream}


def _logged_launch(log: list) -> PackedLaunch:
    """A launch of a reduction of the array at 4096 into the output at 8192, packed as numba-cuda packs arrays
    (meminfo, parent, size, itemsize, pointer, shape, strides), logging the arguments it would launch with."""
    return PackedLaunch(lambda stream, config, function, packed: lambda: log.append(packed), 0, None, "kernel",
                        (0, 0, 4, 4, 4096, 4, 4, 0, 0, 1, 4, 8192, 1, 4), pointers=(4, 11))


def test_repeated_device_calls_with_out_replay_the_kept_launches():
    log = []
    x, out = _Interfaced(4096), _Interfaced(8192)
    call = ("reduce", "sum", None, False, None)
    first = calls.Replay(call, (x, None), out, 0)
    assert first.result() is None
    first.run(Plan([_logged_launch(log)], out), out)
    assert calls.Replay(call, (x, None), out, 0).result() is out and log[0] == log[1]
    for other in (((("reduce", "max", None, False, None), (x, None), out)),      # another op
                  (call, (_Interfaced(4100), None), out)):                        # other memory
        assert calls.Replay(*other, 0).result() is None
    assert calls.Replay(call, (np.ones(4), None), out, 0).key is None


def test_a_replay_follows_every_stream_its_arrays_name_a_host_array_among_them_included(monkeypatch):
    """The launch stream waits for each producer stream an array's interface names, whichever argument it is and
    wherever a host array (which makes the call unreplayable) stands among them."""
    followed = []
    monkeypatch.setattr(streams, "follow", lambda stream, producers: followed.append(list(producers)))
    call = ("reduce", "dot", None, False, None)
    for inputs, out, expected, replayable in (
            ((_Interfaced(4096, 5), _Interfaced(4160, 6)), _Interfaced(8192, 9), [5, 6, 9], True),
            ((np.ones(4), _Interfaced(4160, 6)), _Interfaced(8192, None), [6, None], False),
            ((_Interfaced(4096, None), np.ones(4)), None, None, False)):
        followed.clear()
        replay = calls.Replay(call, inputs, out, 0)
        replay.follow()
        assert (replay.key is not None) == replayable
        assert followed == ([] if expected is None else [expected])


def test_repeated_device_calls_without_out_get_a_new_array_each_written_by_the_moved_plan():
    """Callers keep results, so each call returns a new array; the kept plan's pointers into the first output
    are moved onto it, the inputs' pointers are not."""
    log = []
    x, first_out = _Interfaced(4096), cuda.device_array(1, np.float32)
    call = ("reduce", "dot", None, False, None)
    launch = _logged_launch(log)
    launch = replace(launch, packed=launch.packed[:11] + (arrays.device_pointer(first_out),) + launch.packed[12:])
    calls.Replay(call, (x, None), None, 0).run(Plan([launch], first_out), first_out)
    results = [calls.Replay(call, (x, None), None, 0).result() for _ in range(2)]
    assert results[0] is not results[1] and all(r is not first_out for r in results)
    assert [packed[11] for packed in log] == [arrays.device_pointer(d) for d in [first_out, *results]]
    assert {packed[4] for packed in log} == {4096}
    assert all(r.shape == (1,) and r.dtype == np.float32 for r in results)
    # a plan whose launches hold arrays (the simulator's) is not kept for new outputs
    other = ("reduce", "max", None, False, None)
    calls.Replay(other, (x, None), None, 0).run(Plan([lambda: None], first_out), first_out)
    assert calls.Replay(other, (x, None), None, 0).result() is None


def test_a_library_that_makes_its_own_results_gets_each_replay_written_into_a_new_one_of_its_arrays(monkeypatch):
    """A library with ``new`` (PyTorch: tensors from its own allocator) is handed the kept output's form and the
    launch stream, and each replay writes the array it returns, at its pointer; nothing comes from the pool."""
    from autotune.runtime import libraries, result_pool

    log, made = [], []
    x, first_out = _Interfaced(4096), cuda.device_array(1, np.float32)
    launch = _logged_launch(log)
    launch = replace(launch, packed=launch.packed[:11] + (arrays.device_pointer(first_out),) + launch.packed[12:])

    def new(written, stream):
        made.append((written.shape, written.dtype, written.order, stream))
        return f"array {len(made)}", 50_000 + 1024 * len(made)

    own = libraries.Library("own", host=False, wrap=lambda d: pytest.fail("a made result is not wrapped"), new=new)
    call = ("reduce", "sum", None, False, None)
    calls.Replay(call, (x, None), None, 0, own).run(Plan([launch], first_out), first_out)
    monkeypatch.setattr(result_pool, "empty", lambda *args: pytest.fail("a made result comes from the pool"))
    results = [calls.Replay(call, (x, None), None, 0, own).result() for _ in range(2)]
    assert results == ["array 1", "array 2"]
    assert made == [((1,), "float32", "C", 0)] * 2
    assert [packed[11] for packed in log[1:]] == [51_024, 52_048] and {packed[4] for packed in log} == {4096}


def test_the_public_functions_are_kept_as_attributes_of_the_package_after_first_use():
    import autotune
    from autotune import functions as module

    for name in autotune.FUNCTIONS:
        assert getattr(autotune, name) is getattr(module, name)
        assert vars(autotune)[name] is getattr(module, name)  # later lookups skip the module's __getattr__


def test_replays_onto_a_block_seen_before_reuse_its_moved_launches(monkeypatch):
    """The result pool hands a dropped result's block to the next call: the launches moved onto it are kept per
    pointer (at most MAX_MOVES), and each replay launches with its own output's pointer."""
    from autotune.runtime import launch as launch_module
    from autotune.runtime import result_pool

    log = []
    plan = Plan([_logged_launch(log)], None)
    written = launch_module.Written(8192, 16, (4,), "float32", "C")
    pointers = [20480, 30720, 20480] + [40960 + 1024 * i for i in range(launch_module.MAX_MOVES)]
    blocks = iter([_Interfaced(p) for p in pointers])
    monkeypatch.setattr(result_pool, "empty", lambda *args: next(blocks))
    results = [written.replay(plan) for _ in range(3)]
    assert [packed[11] for packed in log] == pointers[:3] and {packed[4] for packed in log} == {4096}
    assert [arrays.device_pointer(r) for r in results] == pointers[:3]
    kept = written.moves[20480]
    written.replay(plan)
    assert written.moves[20480] is kept and sorted(written.moves) == [20480, 30720, 40960]
    for _ in pointers[4:]:
        written.replay(plan)
    assert len(written.moves) <= launch_module.MAX_MOVES and [packed[11] for packed in log] == pointers


def test_a_moved_launch_moves_only_pointers_into_the_old_output():
    launch = _logged_launch([])
    moved = launch.moved(8192, 8192 + 16, 100_000)
    assert moved.packed == launch.packed[:11] + (108_192,) + launch.packed[12:]
    assert launch.moved(8000, 8100, 5).packed == launch.packed  # no pointer in that memory; shapes untouched
    assert not Plan([replace(launch, pointers=None)], None).movable  # pointers not found when packed
    zero = Memset(print, 8200, 2, 0)
    assert zero.moved(8192, 8208, 10).pointer == 8210 and zero.moved(0, 8192, 10) is zero
    assert Plan([launch, zero, lambda: None], None).moved(8192, 16, cuda.device_array(4, np.float32)) is None
