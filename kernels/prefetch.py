"""Software prefetch for Numba kernels: ``prefetch_row(arr2d, row)``.

Emits LLVM's ``llvm.prefetch`` (read, high locality, data cache) for the first
element of ``arr2d[row]``: a hint that never faults and never changes results.
Random-access kernels call it a few dozen iterations ahead so that the cache
misses of successive updates overlap (:mod:`kernels.reliability`).

``llvmlite`` is Numba's own code generator (installed with numba). If this
LLVM build rejects the intrinsic, ``prefetch_row`` falls back to a no-op and
:data:`HAVE_PREFETCH` is False; results are the same, only slower.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def _llvm_prefetch_row(typingctx, arr, row):
    """Prefetch the cache line holding ``arr[row, 0]`` (arr: 2-D C array)."""
    if not isinstance(arr, types.Array) or arr.ndim != 2 or not isinstance(row, types.Integer):
        return None
    sig = types.void(arr, row)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        idx = context.cast(builder, args[1], signature.args[1], types.intp)
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [idx, context.get_constant(types.intp, 0)])
        i8p = builder.bitcast(ptr, ir.IntType(8).as_pointer())
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer(), i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
        # rw = 0 (read), locality = 3 (keep in all levels), cache type = 1 (data)
        builder.call(fn, [i8p, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


@numba.njit(cache=True)
def _probe(a):
    _llvm_prefetch_row(a, 0)
    return a[0, 0]


try:
    _probe(np.zeros((1, 1)))
    HAVE_PREFETCH = True
    prefetch_row = _llvm_prefetch_row
except Exception:  # pragma: no cover - depends on the LLVM build
    HAVE_PREFETCH = False

    @numba.njit(inline="always")
    def prefetch_row(arr, row):
        pass
