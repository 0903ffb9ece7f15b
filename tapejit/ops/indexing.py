"""Indexing: ``x[key]`` and ``x[key] = value`` with torch's rules for basic and advanced
keys, gather, index_select, masked_fill and where.  Their kernels and table entries are
in ``movement.py``; basic keys make the views of ``views.py``.
"""
import warnings

import numpy as np

from tapejit import dtypes as _dtypes
from tapejit.api import export
from tapejit.ops.movement import RESHAPE, SELECT, SLICE, STRIDED_SLICE, INDEX, GATHER, INDEX_SELECT, WHERE
from tapejit.ops.views import (_TORCH_NAMES, _copy_range, _is_contiguous, _plain, _reshaped, _viewed,
                               strided_view)
from tapejit.recording import (record, contiguous_strides, broadcast_shapes, result_dtype, cast as _cast,
                               float_input, as_tensor_operand)
from tapejit.recording import expand as _expand
from tapejit.shapes import numel as _numel, wrap_dim as _wrap_dim
from tapejit.tape import state as _state, current as _current
from tapejit.recording import on_tape, eager, name_composite, record_binary
from tapejit.tensor import Tensor, _concrete
from tapejit import inplace as _inplace
from tapejit.inplace import (apply_inplace, check_leaf, check_view_leaf, note_write, refuse_overlap,
                             root_positions)
from tapejit.ops.binary import COPY


# ---- x[key], x[key] = value ----------------------------------------------------------------

def _is_basic(key):
    return all(k is None or k is Ellipsis or isinstance(k, (int, slice, np.integer)) and not isinstance(k, bool)
               for k in key)


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


def _small_int_index(v):
    """An index tensor of an integer dtype other than int64, as torch reads it: int32 as
    indices, uint8 as a mask (deprecated, with torch's warning), int8/int16 refused."""
    if v.dtype == np.int32:
        return v
    if v.dtype == np.uint8:
        warnings.warn("indexing with dtype torch.uint8 is now deprecated, please use a dtype torch.bool "
                      "instead.", UserWarning, stacklevel=4)
        return v.astype(np.bool_)
    raise IndexError("tensors used as indices must be long, int, byte or bool tensors")


def _norm_key(key):
    key = key if isinstance(key, tuple) else (key,)
    out = []
    for k in key:
        if isinstance(k, Tensor):
            v = k._value()
            if v.dtype.kind in "iu" and v.dtype != np.int64:
                v = _small_int_index(v)
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
            refuse_overlap("setitem", target)
        v = _setitem_value(value, target.shape, True)
        note_write(input)
        target[...] = v
        return
    if type(getattr(input, "_view", None)) is tuple:
        # A view: torch writes its part of the storage, as ``input[key].copy_(value)``.
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
    value = as_tensor_operand(value, part)
    _setitem_value(np.broadcast_to(np.False_, value._shape), part._shape, True)   # torch's errors
    while len(value._shape) > len(part._shape) and value._shape[0] == 1:
        value = _reshaped(value, value._shape[1:])
    if part._dtype.is_floating_point and (part._tape is not None or (value._rg and _state.grad)):
        return record_binary(COPY, part, value)
    return _expand(value, part._shape) if value._shape != part._shape else value


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


def _index_values(op, index, allowed, but_got=False):
    """The values of an index tensor, refusing float and bool indices as torch does (cast
    to int they would silently pick other elements).  ``but_got``: the message ends as
    torch's scatter/index_* family's does ("... for index but got: float32")."""
    if not isinstance(index, Tensor):
        raise TypeError(f"{op}(): argument 'index' must be Tensor, not {type(index).__name__}")
    idx = index._value()
    if idx.dtype != np.int64 and (idx.dtype != np.int32 or "int32" not in allowed):
        got = f" but got: {index._dtype.name}" if but_got else f" (got {index._dtype.name} indices)"
        raise RuntimeError(f"{op}(): Expected dtype {allowed} for index{got}")
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
        x = _broadcast_operand(x, shape)
    if y._shape != shape:
        y = _broadcast_operand(y, shape)
    size = x._numel
    c = np.empty(size + 1, np.int64)   # ints[p]: the size, then the mask
    c[0] = size
    c[1:] = np.broadcast_to(cond, shape).reshape(-1)
    if not on_tape(x, y):
        return eager(_where_record, x, y, c, shape, dt)
    return _where_record(x, y, c, shape, dt)


def _broadcast_operand(t, shape):
    """``t`` expanded to ``shape`` for a where record: a constant (``where(mask, g, 0.0)``,
    the masks of create_graph's formulas) as a NumPy broadcast the record loads, without
    an expand view's bookkeeping (~15 us); a taped one as an expand record."""
    if _plain(t):
        return _concrete(np.broadcast_to(t._value(), shape))
    return _expand(t, shape)


def _where_record(x, y, c, shape, dt):
    tape = _state.tape or _current()
    p = tape.add_int_array(c)
    return record(WHERE, (x, y), shape, dt, p, c.size - 1)


def _where_method(self, condition, other):
    return where(condition, self, other)


Tensor.where = _where_method


# In-place ops on views write through to their root by position (tapejit/inplace.py, below ops/)
_inplace.provide(assign_positions=assign_positions)
