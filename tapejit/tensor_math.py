"""Tensor math built from other ops: torch's front ends whose gradient follows from ops
already on the tape.

Each function here computes its element positions (or its pieces) in Python and records
existing ops: gathers under torch's names (flip, roll, diagonal, ...) and placements
(scatter, index_add, tril, diag_embed, ...) from ``tapejit/ops/indexed.py``, and
compositions of matmul, permute, reshape, expand, sum, mul and cat (einsum, tensordot,
kron, cross, addmm, cdist, meshgrid ...), each piece one record, as torch decomposes
einsum into bmm.  Functions with no gradient (nonzero, unique, bincount, histc,
count_nonzero, isclose, the bitwise ops) compute in NumPy and return torch's dtypes:
int64 indices and counts, bool tests.
"""
import builtins
import warnings

import numpy as np

from tapejit import dtypes as _dtypes
from tapejit.api import export, front_ends
from tapejit.inplace import apply_inplace, in_place
from tapejit.ops import indexed as _ops
from tapejit.ops.movement import INDEX
from tapejit.ops.indexing import _gather, _index_values
from tapejit.ops.join import _slice_dim
from tapejit.ops.views import _plain
from tapejit.recording import (as_tensor_operand, broadcast_shapes, cast as _cast, eager, expand as _expand,
                               name_composite, narrowed, on_tape, record, result_dtype, wide)
from tapejit.shapes import axis_layout, numel as _numel, wrap_dim as _wrap_dim
from tapejit.tape import current as _current, state as _state
from tapejit.tensor import Tensor, _concrete

def _tj():
    return front_ends   # tj's front ends (this module is imported by the facade, not above it)


def _grid(shape):
    """Flat element positions of a tensor of ``shape``, in that shape."""
    return np.arange(_numel(shape), dtype=np.int64).reshape(shape)


def _gathered(op, x, positions):
    """``x.flatten()[positions]``, recorded as ``op`` (a gather) when it needs a gradient."""
    positions = np.asarray(positions, dtype=np.int64)
    if not x._dtype.is_floating_point or _plain(x):
        return _concrete(np.array(x._value().reshape(-1)[positions]))   # (ascontiguousarray makes 0-d 1-d)
    return _gather(op, x, positions)


def _place(op, shape, base, source, mode, dest, src, fill=0.0):
    """A tensor of ``shape``: ``base`` (or ``fill``), with ``source``'s elements ``src`` set
    into (mode 0), added to (1) positions ``dest``, or ``fill`` set there (2, no source)."""
    dest = np.asarray(dest, dtype=np.int64).reshape(-1)
    src = np.asarray(src, dtype=np.int64).reshape(-1) if source is not None else np.zeros(0, np.int64)
    inputs = tuple(t for t in (base, source) if t is not None)
    dt = inputs[0]._dtype if inputs else _dtypes.get_default_dtype()
    for t in inputs[1:]:
        dt = result_dtype(inputs[0], t)
    if not dt.is_floating_point or not on_tape(*inputs):
        out = (base._value().astype(dt.np, copy=True).reshape(-1) if base is not None
               else np.full(_numel(shape), fill, dt.np))
        values = source._value().reshape(-1)[src] if source is not None else fill
        if mode == 1:
            np.add.at(out, dest, values)
        else:
            out[dest] = values
        return _concrete(out.reshape(shape))
    inputs = tuple(t if t._dtype is dt else _cast(t, dt) for t in inputs)
    tape = _state.tape or _current()
    p = tape.add_ints([mode, int(base is not None), dest.size, _numel(shape),
                       source._numel if source is not None else 0] + dest.tolist() + src.tolist())
    q = tape.add_floats(float(fill))
    return record(op, inputs, tuple(shape), dt, p, q)


def _dims(dims):
    if isinstance(dims, (tuple, list)):
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            return tuple(dims[0])
        return tuple(dims)
    return (dims,)


# ---- flips, rolls, rotations ------------------------------------------------------------

@export(method=True)
def flip(input, dims=(), *more_dims):
    dims = _dims(dims) + more_dims   # x.flip(0, 1) as well as flip(x, (0, 1))
    nd = len(input._shape)
    wrapped = [_wrap_dim(d, nd, "flip") for d in dims]
    for d in wrapped:
        if wrapped.count(d) > 1:
            raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
    if not input._shape:
        return _gathered(_ops.FLIP, input, _grid(()))
    return _gathered(_ops.FLIP, input, np.flip(_grid(input._shape), tuple(wrapped)))


@export(method=True)
def fliplr(input):
    if len(input._shape) < 2:
        raise RuntimeError("Input must be >= 2-d.")
    return flip(input, 1)


@export(method=True)
def flipud(input):
    if len(input._shape) < 1:
        raise RuntimeError("Input must be >= 1-d.")
    return flip(input, 0)


@export(method=True)
def roll(input, shifts, dims=None):
    shifts = _dims(shifts)
    dims = () if dims is None else _dims(dims)
    if not dims:
        if len(shifts) != 1:
            raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:0")
        flat = np.roll(np.arange(input._numel, dtype=np.int64), int(shifts[0]))
        return _gathered(_ops.ROLL, input, flat.reshape(input._shape))
    if len(shifts) != len(dims):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}")
    nd = len(input._shape)
    axes = tuple(_wrap_dim(d, nd, "roll") for d in dims)
    grid = _grid(input._shape)
    if input._shape:
        grid = np.roll(grid, tuple(int(s) for s in shifts), axes)
    return _gathered(_ops.ROLL, input, grid)


@export(method=True)
def rot90(input, k=1, dims=(0, 1)):
    dims = tuple(dims)
    if len(dims) != 2:
        raise RuntimeError(f"expected total rotation dims == 2, but got dims = {len(dims)}")
    nd = len(input._shape)
    if nd < 2:
        raise RuntimeError(f"expected total dims >= 2, but got total dims = {nd}")
    d0, d1 = _wrap_dim(dims[0], nd, "rot90"), _wrap_dim(dims[1], nd, "rot90")
    if d0 == d1:
        raise RuntimeError(f"expected rotation dims to be different, but got dim0 = {dims[0]} and dim1 = {dims[1]}")
    return _gathered(_ops.ROT90, input, np.rot90(_grid(input._shape), k, (d0, d1)))


# ---- diagonals, triangles, trace ----------------------------------------------------------

@export(method=True)
def diagonal(input, offset=0, dim1=0, dim2=1):
    nd = len(input._shape)
    a, b = _wrap_dim(dim1, nd, "diagonal"), _wrap_dim(dim2, nd, "diagonal")
    if a == b:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    return _gathered(_ops.DIAGONAL, input, np.diagonal(_grid(input._shape), offset, a, b))


@export(method=True)
def diag_embed(input, offset=0, dim1=-2, dim2=-1):
    shape = input._shape
    nd = len(shape) + 1
    a, b = _wrap_dim(dim1, nd, "diag_embed"), _wrap_dim(dim2, nd, "diag_embed")
    if a == b:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    n = (shape[-1] if shape else 1) + builtins.abs(offset)
    rest = list(shape[:-1])
    out_shape = []
    for d in range(nd):
        out_shape.append(n if d in (a, b) else rest.pop(0))
    # The output's diagonal (in torch's layout: its positions, last dim along the diagonal)
    # has the input's shape.
    dest = np.diagonal(_grid(out_shape), offset, a, b)
    return _place(_ops.DIAG_EMBED, tuple(out_shape), None, input, 0, dest,
                  np.arange(input._numel, dtype=np.int64))


@export(method=True)
def diag(input, diagonal=0):
    nd = len(input._shape)
    if nd == 1:
        return diag_embed(input, diagonal, 0, 1)
    if nd == 2:
        return globals()["diagonal"](input, diagonal)
    raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {nd}D")


@export(method=True)
def diagflat(input, offset=0):
    return diag_embed(input.reshape(-1), offset, 0, 1)


def _triangle_indices(name, row, col, offset, dtype, lower):
    if row < 0:
        raise RuntimeError(f"row must be non-negative, got{row}")
    if col < 0:
        raise RuntimeError(f"col must be non-negative, got{col}")
    dt = _dtypes.as_dtype(dtype, name) if dtype is not None else _dtypes.int64
    if dt is not _dtypes.int64:
        raise NotImplementedError(f"tapejit: {name}(dtype={dt.name}): only int64 indices are supported")
    kept = np.tri(row, col, offset, dtype=bool) if lower else ~np.tri(row, col, offset - 1, dtype=bool)
    rows, cols = np.nonzero(kept)
    return _concrete(np.stack([rows, cols]).astype(np.int64).reshape(2, -1))


@export()
def tril_indices(row, col, offset=0, *, dtype=None, device=None, layout=None):
    return _triangle_indices("tril_indices", row, col, offset, dtype, True)


@export()
def triu_indices(row, col, offset=0, *, dtype=None, device=None, layout=None):
    return _triangle_indices("triu_indices", row, col, offset, dtype, False)


def _triangle(op, input, diagonal, lower):
    shape = input._shape
    if len(shape) < 2:
        raise RuntimeError(f"{op.name}: input tensor must have at least 2 dimensions")
    rows, cols = shape[-2:]
    keep = np.tri(rows, cols, diagonal, dtype=bool) if lower else ~np.tri(rows, cols, diagonal - 1, dtype=bool)
    kept = _grid(shape)[np.broadcast_to(keep, shape)]
    return _place(op, shape, None, input, 0, kept, kept)


@export(method=True)
def tril(input, diagonal=0):
    return _triangle(_ops.TRIL, input, diagonal, True)


@export(method=True)
def triu(input, diagonal=0):
    return _triangle(_ops.TRIU, input, diagonal, False)


@export(method=True)
def trace(input):
    shape = input._shape
    if len(shape) != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {len(shape)}")
    if input._dtype is _dtypes.bool_:
        raise NotImplementedError("\"trace\" not implemented for 'Bool'")
    d = np.diagonal(_grid(shape))
    if not input._dtype.is_floating_point or not on_tape(input):
        return _concrete(np.asarray(input._value().reshape(-1)[d].sum()))
    diag_values = _gather(_ops.DIAGONAL, input, d)
    tape = _state.tape or _current()
    p = tape.add_ints((1, 1, d.size, 0))
    q = tape.add_floats(1.0)
    return record(_ops.TRACE, (diag_values,), (), input._dtype, p, q)


# ---- cumulative sums and products ------------------------------------------------------------

def _cumulative(op, input, dim, dtype, name):
    if dtype is not None:
        input = input.to(_dtypes.as_dtype(dtype, name))
    if input._dtype.narrow:   # torch accumulates in float32 and rounds each output once
        return narrowed(_cumulative(op, wide(input), dim, None, name), input._dtype)
    shape = input._shape
    d = _wrap_dim(dim, len(shape), name)
    if not input._dtype.is_floating_point:
        v = input._value().astype(np.int64)   # torch: bool and int64 accumulate as int64
        fn = np.cumprod if op is _ops.CUMPROD else np.cumsum
        return _concrete(fn(v, axis=d) if shape else v.copy())
    if _plain(input):
        fn = np.cumprod if op is _ops.CUMPROD else np.cumsum
        v = input._value()
        return _concrete(fn(v, axis=d) if shape else v.copy())
    if not on_tape(input):
        return eager(_cumulative, op, input, dim, None, name)
    outer, length, inner = axis_layout(shape, (d,)) if shape else (1, 1, 1)
    tape = _state.tape or _current()
    p = tape.add_ints((outer, length, inner, int(op is _ops.CUMPROD)))
    return record(op, (input,), shape, input._dtype, p, 0)


@export(method=True)
def cumsum(input, dim, *, dtype=None):
    return _cumulative(_ops.CUMSUM, input, dim, dtype, "cumsum")


@export(method=True)
def cumprod(input, dim, *, dtype=None):
    return _cumulative(_ops.CUMPROD, input, dim, dtype, "cumprod")


def _cumulative_(name, fn):
    def method(input, dim, *, dtype=None):
        return apply_inplace(input, lambda: fn(input, dim, dtype=dtype), name)
    method.__name__ = method.__qualname__ = name
    return method


export(_cumulative_("cumsum_", cumsum), method=True, function=False)
export(_cumulative_("cumprod_", cumprod), method=True, function=False)


# ---- slices and windows --------------------------------------------------------------------

@export(method=True)
def select(input, dim, index):
    """``input[..., index, ...]`` along ``dim`` (torch's node SelectBackward0, as an integer index)."""
    shape = input._shape
    if not shape:
        raise IndexError("select() cannot be applied to a 0-dim tensor.")
    d = _wrap_dim(dim, len(shape), "select")
    index = int(index.item() if isinstance(index, Tensor) else index)
    if not -shape[d] <= index < shape[d]:
        raise IndexError(f"select(): index {index} out of range for tensor of size {list(shape)} at dimension {d}")
    return input[(slice(None),) * d + (index,)]


@export(method=True)
def narrow(input, dim, start, length):
    shape = input._shape
    if not shape:
        raise RuntimeError("narrow() cannot be applied to a 0-dim tensor.")
    d = _wrap_dim(dim, len(shape), "narrow")
    size = shape[d]
    start = int(start.item() if isinstance(start, Tensor) else start)
    if not -size <= start <= size:
        raise IndexError(f"start out of range (expected to be in range of [{-size}, {size}], but got {start})")
    if start < 0:
        start += size
    if length < 0:
        raise RuntimeError("narrow(): length must be non-negative.")
    if start + length > size:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size ({size}).")
    return _slice_dim(input, d, start, start + length)


def _unfold(input, dimension, size, step):
    shape = input._shape
    nd = len(shape)
    d = _wrap_dim(dimension, nd, "unfold")
    length = shape[d] if shape else 1
    if size > length:
        raise RuntimeError(f"maximum size for tensor at dimension {d} is {length} but size is {size}")
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    if size < 0:
        raise RuntimeError(f"size is {size} but must be >= 0")
    grid = _grid(shape if shape else (1,))
    windows = np.lib.stride_tricks.sliding_window_view(grid, size, axis=d)
    windows = windows[(slice(None),) * d + (slice(None, None, step),)]
    if not shape:
        windows = windows.reshape(size)
    return _gathered(_ops.UNFOLD, input, windows)


export(_unfold, name="unfold", method=True, function=False)


@export(method=True)
def take(input, index):
    idx = _index_values("take", index, "int64")
    n = input._numel
    bad = (idx < -n) | (idx >= n)
    if bad.any():
        raise IndexError(f"out of range: tried to access index {idx[bad].reshape(-1)[0]} on a tensor of {n} elements.")
    return _gathered(_ops.TAKE, input, np.where(idx < 0, idx + n, idx))


@export(method=True)
def repeat_interleave(input, repeats=None, dim=None, *, output_size=None):
    if repeats is None:   # repeat_interleave(counts): each index repeated by its count
        counts = _repeats_values(input)
        if counts.ndim != 1:
            raise RuntimeError("repeat_interleave only accept 1D vector as repeat")
        return _concrete(np.repeat(np.arange(counts.size, dtype=np.int64), counts))
    x = input
    if dim is None:
        x = x.reshape(-1)
        d = 0
    else:
        d = _wrap_dim(dim, len(x._shape), "repeat_interleave")
    length = x._shape[d] if x._shape else 1
    if isinstance(repeats, Tensor):
        counts = _repeats_values(repeats).reshape(-1)
        if counts.size == 1:
            counts = np.full(length, counts[0])
        elif counts.size != length:
            raise RuntimeError(f"repeats must have the same size as input along dim, but got repeats.size(0) = "
                               f"{counts.size} and input.size({d}) = {length}")
    else:
        counts = np.full(length, int(repeats), dtype=np.int64)
    if (counts < 0).any():
        raise RuntimeError("Repeats must be non-negative")
    if output_size is not None and int(counts.sum()) != output_size:
        raise RuntimeError(f"repeat_interleave: output_size ({output_size}) does not match the sum of repeats "
                           f"({int(counts.sum())})")
    grid = _grid(x._shape if x._shape else (1,))
    positions = np.repeat(grid, counts, axis=d)
    return _gathered(INDEX, x, positions)


def _repeats_values(t):
    v = t._value()
    if v.dtype.kind not in "iu":
        raise RuntimeError(f"repeat_interleave: repeats has to be Long or Int tensor (got {t._dtype.name})")
    return v.astype(np.int64)


# ---- scatter and index_* -----------------------------------------------------------------------

def _index_tensor(name, index, allowed="int64"):
    return _index_values(name, index, allowed, but_got=True)


def _check_range(idx, size, d, error=RuntimeError, prefix=""):
    bad = (idx < 0) | (idx >= size)
    if bad.any():
        raise error(f"{prefix}index {idx[bad].reshape(-1)[0]} is out of bounds for dimension {d} with size {size}")


def _scatter_positions(name, input, dim, index, src_shape):
    """(dest, src) flat positions of ``input.scatter(dim, index, src)``."""
    shape = input._shape
    nd = len(shape)
    d = _wrap_dim(dim, nd, name)
    idx = _index_tensor(name, index)
    if max(idx.ndim, 1) != max(nd, 1):
        raise RuntimeError("Index tensor must have the same number of dimensions as self tensor")
    in_shape = shape if shape else (1,)
    idx = idx.reshape(idx.shape if idx.ndim else (1,))
    if src_shape is not None:
        src_shape = src_shape if src_shape else (1,)
        if len(src_shape) != len(in_shape):
            raise RuntimeError("Index tensor must have the same number of dimensions as src tensor")
        for k, n in enumerate(idx.shape):
            if n > src_shape[k] or (k != d and n > in_shape[k]):
                raise RuntimeError(f"Expected index {list(index._shape)} to be no larger than self {list(shape)} "
                                   f"apart from dimension {d} and to be no larger size than src {list(src_shape)}")
    else:
        for k, n in enumerate(idx.shape):
            if k != d and n > in_shape[k]:
                raise RuntimeError(f"Expected index {list(index._shape)} to be no larger than self {list(shape)} "
                                   f"apart from dimension {d}")
    _check_range(idx, in_shape[d], d)
    coords = list(np.indices(idx.shape, dtype=np.int64)) if idx.size else [np.zeros(0, np.int64)] * idx.ndim
    src = np.ravel_multi_index(coords, src_shape) if src_shape is not None and idx.size else np.zeros(0, np.int64)
    coords[d] = idx
    dest = np.ravel_multi_index(coords, in_shape) if idx.size else np.zeros(0, np.int64)
    return dest, src


def _same_dtype(name, input, src):
    if src._dtype is not input._dtype:
        raise RuntimeError(f"{name}(): Expected self.dtype to be equal to src.dtype")


@export(method=True)
def scatter(input, dim, index, src=None, value=None, *, reduce=None):
    if src is None and value is None:
        raise TypeError("scatter() missing required argument 'src' or 'value'")
    if src is None:
        src = value
    mode = 0
    if reduce is not None:
        if reduce != "add":
            raise NotImplementedError(f"tapejit: scatter(reduce={reduce!r}) is not supported (only 'add'); "
                                      f"use scatter_reduce for other reductions")
        mode = 1
    if not isinstance(src, Tensor):
        dest, _ = _scatter_positions("scatter", input, dim, index, None)
        if mode == 1:
            return _place(_ops.SCATTER_ADD, input._shape, input, _concrete(
                np.full(dest.size, src, input._dtype.np)), 1, dest, np.arange(dest.size))
        return _place(_ops.SCATTER_VALUE, input._shape, input, None, 2, dest, None, float(src))
    _same_dtype("scatter", input, src)
    dest, at = _scatter_positions("scatter", input, dim, index, src._shape)
    return _place(_ops.SCATTER_ADD if mode else _ops.PLACE, input._shape, input, src, mode, dest, at)


@export(method=True)
def scatter_add(input, dim, index, src):
    _same_dtype("scatter_add", input, src)
    dest, at = _scatter_positions("scatter_add", input, dim, index, src._shape)
    return _place(_ops.SCATTER_ADD, input._shape, input, src, 1, dest, at)


def _index_positions(name, input, dim, index, source_shape=None, error=RuntimeError, prefix=""):
    """Flat positions in ``input`` of the slices ``index`` picks along ``dim``, in the
    shape of ``source`` (``index``'s length at ``dim``)."""
    shape = input._shape
    d = _wrap_dim(dim, len(shape), name)
    idx = _index_tensor(name, index, "int32/int64" if name == "index_add_" else "int64")
    if idx.ndim > 1:
        raise IndexError(f"{name}(): Index is supposed to be a vector")
    idx = idx.reshape(-1)
    in_shape = shape if shape else (1,)
    if source_shape is not None:
        src = source_shape if source_shape else (1,)
        n = src[d] if len(src) > d else 1
        if idx.size != n:
            raise RuntimeError(f"{name}(): Number of indices ({idx.size}) should be equal to source.size(dim): "
                               f"({n}), for dim: {d}")
        if len(src) != len(in_shape) or any(a != b for k, (a, b) in enumerate(zip(src, in_shape)) if k != d):
            raise RuntimeError(f"{name}(): source {list(source_shape)} and self {list(shape)} must have the same "
                               f"shape apart from dimension {d}")
    _check_range(idx, in_shape[d], d, error, prefix)
    return np.take(_grid(in_shape), idx, axis=d)


@export(method=True)
def index_add(input, dim, index, source, *, alpha=1):
    dest = _index_positions("index_add_", input, dim, index, source._shape)
    _same_dtype("index_add", input, source)
    if alpha != 1:
        source = source * alpha
    return _place(_ops.INDEX_ADD, input._shape, input, source, 1, dest, np.arange(source._numel))


@export(method=True)
def index_copy(input, dim, index, source):
    dest = _index_positions("index_copy_", input, dim, index, source._shape, IndexError, "index_copy_(): ")
    _same_dtype("index_copy", input, source)
    return _place(_ops.INDEX_COPY, input._shape, input, source, 0, dest, np.arange(source._numel))


@export(method=True)
def index_fill(input, dim, index, value):
    dest = _index_positions("index_fill_", input, dim, index, None, IndexError)
    if isinstance(value, Tensor):
        if value._shape:
            raise RuntimeError(f"index_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                               f"{len(value._shape)} dimension(s).")
        if value._rg and _state.grad:   # a differentiable fill value: where() carries its gradient
            mask = np.zeros(input._numel, bool)
            mask[dest.reshape(-1)] = True
            return _tj().where(_concrete(mask.reshape(input._shape)), value, input)
        value = value.item()
    return _place(_ops.INDEX_FILL, input._shape, input, None, 2, dest, None, float(value))


for _fn in (scatter, scatter_add, index_add, index_copy, index_fill, tril, triu):
    export(in_place(_fn.__name__ + "_", _fn), method=True, function=False)


# ---- products: einsum, tensordot, kron, cross, addmm, baddbmm, addmv -------------------------

def _mm(x, y):
    return _tj().matmul(x, y)


def _contract(a, la, b, lb, keep):
    """``a`` (letters ``la``) times ``b`` (``lb``), summing the shared letters not in
    ``keep``, as one batched matmul: (batch, a only, shared) @ (batch, shared, b only)."""
    tj = _tj()
    batch = [c for c in la if c in lb and c in keep]
    summed = [c for c in la if c in lb and c not in keep]
    a_only = [c for c in la if c not in lb]
    b_only = [c for c in lb if c not in la]
    size = {c: n for c, n in zip(la, a._shape)}
    size.update({c: n for c, n in zip(lb, b._shape)})
    a = tj.permute(a, [la.index(c) for c in batch + a_only + summed])
    b = tj.permute(b, [lb.index(c) for c in batch + summed + b_only])
    nb, m, k, n = (_numel([size[c] for c in part]) for part in (batch, a_only, summed, b_only))
    out = _mm(a.reshape(nb, m, k), b.reshape(nb, k, n))
    return out.reshape([size[c] for c in batch + a_only + b_only]), batch + a_only + b_only


def _einsum_parse(equation, operands):
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) > len(operands):
        raise RuntimeError("einsum(): fewer operands were provided than specified in the equation")
    if len(terms) < len(operands):
        raise RuntimeError("einsum(): more operands were provided than specified in the equation")
    # "..." becomes placeholder letters, right-aligned across operands (broadcast dims).
    ell = 0
    for term, x in zip(terms, operands):
        if "..." in term:
            ell = builtins.max(ell, len(x._shape) - (len(term) - 3))
    placeholders = [chr(0x400 + i) for i in range(ell)]
    letters = []
    for i, (term, x) in enumerate(zip(terms, operands)):
        nd = len(x._shape)
        if "..." in term:
            head, _, tail = term.partition("...")
            n = nd - len(head) - len(tail)
            if n < 0:
                raise RuntimeError(f"einsum(): the number of subscripts in the equation ({len(head) + len(tail)}) "
                                   f"is more than the number of dimensions ({nd}) for operand {i}")
            letters.append(list(head) + placeholders[ell - n:] + list(tail))
        else:
            if len(term) != nd:
                raise RuntimeError(f"einsum(): the number of subscripts in the equation ({len(term)}) does not match "
                                   f"the number of dimensions ({nd}) for operand {i} and no ellipsis was given")
            letters.append(list(term))
        for c in term.replace("...", ""):
            if not c.isalpha():
                raise RuntimeError(f"einsum(): invalid subscript given at index {eq.index(c)} in the equation "
                                   f"string, subscripts must be in [a-zA-Z]")
    if arrow:
        head, dots, tail = rhs.partition("...")
        out = list(head) + (placeholders if dots else []) + list(tail)
        for c in rhs.replace("...", ""):
            if not any(c in term for term in letters):
                raise RuntimeError(f"einsum(): output subscript {c} does not appear in the equation for any input "
                                   f"operand")
            if rhs.count(c) > 1:
                raise RuntimeError(f"einsum(): output subscript {c} appears more than once in the output")
    else:
        counts = {}
        for term in letters:
            for c in term:
                counts[c] = counts.get(c, 0) + 1
        out = placeholders + sorted(c for c, n in counts.items() if n == 1 and c not in placeholders)
    return letters, out


@export()
def einsum(equation, *operands):
    tj = _tj()
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    for i, x in enumerate(operands):
        if not isinstance(x, Tensor):
            raise TypeError(f"einsum(): expected Tensor as element {i} in argument 1, but got {type(x).__name__}")
    letters, out = _einsum_parse(equation, operands)
    # Sizes per letter; size-1 dims broadcast (torch's einsum does).
    size = {}
    for i, (term, x) in enumerate(zip(letters, operands)):
        for c, n in zip(term, x._shape):
            seen = size.get(c)
            if seen is None or seen == 1:
                size[c] = n
            elif n != 1 and n != seen:
                shown = c if c.isascii() else "..."
                raise RuntimeError(f"einsum(): subscript {shown} has size {n} for operand {i} which does not "
                                   f"broadcast with previously seen size {seen}")
    dt = operands[0]._dtype
    for x in operands[1:]:
        if x._dtype is not dt:
            raise RuntimeError(f"expected scalar type {_TORCH_SCALAR[dt.name]} but found "
                               f"{_TORCH_SCALAR[x._dtype.name]}")
    if not dt.is_floating_point:
        # NumPy's einsum takes letters only: the "..." placeholders become unused ones.
        free = iter(c for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in equation)
        named = {c: c if c.isascii() else next(free) for term in letters for c in term}
        spec = ",".join("".join(named[c] for c in term) for term in letters) + "->" + "".join(named[c] for c in out)
        return _concrete(np.asarray(np.einsum(spec, *[x._value() for x in operands])))
    items = []
    for term, x in zip(letters, operands):
        # Repeated letters in one operand: take that diagonal (the letter moves to the end).
        while True:
            repeated = [c for c in dict.fromkeys(term) if term.count(c) > 1]
            if not repeated:
                break
            c = repeated[0]
            i = term.index(c)
            j = term.index(c, i + 1)
            x = diagonal(x, 0, i, j)
            term = [e for k, e in enumerate(term) if k not in (i, j)] + [c]
        # Size-1 dims of a letter that another operand has larger: expand (broadcast).
        full = [size[c] for c in term]
        if list(x._shape) != full:
            x = _expand(x, tuple(full))
        items.append((x, term))
    # Contract left to right, summing each letter as soon as no later operand or the
    # output needs it.
    def needed_after(k):
        return set(out).union(*[set(t) for _, t in items[k + 1:]])

    x, term = items[0]
    x, term = _sum_unneeded(x, term, needed_after(0))
    for k in range(1, len(items)):
        y, yterm = items[k]
        later = needed_after(k)
        y, yterm = _sum_unneeded(y, yterm, later | set(term))
        x, term = _contract(x, term, y, yterm, later)
    if term != out:
        x = tj.permute(x, [term.index(c) for c in out])
    return x


def _sum_unneeded(x, term, needed):
    gone = [i for i, c in enumerate(term) if c not in needed]
    if not gone:
        return x, term
    return x.sum(gone), [c for c in term if c in needed]


_TORCH_SCALAR = _dtypes.SCALAR_TYPE_NAMES


@export()
def tensordot(a, b, dims=2, out=None):
    tj = _tj()
    if isinstance(dims, Tensor):
        dims = dims.tolist()
    if isinstance(dims, int):
        if dims < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={dims}")
        da = list(range(len(a._shape) - dims, len(a._shape)))
        db = list(range(dims))
    else:
        da, db = dims
        da = [da] if isinstance(da, int) else list(da)
        db = [db] if isinstance(db, int) else list(db)
    if len(da) != len(db):
        raise RuntimeError(f"both dimension lists should have same length (got {len(da)} and {len(db)})")
    da = [_wrap_dim(d, len(a._shape), "tensordot") for d in da]
    db = [_wrap_dim(d, len(b._shape), "tensordot") for d in db]
    for i, j in zip(da, db):
        if a._shape[i] != b._shape[j]:
            raise RuntimeError(f"contracted dimensions need to match, but first has size {a._shape[i]} in dim {i} "
                               f"and second has size {b._shape[j]} in dim {j}")
    free_a = [d for d in range(len(a._shape)) if d not in da]
    free_b = [d for d in range(len(b._shape)) if d not in db]
    k = _numel([a._shape[d] for d in da])
    x = tj.permute(a, free_a + da).reshape(_numel([a._shape[d] for d in free_a]), k)
    y = tj.permute(b, db + free_b).reshape(k, _numel([b._shape[d] for d in free_b]))
    result = _mm(x, y).reshape([a._shape[d] for d in free_a] + [b._shape[d] for d in free_b])
    if out is not None:
        raise NotImplementedError("tapejit: tensordot(out=...) is not supported")
    return result


@export(method=True)
def kron(input, other):
    other = as_tensor_operand(other, input)
    nd = builtins.max(len(input._shape), len(other._shape))
    sa = (1,) * (nd - len(input._shape)) + input._shape
    sb = (1,) * (nd - len(other._shape)) + other._shape
    a = input.reshape([v for s in sa for v in (s, 1)])
    b = other.reshape([v for s in sb for v in (1, s)])
    return (a * b).reshape([x * y for x, y in zip(sa, sb)])


@export(method=True)
def cross(input, other, dim=None):
    if len(input._shape) != len(other._shape):
        raise RuntimeError(f"linalg.cross: inputs must have the same number of dimensions. (shapes "
                           f"{list(input._shape)} and {list(other._shape)})")
    shape = broadcast_shapes("linalg.cross", input._shape, other._shape)
    if dim is None:
        warnings.warn("Using torch.cross without specifying the dim arg is deprecated.\nPlease either pass the dim "
                      "explicitly or simply use torch.linalg.cross.\nThe default value of dim will change to agree "
                      "with that of linalg.cross in a future release.", UserWarning, stacklevel=3)
        sizes = [k for k, n in enumerate(shape) if n == 3]
        if not sizes:
            raise RuntimeError("no dimension of size 3 in input")
        d = sizes[0]
    else:
        d = _wrap_dim(dim, len(shape), "linalg.cross")
    x = input if input._shape == shape else _expand(input, shape)
    y = other if other._shape == shape else _expand(other, shape)
    if shape[d] != 3:
        raise RuntimeError(f"linalg.cross: inputs dimension {dim if dim is not None else d} must have length 3. "
                           f"Got {input._shape[d]} and {other._shape[d]}")
    a = [narrow(x, d, i, 1) for i in range(3)]
    b = [narrow(y, d, i, 1) for i in range(3)]
    return name_composite(_tj().cat([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]],
                                    d), "LinalgCrossBackward0", input, other)


def _scaled_sum(name, input, product, beta, alpha):
    """``beta * input + alpha * product`` with ``input`` broadcast to the product's shape
    (torch's rule for addmm and friends: ``input`` is ignored, NaN and all, when beta is 0)."""
    shape = product._shape
    try:
        fits = broadcast_shapes(name, input._shape, shape) == shape
    except RuntimeError:
        fits = False
    if not fits:
        raise RuntimeError(f"{name}: The expanded size of the tensor must match the product's: input of shape "
                           f"{list(input._shape)} does not broadcast to {list(shape)}")
    if alpha != 1:
        product = product * alpha
    if beta == 0:
        return product
    return (input if beta == 1 else input * beta) + product


@export(method=True)
def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    if len(mat1._shape) != 2 or len(mat2._shape) != 2:
        raise RuntimeError(f"addmm: mat1 must be a matrix, got {len(mat1._shape)}-D tensor" if len(mat1._shape) != 2
                           else f"addmm: mat2 must be a matrix, got {len(mat2._shape)}-D tensor")
    return name_composite(_scaled_sum("addmm", input, _tj().mm(mat1, mat2), beta, alpha), "AddmmBackward0",
                          input, mat1, mat2)


@export(method=True)
def addmv(input, mat, vec, *, beta=1, alpha=1):
    if len(mat._shape) != 2 or len(vec._shape) != 1:
        raise RuntimeError(f"vector + matrix @ vector expected, got {len(input._shape)}, {len(mat._shape)}, "
                           f"{len(vec._shape)}")
    return name_composite(_scaled_sum("addmv", input, _tj().mv(mat, vec), beta, alpha), "AddmvBackward0",
                          input, mat, vec)


@export(method=True)
def baddbmm(input, batch1, batch2, *, beta=1, alpha=1):
    if len(batch1._shape) != 3 or len(batch2._shape) != 3:
        raise RuntimeError("batch1 must be a 3D tensor" if len(batch1._shape) != 3 else "batch2 must be a 3D tensor")
    b, n, k = batch1._shape
    if batch2._shape[:2] != (b, k):
        raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: [{b}, {k}] but got: "
                           f"[{batch2._shape[0]}, {batch2._shape[1]}].")
    return name_composite(_scaled_sum("baddbmm", input, _tj().bmm(batch1, batch2), beta, alpha),
                          "BaddbmmBackward0", input, batch1, batch2)


# ---- grids and distances ---------------------------------------------------------------------

@export()
def meshgrid(*inputs, indexing=None):
    # (not named ``tensors``: api's check would refuse the list form, meshgrid([x, y]))
    tensors = tuple(inputs[0]) if len(inputs) == 1 and isinstance(inputs[0], (list, tuple)) else inputs
    if indexing is None:
        warnings.warn("torch.meshgrid: in an upcoming release, it will be required to pass the indexing argument.",
                      UserWarning, stacklevel=3)
        indexing = "ij"
    if indexing not in ("ij", "xy"):
        raise RuntimeError(f'torch.meshgrid: indexing must be one of "xy" or "ij", but received: {indexing}')
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError(f"meshgrid(): expected Tensor as element {i} in argument 0, but got {type(t).__name__}")
        if len(t._shape) > 1:
            raise RuntimeError(f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list but got a tensor of "
                               f"shape {list(t._shape)}")
    if not tensors:
        raise RuntimeError("meshgrid expects a non-empty TensorList")
    axes = list(range(len(tensors)))
    if indexing == "xy" and len(tensors) >= 2:
        axes[0], axes[1] = 1, 0
    shape = [0] * len(tensors)
    for t, ax in zip(tensors, axes):
        shape[ax] = t._numel
    out = []
    for t, ax in zip(tensors, axes):
        lifted = [1] * len(shape)
        lifted[ax] = t._numel
        out.append(_expand(t.reshape(lifted), tuple(shape)))
    return tuple(out)


@export()
def cdist(x1, x2, p=2.0, compute_mode="use_mm_for_euclid_dist_if_necessary"):
    tj = _tj()
    for name, x in (("X1", x1), ("X2", x2)):
        if len(x._shape) < 2:
            raise RuntimeError(f"cdist only supports at least 2D tensors, {name} got: {len(x._shape)}D")
        if not x._dtype.is_floating_point:
            raise RuntimeError(f"cdist only supports floating-point dtypes, {name} got: "
                               f"{_TORCH_SCALAR[x._dtype.name]}")
    if x1._shape[-1] != x2._shape[-1]:
        raise RuntimeError(f"X1 and X2 must have the same number of columns. X1: {x1._shape[-1]} X2: "
                           f"{x2._shape[-1]}")
    if p < 0:
        raise RuntimeError("cdist only supports non-negative p values")
    diff = tj.unsqueeze(x1, -2) - tj.unsqueeze(x2, -3)
    if p == 0:
        return (diff != 0).sum(-1).to(diff.dtype) + diff.sum(-1) * 0.0
    return name_composite(tj.norm(diff, p if p != float("inf") else "inf", -1), "CdistBackward0", x1, x2)


# ---- counts, searches and tests (no gradient) --------------------------------------------------

@export(method=True)
def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    other = as_tensor_operand(other, input)
    if input._dtype is not other._dtype:
        raise RuntimeError(f"{_TORCH_SCALAR[input._dtype.name]} did not match {_TORCH_SCALAR[other._dtype.name]}")
    broadcast_shapes("isclose", input._shape, other._shape)
    return _concrete(np.asarray(np.isclose(input._value(), other._value(), rtol=rtol, atol=atol,
                                           equal_nan=equal_nan)))


@export(method=True)
def count_nonzero(input, dim=None):
    v = input._value()
    axis = None if dim is None else tuple(_wrap_dim(d, len(v.shape), "count_nonzero") for d in _dims(dim))
    return _concrete(np.asarray(np.count_nonzero(v, axis=axis), dtype=np.int64))


@export(method=True)
def nonzero(input, *, as_tuple=False):
    v = input._value()
    if as_tuple:
        return tuple(_concrete(i.astype(np.int64)) for i in np.nonzero(v.reshape(1) if v.ndim == 0 else v))
    if v.ndim == 0:
        return _concrete(np.zeros((int(v != 0), 0), np.int64))
    return _concrete(np.argwhere(v).astype(np.int64))


@export(method=True)
def argwhere(input):
    return nonzero(input)


@export(method=True)
def unique(input, sorted=True, return_inverse=False, return_counts=False, dim=None):
    v = input._value()
    axis = None if dim is None else _wrap_dim(dim, v.ndim, "unique")
    values, inverse, counts = np.unique(v, return_inverse=True, return_counts=True, axis=axis)
    out = [_concrete(np.ascontiguousarray(values))]
    if return_inverse:
        out.append(_concrete(inverse.astype(np.int64).reshape(v.shape if axis is None else -1)))
    if return_counts:
        out.append(_concrete(counts.astype(np.int64)))
    return out[0] if len(out) == 1 else tuple(out)


@export(method=True)
def bincount(input, weights=None, minlength=0):
    v = input._value()
    if v.dtype.kind not in "iu":
        raise NotImplementedError(f"\"bincount_cpu\" not implemented for '{_TORCH_SCALAR[input._dtype.name]}'")
    if v.ndim != 1 or (v < 0).any():
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    if weights is None:
        return _concrete(np.bincount(v, minlength=minlength).astype(np.int64))
    w = weights._value() if isinstance(weights, Tensor) else np.asarray(weights)
    if w.shape != v.shape:
        raise RuntimeError("weights should be 1-d and have the same length as input")
    # torch: float32 weights count in float32; any other weights in float64
    dt = np.float32 if w.dtype == np.float32 else np.float64
    return _concrete(np.bincount(v, weights=w.astype(np.float64), minlength=minlength).astype(dt))


@export(method=True)
def histc(input, bins=100, min=0, max=0):
    if not input._dtype.is_floating_point:
        raise NotImplementedError(f"\"histogram_cpu\" not implemented for '{_TORCH_SCALAR[input._dtype.name]}'")
    if bins <= 0:
        raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins} for dimension 0")
    v = input._value().reshape(-1)
    lo, hi = float(min), float(max)
    if lo == hi and v.size:
        lo, hi = float(v.min()), float(v.max())
    if lo == hi:
        lo, hi = lo - 1.0, hi + 1.0
    if lo > hi:
        raise RuntimeError("torch.histc: max must be larger than min")
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise RuntimeError(f"torch.histc: range of [{lo}, {hi}] is not finite")
    # torch's bins: edges linspace(min, max, bins + 1) in the input's dtype (computed from both
    # ends, as torch.linspace), an element in the last bin whose left edge it reaches; the
    # maximum itself in the last bin.
    dt = v.dtype.type
    lo, hi = dt(lo), dt(hi)
    step = (hi - lo) / dt(bins)
    k = np.arange(bins + 1)
    edges = np.where(k < (bins + 1) // 2, lo + step * k.astype(v.dtype), hi - step * (bins - k).astype(v.dtype))
    inside = v[(v >= lo) & (v <= hi)]
    index = np.searchsorted(edges, inside, side="right") - 1
    index[index >= bins] = bins - 1
    return _concrete(np.bincount(index, minlength=bins)[:bins].astype(input._dtype.np))


def _bitwise(name, fn):
    def bitwise(input, other):
        other = as_tensor_operand(other, input)
        for t in (input, other):
            if t._dtype.is_floating_point:
                raise NotImplementedError(f"\"{name}_cpu\" not implemented for '{_TORCH_SCALAR[t._dtype.name]}'")
        dt = result_dtype(input, other)
        return _concrete(np.asarray(fn(input._value(), other._value())).astype(dt.np))
    bitwise.__name__ = bitwise.__qualname__ = name
    return bitwise


_BITWISE = [_bitwise(_name, _np_fn) for _name, _np_fn in (("bitwise_and", np.bitwise_and), ("bitwise_or", np.bitwise_or),
                                                          ("bitwise_xor", np.bitwise_xor))]
for _fn in _BITWISE:
    export(_fn, method=True)


@export(method=True)
def bitwise_not(input):
    if input._dtype.is_floating_point:
        raise NotImplementedError(f"\"bitwise_not_cpu\" not implemented for '{_TORCH_SCALAR[input._dtype.name]}'")
    v = input._value()
    return _concrete(np.logical_not(v) if v.dtype == np.bool_ else np.invert(v))


for _fn in (*_BITWISE, bitwise_not, addmm, addmv, baddbmm):
    export(in_place(_fn.__name__ + "_", _fn), method=True, function=False)
