"""The matmul family: C = A @ B for float32, float64, float16 and bfloat16, with A and/or B optionally stored
transposed.

``layout`` names how A and B are stored, BLAS-style: "nn" (both row-major), "tn" (A is given as the
transpose of a row-major K x M array, e.g. ``At.T``), "nt", "tt". ``precision`` says how float32 products may be
rounded: "ieee" (fp32 FMAs on the CUDA cores), "3xtf32" (fp32-level error on the TF32 tensor cores: each operand
split into two TF32 parts and three products summed) or "tf32" (one product of TF32-rounded operands, as cuBLAS
with TF32 enabled). float16 is NumPy's: products and sums in float32, the result rounded to float16 (as
``np.matmul`` of float16 arrays and cuBLAS's half GEMM with float32 compute), or with ``out_dtype`` float32 kept
in float32 (``np.matmul(A, B, dtype=np.float32)``); tiled float16 variants run on the tensor cores. bfloat16
(ml_dtypes', see autotune/core/dtypes.py) is float16's twin: the same kernels on bf16 products, its tiles holding bits.
Six templates render it: the seed kernels of the Numba documentation (``strategy`` naive, shared16), the
register-tiled kernel on the CUDA cores and, with ``MMA`` > 0, the tensor-core kernel (``mma.sync`` through inline
PTX: fp64, TF32 for float32 at the tf32 precisions, fp16 for float16, bf16 for bfloat16); with ``WGMMA`` on Hopper,
the warpgroup kernels (float16, bfloat16, and float32 at the tf32 precisions); and for skinny problems (M or N at
most 16, family argument ``skinny``) the matrix-vector kernel (``GEMV`` 1, gemv.py).

A problem of shape B x M x N x K is a stack of B products in one launch (family argument ``batch`` "strided",
which the shape sets; batch.py). Every template renders it but the rounded-copy wgmma kernel (the TMA-fed one
through tensor maps of the whole stack);
its kernel takes each operand as a stack (B, M, K) or as one matrix (M, K) that every product reads (broadcast),
and writes C as a (B, M, N) stack.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ...core.constraints import SHARED_PER_BLOCK, SM_REGISTERS, SM_SHARED_BYTES
from ...core.dtypes import HALF, numpy_dtype, retyped, storage
from ...core.family import Case, FamilyArg, KernelFamily
from ...core.oracle import compare_exact, compare_norm, relative_error, unwritten
from . import gemv
from .config import (
    EXACT_LIMIT,
    LAYOUTS,
    MIN_C_COLUMNS,
    MMA_TILES,
    PRECISIONS,
    WGMMA_ALIGN,
    a_row_stride,
    a_tile_elements,
    accumulator_dtype,
    c_columns,
    dims,
    dynamic_shared_bytes,
    is_pair,
    is_persistent,
    is_tiled,
    is_tma,
    is_wgmma,
    is_wgmma_tf32,
    kernel_args,
    matmul_shared_bytes,
    matmul_threads,
    mma_precision,
    reads_rounded_copies,
    schedule,
    shared_pad,
    shared_stages,
    split_add,
    vector_width,
)
from .predicates import PREDICATES
from .reference import error_bound, error_rows

HERE = Path(__file__).resolve().parent

#: Parameters added after entries were tuned, at the value that renders the kernel as before: a header leaves them
#: out there, so that the renders (and the source hashes entries record) keep their bytes. SPLIT_K is one of them
#: in the wgmma kernels, which could not split at first.
LATER_DEFAULTS = {"SCHEDULE": "tile", "CLUSTER": 1, "KW": 1}


def header_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters a render's header names: all but those at their LATER_DEFAULTS value."""
    hidden = {k for k, v in LATER_DEFAULTS.items() if params.get(k, v) == v}
    if is_wgmma(params) and params.get("SPLIT_K", 1) == 1:
        hidden.add("SPLIT_K")
    return {k: v for k, v in params.items() if k not in hidden}


# -- the family -------------------------------------------------------------------------------------
class MatmulFamily(KernelFamily):
    name = "matmul"
    summary = "C = A @ B"
    shape_help = "M x N x K (A is M x K, B is K x N, C is M x N), or B x M x N x K for a stack of B products"
    dtypes = ("float32", "float64", "float16", "bfloat16")
    args = (FamilyArg("layout", LAYOUTS, "nn", "which of A, B are given transposed (BLAS-style: nn, tn, nt, tt)"),
            FamilyArg("precision", PRECISIONS, "ieee", "float32 products: ieee (fp32 FMAs), 3xtf32 (fp32-level "
                      "error on the TF32 tensor cores) or tf32 (TF32-rounded operands, as cuBLAS with TF32 on)",
                      implicit=True),
            FamilyArg("out_dtype", (None, "float32"), None, "the result's dtype: input (the operands') or float32 "
                      "(float16 or bfloat16 operands: the float32 sums, not rounded)", none_means="input",
                      implicit=True),
            FamilyArg("batch", (None, "strided"), None, "a stack of B products in one launch, each operand a stack "
                      "or one matrix read by every product: set by a B x M x N x K shape (give it only to render or "
                      "build such a kernel without a shape)", none_means="none", implicit=True),
            FamilyArg("skinny", (None, "m", "n"), None, f"which side of C is at most {gemv.SKINNY} (where the gemv "
                      f"kernel applies, GEMV 1): set by the shape, n where N is (N <= M), else m (give it only to "
                      f"render or build such a kernel without a shape)", none_means="none", implicit=True))
    unit = "TFLOP/s"
    baseline = {"strategy": "shared16"}
    suite = ("1024x1024x1024", "2048x2048x2048", "4096x4096x4096", "8192x8192x8192", "4096x4096x256",
             "8192x128x8192", "1000x1000x1000", "127x3000x511")
    dry_run_shapes = ("37x29x11",)
    measurement_free_modules = ("coverage.py", "functions.py")  # shape sets; NumPy-style functions
    dim_names = ("M", "N", "K")
    predicates = PREDICATES
    reference_peers = ("cuBLAS (cupy)", "cuBLAS (torch)", "cuBLAS TF32 (torch)")

    def __init__(self):
        self.space_file = HERE / "space.yaml"
        self.template_dir = HERE / "templates"
        self._fitted: dict[tuple, dict[str, Any]] = {}  # fit_config's validated forms

    def canonical_args(self, shape, args) -> dict[str, Any]:
        """``batch`` and ``skinny`` as the shape sets them (ValueError where they were given otherwise): a problem
        has one key, and its family arguments say which kernels apply to it."""
        if len(shape) not in (3, 4):
            return dict(args)  # check_shape says why
        _, M, N, _ = dims(shape)
        derived = {"batch": "strided" if len(shape) == 4 else None, "skinny": gemv.skinny_side(M, N)}
        for name, value in derived.items():
            if args[name] not in (None, value):
                what = "x".join(map(str, shape))
                raise ValueError(f"matmul {name} {args[name]} does not fit the shape {what} (it sets {name} "
                                 f"{value or 'none'})")
        return {**args, **derived}

    def filled_fraction(self, params, problem, device, space) -> float:
        """The fitted configuration's tile padding (M x N over the tiles' area) times the filling of its last wave
        of blocks, counted at one block per SM (a pair of blocks as one tile twice as wide; Stream-K's work has no
        last wave); 1.0 for the forms without tiles over C (gemv, the seed kernels). One block per SM is what
        cross-validation on the H200 matrices favoured over 2 and 4 (lab/rule_models.py --slots)."""
        fitted = self.fit_config(params, problem, device, space)
        if not is_tiled(fitted) or gemv.is_gemv(fitted) or "BM" not in fitted:
            return 1.0
        B, M, N, _ = dims(problem.shape)
        BM, BN = fitted["BM"], fitted["BN"] * (2 if is_pair(fitted) else 1)
        rows, columns = -(-M // BM), -(-N // BN)
        padding = (M * N) / (rows * BM * columns * BN)
        if schedule(fitted) == "stream_k":
            return padding
        blocks = B * rows * columns * fitted.get("SPLIT_K", 1)
        return padding * blocks / (-(-blocks // device.sm_count) * device.sm_count)

    def rule_features(self, rank: int) -> tuple:
        """M, N, K and the output's size M*N (the number of output tiles, against the multiprocessor count, is
        what split-K and the tile sizes answer to); a stack's B first. Cross-validated on the H200 coverage
        matrices, M*N lifts the nearest model's choice by about 0.007-0.017 (geometric mean) over M, N, K alone."""
        if rank == 4:
            return (0, 1, 2, 3, (1, 2))
        return (0, 1, 2, (0, 1)) if rank == 3 else tuple(range(rank))

    def check_shape(self, shape, args) -> None:
        if len(shape) not in (3, 4):
            raise ValueError(f"a matmul shape is M x N x K, or B x M x N x K for a stack of B products, got "
                             f"{'x'.join(map(str, shape))}")

    def key_tag(self, args) -> str:
        """The arguments as a key segment, those the shape sets (batch, skinny) left out: the shape says them."""
        return super().key_tag({**args, "batch": None, "skinny": None})

    def check_dtype(self, dtype, args) -> None:
        if args["precision"] != "ieee" and dtype != "float32":
            raise ValueError(f"precision {args['precision']} is for float32 matmul; {dtype} has ieee only")
        if args["out_dtype"] is not None and dtype not in HALF:
            raise ValueError(f"out_dtype {args['out_dtype']} is for float16 and bfloat16 operands; a {dtype} matmul "
                             f"gives {dtype}")

    def out_dtype(self, problem) -> str:
        return self.out_dtype_of(problem.dtype, problem.args)

    @staticmethod
    def out_dtype_of(dtype: str, args: Mapping[str, Any]) -> str:
        return args.get("out_dtype") or dtype

    def work(self, problem) -> float:
        B, M, N, K = dims(problem.shape)
        return 2.0 * B * M * N * K

    def peak(self, device, dtype: str) -> float | None:
        return device.peak_tflops(dtype)

    def peak_for(self, problem, device) -> float | None:
        """TF32 precisions run on the TF32 tensor cores: their rate, not fp32's on the CUDA cores; float16 and
        bfloat16 on the fp16 ones (the same rate)."""
        if problem.args["precision"] != "ieee":
            return device.peak_tflops("tf32")
        return self.peak(device, "float16" if problem.dtype in HALF else problem.dtype)

    def out_shape(self, problem) -> tuple[int, ...]:
        return tuple(problem.shape[:-1])

    def templates(self) -> list[str]:
        return ["_common.j2", "_sim.j2", "_matmul.j2", "matmul_seed.py.j2", "matmul_tiled.py.j2", "matmul_mma.py.j2",
                "_wgmma.j2", "matmul_wgmma.py.j2", "matmul_wgmma_tf32.py.j2", "_batch.j2", "matmul_gemv.py.j2"]

    def template(self, params) -> str:
        if gemv.is_gemv(params):
            return "matmul_gemv.py.j2"
        if not is_tiled(params):
            return "matmul_seed.py.j2"
        if is_wgmma(params):
            tf32_registers = is_wgmma_tf32(params) and not reads_rounded_copies(params)
            return "matmul_wgmma_tf32.py.j2" if tf32_registers else "matmul_wgmma.py.j2"
        return "matmul_mma.py.j2" if params.get("MMA", 0) else "matmul_tiled.py.j2"

    def template_context(self, params, dtype, args, simulator) -> dict[str, Any]:
        layout = args["layout"]
        # ZERO is the accumulators' zero; EL0 an element's (a float16 global constant is invalid NVVM IR in
        # numba-cuda 0.30, so float16's is written in place).
        # A bfloat16 kernel holds its operands as their bits (uint16, see autotune/core/dtypes.py).
        acc, out = accumulator_dtype(dtype), self.out_dtype_of(dtype, args)
        element = storage(dtype)
        ctx: dict[str, Any] = {**params, "dtype": element, "ACC": acc,
                               "EL0": "ZERO" if acc == dtype else f"{element}(0)", "BF16": dtype == "bfloat16",
                               "OUT_BF16": out == "bfloat16",
                               "SIM": simulator, "TRANS_A": layout[0] == "t",
                               "TRANS_B": layout[1] == "t", "MMA": params.get("MMA", 0),
                               "ARGS": kernel_args(params, args, dtype), "BATCH": bool(args.get("batch")),
                               "description": f"matmul {layout} {dtype} {header_params(params)}"}
        if gemv.is_gemv(params):
            ctx.update(gemv.template_context(params, args), WORKSPACE=gemv.workspace(params, out))
            return ctx
        if not is_tiled(params):
            return ctx
        threads = matmul_threads(params)
        if is_wgmma(params):
            ctx.update(THREADS=threads, STAGES=params["ASYNC_STAGES"], OUT=storage(out),
                       OUT_SIZE=numpy_dtype(out).itemsize, ALIGN=WGMMA_ALIGN, PRECISION=args.get("precision", "ieee"),
                       TF32=reads_rounded_copies(params), TMA=is_tma(params), SPLIT_ADD=split_add(params),
                       PERSISTENT=is_persistent(params), STREAM_K=schedule(params) == "stream_k",
                       PAIR=is_pair(params),
                       C_COLUMNS=(c_columns(params, numpy_dtype(dtype).itemsize, numpy_dtype(out).itemsize)
                                  or MIN_C_COLUMNS if is_persistent(params) else params["BN"]))
            if ctx["TF32"]:  # the copies are K-major whatever the layout: A as M x K, B as N x K
                ctx.update(TRANS_A=False, TRANS_B=True, EL0="float32(0)")
            return ctx
        vec = params["VEC"]
        mma = ctx["MMA"]
        itemsize = numpy_dtype(dtype).itemsize
        pad = shared_pad(params, itemsize)
        precision = mma_precision(dtype, args)
        ctx.update(
            MMA_PRECISION=precision,
            MMA_TILE=MMA_TILES.get(precision, ""),
            MMA_SLOTS=mma // 2 + mma // 4,
            AS_LD=params["BM"] + pad,
            AM_LD=a_row_stride(params, itemsize),
            A_SIZE=a_tile_elements(params, itemsize),
            BS_LD=params["BN"] + pad,
            THREADS=threads,
            ASYNC_STAGES=params.get("ASYNC_STAGES", 0),
            STAGES=shared_stages(params),
            ITEMSIZE=itemsize,
            DYNAMIC_SHARED=dynamic_shared_bytes(params, dtype) > 0,
            LOADS_A=params["BM"] * params["BK"] // (threads * vec),
            LOADS_B=params["BK"] * params["BN"] // (threads * vec),
            VA=vector_width(vec, params["TM"]) if ctx["A_SMEM"] == "kmajor" else 1,
            VB=vector_width(vec, params["TN"]),
            VC=vector_width(vec, 2 if mma else params["TN"]),
            SPLIT_ADD=split_add(params),
            PARTIAL_VEC=vector_width(16 // np.dtype(ctx["ACC"]).itemsize, params["TM"] * params["TN"]),
        )
        return ctx

    def make_kernel(self, module, params, dtype, args, source, simulator):
        from .kernel import MatmulKernel

        return MatmulKernel(self, module, params, dtype, args, source, simulator)

    def threads(self, params) -> int:
        return matmul_threads(params)

    def shared_bytes(self, params, itemsize: int) -> int:
        return matmul_shared_bytes(params, itemsize)

    def unfit_for(self, params, device) -> str | None:
        """wgmma exists on compute capability 9.0 alone (sm_90a: Hopper; not on later GPUs either)."""
        if is_wgmma(params) and tuple(device.cc[:2]) != (9, 0):
            cc = ".".join(map(str, device.cc[:2]))
            return f"WGMMA=1 runs on Hopper (compute capability 9.0) only, not on {device.name} ({cc})"
        return None

    # -- data and oracle ----------------------------------------------------------------------------
    def inputs(self, problem, rng, purpose):
        """A and B as the layout stores them. Check data are integers in [-2, 2] (never all zero): every sum of
        K products of |a*b| <= 4 is exact in float32 while 4K < 2**24, so a result is right to the last bit or
        wrong. Timing data are standard normal (never zeros, which can run faster). A batched problem's are stacks
        (B, M, K) and (B, K, N), each matrix stored as the layout says (a transposed one as ``x.swapaxes(-1, -2)``
        of a C-contiguous stack)."""
        _, M, N, K = dims(problem.shape)
        stack = tuple(problem.shape[:-3])
        layout = problem.args["layout"]
        arrays = []
        for shape, transposed in (((M, K), layout[0] == "t"), ((K, N), layout[1] == "t")):
            if purpose == "check":
                x = rng.integers(-2, 3, size=stack + shape, dtype=np.int8).astype(problem.dtype)
                x[..., 0, 0] = 1
            else:
                x = rng.standard_normal(stack + shape, dtype=np.float32).astype(problem.dtype)
            arrays.append(np.ascontiguousarray(x.swapaxes(-1, -2)).swapaxes(-1, -2) if transposed else x)
        return arrays

    def verification(self, problem, inputs, rng) -> list[Case]:
        """The integer case (exact at every precision: its values and sums are TF32- and fp32-exact; float16's and
        bfloat16's results are the exact sums rounded to their dtype, checked over ``error_rows``) and, at a
        rounded precision and for 16-bit operands, standard normal data whose error must stay within twice the
        error of the reference on the same data (``error_bound``). A batched problem has a second integer case: the
        same stack of A times B's first matrix alone, which every product reads (a broadcast operand: stride 0)."""
        precision = {"float16": "fp16", "bfloat16": "bf16"}.get(problem.dtype) or problem.args["precision"]
        out_dtype = self.out_dtype(problem)
        cases = [self._exact_case(problem, tuple(inputs))]
        if len(problem.shape) == 4:
            cases.append(self._exact_case(problem, (inputs[0], inputs[1][0]), ", B broadcast"))
        if precision != "ieee":
            data = tuple(self.inputs(problem, rng, "time"))
            rows = error_rows(problem.shape)
            A, B = (a.astype(np.float64) for a in data)
            expected = A[..., rows, :] @ B
            cases.append(Case(data, expected, "error rows",
                              error_bound(precision, data[0][..., rows, :], data[1], expected, out_dtype)))
        return cases

    def _exact_case(self, problem, inputs: tuple, what: str = "") -> Case:
        """The integer data's case: their exact product, where C is float16 or bfloat16 its ``error_rows``
        rounded to that dtype; none past EXACT_LIMIT (verify runs Freivalds' test)."""
        B, M, N, K = dims(problem.shape)
        A, Bm = (a.astype(np.float64) for a in inputs)
        out_dtype = self.out_dtype(problem)
        if out_dtype in HALF:
            rows = error_rows(problem.shape)
            return Case(inputs, (A[..., rows, :] @ Bm).astype(out_dtype).astype(np.float64), "exact rows" + what)
        return Case(inputs, A @ Bm if B * M * N * K <= EXACT_LIMIT else None, "elements" + what)

    def verify(self, problem, case, got, rng) -> str | None:
        """Exact on integer data: small problems elementwise, large ones by Freivalds' test; within the case's
        tolerance (relative error, Frobenius norm, over ``error_rows``) on the normal data of a rounded precision.

        Freivalds: C v == A (B v) for random integer vectors v; every product and sum here is an integer far
        below 2**53, so float64 is exact and any wrong element makes the test fail with probability >= 1/2
        per vector (much higher for integer v drawn from a wide range). Plus 512 sampled elements exactly (32
        random rows by 16 random columns)."""
        problem_text = unwritten(got)
        if problem_text:
            return problem_text
        C = got.astype(np.float64)
        rows = error_rows(problem.shape)
        if case.tolerance is not None:
            precision = problem.dtype if problem.dtype in HALF else problem.args["precision"]
            return compare_norm(C[..., rows, :], case.expected, case.tolerance, what=f"{precision} results")
        broadcast = case.what.endswith("B broadcast")
        if case.what.startswith("exact rows"):
            return compare_exact(C[..., rows, :], case.expected,
                                 what="rows of C" + (" (B broadcast)" if broadcast else ""))
        if case.expected is not None:
            return compare_exact(C, case.expected, **({"what": "elements (B broadcast)"} if broadcast else {}))
        A, B = case.inputs64
        _, M, N, _ = dims(problem.shape)
        for _ in range(3):
            v = rng.integers(-1000, 1001, size=(N, 1)).astype(np.float64)
            problem_text = compare_exact(C @ v, A @ (B @ v), what="C @ v (Freivalds' test)")
            if problem_text:
                return problem_text
        if C.ndim == 3:  # the sampled elements of one matrix of the stack
            z = int(rng.integers(0, C.shape[0]))
            C, A, B = C[z], A[z], B[z] if B.ndim == 3 else B
        rows, cols = rng.integers(0, M, size=32), rng.integers(0, N, size=16)
        return compare_exact(C[np.ix_(rows, cols)], A[rows] @ B[:, cols], what="sampled elements")

    def result_error(self, problem, inputs, result) -> float:
        """Relative (Frobenius) error of ``error_rows`` of C against the float64 product of the same operands."""
        rows = error_rows(problem.shape)
        A, B = (np.asarray(a, np.float64) for a in inputs)
        return relative_error(np.asarray(result, np.float64)[..., rows, :], A[..., rows, :] @ B)

    # -- search -------------------------------------------------------------------------------------
    def seeds(self):
        return [("seed naive", {"strategy": "naive"}), ("seed shared16", {"strategy": "shared16"})]

    def default_params(self, problem) -> dict[str, Any]:
        """The space's defaults (CUDA cores) with fp64's vectors halved, and smaller tiles under 1024 rows and columns;
        at a TF32 precision, a tensor-core configuration that won big squares at both TF32 precisions (smaller
        tiles likewise); for float16 and bfloat16 its tensor-core counterpart, fed through cp.async. A skinny
        problem takes the gemv kernel (gemv.defaults), which reads the matrix once where a tile of C would be mostly
        empty."""
        _, M, N, _ = dims(problem.shape)
        if problem.args["skinny"]:
            from ...core.space import load_space

            splits = load_space("matmul").params["SPLIT_K"].values
            return gemv.defaults(dims(problem.shape), problem.dtype, problem.args, splits)
        params: dict[str, Any] = {"VEC": 2} if problem.dtype == "float64" else {}
        if problem.args["precision"] != "ieee":
            params.update(BM=128, BN=128, BK=32, TM=8, TN=8, MMA=8, A_SMEM="mmajor", UNROLL_K=16, GROUP_M=16)
        if problem.dtype in HALF:
            params.update(BM=128, BN=128, BK=32, TM=8, TN=8, MMA=16, A_SMEM="mmajor", UNROLL_K=16, GROUP_M=16,
                          VEC=4, ASYNC_STAGES=3)
        if max(M, N) < 1024:
            params.update(BM=64, BN=64, BK=16, TM=4, TN=4)
        return params

    def problem_starts(self, start, problem, device, space) -> list[dict[str, Any]]:
        """A tiled starting configuration in the forms that fit this problem, best fit first: the split of K
        that fills the GPU, and clamped edges where M or N is no multiple of the tile.

        A start written for big squares leaves most SMs idle on a skinny or small problem (128x128 tiles of
        8192x128 are 64 blocks for 132 SMs); the forms are the smallest splits (1, unsplit, among them) that reach
        90% of one and of two waves of blocks, as long as each split keeps at least two K tiles, then the start
        as given. A split form (given or found) is tried with each way of combining its slices (SPLIT_ADD; the
        tuner drops the vector one where the dtype has none, and any form invalid for the problem). Where the
        tiles overhang M or N, every form is tried with ``EDGE: clamp`` first: a square winner runs a slightly
        smaller square markedly faster clamped, and the committed winners of 1000^3 and 127x3000x511 are clamped.
        A TMA start is also tried with a block per SM (SCHEDULE persistent and stream_k), and in pairs of blocks
        sharing A (CLUSTER 2), unsplit. A gemv start is fitted to fill the GPU likewise, by K split and by groups
        of warps sharing K (gemv.starts); a batched problem's blocks count every matrix's."""
        if gemv.is_gemv(start):
            return gemv.starts(start, dims(problem.shape), problem.dtype, problem.args, device.sm_count,
                               space.params["SPLIT_K"].values)
        if not is_tiled(start):
            return []
        _, M, N, _ = dims(problem.shape)
        given = start.get("SPLIT_K", 1)
        splits = [given] if given > 1 else \
            _filling_splits(start, dims(problem.shape), device.sm_count, space.params["SPLIT_K"].values) + [1]
        forms: list[dict[str, Any]] = []
        for split in dict.fromkeys(splits):
            if split == 1:
                forms.append(dict(start))
            else:
                forms += [{**start, "SPLIT_K": split, "SPLIT_ADD": add} for add in ("atomic", "vector", "last_block")]
        if start.get("EDGE") == "interior" and (M % start["BM"] or N % start["BN"]):
            forms = [{**c, "EDGE": "clamp"} for c in forms] + forms
        if is_tma(start) and schedule(start) == "tile":  # the same tiles walked by a block per SM, or in pairs
            forms += [{**start, "SCHEDULE": s, "SPLIT_K": 1} for s in ("persistent", "stream_k")]
            if start.get("CLUSTER", 1) == 1 and N > start["BN"]:  # a pair needs two tiles along N
                forms.append({**start, "CLUSTER": 2, "SPLIT_K": 1})
        return forms

    # -- coverage -----------------------------------------------------------------------------------
    def stand_in_args(self, args) -> list[dict[str, Any]]:
        """A transposed layout (tn, nt, tt) with nothing tuned of its own takes layout nn's choice: every kernel
        takes every layout with the same configuration (the operands' loads change, the tiles do not)."""
        return [{**args, "layout": "nn"}] if args["layout"] != "nn" else []

    def fit_config(self, params, problem, device, space) -> dict[str, Any]:
        """A CUDA-core or ``mma.sync`` configuration with its K split and edge handling chosen for this shape:
        the smallest split that fills 90% of a wave of blocks (``problem_starts``' first form), else, where none
        does, the largest that keeps two K tiles per split; SPLIT_ADD kept where the configuration had one and it
        is valid, else the first valid way of combining; clamped edges exactly where the tiles overhang M or N.
        A wgmma configuration is split only where its tiles leave most SMs idle and K is long
        (``_wgmma_split``), its slices combined by the last block (with one block per tile), else unsplit. A
        gemv configuration of a skinny problem takes the short side's passes and the K split that fit the shape
        (``gemv.starts``' first form). A batched problem's blocks count every matrix's."""
        if gemv.is_gemv(params):
            return self._fit_gemv(params, problem, device, space)
        if not is_tiled(params):
            return dict(params)
        shape, splits = dims(problem.shape), space.params["SPLIT_K"].values
        base = {k: v for k, v in params.items() if k not in ("SPLIT_K", "SPLIT_ADD")}
        if is_wgmma(params):
            split_base = {**base, "SCHEDULE": "tile"} if is_tma(base) else base  # a split takes a block per tile
            split = _wgmma_split(split_base, shape, device.sm_count, splits, numpy_dtype(problem.dtype).itemsize)
            adds: tuple[str, ...] = ("last_block",)
        else:
            _, M, N, _ = shape
            base["EDGE"] = "clamp" if M % base["BM"] or N % base["BN"] else "interior"
            split = _fitting_split(base, shape, device.sm_count, splits)
            add = params.get("SPLIT_ADD", "atomic") if params.get("SPLIT_K", 1) > 1 else "atomic"
            adds, split_base = tuple(dict.fromkeys((add, "atomic", "last_block", "vector"))), base
        given = (params.get("SPLIT_K", 1), params.get("SPLIT_ADD"))  # returned as they are where no form is valid
        key = (tuple(base.items()), given, adds, split, problem.dtype, tuple(problem.args.items()), device.cc,
               id(space))
        if key not in self._fitted:  # a choice must cost well under a millisecond: validation is most of it
            if len(self._fitted) > 4096:
                self._fitted.clear()
            forms = [{**split_base, "SPLIT_K": split, "SPLIT_ADD": a} for a in adds] if split > 1 else []
            forms.append({**base, "SPLIT_K": 1})
            checked = (space.checked_or_none(form, dtype=problem.dtype, args=problem.args) for form in forms)
            self._fitted[key] = next((c for c in checked if c is not None and self.unfit_for(c, device) is None),
                                     dict(params))
        return dict(self._fitted[key])

    def _fit_gemv(self, params, problem, device, space) -> dict[str, Any]:
        """``fit_config`` of a gemv configuration: fitted where the problem is skinny and the fitted form is valid,
        else as given (a gemv configuration applies to skinny problems alone)."""
        if not problem.args["skinny"]:
            return dict(params)
        fitted = gemv.starts(params, dims(problem.shape), problem.dtype, problem.args, device.sm_count,
                             space.params["SPLIT_K"].values)[0]
        checked = space.checked_or_none(fitted, dtype=problem.dtype, args=problem.args)
        return checked if checked is not None else dict(params)

    def shape_set(self, name, dtype, args) -> list[tuple[int, ...]]:
        from .coverage import shape_set

        return shape_set(name, dtype, args, tuple(tuple(int(d) for d in s.split("x")) for s in self.suite))

    def shape_set_rule(self) -> str:
        from .coverage import rule_text

        return rule_text()

    # -- optional -----------------------------------------------------------------------------------
    def peers(self, problem, inputs: Sequence) -> dict[str, Any]:
        """cuBLAS through CuPy and PyTorch in IEEE fp32 (TF32 off), the accuracy of "ieee" and "3xtf32"; for "tf32",
        PyTorch's with TF32 on (CuPy's is set by an environment variable read once, so it is left out); for
        bfloat16, PyTorch's alone (its tensors made from the operands' bits)."""
        found = {}
        tf32 = problem.args["precision"] == "tf32"
        bf16 = problem.dtype == "bfloat16"
        try:
            import cupy

            if not (tf32 or bf16):
                A, B = (cupy.asarray(a) for a in inputs)
                found["cuBLAS (cupy)"] = lambda: A @ B
        except ImportError:
            pass
        try:
            import torch

            if bf16:  # PyTorch imports no bfloat16 array interface: the operands' bits, as int16
                tA, tB = (torch.as_tensor(retyped(a, np.dtype(np.int16)), device="cuda").view(torch.bfloat16)
                          for a in inputs)
            else:
                tA, tB = (torch.as_tensor(a, device="cuda") for a in inputs)

            def torch_matmul():
                torch.backends.cuda.matmul.allow_tf32 = tf32
                return tA @ tB

            found["cuBLAS TF32 (torch)" if tf32 else "cuBLAS (torch)"] = torch_matmul
        except ImportError:
            pass
        return found

    def selftest_cases(self, small: bool):
        """Odd shapes per dtype and layout; on the GPU also stacks (batch: every template that takes one, a stack
        of 1 and one past a block of matrices) and skinny problems (the gemv kernel, both sides)."""
        shapes = [(1, 1, 1), (7, 13, 5), (37, 29, 41), (17, 19, 1), (130, 3, 9), (257, 263, 129), (1000, 1000, 1000)]
        cases = [(dtype, {"layout": layout}, shapes[1:4] if small else shapes)
                 for dtype in self.dtypes[:1 if small else None] for layout in (LAYOUTS[:1] if small else LAYOUTS)]
        if small:
            return cases
        stacks = [(1, 37, 29, 41), (3, 37, 29, 41), (5, 130, 67, 9)]
        skinny = {"n": [(37, 1, 41), (1000, 7, 1000), (3001, 16, 129)], "m": [(1, 37, 41), (7, 1000, 1000)]}
        for dtype in self.dtypes:
            for layout in ("nn", "tt"):  # both forms of the gemv kernel on each side; both transposes of a stack
                cases.append((dtype, {"layout": layout, "batch": "strided"}, stacks))
                cases += [(dtype, {"layout": layout, "skinny": side}, found) for side, found in skinny.items()]
        return cases

    def selftest_extras(self) -> list[dict[str, Any]]:
        """Configurations a covering sample leaves out that the selftest checks too (where they apply): the seed
        kernels, and the TMA-fed wgmma ones (each SCHEDULE, and in pairs) and the wgmma ones that split K, which
        the random draws of a covering sample (rejection sampling over every parameter) practically never reach,
        the deeper pipelines (6 and 8 stages) among them."""
        tma = {"BK": 64, "MMA": 16, "WGMMA": 1, "TMA": 1}
        return [{"strategy": "naive"}, {"strategy": "shared16"}, {**tma, "BM": 64, "BN": 64, "ASYNC_STAGES": 3},
                {**tma, "BM": 128, "BN": 256, "ASYNC_STAGES": 4, "GROUP_M": 1},
                {**tma, "BM": 64, "BN": 128, "ASYNC_STAGES": 8},
                {**tma, "BM": 128, "BN": 128, "ASYNC_STAGES": 6, "SCHEDULE": "persistent"},
                {**tma, "BM": 64, "BN": 64, "ASYNC_STAGES": 4, "SCHEDULE": "persistent", "GROUP_M": 1},
                {**tma, "BM": 128, "BN": 256, "ASYNC_STAGES": 4, "SCHEDULE": "persistent"},
                {**tma, "BM": 64, "BN": 128, "ASYNC_STAGES": 4, "SCHEDULE": "stream_k"},
                {**tma, "BM": 128, "BN": 256, "ASYNC_STAGES": 3, "SCHEDULE": "stream_k", "GROUP_M": 1},
                {**tma, "BM": 64, "BN": 128, "ASYNC_STAGES": 4, "CLUSTER": 2},
                {**tma, "BM": 128, "BN": 64, "ASYNC_STAGES": 8, "CLUSTER": 2, "GROUP_M": 1},
                {**tma, "BM": 128, "BN": 128, "ASYNC_STAGES": 4, "SPLIT_K": 2, "SPLIT_ADD": "last_block"},
                {**tma, "TMA": 0, "BM": 64, "BN": 128, "ASYNC_STAGES": 3, "SPLIT_K": 4, "SPLIT_ADD": "last_block"}]

    def bench_name(self, problem) -> str:
        layout, precision, out = (problem.args[a] for a in ("layout", "precision", "out_dtype"))
        return "matmul" + ("-batched" if problem.args["batch"] else "") + ("" if layout == "nn" else f"-{layout}") + \
            ("" if problem.dtype == "float32" else f"-{problem.dtype}") + \
            ("" if precision == "ieee" else f"-{precision}") + ("" if out is None else f"-to-{out}")


def _fitting_split(start: Mapping[str, Any], shape: tuple[int, int, int, int], sm_count: int, splits) -> int:
    """``fit_config``'s split: the first of ``_filling_splits``, else the largest that keeps two K tiles a split
    (``shape``: B x M x N x K)."""
    filling = _filling_splits(start, shape, sm_count, splits)
    if filling:
        return filling[0]
    return max((s for s in splits if shape[3] >= 2 * start["BK"] * s), default=1)


#: A slice's float32 partial tile, written and read back by the last block, costs about as much as 10-20 K steps of
#: 128 x 128 x 64 on the tensor cores: a wgmma tile is split over K only where the split saves more K steps than
#: WGMMA_SPLIT_SAVED_STEPS, and each slice keeps WGMMA_SPLIT_MIN_STEPS K tiles.
WGMMA_SPLIT_SAVED_STEPS = 16
WGMMA_SPLIT_MIN_STEPS = 8
#: The registers a wgmma kernel's thread takes beside its BN / 2 accumulators (about 95 in all for 128 x 128 tiles,
#: from ptxas).
WGMMA_REGISTERS_BESIDE_C = 32


def wgmma_blocks_per_sm(params: Mapping[str, Any], itemsize: int) -> int:
    """Blocks of a wgmma configuration one SM holds at once (at least 1), by its shared memory and by an estimate
    of its registers: each thread of a warpgroup (64 rows) keeps BN / 2 float32 accumulators, and every thread of
    the block, the TMA's producer too, is given the same count (rounded up to 8)."""
    by_shared = SM_SHARED_BYTES // (matmul_shared_bytes(params, itemsize, 4) + SHARED_PER_BLOCK)
    registers = -(-(params["BN"] // 2 + WGMMA_REGISTERS_BESIDE_C) // 8) * 8
    by_registers = SM_REGISTERS // (matmul_threads(params) * registers)
    return max(1, min(by_shared, by_registers))


def _wgmma_split(start: Mapping[str, Any], shape: tuple[int, int, int, int], sm_count: int, splits,
                 itemsize: int) -> int:
    """``fit_config``'s K split of a wgmma configuration (``shape``: B x M x N x K): 1 where its tiles fill half a
    wave of blocks or more; else, among the splits that save more than WGMMA_SPLIT_SAVED_STEPS K steps, keep
    WGMMA_SPLIT_MIN_STEPS K tiles a slice and whose blocks are all resident at once (``wgmma_blocks_per_sm``), the
    smallest that fills 90% of a wave, or where none does, the largest (1 where there is none).
    A variant that cannot split (the register-fed tf32 and 3xtf32 ones: ``wgmma_split_fits``) stays unsplit when
    ``fit_config`` validates the split form.

    The tensor cores make a K step short, so the combining that CUDA-core tiles amortize in two K tiles needs a
    long K here: 1000^3 in 64 tiles of 128 x 128 (16 K steps) was tuned unsplit on the H100, and shapes of a few
    tiles with long K (1024 x 128 x 7992: 8 tiles of 128 x 256 and 125 K steps) ran at 0.24-0.4x cuBLAS unsplit.
    A second wave of slices costs more than it saves: 6973 x 73 x 3328 in 55 tiles of 128 x 128 (one block a SM)
    ran 0.83x as fast split in 4 (220 blocks) as unsplit on the H200."""
    batch, M, N, K = shape
    blocks = -(-M // start["BM"]) * -(-N // start["BN"]) * batch
    if 2 * blocks >= sm_count:
        return 1
    steps = K / start["BK"]
    resident = sm_count * wgmma_blocks_per_sm(start, itemsize)
    keeping = [s for s in splits if s > 1 and steps >= WGMMA_SPLIT_MIN_STEPS * s
               and steps * (1 - 1 / s) > WGMMA_SPLIT_SAVED_STEPS and blocks * s <= resident]
    filling = [s for s in keeping if blocks * s >= 0.9 * sm_count]
    return min(filling) if filling else max(keeping, default=1)


def _filling_splits(start: Mapping[str, Any], shape: tuple[int, int, int, int], sm_count: int,
                    splits) -> list[int]:
    """The smallest K splits (1 included) that give 90% of one and of two waves of blocks, each split keeping two
    K tiles (``shape``: B x M x N x K, the blocks of every matrix counted).

    A split that just misses a whole wave can beat the next one up, which pays twice the combining for a wave it
    barely fills: 64 tiles split 2 (0.97 of a wave on 132 SMs) won fp32 1024^3 and fp64 1000^3, where whole waves
    would start at split 4; and tiles that already fill 90% of a wave are best unsplit (128x256 tiles of 2048^3, 128
    blocks). For their tiles, this rule proposes the split of nearly every split-K entry in the committed
    databases, and 1 for all the unsplit ones."""
    batch, M, N, K = shape
    blocks = -(-M // start["BM"]) * -(-N // start["BN"]) * batch
    found: list[int] = []
    for waves in (0.9, 1.8):
        split = next((s for s in splits if blocks * s >= waves * sm_count), None)
        if split and (split == 1 or K >= 2 * start["BK"] * split) and split not in found:
            found.append(split)
    return found




family = MatmulFamily()
