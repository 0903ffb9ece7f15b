"""Small compiled helpers shared by the record kernels.

Adjoint buffers are never zeroed in bulk.  Each input slot's first contribution in a
sweep *writes* (mode 1) and later ones *add* (mode 2); mode 0 means the input needs no
gradient.  Kernels that scatter (indexing, views, expand) cannot write each element
exactly once, so on mode 1 they zero the input's region first with ``zero_if_first``.
"""
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
