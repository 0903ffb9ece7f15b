"""Ops that move elements by index lists the front end computes: placement into a result
(the scatter family, diag_embed, tril/triu), and torch's names for gathers (flip, roll,
rot90, diagonal, take, unfold) and for the sum of a diagonal (trace).

The front ends live in ``tapejit/tensor_math.py``, next to the other tensor math built
from existing ops; this module holds only what the sweeps compile.

``place``: ``out = base`` (operand a) or ``fill`` everywhere (no base), then for each
pair ``k``, ``out[dest[k]]`` is set to (mode 0), increased by (mode 1) the source's element
``src[k]``, or set to ``fill`` (mode 2, no source).  The source is operand b with a base,
operand a without.  Its gradient is the transpose: the base gets ``g`` (zero where mode 0
or 2 overwrote it), the source element ``src[k]`` gets ``g[dest[k]]`` (a gather, which is
why scatter_add cannot be composed from gather and index_select).
Layout at ``ints[p]``: ``[mode, has_base, n pairs, out size, source size, dest * n, src * n]``,
``fill`` at ``floats[q]``.
"""
import numpy as np

from tapejit._jit import kernel
from tapejit.ops._kernel_helpers import acc, zero_if_first
from tapejit.ops.movement import INDEX
from tapejit.ops.reduce import SUM
from tapejit.registry import define_kernel, same_kernels
from tapejit.samples import cases, anywhere


@kernel
def place_forward(v, out, a, b, p, q, ints, floats):
    mode = ints[p]
    has_base = ints[p + 1]
    n = ints[p + 2]
    size = ints[p + 3]
    src = b if has_base != 0 else a
    fill = floats[q]
    if has_base != 0:
        for i in range(size):
            v[out + i] = v[a + i]
    else:
        for i in range(size):
            v[out + i] = fill
    dest = p + 5
    at_src = p + 5 + n
    for k in range(n):
        d = out + ints[dest + k]
        if mode == 0:
            v[d] = v[src + ints[at_src + k]]
        elif mode == 1:
            v[d] += v[src + ints[at_src + k]]
        else:
            v[d] = fill


@kernel
def place_backward(v, g, flags, out, a, b, ma, mb, p, q, ints, floats):
    mode = ints[p]
    has_base = ints[p + 1]
    n = ints[p + 2]
    size = ints[p + 3]
    dest = p + 5
    at_src = p + 5 + n
    zero = floats[0]
    if has_base != 0 and ma != 0:
        if mode == 1:
            for i in range(size):
                acc(g, a + i, g[out + i], ma)
        else:
            kept = np.ones(size, np.bool_)
            for k in range(n):
                kept[ints[dest + k]] = False
            for i in range(size):
                acc(g, a + i, g[out + i] if kept[i] else zero, ma)
    src = b if has_base != 0 else a
    ms = mb if has_base != 0 else ma
    if mode == 2 or ms == 0:
        return
    zero_if_first(g, src, ints[p + 4], ms)
    for k in range(n):
        g[src + ints[at_src + k]] += g[out + ints[dest + k]]


def _index(tj, values):
    """An index tensor of the module under test (tapejit's, or torch's for the cross-check)."""
    return tj.tensor(values)


# The samples' index has src's shape: with a smaller index, torch's backward refuses
# ("ScatterBackward0 returned an invalid gradient"); tests/test_tensor_math.py checks that
# case against finite differences.
PLACE = define_kernel(
    "scatter", "ScatterBackward0", place_forward, place_backward, saves=False, group="index",
    samples=cases(("scatter", lambda tj, x, s: x.scatter(1, _index(tj, [[0, 2], [1, 0], [3, 1]]), s),
                   [(3, 4), (3, 2)], anywhere),
                  ("scatter_dim0", lambda tj, x, s: tj.scatter(x, 0, _index(tj, [[2, 0, 1]]), s),
                   [(3, 3), (1, 3)], anywhere)))
SCATTER_VALUE = same_kernels(
    "scatter_value", "ScatterBackward1", PLACE,
    samples=cases(("scatter_value", lambda tj, x: x.scatter(-1, _index(tj, [[1], [0]]), 2.5), [(2, 3)], anywhere)))
SCATTER_ADD = same_kernels(
    "scatter_add", "ScatterAddBackward0", PLACE,
    samples=cases(("scatter_add", lambda tj, x, s: x.scatter_add(0, _index(tj, [[0, 1, 0], [0, 0, 2]]), s),
                   [(3, 3), (2, 3)], anywhere),
                  ("scatter_add_1d", lambda tj, x, s: tj.scatter_add(x, 0, _index(tj, [1, 1, 3]), s),
                   [(4,), (3,)], anywhere)))
INDEX_ADD = same_kernels(
    "index_add", "IndexAddBackward0", PLACE,
    samples=cases(("index_add", lambda tj, x, s: x.index_add(0, _index(tj, [2, 0, 2]), s), [(3, 4), (3, 4)], anywhere),
                  ("index_add_alpha", lambda tj, x, s: tj.index_add(x, 1, _index(tj, [1, 1]), s, alpha=-2.0),
                   [(2, 3), (2, 2)], anywhere)))
INDEX_COPY = same_kernels(
    "index_copy", "IndexCopyBackward0", PLACE,
    samples=cases(("index_copy", lambda tj, x, s: x.index_copy(1, _index(tj, [2, 0]), s), [(3, 4), (3, 2)], anywhere)))
INDEX_FILL = same_kernels(
    "index_fill", "IndexFillBackward0", PLACE,
    samples=cases(("index_fill", lambda tj, x: x.index_fill(0, _index(tj, [1]), -1.0), [(3, 2)], anywhere)))
DIAG_EMBED = same_kernels(
    "diag_embed", "DiagEmbedBackward0", PLACE,
    samples=cases(("diag_embed", lambda tj, x: tj.diag_embed(x), [(2, 3)], anywhere),
                  ("diag_embed_offset", lambda tj, x: tj.diag_embed(x, offset=-1, dim1=0, dim2=2), [(2, 3)], anywhere),
                  ("diag_vector", lambda tj, x: tj.diag(x, 1), [(3,)], anywhere)))
TRIL = same_kernels(
    "tril", "TrilBackward0", PLACE,
    samples=cases(("tril", lambda tj, x: x.tril(), [(3, 4)], anywhere),
                  ("tril_batch", lambda tj, x: tj.tril(x, -1), [(2, 3, 3)], anywhere)))
TRIU = same_kernels(
    "triu", "TriuBackward0", PLACE,
    samples=cases(("triu", lambda tj, x: x.triu(1), [(4, 3)], anywhere),
                  ("triu_batch", lambda tj, x: tj.triu(x), [(2, 3, 3)], anywhere)))

# Gathers: the element positions are computed in Python; the gradient scatters back.
FLIP = same_kernels(
    "flip", "FlipBackward0", INDEX,
    samples=cases(("flip", lambda tj, x: x.flip(0), [(3, 4)], anywhere),
                  ("flip_dims", lambda tj, x: tj.flip(x, (0, -1)), [(2, 3, 2)], anywhere)))
ROLL = same_kernels(
    "roll", "RollBackward0", INDEX,
    samples=cases(("roll", lambda tj, x: x.roll(1, 0), [(3, 4)], anywhere),
                  ("roll_flat", lambda tj, x: tj.roll(x, -2), [(2, 3)], anywhere),
                  ("roll_dims", lambda tj, x: tj.roll(x, (1, 2), (1, -1)), [(2, 3, 4)], anywhere)))
ROT90 = same_kernels(
    "rot90", "Rot90Backward0", INDEX,
    samples=cases(("rot90", lambda tj, x: x.rot90(), [(3, 4)], anywhere),
                  ("rot90_k", lambda tj, x: tj.rot90(x, -3, (1, 2)), [(2, 3, 4)], anywhere)))
DIAGONAL = same_kernels(
    "diagonal", "DiagonalBackward0", INDEX,
    samples=cases(("diagonal", lambda tj, x: x.diagonal(), [(3, 4)], anywhere),
                  ("diagonal_offset", lambda tj, x: tj.diagonal(x, -1, 0, 2), [(3, 2, 4)], anywhere)))
TAKE = same_kernels(
    "take", "TakeBackward0", INDEX,
    samples=cases(("take", lambda tj, x: x.take(_index(tj, [[0, 5], [5, -1]])), [(2, 3)], anywhere)))
UNFOLD = same_kernels(
    "unfold", "UnfoldBackward0", INDEX,
    samples=cases(("unfold", lambda tj, x: x.unfold(1, 2, 1), [(2, 4)], anywhere),
                  ("unfold_step", lambda tj, x: x.unfold(0, 2, 3), [(7,)], anywhere)))
TRACE = same_kernels(
    "trace", "TraceBackward0", SUM,
    samples=cases(("trace", lambda tj, x: x.trace(), [(3, 3)], anywhere),
                  ("trace_rect", lambda tj, x: tj.trace(x), [(2, 4)], anywhere)))


# ---- cumsum, cumprod along one dim: layout [outer, length, inner, kind (0 sum, 1 prod)] ----

@kernel
def cumulative_forward(v, out, a, b, p, q, ints, floats):
    outer = ints[p]
    length = ints[p + 1]
    inner = ints[p + 2]
    prod = ints[p + 3] != 0
    for o in range(outer):
        for k in range(inner):
            base = o * length * inner + k
            r = floats[0] * 0.0 + (1.0 if prod else 0.0)
            for j in range(length):
                i = base + j * inner
                if prod:
                    r *= v[a + i]
                else:
                    r += v[a + i]
                v[out + i] = r


@kernel
def cumulative_backward(v, g, flags, out, a, b, ma, mb, p, q, ints, floats):
    # cumsum: the reversed cumulative sum of g.  cumprod, exact with zeros and no
    # division: dx[j] = prod(x[:j]) * s[j], where s[j] = g[j] + x[j+1] * s[j+1] is the sum
    # over k >= j of g[k] * prod(x[j+1..k]).
    if ma == 0:
        return
    outer = ints[p]
    length = ints[p + 1]
    inner = ints[p + 2]
    prod = ints[p + 3] != 0
    prefix = np.empty(length, v.dtype)
    for o in range(outer):
        for k in range(inner):
            base = o * length * inner + k
            if not prod:
                s = floats[0] * 0.0
                for j in range(length - 1, -1, -1):
                    i = base + j * inner
                    s += g[out + i]
                    acc(g, a + i, s, ma)
                continue
            r = floats[0] * 0.0 + 1.0
            for j in range(length):
                prefix[j] = r
                r *= v[a + base + j * inner]
            s = floats[0] * 0.0
            for j in range(length - 1, -1, -1):
                i = base + j * inner
                if j < length - 1:
                    s *= v[a + i + inner]
                s += g[out + i]
                acc(g, a + i, prefix[j] * s, ma)


CUMPROD = define_kernel(
    "cumprod", "CumprodBackward0", cumulative_forward, cumulative_backward, saved="a", operands=1,
    group="reduce",
    samples=cases(("cumprod", lambda tj, x: x.cumprod(1), [(3, 4)], anywhere),
                  ("cumprod_zero", lambda tj, x: tj.cumprod(x * tj.tensor([1.0, 0.0, 1.0, 0.0], dtype=x.dtype), 0),
                   [(4,)], anywhere),
                  ("cumprod_neg", lambda tj, x: tj.cumprod(x, -2), [(2, 3, 2)], anywhere)))
CUMSUM = same_kernels(
    "cumsum", "CumsumBackward0", CUMPROD, saves=False,
    samples=cases(("cumsum", lambda tj, x: x.cumsum(0), [(3, 4)], anywhere),
                  ("cumsum_neg", lambda tj, x: tj.cumsum(x, -1), [(2, 3, 2)], anywhere),
                  ("cumsum_scalar", lambda tj, x: tj.cumsum(x, 0), [()], anywhere)))


# ---- derivative formulas (create_graph) ----------------------------------------------------
# One per op, applied by create_graph passes (tapejit/autograd/higher.py); plain Python,
# not compiled: see tapejit/ops/_formulas.py.  Kept last so define_ edits merge cleanly.

from tapejit.api import front_ends as tj  # noqa: E402  (tj's functions, read at call time)
from tapejit.ops import _formulas as _f  # noqa: E402
from tapejit.ops._formulas import derivative  # noqa: E402


@derivative(CUMSUM)
def _d_cumsum(c):
    outer, length, inner, kind = (c.int(c.p + i) for i in range(4))
    if kind != 0:
        raise _f.refuse(c, "cumprod")
    g = _f.shaped(c.g, (outer, length, inner))
    return (tj.flip(tj.cumsum(tj.flip(g, (1,)), 1), (1,)), None)


@derivative(CUMPROD)
def _d_cumprod(c):
    """Without zeros: dx_j = (sum over k >= j of g_k y_k) / x_j.  With zeros, exactly and
    without division: dx_j = sum over k >= j of g_k times the cumulative product up to k
    of the slice with x_j replaced by 1 (one such slice per j)."""
    outer, length, inner, kind = (c.int(c.p + i) for i in range(4))
    shape = (outer, length, inner)
    x = c.x(shape=shape)
    g = _f.shaped(c.g, shape)
    if not np.any(_f.value(x) == 0.0):
        gy = g * c.out(shape)
        return (tj.flip(tj.cumsum(tj.flip(gy, (1,)), 1), (1,)) / x, None)
    full = (outer, length, length, inner)   # (., j, k, .)
    eye = np.broadcast_to(np.eye(length, dtype=bool).reshape(1, length, length, 1), full)
    later = np.broadcast_to(np.triu(np.ones((length, length), dtype=bool)).reshape(1, length, length, 1), full)
    others = tj.cumprod(_f.where(eye, 1.0, x.unsqueeze(1).expand(*full)), 2)
    return (_f.where(later, others * g.unsqueeze(1), 0.0).sum(2), None)


@derivative(place_forward)
def _d_place(c):
    ints = c.tape.ints
    p = c.p
    mode, has_base, n, size, src_size = (int(ints[p + i]) for i in range(5))
    dest = ints[p + 5:p + 5 + n].copy()
    src = ints[p + 5 + n:p + 5 + 2 * n].copy()
    result = []
    if has_base and c.wants_a:
        if mode == 1:
            base_grad = c.g
        else:   # the positions written over take no gradient
            written = np.zeros(size, bool)
            written[dest] = True
            base_grad = _f.where(written, 0.0, c.g)
        result.append((c.a, base_grad))
    src_enc = c.b if has_base else c.a
    if mode != 2 and c.wants(src_enc):
        result.append((src_enc, _f.scatter_add(_f.gather(c.g, dest), src, src_size)))
    return result
