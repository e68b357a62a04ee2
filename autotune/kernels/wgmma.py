"""Hopper's warpgroup matrix multiply (``wgmma.mma_async``, sm_90a) as Numba intrinsics.

A warpgroup (four consecutive warps, 128 threads) multiplies a 64 x 16 slice of A by a 16 x N slice of B, both
read from shared memory through 64-bit *matrix descriptors*, into float32 accumulators that stay in its registers:
each thread holds N / 2 of them. The instruction is asynchronous: ``wgmma_fence`` orders earlier register writes
before it, ``wgmma_commit`` closes a group of them, ``wgmma_wait`` waits until at most n groups are pending. The
accumulators pass through the fence, the multiply and the wait as tied operands of the inline PTX, so no
instruction that reads them can be scheduled between a multiply and the wait that completes it.

A descriptor names an operand's start in shared memory and two strides in bytes: ``lbo`` between core matrices
(8 rows of 16 bytes) adjacent along K in a K-major operand, or between 64-wide panels of an M/N-major one, and
``sbo`` between groups of 8 rows; and the swizzle of the tile. With the 128-byte swizzle (the one the matmul
template uses: without it shared-memory bank conflicts slow the kernel severalfold) rows are 128 bytes and 16-byte chunk q of row
r sits at chunk q ^ (r % 8), from a 1024-byte aligned start. Writes by ``cp.async`` or ``st.shared`` become
visible to wgmma (the async proxy) after ``fence_proxy_async`` and a barrier.

numba-cuda builds kernels for ``sm_90a`` on a Hopper GPU, which wgmma needs; without one, compile for
``cc=(9, 0, "a")`` (``compiler.target``). Later GPUs (sm_100) have no wgmma.
"""
from __future__ import annotations

from llvmlite import ir
from numba.core import types
from numba.cuda.extending import intrinsic

from .intrinsics import _element_pointer, _make_plain_asm, _shared_address, _to_tf32

WGMMA_NS = tuple(range(8, 257, 8))  # the N of m64nNk16 (float16) and m64nNk8 (TF32)

wgmma_commit = _make_plain_asm("wgmma.commit_group.sync.aligned;")
fence_proxy_async = _make_plain_asm("fence.proxy.async.shared::cta;")


@intrinsic
def smem_address(typingctx, arr, idx):
    """The 32-bit shared-window address of arr[idx] (arr a shared array), which descriptors are built from."""
    return types.uint32(arr, idx), lambda context, builder, sig, args: _shared_address(
        context, builder, sig.args[0], args[0], args[1])


SWIZZLE_MODES = {0: 0, 128: 1, 64: 2, 32: 3}  # swizzle span in bytes -> the descriptor's layout type


@intrinsic
def descriptor(typingctx, address, lbo, sbo, swizzle):
    """The matrix descriptor (uint64) of a shared tile at ``address`` (a uint32: 16-byte aligned; 1024-byte
    aligned atoms where swizzled), ``lbo`` and ``sbo`` its strides in bytes (see the module docstring), the three in
    16-byte units at bits 0, 16 and 32 (14 bits each), and the layout type of ``swizzle`` (a constant: 0 for none,
    or the span in bytes, 32, 64 or 128) at bits 62-63."""
    if not isinstance(swizzle, types.IntegerLiteral):
        return None  # Numba then types the call again with the constant's literal type
    if not all(isinstance(x, types.Integer) for x in (address, lbo, sbo)) or swizzle.literal_value not in SWIZZLE_MODES:
        raise TypeError(f"descriptor takes integers and a swizzle of {sorted(SWIZZLE_MODES)}, got {address}, {lbo}, "
                        f"{sbo}, {swizzle}")
    mode = SWIZZLE_MODES[swizzle.literal_value]

    def codegen(context, builder, sig, args):
        wide = ir.IntType(64)
        desc = ir.Constant(wide, mode << 62)
        for value, ty, shift in zip(args[:3], sig.args[:3], (0, 16, 32)):
            field = builder.and_(builder.lshr(context.cast(builder, value, ty, types.uint64), ir.Constant(wide, 4)),
                                 ir.Constant(wide, 0x3FFF))
            desc = builder.or_(desc, builder.shl(field, ir.Constant(wide, shift)))
        return desc

    return types.uint64(address, lbo, sbo, swizzle), codegen


def _accumulators(acc) -> int:
    if not (isinstance(acc, types.UniTuple) and acc.dtype == types.float32):
        raise TypeError(f"wgmma accumulators are a tuple of float32, got {acc}")
    return acc.count


def _tied_asm(context, builder, sig, text: str, acc, extra: list, extra_constraints: list[str]):
    """Inline PTX whose operands $0..$(n-1) are the n accumulators, read and written (tied), then ``extra``; the
    new accumulators as the tuple type sig returns."""
    single = ir.FloatType()
    n = len(acc)
    fnty = ir.FunctionType(ir.LiteralStructType([single] * n), [v.type for v in extra] + [single] * n)
    constraints = ["=f"] * n + extra_constraints + [str(i) for i in range(n)]
    out = builder.call(ir.InlineAsm(fnty, text, ",".join(constraints), side_effect=True), [*extra, *acc])
    return context.make_tuple(builder, sig.return_type, _unpack(builder, out, n))


def _unpack(builder, value, count: int) -> list:
    return [builder.extract_value(value, i) for i in range(count)]


@intrinsic
def wgmma_fence(typingctx, acc):
    """``wgmma.fence``: register writes to acc (and shared writes) before it are seen by the wgmma after it."""
    _accumulators(acc)

    def codegen(context, builder, sig, args):
        values = _unpack(builder, args[0], sig.args[0].count)
        return _tied_asm(context, builder, sig, "wgmma.fence.sync.aligned;", values, [], [])

    return acc(acc), codegen


@intrinsic
def wgmma_wait(typingctx, acc, pending):
    """``wgmma.wait_group pending`` (a constant): returns acc once at most ``pending`` committed groups are
    outstanding, so reads of the result come after it."""
    if not isinstance(pending, types.IntegerLiteral):
        return None  # Numba then types the call again with the constant's literal type
    _accumulators(acc)
    n = pending.literal_value

    def codegen(context, builder, sig, args):
        values = _unpack(builder, args[0], sig.args[0].count)
        return _tied_asm(context, builder, sig, f"wgmma.wait_group.sync.aligned {n};", values, [], [])

    return acc(acc, pending), codegen


def _shared_operands_codegen(instruction: str, count: int, flags: str = ""):
    """The code of a wgmma with both operands through descriptors (arguments 1 and 2) into ``count`` accumulators
    (argument 0), scale-d and both operand scales 1, then ``flags`` (the transposes, where the type has them)."""

    def codegen(context, builder, sig, args):
        values = _unpack(builder, args[0], count)
        descs = [context.cast(builder, args[i], sig.args[i], types.uint64) for i in (1, 2)]
        outputs = "{" + ", ".join(f"${i}" for i in range(count)) + "}"
        text = f"{instruction} {outputs}, ${count}, ${count + 1}, 1, 1, 1{flags};"
        return _tied_asm(context, builder, sig, text, values, descs, ["l", "l"])

    return codegen


def _make_wgmma_half(kind: str):
    """wgmma_f16 (kind "f16") or wgmma_bf16 (kind "bf16"): the same instruction, fragment layout and operands."""

    @intrinsic
    def wgmma_half(typingctx, acc, desc_a, desc_b, trans_a, trans_b):
        if not all(isinstance(x, (types.IntegerLiteral, types.BooleanLiteral)) for x in (trans_a, trans_b)):
            return None  # Numba then types the call again with the constants' literal types
        count = _accumulators(acc)
        if 2 * count not in WGMMA_NS:
            raise TypeError(f"wgmma m64nNk16 holds N / 2 accumulators per thread for N in 8..256 by 8, got {count}")
        flags = f", {int(trans_a.literal_value)}, {int(trans_b.literal_value)}"
        codegen = _shared_operands_codegen(f"wgmma.mma_async.sync.aligned.m64n{2 * count}k16.f32.{kind}.{kind}", count,
                                           flags)
        return acc(acc, desc_a, desc_b, trans_a, trans_b), codegen

    wgmma_half.__doc__ = _WGMMA_HALF_DOC.format(kind=kind)
    return wgmma_half


_WGMMA_HALF_DOC = """acc += A (64 x 16) @ B (16 x N) for this warpgroup: one ``wgmma.mma_async
    m64nNk16.f32.{kind}.{kind}``, N = 2 x len(acc). Each operand is K-major (rows of k contiguous) or, with its
    ``trans_`` flag (a constant), M/N-major (rows of m or n contiguous: a transposed A, a row-major B). Thread
    t's accumulator 4j + 2h + x is the tile's row 16 (t // 32) + (t % 32) // 4 + 8h, column 8j + 2 (t % 4) + x."""

wgmma_f16 = _make_wgmma_half("f16")
wgmma_bf16 = _make_wgmma_half("bf16")


@intrinsic
def wgmma_tf32(typingctx, acc, a, desc_b, scale_d):
    """acc (scale_d 1) or 0 (scale_d 0; a constant) + A (64 x 8) @ B (8 x N) for this warpgroup: one
    ``wgmma.mma_async m64nNk8.f32.tf32.tf32``, N = 2 x len(acc), A from registers and B from shared memory, K-major
    (TF32 has no transposed operands). ``a`` is this thread's four float32 values of A, (row, k) = (g, c), (g + 8,
    c), (g, c + 4), (g + 8, c + 4) with g = 16 (t // 32) + (t % 32) // 4 and c = t % 4 (thread t of the
    warpgroup); the tensor cores read their top 19 bits. The accumulators are laid out as wgmma_f16's. The
    registers of ``a`` must stay unchanged until a wait completes the multiply."""
    if not isinstance(scale_d, (types.IntegerLiteral, types.BooleanLiteral)):
        return None  # Numba then types the call again with the constant's literal type
    count = _accumulators(acc)
    if 2 * count not in WGMMA_NS:
        raise TypeError(f"wgmma m64nNk8 holds N / 2 accumulators per thread for N in 8..256 by 8, got {count}")
    if not (isinstance(a, types.UniTuple) and a.count == 4 and a.dtype == types.float32):
        raise TypeError(f"wgmma m64nNk8 takes four float32 values of A per thread, got {a}")
    scale = int(scale_d.literal_value)

    def codegen(context, builder, sig, args):
        values = _unpack(builder, args[0], count)
        words = [builder.bitcast(v, ir.IntType(32)) for v in _unpack(builder, args[1], 4)]
        desc = context.cast(builder, args[2], sig.args[2], types.uint64)
        outputs = "{" + ", ".join(f"${i}" for i in range(count)) + "}"
        regs = "{" + ", ".join(f"${count + i}" for i in range(4)) + "}"
        text = (f"wgmma.mma_async.sync.aligned.m64n{2 * count}k8.f32.tf32.tf32 {outputs}, {regs}, ${count + 4}, "
                f"{scale}, 1, 1;")
        return _tied_asm(context, builder, sig, text, values, [*words, desc], ["r"] * 4 + ["l"])

    return acc(acc, a, desc_b, scale_d), codegen


@intrinsic
def wgmma_tf32_ss(typingctx, acc, desc_a, desc_b):
    """acc += A (64 x 8) @ B (8 x N) for this warpgroup: one ``wgmma.mma_async m64nNk8.f32.tf32.tf32``, N = 2 x
    len(acc), both operands from shared memory, K-major (TF32 has no transposed operands), their values already
    TF32 (the tensor cores read the top 19 bits of each). The accumulators are laid out as wgmma_f16's."""
    count = _accumulators(acc)
    if 2 * count not in WGMMA_NS:
        raise TypeError(f"wgmma m64nNk8 holds N / 2 accumulators per thread for N in 8..256 by 8, got {count}")

    codegen = _shared_operands_codegen(f"wgmma.mma_async.sync.aligned.m64n{2 * count}k8.f32.tf32.tf32", count)
    return acc(acc, desc_a, desc_b), codegen


@intrinsic
def tf32_round(typingctx, x):
    """x (float32) rounded to TF32 (``cvt.rna``: 10 mantissa bits, to nearest, ties away from zero), as a float32
    whose low 13 bits are zero."""
    if x != types.float32:
        raise TypeError(f"tf32_round takes a float32, got {x}")

    def codegen(context, builder, sig, args):
        return builder.bitcast(_to_tf32(builder, args[0]), ir.FloatType())

    return types.float32(x), codegen


@intrinsic
def stash_pairs(typingctx, out, index, ld, acc):
    """Stores this thread's wgmma accumulators, converted once to the array's float16, bfloat16 (its bits, uint16)
    or float32, into a tile (shared memory) of row stride ``ld``: accumulators 4j + 2h and 4j + 2h + 1, one store
    per pair, at out[index + 8h ld + 8j] and the element after it; index is the thread's first element (see
    wgmma_f16), even, as ld is. Staged there, C leaves in whole rows: writing the pairs straight to C took a branch
    per pair at its edges, and ptxas then serialized the wgmma of the main loop (C7514)."""
    count = _accumulators(acc)
    if not isinstance(out, types.Array) or out.dtype not in (types.float16, types.uint16, types.float32):
        raise TypeError(f"stash_pairs writes a float16, bfloat16 (uint16) or float32 array, got {out}")

    def codegen(context, builder, sig, args):
        wide = ir.IntType(64)
        element = context.get_data_type(sig.args[0].dtype)
        pair = ir.VectorType(element, 2)
        index, ld = (context.cast(builder, args[i], sig.args[i], types.int64) for i in (1, 2))
        values = _unpack(builder, args[3], count)
        if sig.args[0].dtype == types.float16:  # Numba keeps float16 as its bits, an i16
            values = [builder.bitcast(builder.fptrunc(v, ir.HalfType()), element) for v in values]
        elif sig.args[0].dtype == types.uint16:  # bfloat16 bits: cvt.rn.bf16.f32, to nearest even
            rounding = ir.InlineAsm(ir.FunctionType(element, [ir.FloatType()]), "cvt.rn.bf16.f32 $0, $1;", "=h,f")
            values = [builder.call(rounding, [v]) for v in values]
        align = 2 * context.get_abi_sizeof(element)
        for j in range(count // 4):
            for h in (0, 1):
                offset = builder.add(builder.mul(ld, ir.Constant(wide, 8 * h)), ir.Constant(wide, 8 * j))
                vector = ir.Constant(pair, ir.Undefined)
                for x in (0, 1):
                    lane = ir.Constant(ir.IntType(32), x)
                    vector = builder.insert_element(vector, values[4 * j + 2 * h + x], lane)
                ptr = _element_pointer(context, builder, sig.args[0], args[0], builder.add(index, offset))
                builder.store(vector, builder.bitcast(ptr, pair.as_pointer()), align=align)
        return context.get_dummy_value()

    return types.void(out, index, ld, acc), codegen


__all__ = ["SWIZZLE_MODES", "WGMMA_NS", "descriptor", "fence_proxy_async", "smem_address", "stash_pairs",
           "tf32_round", "wgmma_bf16", "wgmma_commit", "wgmma_f16", "wgmma_fence", "wgmma_tf32", "wgmma_tf32_ss",
           "wgmma_wait"]
