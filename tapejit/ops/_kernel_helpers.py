"""Small compiled helpers shared by the record kernels.

Adjoint buffers are never zeroed in bulk.  Each input slot's first contribution in a
sweep *writes* (mode 1) and later ones *add* (mode 2); mode 0 means the input needs no
gradient.  Kernels that scatter (indexing, views, expand) cannot write each element
exactly once, so on mode 1 they zero the input's region first with ``zero_if_first``.
"""
import numpy as np
from numba import types
from numba.extending import overload

from tapejit._jit import helper


@helper
def acc(g, i, value, mode):
    if mode == 1:
        g[i] = value
    else:
        g[i] += value


@helper
def claim(flags, off):
    """Mode for a contribution to slot ``off`` (encoded offset): 0 none, 1 first, 2 add."""
    if off < 0:
        return 0
    if flags[off] == 0:
        flags[off] = 1
        return 1
    return 2


@helper
def decode(off):
    return off if off >= 0 else ~off


@helper
def zero_if_first(g, start, size, mode):
    if mode == 1:
        for i in range(size):
            g[start + i] = 0.0


def tanh(x):
    """``np.tanh``; compiled for float32 as a rational approximation that LLVM vectorizes
    (Eigen's and XLA's, within 3 ulp), where libm's scalar ``tanhf`` costs ~20 ns a call
    and dominated a small MLP's forward pass."""
    return np.tanh(x)


@overload(tanh)
def _tanh_compiled(x):
    if x != types.float32:
        return lambda x: np.tanh(x)

    def rational(x):
        # Past +-7.9, float32 tanh is +-1; the clamp keeps the polynomials in range.
        x = min(max(x, np.float32(-7.90531110763549805)), np.float32(7.90531110763549805))
        x2 = x * x
        p = np.float32(-2.76076847742355e-16)
        p = x2 * p + np.float32(2.00018790482477e-13)
        p = x2 * p + np.float32(-8.60467152213735e-11)
        p = x2 * p + np.float32(5.12229709037114e-08)
        p = x2 * p + np.float32(1.48572235717979e-05)
        p = x2 * p + np.float32(6.37261928875436e-04)
        p = x2 * p + np.float32(4.89352455891786e-03)
        q = np.float32(1.19825839466702e-06)
        q = x2 * q + np.float32(1.18534705686654e-04)
        q = x2 * q + np.float32(2.26843463243900e-03)
        q = x2 * q + np.float32(4.89352518554385e-03)
        return x * p / q
    return rational
