"""In-place ops: version counters and PyTorch's errors for them.

Values on a tape are never overwritten: an in-place op records its out-of-place result
and rebinds the tensor to it (a leaf's own array is written instead).  What PyTorch
forbids is still forbidden: an in-place op on a leaf that requires grad, and backward
through a record that saved a value later modified in place; those records are marked
(``freed[r] = 2``) and the sweep stops there with PyTorch's message.
"""
import numpy as np

from tapejit import registry
from tapejit.tape import state

LEAF_ERROR = "a leaf Variable that requires grad is being used in an in-place operation."
LEAF_VIEW_ERROR = ("a view of a leaf Variable that requires grad is being used in an in-place "
                   "operation.")


def _saving_records(tape, arena, off, before):
    """Records before index ``before`` on ``tape`` whose backward reads the value at (arena, off)."""
    tape.flush()
    rec = tape.rec[:min(tape.nrec, before)]
    if not len(rec):
        return np.zeros(0, np.int64)
    codes = rec[:, 0]
    same_arena = (codes & 1) == arena
    a = np.where(rec[:, 2] < 0, ~rec[:, 2], rec[:, 2])
    b = np.where(rec[:, 3] < 0, ~rec[:, 3], rec[:, 3])
    saved = _saved_table()
    ops = codes >> 1
    hit = same_arena & (((a == off) & saved[ops, 0]) | ((b == off) & saved[ops, 1])
                        | ((rec[:, 1] == off) & saved[ops, 2]))
    return np.flatnonzero(hit)


_SAVED = []


def _saved_table():
    if not _SAVED or len(_SAVED[0]) != len(registry.OPS):
        table = np.zeros((len(registry.OPS), 3), bool)
        for op in registry.OPS:
            if op.saves:
                table[op.opcode] = ["a" in op.saved, "b" in op.saved, "o" in op.saved]
        _SAVED[:] = [table]
    return _SAVED[0]


def poison(tape, arena, off, t, old_version, before=None):
    rows = _saving_records(tape, arena, off, tape.n if before is None else before)
    if not len(rows):
        return
    if tape.poisoned is None:
        tape.poisoned = {}
    from tapejit.printing import type_name
    for r in rows.tolist():
        if tape.freed[r] != 2:
            tape.freed[r] = 2
            node = registry.OPS[tape.rec[r, 0] >> 1].node
            tape.poisoned[r] = (
                f"one of the variables needed for gradient computation has been modified by an "
                f"inplace operation: [{type_name(t)} {list(t._shape)}], which is used by {node}, "
                f"is at version {old_version + 1}; expected version {old_version} instead. Hint: "
                f"the backtrace further above can point to the operation that failed to compute "
                f"its gradient. The variable in question was changed in there or anywhere later. "
                f"Good luck!")


def note_leaf_write(t, before=None):
    """A concrete tensor's array is about to change: poison saved uses on this thread's tape."""
    if state.trace is not None:
        from tapejit.replay.trace import check_write
        check_write(t)
    old = getattr(t, "_version", 0)
    t._version = old + 1
    tape = state.tape
    if tape is None:
        return
    for d in (0, 1):
        for off, _, source in tape.loads_of.get((id(t), d), ()):
            if source is t:
                poison(tape, d, off, t, old, before)


def in_place(name, fn):
    """The method ``name`` (``add_``, ``exp_``, ...): ``fn(input, *args)`` stored into ``input``."""
    def method(input, *args, **kwargs):
        return apply_inplace(input, lambda: fn(input, *args, **kwargs), name)
    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"``{fn.__name__}`` in place."
    return method


def check_leaf(t, op):
    if t._tape is None and t._rg and state.grad:
        raise RuntimeError(LEAF_ERROR)


def apply_inplace(t, compute, op="in-place op"):
    """Make ``t`` hold ``compute()`` (its new value), with PyTorch's in-place semantics.

    ``compute`` records the out-of-place result; records it adds are the in-place op's
    own, so only earlier records that saved ``t``'s old value are marked."""
    view = getattr(t, "_view", None)
    if view is not None:
        return _through_view(t, view, compute, op)
    return _apply(t, compute, op)


def _through_view(t, view, compute, op):
    """An in-place op on a view of a recorded tensor: the view's elements of its base are
    replaced too (PyTorch's ``CopySlices``), as ``base[view] = new value``.  A view is a copy
    on the tape, so if the base changed since the view was taken, the view is first taken
    again: the op then sees what PyTorch's view would hold."""
    from tapejit.ops.movement import ONE_OF_SEVERAL, assign_positions, view_again, view_positions
    if view is ONE_OF_SEVERAL:
        raise RuntimeError(
            f"{op}: an output of UnbindBackward0 is a view and is being modified inplace. This view "
            f"is the output of a function that returns multiple views (iterating a tensor, unbind). "
            f"Such functions do not allow the output views to be modified inplace. You should replace "
            f"the inplace operation by an out-of-place one.")
    base, where, (tape, off, version) = view
    if base._tape is None and base._rg and state.grad:
        raise RuntimeError(LEAF_VIEW_ERROR)
    # Only a zero stride (expand) makes two elements of a view one element of its base.
    if type(where) is not int and any(st == 0 and sz > 1 for sz, st in zip(where[0], where[1])):
        raise RuntimeError(
            f"{op}: unsupported operation: more than one element of the written-to tensor refers to "
            f"a single memory location (a view of shape {list(t._shape)} of a tensor of shape "
            f"{list(base._shape)}). Please clone() the tensor before performing the operation.")
    positions = view_positions(base, where, t._shape)
    if tape is not base._tape or off != base._off or (
            version is not None and version != getattr(base, "_version", 0)):
        _rebind(t, view_again(base, where, t._shape))
    t._view = None   # the op itself, on the view alone
    try:
        _apply(t, compute, op)
    finally:
        t._view = view
    assign_positions(base, positions, t)
    t._view = (base, where, (base._tape, base._off, getattr(base, "_version", 0)))
    return t


def _rebind(t, other):
    """``t`` takes ``other``'s value and history (the rest of ``t`` stays)."""
    t._tape = other._tape
    t._off = other._off
    t._rg = other._rg
    t._data = getattr(other, "_data", None) if other._tape is None else None
    t._node = None


def _apply(t, compute, op):
    from tapejit.recording import cast
    check_leaf(t, op)
    tape = state.tape
    before = tape.n if tape is not None else 0   # records from here on are this op's own
    result = compute()
    if result._shape != t._shape:
        raise RuntimeError(
            f"{op}: output with shape {list(t._shape)} doesn't match the broadcast shape "
            f"{list(result._shape)}")
    if result._dtype is not t._dtype:
        if result._dtype.is_floating_point and not t._dtype.is_floating_point:
            raise RuntimeError(
                f"result type {result._dtype.name.capitalize()} can't be cast to the desired output "
                f"type {t._dtype.name.capitalize()}")
        result = cast(result, t._dtype)
    if t._tape is None and result._tape is None:
        value = result._value()
        note_leaf_write(t, before)
        np.copyto(t._data, value)
        return t
    if result._tape is None:
        # A value with no history replaces a recorded one (zeroed, filled, copied from a
        # constant): ``t`` becomes a plain tensor holding it.
        if t._tape is not None:
            poison(t._tape, t._dtype.arena, t._off, t, getattr(t, "_version", 0),
                   before if t._tape is state.tape else None)
        t._version = getattr(t, "_version", 0) + 1
        t._tape = None
        t._off = 0
        t._data = np.array(result._value(), dtype=t._dtype.np)
        t._rg = False
        t._node = None
        return t
    if t._tape is not None:
        old = getattr(t, "_version", 0)
        poison(t._tape, t._dtype.arena, t._off, t, old, before if t._tape is state.tape else None)
        t._version = old + 1
    else:
        note_leaf_write(t, before)
    t._tape = result._tape
    t._off = result._off
    t._rg = result._rg
    t._data = None
    t._node = None
    return t
