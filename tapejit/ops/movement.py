"""Ops that move elements without arithmetic: copies of ranges, strided views, expand,
gathers by index, concatenation, and where; their kernels and op table entries.  The
front ends that record them: ``views.py`` (reshape, permute, expand, ...), ``indexing.py``
(``x[key]``, gather, index_select, where) and ``join.py`` (cat, stack, split, ...).

PyTorch's views become materialised copies here: each result owns its slot, so the
sweep's per-slot adjoints stay simple, and every gradient is the transpose of the copy
(a scatter-add, which sums duplicates and broadcast dimensions).

Static layouts live in the tape's ``ints`` column at index ``p``:
``copy_range``: no ints: b = ~start, p = count, q = source size
``strided``:    [ndim, start, source size, sizes..., strides...]
``gather``:     [n, source size, flat indices...]
``cat``:        [k, outer, (operand, inner) * k]
``where``:      [n, condition 0/1 * n]
"""
import numpy as np

from tapejit._jit import kernel, small_kernel
from tapejit.ops._kernel_helpers import acc, at, claim, decode, zero_if_first
from tapejit.registry import define_kernel, same_kernels
from tapejit.samples import cases, anywhere


# ---- copy_range: a contiguous run of the source (select on dim 0, slices, reshapes) -------

@small_kernel
def copy_range_forward(v, out, a, b, p, q, ints, floats):
    # b = start within the source (recorded as ~start: not an operand), p = count
    start = a + b
    for i in range(p):
        v[at(out + i)] = v[at(start + i)]


@small_kernel
def copy_range_backward(v, g, flags, out, a, b, ma, mb, p, q, ints, floats):
    # q = the source's size, for zeroing the part of its adjoint this copy does not cover
    if ma == 0:
        return
    if ma == 1 and b == 0 and p == q:
        for i in range(p):
            g[at(a + i)] = g[at(out + i)]
        return
    zero_if_first(g, a, q, ma)
    start = a + b
    for i in range(p):
        g[at(start + i)] += g[at(out + i)]



# The same for a batch replayed with rows as the vector axis (tapejit/replay/rows.py): slot
# s of row j sits at s * width + j, so a contiguous range of slots is one of the arena.

@kernel
def copy_range_rows_forward(v, width, out, a, b, p, q, ints, floats):
    start = (a + b) * width
    dst = out * width
    for i in range(p * width):
        v[at(dst + i)] = v[at(start + i)]


@kernel
def copy_range_rows_backward(v, g, width, out, a, b, ma, mb, p, q, ints, floats):
    if ma == 0:
        return
    src = out * width
    if ma == 1 and b == 0 and p == q:
        dst = a * width
        for i in range(p * width):
            g[at(dst + i)] = g[at(src + i)]
        return
    zero_if_first(g, a * width, q * width, ma)
    start = (a + b) * width
    for i in range(p * width):
        g[at(start + i)] += g[at(src + i)]

def _t(tj, x):
    return x


RESHAPE = define_kernel("reshape", "ViewBackward0", copy_range_forward, copy_range_backward, saves=False,
                        operands=1, group="copy", runs="copy",
                        samples=cases(("reshape", lambda tj, x: x.reshape(4, 3), [(3, 4)], anywhere),
                                      ("view", lambda tj, x: x.view(-1), [(3, 4)], anywhere),
                                      ("flatten", lambda tj, x: x.flatten(), [(2, 3, 2)], anywhere)))
UNSQUEEZE = same_kernels("unsqueeze", "UnsqueezeBackward0", RESHAPE,
                         samples=cases(("unsqueeze", lambda tj, x: x.unsqueeze(1), [(3, 4)], anywhere),
                                       ("unsqueeze-1", lambda tj, x: tj.unsqueeze(x, -1), [(3,)], anywhere)))
SQUEEZE = same_kernels("squeeze", "SqueezeBackward0", RESHAPE,
                       samples=cases(("squeeze", lambda tj, x: x.squeeze(), [(3, 1, 4)], anywhere)))
SQUEEZE_DIM = same_kernels("squeeze_dim", "SqueezeBackward1", RESHAPE,
                           samples=cases(("squeeze1", lambda tj, x: x.squeeze(1), [(3, 1, 4)], anywhere)))
CLONE = same_kernels("clone", "CloneBackward0", RESHAPE,
                     samples=cases(("clone", lambda tj, x: x.clone(), [(3, 4)], anywhere)))
SELECT = same_kernels("select", "SelectBackward0", RESHAPE,
                      samples=cases(("select0", lambda tj, x: x[1], [(3, 4)], anywhere),
                                    ("select-1", lambda tj, x: x[-1], [(5,)], anywhere)))
SLICE = same_kernels("slice", "SliceBackward0", RESHAPE,
                     samples=cases(("slice", lambda tj, x: x[1:], [(6,)], anywhere),
                                   ("slice_rows", lambda tj, x: x[:-1], [(3, 4)], anywhere)))
UNBIND = same_kernels("unbind", "UnbindBackward0", RESHAPE,
                      samples=cases(("iter", lambda tj, x: list(x)[1] * list(x)[2], [(3,)], anywhere),
                                    ("unbind", lambda tj, x: tj.unbind(x, 0)[0], [(2, 3)], anywhere)))


# ---- strided: any view expressible by sizes and strides of the source ---------------------

@kernel
def strided_forward(v, out, a, b, p, q, ints, floats):
    nd = ints[p]
    base = a + ints[p + 1]
    sizes = ints[p + 3:p + 3 + nd]
    strides = ints[p + 3 + nd:p + 3 + 2 * nd]
    inner = sizes[nd - 1]
    step = strides[nd - 1]
    outer = q // inner if inner > 0 else 0
    idx = np.zeros(nd, np.int64)
    pos = base
    o = out
    for _ in range(outer):
        for j in range(inner):
            v[o + j] = v[pos + j * step]
        o += inner
        d = nd - 2
        while d >= 0:
            idx[d] += 1
            pos += strides[d]
            if idx[d] < sizes[d]:
                break
            pos -= strides[d] * sizes[d]
            idx[d] = 0
            d -= 1


@kernel
def strided_backward(v, g, flags, out, a, b, ma, mb, p, q, ints, floats):
    if ma == 0:
        return
    nd = ints[p]
    base = a + ints[p + 1]
    zero_if_first(g, a, ints[p + 2], ma)
    sizes = ints[p + 3:p + 3 + nd]
    strides = ints[p + 3 + nd:p + 3 + 2 * nd]
    inner = sizes[nd - 1]
    step = strides[nd - 1]
    outer = q // inner if inner > 0 else 0
    idx = np.zeros(nd, np.int64)
    pos = base
    o = out
    summed = False   # an expand: each source element sums many terms, in float64 (float32's
    for k in range(nd):   # running sum over 10^5 terms drifts by 1e-5 relative; torch's does not)
        if strides[k] == 0 and sizes[k] > 1:
            summed = True
    if summed:
        size = ints[p + 2]
        total = np.zeros(size, np.float64)
        for _ in range(outer):
            for j in range(inner):
                total[pos - a + j * step] += g[o + j]
            o += inner
            d = nd - 2
            while d >= 0:
                idx[d] += 1
                pos += strides[d]
                if idx[d] < sizes[d]:
                    break
                pos -= strides[d] * sizes[d]
                idx[d] = 0
                d -= 1
        for i in range(size):
            g[a + i] += total[i]
        return
    for _ in range(outer):
        for j in range(inner):
            g[pos + j * step] += g[o + j]
        o += inner
        d = nd - 2
        while d >= 0:
            idx[d] += 1
            pos += strides[d]
            if idx[d] < sizes[d]:
                break
            pos -= strides[d] * sizes[d]
            idx[d] = 0
            d -= 1


PERMUTE = define_kernel("permute", "PermuteBackward0", strided_forward, strided_backward, saves=False,
                        operands=1,
                        samples=cases(("permute", lambda tj, x: x.permute(2, 0, 1), [(2, 3, 4)], anywhere),
                                      ("T", lambda tj, x: x.T, [(3, 4)], anywhere)))
TRANSPOSE = same_kernels("transpose", "TransposeBackward0", PERMUTE,
                         samples=cases(("transpose", lambda tj, x: x.transpose(0, 2), [(2, 3, 4)], anywhere),
                                       ("transpose01", lambda tj, x: tj.transpose(x, 0, 1), [(3, 4)], anywhere)))
TRANSPOSE_2D = same_kernels("t", "TBackward0", PERMUTE,
                            samples=cases(("t", lambda tj, x: x.t(), [(3, 4)], anywhere),
                                          ("t_fn", lambda tj, x: tj.t(x), [(2, 3)], anywhere)))
EXPAND = same_kernels("expand", "ExpandBackward0", PERMUTE,
                      samples=cases(("expand", lambda tj, x: x.expand(3, 4), [(1, 4)], anywhere),
                                    ("expand_new", lambda tj, x: x.expand(2, 3, 4), [(3, 1)], anywhere),
                                    ("broadcast_to", lambda tj, x: tj.broadcast_to(x, (2, 4)), [()], anywhere)))
STRIDED_SLICE = same_kernels("strided_slice", "SliceBackward0", PERMUTE,
                             samples=cases(("step", lambda tj, x: x[::2], [(7,)], anywhere),
                                           ("inner", lambda tj, x: x[:, 1:3], [(3, 4)], anywhere),
                                           ("mixed", lambda tj, x: x[1, ::-1], [(3, 4)], anywhere),
                                           ("ellipsis", lambda tj, x: x[..., 0, None], [(2, 3, 2)], anywhere)))


# ---- gather by flat index: integer-array and mask indexing, gather, index_select -----------

@kernel
def gather_forward(v, out, a, b, p, q, ints, floats):
    idx = p + 2
    for i in range(q):
        v[out + i] = v[a + ints[idx + i]]


@kernel
def gather_backward(v, g, flags, out, a, b, ma, mb, p, q, ints, floats):
    if ma == 0:
        return
    zero_if_first(g, a, ints[p + 1], ma)
    idx = p + 2
    for i in range(q):
        g[a + ints[idx + i]] += g[out + i]


INDEX = define_kernel("index", "IndexBackward0", gather_forward, gather_backward, saves=False,
                      operands=1,
                      samples=cases(("int_array", lambda tj, x: x[np.array([0, 2, 2])], [(4, 3)], anywhere),
                                    ("mask", lambda tj, x: x[np.array([True, False, True, True])], [(4,)], anywhere),
                                    ("pair", lambda tj, x: x[[0, 1], [2, 0]], [(3, 3)], anywhere)))
GATHER = same_kernels("gather", "GatherBackward0", INDEX, saves=True, saved="a",   # torch keeps self
                      samples=cases(("gather", lambda tj, x: tj.gather(x, 1, tj.tensor([[0, 0], [1, 0]])),
                                     [(2, 3)], anywhere)))
INDEX_SELECT = same_kernels("index_select", "IndexSelectBackward0", INDEX,
                            samples=cases(("index_select",
                                           lambda tj, x: tj.index_select(x, 1, tj.tensor([2, 0, 2])),
                                           [(3, 4)], anywhere)))


# ---- cat / stack ------------------------------------------------------------------------

@small_kernel
def cat_forward(v, out, a, b, p, q, ints, floats):
    k = ints[p]
    outer = ints[p + 1]
    o = out
    for r in range(outer):
        for j in range(k):
            src = decode(ints[p + 2 + 2 * j])
            inner = ints[p + 3 + 2 * j]
            s = src + r * inner
            for i in range(inner):
                v[o + i] = v[s + i]
            o += inner


@small_kernel
def cat_backward(v, g, flags, out, a, b, ma, mb, p, q, ints, floats):
    k = ints[p]
    outer = ints[p + 1]
    row = 0
    for j in range(k):
        row += ints[p + 3 + 2 * j]
    col = 0
    for j in range(k):
        enc = ints[p + 2 + 2 * j]
        inner = ints[p + 3 + 2 * j]
        mode = claim(flags, enc)
        if mode != 0:
            src = decode(enc)
            for r in range(outer):
                o = out + r * row + col
                s = src + r * inner
                for i in range(inner):
                    acc(g, s + i, g[o + i], mode)
        col += inner


def _joined_operands(ints, p):
    """cat/stack list ``[k, outer, operand, inner, operand, inner, ...]`` at ``ints[p]``."""
    return [int(ints[p + 2 + 2 * j]) for j in range(int(ints[p]))]


CAT = define_kernel("cat", "CatBackward0", cat_forward, cat_backward, saves=False, group="copy",
                    listed=_joined_operands,
                    samples=cases(("cat0", lambda tj, x, y: tj.cat([x, y]), [(2, 3), (4, 3)], anywhere),
                                  ("cat1", lambda tj, x, y: tj.cat([x, y, x], dim=1), [(2, 3), (2, 1)], anywhere)))
STACK = same_kernels("stack", "StackBackward0", CAT,
                     samples=cases(("stack0", lambda tj, x, y: tj.stack([x, y]), [(3,), (3,)], anywhere),
                                   ("stack1", lambda tj, x, y: tj.stack([x, y, x], dim=1), [(2, 3), (2, 3)], anywhere),
                                   ("stack_scalars", lambda tj, x, y: tj.stack([x, y, x * y]), [(), ()], anywhere)))


# ---- where ------------------------------------------------------------------------------

@kernel
def where_forward(v, out, a, b, p, q, ints, floats):
    c = p + 1
    for i in range(q):
        v[out + i] = v[a + i] if ints[c + i] != 0 else v[b + i]


@kernel
def where_backward(v, g, flags, out, a, b, ma, mb, p, q, ints, floats):
    # The branch not taken gets an exact zero (PyTorch's where), even for an infinite gradient.
    zero = floats[0]
    c = p + 1
    for i in range(q):
        gi = g[out + i]
        if ints[c + i] != 0:
            if ma != 0:
                acc(g, a + i, gi, ma)
            if mb != 0:
                acc(g, b + i, zero, mb)
        else:
            if ma != 0:
                acc(g, a + i, zero, ma)
            if mb != 0:
                acc(g, b + i, gi, mb)


WHERE = define_kernel("where", "WhereBackward0", where_forward, where_backward, saves=False,
                      samples=cases(("where", lambda tj, x, y: tj.where(x > 0, x, y), [(3, 4), (3, 4)], anywhere),
                                    ("where_b", lambda tj, x, y: tj.where(x > 0, x, y), [(3, 4), (4,)], anywhere)))


# ---- derivative formulas (create_graph) ----------------------------------------------------
# One per op, applied by create_graph passes (tapejit/autograd/higher.py); plain Python,
# not compiled: see tapejit/ops/_formulas.py.  Kept last so define_ edits merge cleanly.

from tapejit.api import front_ends as tj  # noqa: E402  (tj's functions, read at call time)
from tapejit.ops import _formulas as _f  # noqa: E402
from tapejit.ops._formulas import derivative  # noqa: E402


@derivative(copy_range_forward)
def _d_copy_range(c):
    start, count, size = ~c.b, c.p, c.q
    if start == 0 and count == size:
        return (c.g, None)
    # zeros, g, zeros: contiguous copies (a cat), cheaper than a scatter of every position
    parts = [c.g]
    if start:
        parts.insert(0, _f.zeros(start, c.dt))
    if size - start - count:
        parts.append(_f.zeros(size - start - count, c.dt))
    return (tj.cat(parts), None)


def _d_strided_positions(ints, p):
    nd = int(ints[p])
    start = int(ints[p + 1])
    sizes = ints[p + 3:p + 3 + nd]
    strides = ints[p + 3 + nd:p + 3 + 2 * nd]
    pos = np.full(tuple(int(s) for s in sizes), start, np.int64)
    for d in range(nd):
        shape = [1] * nd
        shape[d] = int(sizes[d])
        pos = pos + (np.arange(int(sizes[d])) * int(strides[d])).reshape(shape)
    return pos.reshape(-1), int(ints[p + 2])


@derivative(strided_forward)
def _d_strided(c):
    positions, size = _d_strided_positions(c.tape.ints, c.p)
    return (_f.scatter_add(c.g, positions, size), None)


@derivative(gather_forward)
def _d_gathered(c):
    positions = c.ints(c.p + 2, c.q)
    return (_f.scatter_add(c.g, positions, c.int(c.p + 1)), None)


@derivative(cat_forward)
def _d_cat(c):
    k, outer = c.int(c.p), c.int(c.p + 1)
    inners = [c.int(c.p + 3 + 2 * j) for j in range(k)]
    total = sum(inners)
    g = _f.shaped(c.g, (outer, total))
    result = []
    at = 0
    for j, inner in enumerate(inners):
        enc = c.int(c.p + 2 + 2 * j)
        if c.wants(enc):
            result.append((enc, g[:, at:at + inner]))
        at += inner
    return result


@derivative(WHERE)
def _d_where_op(c):
    mask = c.ints(c.p + 1, c.q) != 0
    return (_f.where(mask, c.g, 0.0) if c.wants_a else None,
            _f.where(mask, 0.0, c.g) if c.wants_b else None)
