"""Calling a matmul variant: argument checks, launch configuration, split-K workspaces, plans.

A split-K variant with ``SPLIT_ADD: last_block`` keeps, per shape it is called with, a workspace of
SPLIT_K x M x N elements (rounded up to whole tiles) and a counter per tile (a Stream-K variant, ``SCHEDULE:
stream_k``, two partial tiles per block and a counter per tile); like the reductions' counter, they
belong to the kernel object and are kept per stream (see autotune/runtime/streams.py), so calls on different streams
never share them. So are the TF32-rounded copies of A and B that a variant reading rounded copies multiplies
((M + N) x K floats; see autotune/families/matmul/tf32_copies.py): each call first writes them, then the wgmma kernel
reads them; and the float32 workspace of a gemv variant whose K slices meet there (M x N per matrix).

A batched kernel (family argument batch "strided", a problem B x M x N x K) takes stacks: A of shape (..., M, K),
B of shape (..., K, N), their leading (batch) dimensions broadcasting as NumPy's, so that an operand of shape
(M, K) (or (1, M, K)) is one matrix every product reads; C is the C-contiguous stack (..., M, N). Each matrix is
stored as the layout says (a 't' operand's matrices are transposes of C-contiguous ones: ``x.swapaxes(-1, -2)``
of a C-contiguous stack, PyTorch's ``x.mT``); the stack around them may be strided. One launch multiplies them all
(autotune/families/matmul/batch.py), where their batch dimensions collapse to two levels of strides; otherwise
the call raises and says so.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np

from ...core.device import gpu_required
from ...core.dtypes import kernel_view, storage
from ...core.family import Kernel
from ...runtime import arrays, result_pool
from ...runtime.launch import Plan, Planned, configure, elementwise, zero
from ...runtime.libraries import library_of
from ...runtime.streams import DEFAULT, as_stream, follow, stream_key
from . import batch as batching
from . import gemv
from .config import (
    PERSISTENT_BATCH_ARGS,
    accumulator_dtype,
    dynamic_shared_bytes,
    is_pair,
    is_persistent,
    is_tma,
    is_wgmma,
    kernel_args,
    matmul_threads,
    reads_rounded_copies,
    schedule,
    split_add,
)

INT32_MAX = 2**31 - 1
KEPT_TENSOR_MAPS = 64  # per kernel object: the maps of this many operand pairs are kept
WGMMA_VECTOR_BYTES = 16  # wgmma variants copy A and B, and store C, in 16-byte pieces


def index_type(params: Mapping[str, Any]) -> str:
    return "int32" if params.get("INDEX_BITS") == 32 else "int64"


def signature(params: Mapping[str, Any], dtype: str, args: Mapping[str, Any] | None = None) -> str:
    """The kernel's Numba signature; ``args``: the family arguments (out_dtype, and batch and skinny, which decide
    the arguments of a batched or a gemv kernel)."""
    args = args or {}
    arr, it = f"{storage(dtype)}[::1]", index_type(params)
    types = {"A": arr, "B": arr, "C": f"{storage(args.get('out_dtype') or dtype)}[::1]",
             "W": f"{accumulator_dtype(dtype)}[::1]", "counters": "int32[::1]", "maps": "uint8[::1]",
             "vec_a": "boolean", "vec_b": "boolean", "vec_c": "boolean",
             **{name: "int64" for name in PERSISTENT_BATCH_ARGS}}
    return f"void({', '.join(types.get(name, it) for name in kernel_args(params, args, dtype))})"


def stack_levels(stack, step: tuple[int, int], itemsize: int) -> tuple[tuple[int, int], ...]:
    """A tensor map's batch levels of one operand of ``stack`` (none without one): (count, byte stride) of the
    inner level, then of the outer one, the count 1 on a level the operand is broadcast over (``step``: its
    element strides, 0 there), as the kernel's coordinates (0 there) read them."""
    if stack is None:
        return ()
    return ((stack.inner if step[1] else 1, step[1] * itemsize), (stack.outer if step[0] else 1, step[0] * itemsize))


class MatmulKernel(Planned, Kernel):
    """A compiled matmul variant. ``k(A, B)`` or ``k(A, B, out=C)``; see the module docstring for layouts.

    With device arrays a call after the first replays a prepared plan (see launch.py): into ``out=``, or onto a
    new output; ``k.bind(A, B, out=C)`` returns the plan to call directly.
    """

    def __init__(self, family, module, params: Mapping[str, Any], dtype: str, args: Mapping[str, Any], source: str,
                 simulator: bool):
        super().__init__(family, module, params, dtype, args, source, simulator)
        self.layout = args["layout"]
        self.out_dtype = args.get("out_dtype") or dtype
        self.entry = module.matmul
        self.arg_names = kernel_args(params, args, dtype)
        self.batched = bool(args.get("batch"))
        self._launches: dict[tuple[int, int, int], tuple] = {}
        self._copies: dict[tuple, tuple] = {}
        self._aligned: dict[tuple, Any] = {}
        self._maps: dict[tuple, Any] = {}
        self._int = np.int32 if index_type(params) == "int32" else np.int64
        self._stand_ins = None
        self._vecs = self._vectors()

    def __repr__(self) -> str:
        return f"<MatmulKernel {self.dtype} layout={self.layout} {self.params}>"

    @property
    def signature(self) -> str:
        return signature(self.params, self.dtype, self.args)

    def _operand(self, x, name: str, transposed: bool):
        d = arrays.to_device(x, name)
        arrays.check_dtype(d, name, self.dtype, self.family.dtypes)
        if d.ndim != 2:
            raise ValueError(f"{name} must be 2-D, got shape {tuple(d.shape)}")
        if transposed:
            if not arrays.is_f_contiguous(d):
                raise ValueError(f"layout {self.layout!r} wants {name} as the transpose of a C-contiguous array "
                                 f"(pass X.T of a NumPy or CuPy array; a Numba device array's .T is a transposed "
                                 f"copy, so pass X.ravel().reshape(X.shape[::-1], order='F')); got strides "
                                 f"{d.strides}")
            return d, arrays.flat(d, order="F"), d.shape[0]
        if not arrays.is_c_contiguous(d):
            hint = " (it is a transposed view: build with a 't' layout)" if arrays.is_f_contiguous(d) else ""
            raise ValueError(f"{name} must be C-contiguous for layout {self.layout!r}{hint}")
        return d, arrays.flat(d), d.shape[1]

    def _vectors(self) -> tuple[int, int, int]:
        """Elements per vector of A, B and C: VEC, or per 16-byte piece in a wgmma variant."""
        if is_wgmma(self.params):
            return tuple(WGMMA_VECTOR_BYTES // np.dtype(t).itemsize for t in (self.dtype, self.dtype, self.out_dtype))
        return (self.params.get("VEC", 1),) * 3

    def _launch_config(self, M: int, N: int, K: int, stream, count: int = 0):
        """The launch configuration, K chunk and workspace of calls of this shape on this stream; ``count``: the
        matrices of a batched launch, one per grid row z (0: an unbatched kernel)."""
        key = (M, N, K, count, stream_key(stream))
        if key not in self._launches:
            p = self.params
            tiles = 0  # C's tiles, where the variant is tiled
            if gemv.is_gemv(p):
                grid, block, k_chunk = gemv.launch_shape(p, self.args, M, N, K)
            elif p["strategy"] == "naive":
                grid, block, k_chunk = ((M + 15) // 16, (N + 15) // 16), (16, 16), K
            elif p["strategy"] == "shared16":
                grid, block, k_chunk = ((N + 15) // 16, (M + 15) // 16), (16, 16), K
            else:
                per_split = -(-K // p.get("SPLIT_K", 1))
                k_chunk = -(-per_split // p["BK"]) * p["BK"]
                blocks = tiles = (-(-M // p["BM"])) * (-(-N // p["BN"]))
                if is_pair(p):  # two blocks per pair of tiles along N (where N has an odd count, the last one past N)
                    blocks = 2 * (-(-M // p["BM"])) * (-(-N // (2 * p["BN"])))
                if is_persistent(p):  # a block per SM walks the tiles (of every matrix; Stream-K: their K steps)
                    work = tiles * -(-K // p["BK"]) if schedule(p) == "stream_k" else tiles * max(count, 1)
                    if work >= 2**32:
                        raise ValueError(f"this variant ({schedule(p)}) counts its work (tiles of every matrix; "
                                         f"Stream-K: their K steps) in 32 bits, and this product has {work}: use "
                                         f"SCHEDULE tile")
                    blocks = min(work, self._sm_count())
                grid, block = (blocks, -(-K // k_chunk)), matmul_threads(p)
            if count and not is_persistent(p):  # a row of the grid per matrix
                grid = (*grid, count)
            shared = dynamic_shared_bytes(p, self.dtype, self.out_dtype)
            self._launches[key] = (configure(self.entry, grid, block, shared, self.simulator, stream,
                                             2 if is_pair(p) else 1), k_chunk,
                                   self._scratch(grid, M * N * max(count, 1), tiles))
        return self._launches[key]

    def _sm_count(self) -> int:
        """The current GPU's SMs (the simulator's stand-in count), which a persistent variant's grid fills."""
        from ...core.device import current_device

        return current_device().sm_count

    def _scratch(self, grid, outputs: int, tiles: int) -> tuple:
        """The workspace of partial tiles and the per-tile counters of SPLIT_ADD last_block (every matrix's, for a
        batched launch) or of Stream-K (two partial tiles per block of the grid, a counter per tile of C's
        ``tiles``), kept per shape (the counters are zeroed once here; the kernel resets them); the float32
        workspace of a gemv variant whose K slices meet there (``outputs`` elements, C's); for other variants,
        one-element stand-ins made once per kernel."""
        from numba import cuda

        p = self.params
        if gemv.is_gemv(p) and gemv.workspace(p, self.out_dtype):
            return cuda.device_array(outputs, dtype=np.float32), None
        if schedule(p) == "stream_k":  # two partial tiles per block at most: its first and its last share
            return (cuda.device_array(2 * grid[0] * p["BM"] * p["BN"], dtype=np.float32),
                    cuda.to_device(np.zeros(tiles, dtype=np.int32)))
        if split_add(p) == "last_block":
            _, slices, *count = grid  # grid row x: the tiles, as split variants are not persistent
            matrices = count[0] if count else 1
            partials = tiles * slices * p["BM"] * p["BN"] * matrices
            return (cuda.device_array(partials, dtype=accumulator_dtype(self.dtype)),
                    cuda.to_device(np.zeros(tiles * matrices, dtype=np.int32)))
        if self._stand_ins is None:
            self._stand_ins = (cuda.device_array(1, dtype=accumulator_dtype(self.dtype)),
                               cuda.device_array(1, dtype=np.int32))
        return self._stand_ins

    def __call__(self, A, B, out=None, *, stream=None):
        stream = as_stream(stream)
        follow(stream, map(arrays.producer_stream, (A, B, out)))
        if out is not None and (plan := self._plan_for((A, B), out, lambda: self.bind(A, B, out=out, stream=stream),
                                                       stream)):
            plan()
            return out
        if out is None:
            library = library_of(A, B)
            if (C := self._replayed_new((A, B), stream)) is not None:
                return C if library.wrap is None else library.wrap(C)
            C = self._run_new((A, B), self._prepare(A, B, out, stream), stream)
            return library.result(arrays.device_to_host(C) if library.host else C)
        _, run = self._prepare(A, B, out, stream)
        run()
        return out

    def bind(self, A, B, out=None, *, stream=None) -> Plan:
        """The call ``k(A, B, out=out, stream=stream)`` checked once; calling the plan launches it again and
        returns C."""
        return self._plan(self._prepare(A, B, out, as_stream(stream)))

    def _prepare(self, A, B, out, stream):
        with gpu_required():
            return self._prepare_checked(A, B, out, stream)

    def _prepare_checked(self, A, B, out, stream):
        if self.batched:
            return self._prepare_stack(A, B, out, stream)
        dA, a_flat, lda = self._operand(A, "A", self.layout[0] == "t")
        dB, b_flat, ldb = self._operand(B, "B", self.layout[1] == "t")
        (M, K), (K2, N) = dA.shape, dB.shape
        if K != K2:
            raise ValueError(f"shapes {tuple(dA.shape)} and {tuple(dB.shape)} do not align for A @ B (K {K} != {K2})")
        if min(M, N, K) == 0:
            raise ValueError(f"matmul needs M, N, K >= 1, got M={M}, N={N}, K={K}")
        C = self._output(out, M, N, stream)
        target = self._scratch_for(C, dA, dB, stream=stream)
        c_flat = arrays.flat(target)
        return C, lambda: self._into(C, target, lambda: self.launch(a_flat, b_flat, c_flat, M, N, K, lda, ldb, stream),
                                     stream)

    def _prepare_stack(self, A, B, out, stream):
        """A batched call: the operands' stacks (see the module docstring) as one launch's strides."""
        ops = []
        for x, name, transposed in ((A, "A", self.layout[0] == "t"), (B, "B", self.layout[1] == "t")):
            d = arrays.to_device(x, name)
            arrays.check_dtype(d, name, self.dtype, self.family.dtypes)
            ops.append((d, batching.operand(d, name, transposed)))
        (dA, a), (dB, b) = ops
        (M, K), (K2, N) = (a.rows, a.cols), (b.rows, b.cols)
        if K != K2:
            raise ValueError(f"shapes {tuple(dA.shape)} and {tuple(dB.shape)} do not align for A @ B (K {K} != {K2})")
        if min(M, N, K) == 0:
            raise ValueError(f"matmul needs M, N, K >= 1, got M={M}, N={N}, K={K}")
        try:
            shape = np.broadcast_shapes(a.batch, b.batch)
        except ValueError:
            raise ValueError(f"the stacks of A {tuple(dA.shape)} and B {tuple(dB.shape)} do not broadcast") from None
        C = self._output(out, M, N, stream, shape)
        c_steps = tuple(int(np.prod(shape[i + 1:])) * M * N for i in range(len(shape)))
        stack = batching.stack_of(shape, batching.broadcast(shape, a), batching.broadcast(shape, b), c_steps)
        if stack is None:
            raise ValueError(f"the stacks of A {tuple(dA.shape)} and B {tuple(dB.shape)} need more than two batch "
                             f"strides per operand: launch their leading matrices one call each (autotune.matmul "
                             f"does)")
        target = self._scratch_for(C, dA, dB, stream=stream)
        if not stack.count:
            return C, lambda: None
        c_flat = arrays.flat(target)
        return C, lambda: self._into(C, target, lambda: self._launch_stack(a, b, c_flat, K, stack, stream), stream)

    def _launch_stack(self, a, b, c_flat, K: int, stack, stream) -> None:
        """The launches of a checked stack: one, or one per MAX_GRID_Z matrices."""
        M, N = a.rows, b.cols
        for (ao, bo, co), chunk in batching.chunks(stack):
            self.launch(a.flat[ao:], b.flat[bo:], c_flat[co:co + chunk.count * M * N], M, N, K, a.ld, b.ld, stream,
                        stack=chunk)

    def _output(self, out, M: int, N: int, stream, stack: tuple[int, ...] = ()):
        shape = (*stack, M, N)
        if out is None:
            return result_pool.empty(shape, self.out_dtype, "C", stream)
        if arrays.is_host(out):
            raise TypeError("out must be a device array (CuPy, PyTorch CUDA or Numba), not a NumPy array")
        C = arrays.to_device(out, "out")
        arrays.check_dtype(C, "out", self.out_dtype, self.family.dtypes)
        if tuple(C.shape) != shape or not arrays.is_c_contiguous(C):
            raise ValueError(f"out must be a C-contiguous {shape} array, got shape {tuple(C.shape)}")
        return C

    def launch(self, a_flat, b_flat, c_flat, M: int, N: int, K: int, lda: int, ldb: int, stream=DEFAULT,
               stack=None) -> None:
        """Launch on flat, already-checked device arrays (the tuner's path), on ``stream`` (see streams.py); a
        batched kernel's ``stack`` (batch.Stack) says where its matrices lie in them."""
        p = self.params
        a_flat, b_flat, c_flat = kernel_view(a_flat), kernel_view(b_flat), kernel_view(c_flat)
        spans = (a_flat.size, b_flat.size, c_flat.size) if stack is None else (M * K, K * N, M * N)
        if self._int is np.int32 and max(spans) > INT32_MAX:
            raise ValueError("this variant uses 32-bit indices and the operands have more than 2**31 elements; "
                             "use INDEX_BITS=64")
        count = 0 if stack is None else stack.count
        configured, k_chunk, (partials, counters) = self._launch_config(M, N, K, stream, count)
        if reads_rounded_copies(p):
            a_flat, b_flat, lda, ldb = self._rounded_copies(a_flat, b_flat, M, N, K, lda, ldb, stream)
        maps = None
        if is_tma(p):
            if not reads_rounded_copies(p):  # the copies' rows are aligned
                steps = ((0, 0), (0, 0)) if stack is None else (stack.a, stack.b)
                (a_flat, lda, a_step), (b_flat, ldb, b_step) = (
                    self._tma_readable(x, rows, cols, ld, name, stream, step, stack)
                    for x, (rows, cols, _), ld, name, step
                    in zip((a_flat, b_flat), self._read_as(M, N, K), (lda, ldb), "AB", steps))
                if stack is not None:
                    stack = dataclasses.replace(stack, a=a_step, b=b_step)
            maps = self._tensor_maps(a_flat, b_flat, M, N, K, lda, ldb, stack)
        steps = ((0, 0),) * 3 if stack is None else (stack.a, stack.b, stack.c)
        vec_a, vec_b, vec_c = (bool(arrays.aligned(x, vec) and ld % vec == 0 and not any(s % vec for s in step))
                               for x, ld, vec, step in zip((a_flat, b_flat, c_flat), (lda, ldb, N), self._vecs, steps))
        finish = gemv.is_gemv(p) and gemv.workspace(p, self.out_dtype)
        if finish:  # the K slices add into the float32 workspace, then finish() rounds it into C
            self._enqueue(*zero(self.module, partials, self.simulator, stream))
        elif split_add(p) in ("atomic", "vector"):  # the slices add into C
            self._enqueue(*zero(self.module, c_flat, self.simulator, stream))
        i = self._int
        values = {"A": a_flat, "B": b_flat, "C": c_flat, "W": partials, "counters": counters, "M": i(M), "N": i(N),
                  "K": i(K), "lda": i(lda), "ldb": i(ldb), "ldc": i(N), "k_chunk": i(k_chunk), "vec_a": vec_a,
                  "vec_b": vec_b, "vec_c": vec_c, "maps": maps}
        if stack is not None:
            values.update(zip(PERSISTENT_BATCH_ARGS,
                              map(np.int64, (stack.inner, *stack.a, *stack.b, stack.c[1], stack.count))))
        self._enqueue(configured, *(values[name] for name in self.arg_names))
        if finish:
            self._enqueue(elementwise(self.module.finish, c_flat.size, self.simulator, stream), partials, c_flat,
                          np.int64(c_flat.size))

    def _read_as(self, M: int, N: int, K: int) -> tuple[tuple[int, int, bool], tuple[int, int, bool]]:
        """Rows, columns and K-majorness of A and B as the kernel reads them: as stored (A M x K, B K x N, each
        transposed in a 't' layout), or the K-major rounded copies (M x K and N x K) of a variant reading them."""
        if reads_rounded_copies(self.params):
            return (M, K, True), (N, K, True)
        a = (K, M, False) if self.layout[0] == "t" else (M, K, True)
        b = (N, K, True) if self.layout[1] == "t" else (K, N, False)
        return a, b

    def _tma_readable(self, x, rows: int, cols: int, ld: int, name: str, stream, step: tuple[int, int] = (0, 0),
                      stack=None) -> tuple[Any, int, tuple[int, int]]:
        """An operand as the TMA reads it: itself where its rows (and, in a stack, its matrices: ``step``, the
        element strides of the two batch levels) start 16-byte aligned, else a copy whose rows do (aligned_rows;
        kept per shape, operand and stream), its launches enqueued; its row stride and its matrices' strides. A
        stack's copy holds its distinct matrices one after another (one launch each; a level the operand is
        broadcast over keeps stride 0)."""
        from . import aligned_rows as ar

        unit = ar.ALIGNED_ELEMENTS
        if arrays.aligned(x, unit) and ld % unit == 0 and not any(s % unit for s in step):
            return x, ld, step
        counts = (1, 1) if stack is None else (stack.outer if step[0] else 1, stack.inner if step[1] else 1)
        size = rows * ar.aligned_ld(cols)
        key = (name, rows, cols, counts, stream_key(stream))
        if key not in self._aligned:
            from numba import cuda

            configured = configure(ar.aligned_rows, -(-rows * cols // ar.THREADS), ar.THREADS, 0, self.simulator,
                                   stream)
            self._aligned[key] = configured, cuda.device_array(counts[0] * counts[1] * size, dtype=x.dtype)
        configured, copy = self._aligned[key]
        for outer in range(counts[0]):
            for inner in range(counts[1]):
                source = x[outer * step[0] + inner * step[1]:] if stack is not None else x
                target = copy[(outer * counts[1] + inner) * size:] if stack is not None else copy
                self._enqueue(configured, source, target, np.int64(rows), np.int64(cols), np.int64(ld),
                              np.int64(ar.aligned_ld(cols)))
        return copy, ar.aligned_ld(cols), (counts[1] * size if step[0] else 0, size if step[1] else 0)

    def _tensor_maps(self, a_flat, b_flat, M: int, N: int, K: int, lda: int, ldb: int, stack=None):
        """The device array of A's and B's tensor maps (128 bytes each), boxes as the template copies them, rows of
        128 bytes (the swizzle's span): a K-major operand in one box of BM (BN) rows, an M/N-major one in panels
        of 64 rows; for a ``stack`` (batch.Stack), maps of rank 4 whose last two dimensions are its inner and
        outer levels (one matrix on a level the operand is broadcast over), a box one matrix deep. Kept per
        operand pair and stack (a map holds only pointers, sizes and strides, so a kept one is right for any
        later array at the same address); the simulator's kernel reads A and B instead."""
        from numba import cuda

        key = (arrays.device_pointer(a_flat), arrays.device_pointer(b_flat), M, N, K, lda, ldb, stack)
        if key in self._maps:
            return self._maps[key]
        if self.simulator:
            maps = cuda.device_array(1, dtype=np.uint8)
        else:
            from ...kernels.tma import SWIZZLE_BYTES, tensor_map_bytes

            size = a_flat.dtype.itemsize
            wide = SWIZZLE_BYTES // size  # a box row: the swizzle's span
            tiles = (self.params["BM"] // (2 if is_pair(self.params) else 1), self.params["BN"])  # a pair's: half
            steps = ((), ()) if stack is None else (stack.a, stack.b)
            pieces = [tensor_map_bytes(arrays.device_pointer(flat), 8 * size, cols, rows, ld * size,
                                       (wide, tile if k_major else wide), levels=stack_levels(stack, step, size))
                      for flat, ld, (rows, cols, k_major), tile, step
                      in zip((a_flat, b_flat), (lda, ldb), self._read_as(M, N, K), tiles, steps)]
            maps = cuda.to_device(np.frombuffer(b"".join(pieces), dtype=np.uint8))
        if len(self._maps) >= KEPT_TENSOR_MAPS:
            self._maps.pop(next(iter(self._maps)))
        self._maps[key] = maps
        return maps

    def helper_kernels(self) -> list[tuple[Any, str]]:
        """The copy kernels a variant launches first where it needs them: a variant reading rounded copies, those
        of its layout; a TMA variant, the copy into aligned rows; a gemv variant whose K slices meet in a float32
        workspace, the kernel that rounds it into C; none otherwise."""
        if gemv.is_gemv(self.params):
            if not gemv.workspace(self.params, self.out_dtype):
                return []
            return [(self.module.finish, f"void(float32[::1], {storage(self.out_dtype)}[::1], int64)")]
        if not reads_rounded_copies(self.params):
            if not is_tma(self.params):
                return []
            from . import aligned_rows as ar

            return [(ar.aligned_rows, ar.signature(storage(self.dtype)))]
        from . import tf32_copies as tc

        kernels = {tc.rounded_transpose if transposed else tc.rounded_rows
                   for transposed in (self.layout[0] == "t", self.layout[1] == "n")}
        return [(k, tc.SIGNATURES[k.__name__]) for k in sorted(kernels, key=lambda k: k.__name__)]

    def _rounded_copies(self, a_flat, b_flat, M: int, N: int, K: int, lda: int, ldb: int, stream) -> tuple:
        """Enqueues the launches that round A into an M x K copy and B into an N x K one (K-major both, rows
        tf32_copies.rounded_ld(K) apart), kept per shape and stream; returns the copies and their row strides."""
        from . import tf32_copies as tc

        key = (M, N, K, stream_key(stream))
        if key not in self._copies:
            from numba import cuda

            ld = tc.rounded_ld(K)
            steps = []
            for rows, transposed in ((M, self.layout[0] == "t"), (N, self.layout[1] == "n")):
                kernel = tc.rounded_transpose if transposed else tc.rounded_rows
                configured = configure(kernel, tc.grid(rows, K, transposed), (tc.TILE, tc.ROWS), 0, self.simulator,
                                       stream)
                steps.append((configured, cuda.device_array(rows * ld, dtype=np.float32), rows, transposed))
            self._copies[key] = steps, ld
        steps, ld = self._copies[key]
        for (configured, copy, rows, transposed), source, ld_source in zip(steps, (a_flat, b_flat), (lda, ldb)):
            args = [source, copy, np.int64(rows), np.int64(K), np.int64(ld_source), np.int64(ld)]
            if not transposed:  # whether each row of the source is whole 16-byte pieces
                args.append(bool(arrays.aligned(source, 4) and ld_source % 4 == 0))
            self._enqueue(configured, *args)
        return steps[0][1], steps[1][1], ld, ld
