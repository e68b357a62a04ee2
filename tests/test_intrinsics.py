"""The register-tile intrinsic of the fp64 tensor-core kernel routes every value to the right place: its LLVM IR,
generated as for the GPU (with the mma itself replaced), is compiled and run on the CPU (llvmlite's JIT) and
compared with a model in NumPy. The simulator runs a Python stand-in of it, so without this only a GPU would check
the code the GPU runs."""
import ctypes

import llvmlite.binding as llvm
import numpy as np
import pytest
from llvmlite import ir
from numba.core import types

from autotune.kernels import intrinsics


def definition(intrinsic):
    """The typing-and-codegen function of a Numba intrinsic (a private attribute, read here alone)."""
    defn = getattr(intrinsic, "_defn", None)
    if defn is None:
        pytest.fail("numba-cuda's intrinsic object no longer has _defn: update tests/test_intrinsics.py")
    return defn


class CpuContext:
    """What the codegen functions use of Numba's target context, for values already of the right type."""

    def cast(self, builder, value, fromty, toty):
        assert fromty == toty
        return value


def llvm_type(ty):
    if isinstance(ty, types.BaseTuple):
        inner = [llvm_type(t) for t in ty]
        return ir.ArrayType(inner[0], len(inner)) if isinstance(ty, types.UniTuple) else ir.LiteralStructType(inner)
    return ir.DoubleType() if ty == types.float64 else ir.FloatType()


def scalars(ty):
    return [x for t in ty for x in scalars(t)] if isinstance(ty, types.BaseTuple) else [ty]


def run_codegen(codegen, sig, inputs: list[np.ndarray], dtype) -> np.ndarray:
    """Build f(out, in0, in1, ...) whose arguments are flat arrays packed into the intrinsic's argument types, call
    the codegen on them, JIT the module for this CPU, run it and return the flattened result."""
    scalar = ir.DoubleType() if dtype == np.float64 else ir.FloatType()
    module = ir.Module(name="intrinsic_test")
    fnty = ir.FunctionType(ir.VoidType(), [scalar.as_pointer()] * (1 + len(sig.args)))
    fn = ir.Function(module, fnty, name="run")
    builder = ir.IRBuilder(fn.append_basic_block())

    def pack(ty, pointer, position):
        if isinstance(ty, types.BaseTuple):
            value = ir.Constant(llvm_type(ty), ir.Undefined)
            for i, t in enumerate(ty):
                item, position = pack(t, pointer, position)
                value = builder.insert_value(value, item, i)
            return value, position
        element = builder.gep(pointer, [ir.Constant(ir.IntType(64), position)])
        return builder.load(element), position + 1

    args = [pack(ty, fn.args[1 + n], 0)[0] for n, ty in enumerate(sig.args)]
    result = codegen(CpuContext(), builder, sig, args)
    for k in range(sig.return_type.count):
        builder.store(builder.extract_value(result, k), builder.gep(fn.args[0], [ir.Constant(ir.IntType(64), k)]))
    builder.ret_void()
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_default_triple().create_target_machine()
    compiled = llvm.parse_assembly(str(module))
    engine = llvm.create_mcjit_compiler(compiled, target)
    engine.finalize_object()
    out = np.full(sig.return_type.count, np.nan, dtype)
    inputs = [np.ascontiguousarray(x, dtype) for x in inputs]
    pointer = ctypes.POINTER(ctypes.c_double if dtype == np.float64 else ctypes.c_float)
    call = ctypes.CFUNCTYPE(None, *[pointer] * (1 + len(inputs)))(engine.get_function_address("run"))
    call(out.ctypes.data_as(pointer), *[x.ctypes.data_as(pointer) for x in inputs])
    return out


def as_tile(flat: np.ndarray, rows: int, columns: int) -> np.ndarray:
    """The (rows, columns) tile a tuple holds, by intrinsics.tile_slot."""
    return np.array([[flat[intrinsics.tile_slot(rows * columns, i, j, columns)] for j in range(columns)]
                     for i in range(rows)])


def from_tile(tile: np.ndarray) -> np.ndarray:
    rows, columns = tile.shape
    flat = np.empty(rows * columns, tile.dtype)
    for i in range(rows):
        for j in range(columns):
            flat[intrinsics.tile_slot(rows * columns, i, j, columns)] = tile[i, j]
    return flat


@pytest.mark.parametrize("tm, tn, k", [(8, 8, 4), (2, 8, 4), (4, 4, 8), (2, 2, 16)])
def test_dmma_tile_routes_fragments_and_results_to_the_right_places(tm, tn, k, monkeypatch):
    """Each mma of the warp's tile gets its A and B fragments (fa[i * k/4 + q], fb[nj * k/4 + q]) and its four tile
    elements (rows 2mi, 2mi+1; columns 2nj, 2nj+1): checked with the mma replaced by a function of its operands
    that tells them apart, c + (sum of a * weights) * (sum of b * weights)."""
    q = k // 4

    def fake_mma(builder, steps, a, b, c):
        assert steps == k and len(a) == k // 2 and len(b) == q and len(c) == 4
        weigh = lambda values: [builder.fmul(v, ir.Constant(v.type, float(10 ** n))) for n, v in enumerate(values)]  # noqa
        sa, sb = weigh(a)[0], weigh(b)[0]
        for v in weigh(a)[1:]:
            sa = builder.fadd(sa, v)
        for v in weigh(b)[1:]:
            sb = builder.fadd(sb, v)
        product = builder.fmul(sa, sb)
        return [builder.fadd(x, builder.fmul(product, ir.Constant(x.type, float(e + 1)))) for e, x in enumerate(c)]

    monkeypatch.setattr(intrinsics, "_dmma", fake_mma)
    acc_ty = types.UniTuple(types.float64, tm * tn)
    fa_ty, fb_ty = types.UniTuple(types.float64, tm * q), types.UniTuple(types.float64, (tn // 2) * q)
    sig, codegen = definition(intrinsics.dmma_tile)(None, acc_ty, fa_ty, fb_ty, types.IntegerLiteral(k))
    rng = np.random.default_rng()
    tile = rng.integers(-8, 9, (tm, tn)).astype(np.float64)
    fa, fb = rng.integers(1, 9, tm * q).astype(np.float64), rng.integers(1, 9, (tn // 2) * q).astype(np.float64)
    out = as_tile(run_codegen(codegen, sig, [from_tile(tile), fa, fb], np.float64), tm, tn)
    expected = tile.copy()
    for mi in range(tm // 2):
        for nj in range(tn // 2):
            a = [fa[(2 * mi + x % 2) * q + x // 2] for x in range(k // 2)]
            b = [fb[nj * q + y] for y in range(q)]
            product = sum(v * 10 ** n for n, v in enumerate(a)) * sum(v * 10 ** n for n, v in enumerate(b))
            for e, (i, j) in enumerate((i, j) for i in (0, 1) for j in (0, 1)):
                expected[2 * mi + i, 2 * nj + j] += product * (e + 1)
    np.testing.assert_array_equal(out, expected)


def jit_run(build) -> "ctypes._CFuncPtr":
    """run(out, src) over uint16 arrays, its body built by ``build(builder, out, src)``, JIT-compiled for this CPU
    (little-endian, as the GPU)."""
    u16 = ir.IntType(16).as_pointer()
    module = ir.Module(name="vector_words_test")
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [u16, u16]), name="run")
    builder = ir.IRBuilder(fn.append_basic_block())
    build(builder, *fn.args)
    builder.ret_void()
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(str(module)),
                                        llvm.Target.from_default_triple().create_target_machine())
    engine.finalize_object()
    run = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(engine.get_function_address("run"))
    run.engine = engine  # kept alive with the function
    return run


def test_eight_halves_move_as_four_words_in_memory_order():
    """vload8 and vstore8 of 16-bit elements read and write four 32-bit words (one 16-byte access, where NVVM
    splits a vector of eight halves into two 8-byte ones): element j of the tuple is the j-th in memory, both
    ways, checked by running the IR that splits and packs the words on this CPU."""
    half = ir.HalfType()

    def element(builder, pointer, j):
        return builder.gep(pointer, [ir.Constant(ir.IntType(64), j)])

    def load_halves(builder, out, src):
        words = builder.load(builder.bitcast(src, intrinsics.WORDS.as_pointer()), align=16)
        for j, value in enumerate(intrinsics._halves_of(builder, words, half)):
            builder.store(builder.bitcast(value, ir.IntType(16)), element(builder, out, j))

    def store_words(builder, out, src):
        values = [builder.bitcast(builder.load(element(builder, src, j)), half) for j in range(8)]
        builder.store(intrinsics._words_of(builder, values), builder.bitcast(out, intrinsics.WORDS.as_pointer()),
                      align=16)

    def aligned(values: np.ndarray) -> np.ndarray:  # the accesses claim 16-byte alignment
        buffer = np.empty(16, np.uint16)
        start = (-buffer.ctypes.data % 16) // 2
        buffer[start:start + 8] = values
        return buffer[start:start + 8]

    # eight distinct values (eighths up to 125, exact in float16), fresh each run: a swapped pair cannot pass
    src = aligned((np.random.default_rng().choice(np.arange(-1000, 1000), 8, replace=False) / 8)
                  .astype(np.float16).view(np.uint16))
    for build in (load_halves, store_words):
        out = aligned(np.full(8, 0xFFFF, np.uint16))
        jit_run(build)(out.ctypes.data, src.ctypes.data)
        np.testing.assert_array_equal(out, src, err_msg=build.__name__)
