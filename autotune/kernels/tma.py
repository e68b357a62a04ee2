"""Hopper's tensor memory accelerator and transaction barriers as Numba intrinsics (sm_90).

A *tensor map* (128 bytes, made on the host by the driver's ``cuTensorMapEncodeTiled``: ``tensor_map_bytes``)
describes a 2-d array in global memory (or a stack of them: ``tma_load_4d``) and the box of it that one copy
moves. ``tma_load_2d``, issued by one
thread, copies the box at given coordinates into shared memory, in the map's swizzle (the 128-byte one is the
layout wgmma reads), and fills the elements outside the array with zeros; the copy reports its bytes to an
*mbarrier* in shared memory. The maps live in a device array (64-byte aligned) whose generic address the copy
takes.

An mbarrier (8 bytes of shared memory) completes a *phase* when its expected arrivals have arrived and the bytes
announced by ``mbar_expect_tx`` have landed; ``mbar_try_wait`` tests whether the phase of a given parity has
completed. A pipeline of stages keeps two per stage: *full* (the producer's copies landed) and *empty* (every
consumer has finished reading the stage).
"""
from __future__ import annotations

from llvmlite import ir
from numba.core import types
from numba.cuda.extending import intrinsic

from .intrinsics import _element_pointer, _make_plain_asm, _shared_address

SWIZZLE_BYTES = 128  # the span of the swizzle the maps use: a box's rows are this long
fence_barrier_init = _make_plain_asm("fence.mbarrier_init.release.cluster;")


def _i32(context, builder, value, ty):
    return context.cast(builder, value, ty, types.int32)


def _asm(builder, text: str, constraints: str, args: list, returns=None):
    fnty = ir.FunctionType(returns or ir.VoidType(), [a.type for a in args])
    return builder.call(ir.InlineAsm(fnty, text, constraints + ",~{memory}", side_effect=True), args)


@intrinsic
def mbar_init(typingctx, bars, idx, count):
    """Initialize mbarrier bars[idx] (a shared uint64 array) to expect ``count`` arrivals per phase."""
    def codegen(context, builder, sig, args):
        addr = _shared_address(context, builder, sig.args[0], args[0], args[1])
        _asm(builder, "mbarrier.init.shared::cta.b64 [$0], $1;", "r,r", [addr, _i32(context, builder, args[2],
                                                                                     sig.args[2])])
        return context.get_dummy_value()

    return types.void(bars, idx, count), codegen


@intrinsic
def mbar_expect_tx(typingctx, bars, idx, nbytes):
    """Arrive at bars[idx] and announce ``nbytes`` more bytes that copies will report to it this phase."""
    def codegen(context, builder, sig, args):
        addr = _shared_address(context, builder, sig.args[0], args[0], args[1])
        _asm(builder, "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;", "r,r",
             [addr, _i32(context, builder, args[2], sig.args[2])])
        return context.get_dummy_value()

    return types.void(bars, idx, nbytes), codegen


@intrinsic
def mbar_arrive(typingctx, bars, idx):
    """Arrive at bars[idx] (release: this thread's earlier reads and writes happen before the phase completes)."""
    def codegen(context, builder, sig, args):
        addr = _shared_address(context, builder, sig.args[0], args[0], args[1])
        _asm(builder, "mbarrier.arrive.shared::cta.b64 _, [$0];", "r", [addr])
        return context.get_dummy_value()

    return types.void(bars, idx), codegen


@intrinsic
def mbar_try_wait(typingctx, bars, idx, parity):
    """Whether the phase of ``parity`` (0 or 1) of bars[idx] has completed, the thread suspended a while in hardware
    first if not; acquire: what the arrivals released is visible after a True."""
    def codegen(context, builder, sig, args):
        addr = _shared_address(context, builder, sig.args[0], args[0], args[1])
        text = "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [$1], $2; selp.u32 $0, 1, 0, p; }"
        done = _asm(builder, text, "=r,r,r", [addr, _i32(context, builder, args[2], sig.args[2])], ir.IntType(32))
        return builder.icmp_unsigned("!=", done, ir.Constant(ir.IntType(32), 0))

    return types.boolean(bars, idx, parity), codegen


def _tma_load(context, builder, sig, args, dims: int, pair: bool) -> None:
    """The copy of a ``dims``-d box (arguments: smem, its index, maps, the map's offset, bars, the barrier's
    index, then the box's coordinates); ``pair``: into both blocks of a cluster of two (multicast, mask 0b11)."""
    dst = _shared_address(context, builder, sig.args[0], args[0], args[1])
    tmap = builder.ptrtoint(_element_pointer(context, builder, sig.args[2], args[2], args[3]), ir.IntType(64))
    bar = _shared_address(context, builder, sig.args[4], args[4], args[5])
    coords = [_i32(context, builder, args[i], sig.args[i]) for i in range(6, 6 + dims)]
    at = ", ".join(f"${i}" for i in range(3, 3 + dims))
    copy = f"cp.async.bulk.tensor.{dims}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
    text = (f"{{ .reg .b16 pair; mov.b16 pair, 3; {copy}.multicast::cluster [$0], [$1, {{{at}}}], [$2], pair; }}"
            if pair else f"{copy} [$0], [$1, {{{at}}}], [$2];")
    _asm(builder, text, ",".join(["r", "l", "r"] + ["r"] * dims), [dst, tmap, bar, *coords])


def _named_intrinsic(name: str, typer):
    typer.__name__ = typer.__qualname__ = name
    return intrinsic(typer)


def _tma_load_2d(pair: bool):
    def typer(typingctx, smem, sidx, maps, midx, bars, bidx, x, y):
        def codegen(context, builder, sig, args):
            _tma_load(context, builder, sig, args, 2, pair)
            return context.get_dummy_value()

        return types.void(smem, sidx, maps, midx, bars, bidx, x, y), codegen

    return _named_intrinsic("tma_load_2d" + ("_pair" if pair else ""), typer)


def _tma_load_4d(pair: bool):
    def typer(typingctx, smem, sidx, maps, midx, bars, bidx, x, y, z, w):
        def codegen(context, builder, sig, args):
            _tma_load(context, builder, sig, args, 4, pair)
            return context.get_dummy_value()

        return types.void(smem, sidx, maps, midx, bars, bidx, x, y, z, w), codegen

    return _named_intrinsic("tma_load_4d" + ("_pair" if pair else ""), typer)


#: ``tma_load_2d(smem, sidx, maps, midx, bars, bidx, x, y)``: copy the box of the tensor map at maps[midx] (a
#: device uint8 array) whose first element is (x, y) (x along the array's contiguous dimension) into smem[sidx]
#: (1024-byte aligned for the 128-byte swizzle), reporting its bytes to mbarrier bars[bidx]. Elements outside the
#: array arrive as zeros.
tma_load_2d = _tma_load_2d(pair=False)
#: ``tma_load_4d(..., x, y, z, w)``: ``tma_load_2d`` of the box at (x, y) of matrix (z, w) of a stack: a tensor map
#: of rank 4 whose third and fourth dimensions are the stack's two batch levels (``tensor_map_bytes`` with
#: ``levels``), the box one matrix deep. Elements outside the matrix (x or y out of range) arrive as zeros, never
#: another matrix's.
tma_load_4d = _tma_load_4d(pair=False)
#: ``tma_load_2d`` into both blocks of a cluster of two (multicast, CTA mask 0b11): the box lands at the same shared
#: offset in each, and each block's mbarrier at bars[bidx] is told its bytes.
tma_load_2d_pair = _tma_load_2d(pair=True)
#: ``tma_load_4d`` into both blocks of a cluster of two, as ``tma_load_2d_pair``.
tma_load_4d_pair = _tma_load_4d(pair=True)


@intrinsic
def mbar_arrive_peer(typingctx, bars, idx, rank):
    """Arrive at the mbarrier bars[idx] of block ``rank`` of this block's cluster (its shared memory mapped into
    the cluster's window by ``mapa``), as a consumer frees a stage that block's producer fills. The arrival keeps
    the default semantics (release at CTA scope), as CUTLASS's ClusterBarrier::arrive does: what it orders, the
    stage's reads by wgmma, completed before it (wgmma_wait). A release at cluster scope made every step of a
    pair about twice as long on the H100 (benchmarks/NOTES.md item 69)."""
    def codegen(context, builder, sig, args):
        addr = _shared_address(context, builder, sig.args[0], args[0], args[1])
        _asm(builder, "{ .reg .b32 peer; mapa.shared::cluster.u32 peer, $0, $1; "
                      "mbarrier.arrive.shared::cluster.b64 _, [peer]; }", "r,r",
             [addr, _i32(context, builder, args[2], sig.args[2])])
        return context.get_dummy_value()

    return types.void(bars, idx, rank), codegen


cluster_sync = _make_plain_asm("barrier.cluster.arrive.release;\n\tbarrier.cluster.wait.acquire;")
cluster_sync.__doc__ = """Every thread of every block of the cluster waits here for all of them (release and
acquire at cluster scope): mbarriers a block set up are ready for its peers' copies and arrivals after it, and no
block leaves while a peer may still reach into its shared memory."""


def map_geometry(inner: int, outer: int, row_bytes: int, box: tuple[int, int],
                 levels: tuple[tuple[int, int], ...] = ()) -> tuple[list[int], list[int], list[int]]:
    """The dimensions, strides (bytes, one per dimension after the first) and box of a tensor map over a 2-d array
    of ``inner`` x ``outer`` elements, rows ``row_bytes`` apart, or over a stack of them: ``levels`` (count,
    byte stride) per batch level, a box one matrix deep. A level of one matrix (a broadcast operand's: stride 0)
    gets the stride of a whole matrix, which the driver accepts and no copy steps over. ValueError for a stride
    that is not a multiple of 16 bytes (the TMA reads none)."""
    strides = [row_bytes] + [step if count > 1 else max(row_bytes * outer, 16) for count, step in levels]
    if any(step % 16 or step <= 0 for step in strides):
        raise ValueError(f"a tensor map needs strides of whole 16-byte pieces, got {strides} bytes")
    return [inner, outer] + [count for count, _ in levels], strides, list(box) + [1] * len(levels)


def tensor_map_bytes(pointer: int, dtype_bits: int, inner: int, outer: int, row_bytes: int, box: tuple[int, int],
                     swizzle: int = SWIZZLE_BYTES, levels: tuple[tuple[int, int], ...] = ()) -> bytes:
    """The 128 bytes of a tensor map over a 2-d array at device ``pointer``: ``inner`` elements along its
    contiguous dimension, ``outer`` rows ``row_bytes`` apart (a multiple of 16), boxes of ``box`` (inner, outer)
    elements, out-of-range elements read as zeros; with ``levels``, over a stack of such arrays (``map_geometry``).
    Needs the CUDA driver (a GPU)."""
    import numpy as np
    from cuda.bindings import driver as drv

    kinds = {16: drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
             32: drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32}
    swizzles = {0: drv.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE,
                128: drv.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B}
    dims, strides, boxes = map_geometry(inner, outer, row_bytes, box, levels)
    err, tmap = drv.cuTensorMapEncodeTiled(
        kinds[dtype_bits], drv.cuuint32_t(len(dims)), pointer, [drv.cuuint64_t(d) for d in dims],
        [drv.cuuint64_t(step) for step in strides], [drv.cuuint32_t(b) for b in boxes],
        [drv.cuuint32_t(1)] * len(dims),
        drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, swizzles[swizzle],
        drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    if err != drv.CUresult.CUDA_SUCCESS:
        raise ValueError(f"cuTensorMapEncodeTiled refused the map ({err}): dimensions {dims}, strides {strides} "
                         f"bytes, box {boxes}")
    return np.array(tmap.opaque, dtype=np.uint64).tobytes()


__all__ = ["cluster_sync", "fence_barrier_init", "map_geometry", "mbar_arrive", "mbar_arrive_peer",
           "mbar_expect_tx", "mbar_init", "mbar_try_wait", "tensor_map_bytes", "tma_load_2d", "tma_load_2d_pair",
           "tma_load_4d", "tma_load_4d_pair"]
