"""Small compiled helpers shared by the record kernels.

Adjoint buffers are never zeroed in bulk.  Each input slot's first contribution in a
sweep *writes* (mode 1) and later ones *add* (mode 2); mode 0 means the input needs no
gradient.  Kernels that scatter (indexing, views, expand) cannot write each element
exactly once, so on mode 1 they zero the input's region first with ``zero_if_first``.

Element loops index arenas through ``at``: an arena offset is never negative, and an
unsigned index spares Numba's negative-index wraparound, whose branch per access kept
LLVM from vectorizing the loops (elementwise records on a million elements ran 2-3x
slower than NumPy's loops).
"""
import numpy as np
from numba import types

from tapejit._jit import helper, overloaded


@helper
def at(i):
    """Arena index ``i`` (>= 0) as unsigned: no wraparound branch (see the module docstring)."""
    return np.uint64(i)


@helper
def acc(g, i, value, mode):
    """Adds ``value`` to ``g[i]`` (mode 2) or writes it there (mode 1).  The element is read
    either way, so inside a loop this is a select, not a branch: LLVM vectorizes it even in
    a sweep too large for it to unswitch the loop on ``mode`` (a unary backward record on
    10^6 elements: 0.43 -> 0.26 ms)."""
    k = np.uint64(i)
    old = g[k]
    g[k] = old + value if mode == 2 else value


@helper
def acc_strided(g, i, value, mode):
    """``acc`` as a branch, for binary backward loops, whose index ``a + i * sa`` has a
    stride of 0 or 1 known only at run time: there the select form measured 1.8x slower."""
    k = np.uint64(i)
    if mode == 1:
        g[k] = value
    else:
        g[k] += value


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
def row_sum(v, start, n, zero):
    """``v[start:start + n].sum()`` in four interleaved partial sums, which LLVM keeps in
    vector registers: one running sum waits on each add (about 4x slower on long rows).
    ``zero`` is a 0 of the accumulator type (``x * 0.0`` is NaN for an infinite x)."""
    s0 = zero
    s1 = zero
    s2 = zero
    s3 = zero
    full = n - n % 4
    for j in range(0, full, 4):
        k = start + j
        s0 += v[np.uint64(k)]
        s1 += v[np.uint64(k + 1)]
        s2 += v[np.uint64(k + 2)]
        s3 += v[np.uint64(k + 3)]
    for j in range(full, n):
        s0 += v[np.uint64(start + j)]
    return (s0 + s1) + (s2 + s3)



@helper
def add_row_sums(v, width, start, n, dst, partial):
    """``row_sum`` for a batch with rows as the vector axis (``tapejit/replay/rows.py``:
    slot ``s`` of row ``j`` at ``s * width + j``): adds each row's sum of slots
    ``start .. start + n - 1`` to its slot ``dst``, in ``row_sum``'s order (four
    interleaved partial sums), so each row gets the bits of a replay of that row alone.
    ``partial``: ``4 * width`` elements of the accumulator type (the arena's)."""
    for j in range(4 * width):
        partial[j] = 0.0
    full = n - n % 4
    for k in range(0, full, 4):
        base = (start + k) * width
        for j in range(width):
            partial[j] += v[np.uint64(base + j)]
            partial[width + j] += v[np.uint64(base + width + j)]
            partial[2 * width + j] += v[np.uint64(base + 2 * width + j)]
            partial[3 * width + j] += v[np.uint64(base + 3 * width + j)]
    for k in range(full, n):
        base = (start + k) * width
        for j in range(width):
            partial[j] += v[np.uint64(base + j)]
    out = dst * width
    for j in range(width):
        v[np.uint64(out + j)] += (partial[j] + partial[width + j]) + (partial[2 * width + j] + partial[3 * width + j])

@helper
def decode(off):
    return off if off >= 0 else ~off


@helper
def zero_if_first(g, start, size, mode):
    if mode == 1:
        for i in range(size):
            g[np.uint64(start + i)] = 0.0


def tanh(x):
    """``np.tanh``; compiled for float32 as a rational approximation that LLVM vectorizes
    (Eigen's and XLA's, within 3 ulp), where libm's scalar ``tanhf`` costs ~20 ns a call
    and dominated a small MLP's forward pass."""
    return np.tanh(x)


@overloaded(tanh)
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
