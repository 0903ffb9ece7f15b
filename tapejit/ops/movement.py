"""Ops that move elements without arithmetic: copies of ranges, strided views, expand,
gathers by index, concatenation, and where.

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


# ---- front ends ---------------------------------------------------------------------------
from tapejit import dtypes as _dtypes  # noqa: E402
from tapejit.api import export  # noqa: E402
from tapejit.recording import (record, encode_operand, contiguous_strides, broadcast_shapes,  # noqa: E402
                               result_dtype, cast as _cast, float_input, as_tensor_operand)
from tapejit.recording import expand as _expand  # noqa: E402
from tapejit.shapes import numel as _numel, wrap_dim as _wrap_dim  # noqa: E402
from tapejit.tape import state as _state, current as _current, pack_record as _pack  # noqa: E402
from tapejit.recording import operand as _operand, on_tape, eager, name_composite  # noqa: E402
from tapejit.tensor import Tensor, _concrete, _taped  # noqa: E402
from tapejit.inplace import register_view as _register_view  # noqa: E402


def _plain(t):
    """A tensor whose shape ops can be NumPy views (no tape, no gradient wanted): torch
    aliasing, also for a parameter's views under ``no_grad``.  While tracing, only the
    trace's own tensors: one from outside is loaded (read live)."""
    return (t._tape is None and (not t._rg or not _state.grad)
            and (_state.trace is None or id(t) in _state.trace.readable))


# A view of a recorded tensor is a record of its own (a copy on the tape), so it carries
# ``_view = (base, where, stamp)`` for in-place ops to write through to its base
# (tapejit/inplace.py): ``where`` is the first element for a contiguous view, or
# ``(sizes, strides, start)``; ``stamp`` is ``(base._tape, base._off, version)`` when the
# view was taken (version None: not read), which tells whether the base changed since.
# Views of tensors with no history are NumPy views instead (``_plain``), sharing memory.

#: ``_view`` of a row from iterating a tensor (``unbind``), which torch refuses to modify in place
ONE_OF_SEVERAL = "unbind"


def _viewed(t, x, where):
    t._view = (x, where, (x._tape, x._off, None))
    _register_view(t, x)
    return t


def _contiguous_chain(t):
    """Whether ``t`` is contiguous in torch by its views alone: a view that is a contiguous
    range of a contiguous base (the common case, decided without reading positions)."""
    view = getattr(t, "_view", None)
    while view is not None and view is not ONE_OF_SEVERAL:
        base, where, _ = view
        if type(where) is not int and not _is_contiguous(where[0], where[1]):
            return False
        t, view = base, getattr(base, "_view", None)
    return t._tape is not None or t._data.flags.c_contiguous


def _memory_offsets(t):
    """The offset in its storage (torch's) of each element of ``t``: a recorded tensor is a
    copy here, but its views in torch index the storage of the tensor it was viewed from."""
    view = getattr(t, "_view", None)
    if view is not None and view is not ONE_OF_SEVERAL:
        base, where, _ = view
        flat = _memory_offsets(base).reshape(-1)
        if type(where) is int:
            return flat[where:where + t._numel].reshape(t._shape)
        return flat[view_positions(base, where, t._shape)]
    if t._tape is not None:
        return np.arange(t._numel, dtype=np.int64).reshape(t._shape)
    data = t._data
    out = np.zeros(data.shape, np.int64)
    for d, (n, st) in enumerate(zip(data.shape, data.strides)):
        out += (np.arange(n, dtype=np.int64) * (st // data.itemsize)).reshape((n,) + (1,) * (data.ndim - d - 1))
    return out


def torch_strides(t):
    """``t.stride()`` as torch's tensor made by the same ops would have it (in elements);
    None if its elements are no strided view of one storage."""
    if _contiguous_chain(t):
        return contiguous_strides(t._shape)
    if getattr(t, "_view", None) is None:
        return tuple(st // t._data.itemsize for st in t._data.strides)
    offsets = _memory_offsets(t)
    if not offsets.size:
        return contiguous_strides(t._shape)
    first = offsets.reshape(-1)[0]
    strides = tuple(int(offsets[(0,) * d + (1,)].reshape(-1)[0] - first) if n > 1 else 0
                    for d, n in enumerate(t._shape))
    linear = np.full(t._shape, first, np.int64)
    for d, (n, st) in enumerate(zip(t._shape, strides)):
        linear += (np.arange(n, dtype=np.int64) * st).reshape((n,) + (1,) * (len(t._shape) - d - 1))
    return strides if (linear == offsets).all() else None


def is_contiguous(t):
    strides = torch_strides(t)
    return strides is not None and _is_contiguous(t._shape, strides)


def _view_strides(old, strides, new):
    """torch's ``computeStride``: the strides a view of shape ``new`` of a tensor of shape
    ``old`` with ``strides`` has, or None when no view has those elements (a copy is needed)."""
    if not _numel(old):
        return contiguous_strides(new)
    if not old:
        return (1,) * len(new)
    out = [0] * len(new)
    view_d = len(new) - 1
    chunk = strides[-1] if strides else 1
    tensor_numel = view_numel = 1
    for d in range(len(old) - 1, -1, -1):
        tensor_numel *= old[d]
        if d == 0 or (old[d - 1] != 1 and strides[d - 1] != tensor_numel * chunk):
            while view_d >= 0 and (view_numel < tensor_numel or new[view_d] == 1):
                out[view_d] = view_numel * chunk
                view_numel *= new[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if d > 0:
                chunk = strides[d - 1]
                tensor_numel = view_numel = 1
    return tuple(out) if view_d == -1 else None


def _viewable(x, shape):
    """Whether torch's ``x.view(shape)`` is a view (else ``view`` raises, ``reshape`` copies)."""
    if _contiguous_chain(x):
        return True
    strides = torch_strides(x)
    return strides is not None and _view_strides(x._shape, strides, shape) is not None


def view_positions(base, where, shape):
    """Flat positions in ``base`` of a view's elements, in the view's shape."""
    if type(where) is int:
        return np.arange(where, where + _numel(shape), dtype=np.int64).reshape(shape)
    sizes, strides, start = where
    flat = np.arange(max(base._numel, 1), dtype=np.int64)
    return np.lib.stride_tricks.as_strided(flat[start:], shape=sizes,
                                           strides=[s * flat.itemsize for s in strides]).copy()


def view_again(base, where, shape):
    """The view ``where`` of ``base`` as it is now."""
    if type(where) is int:
        return _copy_range(SLICE, base, where, _numel(shape), shape)
    sizes, strides, start = where
    return strided_view(STRIDED_SLICE, base, sizes, strides, start)


def _copy_range(op, x, start, n, shape):
    """Record ``x``'s elements ``start .. start+n`` as a tensor of ``shape`` (hot path)."""
    rg = x._rg and _state.grad
    if not rg and not _state.eager:
        return _range_view(eager(_copy_range, op, x, start, n, shape), op, x, start)
    tape = _state.tape or _current()
    dt = x._dtype
    xo = x._off if x._tape is tape else _operand(tape, x, dt)
    d = dt.arena
    cur = tape.cursor
    off = cur[d]
    cur[d] = off + (n or 1)
    # Tape.append, inlined: this runs once per recorded op.
    r = tape.n
    if r == tape.cap:
        tape.grow()
    _pack(tape.packed, r * 48, op.opcode * 2 + d, off, xo if rg else ~xo, ~start, n, x._numel or 1)
    tape.n = r + 1
    tape.groups |= op.bit
    return _range_view(_taped(tape, off, shape, n, dt, rg), op, x, start)


def _range_view(t, op, x, start):
    """``t``, the elements from ``start`` of ``x``, marked as a view unless it is a clone."""
    if op is UNBIND:
        t._view = ONE_OF_SEVERAL
        return t
    return t if op is CLONE else _viewed(t, x, start)


def _rows(x):
    """``unbind(x, 0)`` as a list: one copy record per row (the scalar graphs' hot path:
    iterating a tensor)."""
    shape = x._shape
    rows = shape[0]
    inner = x._numel // rows if rows else 0
    if not (x._rg and _state.grad) or _state.eager:
        return [_copy_range(UNBIND, x, i * inner, inner, shape[1:]) for i in range(rows)]
    tape = _state.tape or _current()
    dt = x._dtype
    d = dt.arena
    xo = x._off if x._tape is tape else _operand(tape, x, dt)
    rest = shape[1:]
    size = x._numel or 1
    code = UNBIND.opcode * 2 + d
    cur = tape.cursor
    out = []
    for i in range(rows):
        off = cur[d]
        cur[d] = off + (inner or 1)
        r = tape.n
        if r == tape.cap:
            tape.grow()
        _pack(tape.packed, r * 48, code, off, xo, ~(i * inner), inner, size)
        tape.n = r + 1
        t = _taped(tape, off, rest, inner, dt, True)
        t._view = ONE_OF_SEVERAL   # a constant: no allocation in the scalar graphs' hot path
        out.append(t)
    tape.groups |= UNBIND.bit
    return out


def _memory_view(arr, sizes, strides, start):
    """The NumPy view of ``arr`` whose element ``(i0, i1, ...)`` is ``arr``'s element at
    flat position ``start + i0 * strides[0] + ...`` of its logical (C) order, sharing
    ``arr``'s memory whatever its own strides; None if no strided view of ``arr`` holds
    exactly those elements.  Each view dim must step within one dim of ``arr`` (all the
    views made here do: permutes, expands, basic indexing), and no dim of ``arr`` may be
    stepped past its end, so the flat positions map linearly to memory."""
    if not all(sizes):
        return np.zeros(sizes, arr.dtype)
    shape = arr.shape
    logical = contiguous_strides(shape)
    first = np.unravel_index(start, shape) if shape else ()
    low, high = list(first), list(first)
    mem = []
    for size, stride in zip(sizes, strides):
        if size == 1 or stride == 0:
            mem.append(0)
            continue
        step = abs(stride)
        # the outermost dim whose logical stride divides ``step`` within its extent
        for d in range(len(shape)):
            if shape[d] > 1 and step % logical[d] == 0 and step // logical[d] < shape[d]:
                break
        else:
            return None
        k = step // logical[d]
        if stride > 0:
            high[d] += k * (size - 1)
        else:
            low[d] -= k * (size - 1)
        mem.append((k if stride > 0 else -k) * arr.strides[d])
    if any(lo < 0 or hi >= n for lo, hi, n in zip(low, high, shape)):
        return None
    corner = arr[tuple(slice(i, i + 1) for i in first)] if shape else arr
    return np.lib.stride_tricks.as_strided(corner, shape=sizes, strides=mem)


def strided_view(op, x, sizes, strides, start):
    """Materialise the view of ``x`` given by element ``sizes``/``strides``/``start``."""
    if _plain(x):
        arr = _memory_view(x._data, sizes, strides, start)
        if arr is None:   # not a strided view of x's memory: a copy with the right values
            flat = np.ascontiguousarray(x._data).reshape(-1)
            return _concrete(np.lib.stride_tricks.as_strided(
                flat[start:], shape=sizes, strides=[s * flat.itemsize for s in strides]).copy())
        return _viewed(_concrete(arr), x, (tuple(sizes), tuple(strides), start))
    if not sizes:
        return _copy_range(op, x, start, 1, ())
    where = (tuple(sizes), tuple(strides), start)
    if not on_tape(x):
        return _viewed(eager(strided_view, op, x, sizes, strides, start), x, where)
    tape = _state.tape or _current()
    nd = len(sizes)
    p = tape.add_ints((nd, start, max(x._numel, 1)) + tuple(sizes) + tuple(strides))
    return _viewed(record(op, (x,), sizes, x._dtype, p, _numel(sizes)), x, where)


def _resolve_shape(shape, n, op):
    shape = list(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else list(shape)
    shape = [int(s) for s in shape]
    if shape.count(-1) > 1:
        raise RuntimeError(f"{op}: only one dimension can be inferred")
    if -1 in shape:
        rest = _numel([s for s in shape if s != -1])
        if rest == 0 or n % rest:
            raise RuntimeError(f"{op}: shape '{shape}' is invalid for input of size {n}")
        shape[shape.index(-1)] = n // rest
    if _numel(shape) != n:
        raise RuntimeError(f"{op}: shape '{list(shape)}' is invalid for input of size {n}")
    return tuple(shape)


def _reshaped(x, shape, op=RESHAPE):
    """``x`` as ``shape``: a view where torch's is one (a new tensor even for the same
    shape, as torch), else a copy (torch's ``reshape`` of a tensor no view can reshape)."""
    if _plain(x):
        data = x._data
        if data.flags.c_contiguous:
            return _viewed(_concrete(data.reshape(shape)), x, 0)
        strides = _view_strides(x._shape, torch_strides(x), shape)
        if strides is None:
            return _concrete(np.ascontiguousarray(data).reshape(shape))
        return _viewed(_concrete(np.lib.stride_tricks.as_strided(
            data, shape=shape, strides=[st * data.itemsize for st in strides])), x, 0)
    out = _copy_range(op, x, 0, x._numel, shape)
    if shape != x._shape and not _viewable(x, shape):
        out._view = None   # a copy of the elements, as torch's reshape makes here
    return out


@export(method=True)
def reshape(input, *shape):
    return _reshaped(input, _resolve_shape(shape, input._numel, "reshape"))


@export(method=True, function=False)
def view(input, *shape):
    if len(shape) == 1 and isinstance(shape[0], (_dtypes.dtype, type, np.dtype)):
        return _bits_as(input, _dtypes.as_dtype(shape[0]))
    shape = _resolve_shape(shape, input._numel, "view")
    if not _viewable(input, shape):
        raise RuntimeError(
            f"view size is not compatible with input tensor's size and stride (at least one dimension "
            f"spans across two contiguous subspaces). Use .reshape(...) instead. (view of a tensor of "
            f"shape {list(input._shape)} as {list(shape)})")
    return _reshaped(input, shape)


_TORCH_NAMES = {"float32": "Float", "float64": "Double", "int64": "Long", "bool": "Bool"}


def _bits_as(input, dt):
    """``view(dtype)``: the same bytes read as ``dt`` (no gradient), as torch; the last
    dimension scales when the element sizes differ."""
    if dt is input._dtype:
        return input
    old, new = input._dtype.itemsize, dt.itemsize
    names = f"{_TORCH_NAMES[input._dtype.name]} as {_TORCH_NAMES[dt.name]}"
    if old != new:
        if not input._shape:
            raise RuntimeError(f"view: self.dim() cannot be 0 to view {names} (different element sizes)")
        if (input._shape[-1] * old) % new:
            raise RuntimeError(f"view: self.size(-1) must be divisible by {new // old} to view {names} "
                               f"(different element sizes), but got {input._shape[-1]}")
    bits = np.ascontiguousarray(input._value()).view(dt.np)
    return _concrete(bits if _plain(input) else bits.copy())   # a tape's slots are reused


@export(method=True, function=False)
def view_as(input, other):
    return view(input, other._shape)


@export(method=True, function=False)
def reshape_as(input, other):
    return reshape(input, other._shape)


@export(method=True)
def flatten(input, start_dim=0, end_dim=-1):
    nd = len(input._shape)
    if nd == 0:
        return _reshaped(input, (1,))
    s = _wrap_dim(start_dim, nd, "flatten")
    e = _wrap_dim(end_dim, nd, "flatten")
    if s > e:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    if s == e:
        return input   # torch returns the tensor itself
    shape = input._shape[:s] + (_numel(input._shape[s:e + 1]),) + input._shape[e + 1:]
    return _reshaped(input, shape)


@export(method=True)
def unflatten(input, dim, sizes):
    shape = input._shape
    if not shape:
        raise RuntimeError(f"unflatten: Dimension specified as {dim} but tensor has no dimensions")
    d = _wrap_dim(dim, len(shape), "unflatten")
    if not isinstance(sizes, (tuple, list)):
        raise TypeError(f"unflatten(): argument 'sizes' (position 2) must be tuple of ints, not "
                        f"{type(sizes).__name__}")
    inner = []
    for i, s in enumerate(sizes):
        if isinstance(s, bool) or not isinstance(s, (int, np.integer, Tensor)):
            raise TypeError(f"unflatten(): argument 'sizes' (position 2) must be tuple of ints, but found "
                            f"element of type {type(s).__name__} at pos {i}")
        inner.append(s.__index__())
    if not inner:
        raise RuntimeError("unflatten: sizes must be non-empty")
    if inner.count(-1) > 1:
        raise RuntimeError("unflatten: only one dimension can be inferred")
    for i, s in enumerate(inner):
        if s < -1:
            raise RuntimeError(f"unflatten: invalid shape dimension {s} at index {i} of shape {inner}")
    n = shape[d]
    known = _numel([s for s in inner if s != -1])
    if -1 in inner:
        if n == 0 and known == 0:
            raise RuntimeError(f"unflatten: cannot reshape tensor of 0 elements into shape {inner} because the "
                               f"unspecified dimension size -1 can be any value and is ambiguous")
        fits = known != 0 and n % known == 0
    else:
        fits = known == n
    if not fits:
        raise RuntimeError(f"unflatten: Provided sizes {inner} don't multiply up to the size of dim {d} ({n}) "
                           f"in the input tensor")
    if -1 in inner:
        inner[inner.index(-1)] = n // known
    return _reshaped(input, shape[:d] + tuple(inner) + shape[d + 1:])


@export(method=True)
def squeeze(input, dim=None):
    shape = input._shape
    if dim is None:
        new = tuple(s for s in shape if s != 1)
    else:
        wrapped = [_wrap_dim(d, len(shape), "squeeze") for d in ((dim,) if isinstance(dim, int) else dim)]
        dims = set(wrapped)
        if len(dims) < len(wrapped):
            twice = next(d for d in wrapped if wrapped.count(d) > 1)
            raise RuntimeError(f"squeeze: dim {twice} appears multiple times in the list of dims")
        new = tuple(s for i, s in enumerate(shape) if not (i in dims and s == 1))
    return _reshaped(input, new, SQUEEZE if dim is None else SQUEEZE_DIM)


@export(method=True)
def unsqueeze(input, dim):
    nd = len(input._shape)
    d = _wrap_dim(dim, nd + 1, "unsqueeze")
    return _reshaped(input, input._shape[:d] + (1,) + input._shape[d:], UNSQUEEZE)


@export(method=True)
def permute(input, *dims):
    dims = tuple(dims[0]) if len(dims) == 1 and isinstance(dims[0], (tuple, list)) else dims
    nd = len(input._shape)
    if len(dims) != nd:
        raise RuntimeError(
            f"permute(sparse_coo): number of dimensions in the tensor input does not match the length "
            f"of the desired ordering of dimensions i.e. input.dim() = {nd} is not equal to len(dims) = {len(dims)}")
    order = [_wrap_dim(d, nd, "permute") for d in dims]
    if sorted(order) != list(range(nd)):
        raise RuntimeError("permute(): duplicate dims are not allowed.")
    return _permuted(input, order, PERMUTE)


def _alias(op, x):
    """A new tensor viewing all of ``x`` as it is: torch makes a view (of a leaf: a
    non-leaf) even when the shape and strides stay."""
    if _plain(x):
        return _viewed(_concrete(x._data.view()), x, 0)
    if x._shape:
        return strided_view(op, x, x._shape, contiguous_strides(x._shape), 0)
    return _copy_range(RESHAPE, x, 0, x._numel, x._shape)


def _permuted(x, order, op):
    if order == list(range(len(order))):
        return _alias(op, x)
    strides = contiguous_strides(x._shape)
    return strided_view(op, x, tuple(x._shape[d] for d in order), tuple(strides[d] for d in order), 0)


@export(method=True)
def transpose(input, dim0, dim1):
    nd = len(input._shape)
    if nd == 0:
        return _alias(TRANSPOSE, input)
    a = _wrap_dim(dim0, nd, "transpose")
    b = _wrap_dim(dim1, nd, "transpose")
    order = list(range(nd))
    order[a], order[b] = order[b], order[a]
    return _permuted(input, order, TRANSPOSE)


export(transpose, name="swapaxes", method=True)


@export(method=True)
def t(input):
    if len(input._shape) > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {len(input._shape)}D")
    if len(input._shape) < 2:
        return _alias(TRANSPOSE_2D, input)
    return _permuted(input, [1, 0], TRANSPOSE_2D)


Tensor.T = property(lambda self: _permuted(self, list(range(len(self._shape)))[::-1], PERMUTE))
Tensor.mT = property(lambda self: transpose(self, -2, -1))


@export(method=True, function=False)
def expand(input, *sizes):
    sizes = tuple(sizes[0]) if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)) else sizes
    return _expanded(input, sizes)


def _expanded(x, sizes):
    out = _expand(x, sizes)
    return _alias(EXPAND, x) if out is x else out


@export(method=True, function=False)
def expand_as(input, other):
    return _expanded(input, other._shape)


@export(method=True)
def broadcast_to(input, size):
    return _expanded(input, tuple(size))


@export()
def broadcast_tensors(*tensors):
    shape = ()
    for t_ in tensors:
        shape = broadcast_shapes("broadcast_tensors", shape, t_._shape)
    return tuple(_expanded(t_, shape) for t_ in tensors)


def contiguous(input):
    """``input`` itself if torch's is contiguous, else a contiguous copy (not a view)."""
    return input if is_contiguous(input) else clone(input)


@export(method=True)
def clone(input, memory_format=None):
    if _plain(input):
        return _concrete(input._data.copy())
    return _copy_range(CLONE, input, 0, input._numel, input._shape)


@export(method=True, function=False)
def repeat(input, *sizes):
    sizes = tuple(sizes[0]) if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)) else sizes
    if len(sizes) < len(input._shape):
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number of "
                           "dimensions of tensor")
    shape = (1,) * (len(sizes) - len(input._shape)) + input._shape
    # (s0, s1) -> (1, s0, 1, s1) -> expanded to (r0, s0, r1, s1) -> (r0*s0, r1*s1)
    spaced = tuple(v for s in shape for v in (1, s))
    expanded = tuple(v for r, s in zip(sizes, shape) for v in (r, s))
    if _plain(input):
        return _concrete(np.tile(input._data, sizes))
    out = _reshaped(_expand(_reshaped(input, spaced), expanded),
                    tuple(r * s for r, s in zip(sizes, shape)))
    if out is input:
        return clone(input)
    out._view = None   # a copy (torch's repeat), not a view of its input
    return out


# ---- indexing --------------------------------------------------------------------------

def _is_basic(key):
    return all(k is None or k is Ellipsis or isinstance(k, (int, slice, np.integer)) and not isinstance(k, bool)
               for k in key)


def _is_contiguous(sizes, strides):
    """True when a view's elements are one contiguous run in order (size-1 dims ignored)."""
    expected = 1
    for size, stride in zip(reversed(sizes), reversed(strides)):
        if size == 0:
            return True
        if size != 1:
            if stride != expected:
                return False
            expected *= size
    return True


def _is_int(k):
    return isinstance(k, (int, np.integer)) and not isinstance(k, bool)


def _torch_index(array, key):
    """``array[key]`` with torch's rule for advanced indices, which differs from NumPy's:
    integers select first, as basic indexing does, and do not count as advanced indices;
    the index arrays (a boolean mask counting as one array per dim it covers) then index
    what is left, their result dims in place if nothing stands between them (a ``...``
    standing for no dim does not) and first otherwise; a ``None`` between them separates
    them, as the size-1 dim it makes does."""
    if _is_basic(key):
        return array[key]
    covered = sum(np.ndim(k) if _is_mask(k) else 0 if k is None or k is Ellipsis else 1 for k in key)
    if covered > array.ndim:
        raise IndexError(f"too many indices for tensor of dimension {array.ndim}")
    first = []   # basic indexing: the integers, slices, None and ``...``
    rest = []    # then the arrays, over the dims that basic indexing leaves
    for k in key:
        if k is Ellipsis:
            first.append(k)
            rest += [slice(None)] * (array.ndim - covered)
        elif k is None or isinstance(k, slice):
            first.append(k)
            rest.append(slice(None))
        elif _is_int(k):
            first.append(k)
        else:
            first += [slice(None)] * (np.ndim(k) if _is_mask(k) else 1)
            rest.append(k)
    part = array[tuple(first)]
    d = 0
    for k in rest:
        n = np.ndim(k) if _is_mask(k) else 1
        if n and _is_mask(k) and np.shape(k) != part.shape[d:d + n]:
            raise IndexError(f"The shape of the mask {list(np.shape(k))} at index {d} does not match the "
                             f"shape of the indexed tensor {list(part.shape[d:d + n])} at index {d}")
        d += n
    try:
        return part[tuple(rest)]
    except IndexError:
        shape = _advanced_shape(part.shape, rest)
        if shape is None or _numel(shape):
            raise
        return np.zeros(shape, array.dtype)   # torch checks no index when nothing is selected


def _advanced_shape(shape, key):
    """The shape of ``array[key]`` for an array of ``shape`` and a key of full slices and
    index arrays (NumPy's placement), without reading the indices; None if the arrays do
    not broadcast."""
    sizes = [(int(np.count_nonzero(k)),) if _is_mask(k) else np.shape(k) for k in key
             if not isinstance(k, slice)]
    try:
        joined = np.broadcast_shapes(*sizes)
    except ValueError:
        return None
    at = [i for i, k in enumerate(key) if not isinstance(k, slice)]
    out, d = [], 0
    for i, k in enumerate(key):
        if isinstance(k, slice):
            out.append(shape[d])
            d += 1
        elif _is_mask(k):
            if np.shape(k) != tuple(shape[d:d + np.ndim(k)]):
                return None
            d += np.ndim(k)
        else:
            if shape[d] == 0 and np.size(k):   # torch checks indices into an empty dim
                return None
            d += 1
    if at[-1] - at[0] + 1 == len(at):   # adjacent: the arrays' dims stand where they are
        slices_before = at[0]
        return tuple(out[:slices_before]) + joined + tuple(out[slices_before:])
    return joined + tuple(out)


def _is_mask(k):
    return isinstance(k, (bool, np.bool_)) or isinstance(k, np.ndarray) and k.dtype == np.bool_


def _index_positions(shape, key):
    """Flat source positions selected by ``key``."""
    grid = np.arange(_numel(shape), dtype=np.int64).reshape(shape)
    try:
        return _torch_index(grid, key)
    except IndexError as e:
        raise IndexError(f"index: {e} (tensor of shape {list(shape)})") from None


def _norm_key(key):
    key = key if isinstance(key, tuple) else (key,)
    out = []
    for k in key:
        if isinstance(k, Tensor):
            v = k._value()
            k = int(v) if v.ndim == 0 and v.dtype.kind in "iu" else v
        elif isinstance(k, list):
            k = np.asarray([e._value() if isinstance(e, Tensor) else e for e in k])
            if k.size == 0:   # torch reads an empty list as an empty integer index
                k = k.astype(np.int64)
        out.append(k)
    return tuple(out)


def _basic_view(x, key):
    """sizes, strides, start (in elements) of the basic-indexing view ``x[key]``: ints,
    slices, ``None`` and one ``...``, with NumPy's (and torch's) rules."""
    shape = x._shape
    strides = contiguous_strides(shape)
    used = sum(1 for k in key if k is not None and k is not Ellipsis)
    if used > len(shape):
        raise IndexError(f"too many indices for tensor of dimension {len(shape)}")
    sizes_out = []
    strides_out = []
    start = 0
    d = 0
    seen_ellipsis = False
    for k in key:
        if k is Ellipsis:
            if seen_ellipsis:
                raise IndexError("an index can only have a single ellipsis ('...')")
            seen_ellipsis = True
            for _ in range(len(shape) - used):
                sizes_out.append(shape[d])
                strides_out.append(strides[d])
                d += 1
        elif k is None:
            sizes_out.append(1)
            strides_out.append(0)
        elif isinstance(k, slice):
            lo, hi, step = k.indices(shape[d])
            if step <= 0 and k.step is not None and k.step == 0:
                raise ValueError("slice step cannot be zero")
            sizes_out.append(len(range(lo, hi, step)))
            strides_out.append(strides[d] * step)
            start += lo * strides[d] if sizes_out[-1] else 0
            d += 1
        else:
            i = int(k)
            size = shape[d]
            if not -size <= i < size:
                raise IndexError(f"index {i} is out of bounds for dimension {d} with size {size}")
            start += (i % size) * strides[d]
            d += 1
    while d < len(shape):
        sizes_out.append(shape[d])
        strides_out.append(strides[d])
        d += 1
    return tuple(sizes_out), tuple(strides_out), start


_INDEX_NODES = {int: "SelectBackward0", type(None): "UnsqueezeBackward0", slice: "SliceBackward0"}


def _torch_index_node(key, shape):
    """torch's grad_fn of ``x[key]`` for a basic ``key``: torch indexes dim by dim, skipping
    full slices, so the last other element names the node (``x[:, 1]`` is a
    SelectBackward0, ``x[0, 1:3]`` a SliceBackward0).  None when every element is a full
    slice (torch's alias) or tapejit's record already has that name."""
    dim = 0
    last = Ellipsis   # none yet
    for k in key:
        if k is Ellipsis:
            dim = len(shape) - sum(1 for j in key if j is not None and j is not Ellipsis)
        elif k is None:
            last = k
        elif type(k) is slice and dim < len(shape) and k.indices(shape[dim]) == (0, shape[dim], 1):
            dim += 1
        else:
            last = k
            dim += 1
    if last is Ellipsis:
        return None
    return _INDEX_NODES.get(type(last), "SelectBackward0")


@export(function=False, dunders=("__getitem__",))
def getitem(input, key):
    shape = input._shape
    if type(key) is int and shape and not _plain(input):
        n0 = shape[0]
        if not -n0 <= key < n0:
            raise IndexError(f"index {key} is out of bounds for dimension 0 with size {n0}")
        inner = input._numel // n0 if n0 else 0
        return _copy_range(SELECT, input, (key % n0) * inner, inner, shape[1:])
    if type(key) is slice and shape and not _plain(input) and key.step in (None, 1):
        lo, hi, _ = key.indices(shape[0])
        rows = hi - lo if hi > lo else 0
        inner = input._numel // shape[0] if shape[0] else 0
        return _copy_range(SLICE, input, lo * inner if rows else 0, rows * inner, (rows,) + shape[1:])
    key = _norm_key(key)
    if _plain(input):
        if not any(k is Ellipsis for k in key):
            key = key + (Ellipsis,)  # NumPy then returns a 0-d view, not a scalar copy
        try:
            out = _concrete(np.asarray(_torch_index(input._data, key)))
        except IndexError as e:
            raise IndexError(str(e).replace("axis", "dimension")) from None
        if _is_basic(key):
            sizes, strides, start = _basic_view(input, key)
            _viewed(out, input, start if _is_contiguous(sizes, strides) else (sizes, strides, start))
        return out
    if _is_basic(key):
        sizes, strides, start = _basic_view(input, key)
        if _is_contiguous(sizes, strides):
            op = SELECT if len(sizes) < len(shape) else SLICE
            if sizes == shape:
                op = RESHAPE
            out = _copy_range(op, input, start, _numel(sizes), tuple(sizes))
        else:
            op = STRIDED_SLICE
            out = strided_view(STRIDED_SLICE, input, tuple(sizes), tuple(strides), start)
        node = _torch_index_node(key, shape)
        if node is not None and node != op.node and out._rg:
            name_composite(out, node, input)
        return out
    pos = _index_positions(shape, key)
    return _gather(INDEX, input, pos)


def _gather(op, x, positions):
    if not on_tape(x):
        return eager(_gather, op, x, positions)
    tape = _state.tape or _current()
    flat = positions.reshape(-1)
    p = tape.add_ints([flat.size, max(x._numel, 1)] + flat.tolist())
    return record(op, (x,), positions.shape, x._dtype, p, flat.size)


@export(function=False, dunders=("__setitem__",))
def setitem(input, key, value):
    from tapejit.inplace import check_leaf, note_write
    check_leaf(input, "setitem")
    key = _norm_key(key)
    basic = _is_basic(key)
    if not basic and isinstance(value, Tensor) and value._dtype is not input._dtype and not (
            len(key) == 1 and _is_mask(key[0]) and value._numel == 1):   # (torch's masked_fill)
        raise RuntimeError(
            f"Index put requires the source and destination dtypes match, got "
            f"{_TORCH_NAMES[input._dtype.name]} for the destination and "
            f"{_TORCH_NAMES[value._dtype.name]} for the source.")
    if basic and _plain(input) and not (isinstance(value, Tensor) and value._rg and _state.grad):
        target = input._data[key if Ellipsis in key else key + (Ellipsis,)]
        if target.ndim and 0 in target.strides:
            _refuse_overlap("setitem", target)
        v = _setitem_value(value, target.shape, True)
        note_write(input)
        target[...] = v
        return
    if type(getattr(input, "_view", None)) is tuple:
        # A view: torch writes its part of the storage, as ``input[key].copy_(value)``.
        from tapejit.inplace import apply_inplace, check_view_leaf, root_positions
        if basic:
            part = getitem(input, key)
            apply_inplace(part, lambda: _written(part, value), "setitem")
            return
        root, positions = root_positions(input)
        check_view_leaf(root)
        assign_positions(root, positions.reshape(-1)[_index_positions(input._shape, key)], value, False)
        return
    assign_positions(input, _index_positions(input._shape, key), value, basic)


def _written(part, value):
    """What ``part[...] = value`` makes ``part`` hold (torch's ``copy_``, with setitem's
    shape rule)."""
    from tapejit.ops.binary import COPY
    from tapejit.recording import record_binary
    value = as_tensor_operand(value, part)
    _setitem_value(np.broadcast_to(np.False_, value._shape), part._shape, True)   # torch's errors
    while len(value._shape) > len(part._shape) and value._shape[0] == 1:
        value = _reshaped(value, value._shape[1:])
    if part._dtype.is_floating_point and (part._tape is not None or (value._rg and _state.grad)):
        return record_binary(COPY, part, value)
    return _expand(value, part._shape) if value._shape != part._shape else value


def _refuse_overlap(op, arr):
    if arr.size and any(st == 0 and n > 1 for n, st in zip(arr.shape, arr.strides)):
        raise RuntimeError(
            f"{op}: unsupported operation: more than one element of the written-to tensor refers to "
            f"a single memory location. Please clone() the tensor before performing the operation.")


def _setitem_value(value, shape, basic):
    """``value`` (its array) as written into ``shape`` by setitem, with torch's rule and
    errors: leading size-1 dims of the value are dropped, the rest broadcasts."""
    v = value._value() if isinstance(value, Tensor) else value
    vshape = np.shape(v)
    while len(vshape) > len(shape) and vshape[0] == 1:
        vshape = vshape[1:]
    try:
        return np.broadcast_to(np.reshape(v, vshape), shape)
    except ValueError:
        pass
    if basic:
        d = next(i for i in range(1, len(vshape) + 1)
                 if len(shape) < i or vshape[-i] not in (1, shape[-i]))
        raise RuntimeError(
            f"The expanded size of the tensor ({shape[-d] if d <= len(shape) else -1}) must match "
            f"the existing size ({vshape[-d]}) at non-singleton dimension {len(shape) - d}.  Target "
            f"sizes: {list(shape)}.  Tensor sizes: {list(vshape)}")
    raise RuntimeError(f"shape mismatch: value tensor of shape {list(np.shape(v))} cannot be broadcast to "
                       f"indexing result of shape {list(shape)}")


def assign_positions(input, pos, value, basic=True, writing=None, since=None):
    """``input.flatten()[pos] = value``, recorded like ``setitem`` (``pos``: flat positions
    in the shape ``value`` is broadcast to; ``writing``: the view this write comes through)."""
    from tapejit.inplace import apply_inplace, note_write
    if _plain(input) and not (isinstance(value, Tensor) and value._rg and _state.grad):
        v = _setitem_value(value, pos.shape, basic)
        note_write(input)
        input._data.flat[pos.reshape(-1)] = v.reshape(-1)
        return
    value = as_tensor_operand(value, input)
    if value._dtype is not input._dtype:
        value = _cast(value, input._dtype)
    _setitem_value(np.broadcast_to(np.False_, value._shape), pos.shape, basic)   # torch's errors
    while len(value._shape) > len(pos.shape) and value._shape[0] == 1:
        value = _reshaped(value, value._shape[1:])
    vals = _expand(value, pos.shape) if value._shape != pos.shape else value
    source = np.zeros(max(input._numel, 1), np.int64)
    mask = np.zeros(input._numel, bool)
    flat = pos.reshape(-1)
    source[flat] = np.arange(flat.size)
    mask[flat] = True
    picked = _gather(INDEX, _reshaped(vals, (flat.size,)) if vals._shape != (flat.size,) else vals,
                     source[:input._numel].reshape(input._shape))
    apply_inplace(input, lambda: where(_concrete(mask.reshape(input._shape)), picked, input), "setitem",
                  writing, since)


# ---- gather, index_select ----------------------------------------------------------------

class IndexOutOfRange(IndexError, RuntimeError):
    """An index out of range in ``index_select``: torch raises ``IndexError`` or
    ``RuntimeError`` for it depending on the dim and the kernel it picks, so this is both."""


def _index_values(op, index, allowed):
    """The values of an index tensor, refusing float and bool indices as torch does (cast
    to int they would silently pick other elements)."""
    if not isinstance(index, Tensor):
        raise TypeError(f"{op}(): argument 'index' must be Tensor, not {type(index).__name__}")
    idx = index._value()
    if idx.dtype.kind not in "iu" or idx.dtype == np.uint64:
        raise RuntimeError(f"{op}(): Expected dtype {allowed} for index (got {index._dtype.name} indices)")
    return idx.astype(np.int64, copy=False)


@export(method=True)
def gather(input, dim, index):
    d = _wrap_dim(dim, len(input._shape), "gather")
    idx = _index_values("gather", index, "int32/int64")
    shape = input._shape
    if max(idx.ndim, 1) != max(len(shape), 1):   # torch takes 0-d for 1-D, both ways
        raise RuntimeError(f"gather(): Index tensor must have the same number of dimensions as input tensor "
                           f"(index {list(idx.shape)}, input {list(shape)})")
    if len(shape) <= 1:
        shape, idx = (shape[0] if shape else 1,), idx.reshape(-1)
    for k, (i, s) in enumerate(zip(idx.shape, shape)):
        if k != d and i > s:
            raise RuntimeError(f"Size does not match at dimension {k} expected index {list(idx.shape)} to be no "
                               f"larger than self {list(input._shape)} apart from dimension {d}")
    size = shape[d]
    bad = (idx < 0) | (idx >= size)
    if bad.any():   # NumPy would wrap a negative index
        raise RuntimeError(f"gather(): index {idx[bad].reshape(-1)[0]} is out of bounds for dimension {d} "
                           f"with size {size}")
    # Index dims other than d may be shorter than the input's: torch reads the leading part.
    grid = np.arange(input._numel, dtype=np.int64).reshape(shape)
    grid = grid[tuple(slice(None) if k == d else slice(0, i) for k, i in enumerate(idx.shape))]
    pos = np.take_along_axis(grid, idx, axis=d).reshape(index._shape)
    if _plain(input):
        return _concrete(input._data.reshape(-1)[pos])
    return _gather(GATHER, input, pos)


@export(method=True)
def index_select(input, dim, index):
    d = _wrap_dim(dim, len(input._shape), "index_select")
    idx = _index_values("index_select", index, "int32 or int64")
    if idx.ndim > 1:
        raise IndexError(f"index_select(): Index is supposed to be a vector (got an index of shape "
                         f"{list(idx.shape)})")
    idx = idx.reshape(-1)
    size = input._shape[d] if input._shape else 1
    bad = (idx < 0) | (idx >= size)
    if bad.any():   # NumPy would wrap a negative index
        raise IndexOutOfRange(f"index_select(): index out of range in self (index {idx[bad][0]} for dim {d} "
                              f"of size {size}, input of shape {list(input._shape)})")
    grid = np.arange(input._numel, dtype=np.int64).reshape(input._shape)
    pos = np.take(grid, idx, axis=d) if input._shape else grid.reshape(1)[idx].reshape(())
    if _plain(input):
        return _concrete(input._data.reshape(-1)[pos])
    return _gather(INDEX_SELECT, input, pos)


# ---- cat, stack, split, chunk, unbind ----------------------------------------------------

def _joined(op, tensors, dim, stack):
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError(f"{op.name}(): expected a non-empty list of Tensors")
    dt = tensors[0]._dtype
    for x in tensors[1:]:
        dt = _dtypes.promote(dt, x._dtype)
    first = tensors[0]._shape
    if stack:
        for i, x in enumerate(tensors):
            if not isinstance(x, Tensor):
                raise TypeError(f"stack(): expected a sequence of Tensors, got {type(x).__name__}")
            if x._shape != first:
                raise RuntimeError(
                    f"stack expects each tensor to be equal size, but got {list(first)} at entry 0 and "
                    f"{list(x._shape)} at entry {i}")
        d = _wrap_dim(dim, len(first) + 1, "stack")
        out_shape = first[:d] + (len(tensors),) + first[d:]
        inner = [_numel(first[d:])] * len(tensors)
        outer = _numel(first[:d])
    else:
        parts = tensors
        tensors = [x for x in parts if not (x._shape == (0,))] or parts[:1]
        # a skipped empty part that requires grad still makes the result require it (torch)
        skipped = [x for x in parts if x._shape == (0,) and x._rg and x is not tensors[0]]
        first = tensors[0]._shape
        if not first:
            raise RuntimeError("zero-dimensional tensor (at position 0) cannot be concatenated")
        d = _wrap_dim(dim, len(first), "cat")
        total = 0
        inner = []
        for i, x in enumerate(tensors):
            s = x._shape
            if len(s) != len(first) or s[:d] != first[:d] or s[d + 1:] != first[d + 1:]:
                raise RuntimeError(
                    f"cat(): Sizes of tensors must match except in dimension {d}. Expected size "
                    f"{list(first)} but got size {list(s)} for tensor number {i} in the list.")
            total += s[d]
            inner.append(_numel(s[d:]))
        out_shape = first[:d] + (total,) + first[d + 1:]
        outer = _numel(first[:d])
        if skipped and _state.grad and dt.is_floating_point:
            tensors = tensors + skipped
            inner = inner + [0] * len(skipped)
    if not dt.is_floating_point or not (_state.eager or (_state.grad and any(x._rg for x in tensors))):
        arrays = [x._value().astype(dt.np, copy=False) for x in tensors]
        return _concrete(np.stack(arrays, d) if stack else np.concatenate(arrays, d))
    tape = _state.tape or _current()
    fields = [len(tensors), outer]
    rg = False
    for x, n in zip(tensors, inner):
        if x._dtype is not dt:
            x = _cast(x, dt)
        enc = encode_operand(tape, x, dt)
        rg = rg or enc >= 0
        fields += [enc, n]
    p = tape.add_ints(fields)
    return record(op, (), out_shape, dt, p, _numel(out_shape), listed_rg=rg)


@export()
def cat(tensors, dim=0):
    return _joined(CAT, tensors, dim, stack=False)


export(cat, name="concat")
export(cat, name="concatenate")


@export()
def stack(tensors, dim=0):
    if dim == 0:
        fast = _stack_taped(tensors)
        if fast is not None:
            return fast
    return _joined(STACK, tensors, dim, stack=True)


def _stack_taped(tensors):
    """``stack(dim=0)`` of same-shape float tensors already on this tape (the scalar
    graphs' hot path); ``None`` when the general path is needed."""
    tape = _state.tape
    if tape is None or not tensors or not _state.grad:
        return None
    first = tensors[0]
    dt = first._dtype
    shape = first._shape
    n = first._numel
    grad = _state.grad
    fields = [len(tensors), 1]
    rg = False
    for x in tensors:
        if type(x) is not Tensor or x._tape is not tape or x._dtype is not dt or x._shape != shape:
            return None
        if grad and x._rg:
            fields += (x._off, n)
            rg = True
        else:
            fields += (~x._off, n)
    total = n * len(tensors)
    d = dt.arena
    p = tape.add_ints(fields)
    cur = tape.cursor
    off = cur[d]
    cur[d] = off + (total or 1)
    tape.append(STACK.opcode * 2 + d, off, -1, -1, p, total)
    tape.groups |= STACK.bit
    return _taped(tape, off, (len(tensors),) + shape, total, dt, rg)


@export()
def hstack(tensors):
    return cat(tensors, 0 if len(tensors[0]._shape) == 1 else 1)


@export()
def vstack(tensors):
    return cat([x if len(x._shape) > 1 else x.reshape(1, -1) for x in tensors], 0)


def _slice_dim(x, dim, start, stop, op=SLICE):
    key = (slice(None),) * dim + (slice(start, stop),)
    if dim == 0 and not _plain(x):
        inner = _numel(x._shape[1:])
        return _copy_range(op, x, start * inner, (stop - start) * inner, (stop - start,) + x._shape[1:])
    return getitem(x, key)


@export(method=True)
def split(tensor, split_size_or_sections, dim=0):
    d = _wrap_dim(dim, len(tensor._shape), "split")
    size = tensor._shape[d]
    if isinstance(split_size_or_sections, int):
        step = split_size_or_sections
        if step <= 0:
            raise RuntimeError(f"split expects split_size be non-negative, but got split_size={step}")
        bounds = (list(range(0, size, step)) or [0]) + [size]   # a zero-size dim: one empty piece
    else:
        sections = list(split_size_or_sections)
        if sum(sections) != size:
            raise RuntimeError(
                f"split_with_sizes expects split_sizes to sum exactly to {size} (input tensor's size at "
                f"dimension {d}), but got split_sizes={sections}")
        bounds = [0]
        for s in sections:
            bounds.append(bounds[-1] + s)
    out = tuple(_slice_dim(tensor, d, a, b) for a, b in zip(bounds[:-1], bounds[1:]))
    if tensor._rg:
        from tapejit.inplace import mark_multi_output
        mark_multi_output(out, "Split" if isinstance(split_size_or_sections, int) else "SplitWithSizes")
    return out


@export(method=True)
def chunk(input, chunks, dim=0):
    d = _wrap_dim(dim, len(input._shape), "chunk")
    size = input._shape[d]
    if size == 0:   # torch: ``chunks`` empty pieces
        return tuple(_slice_dim(input, d, 0, 0) for _ in range(chunks))
    step = max(1, -(-size // chunks))
    return split(input, step, d)


@export(method=True)
def unbind(input, dim=0):
    shape = input._shape
    d = _wrap_dim(dim, len(shape), "unbind")
    if _plain(input):
        return tuple(getitem(input, (slice(None),) * d + (i,)) for i in range(shape[d]))
    if d == 0:
        return tuple(_rows(input))
    out = tuple(getitem(input, (slice(None),) * d + (i,)) for i in range(shape[d]))
    if input._rg:
        from tapejit.inplace import mark_multi_output
        mark_multi_output(out, "Unbind")
    return out


# ---- masked_fill ----------------------------------------------------------------------------

@export(method=True)
def masked_fill(input, mask, value):
    """``input`` with ``value`` where ``mask`` is True (``mask`` broadcasts to ``input``'s
    shape); the gradient goes to ``input`` elsewhere, and to a 0-d tensor ``value``."""
    m = mask._value() if isinstance(mask, Tensor) else np.asarray(mask)
    if m.dtype != np.bool_:
        raise RuntimeError(f"masked_fill: only supports boolean masks, but got mask with dtype "
                           f"{_dtypes.as_dtype(m.dtype).name if m.dtype.kind in 'fiub' else m.dtype}")
    if isinstance(value, Tensor) and value._shape:
        raise RuntimeError(f"masked_fill: only supports a 0-dimensional value tensor, but got tensor "
                           f"with {len(value._shape)} dimension(s).")
    if broadcast_shapes("masked_fill", m.shape, input._shape) != input._shape:
        raise RuntimeError(f"masked_fill: the mask's shape {list(m.shape)} does not broadcast to the "
                           f"input's shape {list(input._shape)}")
    out = where(_concrete(m), value, input)
    return out if out._dtype is input._dtype else _cast(out, input._dtype)


@export(method=True, function=False)
def masked_fill_(input, mask, value):
    from tapejit.inplace import apply_inplace
    return apply_inplace(input, lambda: masked_fill(input, mask, value), "masked_fill_")


# ---- where --------------------------------------------------------------------------------

@export(method=False)
def where(condition, input=None, other=None):
    cond = condition._value() if isinstance(condition, Tensor) else np.asarray(condition)
    if input is None and other is None:
        return tuple(_concrete(i.astype(np.int64)) for i in np.nonzero(cond))
    x = as_tensor_operand(input, other if isinstance(other, Tensor) else None)
    y = as_tensor_operand(other, x)
    dt = result_dtype(x, y)
    shape = broadcast_shapes("where", broadcast_shapes("where", cond.shape, x._shape), y._shape)
    if not dt.is_floating_point or (_plain(x) and _plain(y)):
        return _concrete(np.where(cond, x._value(), y._value()).astype(dt.np))
    x = float_input(x) if x._dtype is not dt else x
    y = float_input(y) if y._dtype is not dt else y
    if x._dtype is not dt:
        x = _cast(x, dt)
    if y._dtype is not dt:
        y = _cast(y, dt)
    if x._shape != shape:
        x = _expand(x, shape)
    if y._shape != shape:
        y = _expand(y, shape)
    c = np.broadcast_to(cond, shape).reshape(-1).astype(np.int64)
    if not on_tape(x, y):
        return eager(_where_record, x, y, c, shape, dt)
    return _where_record(x, y, c, shape, dt)


def _where_record(x, y, c, shape, dt):
    tape = _state.tape or _current()
    p = tape.add_ints([c.size] + c.tolist())
    return record(WHERE, (x, y), shape, dt, p, c.size)


def _where_method(self, condition, other):
    return where(condition, self, other)


Tensor.where = _where_method
