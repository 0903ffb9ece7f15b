"""Joining and splitting along a dim: cat (concat, concatenate), stack, hstack, vstack,
split, chunk, unbind.  Their kernels and table entries are in ``movement.py``.
"""
import numpy as np

from tapejit import dtypes as _dtypes
from tapejit.api import export
from tapejit.inplace import mark_multi_output
from tapejit.ops.movement import SLICE, CAT, STACK
from tapejit.ops.indexing import getitem
from tapejit.ops.views import _copy_range, _plain, _rows
from tapejit.recording import record, encode_operand, cast as _cast
from tapejit.shapes import numel as _numel, wrap_dim as _wrap_dim
from tapejit.tape import state as _state, current as _current
from tapejit.tensor import Tensor, _concrete, _taped


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
        return _concrete(_dtypes.as_storage(np.stack(arrays, d) if stack else np.concatenate(arrays, d), dt))
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
        mark_multi_output(out, "Unbind")
    return out
