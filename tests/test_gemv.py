"""The gemv kernel of skinny products (M or N at most 16; GEMV 1, templates/matmul_gemv.py.j2) in the CUDA
simulator: both sides and both forms (the matrix's rows along K or along C's long side), every dtype, K split
(atomically into C, or through the float32 workspace that a second kernel rounds into a 16-bit C), short sides
taken TS at a time, unaligned rows, stacks; through the family's oracle on odd shapes with NaN-poisoned outputs.
Then what picks it: the shape's skinny argument, the space's rules, the default configuration and the starts;
and autotune.matmul of vectors on either side."""
import warnings

import numpy as np
import pytest
from checks import small_integers
from test_matmul import check_with_oracle

import autotune
from autotune import build_kernel
from autotune.core.problem import Problem
from autotune.families.matmul import gemv

GEMV = {"GEMV": 1, "BLOCK": 64, "KT": 4, "TL": 2, "TS": 2, "VEC": 4, "UNROLL_K": 2, "SPLIT_K": 1}


# (parameters, dtype, layout, shape): each side with each form (rows: A row-major where N is small, B given
# transposed where M is; cols: the others), split K, short sides longer than TS, primes and K no multiple of any
# step, K of 1, rows not 16-byte aligned (K odd in the rows form), and the 16-bit dtypes' workspace; then K shared
# by KW groups of warps as well (sums met in shared memory), with and without shuffles, split and in two passes.
CASES = [
    (GEMV, "float32", "nn", (37, 3, 41)),                                            # rows, N = 3 in two passes
    ({**GEMV, "SPLIT_K": 4}, "float32", "tn", (37, 5, 83)),                          # cols, atomic slices
    ({**GEMV, "KT": 32, "TL": 1, "TS": 1, "UNROLL_K": 1}, "float32", "nt", (1, 131, 97)),  # rows, a warp per row
    ({**GEMV, "KT": 1, "TS": 4}, "float32", "nn", (3, 70, 9)),                      # cols, no shuffles
    ({**GEMV, "VEC": 2, "TS": 1, "SPLIT_K": 2}, "float64", "nt", (29, 2, 45)),       # rows, vectors read VEC-wide
    ({**GEMV, "VEC": 1, "KT": 8}, "float64", "tt", (16, 23, 1)),                     # cols, K = 1
    ({**GEMV, "VEC": 8, "TL": 1, "SPLIT_K": 2}, "float16", "nn", (45, 7, 67)),       # rows, workspace + finish
    ({**GEMV, "VEC": 8, "TS": 4}, "float16", "tn", (9, 61, 40)),                     # cols, side m
    ({**GEMV, "VEC": 8, "SPLIT_K": 2, "TS": 1}, "bfloat16", "tt", (3, 44, 50)),      # rows, side m, workspace
    ({**GEMV, "VEC": 4, "UNROLL_K": 4}, "bfloat16", "nt", (30, 4, 33)),              # cols, side n
    ({**GEMV, "KW": 2}, "float32", "nn", (37, 3, 41)),                               # rows, 2 groups, two passes
    ({**GEMV, "KW": 2, "KT": 8, "VEC": 8, "SPLIT_K": 2}, "float16", "tn", (9, 61, 77)),  # cols, groups + workspace
    ({**GEMV, "KW": 2, "KT": 1, "TS": 4}, "float32", "nn", (3, 70, 19)),            # cols, groups, no shuffles
    ({**GEMV, "BLOCK": 128, "KW": 4, "KT": 2, "VEC": 8, "TS": 1, "TL": 1}, "bfloat16", "nt", (30, 4, 133)),
]


@pytest.mark.parametrize("params,dtype,layout,shape", CASES, ids=lambda x: x if isinstance(x, str) else None)
def test_gemv_variants_pass_the_oracle(params, dtype, layout, shape, rng):
    problem = Problem("matmul", shape, dtype, {"layout": layout})
    side = problem.args["skinny"]
    kernel = build_kernel("matmul", params, dtype, layout=layout, skinny=side)
    found = check_with_oracle(kernel, problem, rng)
    assert found == [None] * len(found), (shape, params)


def test_gemv_at_every_precision_and_a_float32_result(rng):
    """Memory-bound, the gemv kernel sums in fp32 at every precision of float32 (more accuracy than tf32 asks
    for, never refused); float16 operands with a float32 C add their K slices atomically into C."""
    for family in ({"precision": "tf32"}, {"precision": "3xtf32"}):
        problem = Problem("matmul", (33, 2, 40), "float32", family)
        kernel = build_kernel("matmul", GEMV, "float32", skinny="n", **family)
        assert check_with_oracle(kernel, problem, rng) == [None, None]
    family = {"layout": "tn", "out_dtype": "float32"}
    kernel = build_kernel("matmul", {**GEMV, "VEC": 8, "SPLIT_K": 2}, "float16", skinny="m", **family)
    assert "W" not in kernel.arg_names and not kernel.helper_kernels()
    assert check_with_oracle(kernel, Problem("matmul", (5, 29, 77), "float16", family), rng) == [None, None]


def test_batched_gemv_with_a_broadcast_vector(rng):
    """A stack of skinny products in one launch, its vectors or its matrix broadcast."""
    problem = Problem("matmul", (3, 1, 37, 41), "float32", {"layout": "nt"})
    assert problem.args == {**problem.args, "batch": "strided", "skinny": "m"}
    kernel = build_kernel("matmul", {**GEMV, "SPLIT_K": 2}, "float32", layout="nt", batch="strided", skinny="m")
    assert check_with_oracle(kernel, problem, rng) == [None, None]
    A, B = small_integers(rng, (1, 41), np.float32), small_integers(rng, (3, 41, 37), np.float32)
    np.testing.assert_array_equal(kernel(A, np.ascontiguousarray(B.swapaxes(1, 2)).swapaxes(1, 2)),
                                  A.astype(np.float64) @ B)


def test_the_shape_says_which_side_is_skinny():
    sides = {(4096, 1, 4096): "n", (1, 4096, 4096): "m", (16, 16, 8): "n", (16, 17, 8): "m", (17, 16, 8): "n",
             (3, 8, 8): "m", (17, 17, 8): None, (8, 1, 9, 9): "m"}
    for shape, side in sides.items():
        problem = Problem("matmul", shape, "float32")
        assert problem.args["skinny"] == side, shape
        assert problem.key == f"matmul/float32/nn/{'x'.join(map(str, shape))}"
    with pytest.raises(ValueError, match="skinny m does not fit the shape 64x8x64"):
        Problem("matmul", (64, 8, 64), "float32", {"skinny": "m"})


def test_gemv_applies_to_skinny_problems_alone_and_within_its_limits():
    from autotune.core.space import load_space

    space = load_space("matmul")
    with pytest.raises(ValueError, match="parameter GEMV does not apply here"):
        space.validate({"GEMV": 1}, dtype="float32", args={"layout": "nn"})
    checked = space.validate({"GEMV": 1}, dtype="float32", args={"layout": "nn", "skinny": "n"})
    assert "BM" not in checked and {"BLOCK", "KT", "TL", "TS", "VEC", "SPLIT_K"} <= checked.keys()
    tiled = space.validate({}, dtype="float32", args={"layout": "nn", "skinny": "n"})
    assert tiled["GEMV"] == 0 and "BM" in tiled and "BLOCK" not in tiled
    with pytest.raises(ValueError, match="gemv: KW=4 groups of 64 threads are not whole warps"):
        space.validate({"GEMV": 1, "BLOCK": 64, "KW": 4}, dtype="float32", args={"layout": "nn", "skinny": "n"})
    with pytest.raises(ValueError, match="gemv: KW=8 groups' sums take 57344 bytes of shared memory, over 49152"):
        space.validate({"GEMV": 1, "KT": 1, "KW": 8, "TS": 16, "VEC": 4, "UNROLL_K": 1}, dtype="float32",
                       args={"layout": "tn", "skinny": "n"})  # cols: 32 lanes x 64 sums x 7 groups x 4 bytes
    rows = {"GEMV": 1, "KT": 1, "KW": 2, "TL": 4, "TS": 16, "VEC": 8, "UNROLL_K": 1}  # its sums: 32 KB (rows)
    assert space.validate(rows, dtype="float16", args={"layout": "nn", "skinny": "n"})["KW"] == 2
    with pytest.raises(ValueError, match="gemv: TL \\* TS \\* VEC = 256 accumulators"):
        space.validate({"GEMV": 1, "TL": 4, "TS": 16, "VEC": 4}, dtype="float32", args={"layout": "nn",
                                                                                            "skinny": "m"})
    with pytest.raises(ValueError, match="multiply-adds per unrolled trip"):
        space.validate({"GEMV": 1, "TL": 4, "TS": 16, "VEC": 2, "UNROLL_K": 8}, dtype="float64",
                       args={"layout": "nn", "skinny": "n"})
    with pytest.raises(ValueError, match="512 threads leave 128 registers per thread, where 32 sums"):
        space.validate({"GEMV": 1, "BLOCK": 512, "TS": 16, "VEC": 2, "UNROLL_K": 2}, dtype="float64",
                       args={"layout": "tt", "skinny": "n"})  # it compiled spilling
    with pytest.raises(ValueError, match="UNROLL_K=16 K steps in flight per thread exceeds 8"):
        space.validate({"GEMV": 1, "UNROLL_K": 16}, dtype="float32", args={"layout": "nn", "skinny": "n"})
    with pytest.raises(ValueError, match="VEC=8 x 4-byte float32 exceeds a 16-byte vector access"):
        space.validate({"GEMV": 1, "VEC": 8}, dtype="float32", args={"layout": "nn", "skinny": "n"})
    sample, uncovered = space.covering_sample(dtype="float32", args={"layout": "tn", "skinny": "m"})
    assert {("GEMV", 1), ("BLOCK", 512), ("KT", 1), ("TS", 16), ("TL", 4)} <= {p for c in sample for p in c.items()}
    assert not {p for p in uncovered if p[0] in ("GEMV", "BLOCK", "KT", "KW", "TL", "TS")}


def test_the_default_configuration_of_a_skinny_problem_is_the_gemv_kernel():
    """A warp per row where K runs along the matrix's rows, 8 lanes per 16-byte column group otherwise; each
    dtype's 16-byte vectors; the short side in one pass; K split until the GPU has its fill of threads."""
    def default(shape, dtype="float32", layout="nn"):
        problem = Problem("matmul", shape, dtype, {"layout": layout})
        return problem.impl.default_params(problem)

    rows, cols = default((8192, 1, 8192)), default((1, 16384, 16384))
    assert rows["GEMV"] == 1 and (rows["KT"], rows["VEC"], rows["TS"], rows["SPLIT_K"]) == (32, 4, 1, 2)
    assert cols["GEMV"] == 1 and (cols["KT"], cols["VEC"], cols["SPLIT_K"]) == (8, 4, 16)  # 128 blocks of 128
    assert (default((8192, 8, 8192), "float16")["VEC"], default((8192, 8, 8192), "float16")["TS"]) == (8, 8)
    assert default((64, 16, 32), "float64")["KT"] == 16  # K of 32: 16 lanes of 2 doubles
    assert default((1024, 1, 4096))["SPLIT_K"] == 8  # 128 blocks of 8 rows; 16 would leave a slice one trip
    assert default((3, 4096, 4096), layout="nt")["KT"] == 32  # B given transposed: its rows run along K
    assert "GEMV" not in default((17, 17, 17))


def test_gemv_starts_are_fitted_to_the_problem():
    from autotune.core.device import DeviceInfo
    from autotune.core.space import load_space

    space = load_space("matmul")
    problem = Problem("matmul", (1, 8192, 8192), "float16")
    device = DeviceInfo("GPU", (9, 0), 132, 50 << 20)
    starts = [space.checked_or_none(s, dtype="float16", args=problem.args) for s in space.starts]
    gemv_starts = [s for s in starts if s and s.get("GEMV")]
    assert gemv_starts and starts[:len(gemv_starts)] == gemv_starts  # first among the starts
    fitted, _, given = problem.impl.problem_starts(gemv_starts[0], problem, device, space)
    assert fitted["TS"] == 1 and fitted["SPLIT_K"] > 1 and given == gemv_starts[0]
    wide = Problem("matmul", (8192, 1, 8192, 8192), "float16")  # a stack of 8192 products: K unsplit
    assert problem.impl.problem_starts(gemv_starts[0], wide, device, space)[0]["SPLIT_K"] == 1
    # K shared by groups of warps first (8 of a warp each at 256 threads), then split for the rest: 2 slices, not 16
    by_split, by_groups, _ = problem.impl.problem_starts({**gemv_starts[0], "VEC": 8}, problem, device, space)
    assert (by_split["KW"], by_split["SPLIT_K"], by_groups["KW"], by_groups["SPLIT_K"]) == (1, 16, 8, 2)
    assert gemv.fill_groups(by_groups, (1, 1, 8192, 64), "cols", "m", 132 * 2048, 2) == 1  # K holds no trip


@pytest.fixture
def empty_database(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_DB", str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", autotune.TunedKernelWarning)
        yield


@pytest.mark.parametrize("a_shape,b_shape,dtype", [
    ((83,), (83, 45), "float32"),          # x @ W
    ((45, 83), (83,), "float32"),          # W @ x
    ((5, 83), (83, 45), "float64"),        # a few rows times a matrix
    ((45, 83), (83, 3), "float16"),        # a matrix times a few columns
    ((83,), (83, 45), "bfloat16"),
    ((2, 45, 83), (83,), "float32"),       # a stack times a vector: its rows as one product
], ids=str)
def test_matmul_of_vectors_takes_the_gemv_kernel(a_shape, b_shape, dtype, rng, empty_database, monkeypatch):
    import ml_dtypes

    from autotune.families.matmul import functions

    dtype = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    chosen = []
    kernel_for = functions.tuned_kernel
    monkeypatch.setattr(functions, "tuned_kernel", lambda *a, **k: chosen.append(kernel_for(*a, **k)) or chosen[-1])
    A, B = small_integers(rng, a_shape, dtype), small_integers(rng, b_shape, dtype)
    got = autotune.matmul(A, B)
    want = A.astype(np.float64) @ B.astype(np.float64)
    assert got.shape == want.shape and got.dtype == dtype
    np.testing.assert_array_equal(np.asarray(got, np.float64), want.astype(dtype).astype(np.float64))
    assert [k.params.get("GEMV") for k in chosen] == [1]


def test_gemv_geometry():
    p = {**GEMV, "BLOCK": 256, "KT": 8, "TL": 2, "VEC": 4, "SPLIT_K": 4}
    args = {"layout": "nn", "skinny": "m"}
    assert gemv.form(args) == "cols" and gemv.form({**args, "layout": "nt"}) == "rows"
    assert gemv.form({"layout": "nn", "skinny": "n"}) == "rows" and gemv.form({"layout": "tn", "skinny": "n"}) == "cols"
    assert gemv.vectors_k_major(args) and not gemv.vectors_k_major({"layout": "nn", "skinny": "n"})
    assert gemv.long_per_block(p, "cols") == 256 // 8 * 2 * 4 and gemv.long_per_block(p, "rows") == 64
    grid, block, k_chunk = gemv.launch_shape(p, args, 3, 1000, 1001)
    assert (grid, block, k_chunk) == ((4, 4), 256, 256)  # 251 rounded up to the 8-row step: 4 slices
    grouped = {**p, "KW": 4}  # 4 groups of 64 threads: a quarter of the columns per block, 32 rows a step
    assert gemv.long_per_block(grouped, "cols") == 64 and gemv.k_step(grouped, "cols") == 32
    assert gemv.launch_shape(grouped, args, 3, 1000, 1001) == ((16, 4), 256, 256)
    assert gemv.shared_bytes(grouped, "cols", 4) == 3 * 8 * 16 * 4 and gemv.shared_bytes(p, "cols", 4) == 0
    from autotune.families.matmul.config import dynamic_shared_bytes
    wide = {**grouped, "KT": 1, "KW": 8, "TL": 1, "TS": 16, "VEC": 8}  # 57 KB were it the cols form: static all
    assert gemv.shared_bytes(wide, "cols", 2) > 48 * 1024 and dynamic_shared_bytes(wide, "float16") == 0
