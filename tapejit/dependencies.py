"""Dependency walks over a tape's records, compiled (the engine skips unneeded custom
Functions with them; tj.compile prunes a frozen trace): a trace's first call pays for them,
and a 10,000-op graph has 30,000 records (in Python, these walks were most of that call).

``mark_dependencies`` walks records in reverse from slots marked in ``marks`` (one flag
array per arena, indexed by slot offset) and marks the slots each marked record reads:
with ``grads_only`` just the operands the backward sweep sends gradients to (fields >= 0),
which is the sweep's own reachability; otherwise every operand, for dead-code removal.
"""
import numpy as np

from tapejit import registry
from tapejit._jit import sweep
from tapejit.executor import listed_operands  # noqa: F401  (engine, replay import it from here)
from tapejit.ops.core import CAST


@sweep
def mark_dependencies(rec, n, listed_at, listed, load_op, cast_op, marks0, marks1, grads_only):
    """Returns the records whose result was marked; ``marks0``/``marks1`` end up holding every
    slot the marked results depend on."""
    keep = np.zeros(n, np.uint8)
    for r in range(n - 1, -1, -1):
        code = rec[r, 0]
        d = code & 1
        out = rec[r, 1]
        if (marks0[out] if d == 0 else marks1[out]) == 0:
            continue
        keep[r] = 1
        op = code >> 1
        if op == load_op:
            continue
        for k in range(-2, listed_at[r + 1] - listed_at[r]):
            if k == -2:
                field = rec[r, 2]
                arena = 1 - d if op == cast_op else d
            elif k == -1:
                field = rec[r, 3]
                arena = d
            else:
                field = listed[listed_at[r] + k]
                arena = d
            if grads_only and field < 0:
                continue
            slot = field if field >= 0 else ~field
            if arena == 0:
                if slot < marks0.shape[0]:
                    marks0[slot] = 1
            elif slot < marks1.shape[0]:
                marks1[slot] = 1
    return keep


@sweep
def prune_fields(rec, n, listed_at, listed, forced, load_op, cast_op, marks0, marks1):
    """The forward walk of a backward pass toward some slots only (``autograd.grad``'s
    inputs): from the slots marked in ``marks0``/``marks1``, marks the result of every
    record that reads a marked slot through a field that takes a gradient (and of every
    record with ``forced[r]``), and rewrites each field of ``rec`` that takes a gradient
    (>= 0) but reads an unmarked slot as ``~field``, a field that takes none.  Operands
    listed in ``ints`` are only read (they keep their gradients).  Returns the number of
    fields rewritten."""
    cut = 0
    size0 = marks0.shape[0]
    size1 = marks1.shape[0]
    for r in range(n):
        code = rec[r, 0]
        d = code & 1
        op = code >> 1
        if op == load_op:
            continue
        hit = forced[r] != 0
        for col in range(2, 4):
            field = rec[r, col]
            if field < 0:
                continue
            arena = 1 - d if (op == cast_op and col == 2) else d
            if arena == 0:   # a slot past the marks counts as marked: never cut by mistake
                marked = field >= size0 or marks0[field] != 0
            else:
                marked = field >= size1 or marks1[field] != 0
            if marked:
                hit = True
            else:
                rec[r, col] = ~field
                cut += 1
        for k in range(listed_at[r], listed_at[r + 1]):
            field = listed[k]
            if field >= 0:
                if d == 0:
                    hit = hit or field >= size0 or marks0[field] != 0
                else:
                    hit = hit or field >= size1 or marks1[field] != 0
        if hit:
            out = rec[r, 1]
            if d == 0:
                if out < size0:
                    marks0[out] = 1
            elif out < size1:
                marks1[out] = 1
    return cut


def dependencies(rec, ints, sizes, roots, grads_only, listed=None):
    """``(keep, marks)``: which records of ``rec`` the slots ``roots`` ({(arena, off)}) depend
    on, and per arena a flag array of those slots (the roots included)."""
    listed_at, fields = listed if listed is not None else listed_operands(rec, ints)
    marks = [np.zeros(max(size, 1), np.uint8) for size in sizes]
    for d, off in roots:
        marks[d][off] = 1
    keep = mark_dependencies(rec, len(rec), listed_at, fields, registry.BY_NAME["load"].opcode,
                             CAST.opcode, marks[0], marks[1], grads_only)
    return keep.astype(bool), marks
