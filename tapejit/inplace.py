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


def _saving_records(tape, arena, off):
    """Records on ``tape`` whose backward reads the value at (arena, off)."""
    tape.flush()
    rec = tape.rec[:tape.nrec]
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
                used = op.extra.get("saved", "ab")
                table[op.opcode] = ["a" in used, "b" in used, "o" in used]
        _SAVED[:] = [table]
    return _SAVED[0]


def poison(tape, arena, off, t, old_version):
    rows = _saving_records(tape, arena, off)
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


def note_leaf_write(t):
    """A concrete tensor's array is about to change: poison saved uses on this thread's tape."""
    old = getattr(t, "_version", 0)
    t._version = old + 1
    tape = state.tape
    if tape is None:
        return
    for d in (0, 1):
        hit = tape.loaded.get((id(t), d))
        if hit is not None and hit[2] is t:
            poison(tape, d, hit[0], t, old)


def check_leaf(t, op):
    if t._tape is None and t._rg and state.grad:
        raise RuntimeError(LEAF_ERROR)


def apply_inplace(t, result, op="in-place op"):
    """Make ``t`` hold ``result`` (its new value), keeping PyTorch's in-place semantics."""
    from tapejit.recording import cast
    check_leaf(t, op)
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
    if t._tape is None and not (result._rg and state.grad):
        value = result._value()
        note_leaf_write(t)
        np.copyto(t._data, value)
        return t
    if t._tape is not None:
        old = getattr(t, "_version", 0)
        poison(t._tape, t._dtype.arena, t._off, t, old)
        t._version = old + 1
    else:
        note_leaf_write(t)
    t._tape = result._tape
    t._off = result._off
    t._rg = result._rg
    t._data = None
    t._node = None
    return t
