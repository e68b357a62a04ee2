"""Property-based tests of the public API against NumPy, in the CUDA simulator.

Drawn: the op and axis (or the matmul layout), the dtype, shapes with 0, 1, primes and sizes no tile divides,
values with NaN, +-inf, -0.0, huge and tiny magnitudes, a variant of the search space, and ``out=`` fresh or
overlapping an input. The result equals NumPy's: exactly for max and min, and wherever NumPy's result is NaN or
infinite (those do not depend on the order of a sum when no finite partial sum overflows, which the magnitudes
drawn ensure); within the rigorous bound n * eps * sum|terms| for finite sums; or the call raises ValueError where
NumPy does. Example budget fixed (simulated GPU threads are Python threads); hypothesis prints any failure's input.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numba import cuda

from autotune import build_kernel

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NumPy's, for NaN and inf in the simulator
PROPERTY = settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
EXTENTS = [0, 1, 2, 3, 5, 7, 13, 31, 33, 37]

REDUCE_VARIANTS = {  # small blocks of every strategy: warp shuffle / tree / serial stand-ins, every combine
    None: [{"BLOCK": 32, "ITEMS": 2, "VEC": 1, "WAVES": 2, "COMBINE": "atomic", "BLOCK_REDUCE": "tree"},
           {"BLOCK": 32, "ITEMS": 1, "VEC": 2, "WAVES": 1, "COMBINE": "last_block", "BLOCK_REDUCE": "shuffle"},
           {"BLOCK": 64, "ITEMS": 1, "VEC": 4, "WAVES": 2, "COMBINE": "two_pass", "BLOCK_REDUCE": "serial"}],
    1: [{"BLOCK": 64, "ITEMS": 2, "VEC": 1, "ROW_MODE": "warp"}, {"BLOCK": 32, "VEC": 2, "ROW_MODE": "block"}],
    0: [{"BLOCK": 64, "BX": 32, "VEC": 1, "ROW_SPLIT": 4}, {"BLOCK": 32, "BX": 32, "VEC": 2, "ROW_SPLIT": 1}],
}
MATMUL_VARIANTS = [{"strategy": "naive"},
                   {"BM": 16, "BN": 16, "BK": 8, "TM": 2, "TN": 2, "VEC": 2, "UNROLL_K": 4, "EDGE": "clamp"},
                   {"BM": 32, "BN": 16, "BK": 8, "TM": 4, "TN": 2, "VEC": 2, "UNROLL_K": 2, "SPLIT_K": 2,
                    "SPLIT_ADD": "last_block"},
                   {"BM": 16, "BN": 32, "BK": 16, "TM": 2, "TN": 4, "VEC": 4, "UNROLL_K": 8, "SPLIT_K": 2,
                    "A_SMEM": "mmajor"}]


def values(dtype, limit):
    """Elements: ordinary numbers, -0.0, tiny and huge (up to ``limit``, so no finite sum overflows), +-inf, NaN."""
    finite = st.one_of(st.floats(-4, 4, width=32), st.just(-0.0), st.floats(-1e-30, 1e-30),
                       st.sampled_from([limit, -limit]))
    special = st.sampled_from([np.inf, -np.inf, np.nan])
    return st.one_of(finite, finite, finite, special).map(np.dtype(dtype).type)


@st.composite
def arrays(draw, shape, dtype, limit):
    n = int(np.prod(shape))
    plain = draw(st.booleans())  # half the examples without special values, so finite results are checked often
    elements = values(dtype, limit) if not plain else st.floats(-4, 4, width=32).map(np.dtype(dtype).type)
    flat = draw(st.lists(elements, min_size=n, max_size=n))
    return np.array(flat, dtype=dtype).reshape(shape)


def overlapping_out(x: np.ndarray, out_shape):
    """A device copy of x and an output array that starts at x's first byte (sharing memory with it)."""
    size = int(np.prod(out_shape))
    buffer = cuda.to_device(np.concatenate([x.ravel(order="K"), np.zeros(max(0, size - x.size), x.dtype)]))
    device_x = buffer[:x.size].reshape(x.shape[::-1]).T if np.isfortran(x) and x.ndim > 1 else \
        buffer[:x.size].reshape(x.shape)
    return device_x, buffer[:size].reshape(out_shape)


def assert_like_numpy(got, expected, terms_abs_sum, n, dtype, exact):
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    assert got.shape == expected.shape
    special = ~np.isfinite(expected)
    np.testing.assert_array_equal(got[special], expected[special])  # NaN where NaN, the same infinity
    finite = ~special
    if exact:
        np.testing.assert_array_equal(got[finite], expected[finite])
    else:
        bound = 2 * max(n, 1) * np.finfo(dtype).eps * np.asarray(terms_abs_sum)[finite] + np.finfo(dtype).tiny
        assert np.all(np.abs(got[finite] - expected[finite]) <= bound), (got[finite], expected[finite])


@PROPERTY
@given(data=st.data(), op=st.sampled_from(["sum", "max", "min", "dot", "nanmax", "nanmin"]),
       axis=st.sampled_from([None, 0, 1]),
       dtype=st.sampled_from(["float32", "float64"]), aliased=st.booleans())
def test_reductions_equal_numpy(data, op, axis, dtype, aliased):
    shape = (data.draw(st.sampled_from(EXTENTS)), data.draw(st.sampled_from(EXTENTS)))
    if axis is None:
        shape = (shape[0] * shape[1],)
    limit = 1e15 if op == "dot" and dtype == "float32" else 1e30
    x = data.draw(arrays(shape, dtype, limit))
    y = data.draw(arrays(shape, dtype, limit)) if op == "dot" else None
    params = data.draw(st.sampled_from([p for p in REDUCE_VARIANTS[axis] if p["VEC"] * np.dtype(dtype).itemsize <= 16]))
    kernel = build_kernel("reduce", params, dtype, op=op, axis=axis)
    x64 = x.astype(np.float64)
    terms = x64 * y.astype(np.float64) if op == "dot" else x64
    reduced = x.size if axis is None else shape[axis]
    with np.errstate(all="ignore"):
        try:
            expected = np.atleast_1d({"sum": np.sum, "dot": np.sum, "max": np.max, "min": np.min, "nanmax": np.nanmax,
                                      "nanmin": np.nanmin}[op](terms, axis=axis))
        except ValueError:
            expected = None
    out_shape = (1,) if axis is None else (shape[1 - axis],)
    if aliased and x.size:
        device_x, out = overlapping_out(x, out_shape)
    else:
        device_x, out = cuda.to_device(x), cuda.to_device(np.full(out_shape, np.nan, dtype))
    args = (device_x,) + ((cuda.to_device(y),) if y is not None else ())
    if expected is None:  # NumPy raises: max/min over an empty extent
        try:
            kernel(*args, out=out)
        except ValueError as exc:
            assert "zero-size array" in str(exc)
            return
        raise AssertionError(f"NumPy raises for {op} over shape {shape} axis {axis}; autotune did not")
    kernel(*args, out=out)
    with np.errstate(all="ignore"):
        abs_sum = np.abs(terms).sum(axis=axis)
    assert_like_numpy(out.copy_to_host(), expected, np.atleast_1d(abs_sum), reduced, dtype,
                      exact=op not in ("sum", "dot"))


@PROPERTY
@given(data=st.data(), layout=st.sampled_from(["nn", "tn", "nt", "tt"]), dtype=st.sampled_from(["float32", "float64"]),
       aliased=st.booleans())
def test_matmul_equals_numpy(data, layout, dtype, aliased):
    M, N, K = (data.draw(st.sampled_from(EXTENTS[1:])) for _ in range(3))  # NumPy's A @ B with a 0 extent is legal,
    A = data.draw(arrays((M, K), dtype, 1e15 if dtype == "float32" else 1e30))  # ours refuses it clearly (below)
    B = data.draw(arrays((K, N), dtype, 1e15 if dtype == "float32" else 1e30))
    a_arg = np.asfortranarray(A) if layout[0] == "t" else A
    b_arg = np.asfortranarray(B) if layout[1] == "t" else B
    params = data.draw(st.sampled_from([p for p in MATMUL_VARIANTS if p.get("VEC", 1) * np.dtype(dtype).itemsize <= 16]))
    kernel = build_kernel("matmul", params, dtype, layout=layout)
    if aliased:
        device_a, out = overlapping_out(a_arg, (M, N))
    else:
        device_a, out = cuda.to_device(a_arg), cuda.to_device(np.full((M, N), np.nan, dtype))
    kernel(device_a, cuda.to_device(b_arg), out=out)
    A64, B64 = A.astype(np.float64), B.astype(np.float64)
    with np.errstate(all="ignore"):
        expected = A64 @ B64
        abs_sum = np.abs(A64) @ np.abs(B64)
    assert_like_numpy(out.copy_to_host(), expected, abs_sum, K, dtype, exact=False)


F16_VARIANTS = [{"strategy": "naive"},
                {"BM": 16, "BN": 16, "BK": 16, "TM": 2, "TN": 4, "VEC": 2, "MMA": 16, "UNROLL_K": 16, "EDGE": "clamp"},
                {"BM": 16, "BN": 32, "BK": 16, "TM": 2, "TN": 8, "VEC": 4, "MMA": 16, "UNROLL_K": 16, "SPLIT_K": 2,
                 "SPLIT_ADD": "last_block", "A_SMEM": "mmajor"}]


@settings(PROPERTY, max_examples=20)
@given(data=st.data(), layout=st.sampled_from(["nn", "tn", "nt", "tt"]))
def test_float16_matmul_equals_numpy(data, layout):
    """float16 as NumPy's: the float64 product rounded to float16, NaN and infinities where NumPy has them (inf
    inputs; 37 products of at most 40 * 40 stay below float16's 65504), finite results within the float32 sum's
    error plus the rounding."""
    M, N, K = (data.draw(st.sampled_from(EXTENTS[1:])) for _ in range(3))
    A, B = (data.draw(arrays(shape, "float16", 40.0)) for shape in ((M, K), (K, N)))  # no finite sum overflows
    params = data.draw(st.sampled_from(F16_VARIANTS))
    kernel = build_kernel("matmul", params, "float16", layout=layout)
    out = cuda.to_device(np.full((M, N), np.nan, np.float16))
    kernel(*(np.asfortranarray(x) if t == "t" else x for x, t in zip((A, B), layout)), out=out)
    A64, B64 = A.astype(np.float64), B.astype(np.float64)
    with np.errstate(all="ignore"):
        expected = (A64 @ B64).astype(np.float16)
        abs_sum = np.abs(A64) @ np.abs(B64)
    got = out.copy_to_host()
    assert_like_numpy(got, expected, abs_sum, K, "float16", exact=False)


def test_an_empty_matmul_is_refused_clearly():
    kernel = build_kernel("matmul", {"strategy": "naive"})
    with pytest.raises(ValueError, match="M, N, K >= 1"):
        kernel(np.ones((0, 3), np.float32), np.ones((3, 2), np.float32))


@st.composite
def stacked_operands(draw):
    """A stack product's operand shapes: a batch, and each operand a stack of it, a broadcast stack of one or a
    single matrix."""
    batch = draw(st.sampled_from([2, 3]))
    M, N, K = (draw(st.sampled_from([1, 2, 3, 5])) for _ in range(3))
    a_lead, b_lead = draw(st.sampled_from([((batch,), (batch,)), ((batch,), (1,)), ((1,), (batch,)), ((batch,), ()),
                                           ((), (batch,))]))
    return batch, a_lead + (M, K), b_lead + (K, N)


@settings(PROPERTY, max_examples=20)
@given(data=st.data(), shapes=stacked_operands(), dtype=st.sampled_from(["float32", "float64"]),
       shared=st.sampled_from(["A", "B"]))
def test_stacked_matmul_with_out_overlapping_any_matrix_of_an_operand_equals_numpy(data, shapes, dtype, shared):
    """``autotune.matmul(A, B, out=C)`` where C starts at the first byte of any matrix of A or of B (one of a stack,
    or the single matrix a broadcast operand repeats), C's matrix i on operand matrix j: the result is NumPy's
    ``A @ B`` of the operands as they were before the call (every launch of the stack reads inputs unchanged)."""
    import warnings

    import autotune

    batch, a_shape, b_shape = shapes
    A = data.draw(arrays(a_shape, dtype, 1e15))
    B = data.draw(arrays(b_shape, dtype, 1e15))
    expected = A.astype(np.float64) @ B.astype(np.float64)
    operand, other = (A, B) if shared == "A" else (B, A)
    c_matrix = expected.shape[-2] * expected.shape[-1]
    o_matrix = operand.shape[-2] * operand.shape[-1]
    i = data.draw(st.integers(0, batch - 1), label="matrix of out")
    j = data.draw(st.integers(0, max(operand.size // o_matrix - 1, 0)), label="matrix of the operand")
    start = max(0, i * c_matrix - j * o_matrix)  # the operand's first element in the buffer
    c_start = start + j * o_matrix - i * c_matrix  # out's, so that out[i] starts at the operand's matrix j
    buffer = np.full(max(start + operand.size, c_start + expected.size), np.nan, dtype)
    buffer[start:start + operand.size] = operand.ravel()
    device = cuda.to_device(buffer)
    shared_d = device[start:start + operand.size].reshape(operand.shape)
    out = device[c_start:c_start + expected.size].reshape(expected.shape)
    args = (shared_d, cuda.to_device(other)) if shared == "A" else (cuda.to_device(other), shared_d)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", autotune.TunedKernelWarning)
        assert autotune.matmul(*args, out=out) is out
    with np.errstate(all="ignore"):
        abs_sum = np.abs(A.astype(np.float64)) @ np.abs(B.astype(np.float64))
    assert_like_numpy(out.copy_to_host(), expected, abs_sum, a_shape[-1], dtype, exact=False)


class Tagged(np.ndarray):
    """A subclass that adds an attribute and changes nothing else: autotune still cannot know that, so refuses it."""


def subclassed(kind: str, x: np.ndarray, draw):
    if kind == "masked":
        mask = np.array(draw(st.lists(st.booleans(), min_size=x.size, max_size=x.size)), bool).reshape(x.shape)
        return np.ma.MaskedArray(x, mask=mask)
    if kind == "matrix":
        return np.asmatrix(x.reshape(x.shape[0], -1) if x.ndim else x.reshape(1, 1))
    if kind == "tagged":
        return x.view(Tagged)
    return x


@settings(PROPERTY, max_examples=30)
@given(data=st.data(), kind=st.sampled_from(["plain", "masked", "matrix", "tagged"]),
       op=st.sampled_from(["sum", "max", "min", "nanmax", "matmul"]), axis=st.sampled_from([None, 0, -1]))
def test_ndarray_subclasses_give_numpys_result_or_a_type_error(data, kind, op, axis):
    """A NumPy array of a subclass (a masked array, with or without masked elements; np.matrix; any other subclass)
    is refused with a TypeError naming what it is, since the kernels read only its buffer; a plain array gives
    NumPy's result. Never a result that differs from NumPy's without a word."""
    import warnings

    import autotune

    shape = (data.draw(st.sampled_from([1, 2, 3, 5])), data.draw(st.sampled_from([1, 2, 3, 7])))
    x = subclassed(kind, data.draw(arrays(shape, "float32", 1e15 if op == "matmul" else 1e30)), data.draw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        call = (lambda: autotune.matmul(x, x.T)) if op == "matmul" else (lambda: getattr(autotune, op)(x, axis=axis))
        if kind != "plain":
            with pytest.raises(TypeError, match="masked array|np.matrix|ndarray subclass"):
                call()
            return
        got = call()
    with np.errstate(all="ignore"):
        terms = x.astype(np.float64)
        reference = terms @ terms.T if op == "matmul" else getattr(np, op)(terms, axis=axis)
        abs_sum = np.abs(terms) @ np.abs(terms.T) if op == "matmul" else np.abs(terms).sum(axis=axis)
    assert np.shape(got) == np.shape(reference)
    assert_like_numpy(np.atleast_1d(got), np.atleast_1d(reference), np.atleast_1d(abs_sum),
                      shape[-1] if op == "matmul" or axis is None else shape[axis], "float32",
                      exact=op != "sum" and op != "matmul")
