"""Softmax and log-softmax along one dim, seen as ``(outer, length, inner)`` = ``ints[p:p+3]``.

Both subtract the maximum first, so large inputs do not overflow.  Backward rules:
softmax ``dx = y * (g - sum(g * y))``, log-softmax ``dx = g - exp(y) * sum(g)``.
"""
import numpy as np

from tapejit._jit import small_kernel
from tapejit.ops._kernel_helpers import acc, claim, decode
from tapejit.registry import define_kernel
from tapejit.samples import cases, anywhere


@small_kernel
def softmax_forward(v, out, a, b, p, q, ints, floats):
    outer = ints[p]
    length = ints[p + 1]
    inner = ints[p + 2]
    log = q == 1
    for o in range(outer):
        for k in range(inner):
            base = o * length * inner + k
            m = v[a + base]
            for j in range(1, length):
                m = max(m, v[a + base + j * inner])
            s = m * 0.0
            for j in range(length):
                s += np.exp(v[a + base + j * inner] - m)
            if log:
                shift = m + np.log(s)
                for j in range(length):
                    v[out + base + j * inner] = v[a + base + j * inner] - shift
            else:
                for j in range(length):
                    v[out + base + j * inner] = np.exp(v[a + base + j * inner] - m) / s


@small_kernel
def softmax_backward(v, g, flags, out, a, b, ma, mb, p, q, ints, floats):
    if ma == 0:
        return
    outer = ints[p]
    length = ints[p + 1]
    inner = ints[p + 2]
    log = q == 1
    for o in range(outer):
        for k in range(inner):
            base = o * length * inner + k
            s = floats[0] * 0.0   # floats[0] is 0: a zero of the accumulator type (x * 0.0 is NaN for x = inf)
            if log:
                for j in range(length):
                    s += g[out + base + j * inner]
                for j in range(length):
                    at = base + j * inner
                    acc(g, a + at, g[out + at] - np.exp(v[out + at]) * s, ma)
            else:
                for j in range(length):
                    at = base + j * inner
                    s += g[out + at] * v[out + at]
                for j in range(length):
                    at = base + j * inner
                    acc(g, a + at, v[out + at] * (g[out + at] - s), ma)


SOFTMAX = define_kernel("softmax", "SoftmaxBackward0", softmax_forward, softmax_backward, saved="o",
                        operands=1, samples=cases(("softmax", lambda tj, x: tj.softmax(x, dim=1), [(3, 4)], anywhere),
                                      ("softmax0", lambda tj, x: tj.nn.functional.softmax(x, dim=0), [(4,)], anywhere),
                                      ("softmax_mid", lambda tj, x: x.softmax(1), [(2, 3, 2)], anywhere)))
LOG_SOFTMAX = define_kernel("log_softmax", "LogSoftmaxBackward0", softmax_forward, softmax_backward, saved="o",
                            operands=1, samples=cases(("log_softmax", lambda tj, x: tj.log_softmax(x, dim=-1),
                                           [(3, 4)], anywhere),
                                          ("log_softmax0", lambda tj, x: tj.nn.functional.log_softmax(x, 0),
                                           [(3, 2)], anywhere)))


# ---- softmax of stacked tensors: stack + softmax(dim=0), fused when tj.compile freezes a trace
# A scalar graph's ``softmax(stack([a, b, c, d]), 0)`` is two records; the frozen-tape
# optimiser (tapejit/replay/optimize.py) makes it one that reads the operands in place.
# ``ints[p:]`` is the stack's list, ``[k, 1, operand, n, operand, n, ...]`` (k operands of
# n elements each); the result is ``(k, n)`` at ``out``.  The arithmetic is softmax's, in
# the same order, so values and gradients are the two records' to the bit.

@small_kernel
def stack_softmax_forward(v, out, a, b, p, q, ints, floats):
    k = ints[p]
    n = ints[p + 3]
    for i in range(n):
        m = v[decode(ints[p + 2]) + i]
        for j in range(1, k):
            m = max(m, v[decode(ints[p + 2 + 2 * j]) + i])
        # each exp once, kept in the result until the sum is known (softmax's own loop takes
        # it twice: the same bits, as exp is a function of its argument alone)
        s = m * 0.0
        for j in range(k):
            e = np.exp(v[decode(ints[p + 2 + 2 * j]) + i] - m)
            v[out + j * n + i] = e
            s += e
        for j in range(k):
            v[out + j * n + i] = v[out + j * n + i] / s


@small_kernel
def stack_softmax_backward(v, g, flags, out, a, b, ma, mb, p, q, ints, floats):
    k = ints[p]
    n = ints[p + 3]
    # softmax's backward, each input's gradient stored over the result's adjoint (read just
    # before): rounded to the arena's dtype there, as softmax's own store rounds it ...
    for i in range(n):
        s = floats[0] * 0.0   # floats[0] is 0: a zero of the accumulator type, as in softmax
        for j in range(k):
            at = out + j * n + i
            s += g[at] * v[at]
        for j in range(k):
            at = out + j * n + i
            g[at] = v[at] * (g[at] - s)
    # ... then stack's backward: each operand's slice added to it
    for j in range(k):
        enc = ints[p + 2 + 2 * j]
        mode = claim(flags, enc)
        if mode != 0:
            for i in range(n):
                acc(g, enc + i, g[out + j * n + i], mode)


def _stack_softmax_operands(ints, p):
    return [int(ints[p + 2 + 2 * j]) for j in range(int(ints[p]))]


STACK_SOFTMAX = define_kernel("stack_softmax", "SoftmaxBackward0", stack_softmax_forward, stack_softmax_backward,
                              saved="o", listed=_stack_softmax_operands,
                              samples=cases(("stack_softmax_scalars",
                                             lambda tj, x, y, z: tj.softmax(tj.stack([x, y, z, x]), 0),
                                             [(), (), ()], anywhere),
                                            ("stack_softmax_rows",
                                             lambda tj, x, y: tj.softmax(tj.stack([x, y]), dim=0),
                                             [(3,), (3,)], anywhere)))


# ---- front ends ---------------------------------------------------------------------------
from tapejit.api import export  # noqa: E402
from tapejit.dtypes import as_dtype  # noqa: E402
from tapejit.recording import record, float_input, on_tape, eager  # noqa: E402
from tapejit.shapes import wrap_dim, numel  # noqa: E402
from tapejit.tape import state as _state, current as _current  # noqa: E402


def _softmax(op, input, dim, log, dtype):
    if dtype is None and input._rg and _state.grad and type(dim) is int:
        shape = input._shape
        d = wrap_dim(dim, len(shape), op.name)
        tape = _state.tape or _current()
        p = tape.add_ints((numel(shape[:d]), shape[d] if shape else 1, numel(shape[d + 1:])))
        return record(op, (input,), shape, input._dtype, p, 1 if log else 0)
    x = float_input(input)
    if dtype is not None:
        x = x.to(as_dtype(dtype, op.name))
    if not on_tape(x):
        return eager(_softmax, op, x, dim, log, None)
    shape = x._shape
    if dim is None:
        dim = 0 if len(shape) in (0, 1, 3) else 1  # torch's legacy implicit-dim choice
    d = wrap_dim(dim, len(shape), op.name)
    layout = (numel(shape[:d]), shape[d] if shape else 1, numel(shape[d + 1:]))
    tape = _state.tape or _current()
    p = tape.add_ints(layout)
    return record(op, (x,), shape, x._dtype, p, 1 if log else 0)


@export(method=True)
def softmax(input, dim=None, dtype=None):
    return _softmax(SOFTMAX, input, dim, False, dtype)


@export(method=True)
def log_softmax(input, dim=None, dtype=None):
    return _softmax(LOG_SOFTMAX, input, dim, True, dtype)


# ---- derivative formulas (create_graph) ----------------------------------------------------
# One per op, applied by create_graph passes (tapejit/autograd/higher.py); plain Python,
# not compiled: see tapejit/ops/_formulas.py.  Kept last so define_ edits merge cleanly.

from tapejit.api import front_ends as tj  # noqa: E402  (tj's functions, read at call time)
from tapejit.ops import _formulas as _f  # noqa: E402
from tapejit.ops._formulas import derivative  # noqa: E402
from tapejit.tensor import _concrete  # noqa: E402


@derivative(SOFTMAX, LOG_SOFTMAX)
def _d_softmax(c):
    outer, length, inner = (c.int(c.p + i) for i in range(3))
    shape = (outer, length, inner)
    g = _f.shaped(c.g, shape)
    y = c.out(shape)
    if c.q == 1:   # log_softmax: g - softmax * sum(g)
        if g._tape is None:
            # A constant g (cross-entropy's): its sum in NumPy, as an eager sum record
            # would run the compiled forward mid-walk (~200 us, flushing the walk's records).
            v = g._value()
            total = _concrete(v.sum(1, keepdims=True, dtype=np.float64).astype(v.dtype))
        else:
            total = g.sum(1, keepdim=True)
        return (g - tj.exp(y) * total, None)
    gy = g * y
    return (gy - y * gy.sum(1, keepdim=True), None)


@derivative(STACK_SOFTMAX)
def _d_stack_softmax(c):
    k, n = c.int(c.p), c.int(c.p + 3)
    g = _f.shaped(c.g, (k, n))
    y = c.out((k, n))
    gy = g * y
    dx = gy - y * gy.sum(0, keepdim=True)
    return [(enc, dx[j]) for j, enc in enumerate(_stack_softmax_operands(c.tape.ints, c.p)) if c.wants(enc)]
