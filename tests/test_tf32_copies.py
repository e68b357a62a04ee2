"""The first step of a tf32 matmul on rounded copies (autotune/families/matmul/tf32_copies.py), in the simulator: every
element of the copy is the source's element rounded to TF32, in the copy's K-major place; the pad past each row is zero
(the rest of a row copy's last 16-byte piece) or left alone (a transposed copy); odd sizes, unaligned source rows, a
grid smaller than the copy (the strided loops) and special values."""
import numpy as np
import pytest
from checks import assert_launched_as_signed
from numba import cuda

from autotune.families.matmul import tf32_copies as tc
from autotune.families.matmul.reference import tf32_round

POISON = np.float32(-7.25)  # a value the copies never write: the pads must keep it


def special_values(rng, shape) -> np.ndarray:
    """Normal data with NaN, infinities, -0.0, the largest float32 (whose rounding overflows to inf) and exact ties
    of the rounding (low 13 bits 0x1000: away from zero) planted."""
    x = rng.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    tie = (np.float32(1.5).view(np.uint32) | np.uint32(0x1000)).view(np.float32)
    planted = [np.nan, np.inf, -np.inf, -0.0, np.finfo(np.float32).max, tie, -tie]
    at = rng.choice(flat.size, min(len(planted), flat.size), replace=False)
    flat[at] = planted[:len(at)]
    return x


def copied(kernel, source: np.ndarray, rows: int, cols: int, ldx: int, grid, *flag) -> np.ndarray:
    ld = tc.rounded_ld(cols)
    out = cuda.to_device(np.full(rows * ld, POISON, dtype=np.float32))
    kernel[grid, (tc.TILE, tc.ROWS)](cuda.to_device(source.reshape(-1)), out, rows, cols, ldx, ld, *flag)
    return out.copy_to_host().reshape(rows, ld)


@pytest.mark.parametrize("rows,cols,ldx,vec", [(37, 45, 48, True), (37, 45, 47, False), (1, 1, 1, False),
                                               (70, 132, 132, True)])
def test_rows_are_rounded_in_place(rows, cols, ldx, vec, rng):
    source = special_values(rng, (rows, ldx))
    got = copied(tc.rounded_rows, source, rows, cols, ldx, tc.grid(rows, cols, False), vec)
    expected = tf32_round(source[:, :cols])
    np.testing.assert_array_equal(got[:, :cols].view(np.uint32), expected.view(np.uint32))
    assert (got[:, cols:] == 0).all()


@pytest.mark.parametrize("rows,cols,ldx", [(37, 45, 40), (1, 1, 1), (70, 33, 71)])
def test_transposed_rows_are_rounded(rows, cols, ldx, rng):
    """Y[r, c] = TF32(X[c, r]): X is cols x ldx (its first rows columns used)."""
    source = special_values(rng, (cols, ldx))
    got = copied(tc.rounded_transpose, source, rows, cols, ldx, tc.grid(rows, cols, True))
    expected = tf32_round(source[:, :rows].T)
    np.testing.assert_array_equal(got[:, :cols].view(np.uint32), expected.view(np.uint32))
    assert (got[:, cols:] == POISON).all()


def test_a_grid_smaller_than_the_copy_strides_over_it(rng):
    """The grid's second dimension is capped (65535 blocks); each block then moves several tiles."""
    rows, cols = 70, 40
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    got = copied(tc.rounded_rows, x, rows, cols, cols, (tc.grid(rows, cols, False)[0], 1), True)
    np.testing.assert_array_equal(got[:, :cols], tf32_round(x))
    got = copied(tc.rounded_transpose, x, cols, rows, cols, (tc.grid(cols, rows, True)[0], 1))
    np.testing.assert_array_equal(got[:, :rows], tf32_round(x.T))
    assert tc.grid(10, 10**7, True)[1] == tc.MAX_GRID_Y and tc.grid(10**7, 10, False)[1] == tc.MAX_GRID_Y


@pytest.mark.parametrize("layout,names", [("nn", ["rounded_rows", "rounded_transpose"]), ("tn", ["rounded_transpose"]),
                                          ("nt", ["rounded_rows"])])
def test_the_copy_kernels_compiled_ahead_are_the_ones_launched_with_those_types(layout, names, rng, monkeypatch):
    """A variant on rounded copies names, as kernels to compile ahead with it, the copy kernels its layout launches,
    each with the signature of the arguments it is launched with; other variants name none."""
    from autotune import build_kernel

    params = {"MMA": 8, "WGMMA": 1, "BK": 32, "BM": 64, "BN": 64, "ASYNC_STAGES": 3}
    k = build_kernel("matmul", params, "float32", layout=layout, precision="tf32")
    assert [helper.__name__ for helper, _ in k.helper_kernels()] == names
    launched = []
    monkeypatch.setattr(k, "_enqueue", lambda configured, *args: launched.append(args))  # k is a cached object
    M, N, K = 33, 40, 21
    A, B = (cuda.to_device(np.zeros(n, np.float32)) for n in (M * K, K * N))
    k.launch(A, B, cuda.device_array(M * N, np.float32), M, N, K, M if layout[0] == "t" else K,
             K if layout[1] == "t" else N)
    assert len(launched) == 3  # the two copies, then the multiply
    for (helper, signature), args in zip(k.helper_kernels(), launched):  # A's copy is launched first
        assert_launched_as_signed(args, signature, helper.__name__)
    other = build_kernel("matmul", {**params, "ASYNC_STAGES": 0}, "float32", layout=layout, precision="tf32")
    assert other.helper_kernels() == []
