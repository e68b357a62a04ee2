"""Vector loads and stores for generated kernels.

Numba has no 128-bit array access and does not merge adjacent scalar loads, so these intrinsics bitcast the
element pointer to an LLVM vector and load or store it with the vector's natural alignment: the PTX shows
``ld.global.v4.f32`` / ``ld.shared.v4.f32``. The caller guarantees the alignment (flat index a multiple of the
width and a suitably aligned base pointer); the generated kernels check this before taking the vector path.
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


def _make_vload(width: int):
    @intrinsic
    def vload(typingctx, arr, idx):
        sig = types.UniTuple(arr.dtype, width)(arr, idx)

        def codegen(context, builder, sig, args):
            arrty = sig.args[0]
            vecty = _vector_type(context, arrty, width)
            ptr = builder.bitcast(_element_pointer(context, builder, arrty, args[0], args[1]), vecty.as_pointer())
            vec = builder.load(ptr, align=width * context.get_abi_sizeof(vecty.element))
            items = [builder.extract_element(vec, ir.Constant(ir.IntType(32), j)) for j in range(width)]
            return context.make_tuple(builder, sig.return_type, items)

        return sig, codegen

    return vload


def _vstore_codegen(width: int):
    def codegen(context, builder, sig, args):
        arrty = sig.args[0]
        vecty = _vector_type(context, arrty, width)
        vec = ir.Constant(vecty, ir.Undefined)
        for j, value in enumerate(args[2:]):
            value = context.cast(builder, value, sig.args[2 + j], arrty.dtype)
            vec = builder.insert_element(vec, value, ir.Constant(ir.IntType(32), j))
        ptr = builder.bitcast(_element_pointer(context, builder, arrty, args[0], args[1]), vecty.as_pointer())
        builder.store(vec, ptr, align=width * context.get_abi_sizeof(vecty.element))
        return context.get_dummy_value()

    return codegen


@intrinsic
def vstore2(typingctx, arr, idx, v0, v1):
    return types.void(arr, idx, v0, v1), _vstore_codegen(2)


@intrinsic
def vstore4(typingctx, arr, idx, v0, v1, v2, v3):
    return types.void(arr, idx, v0, v1, v2, v3), _vstore_codegen(4)


vload2 = _make_vload(2)
vload4 = _make_vload(4)
