"""Matrix products for the linalg kernels: one helper over BLAS ``gemm``.

Numba's ``np.dot`` compiles a separate specialisation, with its checks and copies, for
every layout and dtype it meets; in a cold start those specialisations cost the linalg
group about ten seconds.  Here every product is a call to the same ``gemm`` entry point
Numba itself uses for ``np.dot`` (``numba_xxgemm`` in Numba's C helper library, which
forwards to SciPy's BLAS and is linked by name, so the sweeps stay cacheable).  The
operands are addressed in place by arena offset, and a transposed operand is a BLAS flag,
never a copy.
"""
import numpy as np
from numba import types

from tapejit._jit import helper

_xxgemm = types.ExternalFunction("numba_xxgemm", types.intc(
    types.int8, types.int8, types.int8,              # kind ('s'/'d'), trans X, trans Y
    types.intp, types.intp, types.intp,              # M, N, K
    types.intp, types.intp, types.intp,              # &alpha, X, ldX
    types.intp, types.intp, types.intp,              # Y, ldY, &beta
    types.intp, types.intp))                         # C, ldC

_N = 78   # ord("N")
_T = 84   # ord("T")


@helper
def matmul_into(out, o, A, a, B, b, rows, inner, cols, trans_a, trans_b, accumulate):
    """``out[o:]`` (row-major ``rows x cols``) = (or +=) ``op(A) @ op(B)``, where ``op(A)``
    is ``rows x inner`` stored row-major at ``A[a:]`` (stored ``inner x rows`` when
    ``trans_a``), and ``op(B)`` is ``inner x cols`` at ``B[b:]`` (stored ``cols x inner``
    when ``trans_b``).  All arrays share one float dtype."""
    if rows == 0 or cols == 0:
        return
    if inner == 0:
        if not accumulate:
            for i in range(rows * cols):
                out[o + i] = 0.0
        return
    # BLAS addresses memory directly, out of reach of NUMBA_BOUNDSCHECK: check the regions.
    if o < 0 or a < 0 or b < 0 or (o + rows * cols > out.size or a + rows * inner > A.size
                                   or b + inner * cols > B.size):
        raise IndexError("tapejit: matmul operand region outside its arena (a slot-offset bug)")
    # Row-major C is column-major C^T = op(B)^T op(A)^T: BLAS sees B first.
    scalars = np.empty(2, out.dtype)   # alpha, beta: BLAS takes them by address
    scalars[0] = 1.0
    scalars[1] = 1.0 if accumulate else 0.0
    size = out.itemsize
    kind = 100 if size == 8 else 115   # 'd' or 's'
    status = _xxgemm(kind, _T if trans_b else _N, _T if trans_a else _N, cols, rows, inner,
                     scalars.ctypes.data, B.ctypes.data + b * size, inner if trans_b else cols,
                     A.ctypes.data + a * size, rows if trans_a else inner,
                     scalars.ctypes.data + size, out.ctypes.data + o * size, cols)
    if status != 0:
        raise RuntimeError("tapejit: BLAS gemm is unavailable (SciPy's BLAS could not be loaded)")
