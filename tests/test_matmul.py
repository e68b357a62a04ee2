"""Matmul results in the CUDA simulator against float64 NumPy, on odd shapes, with NaN-poisoned outputs."""
import numpy as np
import pytest
from checks import assert_matmul_close, poisoned, random_matrix, small_integers
from numba import cuda

from autotune import build_kernel
from autotune.core.space import load_space
from autotune.families.matmul.config import dynamic_shared_bytes

# 1, primes, K = 1, tall and skinny, and sizes that are multiples of no tile size.
SHAPES = [(1, 1, 1), (7, 13, 5), (37, 29, 41), (17, 19, 1), (130, 3, 9)]


def operands(rng, M, N, K, dtype, layout, make=random_matrix):
    A = make(rng, (M, K), dtype)
    B = make(rng, (K, N), dtype)
    a_arg = np.ascontiguousarray(A.T).T if layout[0] == "t" else A
    b_arg = np.ascontiguousarray(B.T).T if layout[1] == "t" else B
    return A, B, a_arg, b_arg


def run(kernel, rng, shape, dtype, layout="nn", make=random_matrix):
    M, N, K = shape
    A, B, a_arg, b_arg = operands(rng, M, N, K, dtype, layout, make)
    out = poisoned((M, N), dtype)
    kernel(cuda.to_device(a_arg) if layout == "nn" else a_arg, b_arg, out=out)
    return out.copy_to_host(), A, B


@pytest.mark.parametrize("strategy", ["naive", "shared16"])
@pytest.mark.parametrize("shape", SHAPES)
def test_seed_kernels(strategy, shape, rng):
    k = build_kernel("matmul", {"strategy": strategy})
    C, A, B = run(k, rng, shape, "float32")
    assert_matmul_close(C, A, B)


def covering(dtype, layout="nn"):
    # Every simulated thread is a Python thread and an emulated mma is two block barriers: tensor-core variants are
    # drawn with small blocks (each MMA value is still pinned once; test_fp64_tensor_core_variants has more).
    cheap = {"MMA": (0,), "BM": (16, 32, 64), "BN": (16, 32, 64)}
    sample, _ = load_space("matmul").covering_sample(dtype=dtype, args={"layout": layout}, cheap=cheap)
    return [c for c in sample if c["strategy"] == "tiled"]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_covering_sample_of_tiled_variants(dtype, rng):
    configs = covering(dtype)
    assert len(configs) >= 4
    for params in configs:
        k = build_kernel("matmul", params, dtype)
        for shape in [(7, 13, 5), (21, 19, 37), (17, 19, 1)]:  # a partial tile; whole and partial ones; K = 1
            C, A, B = run(k, rng, shape, dtype)
            assert_matmul_close(C, A, B)


@pytest.mark.parametrize("layout", ["tn", "nt", "tt"])
@pytest.mark.parametrize("params", [{"strategy": "naive"}, {"strategy": "shared16"},
                                    {"BM": 32, "BN": 32, "TM": 4, "TN": 2, "BK": 8, "VEC": 2, "UNROLL_K": 4},
                                    {"BM": 32, "BN": 32, "TM": 2, "TN": 4, "BK": 16, "VEC": 4, "A_SMEM": "mmajor",
                                     "UNROLL_K": 1, "SPLIT_K": 2}])
def test_transposed_layouts(layout, params, rng):
    k = build_kernel("matmul", params, layout=layout)
    C, A, B = run(k, rng, (37, 29, 41), "float32", layout)
    assert_matmul_close(C, A, B)


@pytest.mark.parametrize("layout", ["tn", "nt", "tt"])
def test_transposed_device_operands_are_read_in_place(layout, rng, monkeypatch):
    """A transposed operand already on the device is read where it lies: Numba's DeviceNDArray.T is a transposing
    copy (a kernel launch and an allocation per call on the GPU), so it must never be called."""
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    def copy(*args, **kwargs):
        raise AssertionError("a device array was transposed (copied)")

    monkeypatch.setattr(FakeCUDAArray, "transpose", copy)
    A, B, a_arg, b_arg = operands(rng, 37, 29, 41, "float32", layout)

    def on_device(x, transposed):  # as the error message advises for a transposed device array
        return cuda.to_device(np.ascontiguousarray(x.T)).ravel().reshape(x.shape, order="F") if transposed \
            else cuda.to_device(x)

    out = poisoned((37, 29), "float32")
    kernel = build_kernel("matmul", {"strategy": "naive"}, layout=layout)
    kernel(on_device(A, layout[0] == "t"), on_device(B, layout[1] == "t"), out=out)
    assert_matmul_close(out.copy_to_host(), A, B)


ASYNC = {"BM": 32, "BN": 32, "TM": 4, "TN": 2, "BK": 8, "VEC": 2, "UNROLL_K": 4, "ASYNC_STAGES": 3}
ASYNC_MMAJOR_SPLIT = {"BM": 32, "BN": 32, "TM": 2, "TN": 4, "BK": 16, "VEC": 4, "A_SMEM": "mmajor", "UNROLL_K": 1,
                      "SPLIT_K": 2, "ASYNC_STAGES": 2}
ASYNC_DYNAMIC = {"BM": 64, "BN": 64, "TM": 8, "TN": 8, "BK": 32, "VEC": 4, "THREAD_LAYOUT": "strided",
                 "UNROLL_K": 8, "ASYNC_STAGES": 4}


@pytest.mark.parametrize("layout", ["nn", "tn", "nt", "tt"])
@pytest.mark.parametrize("params", [ASYNC, ASYNC_MMAJOR_SPLIT, ASYNC_DYNAMIC])
def test_async_pipeline_and_dynamic_shared_memory(layout, params, rng):
    # K = 97 runs through several pipeline stages and ends in a partial tile; the first two shapes have fewer K
    # tiles than stages.
    k = build_kernel("matmul", params, layout=layout)
    for shape in [(7, 13, 5), (37, 29, 41), (19, 71, 97)]:
        C, A, B = run(k, rng, shape, "float32", layout)
        assert_matmul_close(C, A, B)


EDGE_BASE = {"BM": 32, "BN": 32, "TM": 4, "TN": 4, "BK": 8, "VEC": 4, "UNROLL_K": 4}


STAGINGS = [{"PREFETCH": 0}, {"PREFETCH": 1}, {"ASYNC_STAGES": 2}, {"PREFETCH": 1, "SPLIT_K": 2, "A_SMEM": "mmajor"}]


@pytest.mark.parametrize("edge", ["interior", "clamp"])
@pytest.mark.parametrize("layout", ["nn", "tt"])
@pytest.mark.parametrize("staging", STAGINGS)
def test_whole_k_steps_inside_and_at_the_matrix_edges(edge, layout, staging, rng):
    # 72 x 68 x 44 with 32 x 32 tiles: four blocks lie inside both matrices and take whole BK steps without
    # tests; five cross an edge, where whole steps are checked (EDGE interior) or read clamped rows and columns
    # (clamp). K ends in a half tile, which is checked. Rows of A, B and their transposes are 16-byte aligned.
    k = build_kernel("matmul", {**EDGE_BASE, **staging, "EDGE": edge}, layout=layout)
    C, A, B = run(k, rng, (72, 68, 44), "float32", layout)
    assert_matmul_close(C, A, B)


@pytest.mark.parametrize("layout", ["nn", "tn", "nt", "tt"])
@pytest.mark.parametrize("staging", STAGINGS[1:3])
def test_clamped_edges_with_unaligned_operands(layout, staging, rng):
    # Rows of 67 or 43 elements break 16-byte vectors of one operand at a time, so no block takes whole steps. An
    # operand whose vectors span K still clamps its M or N coordinate; one whose vectors span M or N cannot (VEC
    # scalars from a clamped start would shift), so it tests each element.
    k = build_kernel("matmul", {**EDGE_BASE, **staging, "EDGE": "clamp"}, layout=layout)
    for shape in [(37, 44, 67), (37, 43, 64), (43, 36, 64)]:
        C, A, B = run(k, rng, shape, "float32", layout)
        assert_matmul_close(C, A, B)


def test_tiles_over_48_kb_use_dynamic_shared_memory():
    assert dynamic_shared_bytes(ASYNC_DYNAMIC, "float32") == 4 * (64 + 64) * 32 * 4
    assert dynamic_shared_bytes(ASYNC, "float32") == 0
    assert "cuda.shared.array(0," in build_kernel("matmul", ASYNC_DYNAMIC).source


def test_integer_data_is_exact(rng):
    k = build_kernel("matmul", {"BM": 32, "BN": 64, "TM": 4, "TN": 4, "BK": 16, "VEC": 4, "SPLIT_K": 4})
    C, A, B = run(k, rng, (33, 65, 257), "float32", make=small_integers)
    np.testing.assert_array_equal(C, A.astype(np.float64) @ B)


def slice_ordered_product(A, B, k_chunk):
    """A @ B as the simulated kernel computes it with the slices summed in slice order: each slice's products
    rounded to the dtype and added k by k, then the slices' partials added one after another."""
    C = np.zeros((A.shape[0], B.shape[1]), A.dtype)
    for k0 in range(0, A.shape[1], k_chunk):
        partial = np.zeros_like(C)
        for k in range(k0, min(k0 + k_chunk, A.shape[1])):
            partial = partial + A[:, k, None] * B[None, k, :]
        C = C + partial
    return C


def test_last_block_split_k_is_bitwise_the_slices_in_order(rng):
    """The last block of a tile, whichever slice it computed, sums the slices' partials in slice order: C does not
    depend on which block finished last. In the simulator the last is always the highest slice, so summing its own
    registers first would differ from the reference in the low bits."""
    params = {"BM": 32, "BN": 16, "TM": 4, "TN": 2, "BK": 8, "VEC": 2, "UNROLL_K": 2, "SPLIT_K": 4,
              "SPLIT_ADD": "last_block"}
    C, A, B = run(build_kernel("matmul", params), rng, (37, 29, 41), "float32")
    np.testing.assert_array_equal(C, slice_ordered_product(A, B, k_chunk=16))  # 41 -> 3 slices of 16, 16, 9


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_last_block_split_k_sums_the_slices_in_the_kernel(dtype, rng):
    """SPLIT_ADD last_block: C is not zeroed first (the output is NaN-poisoned) and the last block of each tile sums
    the slices; a second call on new data is right too (the tile counters reset themselves), and so is a K too
    short for every slice (fewer slices launch: 9 = two 8-deep steps)."""
    params = {"BM": 32, "BN": 16, "TM": 4, "TN": 2, "BK": 8, "VEC": 2, "UNROLL_K": 2, "SPLIT_K": 4,
              "SPLIT_ADD": "last_block"}
    k = build_kernel("matmul", params, dtype)
    for shape in [(37, 29, 41), (37, 29, 41), (17, 19, 9)]:
        C, A, B = run(k, rng, shape, dtype)
        assert_matmul_close(C, A, B)


def test_numpy_in_numpy_out(rng):
    A, B = random_matrix(rng, (9, 4), "float32"), random_matrix(rng, (4, 6), "float32")
    C = build_kernel("matmul", {"strategy": "naive"})(A, B)
    assert isinstance(C, np.ndarray)
    assert_matmul_close(C, A, B)


def test_vector_path_falls_back_when_rows_are_unaligned(rng):
    # K = 5 is no multiple of VEC = 4, so rows of A start unaligned and the scalar loads must take over.
    k = build_kernel("matmul", {"BM": 32, "BN": 32, "TM": 4, "TN": 4, "BK": 8, "VEC": 4})
    C, A, B = run(k, rng, (19, 23, 5), "float32")
    assert_matmul_close(C, A, B)


@pytest.mark.parametrize("A_shape, B_shape, error, message", [
    ((3, 4), (5, 6), ValueError, "do not align"),
    ((3,), (3, 6), ValueError, "must be 2-D"),
    ((0, 4), (4, 6), ValueError, "M, N, K >= 1"),
])
def test_shape_errors(A_shape, B_shape, error, message):
    k = build_kernel("matmul", {"strategy": "naive"})
    with pytest.raises(error, match=message):
        k(np.ones(A_shape, np.float32), np.ones(B_shape, np.float32))


def test_dtype_and_layout_errors():
    k = build_kernel("matmul", {"strategy": "naive"})
    with pytest.raises(TypeError, match="dtype float64; this kernel was built for float32"):
        k(np.ones((2, 2)), np.ones((2, 2)))
    with pytest.raises(ValueError, match="transposed view: build with a 't' layout"):
        k(np.ones((3, 2), np.float32).T, np.ones((3, 2), np.float32))
    with pytest.raises(ValueError, match="must be C-contiguous"):
        k(cuda.to_device(np.ones((4, 4), np.float32))[:, ::2], np.ones((2, 2), np.float32))
    with pytest.raises(TypeError, match="must be a NumPy array, a Numba device array"):
        k([[1.0]], np.ones((1, 1), np.float32))
    with pytest.raises(ValueError, match=r"out must be a C-contiguous \(2, 2\) array"):
        k(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32), out=cuda.device_array((3, 2), np.float32))


# fp64 tensor-core variants: the simulator emulates mma.sync from the PTX ISA's fragment layouts, so these check
# which lane loads which element of A and B and where its results land, on interior and edge blocks.
MMA = [({"BM": 32, "BN": 16, "TM": 2, "TN": 2, "BK": 16, "VEC": 1, "UNROLL_K": 8, "MMA": 4, "A_SMEM": "mmajor"}, "nn"),
       ({"BM": 32, "BN": 32, "TM": 4, "TN": 4, "BK": 8, "VEC": 2, "UNROLL_K": 8, "MMA": 8, "EDGE": "clamp"}, "tt"),
       ({"BM": 32, "BN": 16, "TM": 2, "TN": 2, "BK": 16, "VEC": 1, "UNROLL_K": 16, "MMA": 16, "SPLIT_K": 2,
         "PREFETCH": 0}, "tn"),
       ({"BM": 32, "BN": 32, "TM": 4, "TN": 4, "BK": 16, "VEC": 2, "UNROLL_K": 16, "MMA": 16, "A_SMEM": "mmajor",
         "ASYNC_STAGES": 3, "EDGE": "clamp"}, "nt"),
       ({"BM": 32, "BN": 32, "TM": 4, "TN": 4, "BK": 16, "VEC": 2, "UNROLL_K": 8, "MMA": 8, "ASYNC_STAGES": 2,
         "SPLIT_K": 2, "SPLIT_ADD": "last_block"}, "tt"),
       ({"BM": 32, "BN": 16, "TM": 2, "TN": 2, "BK": 16, "VEC": 2, "UNROLL_K": 16, "MMA": 16, "A_SMEM": "mmajor",
         "ASYNC_STAGES": 4}, "nn")]


@pytest.mark.parametrize("params,layout", MMA)
def test_fp64_tensor_core_variants(params, layout, rng):
    k = build_kernel("matmul", params, "float64", layout=layout)
    for shape in [(7, 13, 5), (37, 29, 41)]:
        C, A, B = run(k, rng, shape, "float64", layout)
        assert_matmul_close(C, A, B)


@pytest.mark.parametrize("params", [{"strategy": "naive"}, {"strategy": "shared16"},
                                    {**EDGE_BASE, "SPLIT_K": 2},
                                    {**EDGE_BASE, "SPLIT_K": 2, "SPLIT_ADD": "last_block"}])
@pytest.mark.parametrize("alias", ["A", "B", "A shifted"])
def test_out_overlapping_an_operand_gives_numpys_result(params, alias, rng):
    """out= aliasing A or B (the same memory, or a range that starts inside it) is computed into scratch and copied:
    NumPy's result, never one computed from partly overwritten operands."""
    n = 37
    S, T = small_integers(rng, (n, n), np.float32), small_integers(rng, (n, n), np.float32)
    base = cuda.to_device(np.concatenate([S.ravel(), np.zeros(n, np.float32)]))
    dS = base[:n * n].reshape(n, n)
    dT = cuda.to_device(T)
    out = {"A": dS, "B": dT, "A shifted": base[n:n + n * n].reshape(n, n)}[alias]
    k = build_kernel("matmul", params)
    k(dS, dT, out=out)
    np.testing.assert_array_equal(out.copy_to_host(), S.astype(np.float64) @ T)


# TF32 tensor-core variants (precision tf32 and 3xtf32): the simulator rounds fragments as cvt.rna.tf32.f32 does and
# sums 3xtf32's three products; checked by the family's own oracle, the exact integer case and the error of normal
# data against twice the reference rounding's.
TF32 = [({"BM": 32, "BN": 32, "TM": 2, "TN": 4, "BK": 16, "VEC": 4, "UNROLL_K": 8, "MMA": 8, "A_SMEM": "mmajor"}, "nn",
         "3xtf32"),
        ({"BM": 32, "BN": 16, "TM": 2, "TN": 2, "BK": 8, "VEC": 1, "UNROLL_K": 4, "MMA": 4, "EDGE": "clamp"}, "tt",
         "tf32"),
        ({"BM": 32, "BN": 32, "TM": 4, "TN": 2, "BK": 16, "VEC": 2, "UNROLL_K": 8, "MMA": 8, "ASYNC_STAGES": 3,
          "SPLIT_K": 2, "SPLIT_ADD": "last_block"}, "tn", "3xtf32"),
        ({"BM": 32, "BN": 32, "TM": 2, "TN": 4, "BK": 8, "VEC": 2, "UNROLL_K": 8, "MMA": 8, "PREFETCH": 0,
          "SPLIT_K": 2}, "nt", "tf32")]


def check_with_oracle(kernel, problem, rng) -> list:
    """What the family's oracle says of each verification case of ``problem`` (None where right)."""
    from autotune.core.oracle import poison

    impl = problem.impl
    found = []
    for case in impl.verification(problem, impl.inputs(problem, rng, "check"), rng):
        out = cuda.to_device(np.full(problem.out_shape, poison(problem.out_dtype), problem.out_dtype))
        kernel(*case.inputs, out=out)
        found.append(impl.verify(problem, case, out.copy_to_host(), rng))
    return found


@pytest.mark.parametrize("params,layout,precision", TF32)
def test_tf32_tensor_core_variants(params, layout, precision, rng):
    from autotune.core.problem import Problem

    k = build_kernel("matmul", params, "float32", layout=layout, precision=precision)
    for shape in [(7, 13, 5), (37, 29, 41)] if precision == "tf32" else [(37, 29, 41)]:
        problem = Problem("matmul", shape, "float32", {"layout": layout, "precision": precision})
        assert check_with_oracle(k, problem, rng) == [None, None]


@pytest.mark.parametrize("k", [1, 2])
def test_the_3xtf32_bound_at_tiny_k_passes_three_products_and_fails_one(k, rng):
    """Where K is 1 or 2 the bound is its floor: the three products of 3xtf32's split parts (each exact, their sum
    rounded once) lie within it, one product of the rounded operands alone (tf32's error) does not."""
    from autotune.core.oracle import relative_error
    from autotune.families.matmul.reference import error_bound, reference, tf32_round

    A = rng.standard_normal((64, k)).astype(np.float32)
    B = rng.standard_normal((k, 64)).astype(np.float32)
    exact = reference(A, B)
    big_a, big_b = tf32_round(A), tf32_round(B)
    small_a, small_b = tf32_round(A - big_a), tf32_round(B - big_b)
    wide = [x.astype(np.float64) for x in (big_a, big_b, small_a, small_b)]
    three = (wide[0] @ wide[1] + wide[0] @ wide[3] + wide[2] @ wide[1]).astype(np.float32)
    one = (wide[0] @ wide[1]).astype(np.float32)
    bound = error_bound("3xtf32", A, B, exact)
    assert relative_error(three, exact) <= bound < relative_error(one, exact)


def test_the_oracle_tells_tf32_from_3xtf32(rng):
    """A tf32 kernel passes the exact integer case of a 3xtf32 problem and fails its error case; 3xtf32 and the
    IEEE seed kernel pass a tf32 problem (more accuracy is never refused)."""
    from autotune.core.problem import Problem

    params = TF32[0][0]
    shape = (17, 8, 24)
    three = Problem("matmul", shape, "float32", {"precision": "3xtf32"})
    tf32 = Problem("matmul", shape, "float32", {"precision": "tf32"})
    exact, error = check_with_oracle(build_kernel("matmul", params, precision="tf32"), three, rng)
    assert exact is None and "relative error" in error and "3xtf32 results" in error
    assert check_with_oracle(build_kernel("matmul", params, precision="3xtf32"), tf32, rng) == [None, None]
    assert check_with_oracle(build_kernel("matmul", {"strategy": "shared16"}), tf32, rng) == [None, None]


def test_tf32_rounding_is_cvt_rna():
    from autotune.families.matmul.reference import tf32_round

    one = 1.0
    x = np.array([one, one + 2**-11, one + 2**-10 + 2**-11, -(one + 2**-11), one + 2**-11 - 2**-23, np.inf, -np.inf,
                  np.nan, -0.0], np.float32)
    want = [one, one + 2**-10, one + 2**-9, -(one + 2**-10), one, np.inf, -np.inf, np.nan, -0.0]
    got = tf32_round(x)
    np.testing.assert_array_equal(got, np.array(want, np.float32))
    assert np.signbit(got[-1])


# float16 on the tensor cores: mma.sync m16n8k16 with float32 accumulators, the result rounded once to float16
# (NumPy's float16 matmul). Each A_SMEM, cp.async (VEC 1: plain copies, cp.async has no 2-byte form), split-K,
# clamped edges and every layout, through the family's oracle: integer data exact in the float16 rounding of the
# true sums, and normal data within twice the error of a float32 FMA chain rounded to float16.
F16_MMA = {"MMA": 16, "UNROLL_K": 16, "BK": 16}
F16 = [({**F16_MMA, "BM": 32, "BN": 32, "TM": 4, "TN": 4, "VEC": 4, "A_SMEM": "mmajor", "ASYNC_STAGES": 2}, "nn"),
       ({**F16_MMA, "BM": 16, "BN": 32, "BK": 32, "TM": 2, "TN": 8, "VEC": 2, "EDGE": "clamp", "SPLIT_K": 2,
         "SPLIT_ADD": "last_block"}, "tn"),
       ({**F16_MMA, "BM": 32, "BN": 32, "TM": 4, "TN": 4, "VEC": 1, "ASYNC_STAGES": 3}, "nt"),
       ({**F16_MMA, "BM": 32, "BN": 32, "TM": 4, "TN": 4, "VEC": 4, "A_SMEM": "mmajor", "PREFETCH": 0}, "tt"),
       ({**F16_MMA, "BM": 32, "BN": 32, "BK": 32, "TM": 2, "TN": 4, "VEC": 8, "A_SMEM": "mmajor", "ASYNC_STAGES": 3,
         "EDGE": "clamp"}, "nn"),
       ({**F16_MMA, "BM": 32, "BN": 32, "BK": 32, "TM": 2, "TN": 4, "VEC": 8, "ASYNC_STAGES": 0}, "tn")]


@pytest.mark.parametrize("params,layout", F16)
def test_float16_tensor_core_variants(params, layout, rng):
    """(VEC 8 moves 16 bytes at a time where a row's start allows it: the third shape's K and N are multiples of 8.)"""
    from autotune.core.problem import Problem

    k = build_kernel("matmul", params, "float16", layout=layout)
    for shape in [(37, 29, 41), (17, 19, 1)] + ([(37, 24, 40)] if params["VEC"] == 8 else []):
        problem = Problem("matmul", shape, "float16", {"layout": layout})
        assert check_with_oracle(k, problem, rng) == [None, None], (shape, params)


# bfloat16 on the same kernels as float16, its tiles holding bits: every layout, both result dtypes, split-K, edges,
# through the family's oracle (the exact integer case rounded to bfloat16, and normal data within twice the error of
# the float32 FMA chain rounded to bfloat16).
BF16 = [({**F16_MMA, "BM": 32, "BN": 32, "TM": 2, "TN": 4, "VEC": 4, "A_SMEM": "mmajor", "ASYNC_STAGES": 2}, "nn",
         None),
        ({**F16_MMA, "BM": 32, "BN": 32, "TM": 2, "TN": 4, "VEC": 4, "SPLIT_K": 2, "SPLIT_ADD": "last_block"}, "tn",
         None),
        ({**F16_MMA, "BM": 32, "BN": 32, "BK": 32, "TM": 2, "TN": 4, "VEC": 8, "ASYNC_STAGES": 3, "EDGE": "clamp"},
         "tt", "float32")]


@pytest.mark.parametrize("params,layout,out_dtype", BF16)
def test_bfloat16_tensor_core_variants(params, layout, out_dtype, rng):
    from autotune.core.problem import Problem

    family = {"layout": layout, **({"out_dtype": out_dtype} if out_dtype else {})}
    k = build_kernel("matmul", params, "bfloat16", **family)
    for shape in [(37, 29, 41)] + ([(17, 19, 1)] if layout == "nn" else []):
        problem = Problem("matmul", shape, "bfloat16", family)
        assert problem.out_dtype == (out_dtype or "bfloat16")
        assert check_with_oracle(k, problem, rng) == [None, None], (shape, params)


# float16 on Hopper's wgmma (matmul_wgmma.py.j2), in the simulator's stand-in, which reads the 128-byte-swizzled tiles
# the way the hardware does (an address's bits 4-6 exclusive-or'ed with bits 7-9), independently of how the copies
# write them. Every layout, both result dtypes, one and two warpgroups, 3 and 4 stages; edges in M, N and K (70 x 90
# x 130: partial tiles in each, and rows whose starts are not 16-byte aligned; 70 x 72 x 136: aligned rows, so the
# first block's first two K steps take the unchecked copies), through the family's oracle.
WGMMA = {"MMA": 16, "WGMMA": 1, "BK": 64, "BM": 64, "BN": 64}
EDGES, ALIGNED = (70, 90, 130), (70, 72, 136)
WGMMA_CASES = [({**WGMMA, "ASYNC_STAGES": 3}, "float16", {"layout": "nn"}, [EDGES, ALIGNED, (1, 1, 1)]),
               ({**WGMMA, "ASYNC_STAGES": 4}, "float16", {"layout": "tn", "out_dtype": "float32"}, [ALIGNED]),
               ({**WGMMA, "ASYNC_STAGES": 3, "GROUP_M": 1}, "float16", {"layout": "nt"}, [ALIGNED]),
               ({**WGMMA, "BM": 128, "ASYNC_STAGES": 3}, "float16", {"layout": "tt", "out_dtype": "float32"}, [EDGES]),
               ({**WGMMA, "ASYNC_STAGES": 3}, "bfloat16", {"layout": "tn"}, [EDGES]),
               ({**WGMMA, "ASYNC_STAGES": 4}, "bfloat16", {"layout": "nt", "out_dtype": "float32"}, [ALIGNED]),
               # fed by the TMA from a producer warpgroup: the simulator's copy places each box as the TMA does
               # (every layout's boxes and panels); EDGES' rows are not 16-byte aligned, so A and B are first copied
               # to aligned rows
               ({**WGMMA, "ASYNC_STAGES": 3, "TMA": 1}, "float16", {"layout": "nn"}, [EDGES, ALIGNED, (1, 1, 1)]),
               ({**WGMMA, "BM": 128, "ASYNC_STAGES": 4, "TMA": 1}, "bfloat16", {"layout": "tt", "out_dtype": "float32"},
                [EDGES]),
               ({**WGMMA, "BN": 128, "ASYNC_STAGES": 3, "TMA": 1, "GROUP_M": 1}, "float16", {"layout": "tn"}, [EDGES]),
               ({**WGMMA, "ASYNC_STAGES": 4, "TMA": 1}, "float16", {"layout": "nt", "out_dtype": "float32"}, [ALIGNED]),
               # the TMA's deeper pipelines: K 1100 is 18 steps, around the 8 stages' ring twice and a quarter
               ({**WGMMA, "ASYNC_STAGES": 8, "TMA": 1}, "float16", {"layout": "nn"}, [(70, 60, 1100), (1, 1, 1)]),
               # K split over blocks, the partial tiles summed by each tile's last block (SPLIT_ADD last_block):
               # K 330 in slices of 192 and 138 (SPLIT_K 2) or 128, 128 and 74 (SPLIT_K 4), K 1 in one slice, K 200 in
               # 128 and 72; cp.async and TMA (a producer warpgroup first), one and two consumer warpgroups
               ({**WGMMA, "ASYNC_STAGES": 3, "SPLIT_K": 2, "SPLIT_ADD": "last_block"}, "float16", {"layout": "nn"},
                [(70, 90, 330), (1, 1, 1)]),
               ({**WGMMA, "ASYNC_STAGES": 3, "TMA": 1, "SPLIT_K": 4, "SPLIT_ADD": "last_block"}, "float16",
                {"layout": "nt"}, [(70, 90, 330)]),
               ({**WGMMA, "BM": 128, "ASYNC_STAGES": 4, "TMA": 1, "SPLIT_K": 2, "SPLIT_ADD": "last_block"},
                "bfloat16", {"layout": "tt"}, [(130, 70, 200)])]


def test_wgmma_applies_to_float16_tiles_of_its_shape():
    """WGMMA is a float16 choice of MMA 16, BK 64 is its depth alone, and the parameters of the warp-level kernels
    (register tiles, vector width, ...) do not apply to it; it splits K with SPLIT_ADD last_block only, and not where
    A comes from registers (the tf32 kernel of ASYNC_STAGES 0)."""
    space = load_space("matmul")
    params = {**WGMMA, "ASYNC_STAGES": 4}
    checked = space.validate(params, dtype="float16", args={"layout": "nn"})
    assert checked == {"strategy": "tiled", **params, "TMA": 0, "GROUP_M": 8, "SPLIT_K": 1}
    split = {**params, "SPLIT_K": 4, "SPLIT_ADD": "last_block"}
    assert space.validate(split, dtype="float16", args={"layout": "nn"})["SPLIT_K"] == 4
    for add in ("atomic", "vector"):
        with pytest.raises(ValueError, match="SPLIT_ADD"):
            space.validate({**split, "SPLIT_ADD": add}, dtype="bfloat16", args={"layout": "nn"})
    with pytest.raises(ValueError, match="not with A from registers"):
        space.validate({**WGMMA_TF32, "SPLIT_K": 2, "SPLIT_ADD": "last_block"}, dtype="float32",
                       args={"layout": "nn", "precision": "tf32"})
    for dtype in ("float32", "float64"):
        with pytest.raises(ValueError, match="WGMMA=1 (multiplies float16|on float32 issues)"):
            space.validate(params, dtype=dtype, args={"layout": "nn", "precision": "ieee"})
    for bad, message in (({"BK": 32}, "BK must be 64"), ({"BN": 32}, "64, 128 or 256"),
                         ({"ASYNC_STAGES": 2}, "ASYNC_STAGES must be 3 or 4"),
                         ({"BM": 256, "BN": 256}, "registers per thread"),
                         ({"BM": 256, "BN": 256, "TMA": 1}, "640 threads leave 102 registers")):
        with pytest.raises(ValueError, match=message):
            space.validate({**params, **bad}, dtype="float16", args={"layout": "nn"})
    # the TMA's consumers hold the accumulators and little else: 128 x 256 fits the 170 registers of 384 threads
    assert space.validate({**params, "BM": 128, "BN": 256, "TMA": 1}, dtype="bfloat16", args={"layout": "tt"})
    # the TMA's deeper pipelines, where their stages fit the shared memory (128 x 128 in 8: 256 KB)
    for deep in ({"BN": 128, "ASYNC_STAGES": 8}, {"BM": 128, "BN": 128, "ASYNC_STAGES": 6}):
        assert space.validate({**params, **deep, "TMA": 1}, dtype="float16", args={"layout": "nn"})["ASYNC_STAGES"] > 4
    # ... and offered to a tuner: its space narrowed to the dtype keeps them, and an 8-stage winner's neighbours
    # hold the 6-stage variant (a rule reading ASYNC_STAGES alone would drop both before any search)
    tuned = space.for_dtype("float16", {"layout": "nn"})
    assert tuned.params["ASYNC_STAGES"].values == (0, 2, 3, 4, 6, 8)
    deep = space.validate({**params, "BN": 128, "ASYNC_STAGES": 8, "TMA": 1}, dtype="float16", args={"layout": "nn"})
    near = tuned.neighbours(deep, dtype="float16", args={"layout": "nn"})
    assert {**deep, "ASYNC_STAGES": 6} in near and not any(n.get("ASYNC_STAGES") == 4 for n in near)
    with pytest.raises(ValueError, match="shared memory 263168 bytes"):
        space.validate({**params, "BM": 128, "BN": 128, "ASYNC_STAGES": 8, "TMA": 1}, dtype="float16",
                       args={"layout": "nn"})
    with pytest.raises(ValueError, match=r"3 or 4 \(6 and 8 with TMA=1\), not 8"):
        space.validate({**params, "ASYNC_STAGES": 8}, dtype="float16", args={"layout": "nn"})
    with pytest.raises(ValueError, match="ASYNC_STAGES=6 is a depth of the TMA-fed wgmma kernel"):
        space.validate({"BM": 64, "BN": 64, "BK": 32, "MMA": 16, "TM": 4, "TN": 4, "UNROLL_K": 16,
                        "ASYNC_STAGES": 6}, dtype="float16", args={"layout": "nn"})
    with pytest.raises(ValueError, match="ASYNC_STAGES must be 0 and TMA 0"):
        space.validate({**WGMMA_TF32, "ASYNC_STAGES": 4, "TMA": 1}, dtype="float32",
                       args={"layout": "nn", "precision": "3xtf32"})
    with pytest.raises(ValueError, match="does not apply"):
        space.validate({**params, "TM": 8}, dtype="float16", args={"layout": "nn"})
    with pytest.raises(ValueError, match="BK=64 is the depth of the float16 wgmma kernel"):
        space.validate({"BK": 64, "TM": 4, "TN": 4}, dtype="float32", args={"layout": "nn"})


# float32 on Hopper's TF32 wgmma (matmul_wgmma_tf32.py.j2): A from registers, B rounded (and split) into a swizzled
# shared tile whose k are permuted, in the simulator's stand-in, which takes A's fragments in the hardware's layout
# and reads B the way the hardware does; a change to the loads' or the stores' permutation fails here. Both
# precisions, every layout, one and two warpgroups, two B pieces per thread and more; edges (partial tiles, rows
# that are not 16-byte aligned) and aligned shapes (the unchecked loads). Their K is about half of float16's: with
# BK 32 it still gives two whole K steps and a partial one (70 x 90 x 66: rows 264 and 360 bytes long; 70 x 72 x 72:
# 16-byte-aligned rows), where float16's 130 and 136 took five steps of the simulator's slow TF32 stand-in.
WGMMA_TF32 = {"MMA": 8, "WGMMA": 1, "BK": 32, "BM": 64, "BN": 64, "ASYNC_STAGES": 0}
EDGES_TF32, ALIGNED_TF32 = (70, 90, 66), (70, 72, 72)
WGMMA_TF32_CASES = [(WGMMA_TF32, "float32", {"layout": "nn", "precision": "3xtf32"},
                     [EDGES_TF32, (64, 64, 64), (1, 1, 1)]),
                    ({**WGMMA_TF32, "GROUP_M": 1}, "float32", {"layout": "tn", "precision": "tf32"}, [ALIGNED_TF32]),
                    ({**WGMMA_TF32, "BM": 128}, "float32", {"layout": "nt", "precision": "tf32"}, [EDGES_TF32]),
                    ({**WGMMA_TF32, "BN": 128}, "float32", {"layout": "tt", "precision": "3xtf32"}, [ALIGNED_TF32]),
                    # tf32 on rounded copies: float16's kernel on K-major copies (nn: A copied, B transposed; tt:
                    # the reverse)
                    ({**WGMMA_TF32, "ASYNC_STAGES": 3}, "float32", {"layout": "nn", "precision": "tf32"},
                     [EDGES_TF32, (1, 1, 1)]),
                    ({**WGMMA_TF32, "BM": 128, "ASYNC_STAGES": 4, "GROUP_M": 1}, "float32",
                     {"layout": "tt", "precision": "tf32"}, [EDGES_TF32]),
                    # the same copies fed to it by the TMA
                    ({**WGMMA_TF32, "ASYNC_STAGES": 3, "TMA": 1}, "float32", {"layout": "tn", "precision": "tf32"},
                     [EDGES_TF32, (1, 1, 1)]),
                    ({**WGMMA_TF32, "BM": 128, "BN": 128, "ASYNC_STAGES": 4, "TMA": 1}, "float32",
                     {"layout": "nt", "precision": "tf32"}, [EDGES_TF32]),
                    # 6 stages: K 300 is 10 steps of 32
                    ({**WGMMA_TF32, "ASYNC_STAGES": 6, "TMA": 1}, "float32", {"layout": "tt", "precision": "tf32"},
                     [(70, 60, 300)])]


@pytest.mark.parametrize("params,dtype,family,shapes", WGMMA_CASES + WGMMA_TF32_CASES)
def test_wgmma_variants(params, dtype, family, shapes, rng):
    """Both wgmma kernels' cases (above) through the family's oracle."""
    from autotune.core.problem import Problem

    k = build_kernel("matmul", params, dtype, **family)
    for shape in shapes:
        assert check_with_oracle(k, Problem("matmul", shape, dtype, family), rng) == [None, None], (shape, params)


# A block per SM (SCHEDULE persistent, stream_k; the simulator stands in 2 SMs). Persistent: 9 tiles of 64 x 64
# (edges in M, N and K) walked as 5 and 4, 8 tiles of 128 x 64 as 4 and 4 (two consumer warpgroups, tt, float32
# C), one tile by one block. Stream-K: 150 x 60 x 330 is 3 tiles of 6 K steps, 9 steps a block, so the middle tile
# is summed from two partials; one tile of 6 steps is shared by both blocks, starting and ending inside it; 1 x 1 x 1
# is one step, one block; 100 x 150 x 150 in 128 x 64 tiles (two consumer warpgroups) is 3 tiles of 3 steps,
# shared unevenly (5 and 4 steps), the middle tile from two partials; tf32 on rounded copies (float32 tiles, BK 32)
# likewise at 150 x 60 x 170.
SCHEDULE_CASES = [({**WGMMA, "ASYNC_STAGES": 3, "TMA": 1, "SCHEDULE": "persistent"}, "float16", {"layout": "nn"},
                   [((150, 130, 70), 9), ((1, 1, 1), 1)]),
                  ({**WGMMA, "BM": 128, "ASYNC_STAGES": 4, "TMA": 1, "SCHEDULE": "persistent", "GROUP_M": 1},
                   "bfloat16", {"layout": "tt", "out_dtype": "float32"}, [((130, 200, 70), 8)]),
                  # C's float32 tile leaves in two parts of 128 columns (config.c_columns), the second tile's second
                  # part wholly right of N
                  ({**WGMMA, "BN": 256, "ASYNC_STAGES": 4, "TMA": 1, "SCHEDULE": "persistent"}, "float16",
                   {"layout": "nn", "out_dtype": "float32"}, [((70, 300, 70), 4)]),
                  ({**WGMMA, "ASYNC_STAGES": 3, "TMA": 1, "SCHEDULE": "stream_k"}, "float16", {"layout": "nt"},
                   [((150, 60, 330), 18), ((50, 60, 330), 6), ((1, 1, 1), 1)]),
                  ({**WGMMA, "BM": 128, "ASYNC_STAGES": 4, "TMA": 1, "SCHEDULE": "stream_k", "GROUP_M": 1},
                   "bfloat16", {"layout": "tn", "out_dtype": "float32"}, [((100, 150, 150), 9)]),
                  ({**WGMMA_TF32, "ASYNC_STAGES": 3, "TMA": 1, "SCHEDULE": "stream_k"}, "float32",
                   {"layout": "tn", "precision": "tf32"}, [((150, 60, 170), 18)]),
                  # the deeper pipelines: a block's tiles (6 K steps each) read the 8 or 6 stages' places in the
                  # shared memory, C's tile beside them (the mbarrier ring itself runs on the GPU alone: the simulator
                  # passes a stage between two block barriers)
                  ({**WGMMA, "ASYNC_STAGES": 8, "TMA": 1, "SCHEDULE": "persistent"}, "float16", {"layout": "nn"},
                   [((130, 130, 330), 9)]),
                  ({**WGMMA, "ASYNC_STAGES": 6, "TMA": 1, "SCHEDULE": "stream_k"}, "bfloat16", {"layout": "tn"},
                   [((150, 60, 330), 18)])]


@pytest.mark.parametrize("params,dtype,family,shapes", SCHEDULE_CASES)
def test_a_block_per_sm_walks_every_tile_and_every_k_step(params, dtype, family, shapes, monkeypatch, rng):
    """A persistent or Stream-K variant launches min(work, SMs) blocks (work: tiles, or all tiles' K steps), each
    walking its tiles or its share of the steps; every result is checked by the family's oracle, so a tile or a
    step left out or counted twice, or a partial summed from the wrong slot, fails. A Stream-K call repeated gives
    the same bits (its partials are summed in K order, whichever block comes last) and leaves its tile counters
    reset."""
    from autotune.core.device import SIMULATOR_SM_COUNT
    from autotune.core.problem import Problem
    from autotune.families.matmul import kernel as kernel_module

    k = build_kernel("matmul", params, dtype, **family)
    grids = []
    configure = kernel_module.configure
    monkeypatch.setattr(kernel_module, "configure", lambda f, grid, *rest: (
        grids.append(grid) if f is k.entry else None, configure(f, grid, *rest))[1])
    for shape, work in shapes:
        problem = Problem("matmul", shape, dtype, family)
        assert check_with_oracle(k, problem, rng) == [None, None], (shape, params)
        assert grids[-1] == (min(work, SIMULATOR_SM_COUNT), 1), (shape, grids)
    if params["SCHEDULE"] == "stream_k":
        inputs = problem.impl.inputs(Problem("matmul", shapes[0][0], dtype, family), rng, "check")
        assert np.array_equal(k(*inputs), k(*inputs), equal_nan=True)
        for _, _, (_, counters) in k._launches.values():
            assert not counters.copy_to_host().any()


# CLUSTER 2: blocks in pairs along N, block 2j + r taking tile r of pair tile j. 70 x 200 x 130 in 64 x 64 tiles:
# 2 x 4 tiles, two pairs per row of tiles, K steps of 3 (a partial one); 130 x 60 x 72: one tile along N, so each
# pair's second block lies wholly past N (stores nothing); nt with two consumer warpgroups and float32 C; a stack.
PAIR_CASES = [({**WGMMA, "ASYNC_STAGES": 3, "TMA": 1, "CLUSTER": 2}, "float16", {"layout": "nn"},
               [((70, 200, 130), 2 * 2 * 2), ((130, 60, 72), 3 * 2), ((1, 1, 1), 2)]),
              ({**WGMMA, "BM": 128, "ASYNC_STAGES": 4, "TMA": 1, "CLUSTER": 2, "GROUP_M": 1}, "bfloat16",
               {"layout": "nt", "out_dtype": "float32"}, [((200, 330, 70), 2 * 3 * 2)]),
              ({**WGMMA, "ASYNC_STAGES": 3, "TMA": 1, "CLUSTER": 2}, "float16", {"layout": "nn", "batch": "strided"},
               [((3, 70, 130, 70), 2 * 2 * 2)])]


@pytest.mark.parametrize("params,dtype,family,shapes", PAIR_CASES)
def test_blocks_in_pairs_take_the_two_tiles_side_by_side_along_n(params, dtype, family, shapes, monkeypatch, rng):
    """A CLUSTER 2 variant launches 2 x ceil(N tiles / 2) blocks per row of tiles (the simulator has no clusters:
    each block copies all of A's rows of its tile, where on the GPU each copies half for both), and every result,
    edges and a pair's block past N included, passes the family's oracle."""
    from autotune.core.problem import Problem
    from autotune.families.matmul import kernel as kernel_module

    k = build_kernel("matmul", params, dtype, **family)
    grids = []
    configure = kernel_module.configure
    monkeypatch.setattr(kernel_module, "configure", lambda f, grid, *rest: (
        grids.append((grid, rest[-1])) if f is k.entry else None, configure(f, grid, *rest))[1])
    for shape, blocks in shapes:
        problem = Problem("matmul", shape, dtype, family)
        found = check_with_oracle(k, problem, rng)
        assert len(found) >= 2 and not any(found), (shape, params, found)
        assert grids[-1][0][0] == blocks and grids[-1][1] == 2, (shape, grids)


def test_a_pair_is_one_tile_per_block_with_a_stored_as_is():
    """CLUSTER 2 is a TMA choice, of the tile schedule, K unsplit, A K-major (nn, nt), 16-bit operands; CLUSTER 1
    renders as before it existed (the header does not name it)."""
    space = load_space("matmul")
    pair = {**WGMMA, "ASYNC_STAGES": 4, "TMA": 1, "CLUSTER": 2}
    for layout in ("nn", "nt"):
        assert space.validate(pair, dtype="bfloat16", args={"layout": layout})["CLUSTER"] == 2
    for change, args, refusal in (({"SCHEDULE": "persistent"}, {}, "SCHEDULE must be tile"),
                                  ({"SCHEDULE": "stream_k"}, {}, "SCHEDULE must be tile"),
                                  ({"SPLIT_K": 2, "SPLIT_ADD": "last_block"}, {}, "SPLIT_K must be 1"),
                                  ({}, {"layout": "tn"}, "not transposed"),
                                  ({"BK": 32, "MMA": 8}, {"precision": "tf32"}, "not TF32's rounded copies")):
        with pytest.raises(ValueError, match=refusal):
            space.validate({**pair, **change}, dtype="float32" if "precision" in args else "float16",
                           args={"layout": "nn", **args})
    with pytest.raises(ValueError, match="CLUSTER does not apply here"):
        space.validate({**WGMMA, "ASYNC_STAGES": 4, "CLUSTER": 2}, dtype="float16", args={"layout": "nn"})
    single = build_kernel("matmul", {**pair, "CLUSTER": 1}, "float16", layout="nn")
    assert "CLUSTER" not in single.source and "cluster" not in single.source
    assert "'CLUSTER': 2" in build_kernel("matmul", pair, "float16", layout="nn").source


def test_schedules_apply_to_unsplit_tma_variants_of_one_matrix_whose_c_tile_fits():
    """SCHEDULE is a TMA choice; a block per SM takes K unsplit by SPLIT_K and one matrix, and C's tile, or the
    widest half, quarter, ... of its columns that fits, lies beside the stages in the shared memory with the kernel's
    static arrays (128 x 256 float16 with 3 stages: the whole tile; with 4 stages, 64 columns at a time; float32 C,
    32); a stack takes persistent, not Stream-K; the tuner tries a TMA start with each schedule. A Stream-K call
    whose K steps of all tiles do not fit 32 bits is refused, not left unwritten."""
    from autotune.families.matmul.config import c_columns

    space = load_space("matmul")
    params = {**WGMMA, "BM": 128, "BN": 256, "ASYNC_STAGES": 3, "TMA": 1, "SCHEDULE": "persistent"}
    assert space.validate(params, dtype="float16", args={"layout": "nn"})["SCHEDULE"] == "persistent"
    unfed = {k: v for k, v in params.items() if k != "SCHEDULE"} | {"TMA": 0}
    assert "SCHEDULE" not in space.validate(unfed, dtype="float16", args={"layout": "nn"})
    with pytest.raises(ValueError, match="SCHEDULE does not apply here"):
        space.validate({**unfed, "SCHEDULE": "stream_k"}, dtype="float16", args={"layout": "nn"})
    deep = {**params, "ASYNC_STAGES": 4}
    assert [c_columns(p, 2, out) for p in (params, deep) for out in (2, 4)] == [256, 128, 64, 32]
    for schedule in ("persistent", "stream_k"):
        for out in ({}, {"out_dtype": "float32"}):
            space.validate({**deep, "SCHEDULE": schedule}, dtype="float16", args={"layout": "nn", **out})
        with pytest.raises(ValueError, match="SPLIT_K must be 1"):
            space.validate({**params, "SCHEDULE": schedule, "SPLIT_K": 2, "SPLIT_ADD": "last_block"},
                           dtype="float16", args={"layout": "nn"})
    stacked = {"layout": "nn", "batch": "strided"}  # a stack's tiles are walked; Stream-K shares one matrix's steps
    assert space.validate({**params, "SCHEDULE": "persistent"}, dtype="float16", args=stacked)["SCHEDULE"] == \
        "persistent"
    with pytest.raises(ValueError, match="a batched problem takes tile or persistent"):
        space.validate({**params, "SCHEDULE": "stream_k"}, dtype="float16", args=stacked)
    # operands of 192 KB leave 34,688 bytes: 16 columns of float32 C need 256 x 24 x 4 = 24,576, 32 need 40,960;
    # 4 stages of 256 KB leave none
    wide = {**deep, "BM": 256, "BN": 256, "ASYNC_STAGES": 3}
    assert c_columns(wide, 2, 4) == 16
    with pytest.raises(ValueError, match="16 or more of C's columns .* 287872 bytes of shared memory exceed 232448"):
        space.validate({**wide, "ASYNC_STAGES": 4}, dtype="float16", args={"layout": "nn", "out_dtype": "float32"})
    assert dynamic_shared_bytes(deep, "float16") == 4 * (128 + 256) * 64 * 2 + 128 * 72 * 2 + 1024
    assert dynamic_shared_bytes(params, "float16") == 3 * (128 + 256) * 64 * 2 + 128 * 264 * 2 + 1024
    assert dynamic_shared_bytes(params, "float16", "float32") == 3 * (128 + 256) * 64 * 2 + 128 * 136 * 4 + 1024
    from autotune.core.device import DeviceInfo
    from autotune.core.problem import Problem

    start = space.validate({**params, "SCHEDULE": "tile"}, dtype="float16", args={"layout": "nn"})
    problem = Problem("matmul", (4096, 4096, 4096), "float16")
    forms = problem.impl.problem_starts(start, problem, DeviceInfo("GPU", (9, 0), 132, 50 << 20), space)
    assert forms[-3:] == [{**start, "SCHEDULE": "persistent"}, {**start, "SCHEDULE": "stream_k"},
                          {**start, "CLUSTER": 2}]
    assert all(f["SCHEDULE"] == "tile" and f["CLUSTER"] == 1 for f in forms[:-3])
    narrow = Problem("matmul", (4096, 200, 4096), "float16")  # one tile of 256 along N: no pair
    assert not any(f["CLUSTER"] == 2 for f in narrow.impl.problem_starts(start, narrow, DeviceInfo("GPU", (9, 0), 132,
                                                                                                 50 << 20), space))
    from autotune.runtime.streams import DEFAULT

    stream_k = build_kernel("matmul", {**WGMMA, "ASYNC_STAGES": 3, "TMA": 1, "SCHEDULE": "stream_k"}, "float16")
    with pytest.raises(ValueError, match="in 32 bits, and this product has 4294967296: use SCHEDULE tile"):
        stream_k._launch_config(1 << 17, 1 << 17, 1 << 16, DEFAULT)  # 2048 x 2048 tiles of 1024 steps: 2**32
    assert stream_k._launch_config(1 << 17, 1 << 17, (1 << 16) - 64, DEFAULT)[1] == (1 << 16) - 64
    walk = build_kernel("matmul", {**WGMMA, "ASYNC_STAGES": 3, "TMA": 1, "SCHEDULE": "persistent"}, "float16",
                        batch="strided")  # a stack's walk counts the tiles of all its matrices
    with pytest.raises(ValueError, match="this product has 4294967296: use SCHEDULE tile"):
        walk._launch_config(1 << 17, 1 << 17, 64, DEFAULT, 1024)  # 2048 x 2048 tiles in each of 1024 matrices
    assert walk._launch_config(1 << 17, 1 << 17, 64, DEFAULT, 1023)[0] is not None


def test_each_call_rounds_its_operands_again(rng):
    """A tf32 variant on rounded copies writes the copies in every call (they are steps of its plan): a second call
    with new values in the same arrays multiplies the new values; the copies follow the layout."""
    from autotune.families.matmul.reference import tf32_round

    params = {**WGMMA_TF32, "ASYNC_STAGES": 3}
    for layout in ("nn", "tt"):
        k = build_kernel("matmul", params, "float32", layout=layout, precision="tf32")
        M, N, K = 37, 45, 41
        stored = [(K, M) if layout[0] == "t" else (M, K), (N, K) if layout[1] == "t" else (K, N)]
        dA, dB = (cuda.to_device(np.zeros(shape, np.float32)) for shape in stored)
        A, B = (x.ravel().reshape(x.shape[::-1], order="F") if t == "t" else x for x, t in zip((dA, dB), layout))
        C = poisoned((M, N), np.float32)
        for data in (small_integers, random_matrix):
            hosts = [data(rng, shape, np.float32) for shape in stored]
            dA.copy_to_device(hosts[0])
            dB.copy_to_device(hosts[1])
            k(A, B, out=C)
            a64, b64 = (h.T if t == "t" else h for h, t in zip(hosts, layout))
            expected = tf32_round(a64).astype(np.float64) @ tf32_round(b64).astype(np.float64)
            np.testing.assert_allclose(C.copy_to_host(), expected, rtol=1e-5, atol=1e-4)


def test_wgmma_applies_to_float32_at_the_tf32_precisions():
    """On float32, WGMMA is a choice of MMA 8 at precision tf32 or 3xtf32, BK 32, loads through registers; 3xtf32's
    second accumulator tile bounds its tiles' width. At tf32, ASYNC_STAGES 3 or 4 reads rounded copies through
    cp.async instead (float16's kernel, its limits); 3xtf32 splits in registers and has no such form."""
    space = load_space("matmul")
    params = {k: v for k, v in WGMMA_TF32.items() if k != "ASYNC_STAGES"}
    for precision in ("tf32", "3xtf32"):
        family = {"layout": "nn", "precision": precision}
        assert space.validate(params, dtype="float32", args=family) == {"strategy": "tiled", **WGMMA_TF32,
                                                                           "TMA": 0, "GROUP_M": 8, "PREFETCH": 1,
                                                                           "SPLIT_K": 1}
    with pytest.raises(ValueError, match="at precision ieee"):
        space.validate(params, dtype="float32", args={"layout": "nn", "precision": "ieee"})
    family = {"layout": "nn", "precision": "tf32"}
    for bad, message in (({"BK": 16}, "BK must be 32"), ({"MMA": 16}, "MMA must be 8"),
                         ({"ASYNC_STAGES": 2}, "ASYNC_STAGES must be 3 or 4"), ({"BN": 32}, "64, 128 or 256"),
                         ({"BM": 256, "BN": 256}, "registers per thread"),
                         ({"BM": 256, "BN": 256, "ASYNC_STAGES": 4}, "registers per thread")):
        with pytest.raises(ValueError, match=message):
            space.validate({**params, **bad}, dtype="float32", args=family)
    copies = {**params, "BM": 128, "BN": 256, "ASYNC_STAGES": 4}
    assert space.validate(copies, dtype="float32", args=family) == {"strategy": "tiled", **copies, "TMA": 0,
                                                                      "GROUP_M": 8, "SPLIT_K": 1}
    with pytest.raises(ValueError, match="at 3xtf32 splits .*ASYNC_STAGES must be 0"):
        space.validate(copies, dtype="float32", args={**family, "precision": "3xtf32"})
    space.validate({**params, "BM": 128, "BN": 256}, dtype="float32", args=family)
    with pytest.raises(ValueError, match="registers per thread"):
        space.validate({**params, "BM": 128, "BN": 256}, dtype="float32", args={**family, "precision": "3xtf32"})
    with pytest.raises(ValueError, match="MMA must be 16"):
        space.validate({**params, "BK": 64}, dtype="float16", args={"layout": "nn"})


def test_float16_operands_with_a_float32_result(rng):
    """out_dtype float32 keeps the float32 sums (checked exactly on integer data, whose sums pass 2048 where float16
    stops counting by ones, and within the FMA chain's error on normal data); split-K may add its slices atomically
    into float32 C. The problem has a key of its own; float32 and float64 operands refuse it."""
    from autotune.core.problem import Problem

    params = {**F16_MMA, "BM": 32, "BN": 32, "TM": 4, "TN": 4, "VEC": 4, "SPLIT_K": 2, "SPLIT_ADD": "atomic"}
    load_space("matmul").validate(params, dtype="float16", args={"layout": "nn", "out_dtype": "float32"})
    k = build_kernel("matmul", params, "float16", out_dtype="float32")
    problem = Problem("matmul", (33, 40, 48), "float16", {"out_dtype": "float32"})
    assert problem.key == "matmul/float16/nn/float32/33x40x48" and problem.out_dtype == "float32"
    assert check_with_oracle(k, problem, rng) == [None, None]
    A = rng.integers(7, 9, size=(33, 48)).astype(np.float16)
    B = rng.integers(7, 9, size=(48, 40)).astype(np.float16)
    C = k(A, B)
    assert C.dtype == np.float32
    np.testing.assert_array_equal(C, A.astype(np.float64) @ B)
    assert (C % 2 == 1).any()  # odd sums past 2048: not float16 values
    with pytest.raises(ValueError, match="out_dtype float32 is for float16 and bfloat16 operands"):
        Problem("matmul", (8, 8, 8), "float32", {"out_dtype": "float32"})


def test_float32_results_of_float16_are_held_to_the_tensor_cores_sum(rng):
    """With out_dtype float32 the bound is twice the error of the tensor cores' own sum (k16 steps added with
    truncation), which errs more than a chain of fp32 FMAs (the H100's wgmma results did, 1.23e-6 at 1000^3, over
    twice the chain's); both pass, a sum that drops one k16 step or keeps float16 does not."""
    from autotune.core.oracle import relative_error
    from autotune.core.problem import Problem
    from autotune.families.matmul.reference import fma_chain, tensor_core_chain

    problem = Problem("matmul", (64, 48, 1000), "float16", {"out_dtype": "float32"})
    impl = problem.impl
    _, normal = impl.verification(problem, impl.inputs(problem, rng, "check"), rng)
    A, B = normal.inputs
    truncated, chain = tensor_core_chain(A, B), fma_chain(A, B)
    assert relative_error(truncated, normal.expected) > 2 * relative_error(chain, normal.expected)
    assert impl.verify(problem, normal, truncated, rng) is None and impl.verify(problem, normal, chain, rng) is None
    dropped = truncated - (A[:, 16:32].astype(np.float64) @ B[16:32]).astype(np.float32)
    assert "float16 results" in impl.verify(problem, normal, dropped, rng)
    assert "float16 results" in impl.verify(problem, normal, truncated.astype(np.float16).astype(np.float32), rng)


def test_the_float16_oracle_refuses_float16_sums(rng):
    """Sums kept in float16 pass the integer case (its sums stay exact below 2048) but not the normal data's error
    bound; the float32 chain rounded to float16, which the bound is twice of, passes; so does a seed kernel."""
    from autotune.core.problem import Problem
    from autotune.families.matmul.reference import fma_chain

    problem = Problem("matmul", (64, 48, 512), "float16")
    impl = problem.impl
    exact, normal = impl.verification(problem, impl.inputs(problem, rng, "check"), rng)
    A, B = normal.inputs
    half_sums = np.zeros((A.shape[0], B.shape[1]), np.float16)
    for k in range(A.shape[1]):
        half_sums = (half_sums + np.outer(A[:, k], B[k]).astype(np.float16)).astype(np.float16)
    assert "float16 results" in impl.verify(problem, normal, half_sums, rng)
    assert impl.verify(problem, normal, fma_chain(A, B).astype(np.float16), rng) is None
    A, B = exact.inputs
    assert impl.verify(problem, exact, (A.astype(np.float64) @ B).astype(np.float16), rng) is None
    wrong = (A.astype(np.float64) @ B).astype(np.float16)
    wrong[5, 7] += 1
    assert "rows of C" in impl.verify(problem, exact, wrong, rng)
    small = Problem("matmul", (37, 29, 41), "float16", {"layout": "tn"})
    assert check_with_oracle(build_kernel("matmul", {"strategy": "shared16"}, "float16", layout="tn"), small,
                             rng) == [None, None]


@pytest.mark.parametrize("dtype,precision,params,message", [
    ("float16", "ieee", {"MMA": 0}, "tiled float16 runs on the tensor cores"),
    ("float16", "ieee", {"MMA": 8, "TM": 2, "TN": 4}, "tiled float16 runs on the tensor cores"),
    ("float16", "ieee", {**F16_MMA, "TM": 2, "TN": 4, "SPLIT_K": 2}, "float16 results are rounded once"),
    ("float32", "ieee", {"MMA": 8, "TM": 2, "TN": 4}, "needs precision tf32 or 3xtf32"),
    ("float32", "tf32", {"MMA": 0}, "precision tf32 runs on the tensor cores"),
    ("float32", "3xtf32", {"MMA": 16, "TM": 2, "TN": 4, "UNROLL_K": 16, "BK": 16}, "m16n8k4 and m16n8k8 only"),
    ("float32", "3xtf32", {"MMA": 8, "BM": 128, "BN": 256, "TM": 8, "TN": 16}, "256 float32 accumulators"),
])
def test_precision_rules_of_the_space(dtype, precision, params, message):
    base = {"BM": 32, "BN": 32, "BK": 8, "TM": 4, "TN": 4, "VEC": 1, "UNROLL_K": 8}
    with pytest.raises(ValueError, match=message):
        load_space("matmul").validate({**base, **params}, dtype=dtype, args={"layout": "nn", "precision": precision})
    if precision == "3xtf32" and params.get("TN") == 16:  # one product per step keeps one tile: it fits
        load_space("matmul").validate({**base, **params}, dtype=dtype, args={"layout": "nn", "precision": "tf32"})


def test_precision_is_float32s_and_keeps_ieee_keys():
    from autotune.core.problem import Problem
    from autotune.runtime.db import entry_record

    with pytest.raises(ValueError, match="precision tf32 is for float32 matmul"):
        Problem("matmul", (8, 8, 8), "float64", {"precision": "tf32"})
    with pytest.raises(ValueError, match="precision 'fp16' is not one of ieee, 3xtf32, tf32"):
        Problem("matmul", (8, 8, 8), "float32", {"precision": "fp16"})
    ieee, three = (Problem("matmul", (8, 8, 8), "float32", {"layout": "tn", "precision": p}) for p in ("ieee", "3xtf32"))
    assert ieee.key == "matmul/float32/tn/8x8x8" and three.key == "matmul/float32/tn/3xtf32/8x8x8"
    assert "precision" not in entry_record(ieee, {}, time={})
    assert entry_record(three, {}, time={})["precision"] == "3xtf32"
    assert ieee.impl.bench_name(three) == "matmul-tn-3xtf32"


def test_the_bench_reports_each_contenders_error_against_float64(rng):
    """matmul's result_error is the relative error of sampled rows against the float64 product of the same
    operands: float64 rounding for the float64 product (BLAS may sum a row subset in another order), that of float32 rounding for a float32 result, of float16 rounding for a
    float16 one; the bench's table gets an error column, which families without errors (reductions) do not."""
    from autotune.commands.bench import _section
    from autotune.core.device import DeviceInfo
    from autotune.core.problem import Problem
    from autotune.core.timing import Timing
    from autotune.runtime.arrays import to_host

    A, B = rng.standard_normal((300, 70)), rng.standard_normal((70, 40))
    problem = Problem("matmul", (300, 40, 70), "float16")
    exact = A @ B
    assert problem.impl.result_error(problem, (A, B), exact) < 1e-15
    half = problem.impl.result_error(problem, (A, B), exact.astype(np.float16))
    single = problem.impl.result_error(problem, (A, B), exact.astype(np.float32))
    assert 1e-4 < half < 1e-3 and 1e-8 < single < 1e-7
    np.testing.assert_array_equal(to_host(cuda.to_device(exact)), exact)
    timing = Timing(median_ms=1.0, p20_ms=0.9, p80_ms=1.1, reps=10)
    device = DeviceInfo("GPU", (9, 0), 132, 50 << 20)
    rows = [{"name": "autotune", "timing": timing, "registers": 64, "local": 0, "accuracy": half},
            {"name": "cuBLAS (cupy)", "timing": timing, "accuracy": half}, {"name": "broken", "error": "no"}]
    text = _section(problem, rows, device)
    assert "rel. error" in text and text.count(f"{half:.3g}") == 2
    widths = {line.count("|") for line in text.splitlines() if line.startswith("|")}
    assert len(widths) == 1  # the error row has the column too
    reduce = Problem("reduce", (1000,), "float32", {"op": "sum"})
    assert reduce.impl.result_error(reduce, (np.ones(1000),), np.ones(1)) is None
    assert "rel. error" not in _section(reduce, [{"name": "autotune", "timing": timing}], device)


@pytest.mark.parametrize("layout", ["nn", "tn"])
def test_large_products_are_checked_exactly_by_freivalds_test(layout, rng):
    """Past EXACT_LIMIT the oracle checks C by Freivalds' test and sampled elements (no float64 product of the
    whole): the right C passes, and one element off by one, or one row left at zero, is found."""
    from autotune.core.problem import Problem
    from autotune.families.matmul.config import EXACT_LIMIT

    problem = Problem("matmul", (641, 523, 449), "float32", {"layout": layout})
    assert 641 * 523 * 449 > EXACT_LIMIT
    impl = problem.impl
    (case,) = impl.verification(problem, impl.inputs(problem, rng, "check"), rng)
    assert case.expected is None
    A, B = case.inputs
    right = (A.astype(np.float64) @ B.astype(np.float64)).astype(np.float32)
    assert impl.verify(problem, case, right, rng) is None
    off_by_one, zero_row = right.copy(), right.copy()
    off_by_one[int(rng.integers(641)), int(rng.integers(523))] += 1
    zero_row[int(rng.integers(641))] = 0
    for wrong in (off_by_one, zero_row):
        assert "Freivalds" in impl.verify(problem, case, wrong, rng)
