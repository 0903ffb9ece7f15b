"""Views: reshape, view, flatten, squeeze/unsqueeze, permute/transpose/``T``, expand,
clone, repeat, contiguity and torch's strides, and the ``_view`` records that in-place
ops write through to a base (``tapejit/inplace.py``).  Their kernels and table entries
are in ``movement.py``.
"""
import numpy as np

from tapejit import dtypes as _dtypes
from tapejit import recording as _recording
from tapejit.api import export
from tapejit.ops.movement import (RESHAPE, UNSQUEEZE, SQUEEZE, SQUEEZE_DIM, CLONE, SLICE, UNBIND, PERMUTE, TRANSPOSE,
                                  TRANSPOSE_2D, EXPAND, STRIDED_SLICE)
from tapejit.recording import record, contiguous_strides, broadcast_shapes
from tapejit.recording import expand as _expand
from tapejit.shapes import numel as _numel, wrap_dim as _wrap_dim
from tapejit.tape import state as _state, current as _current, pack_record as _pack
from tapejit.recording import operand as _operand, on_tape, eager
from tapejit.tensor import Tensor, _concrete, _taped, provide as _provide_to_tensor
from tapejit import inplace as _inplace
from tapejit.inplace import ONE_OF_SEVERAL, register_view as _register_view, view_positions


# ---- views --------------------------------------------------------------------------------

def _plain(t):
    """A tensor whose shape ops can be NumPy views (no tape, no gradient wanted): torch
    aliasing, also for a parameter's views under ``no_grad``.  While tracing, only the
    trace's own tensors: one from outside is loaded (read live)."""
    return (t._tape is None and (not t._rg or not _state.grad)
            and (_state.trace is None or id(t) in _state.trace.readable))


# A view of a recorded tensor is a record of its own (a copy on the tape), so it carries
# ``_view = (base, where, stamp)`` for in-place ops to write through to its base
# (tapejit/inplace.py, which defines ``ONE_OF_SEVERAL`` and ``view_positions``): ``where``
# is the first element for a contiguous view, or ``(sizes, strides, start)``; ``stamp`` is
# ``(base._tape, base._off, version)`` when the view was taken (version None: not read),
# which tells whether the base changed since.
# Views of tensors with no history are NumPy views instead (``_plain``), sharing memory.


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


_TORCH_NAMES = _dtypes.SCALAR_TYPE_NAMES


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


# Tensor methods that are ops, and recording's broadcast view: both modules sit below ops/
_provide_to_tensor(contiguous=contiguous, is_contiguous=is_contiguous, rows=_rows)
_recording.provide(strided_view=strided_view)
_inplace.provide(view_again=view_again, torch_strides=torch_strides)
