"""Reductions: sums and means over any dims, and max/min/prod/logsumexp/norm/var/std along
one block of dims.

``sum`` walks the input and adds each element into the output position given by strides
that are 0 on reduced dims, times a scale (1, or 1/n for ``mean``); the same layout
serves ``expand``'s backward, so summing gradients back to a broadcast shape is this
one kernel.  The other reductions see their input as ``(outer, length, inner)`` and
reduce the middle axis; the front end moves several reduced dims next to each other
first.  Layouts at ``ints[p]``: sum ``[ndim, out size, sizes..., out strides...]``
with the scale in ``floats[q]``; along-axis ops ``[outer, length, inner]``.
Ties: ``amax``/``amin``/full ``max``/``min`` split the gradient evenly between equal
extremes, as PyTorch does; with a NaN, full ``max``/``min`` pass it to the NaNs and
``amax``/``amin`` give NaN (PyTorch's two rules).  Reductions with an identity (prod,
logsumexp, norm, var) may reduce over nothing.  (This module's front ends shadow
``max``/``min``/``sum``/``any``/``all``, so the kernels must not call those builtins.)
"""
import numpy as np

from tapejit._jit import helper, kernel
from tapejit.ops._kernel_helpers import acc, add_row_sums, at, row_sum
from tapejit.registry import define_kernel, same_kernels
from tapejit.ops.movement import INDEX
from tapejit.samples import cases, anywhere, positive, distinct, away_from_zero


#: A row of a sum adds its elements in blocks of this many (``row_sum`` each), in order.
#: The chunked sweeps (tapejit/executor.py) sum a large run's chunks of the same size apart
#: and add the chunks' sums in the same order, so that both give the same bits.
SUM_BLOCK = 8192


@helper
def _sum_rows(sizes, ostrides):
    """A sum layout's input as rows of its last dim: ``(rows, inner, istep)``, the number of
    rows, their length and the output stride along them (0: the row sums into one place)."""
    nd = len(sizes)
    n = 1
    for d in range(nd):
        n *= sizes[d]
    inner = sizes[nd - 1] if nd > 0 else 1
    istep = ostrides[nd - 1] if nd > 0 else 0
    return (n // inner if inner > 0 else 0), inner, istep


@helper
def _next_row(idx, sizes, ostrides, pos):
    """The output position of the next input row: ``idx`` (the row's index over the leading
    dims) counts up like an odometer, and ``pos`` moves by the output strides."""
    d = len(sizes) - 2
    while d >= 0:
        idx[d] += 1
        pos += ostrides[d]
        if idx[d] < sizes[d]:
            break
        pos -= ostrides[d] * sizes[d]
        idx[d] = 0
        d -= 1
    return pos


@kernel
def sum_forward(v, out, a, b, p, q, ints, floats):
    if p < 0:
        # a chunk of a full sum in a chunked run: its ~p elements' sum, unscaled
        v[out] = row_sum(v, a, ~p, floats[0])
        return
    nd = ints[p]
    out_size = ints[p + 1]
    sizes = ints[p + 2:p + 2 + nd]
    ostrides = ints[p + 2 + nd:p + 2 + 2 * nd]
    scale = floats[q]
    for i in range(out_size):
        v[out + i] = 0.0
    rows, inner, istep = _sum_rows(sizes, ostrides)
    idx = np.zeros(nd if nd > 0 else 1, np.int64)
    pos = out
    i = a
    for _ in range(rows):
        if istep == 0:
            for block in range(0, inner, SUM_BLOCK):
                count = inner - block if inner - block < SUM_BLOCK else SUM_BLOCK
                v[pos] += row_sum(v, i + block, count, floats[0])
        else:
            for j in range(inner):
                v[at(pos + j * istep)] += v[at(i + j)]
        i += inner
        pos = _next_row(idx, sizes, ostrides, pos)
    if scale != 1.0:
        for k in range(out_size):
            v[out + k] *= scale


@kernel
def sum_backward(v, g, flags, out, a, b, ma, mb, p, q, ints, floats):
    if ma == 0:
        return
    if p < 0:
        # a chunk of a full sum in a chunked run: ~p elements, the output's gradient at out
        gi = g[out] * floats[q]
        for j in range(~p):
            acc(g, a + j, gi, ma)
        return
    nd = ints[p]
    sizes = ints[p + 2:p + 2 + nd]
    ostrides = ints[p + 2 + nd:p + 2 + 2 * nd]
    scale = floats[q]
    rows, inner, istep = _sum_rows(sizes, ostrides)
    idx = np.zeros(nd if nd > 0 else 1, np.int64)
    pos = out
    i = a
    for _ in range(rows):
        if istep == 0:
            gi = g[pos] * scale
            for j in range(inner):
                acc(g, i + j, gi, ma)
        else:
            for j in range(inner):
                acc(g, i + j, g[at(pos + j * istep)] * scale, ma)
        i += inner
        pos = _next_row(idx, sizes, ostrides, pos)



# sum_forward and sum_backward for a batch replayed with rows as the vector axis
# (tapejit/replay/rows.py: slot s of row j at s * width + j), each row in the kernels' order.

@kernel
def sum_rows_forward(v, width, out, a, b, p, q, ints, floats, partial):
    nd = ints[p]
    out_size = ints[p + 1]
    sizes = ints[p + 2:p + 2 + nd]
    ostrides = ints[p + 2 + nd:p + 2 + 2 * nd]
    scale = floats[q]
    for k in range(out_size * width):
        v[at(out * width + k)] = 0.0
    rows, inner, istep = _sum_rows(sizes, ostrides)
    idx = np.zeros(nd if nd > 0 else 1, np.int64)
    pos = out
    i = a
    for _ in range(rows):
        if istep == 0:
            for block in range(0, inner, SUM_BLOCK):
                count = inner - block if inner - block < SUM_BLOCK else SUM_BLOCK
                add_row_sums(v, width, i + block, count, pos, partial)
        else:
            for j in range(inner):
                dst = (pos + j * istep) * width
                src = (i + j) * width
                for r in range(width):
                    v[at(dst + r)] += v[at(src + r)]
        i += inner
        pos = _next_row(idx, sizes, ostrides, pos)
    if scale != 1.0:
        for k in range(out_size * width):
            v[at(out * width + k)] *= scale


@kernel
def sum_rows_backward(v, g, width, out, a, b, ma, mb, p, q, ints, floats):
    if ma == 0:
        return
    nd = ints[p]
    sizes = ints[p + 2:p + 2 + nd]
    ostrides = ints[p + 2 + nd:p + 2 + 2 * nd]
    scale = floats[q]
    rows, inner, istep = _sum_rows(sizes, ostrides)
    idx = np.zeros(nd if nd > 0 else 1, np.int64)
    pos = out
    i = a
    for _ in range(rows):
        for j in range(inner):
            src = (pos + j * istep) * width     # istep 0: every element of the row's block reads one gradient
            dst = (i + j) * width
            for r in range(width):
                acc(g, dst + r, g[at(src + r)] * scale, ma)
        i += inner
        pos = _next_row(idx, sizes, ostrides, pos)

SUM = define_kernel("sum", "SumBackward0", sum_forward, sum_backward, saves=False, group="sum",
                    runs="sum", block=SUM_BLOCK, operands=1, samples=cases(("sum", lambda tj, x: x.sum(), [(3, 4)], anywhere),
                                  ("sum_scalar", lambda tj, x: tj.sum(x), [()], anywhere)))
SUM_DIM = same_kernels("sum_dim", "SumBackward1", SUM,
                       samples=cases(("sum0", lambda tj, x: x.sum(0), [(3, 4)], anywhere),
                                     ("sum1k", lambda tj, x: x.sum(dim=1, keepdim=True), [(3, 4)], anywhere),
                                     ("sum02", lambda tj, x: x.sum((0, 2)), [(2, 3, 4)], anywhere),
                                     ("sum-1", lambda tj, x: x.sum(-1), [(2, 3, 4)], anywhere)))
MEAN = same_kernels("mean", "MeanBackward0", SUM,
                    samples=cases(("mean", lambda tj, x: x.mean(), [(3, 4)], anywhere)))
MEAN_DIM = same_kernels("mean_dim", "MeanBackward1", SUM,
                        samples=cases(("mean1", lambda tj, x: x.mean(1), [(3, 4)], anywhere),
                                      ("mean02k", lambda tj, x: x.mean((0, 2), keepdim=True), [(2, 3, 4)], anywhere)))


# ---- along one axis of an (outer, length, inner) view ----------------------------------

@kernel
def amax_forward(v, out, a, b, p, q, ints, floats):
    outer = ints[p]
    length = ints[p + 1]
    inner = ints[p + 2]
    sign = floats[q]  # +1 for max, -1 for min
    for o in range(outer):
        for k in range(inner):
            base = a + o * length * inner + k
            best = v[base]
            for j in range(1, length):
                x = v[base + j * inner]
                if np.isnan(x) or (sign * x > sign * best):
                    best = x
                if np.isnan(best):
                    break
            v[out + o * inner + k] = best


@kernel
def amax_backward(v, g, flags, out, a, b, ma, mb, p, q, ints, floats):
    # PyTorch's two rules.  amax/amin (floats[q + 1] == 0): ``g / count * (x == y)``, the
    # gradient split evenly between equal extremes; a slice whose extreme is NaN has no
    # element equal to it, so every element gets ``g / 0 * 0``, NaN.  Full max()/min()
    # (floats[q + 1] == 1): split evenly between the elements equal to the result, or
    # between the NaNs when the result is NaN, and exactly zero elsewhere.
    if ma == 0:
        return
    outer = ints[p]
    length = ints[p + 1]
    inner = ints[p + 2]
    whole = floats[q + 1] != 0.0
    zero = floats[0]
    for o in range(outer):
        for k in range(inner):
            base = a + o * length * inner + k
            y = v[out + o * inner + k]
            to_nans = whole and np.isnan(y)
            ties = 0
            for j in range(length):
                x = v[base + j * inner]
                if np.isnan(x) if to_nans else x == y:
                    ties += 1
            share = g[out + o * inner + k] / ties
            for j in range(length):
                x = v[base + j * inner]
                if np.isnan(x) if to_nans else x == y:
                    d = share
                elif whole:
                    d = zero
                else:
                    d = share * 0.0
                acc(g, base + j * inner, d, ma)


AMAX = define_kernel("amax", "AmaxBackward0", amax_forward, amax_backward, saved="ao",
                     operands=1, samples=cases(("amax", lambda tj, x: x.amax(1), [(3, 4)], distinct),
                                   ("amax02", lambda tj, x: tj.amax(x, (0, 2)), [(2, 3, 4)], distinct)))
MAX_ALL = same_kernels("max_all", "MaxBackward1", AMAX,
                       samples=cases(("max", lambda tj, x: x.max(), [(3, 4)], distinct)))


@kernel
def prod_forward(v, out, a, b, p, q, ints, floats):
    outer = ints[p]
    length = ints[p + 1]
    inner = ints[p + 2]
    for o in range(outer):
        for k in range(inner):
            base = a + o * length * inner + k
            r = floats[0] * 0.0 + 1.0
            for j in range(length):
                r *= v[base + j * inner]
            v[out + o * inner + k] = r


@kernel
def prod_backward(v, g, flags, out, a, b, ma, mb, p, q, ints, floats):
    # PyTorch's rule, by floats[q]: 0 prod(dim), 1 full prod(), 2 a 0-d input (whose
    # gradient is g).  With no zero anywhere in the input, g * (y / x); with zeros, g times
    # the product of the other elements of the slice (prefix times suffix products), but
    # zero for a full product with two zeros or more.
    if ma == 0:
        return
    outer = ints[p]
    length = ints[p + 1]
    inner = ints[p + 2]
    kind = floats[q]
    zero = floats[0]
    n = outer * length * inner
    if kind == 2.0:
        acc(g, a, g[out], ma)
        return
    zeros = 0
    for i in range(n):
        if v[a + i] == 0.0:
            zeros += 1
    if zeros == 0:
        for o in range(outer):
            for k in range(inner):
                base = a + o * length * inner + k
                y = v[out + o * inner + k]
                gy = g[out + o * inner + k]
                for j in range(length):
                    acc(g, base + j * inner, gy * (y / v[base + j * inner]), ma)
        return
    if kind == 1.0 and zeros > 1:
        for i in range(n):
            acc(g, a + i, zero, ma)
        return
    suffix = np.empty(length, v.dtype)
    for o in range(outer):
        for k in range(inner):
            base = a + o * length * inner + k
            gy = g[out + o * inner + k]
            s = zero + 1.0
            for j in range(length - 1, -1, -1):
                suffix[j] = s
                s *= v[base + j * inner]
            prefix = zero + 1.0
            for j in range(length):
                acc(g, base + j * inner, gy * (prefix * suffix[j]), ma)
                prefix *= v[base + j * inner]


PROD = define_kernel("prod", "ProdBackward0", prod_forward, prod_backward, saved="ao",
                     operands=1, samples=cases(("prod", lambda tj, x: x.prod(), [(5,)], away_from_zero),
                                   ("prod_zero", lambda tj, x: (x * tj.tensor([1.0, 0.0, 1.0], dtype=x.dtype)).prod(),
                                    [(3,)], away_from_zero)))
PROD_DIM = same_kernels("prod_dim", "ProdBackward1", PROD,
                        samples=cases(("prod_dim", lambda tj, x: x.prod(1), [(3, 4)], away_from_zero),
                                      ("prod_dim_zero",
                                       lambda tj, x: (x * tj.tensor([[1.0, 0.0, 1.0]], dtype=x.dtype)).prod(1),
                                       [(2, 3)], away_from_zero)))


@kernel
def logsumexp_forward(v, out, a, b, p, q, ints, floats):
    outer = ints[p]
    length = ints[p + 1]
    inner = ints[p + 2]
    for o in range(outer):
        for k in range(inner):
            base = a + o * length * inner + k
            if length == 0:
                v[out + o * inner + k] = -np.inf   # the log of an empty sum, as PyTorch
                continue
            m = v[base]
            for j in range(1, length):
                m = np.maximum(m, v[base + j * inner])
            if np.isinf(m):   # as PyTorch: all -inf gives -inf, any +inf gives inf
                m = floats[0]
            s = m * 0.0
            for j in range(length):
                s += np.exp(v[base + j * inner] - m)
            v[out + o * inner + k] = m + np.log(s)


@kernel
def logsumexp_backward(v, g, flags, out, a, b, ma, mb, p, q, ints, floats):
    if ma == 0:
        return
    outer = ints[p]
    length = ints[p + 1]
    inner = ints[p + 2]
    for o in range(outer):
        for k in range(inner):
            base = a + o * length * inner + k
            y = v[out + o * inner + k]
            gy = g[out + o * inner + k]
            for j in range(length):
                acc(g, base + j * inner, gy * np.exp(v[base + j * inner] - y), ma)


LOGSUMEXP = define_kernel("logsumexp", "LogsumexpBackward0", logsumexp_forward, logsumexp_backward, saved="ao",
                          operands=1, samples=cases(("logsumexp", lambda tj, x: x.logsumexp(1), [(3, 4)], anywhere),
                                        ("logsumexp0k", lambda tj, x: tj.logsumexp(x, 0, keepdim=True),
                                         [(3, 4)], anywhere)))


@kernel
def norm_forward(v, out, a, b, p, q, ints, floats):
    outer = ints[p]
    length = ints[p + 1]
    inner = ints[p + 2]
    order = floats[q]
    for o in range(outer):
        for k in range(inner):
            base = a + o * length * inner + k
            s = floats[0] * 0.0
            if np.isinf(order):
                for j in range(length):
                    x = np.abs(v[base + j * inner])
                    if np.isnan(x) or x > s:
                        s = x
                v[out + o * inner + k] = s
                continue
            for j in range(length):
                x = np.abs(v[base + j * inner])
                s += x * x if order == 2.0 else x ** order
            v[out + o * inner + k] = np.sqrt(s) if order == 2.0 else s ** (1.0 / order)


@kernel
def norm_backward(v, g, flags, out, a, b, ma, mb, p, q, ints, floats):
    # PyTorch's rules, case by case (its sgn(NaN) is 0), with its masks: the gradient is
    # zero where the norm is zero, and the inf-norm's is split between the elements equal
    # to it, or the NaNs.
    if ma == 0:
        return
    outer = ints[p]
    length = ints[p + 1]
    inner = ints[p + 2]
    order = floats[q]
    zero = floats[0]
    for o in range(outer):
        for k in range(inner):
            base = a + o * length * inner + k
            y = v[out + o * inner + k]
            gy = g[out + o * inner + k]
            share = gy
            if np.isinf(order):
                hits = 0
                for j in range(length):
                    x = np.abs(v[base + j * inner])
                    if x == y or np.isnan(x):
                        hits += 1
                share = gy / hits
            elif order != 1.0 and order != 2.0 and order >= 1.0:
                share = zero if y == 0.0 else gy / y ** (order - 1.0)
            for j in range(length):
                x = v[base + j * inner]
                sgn = 1.0 if x > 0.0 else (-1.0 if x < 0.0 else 0.0)
                if order == 1.0:
                    d = sgn * gy
                elif order == 2.0:
                    d = gy * (zero if y == 0.0 else x / y)
                elif np.isinf(order):
                    ax = np.abs(x)
                    d = sgn * (share * (1.0 if ax == y or np.isnan(ax) else 0.0))
                elif order < 1.0:
                    d = (zero if x == 0.0 else sgn * np.abs(x) ** (order - 1.0)) * gy * y ** (1.0 - order)
                elif order < 2.0:
                    d = sgn * np.abs(x) ** (order - 1.0) * share
                else:
                    d = x * np.abs(x) ** (order - 2.0) * share
                acc(g, base + j * inner, d, ma)


NORM = define_kernel("norm", "LinalgVectorNormBackward0", norm_forward, norm_backward, saved="ao",
                     operands=1, samples=cases(("norm", lambda tj, x: x.norm(), [(3, 4)], anywhere),
                                   ("norm_dim", lambda tj, x: tj.norm(x, dim=1), [(3, 4)], anywhere),
                                   ("norm_p1", lambda tj, x: x.norm(p=1), [(5,)], away_from_zero),
                                   ("norm_p3", lambda tj, x: x.norm(p=3, dim=0), [(3, 2)], positive),
                                   ("norm_p0.5", lambda tj, x: x.norm(p=0.5), [(4,)], positive),
                                   ("norm_p1.5", lambda tj, x: x.norm(p=1.5, dim=1), [(2, 3)], away_from_zero),
                                   ("norm_inf", lambda tj, x: x.norm(p=float("inf"), dim=1), [(3, 4)], positive)))


@helper
def slice_mean(v, base, length, inner, zero):
    """Mean of ``length`` elements ``inner`` apart, summed as differences from the first:
    exact for equal elements (a plain sum over n rounds, so a spread of equal values would
    not be zero, nor std's gradient there)."""
    if length == 0:
        return zero / zero
    first = v[base]
    s = zero
    for j in range(length):
        s += v[base + j * inner] - first
    return first + s / length


@kernel
def var_forward(v, out, a, b, p, q, ints, floats):
    # floats[q]: the correction; floats[q + 1]: 1 when reduced over everything with no dim
    # given, + 2 for std.  As PyTorch: the sum of squares over max(0, n - correction).
    outer = ints[p]
    length = ints[p + 1]
    inner = ints[p + 2]
    dof = length - floats[q]
    take_sqrt = floats[q + 1] >= 2.0
    zero = floats[0]
    for o in range(outer):
        for k in range(inner):
            base = a + o * length * inner + k
            mean = slice_mean(v, base, length, inner, zero)
            s = zero
            for j in range(length):
                d = v[base + j * inner] - mean
                s += d * d
            r = s / (dof if dof > 0.0 else zero)
            v[out + o * inner + k] = np.sqrt(r) if take_sqrt else r


@kernel
def var_backward(v, g, flags, out, a, b, ma, mb, p, q, ints, floats):
    # PyTorch's rules: var's gradient is 2 / (n - correction) * g * (x - mean), but for a
    # reduction over everything with no dim given and n - correction <= 0 it is g times
    # NaN where x equals the mean, inf elsewhere.  std's: g / (2 std) (0 where std is 0)
    # through var's.
    if ma == 0:
        return
    outer = ints[p]
    length = ints[p + 1]
    inner = ints[p + 2]
    dof = length - floats[q]
    mode = floats[q + 1]
    whole = mode == 1.0 or mode == 3.0
    take_sqrt = mode >= 2.0
    zero = floats[0]
    for o in range(outer):
        for k in range(inner):
            base = a + o * length * inner + k
            y = v[out + o * inner + k]
            gy = g[out + o * inner + k]
            if take_sqrt:
                gy = zero if y == 0.0 else gy / (y * 2.0)
            mean = slice_mean(v, base, length, inner, zero)
            for j in range(length):
                x = v[base + j * inner]
                if whole and dof <= 0.0:
                    d = gy * (np.nan if x == mean else np.inf)
                else:
                    d = 2.0 / dof * gy * (x - mean)
                acc(g, base + j * inner, d, ma)


# torch's VarBackward0 keeps self only, StdBackward0 its result too (the kernel reads it for std)
VAR = define_kernel("var", "VarBackward0", var_forward, var_backward, saved="a", operands=1,
                    samples=cases(("var", lambda tj, x: x.var(), [(3, 4)], anywhere),
                                  ("var_dim", lambda tj, x: tj.var(x, 1, keepdim=True), [(3, 4)], anywhere),
                                  ("var_dims_c0", lambda tj, x: x.var((0, 2), correction=0), [(2, 3, 4)], anywhere)))
STD = same_kernels("std", "StdBackward0", VAR, saved="ao",
                   samples=cases(("std", lambda tj, x: x.std(), [(3, 4)], anywhere),
                                 ("std_dim", lambda tj, x: tj.std(x, 0), [(3, 4)], anywhere),
                                 ("std_unbiased0", lambda tj, x: x.std(-1, unbiased=False), [(2, 3, 4)], anywhere)))


# ---- front ends ---------------------------------------------------------------------------
import warnings  # noqa: E402
from collections import namedtuple as _namedtuple  # noqa: E402

from tapejit.api import export  # noqa: E402
from tapejit.recording import record, float_input, cast as _cast, on_tape, eager  # noqa: E402
from tapejit.shapes import reduced_dims, reduced_shape, sum_layout, axis_layout, numel as _numel  # noqa: E402
from tapejit.tape import state as _state, current as _current  # noqa: E402
from tapejit.tensor import _concrete  # noqa: E402
from tapejit import dtypes as _dtypes  # noqa: E402
from tapejit.dtypes import as_dtype as _as_dtype  # noqa: E402
from tapejit.dtypes import SCALAR_TYPE_NAMES as _SCALAR_TYPE_NAMES  # noqa: E402

AMIN = same_kernels("amin", "AminBackward0", AMAX,
                    samples=cases(("amin", lambda tj, x: x.amin(0, keepdim=True), [(3, 4)], distinct),
                                  ("amin12", lambda tj, x: tj.amin(x, (1, 2)), [(2, 3, 4)], distinct)))
MIN_ALL = same_kernels("min_all", "MinBackward1", AMAX,
                       samples=cases(("min", lambda tj, x: tj.min(x), [(5,)], distinct),
                                     ("min2d", lambda tj, x: x.min(), [(3, 4)], distinct)))
return_types = _namedtuple("return_types", ["values", "indices"])


def _sum_like(op, x, dim, keepdim, scale_by_count, dtype=None):
    if dim is None and dtype is None and not keepdim and x._rg and _state.grad and x._dtype.is_floating_point:
        # The common loss reduction, recorded without building a layout: all elements in
        # order into one output is the 1-D layout [ndim 1, one output, n elements, stride 0].
        n = x._numel
        tape = _state.tape or _current()
        p = tape.add_ints((1, 1, n, 0))
        q = tape.add_floats((1.0 / n if n else float("nan")) if scale_by_count else 1.0)
        return record(op, (x,), (), x._dtype, p, q)
    if dtype is not None:
        x = x.to(_as_dtype(dtype, "mean" if scale_by_count else "sum"))
    dims = reduced_dims(dim, len(x._shape), op.name)
    shape = reduced_shape(x._shape, dims, keepdim)
    if not x._dtype.is_floating_point:
        if scale_by_count:
            raise RuntimeError(
                f"mean(): could not infer output dtype. Input dtype must be either a floating point or "
                f"complex dtype. Got: {_SCALAR_TYPE_NAMES[x._dtype.name]}")
        # torch sums bool and every integer dtype as int64 (or the dtype asked for), wrapping past its range
        total = x._value().sum(axis=dims, keepdims=keepdim, dtype=np.int64)
        return _concrete(np.asarray(total if dtype is None else total.astype(x._dtype.np)))
    if not on_tape(x):
        return eager(_sum_like, op, x, dim, keepdim, scale_by_count)
    count = _numel([x._shape[d] for d in dims]) if x._shape else 1
    scale = (1.0 / count if count else float("nan")) if scale_by_count else 1.0   # torch: mean of nothing is nan
    tape = _state.tape or _current()
    p = tape.add_ints(sum_layout(x._shape, dims))
    q = tape.add_floats(scale)
    return record(op, (x,), shape, x._dtype, p, q)


@export(method=True)
def sum(input, dim=None, keepdim=False, dtype=None):
    op = SUM if dim is None else SUM_DIM
    return _sum_like(op, input, dim, keepdim, False, dtype)


@export(method=True)
def mean(input, dim=None, keepdim=False, dtype=None):
    op = MEAN if dim is None else MEAN_DIM
    return _sum_like(op, input, dim, keepdim, True, dtype)


def _along(op, x, dim, keepdim, q_value=None, q_flag=0.0, identity=False):
    """Record an (outer, length, inner) reduction of ``x`` over ``dim``, with the static
    floats ``q_value``, ``q_flag`` at ``floats[q]``.  A reduction with an ``identity``
    (prod's 1, logsumexp's -inf, ...) may reduce over nothing; the others refuse, as torch."""
    x = float_input(x)
    if not on_tape(x):
        return eager(_along, op, x, dim, keepdim, q_value, q_flag, identity)
    dims = reduced_dims(dim, len(x._shape), op.name)
    shape = reduced_shape(x._shape, dims, keepdim)
    if x._numel == 0 and not identity:
        empty = [d for d in dims if x._shape[d] == 0]
        if dim is None and dims:
            raise RuntimeError(f"{op.name}(): Expected reduction dim to be specified for input.numel() == 0. "
                               "Specify the reduction dim with the 'dim' argument.")
        if empty:
            raise IndexError(f"{op.name}(): Expected reduction dim {empty[0]} to have non-zero size "
                             f"(input of shape {list(x._shape)}).")
    layout = axis_layout(x._shape, dims)
    if layout is None:
        from tapejit.ops.views import permute
        kept = [d for d in range(len(x._shape)) if d not in dims]
        x = permute(x, kept + list(dims))
        layout = axis_layout(x._shape, tuple(range(len(kept), len(x._shape))))
    tape = _state.tape or _current()
    p = tape.add_ints(layout)
    q = tape.add_floats(q_value, q_flag) if q_value is not None else 0
    return record(op, (x,), shape, x._dtype, p, q)


@export(method=True)
def amax(input, dim=(), keepdim=False):
    if not input._dtype.is_floating_point:
        return _concrete(np.asarray(input._value().max(axis=dim if dim != () else None, keepdims=keepdim)))
    return _along(AMAX, input, None if dim == () else dim, keepdim, 1.0)


@export(method=True)
def amin(input, dim=(), keepdim=False):
    if not input._dtype.is_floating_point:
        return _concrete(np.asarray(input._value().min(axis=dim if dim != () else None, keepdims=keepdim)))
    return _along(AMIN, input, None if dim == () else dim, keepdim, -1.0)


def _extreme(input, dim, keepdim, largest):
    if dim is None:
        if not input._dtype.is_floating_point:
            v = input._value()
            return _concrete(np.asarray(v.max() if largest else v.min()))
        if input._numel == 0:
            raise RuntimeError(
                f"{'max' if largest else 'min'}(): Expected reduction dim to be specified for input.numel() == 0. "
                "Specify the reduction dim with the 'dim' argument.")
        return _along(MAX_ALL if largest else MIN_ALL, input, None, False, 1.0 if largest else -1.0, 1.0)
    # With a dim: values and indices, the gradient going to the chosen index (as torch).
    from tapejit.shapes import wrap_dim
    d = wrap_dim(dim, len(input._shape), "max" if largest else "min")
    if not input._shape:
        return return_types(input * 1, _concrete(np.zeros((), np.int64)))
    if input._shape[d] == 0:
        name = "max" if largest else "min"
        raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size "
                         f"(input of shape {list(input._shape)})")
    v = input._value()
    idx = np.argmax(v, axis=d) if largest else np.argmin(v, axis=d)
    if v.dtype.kind == "f":
        nan_rows = np.isnan(v).any(axis=d)
        if nan_rows.any():  # torch picks the NaN, NumPy's argmax/argmin need telling
            idx = np.where(nan_rows, np.argmax(np.isnan(v), axis=d), idx)
    idx_kept = np.expand_dims(np.asarray(idx, np.int64), d)
    values = _taken(MAX_DIM if largest else MIN_DIM, input, d, idx_kept)
    if keepdim:
        return return_types(values, _concrete(idx_kept))
    return return_types(values.squeeze(d), _concrete(idx_kept.squeeze(d)))


@export(method=True)
def max(input, dim=None, keepdim=False, *, other=None):
    from tapejit.tensor import Tensor
    if isinstance(dim, Tensor):
        from tapejit.ops.binary import maximum
        return maximum(input, dim)
    return _extreme(input, dim, keepdim, True)


@export(method=True)
def min(input, dim=None, keepdim=False):
    from tapejit.tensor import Tensor
    if isinstance(dim, Tensor):
        from tapejit.ops.binary import minimum
        return minimum(input, dim)
    return _extreme(input, dim, keepdim, False)


# max/min along a dim, sort and topk: the chosen elements, by the gather kernels, under
# torch's grad_fn names; the records keep no operand value (see _taken)
MAX_DIM = same_kernels("max_dim", "MaxBackward0", INDEX, saves=False,
                       samples=cases(("max_dim", lambda tj, x: tj.max(x, 1, keepdim=True)[0], [(3, 4)], distinct)))
MIN_DIM = same_kernels("min_dim", "MinBackward0", INDEX, saves=False,
                       samples=cases(("min_dim", lambda tj, x: x.min(0, keepdim=True).values, [(3, 4)], distinct)))
SORT_VALUES = same_kernels("sort_values", "SortBackward0", INDEX, saves=False,
                           samples=cases(("sort", lambda tj, x: tj.sort(x, 1)[0], [(3, 4)], distinct)))
TOPK_VALUES = same_kernels("topk_values", "TopkBackward0", INDEX, saves=False,
                           samples=cases(("topk", lambda tj, x: x.topk(2, 0).values, [(3, 4)], distinct)))


def _order(input, dim, descending, op):
    """Indices sorting ``input`` along ``dim``, as torch: ties keep their order, NaN counts
    as the largest value.  Returns ``(dim, indices)``."""
    from tapejit.shapes import wrap_dim
    v = input._value()
    if not input._shape:
        return 0, np.zeros((), np.int64)
    d = wrap_dim(dim, len(input._shape), op)
    if not descending:
        return d, np.argsort(v, axis=d, kind="stable")
    # Sorting the reversed values ascending and reversing back keeps ties in their first
    # order (and NaN first); the positions then count from the end.
    last = input._shape[d] - 1
    return d, last - np.flip(np.argsort(np.flip(v, d), axis=d, kind="stable"), d)


def _taken(op, input, d, idx):
    """``input``'s elements at ``idx`` along ``d``, recorded as ``op`` (the gather kernels,
    keeping no operand value: torch's max/min/sort/topk save only the indices, so an
    in-place change of the input after them leaves their gradient valid)."""
    from tapejit.ops.indexing import _gather
    from tapejit.ops.views import _plain
    if not input._shape:
        return input * 1 if input._dtype.is_floating_point else _concrete(input._value().copy())
    idx = np.asarray(idx, np.int64)
    positions = np.take_along_axis(np.arange(input._numel, dtype=np.int64).reshape(input._shape), idx, axis=d)
    if _plain(input):
        return _concrete(input._value().reshape(-1)[positions])
    return _gather(op, input, positions)


@export(method=True)
def sort(input, dim=-1, descending=False, stable=False):
    d, idx = _order(input, dim, descending, "sort")
    return return_types(_taken(SORT_VALUES, input, d, idx), _concrete(np.array(idx, np.int64)))


@export(method=True)
def argsort(input, dim=-1, descending=False, stable=False):
    return _concrete(np.array(_order(input, dim, descending, "argsort")[1], np.int64))


@export(method=True)
def topk(input, k, dim=-1, largest=True, sorted=True):
    """The ``k`` largest (or smallest) elements along ``dim``, always in sorted order."""
    d, idx = _order(input, dim, largest, "topk")
    size = input._shape[d] if input._shape else 1
    if not 0 <= k <= size:
        raise RuntimeError(f"topk(): selected index k out of range (k={k}, size {size} along dim {dim} "
                           f"of a tensor of shape {list(input._shape)})")
    idx = np.take(idx, np.arange(k), axis=d) if input._shape else idx
    return return_types(_taken(TOPK_VALUES, input, d, idx), _concrete(np.array(idx, np.int64)))


def _check_arg_empty(name, input, dim):
    """torch's IndexError for argmax/argmin over nothing (NumPy's is a ValueError)."""
    if dim is None:
        if input._numel == 0:
            raise IndexError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0.")
    elif input._shape and input._shape[dim % len(input._shape)] == 0:
        raise IndexError(f"{name}(): Expected reduction dim {dim} to have non-zero size.")


@export(method=True)
def argmax(input, dim=None, keepdim=False):
    v = input._value()
    _check_arg_empty("argmax", input, dim)
    if dim is None:
        return _concrete(np.asarray(np.argmax(v), np.int64))
    return _concrete(np.asarray(np.argmax(v, axis=dim, keepdims=keepdim), np.int64))


@export(method=True)
def argmin(input, dim=None, keepdim=False):
    v = input._value()
    _check_arg_empty("argmin", input, dim)
    if dim is None:
        return _concrete(np.asarray(np.argmin(v), np.int64))
    return _concrete(np.asarray(np.argmin(v, axis=dim, keepdims=keepdim), np.int64))


@export(method=True)
def prod(input, dim=None, keepdim=False, dtype=None):
    if dtype is not None:
        input = input.to(_as_dtype(dtype, "prod"))
    if not input._dtype.is_floating_point:   # int64, as torch, whatever the integer dtype
        return _concrete(np.asarray(input._value().prod(axis=dim, keepdims=keepdim, dtype=np.int64)))
    kind = 2.0 if not input._shape else 1.0 if dim is None else 0.0   # see prod_backward
    return _along(PROD if dim is None else PROD_DIM, input, dim, keepdim, kind, identity=True)


@export(method=True)
def logsumexp(input, dim, keepdim=False):
    return _along(LOGSUMEXP, input, dim, keepdim, identity=True)


@export(method=True)
def norm(input, p="fro", dim=None, keepdim=False, dtype=None):
    if dtype is not None:   # torch computes the norm in dtype, the input cast first
        input = input.to(_as_dtype(dtype, "norm"))
    if p == "fro" or p is None:
        p = 2.0
    if p == "inf":
        p = float("inf")
    if not isinstance(p, (int, float)) or not p > 0:
        raise RuntimeError(f"norm(): tapejit supports p > 0, 'fro' and inf, got p={p!r}")
    if p == float("inf") and input._numel == 0 and 0 in [
            input._shape[d] for d in reduced_dims(dim, len(input._shape), "norm")]:
        raise RuntimeError("linalg.vector_norm cannot compute the inf norm on an empty tensor because the "
                           f"operation does not have an identity (input of shape {list(input._shape)})")
    return _along(NORM, input, dim, keepdim, float(p), identity=p != float("inf"))


def _moments(input, dim, correction, keepdim, take_sqrt):
    op = STD if take_sqrt else VAR
    x = float_input(input)
    dims = reduced_dims(dim, len(x._shape), op.name)
    n = _numel([x._shape[d] for d in dims]) if x._shape else 1
    if n - correction <= 0:
        warnings.warn(f"{op.name}(): degrees of freedom is <= 0. Correction should be strictly less than the "
                      f"reduction factor (input numel divided by output numel).", UserWarning, stacklevel=3)
    whole = dim is None or not x._shape   # PyTorch's gradient differs there when n <= correction
    return _along(op, x, dims if x._shape else None, keepdim, float(correction),
                  (1.0 if whole else 0.0) + (2.0 if take_sqrt else 0.0), identity=True)


def _correction(unbiased, correction):
    if correction is not None:
        return correction
    return 1 if unbiased in (None, True) else 0


@export(method=True)
def var(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if isinstance(dim, bool):
        unbiased, dim = dim, None
    return _moments(input, dim, _correction(unbiased, correction), keepdim, False)


@export(method=True)
def std(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if isinstance(dim, bool):
        unbiased, dim = dim, None
    return _moments(input, dim, _correction(unbiased, correction), keepdim, True)


@export(method=True)
def all(input, dim=None, keepdim=False):
    v = input._value()
    return _concrete(np.asarray(v.all() if dim is None else v.all(axis=dim, keepdims=keepdim)))


@export(method=True)
def any(input, dim=None, keepdim=False):
    v = input._value()
    return _concrete(np.asarray(v.any() if dim is None else v.any(axis=dim, keepdims=keepdim)))


del _dtypes, _cast


# ---- derivative formulas (create_graph) ----------------------------------------------------
# One per op, applied by create_graph passes (tapejit/autograd/higher.py); plain Python,
# not compiled: see tapejit/ops/_formulas.py.  Kept last so define_ edits merge cleanly.

from tapejit.api import front_ends as tj  # noqa: E402  (tj's functions, read at call time)
from tapejit.ops import _formulas as _f  # noqa: E402
from tapejit.ops._formulas import derivative  # noqa: E402
from tapejit.ops import movement as _mov  # noqa: E402
from tapejit.ops.views import strided_view  # noqa: E402
from tapejit.tensor import _concrete  # noqa: E402


@derivative(sum_forward)
def _d_sum(c):
    if c.p < 0:   # a chunk of a full sum (tapejit/executor.py): ~p elements into one
        return (_f.gather(c.g, np.zeros(~c.p, np.int64)), None)
    ints = c.tape.ints
    p = c.p
    nd = int(ints[p])
    sizes = [int(s) for s in ints[p + 2:p + 2 + nd]]
    ostrides = ints[p + 2 + nd:p + 2 + 2 * nd]
    scale = c.float(c.q)
    g = c.g
    if g._tape is None:
        # A constant g (a loss's seed): scaled, then broadcast by NumPy, without an expand
        # view's bookkeeping (~35 us); the copy is the tensor the expand would have made.
        v = g._value().reshape(-1)
        if scale != 1.0:
            v = (v.astype(np.float64) * scale).astype(v.dtype)
        return (_concrete(np.lib.stride_tricks.as_strided(
            v, shape=sizes, strides=[int(s) * v.itemsize for s in ostrides]).copy()), None)
    # input element idx reads g at sum(idx * ostrides): a strided view of g (an expand)
    g = strided_view(_mov.EXPAND, g, tuple(sizes), tuple(int(s) for s in ostrides), 0)
    return (g * scale if scale != 1.0 else g, None)


def _d_along_axis(c):
    """An (outer, length, inner) reduction: its input, result and gradient as 3-D tensors."""
    outer, length, inner = (c.int(c.p + i) for i in range(3))
    x = c.x(outer * length * inner, (outer, length, inner))
    y = c.out((outer, 1, inner))
    return x, y, _f.shaped(c.g, (outer, 1, inner))


@derivative(prod_forward)
def _d_prod(c):
    if c.float(c.q) == 2.0:   # a 0-d input: its gradient is g
        return (c.g, None)
    x, y, g = _d_along_axis(c)
    if not np.any(_f.value(x) == 0.0):
        return (g * y / x, None)
    # With zeros, each element's gradient is g times the product of the others: the
    # slice repeated once per element, that element replaced by 1, and multiplied out.
    outer, length, inner = x.shape
    repeated = x.unsqueeze(1).expand(outer, length, length, inner)
    eye = np.eye(length, dtype=bool).reshape(1, length, length, 1)
    others = _f.where(np.broadcast_to(eye, (outer, length, length, inner)), 1.0, repeated).prod(2)
    return (g * others, None)


@derivative(LOGSUMEXP)
def _d_logsumexp(c):
    x, y, g = _d_along_axis(c)
    if not np.all(np.isfinite(_f.value(y))):
        raise _f.refuse(c, "an infinite result")
    return (g * tj.exp(x - y), None)


@derivative(amax_forward)
def _d_amax(c):
    """The gradient split evenly between the elements equal to the extreme (a constant
    weight per element), as the rule does."""
    x, y, g = _d_along_axis(c)
    xv, yv = _f.value(x), _f.value(y)
    if np.isnan(xv).any():
        raise _f.refuse(c, "a NaN input")
    ties = xv == yv
    weights = ties / ties.sum(axis=1, keepdims=True)
    return (g * _concrete(weights.astype(xv.dtype)), None)


@derivative(var_forward)
def _d_var(c):
    """var: 2 / (n - correction) * g * (x - mean); std: var's with g / (2 std), 0 where
    std is 0 (the rule's cases; the NaN/inf one of a reduction over too few raises)."""
    x, y, g = _d_along_axis(c)
    dof = x.shape[1] - c.float(c.q)
    if dof <= 0.0:
        raise _f.refuse(c, "n - correction <= 0")
    if c.float(c.q + 1) >= 2.0:
        at_zero = _f.value(y) == 0.0
        safe = _f.where(at_zero, 1.0, y) if at_zero.any() else y
        g = _f.where(at_zero, 0.0, g / (safe * 2.0)) if at_zero.any() else g / (y * 2.0)
    return (g * (2.0 / dof) * (x - x.mean(1, keepdim=True)), None)


@derivative(NORM)
def _d_norm(c):
    """The rule's cases: sgn(x) g for the 1-norm, g x / |x| for the 2-norm, g sgn(x)
    |x|^(p-1) |x|_p^(1-p) for the others, zero where the norm is zero (and, p < 1, where
    x is); the inf-norm's g split between the elements equal to it (constant weights)."""
    order = c.float(c.q)
    x, y, g = _d_along_axis(c)
    xv, yv = _f.value(x), _f.value(y)
    if np.isnan(xv).any():
        raise _f.refuse(c, "a NaN input")
    if order == 1.0:
        return (g * tj.sign(x), None)
    at_zero = np.broadcast_to(yv == 0.0, xv.shape)
    safe_y = _f.where(yv == 0.0, 1.0, y) if at_zero.any() else y
    if np.isinf(order):
        hits = np.abs(xv) == yv
        weights = hits / hits.sum(axis=1, keepdims=True)
        return (g * tj.sign(x) * _concrete(weights.astype(xv.dtype)), None)
    if order == 2.0:
        d = g * x / safe_y
    else:
        masked = at_zero | (xv == 0.0) if order < 1.0 else at_zero
        ax = tj.abs(x)
        if order < 1.0 and masked.any():
            ax = _f.where(xv == 0.0, 1.0, ax)
        d = g * tj.sign(x) * ax ** (order - 1.0) * safe_y ** (1.0 - order)
        at_zero = masked
    return (_f.where(at_zero, 0.0, d) if at_zero.any() else d, None)
