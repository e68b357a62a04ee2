"""Vector loads and stores, and cp.async copies, for generated kernels.

Numba has no 128-bit array access and does not merge adjacent scalar loads, so these intrinsics bitcast the
element pointer to an LLVM vector and load or store it with the vector's natural alignment: the PTX shows
``ld.global.v4.f32`` / ``ld.shared.v4.f32``. The caller guarantees the alignment (flat index a multiple of the
width and a suitably aligned base pointer); the generated kernels check this before taking the vector path.

Numba's ``cuda.atomic.add`` returns the old value, so ptxas keeps a waiting ``ATOMG`` per element even when the
value is dropped; ``red_add<n>`` emit ``red.global.add`` (``REDG``, nothing returned), four fp32 elements at once
where the address allows (sm_90's ``red.global.add.v4.f32``).

Numba has no asynchronous copies either: ``cp_async<n>`` and the commit/wait functions emit sm_80's
``cp.async`` as inline PTX, which NVVM passes through (numba-cuda uses inline assembly the same way).
"""
from __future__ import annotations

from llvmlite import ir
from numba.core import types
from numba.cuda.extending import intrinsic


def _element_pointer(context, builder, arrty, array_value, index):
    ary = context.make_array(arrty)(context, builder, array_value)
    return builder.gep(ary.data, [index])


def _vector_type(context, arrty, width):
    return ir.VectorType(context.get_data_type(arrty.dtype), width)


WORD = ir.IntType(32)
WORDS = ir.VectorType(WORD, 4)


def _packed(context, vecty, width: int) -> bool:
    """Whether a vector access goes through four 32-bit words: eight 16-bit elements (float16, bfloat16's bits),
    which NVVM would otherwise split into two 8-byte accesses (v4.u16); as words it is one 16-byte access."""
    return width == 8 and context.get_abi_sizeof(vecty.element) == 2


def _halves_of(builder, words, element) -> list:
    """The eight 16-bit elements of four words, each word's low half first (the order in memory)."""
    return [builder.bitcast(builder.trunc(builder.lshr(builder.extract_element(words, ir.Constant(WORD, j // 2)),
                                                       ir.Constant(WORD, 16 * (j % 2))), ir.IntType(16)), element)
            for j in range(8)]


def _words_of(builder, halves) -> ir.Value:
    """Four words of eight 16-bit elements, the first of each pair in the low half."""
    words = ir.Constant(WORDS, ir.Undefined)
    for w in range(4):
        low, high = (builder.zext(builder.bitcast(h, ir.IntType(16)), WORD) for h in halves[2 * w:2 * w + 2])
        word = builder.or_(low, builder.shl(high, ir.Constant(WORD, 16)))
        words = builder.insert_element(words, word, ir.Constant(WORD, w))
    return words


def _make_vload(width: int):
    @intrinsic
    def vload(typingctx, arr, idx):
        sig = types.UniTuple(arr.dtype, width)(arr, idx)

        def codegen(context, builder, sig, args):
            arrty = sig.args[0]
            vecty = _vector_type(context, arrty, width)
            pointer = _element_pointer(context, builder, arrty, args[0], args[1])
            if _packed(context, vecty, width):
                words = builder.load(builder.bitcast(pointer, WORDS.as_pointer()), align=16)
                return context.make_tuple(builder, sig.return_type, _halves_of(builder, words, vecty.element))
            vec = builder.load(builder.bitcast(pointer, vecty.as_pointer()),
                               align=width * context.get_abi_sizeof(vecty.element))
            items = [builder.extract_element(vec, ir.Constant(WORD, j)) for j in range(width)]
            return context.make_tuple(builder, sig.return_type, items)

        return sig, codegen

    return vload


def _vstore_codegen(width: int):
    def codegen(context, builder, sig, args):
        arrty = sig.args[0]
        vecty = _vector_type(context, arrty, width)
        values = [context.cast(builder, v, t, arrty.dtype) for v, t in zip(args[2:], sig.args[2:])]
        pointer = _element_pointer(context, builder, arrty, args[0], args[1])
        if _packed(context, vecty, width):
            builder.store(_words_of(builder, values), builder.bitcast(pointer, WORDS.as_pointer()), align=16)
            return context.get_dummy_value()
        vec = ir.Constant(vecty, ir.Undefined)
        for j, value in enumerate(values):
            vec = builder.insert_element(vec, value, ir.Constant(WORD, j))
        builder.store(vec, builder.bitcast(pointer, vecty.as_pointer()),
                      align=width * context.get_abi_sizeof(vecty.element))
        return context.get_dummy_value()

    return codegen


@intrinsic
def vstore2(typingctx, arr, idx, v0, v1):
    return types.void(arr, idx, v0, v1), _vstore_codegen(2)


@intrinsic
def vstore4(typingctx, arr, idx, v0, v1, v2, v3):
    return types.void(arr, idx, v0, v1, v2, v3), _vstore_codegen(4)


@intrinsic
def vstore8(typingctx, arr, idx, v0, v1, v2, v3, v4, v5, v6, v7):
    """Eight elements at once: a 16-byte store of float16 (the widest vector, as vstore4 of float32), as four
    words."""
    return types.void(arr, idx, v0, v1, v2, v3, v4, v5, v6, v7), _vstore_codegen(8)


vload2 = _make_vload(2)
vload4 = _make_vload(4)
vload8 = _make_vload(8)


def _red_add_codegen(width: int):
    def codegen(context, builder, sig, args):
        arrty = sig.args[0]
        ptr = _element_pointer(context, builder, arrty, args[0], args[1])
        values = [context.cast(builder, v, t, arrty.dtype) for v, t in zip(args[2:], sig.args[2:])]
        ptx_type, reg = ("f32", "f") if arrty.dtype == types.float32 else ("f64", "d")
        shape = "" if width == 1 else f".v{width}"
        operands = "$1" if width == 1 else "{" + ", ".join(f"${1 + j}" for j in range(width)) + "}"
        text = (f"{{ .reg .u64 g; cvta.to.global.u64 g, $0; "
                f"red.relaxed.gpu.global.add{shape}.{ptx_type} [g], {operands}; }}")
        fnty = ir.FunctionType(ir.VoidType(), [ptr.type] + [v.type for v in values])
        asm = ir.InlineAsm(fnty, text, ",".join(["l"] + [reg] * width + ["~{memory}"]), side_effect=True)
        builder.call(asm, [ptr] + values)
        return context.get_dummy_value()

    return codegen


def _check_red_add(arr, width: int) -> None:
    if arr.dtype not in (types.float32, types.float64) or (width > 1 and arr.dtype != types.float32):
        raise TypeError(f"red_add{width} adds to a float32{' or float64' if width == 1 else ''} array, "
                        f"not {arr.dtype}")


@intrinsic
def red_add1(typingctx, arr, idx, v0):
    """arr[idx] += v0 atomically (a global array), nothing returned."""
    _check_red_add(arr, 1)
    return types.void(arr, idx, v0), _red_add_codegen(1)


@intrinsic
def red_add2(typingctx, arr, idx, v0, v1):
    """arr[idx:idx + 2] += (v0, v1) atomically per element; float32, idx 8-byte aligned."""
    _check_red_add(arr, 2)
    return types.void(arr, idx, v0, v1), _red_add_codegen(2)


@intrinsic
def red_add4(typingctx, arr, idx, v0, v1, v2, v3):
    """arr[idx:idx + 4] += (v0..v3) atomically per element; float32, idx 16-byte aligned."""
    _check_red_add(arr, 4)
    return types.void(arr, idx, v0, v1, v2, v3), _red_add_codegen(4)


def _shared_address(context, builder, arrty, array_value, index):
    """The 32-bit shared-window address of arr[index] (arr a shared array), as cp.async's destination wants."""
    ptr = _element_pointer(context, builder, arrty, array_value, index)
    shared = builder.addrspacecast(ptr, ir.PointerType(ptr.type.pointee, 3))
    return builder.ptrtoint(shared, ir.IntType(32))


def _make_cp_async(nbytes: int):
    """cp_async<nbytes>(dst, i, src, j, valid): copy nbytes from src[j] (global) to dst[i] (shared) without
    passing through registers. Only the first ``valid`` bytes are read; the rest of the destination is zeroed,
    which pads partial tiles at the matrix edges. Where ``valid`` is 0 the source address is src[0], so a copy
    that reads nothing never points outside the array; the choice is an LLVM select, so a caller spends no
    branch (and Numba no basic block) on it."""
    cache = "cg" if nbytes == 16 else "ca"  # .cg (L2 only) exists for 16-byte copies alone

    @intrinsic
    def cp_async(typingctx, dst, dst_idx, src, src_idx, valid):
        sig = types.void(dst, dst_idx, src, src_idx, valid)

        def codegen(context, builder, sig, args):
            dst_addr = _shared_address(context, builder, sig.args[0], args[0], args[1])
            valid_bytes = context.cast(builder, args[4], sig.args[4], types.uint32)
            reads = builder.icmp_unsigned("!=", valid_bytes, ir.Constant(ir.IntType(32), 0))
            src_idx = builder.select(reads, args[3], ir.Constant(args[3].type, 0))
            src_ptr = _element_pointer(context, builder, sig.args[2], args[2], src_idx)
            fnty = ir.FunctionType(ir.VoidType(), [ir.IntType(32), src_ptr.type, ir.IntType(32)])
            asm = ir.InlineAsm(fnty, f"cp.async.{cache}.shared.global [$0], [$1], {nbytes}, $2;", "r,l,r,~{memory}",
                               side_effect=True)
            builder.call(asm, [dst_addr, src_ptr, valid_bytes])
            return context.get_dummy_value()

        return sig, codegen

    return cp_async


def _make_plain_asm(text: str):
    @intrinsic
    def instruction(typingctx):
        def codegen(context, builder, sig, args):
            asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), text, "~{memory}", side_effect=True)
            builder.call(asm, [])
            return context.get_dummy_value()

        return types.void(), codegen

    return instruction


@intrinsic
def named_barrier(typingctx, idx, threads):
    """``bar.sync idx, threads``: the calling warps wait at barrier ``idx`` (1 to 15; 0 is ``syncthreads``') until
    ``threads`` threads (whole warps) have arrived, with syncthreads' ordering of shared memory among them. Some of
    a block's warpgroups synchronize while the others go on (a persistent kernel's consumers storing a tile while
    its producer copies the next)."""
    def codegen(context, builder, sig, args):
        values = [context.cast(builder, v, t, types.int32) for v, t in zip(args, sig.args)]
        fnty = ir.FunctionType(ir.VoidType(), [v.type for v in values])
        builder.call(ir.InlineAsm(fnty, "bar.sync $0, $1;", "r,r,~{memory}", side_effect=True), values)
        return context.get_dummy_value()

    return types.void(idx, threads), codegen


cp_async4 = _make_cp_async(4)
cp_async8 = _make_cp_async(8)
cp_async16 = _make_cp_async(16)
cp_async_commit = _make_plain_asm("cp.async.commit_group;")
cp_async_wait0 = _make_plain_asm("cp.async.wait_group 0;")
cp_async_wait1 = _make_plain_asm("cp.async.wait_group 1;")
cp_async_wait2 = _make_plain_asm("cp.async.wait_group 2;")


def _mma_text(k: int, types_: str, counts: tuple[int, int]) -> str:
    """mma.sync m16n8k<k> with operands $0-$3 (D), then A, B and C in numbered groups of counts[0], counts[1], 4."""
    ops, first = [], 4  # operands $0-$3 are the outputs
    for count in (*counts, 4):
        ops.append("{" + ", ".join(f"${first + i}" for i in range(count)) + "}")
        first += count
    return f"mma.sync.aligned.m16n8k{k}.row.col.{types_} {{$0, $1, $2, $3}}, {', '.join(ops)};"


def _dmma(builder, k: int, a: list, b: list, c: list) -> list:
    """One mma.sync m16n8k<k> of float64 fragments as inline PTX: the four results from a (k/2 values of A), b (k/4
    of B) and c (the four of C), each in the PTX ISA's fragment layout (lane = 4 * row group + thread in group)."""
    double = ir.DoubleType()
    values = [*a, *b, *c]
    fnty = ir.FunctionType(ir.LiteralStructType([double] * 4), [double] * len(values))
    text = _mma_text(k, "f64.f64.f64.f64", (k // 2, k // 4))
    out = builder.call(ir.InlineAsm(fnty, text, ",".join(["=d"] * 4 + ["d"] * len(values))), values)
    return [builder.extract_value(out, i) for i in range(4)]


HALF_MMA_TYPES = {"fp16": "f32.f16.f16.f32", "bf16": "f32.bf16.bf16.f32"}  # two halves per operand register
HALF_ARRAYS = (types.float16, types.uint16)  # what ldmatrix reads: float16, or bfloat16 as its bits


def _word_mma(builder, k: int, types_: str, a: list, b: list, c: list) -> list:
    """One mma.sync m16n8k<k> of 32-bit operand registers (a and b) with float32 accumulators (c), as ``types_``
    says: "f32.tf32.tf32.f32" (TF32 bits, see _to_tf32; the fp64 mma's fragment layout of the same k) or
    "f32.f16.f16.f32" or "f32.bf16.bf16.f32" (two halves per register, see ldmatrix; four of A and two of B at
    k 16)."""
    word, single = ir.IntType(32), ir.FloatType()
    fnty = ir.FunctionType(ir.LiteralStructType([single] * 4), [word] * (len(a) + len(b)) + [single] * 4)
    text = _mma_text(k, types_, (len(a), len(b)))
    constraints = ",".join(["=f"] * 4 + ["r"] * (len(a) + len(b)) + ["f"] * 4)
    out = builder.call(ir.InlineAsm(fnty, text, constraints), [*a, *b, *c])
    return [builder.extract_value(out, i) for i in range(4)]


def _tf32_mma(builder, k: int, a: list, b: list, c: list) -> list:
    return _word_mma(builder, k, "f32.tf32.tf32.f32", a, b, c)


def _to_tf32(builder, x):
    """x (float32) rounded to TF32 (10 mantissa bits, to nearest, ties away from zero: cvt.rna), as the 32-bit
    register an mma operand takes."""
    fnty = ir.FunctionType(ir.IntType(32), [ir.FloatType()])
    return builder.call(ir.InlineAsm(fnty, "cvt.rna.tf32.f32 $0, $1;", "=r,f"), [x])


def _tf32_split(builder, x) -> tuple:
    """x = big + small: big = tf32(x) and small = x - big (exact in fp32), as the 32-bit registers mma takes. small
    goes in unrounded: the tensor cores read a TF32 operand's top 19 bits, so its error stays under 2**-21 |x| and
    unbiased (its sign is the rounding's), where rounding it too cost two more instructions per fragment value."""
    big = _to_tf32(builder, x)
    rest = builder.fsub(x, builder.bitcast(big, ir.FloatType()))
    return big, builder.bitcast(rest, ir.IntType(32))


def _mma_step(precision: str):
    """How one m16n8k<k> step turns fragments into results for a precision: fp64 as they are; "tf32" one product of
    the TF32-rounded fragments; "3xtf32" three, big*big + big*small + small*big of each fragment split into a
    TF32 part and the rest (the small products first), which leaves out only small*small: fp32-level error on
    the tensor cores."""
    if precision == "fp64":
        return (lambda builder, x: x), lambda builder, k, a, b, c: _dmma(builder, k, a, b, c)
    if precision in HALF_MMA_TYPES:
        types_ = HALF_MMA_TYPES[precision]
        return (lambda builder, x: x), lambda builder, k, a, b, c: _word_mma(builder, k, types_, a, b, c)
    if precision == "tf32":
        return _to_tf32, lambda builder, k, a, b, c: _tf32_mma(builder, k, a, b, c)

    def three(builder, k, a, b, c):
        a_big, a_small = zip(*a)
        b_big, b_small = zip(*b)
        d = _tf32_mma(builder, k, list(a_small), list(b_big), c)
        d = _tf32_mma(builder, k, list(a_big), list(b_small), d)
        return _tf32_mma(builder, k, list(a_big), list(b_big), d)

    return _tf32_split, three


MMA_KS = {"fp64": (4, 8, 16), "tf32": (4, 8), "3xtf32": (4, 8), "fp16": (16,), "bf16": (16,)}


def _make_mma_tile(precision: str):
    """The tile intrinsic of a precision (see dmma_tile): fp64 on float64 tiles; tf32 and 3xtf32 on float32; fp16
    and bf16 on float32 accumulators and fragments of two halves per 32-bit word (``ldmatrix``)."""
    element = types.float64 if precision == "fp64" else types.float32
    ks = MMA_KS[precision]
    per_word = 2 if precision in HALF_MMA_TYPES else 1  # fragment elements per 32-bit operand register
    prepare, step = _mma_step(precision)

    @intrinsic
    def mma_tile(typingctx, acc, fa, fb, k):
        if not isinstance(k, types.IntegerLiteral):
            return None  # Numba then types the call again with the constant's literal type
        steps = k.literal_value
        q = steps // (4 * per_word)  # a lane's operand registers per row (column) of 8
        if steps not in ks or not isinstance(acc, types.UniTuple) or acc.dtype != element or len(fa) % q \
                or len(fb) % q:
            raise TypeError(f"{precision} mma tile wants a {element} accumulator tuple and fragments for k in "
                            f"{', '.join(map(str, ks))}; got {acc}, {len(fa)} and {len(fb)} fragments, k={steps}")
        tm, half_tn = len(fa) // q, len(fb) // q
        if tm % 2 or acc.count != tm * 2 * half_tn:
            raise TypeError(f"{precision} mma tile: {acc.count} accumulators do not match {tm} x {2 * half_tn} "
                            f"fragments")
        sig = acc(acc, fa, fb, k)

        def codegen(context, builder, sig, args):
            # Each fragment is rounded (split) once, however many mma use it.
            a_values = [prepare(builder, x) for x in _flat(builder, args[1], sig.args[1])]
            b_values = [prepare(builder, x) for x in _flat(builder, args[2], sig.args[2])]
            tn = 2 * half_tn
            result = args[0]
            for mi in range(tm // 2):
                for nj in range(half_tn):
                    a = a_values[2 * q * mi:2 * q * (mi + 1)] if per_word == 2 else \
                        [a_values[(2 * mi + x % 2) * q + x // 2] for x in range(2 * q)]
                    b = [b_values[nj * q + y] for y in range(q)]
                    slots = [tile_slot(tm * tn, 2 * mi + i, 2 * nj + j, tn) for i in (0, 1) for j in (0, 1)]
                    d = step(builder, steps, a, b, [builder.extract_value(result, s) for s in slots])
                    for slot, value in zip(slots, d):
                        result = builder.insert_value(result, value, slot)
            return result

        return sig, codegen

    mma_tile.__doc__ = _MMA_TILE_DOC.format(precision=precision, element=element, ks=", ".join(map(str, ks)))
    return mma_tile


_MMA_TILE_DOC = """One k-deep step of a warp's {precision} tensor-core tile ({element}): (TM/2) x (TN/2) mma.sync
    m16n8k<k> (sm_80+; k in {ks}), each on a 16 x 8 piece whose results are tile rows 2mi, 2mi+1 and columns 2nj,
    2nj+1 of acc (TM x TN, at ``tile_slot``). fa holds this lane's A fragments i-major (fa[i * k/4 + q]: row
    wr + 8i, k = tig + 4q), fb its B fragments (fb[nj * k/4 + q]: column 8nj + gid, k = tig + 4q); k must be a
    constant. fp16's fragments are words of two halves, k and k + 1, as ``ldmatrix`` loads them: fa in the mma's
    operand order, fa[4 mi + x] at row 16 mi + gid (+ 8 for odd x) and k = 2 tig + 8 (x // 2); fb[nj * 2 + q] at
    k = 2 tig + 8q. One call replaces a statement per mma, whose typing and lowering Numba's front
    end spends its time on."""

dmma_tile = _make_mma_tile("fp64")
tf32_tile = _make_mma_tile("tf32")
tf32x3_tile = _make_mma_tile("3xtf32")
f16_tile = _make_mma_tile("fp16")
bf16_tile = _make_mma_tile("bf16")


def _atomic_minmax_codegen(is_max: bool):
    """arr[idx] = max(arr[idx], val) (or min) atomically with NumPy's NaN rule: a NaN on either side wins.

    A compare-and-swap loop on the element's bits: the stored value is replaced while it is not NaN and val is
    NaN or beyond it; a stored NaN is never replaced. (Numba's ``cuda.atomic.max`` returns without storing when
    val is NaN, so a NaN found by one block would be lost.)"""
    def codegen(context, builder, sig, args):
        arrty = sig.args[0]
        ftype = context.get_value_type(arrty.dtype)
        itype = ir.IntType(8 * context.get_abi_sizeof(ftype))
        ptr = _element_pointer(context, builder, arrty, args[0], args[1])
        iptr = builder.bitcast(ptr, itype.as_pointer())
        value = context.cast(builder, args[2], sig.args[2], arrty.dtype)
        entry = builder.block
        loop = builder.append_basic_block("minmax.loop")
        attempt = builder.append_basic_block("minmax.attempt")
        done = builder.append_basic_block("minmax.done")
        first = builder.load(iptr)
        builder.branch(loop)
        builder.position_at_end(loop)
        bits = builder.phi(itype)
        bits.add_incoming(first, entry)
        stored = builder.bitcast(bits, ftype)
        not_nan = builder.fcmp_ordered("ord", stored, stored)
        beyond = builder.fcmp_unordered("<" if is_max else ">", stored, value)  # or value is NaN
        builder.cbranch(builder.and_(not_nan, beyond), attempt, done)
        builder.position_at_end(attempt)
        pair = builder.cmpxchg(iptr, bits, builder.bitcast(value, itype), "monotonic", "monotonic")
        bits.add_incoming(builder.extract_value(pair, 0), attempt)
        builder.cbranch(builder.extract_value(pair, 1), done, loop)
        builder.position_at_end(done)
        return context.get_dummy_value()

    return codegen


def _check_minmax(arr) -> None:
    if arr.dtype not in (types.float32, types.float64):
        raise TypeError(f"atomic_max_nan/atomic_min_nan take a float32 or float64 array, not {arr.dtype}")


@intrinsic
def atomic_max_nan(typingctx, arr, idx, val):
    """arr[idx] = max(arr[idx], val) atomically, NaN propagating (np.maximum's rule); nothing returned."""
    _check_minmax(arr)
    return types.void(arr, idx, val), _atomic_minmax_codegen(True)


@intrinsic
def atomic_min_nan(typingctx, arr, idx, val):
    """arr[idx] = min(arr[idx], val) atomically, NaN propagating (np.minimum's rule); nothing returned."""
    _check_minmax(arr)
    return types.void(arr, idx, val), _atomic_minmax_codegen(False)


def _extremum_codegen(is_max: bool):
    def codegen(context, builder, sig, args):
        a, b = (context.cast(builder, v, t, sig.return_type) for v, t in zip(args, sig.args))
        beyond = builder.fcmp_ordered(">" if is_max else "<", a, b)
        a_is_nan = builder.fcmp_unordered("uno", a, a)
        return builder.select(builder.or_(beyond, a_is_nan), a, b)

    return codegen


def _extremum_signature(a, b):
    if not (isinstance(a, types.Float) and isinstance(b, types.Float)):
        raise TypeError(f"maximum/minimum take two floats, got {a} and {b}")
    result = a if a.bitwidth >= b.bitwidth else b
    return result(a, b)


@intrinsic
def maximum(typingctx, a, b):
    """np.maximum of two floats: the larger, or a NaN if either is (Numba's max() returns b's... fmax, dropping a
    NaN b). A compare and a select, no call."""
    return _extremum_signature(a, b), _extremum_codegen(True)


@intrinsic
def minimum(typingctx, a, b):
    """np.minimum of two floats: the smaller, or a NaN if either is."""
    return _extremum_signature(a, b), _extremum_codegen(False)


def _mul_add_codegen(context, builder, sig, args):
    acc, a, b = args
    return builder.fadd(acc, builder.fmul(a, b))


@intrinsic
def mul_add(typingctx, acc, a, b):
    """``acc + a * b`` for three floats of one type, as the LLVM IR that Numba makes of ``acc += a * b``: an
    ``fmul`` and an ``fadd`` without flags, which NVVM contracts into one ``fma.rn`` as it does for the statement.

    The PTX is the statement's, byte for byte (tests/test_compile.py); what changes is the front end's work.
    Numba types ``acc += a * b`` as an in-place operator that falls back to ``+`` through its operator templates,
    and lowers it with casts, once per statement; an unrolled 16x8 tile with 8 k-steps has 1024 of them. A call
    of an intrinsic is resolved once per argument types and lowers to these two instructions."""
    if not (isinstance(acc, types.Float) and acc == a == b):
        raise TypeError(f"mul_add takes three floats of one type, got {acc}, {a} and {b}")
    return acc(acc, a, b), _mul_add_codegen


@intrinsic
def bf16_to_f32(typingctx, bits):
    """A bfloat16 element, given as its bits (uint16), as float32: exact, since the bits are a float32's top half
    (NaN and infinities included)."""
    if bits != types.uint16:
        raise TypeError(f"bf16_to_f32 takes bfloat16 bits as uint16, got {bits}")

    def codegen(context, builder, sig, args):
        wide = builder.zext(args[0], ir.IntType(32))
        return builder.bitcast(builder.shl(wide, ir.Constant(ir.IntType(32), 16)), ir.FloatType())

    return types.float32(bits), codegen


@intrinsic
def f32_to_bf16(typingctx, x):
    """float32 rounded to bfloat16 (to nearest, ties to even; NaN stays NaN), as its bits: ``cvt.rn.bf16.f32``
    (sm_80 and later)."""
    if x != types.float32:
        raise TypeError(f"f32_to_bf16 takes a float32, got {x}")

    def codegen(context, builder, sig, args):
        asm = ir.InlineAsm(ir.FunctionType(ir.IntType(16), [ir.FloatType()]), "cvt.rn.bf16.f32 $0, $1;", "=h,f")
        return builder.call(asm, args)

    return types.uint16(x), codegen


def tile_slot(count: int, i: int, j: int, columns: int) -> int:
    """Where a register tile's element (i, j) lives in its tuple: reverse row-major order, the order in which
    Numba's SSA form of separately named accumulators had numbered them (ptxas allocates registers by it; in
    row-major order more variants spilled)."""
    return count - 1 - (i * columns + j)


def _flat(builder, value, ty) -> list:
    """The scalars of a value that is a scalar or a (nested) tuple of them, in order."""
    if isinstance(ty, types.BaseTuple):
        return [x for i, t in enumerate(ty) for x in _flat(builder, builder.extract_value(value, i), t)]
    return [value]


@intrinsic
def tile_of(typingctx, value, count):
    """A tuple of ``count`` copies of ``value`` (count a constant): a register tile's accumulators, started at 0. (A
    literal tuple of more than 30 names is built through a list in CPython's bytecode, which Numba cannot type.)"""
    if not isinstance(count, types.IntegerLiteral):
        return None  # Numba then types the call again with the constant's literal type
    sig = types.UniTuple(value, count.literal_value)(value, count)

    def codegen(context, builder, sig, args):
        return context.make_tuple(builder, sig.return_type, [args[0]] * sig.return_type.count)

    return sig, codegen


@intrinsic
def gather(typingctx, arr, base, rows, row_stride, cols, col_stride):
    """(arr[base + r * row_stride + c * col_stride] for r < rows for c < cols), the counts and strides constants:
    a lane's mma fragments from a shared tile. One address is computed from base and the others are constant
    offsets from it, which ptxas folds into the loads (LDS [R+imm]); indexing each element with its own uint32
    expression cost two or three integer instructions per load."""
    literals = (rows, row_stride, cols, col_stride)
    if not all(isinstance(x, types.IntegerLiteral) for x in literals):
        return None  # Numba then types the call again with the constants' literal types
    n_rows, r_step, n_cols, c_step = (x.literal_value for x in literals)
    if not isinstance(arr, types.Array) or not isinstance(base, types.Integer) or n_rows < 1 or n_cols < 1:
        raise TypeError(f"gather reads an array at an integer base, got {arr} and {base}")
    sig = types.UniTuple(arr.dtype, n_rows * n_cols)(arr, base, *literals)

    def codegen(context, builder, sig, args):
        index, wide = args[1], ir.IntType(64)
        if sig.args[1].bitwidth < 64:
            index = builder.sext(index, wide) if sig.args[1].signed else builder.zext(index, wide)
        start = _element_pointer(context, builder, sig.args[0], args[0], index)
        values = [builder.load(builder.gep(start, [ir.Constant(wide, r * r_step + c * c_step)], inbounds=True))
                  for r in range(n_rows) for c in range(n_cols)]
        return context.make_tuple(builder, sig.return_type, values)

    return sig, codegen


@intrinsic
def ldmatrix(typingctx, arr, base, count, stride, trans):
    """``count`` ldmatrix.sync.aligned.m8n8.x4 (with ``trans``: .trans) of a float16 shared array (or bfloat16
    bits, uint16), the k-th at
    arr[base + k * stride]: 4 * count 32-bit words, the four of each load in order. Each lane gives the address of
    one 16-byte row (lanes 8j to 8j + 7 the rows of matrix j) and receives, per matrix, the pair at row lane / 4,
    columns 2 (lane % 4) and + 1 (.trans: column lane / 4, rows 2 (lane % 4) and + 1): mma's fragment layout, in
    one instruction instead of one load per word. base must be 16-byte aligned in every lane; count, stride and
    trans are constants."""
    literals = (count, stride, trans)
    if not all(isinstance(x, (types.IntegerLiteral, types.BooleanLiteral)) for x in literals):
        return None  # Numba then types the call again with the constants' literal types
    n, step, transposed = (x.literal_value for x in literals)
    if not isinstance(arr, types.Array) or arr.dtype not in HALF_ARRAYS or not isinstance(base, types.Integer) \
            or n < 1:
        raise TypeError(f"ldmatrix reads a float16 or bfloat16 (uint16) shared array at an integer base, got {arr} "
                        f"and {base}")
    sig = types.UniTuple(types.uint32, 4 * n)(arr, base, *literals)

    def codegen(context, builder, sig, args):
        word = ir.IntType(32)
        fnty = ir.FunctionType(ir.LiteralStructType([word] * 4), [word])
        text = f"ldmatrix.sync.aligned.m8n8.x4{'.trans' if transposed else ''}.shared.b16 {{$0, $1, $2, $3}}, [$4];"
        asm = ir.InlineAsm(fnty, text, "=r,=r,=r,=r,r,~{memory}", side_effect=True)
        values = []
        for k in range(n):
            index = builder.add(args[1], ir.Constant(args[1].type, k * step))
            out = builder.call(asm, [_shared_address(context, builder, sig.args[0], args[0], index)])
            values += [builder.extract_value(out, j) for j in range(4)]
        return context.make_tuple(builder, sig.return_type, values)

    return sig, codegen


@intrinsic
def tile_add(typingctx, a, b):
    """Two register tiles (tuples of one float type and length) added elementwise with fp32/fp64 adds."""
    if not (isinstance(a, types.UniTuple) and a == b and isinstance(a.dtype, types.Float)):
        raise TypeError(f"tile_add adds two tuples of the same floats, got {a} and {b}")
    sig = a(a, b)

    def codegen(context, builder, sig, args):
        result = args[0]
        for i in range(sig.return_type.count):
            total = builder.fadd(builder.extract_value(args[0], i), builder.extract_value(args[1], i))
            result = builder.insert_value(result, total, i)
        return result

    return sig, codegen


__all__ = ["atomic_max_nan", "atomic_min_nan", "bf16_tile", "bf16_to_f32", "f32_to_bf16", "maximum", "minimum",
           "mul_add", "named_barrier", "cp_async4", "cp_async8", "cp_async16", "cp_async_commit", "cp_async_wait0",
           "cp_async_wait1", "cp_async_wait2", "dmma_tile", "f16_tile", "gather", "ldmatrix", "tf32_tile",
           "tf32x3_tile", "red_add1", "red_add2", "red_add4", "tile_add", "tile_of", "vload2", "vload4", "vload8",
           "vstore2", "vstore4", "vstore8"]
