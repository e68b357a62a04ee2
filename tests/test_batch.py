"""Stacks of matrices in one launch (problem shape B x M x N x K, family argument batch "strided"): batched kernels of
every template that takes a batch, in the CUDA simulator against float64 NumPy, with NaN-poisoned outputs;
broadcast operands on either side, two batch levels, strided and transposed stacks, batch 1 and 0; the stack's
geometry; the problem, its checks and its oracle; and autotune.matmul of stacks, counting its launches."""
import warnings

import numpy as np
import pytest
from checks import poisoned, small_integers
from numba import cuda

import autotune
from autotune import build_kernel
from autotune.core.problem import Problem
from autotune.families.matmul import batch as batching
from autotune.runtime import arrays, launch

TILED = {"BM": 32, "BN": 32, "BK": 8, "TM": 4, "TN": 4, "VEC": 4, "UNROLL_K": 4}
MMA64 = {"BM": 32, "BN": 16, "BK": 16, "TM": 2, "TN": 2, "VEC": 1, "UNROLL_K": 8, "MMA": 4, "A_SMEM": "mmajor"}
F16_MMA = {"BM": 32, "BN": 32, "BK": 16, "TM": 4, "TN": 4, "VEC": 4, "UNROLL_K": 16, "MMA": 16, "A_SMEM": "mmajor",
           "ASYNC_STAGES": 2}

# (A's shape, B's shape) with M, K, N = 13, 11, 9 (primes, no tile's multiple): a full stack, each operand broadcast
# (one matrix, and a stack of one), two batch levels ((2, 1) against (3,): strides that no single one expresses),
# and a stack of one matrix.
STACKS = [((3, 13, 11), (3, 11, 9)), ((13, 11), (3, 11, 9)), ((3, 13, 11), (1, 11, 9)),
          ((2, 1, 13, 11), (3, 11, 9)), ((1, 13, 11), (1, 11, 9))]


def stored(x: np.ndarray, transposed: bool) -> np.ndarray:
    """A stack as a layout stores it: each matrix C-contiguous, or the transpose of a C-contiguous one."""
    return np.ascontiguousarray(x.swapaxes(-1, -2)).swapaxes(-1, -2) if transposed else x


def multiply(kernel, rng, a_shape, b_shape, dtype, layout):
    """kernel(A, B) of integer stacks on the device into a poisoned output; (C, the float64 reference)."""
    A, B = small_integers(rng, a_shape, dtype), small_integers(rng, b_shape, dtype)
    a, b = (arrays.host_to_device(stored(x, t == "t")) for x, t in zip((A, B), layout))
    expected = A.astype(np.float64) @ B.astype(np.float64)
    out = poisoned(expected.shape, kernel.out_dtype)
    assert kernel(a, b, out=out) is out
    return arrays.device_to_host(out), expected


@pytest.mark.parametrize("params,dtype,layout", [
    (TILED, "float32", "nn"),
    ({**TILED, "EDGE": "clamp", "A_SMEM": "mmajor", "ASYNC_STAGES": 2}, "float32", "tt"),
    ({**TILED, "SPLIT_K": 2}, "float32", "tn"),                                   # atomic adds into a zeroed C
    ({**TILED, "VEC": 2, "SPLIT_K": 2, "SPLIT_ADD": "last_block"}, "float64", "nt"),  # a workspace per matrix
    ({"strategy": "naive"}, "float32", "nt"),
    ({"strategy": "shared16"}, "float64", "tn"),
    (MMA64, "float64", "tt"),
    (F16_MMA, "float16", "nn"),
    ({**F16_MMA, "SPLIT_K": 2, "SPLIT_ADD": "last_block"}, "bfloat16", "tt"),
    # a block per (stand-in) SM walks the tiles of every matrix, its ring of stages running on across them
    ({"BM": 64, "BN": 64, "BK": 64, "MMA": 16, "WGMMA": 1, "TMA": 1, "ASYNC_STAGES": 3, "SCHEDULE": "persistent"},
     "float16", "tn"),
], ids=lambda x: x if isinstance(x, str) else None)
def test_batched_kernels_match_numpy(params, dtype, layout, rng):
    """Every stack of STACKS, exactly (integer data: exact sums, rounded once where C is float16 or bfloat16)."""
    kernel = build_kernel("matmul", params, dtype, layout=layout, batch="strided")
    for a_shape, b_shape in STACKS:
        C, expected = multiply(kernel, rng, a_shape, b_shape, dtype, layout)
        assert C.shape == expected.shape and not np.isnan(C.astype(np.float64)).any(), (a_shape, b_shape)
        np.testing.assert_array_equal(C.astype(np.float64), expected.astype(dtype).astype(np.float64),
                                      err_msg=f"{a_shape} @ {b_shape}")


WGMMA = {"MMA": 16, "WGMMA": 1, "BK": 64, "BM": 64, "BN": 64, "ASYNC_STAGES": 3}
WGMMA_TF32 = {"MMA": 8, "WGMMA": 1, "BK": 32, "BM": 64, "BN": 64, "ASYNC_STAGES": 0}


@pytest.mark.parametrize("params,dtype,family,shape", [
    (WGMMA, "float16", {"layout": "tn"}, (2, 21, 24, 72)),
    (WGMMA, "bfloat16", {"layout": "nt", "out_dtype": "float32"}, (2, 21, 18, 70)),
    (WGMMA_TF32, "float32", {"layout": "nn", "precision": "3xtf32"}, (2, 21, 18, 40)),
    # fed by the TMA through maps of the whole stack; K = 70 leaves rows unaligned (copied first, matrix by matrix)
    ({**WGMMA, "TMA": 1}, "float16", {"layout": "nn"}, (3, 21, 24, 72)),
    ({**WGMMA, "TMA": 1, "BM": 128, "ASYNC_STAGES": 4}, "bfloat16", {"layout": "tt", "out_dtype": "float32"},
     (2, 130, 18, 70)),
    ({**TILED, "MMA": 8, "TM": 2, "TN": 4, "VEC": 2, "UNROLL_K": 8}, "float32", {"layout": "tt", "precision": "tf32"},
     (3, 13, 9, 11)),
    # K split in two slices of 128 and 72, each matrix's partial tiles and counters its own
    ({**WGMMA, "TMA": 1, "SPLIT_K": 2, "SPLIT_ADD": "last_block"}, "float16", {"layout": "nn"}, (3, 21, 24, 200)),
    # persistent: 2 blocks walk 2 x 3 tiles of 64 x 64 in 5 matrices, K steps of 2, the 4 stages' ring and C's
    # tile beside it going on from one matrix to the next; and a 128 x 64 one whose tiles overhang every edge
    ({**WGMMA, "TMA": 1, "ASYNC_STAGES": 4, "SCHEDULE": "persistent"}, "float16", {"layout": "nn"}, (5, 130, 150, 72)),
    ({**WGMMA, "TMA": 1, "BM": 128, "ASYNC_STAGES": 3, "SCHEDULE": "persistent", "GROUP_M": 1}, "bfloat16",
     {"layout": "nt", "out_dtype": "float32"}, (3, 70, 66, 130)),
])
def test_batched_tensor_core_kernels_pass_the_oracle(params, dtype, family, shape, rng):
    """The wgmma kernels (cp.async- and TMA-fed; TF32 through registers) and mma.sync at tf32 on stacks, through the
    family's own oracle: the integer stack, the same stack against one broadcast matrix, and (rounded precisions)
    normal data within the error bound."""
    from test_matmul import check_with_oracle

    kernel = build_kernel("matmul", params, dtype, batch="strided", **family)
    problem = Problem("matmul", shape, dtype, family)
    assert check_with_oracle(kernel, problem, rng) == [None, None, None]


def test_strided_stacks_and_broadcast_views_are_read_in_place(rng):
    """A stack whose matrices lie further apart than their size (every second matrix of a larger stack), and a
    broadcast view (stride 0, as np.broadcast_to and PyTorch's expand make), are read where they lie."""
    kernel = build_kernel("matmul", TILED, layout="nt", batch="strided")
    big = small_integers(rng, (6, 13, 11), np.float32)
    one = small_integers(rng, (9, 11), np.float32)
    a = cuda.to_device(big)[::2]
    b = arrays.strided(arrays.host_to_device(np.ascontiguousarray(one)), (3, 11, 9), (0, 4, 44))
    assert batching.element_strides(a)[0] == 2 * 13 * 11 and batching.element_strides(b) == (0, 1, 11)
    out = poisoned((3, 13, 9), np.float32)
    kernel(a, b, out=out)
    np.testing.assert_array_equal(out.copy_to_host(), big[::2].astype(np.float64) @ one.T)


def test_strided_views_and_spans_share_the_arrays_memory(rng):
    """arrays.strided (a broadcast, a transpose) and arrays.span (a strided stack's whole range) view the device
    array's own memory, the simulator's included: a write through the view is seen by the array, and a bfloat16
    array keeps its dtype."""
    import ml_dtypes

    x = rng.standard_normal((4, 3, 5)).astype(np.float32)
    d = cuda.to_device(x)
    every_second = d[::2]
    whole = arrays.span(every_second)
    assert whole.shape == (2 * 15 + 15,) and whole.dtype == np.float32  # matrix 0 to the last of matrix 2
    np.testing.assert_array_equal(whole.copy_to_host(), x.ravel()[:45])
    view = arrays.strided(every_second, (2, 5, 3), (2 * 60, 4, 20))  # each matrix transposed
    np.testing.assert_array_equal(view.copy_to_host(), x[::2].swapaxes(1, 2))
    view[1, 4, 2] = 7.0
    assert d.copy_to_host()[2, 2, 4] == 7.0
    halves = arrays.host_to_device(x.astype(ml_dtypes.bfloat16))
    repeated = arrays.strided(halves, (3, 4, 3, 5), (0, 30, 10, 2))  # a broadcast of the stack
    assert repeated.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(arrays.device_to_host(repeated)[2], x.astype(ml_dtypes.bfloat16))


def test_a_batched_kernel_refuses_what_it_cannot_read():
    kernel = build_kernel("matmul", TILED, batch="strided")
    ones = np.ones((2, 3, 4), np.float32)
    with pytest.raises(ValueError, match="do not align"):
        kernel(ones, np.ones((2, 5, 6), np.float32))
    with pytest.raises(ValueError, match="do not broadcast"):
        kernel(ones, np.ones((3, 4, 6), np.float32))
    with pytest.raises(ValueError, match="each matrix of A must be a C-contiguous matrix"):
        kernel(stored(ones, True), np.ones((4, 6), np.float32))
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        kernel(np.ones(4, np.float32), np.ones((4, 6), np.float32))
    with pytest.raises(ValueError, match=r"out must be a C-contiguous \(2, 3, 6\) array"):
        kernel(ones, np.ones((4, 6), np.float32), out=cuda.device_array((3, 6), np.float32))
    with pytest.raises(ValueError, match="more than two batch strides"):  # (2, 1, 3) against (1, 2, 1, 3): 3 levels
        kernel(np.ones((2, 1, 3, 3, 4), np.float32), np.ones((1, 2, 1, 4, 6), np.float32))
    unbatched = build_kernel("matmul", TILED)
    with pytest.raises(ValueError, match="must be 2-D"):
        unbatched(ones, np.ones((4, 6), np.float32))


def test_an_empty_stack_launches_nothing(monkeypatch):
    launched = record_launches(monkeypatch)
    C = build_kernel("matmul", TILED, batch="strided")(np.ones((0, 3, 4), np.float32), np.ones((4, 5), np.float32))
    assert C.shape == (0, 3, 5) and launched == []


def record_launches(monkeypatch) -> list:
    """The simulator's launches from now on, as (kernel name, grid), by wrapping launch._simulate (every
    configured launch goes through it)."""
    launched = []
    simulate = launch._simulate

    def recorded(configured, args):
        launched.append((configured.fn.__name__, tuple(configured.grid_dim)))
        return simulate(configured, args)

    monkeypatch.setattr(launch, "_simulate", recorded)
    return launched


def test_the_stack_rides_on_grid_z_and_long_stacks_launch_in_chunks(rng, monkeypatch):
    """One launch whose grid's z is the stack's length (split-K keeps y); where the stack is longer than
    gridDim.z allows (MAX_GRID_Z, here made 4), whole outer rows per launch, or pieces of one row."""
    kernel = build_kernel("matmul", {**TILED, "SPLIT_K": 2, "SPLIT_ADD": "last_block"}, batch="strided")
    launched = record_launches(monkeypatch)
    C, expected = multiply(kernel, rng, (2, 1, 5, 19), (3, 19, 4), "float32", "nn")
    np.testing.assert_array_equal(C, expected)
    assert launched == [("matmul", (1, 2, 6))]
    monkeypatch.setattr(batching, "MAX_GRID_Z", 4)
    for a_shape, b_shape, grids in [((2, 1, 5, 19), (2, 19, 4), [(1, 2, 4)]),            # two rows of 2: one launch
                                    ((3, 1, 5, 19), (2, 19, 4), [(1, 2, 4), (1, 2, 2)]),  # rows 0-1, then row 2
                                    ((7, 5, 19), (19, 4), [(1, 2, 4), (1, 2, 3)]),        # a row of 7: 4 + 3
                                    ((2, 1, 5, 19), (5, 19, 4), [(1, 2, 4), (1, 2, 1)] * 2)]:
        launched.clear()
        C, expected = multiply(kernel, rng, a_shape, b_shape, "float32", "nn")
        np.testing.assert_array_equal(C, expected, err_msg=f"{a_shape} @ {b_shape}")
        assert launched == [("matmul", grid) for grid in grids], (a_shape, b_shape)


def test_a_persistent_stack_launches_a_block_per_sm_walking_every_matrix(rng, monkeypatch):
    """A persistent stack's grid has no row per matrix: min(tiles of all matrices, SMs) blocks (the simulator stands
    in 2 SMs), one launch, or one per chunk where the stack is longer than MAX_GRID_Z (kept, so that each launch's
    count of matrices stays the same)."""
    from autotune.core.device import SIMULATOR_SM_COUNT

    params = {"BM": 64, "BN": 64, "BK": 64, "MMA": 16, "WGMMA": 1, "TMA": 1, "ASYNC_STAGES": 3,
              "SCHEDULE": "persistent"}
    kernel = build_kernel("matmul", params, "float16", batch="strided")
    launched = record_launches(monkeypatch)
    C, expected = multiply(kernel, rng, (1, 5, 24), (3, 24, 8), "float16", "nn")  # 3 tiles, 2 blocks
    np.testing.assert_array_equal(C.astype(np.float64), expected.astype(np.float16).astype(np.float64))
    assert launched == [("matmul", (SIMULATOR_SM_COUNT, 1, 1))]
    monkeypatch.setattr(batching, "MAX_GRID_Z", 2)
    launched.clear()
    C, expected = multiply(kernel, rng, (5, 70, 24), (24, 8), "float16", "nn")  # 2 + 2 + 1 matrices of 2 tiles
    np.testing.assert_array_equal(C.astype(np.float64), expected.astype(np.float16).astype(np.float64))
    assert launched == [("matmul", (2, 1, 1))] * 3


def test_batch_dimensions_collapse_to_two_levels():
    """Dimensions of one matrix go; a dimension merges into the one before it where every operand steps over
    both as over one; two levels make a Stack, more make none."""
    assert batching.collapse((2, 3), ((12, 4), (0, 0), (6, 2))) == [(6, (4, 0, 2))]
    assert batching.collapse((2, 1, 3), ((12, 0, 0), (0, 0, 5))) == [(2, (12, 0)), (3, (0, 5))]
    two = batching.stack_of((2, 3), (35, 0), (0, 28), (60, 20))
    assert two == batching.Stack(2, 3, (35, 0), (0, 28), (60, 20)) and two.count == 6
    assert batching.stack_of((5,), (0,), (28,), (20,)) == batching.Stack(1, 5, (0, 0), (0, 28), (0, 20))
    assert batching.stack_of((2, 3, 4), (12, 0, 1), (0, 4, 0), (12, 4, 1)) is None
    long = batching.Stack(3, 5, (7, 1), (0, 2), (15, 3))
    assert list(batching.chunks(long, 10)) == [((0, 0, 0), batching.Stack(2, 5, (7, 1), (0, 2), (15, 3))),
                                               ((14, 0, 30), batching.Stack(1, 5, (7, 1), (0, 2), (15, 3)))]
    pieces = list(batching.chunks(batching.Stack(2, 5, (7, 1), (0, 2), (15, 3)), 4))
    assert [(offsets, s.inner) for offsets, s in pieces] == [((0, 0, 0), 4), ((4, 8, 12), 1), ((7, 0, 15), 4),
                                                             ((11, 8, 27), 1)]


def test_batched_problems_have_their_own_keys_and_checks():
    p = Problem("matmul", (256, 128, 128, 128), "float32")
    assert p.key == "matmul/float32/nn/256x128x128x128" and p.args["batch"] == "strided"
    assert p.out_shape == (256, 128, 128) and p.work == 2.0 * 256 * 128 ** 3
    assert Problem("matmul", (128, 128, 128), "float32").args["batch"] is None
    assert Problem("matmul", (1, 9, 9, 9), "float16", {"layout": "tn"}).key == "matmul/float16/tn/1x9x9x9"
    for bad in ((8, 8), (2, 8, 8, 8, 8)):
        with pytest.raises(ValueError, match="B x M x N x K"):
            Problem("matmul", bad, "float32")
    with pytest.raises(ValueError, match="batch strided does not fit the shape 8x8x8"):
        Problem("matmul", (8, 8, 8), "float32", {"batch": "strided"})
    from autotune.runtime.db import entry_record

    assert entry_record(p, {}, time={})["batch"] == "strided" and "batch" not in entry_record(
        Problem("matmul", (64, 64, 64)), {}, time={})


def test_the_oracle_checks_every_matrix_and_the_broadcast_case(rng):
    """A batched problem's cases: the stacks, then the stack of A against B's first matrix alone (broadcast); a
    result with one matrix wrong, or one that read B's stack where it was broadcast, fails with what is wrong."""
    problem = Problem("matmul", (3, 9, 7, 5), "float32", {"layout": "nt"})
    impl = problem.impl
    inputs = impl.inputs(problem, rng, "check")
    assert [x.shape for x in inputs] == [(3, 9, 5), (3, 5, 7)] and not inputs[1].flags.c_contiguous
    stack, broadcast = impl.verification(problem, inputs, rng)
    assert broadcast.inputs[1].shape == (5, 7) and broadcast.what == "elements, B broadcast"
    A, B = (x.astype(np.float64) for x in inputs)
    right = A @ B
    assert impl.verify(problem, stack, right, rng) is None
    assert impl.verify(problem, broadcast, A @ B[0], rng) is None
    assert "(B broadcast)" in impl.verify(problem, broadcast, right, rng)
    wrong = right.copy()
    wrong[2, 8, 6] += 1
    assert "differ" in impl.verify(problem, stack, wrong, rng)


def test_large_stacks_are_checked_by_freivalds_test(rng):
    from autotune.families.matmul.config import EXACT_LIMIT

    problem = Problem("matmul", (6, 300, 310, 250), "float32")
    assert 6 * 300 * 310 * 250 > EXACT_LIMIT
    impl = problem.impl
    stack, broadcast = impl.verification(problem, impl.inputs(problem, rng, "check"), rng)
    assert stack.expected is None and broadcast.expected is None
    A, B = stack.inputs64
    right = A @ B
    assert impl.verify(problem, stack, right, rng) is None
    assert impl.verify(problem, broadcast, A @ B[0], rng) is None
    wrong = right.copy()
    wrong[4, int(rng.integers(300)), int(rng.integers(310))] += 1
    assert "Freivalds" in impl.verify(problem, stack, wrong, rng)


def test_rounded_precisions_bound_the_error_of_every_matrix(rng):
    """float16 stacks are checked over error_rows of every matrix, exactly on integer data and within twice the
    reference's error on normal data; a sum kept in float16 fails."""
    problem = Problem("matmul", (2, 40, 24, 300), "float16")
    impl = problem.impl
    exact, broadcast, normal = impl.verification(problem, impl.inputs(problem, rng, "check"), rng)
    assert exact.what == "exact rows" and broadcast.what == "exact rows, B broadcast" and normal.tolerance
    A, B = normal.inputs
    good = (A.astype(np.float64) @ B.astype(np.float64)).astype(np.float16)
    assert impl.verify(problem, normal, good, rng) is None
    half = np.zeros(good.shape, np.float16)
    for k in range(A.shape[-1]):
        half = (half + A[..., :, k:k + 1] * B[..., k:k + 1, :]).astype(np.float16)
    assert "float16 results" in impl.verify(problem, normal, half, rng)


def test_batched_problems_take_the_tma_but_not_rounded_copies_and_count_every_block():
    """The TMA-fed wgmma kernel reads a stack through tensor maps of the whole stack: offered to a batched problem;
    the rounded-copy one multiplies copies of one matrix: not offered. The split-K forms that fill the GPU count
    the blocks of every matrix."""
    from autotune.core.device import DeviceInfo
    from autotune.core.space import load_space

    space = load_space("matmul")
    tma = {"BM": 64, "BN": 64, "BK": 64, "MMA": 16, "WGMMA": 1, "TMA": 1, "ASYNC_STAGES": 3}
    assert space.validate(tma, dtype="float16", args={"layout": "nn", "batch": "strided"})["TMA"] == 1
    copies = {"BM": 64, "BN": 64, "BK": 32, "MMA": 8, "WGMMA": 1, "ASYNC_STAGES": 3}
    with pytest.raises(ValueError, match="rounded first"):
        space.validate(copies, dtype="float32", args={"layout": "nn", "precision": "tf32", "batch": "strided"})
    assert space.for_dtype("float16", {"layout": "nn", "batch": "strided"}).params["TMA"].values == (0, 1)
    device = DeviceInfo("GPU", (9, 0), 132, 50 << 20)
    start = space.validate({"BM": 128, "BN": 128, "BK": 16}, dtype="float32", args={"layout": "nn"})
    few = Problem("matmul", (16, 128, 128, 4096), "float32")  # 16 blocks: split 8 fills 0.9 of a wave
    many = Problem("matmul", (256, 128, 128, 4096), "float32")  # 256 blocks: unsplit
    assert [form["SPLIT_K"] for form in few.impl.problem_starts(start, few, device, space)][::3] == [8, 16, 1]
    assert [form["SPLIT_K"] for form in many.impl.problem_starts(start, many, device, space)] == [1]


def test_a_stacks_tensor_maps_have_its_levels_as_dimensions_and_one_matrix_where_broadcast():
    """The maps of a stack's TMA kernel: the matrix's two dimensions, then the inner and outer batch levels (count
    1 where the operand is broadcast, as the kernel's coordinate 0 there reads it), a box one matrix deep; a stride
    that is no whole number of 16-byte pieces is refused (the launch copies such an operand first)."""
    from autotune.families.matmul.kernel import stack_levels
    from autotune.kernels.tma import map_geometry

    stack = batching.Stack(outer=2, inner=3, a=(13 * 16, 0), b=(0, 16 * 24), c=(3 * 13 * 24, 13 * 24))
    a_levels, b_levels = stack_levels(stack, stack.a, 2), stack_levels(stack, stack.b, 2)
    assert a_levels == ((1, 0), (2, 416)) and b_levels == ((3, 768), (1, 0)) and stack_levels(None, (0, 0), 2) == ()
    dims, strides, box = map_geometry(16, 13, 32, (64, 64), a_levels)
    assert dims == [16, 13, 1, 2] and strides[0] == 32 and strides[2] == 416 and box == [64, 64, 1, 1]
    assert all(step > 0 and step % 16 == 0 for step in strides)
    assert map_geometry(24, 16, 48, (64, 64), b_levels)[:2] == ([24, 16, 3, 1], [48, 768, 768])
    assert map_geometry(64, 8, 128, (64, 64)) == ([64, 8], [128], [64, 64])
    with pytest.raises(ValueError, match="16-byte"):
        map_geometry(16, 13, 32, (64, 64), ((3, 13 * 11 * 2), (1, 0)))


def test_the_default_configuration_takes_the_shape_of_each_matrix():
    small, big = (Problem("matmul", shape, "float32") for shape in ((4096, 256, 256, 256), (8, 2048, 2048, 2048)))
    assert small.impl.default_params(small)["BM"] == 64 and "BM" not in big.impl.default_params(big)


# -- autotune.matmul of stacks ------------------------------------------------------------------------------------
@pytest.fixture
def empty_database(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_DB", str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", autotune.TunedKernelWarning)
        yield


def main_launches(launched: list) -> list:
    return [name for name, _ in launched if name == "matmul"]


@pytest.mark.parametrize("a_shape,b_shape,dtype", [
    ((4, 17, 19), (19, 23), "float32"),        # a C-contiguous stack times one matrix: its rows as one product
    ((17, 19), (4, 19, 23), "float32"),        # one matrix times a stack: A broadcast
    ((2, 1, 17, 19), (3, 19, 23), "float64"),  # two batch levels
    ((1, 3, 17, 19), (2, 1, 19, 23), "float32"),
    ((19,), (3, 19, 23), "float32"),           # a vector times a stack
    ((3, 17, 19), (3, 19, 23), "float16"),
    ((3, 17, 19), (3, 19, 23), "bfloat16"),
], ids=str)
def test_stacked_matmul_makes_one_launch(a_shape, b_shape, dtype, rng, monkeypatch, empty_database):
    import ml_dtypes

    dtype = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    A, B = small_integers(rng, a_shape, dtype), small_integers(rng, b_shape, dtype)
    launched = record_launches(monkeypatch)
    got = autotune.matmul(A, B)
    assert main_launches(launched) == ["matmul"], launched
    want = A.astype(np.float64) @ B.astype(np.float64)
    assert got.shape == want.shape and got.dtype == dtype
    np.testing.assert_array_equal(got.astype(np.float64), want.astype(dtype).astype(np.float64))


def test_stacks_of_transposed_and_strided_device_matrices(rng, monkeypatch, empty_database):
    """Device stacks of transposed matrices (PyTorch's x.mT, CuPy's x.swapaxes) and every second matrix of a stack:
    one launch into a poisoned out=; a stack with a negative stride or matrices in neither layout goes matrix by
    matrix, as before (the latter refused as before, naming the copy to make)."""
    A, B = small_integers(rng, (6, 17, 19), np.float32), small_integers(rng, (3, 19, 23), np.float32)
    a = cuda.to_device(A)[::2]
    b = arrays.host_to_device(stored(B, True))
    launched = record_launches(monkeypatch)
    out = poisoned((3, 17, 23), np.float32)
    assert autotune.matmul(a, b, out=out) is out
    assert main_launches(launched) == ["matmul"]
    np.testing.assert_array_equal(out.copy_to_host(), A[::2].astype(np.float64) @ B)
    launched.clear()
    reversed_stack = cuda.to_device(A)[::-2]
    got = autotune.matmul(reversed_stack, b).copy_to_host()
    np.testing.assert_array_equal(got, A[::-2].astype(np.float64) @ B)
    assert main_launches(launched) == ["matmul"] * 3
    with pytest.raises(ValueError, match=r"the matrices of A \(shape \(3, 9, 19\).* are strided view"):
        autotune.matmul(cuda.to_device(A)[::2, ::2], b)
    with pytest.raises(ValueError, match=r"the matrices of B \(shape \(3, 19, 23\).* F-contiguous"):
        autotune.matmul(A[:3], np.asfortranarray(B))  # the whole operand named, not one matrix of it


def test_three_batch_levels_launch_once_per_leading_index(rng, monkeypatch, empty_database):
    A, B = small_integers(rng, (2, 3, 1, 5, 7), np.float32), small_integers(rng, (1, 3, 4, 7, 6), np.float32)
    launched = record_launches(monkeypatch)
    np.testing.assert_array_equal(autotune.matmul(A, B), A.astype(np.float64) @ B)
    assert main_launches(launched) == ["matmul"] * 2


def test_empty_stacks_and_k_of_zero(empty_database):
    assert autotune.matmul(np.ones((0, 3, 4), np.float32), np.ones((4, 5), np.float32)).shape == (0, 3, 5)
    assert autotune.matmul(np.ones((2, 0, 4), np.float32), np.ones((2, 4, 5), np.float32)).shape == (2, 0, 5)
    np.testing.assert_array_equal(autotune.matmul(np.ones((2, 3, 0), np.float32), np.ones((0, 5), np.float32)),
                                  np.zeros((2, 3, 5), np.float32))


def test_the_selftest_checks_stacks_with_out_over_their_first_input(rng):
    """The selftest's check with out= starting at A's first byte views a stack of transposed matrices as the same
    stack (memory order kept); the GPU selftest runs stacks of every template that takes one."""
    from autotune.commands.selftest import _check_overlapping

    kernel = build_kernel("matmul", TILED, layout="tt", batch="strided")
    assert _check_overlapping(kernel, Problem("matmul", (3, 13, 9, 11), "float32", {"layout": "tt"}), rng) is None
    cases = Problem("matmul", (1, 1, 1)).impl.selftest_cases(small=False)
    assert {("float16", "tt")} <= {(dtype, args["layout"]) for dtype, args, _ in cases if args.get("batch")}
    for dtype, args, shapes in cases:  # each shape is a problem of its arguments
        for shape in shapes:
            Problem("matmul", shape, dtype, args)
