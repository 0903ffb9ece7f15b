"""Frozen-tape optimisation: fewer records for a trace's replays (``Frozen`` calls ``optimize``).

A trace's first call records every op eagerly, one record per tapejit op; a replay runs
every record again, so a record saved at freezing is saved on every call.  Three rewrites,
each leaving values and gradients as they were:

* common subexpressions: an elementwise record (unary or binary) with the same op, operand
  fields, element count and constants as an earlier one is dropped, and its readers read the
  earlier one's slot.  Records are pure functions of their operands' slots, and a slot is
  written by one record only (in-place ops record an out-of-place result), so equal fields
  mean equal values.  Only the order in which the two readers' gradients are summed changes.
* a chain of adds -- ``sum(tensors)`` records ``0 + t0`` and one add per further term -- becomes
  one ``add_n`` record, adding the terms in the chain's order;
* ``softmax(stack(tensors), 0)`` becomes one ``stack_softmax`` record;
* for the single compiled replay (``alias_copies``), a copy of a contiguous range (``unbind``,
  ``select``, a slice, a reshape) goes: its readers read the source's range in place.

The fused records run the replaced records' arithmetic in the same order, so their values
and gradients are bit for bit the replaced ones'.  They fuse only records that follow each
other on the tape, whose intermediate results nothing else reads (no other record, no
result or seed of the trace); small records only (a large elementwise chain stays for the
chunked runs, ``tapejit/executor.py``).  Last, records nothing reads any more are dropped.
"""
import numpy as np

from tapejit import executor, registry
from tapejit.dependencies import dependencies, listed_operands
from tapejit.ops.softmax import SOFTMAX, STACK_SOFTMAX
from tapejit.ops.binary import ADD, ADD_N
from tapejit.ops.core import CAST
from tapejit.ops.movement import CAT, RESHAPE, STACK
from tapejit.ops.unary import ADD_SCALAR

#: the ops only this module records: no front end makes them, so their samples run through
#: ``tj.compile`` (tests/test_replay_optimize.py), not the eager gradient tests
FUSED_OPS = (ADD_N, STACK_SOFTMAX)

#: set False to replay traces as recorded (tests compare the two)
enabled = True
#: set False to keep the copy records in the single compiled replay (``alias_copies``)
aliasing = True

#: fused records hold fewer elements than a chunked run's records
_SMALL = executor.MIN_ELEMENTS


def optimize(tape, rec, live):
    """``rec`` (the kept records, in order) rewritten; ``live``: the ``(arena, off)`` slots
    read after the sweeps (results, seeds), which stay as they are.  New ``ints`` go on
    ``tape``."""
    if not enabled or len(rec) < 2:
        return rec
    sizes = [len(v) for v in tape.vals]
    reads = _reads(rec, tape.ints, sizes)
    rows, changed = rec.tolist(), False
    if _may_repeat(rec, tape.floats):
        rows, changed = _common_subexpressions(rows, tape, live, reads)
        if changed:
            rec = np.array(rows, np.int64)
            reads = _reads(rec, tape.ints, sizes)
    new_ints = []
    base = tape.nints + len(tape.pints)
    rows = _fuse_sums(rows, _sum_roles(rec), live, reads, new_ints, base)
    rows = _fuse_stack_softmax(rows, tape.ints, live, reads, new_ints, base)
    if new_ints:
        tape.add_int_array(np.array(new_ints, np.int64))
    out = np.array(rows, np.int64).reshape(-1, 6)
    if changed:   # records only the dropped duplicates read (loads stay: Frozen has sorted them)
        keep, _ = dependencies(out, tape.ints, sizes, live, grads_only=False)
        out = out[keep | ((out[:, 0] >> 1) == registry.BY_NAME["load"].opcode)]
    return np.ascontiguousarray(out)


def _decode(field):
    return field if field >= 0 else ~field


def _operand_fields(op):
    """Which of fields a (2), b (3) hold operand slots: a unary op reads only a (``b`` is -1
    or a Python scalar's place), a kernel its declared ``operands``."""
    if op.kind == "unary" or op.kind == "cast":
        return (2,)
    if op.kind == "binary":
        return (2, 3)
    if op.kind == "kernel":
        return (2, 3)[:op.operands]
    return ()


_FIELDS = None


def _field_table():
    """``[opcode, 0 | 1]``: 1 where field a | b of the op's records is an operand."""
    global _FIELDS
    if _FIELDS is None or len(_FIELDS) != len(registry.OPS):
        table = np.zeros((len(registry.OPS), 2), bool)
        for op in registry.OPS:
            for col in _operand_fields(op):
                table[op.opcode, col - 2] = True
        _FIELDS = table
    return _FIELDS


_COLUMNS = None


def _fields_of(code):
    """The fields (2: a, 3: b) of record code ``code`` that hold operand slots."""
    global _COLUMNS
    if _COLUMNS is None or len(_COLUMNS) != len(registry.OPS):
        _COLUMNS = [_FIELD_COLUMNS[tuple(row)] for row in _field_table().tolist()]
    return _COLUMNS[code >> 1]


_FIELD_COLUMNS = {(False, False): (), (True, False): (2,), (False, True): (3,), (True, True): (2, 3)}


class _Reads:
    """Per arena and slot: how many operand fields read it (``count``), and whether a record
    lists it in ``ints`` (``listed``: such a slot is never rewired or fused away)."""
    __slots__ = ("count", "listed")

    def __init__(self, count, listed):
        self.count, self.listed = count, listed


def _reads(rec, ints, sizes):
    ops = rec[:, 0] >> 1
    arena = rec[:, 0] & 1
    table = _field_table()
    count = [np.zeros(size, np.int64) for size in sizes]
    for col in (2, 3):
        use = table[ops, col - 2]
        field = rec[use, col]
        slot = np.where(field < 0, ~field, field)
        d = arena[use]
        if col == 2:   # a cast reads the other arena
            d = np.where(ops[use] == CAST.opcode, 1 - d, d)
        for a in (0, 1):
            count[a] += np.bincount(slot[d == a], minlength=sizes[a])[:sizes[a]]
    listed_at, fields = listed_operands(rec, ints)
    listed = [np.zeros(size, bool) for size in sizes]
    if len(fields):
        d = np.repeat(arena, np.diff(listed_at))
        slot = np.where(fields < 0, ~fields, fields)
        for a in (0, 1):
            listed[a][slot[d == a]] = True
    return _Reads(count, listed)


def _common_subexpressions(rows, tape, live, reads):
    """Drops elementwise records equal to an earlier one (see the module docstring)."""
    ops = registry.OPS
    floats = tape.floats
    first = {}
    moved = {}   # (arena, slot of a dropped record) -> the slot of the record it equals
    kept = []
    for row in rows:
        code, out, a, b, p, q = row
        op = ops[code >> 1]
        d = code & 1
        if moved:
            for col in _fields_of(code):
                field = row[col]
                to = moved.get((1 - d if op is CAST else d, _decode(field)))
                if to is not None:
                    row = list(row)
                    row[col] = to if field >= 0 else ~to
            a, b = row[2], row[3]
        if op.kind == "unary":
            const = floats[d][q:q + op.nconst].tobytes() if op.nconst else q
            key = (code, a, p, const)
        elif op.kind == "binary":
            key = (code, a, b, p, q)
        else:
            kept.append(row)
            continue
        earlier = first.get(key)
        # slot 0 is never rewired: a field of -1 is "no operand" as well as ~0
        if earlier is not None and out != 0 and (d, out) not in live and not reads.listed[d][out]:
            moved[(d, out)] = earlier
            continue
        first.setdefault(key, out)
        kept.append(row)
    return kept, bool(moved)


def _may_repeat(rec, floats):
    """Whether two elementwise records of ``rec`` have the same key (``_common_subexpressions``
    finds the rest, the repeats its rewiring makes): a NumPy test that spares most traces
    the Python walk."""
    kind, nconst = _tables()[:2]
    ops = rec[:, 0] >> 1
    rows = np.flatnonzero(kind[ops] != 0)
    if len(rows) < 2:
        return False
    r = rec[rows]
    k = kind[ops[rows]]
    n = nconst[ops[rows]]
    d = r[:, 0] & 1
    c0, c1 = r[:, 5].copy(), np.zeros(len(r), np.int64)
    for arena in (0, 1):   # a unary op's constants by value (bits), not by their index in floats
        has = (k == 1) & (n > 0) & (d == arena)
        c0[has] = floats[arena][r[has, 5]].astype(np.float64).view(np.int64)
        two = has & (n > 1)
        c1[two] = floats[arena][r[two, 5] + 1].astype(np.float64).view(np.int64)
    keys = np.stack([r[:, 0], r[:, 2], np.where(k == 2, r[:, 3], 0), r[:, 4], c0, c1], 1)
    return len(np.unique(keys, axis=0)) < len(keys)


_TABLES = None


def _tables():
    """Per opcode: 1 unary / 2 binary / 0 other, the number of constants, and 1 for an add
    (binary, add's rule) / 2 for an add of a constant (add_scalar's rule) / 0."""
    global _TABLES
    if _TABLES is None or len(_TABLES[0]) != len(registry.OPS):
        kind = np.array([{"unary": 1, "binary": 2}.get(op.kind, 0) for op in registry.OPS], np.int64)
        nconst = np.array([op.nconst for op in registry.OPS], np.int64)
        role = np.array([1 if op.kind == "binary" and op.value is ADD.value else
                         2 if op.kind == "unary" and op.value is ADD_SCALAR.value else 0
                         for op in registry.OPS], np.int64)
        _TABLES = (kind, nconst, role)
    return _TABLES


def _sum_roles(rec):
    """Per record: 1 an add that may join a chain (same shapes, small), 2 an add of a
    constant that may start one, 0 neither."""
    role = _tables()[2][rec[:, 0] >> 1]
    role[(rec[:, 4] >= _SMALL) | ((role == 1) & (rec[:, 5] != 0))] = 0
    return role.tolist()


def _single_read(reads, live, d, slot):
    return reads.count[d][slot] == 1 and not reads.listed[d][slot] and (d, slot) not in live


def _fuse_sums(rows, roles, live, reads, new_ints, base):
    """Chains of adds (see the module docstring) as ``add_n`` records; ``roles``: ``_sum_roles``."""
    result = []
    chain = None   # the open chain: _Chain, its last record being result[-1]
    for row, role in zip(rows, roles):
        if role == 0:
            chain = None
            result.append(row)
            continue
        code, out, a, b, p, q = row
        d = code & 1
        if (role == 1 and chain is not None and chain.at == len(result) - 1 and chain.arena == d
                and chain.n == p and _decode(a) == chain.out and _single_read(reads, live, d, chain.out)):
            if a < 0:   # the sum so far takes no gradient here: nor do its terms through it
                chain.operands = [~_decode(x) for x in chain.operands]
            chain.operands.append(b)
            chain.out = out
            result[-1] = [ADD_N.opcode << 1 | d, out, -1, -1, chain, chain.const]   # p: below
            continue
        chain = _Chain(len(result), d, out, p, [a, b] if role == 1 else [a], -1 if role == 1 else q)
        result.append(row)
    for row in result:
        if type(row[4]) is _Chain:
            chain = row[4]
            row[4] = base + len(new_ints)
            new_ints += [len(chain.operands), chain.n] + chain.operands
    return result


class _Chain:
    """Adds being fused: the last one's place in the result and slot, the terms so far, and
    the index in ``floats`` of the constant it starts from (-1: none)."""
    __slots__ = ("at", "arena", "out", "n", "operands", "const")

    def __init__(self, at, arena, out, n, operands, const):
        self.at, self.arena, self.out, self.n, self.operands, self.const = at, arena, out, n, operands, const


def _fuse_stack_softmax(rows, ints, live, reads, new_ints, base):
    """``softmax(stack(tensors), 0)`` as ``stack_softmax`` records."""
    stack, softmax = STACK.opcode, SOFTMAX.opcode
    result = []
    for row in rows:
        code, out, a, b, p, q = row
        if code >> 1 == softmax and q == 0 and result:
            last = result[-1]
            if (last[0] >> 1 == stack and (last[0] & 1) == (code & 1) and _decode(a) == last[1]
                    and _single_read(reads, live, code & 1, last[1])):
                fused = _stack_softmax(code, out, a, p, last[4], ints, new_ints, base)
                if fused is not None:
                    result[-1] = fused
                    continue
        result.append(row)
    return result


def _stack_softmax(code, out, a, p, sp, ints, new_ints, base):
    """The fused record, or None unless the stack is along dim 0 of k tensors of n elements
    and the softmax along that dim."""
    k, outer = int(ints[sp]), int(ints[sp + 1])
    n = int(ints[sp + 3]) if k else 0
    if k == 0 or outer != 1 or k * n >= _SMALL:
        return None
    if any(int(ints[sp + 3 + 2 * j]) != n for j in range(k)):
        return None
    if (int(ints[p]), int(ints[p + 1]), int(ints[p + 2])) != (1, k, n):
        return None
    at = sp
    if a < 0:   # the softmax takes no gradient: neither do the stacked tensors through it
        at = base + len(new_ints)
        new_ints += [k, 1]
        for j in range(k):
            new_ints += [~_decode(int(ints[sp + 2 + 2 * j])), n]
    return [STACK_SOFTMAX.opcode << 1 | (code & 1), out, -1, -1, at, 0]


# ---- copies read in place (the single compiled replay) --------------------------------------

class Aliases:
    """The records of the single compiled replay (``Frozen``'s ``replay`` call) with copies
    of contiguous ranges dropped (``alias_copies``), and what that call must add to its
    seeds: ``zero_at`` rows ``(offset, count)`` of adjoint ranges to zero and flag before the
    backward sweep; and ``flag_at``, offsets inside them whose flags stay set for good."""
    __slots__ = ("rec", "zero_at", "flag_at")

    def __init__(self, rec, zero_at, flag_at):
        self.rec, self.zero_at, self.flag_at = rec, zero_at, flag_at


def _listed_positions(op):
    """``f(k) -> (block length, operand positions in the block)`` for an op whose listed
    operands ``alias_copies`` rewrites (``k = ints[p]``, the number of operands); None for
    the others (a copy they read stays)."""
    if op is ADD_N:                                        # [k, n, operand * k]
        return lambda k: (2 + k, range(2, 2 + k))
    if op.forward is CAT.forward or op is STACK_SOFTMAX:   # [k, outer, (operand, inner) * k]
        return lambda k: (2 + 2 * k, range(2, 2 + 2 * k, 2))
    return None


def _redirect(field, d, alias, starts):
    """Operand ``field`` of a record of arena ``d`` (an offset, or ``~offset`` for an operand
    sent no gradient) read where the copy it names reads (``alias``: (arena, offset) -> (root,
    offset in it, whether gradients go there)): the source's offset, its gradient start
    recorded in ``starts``, or ``~offset`` when no gradient goes there; ``field`` itself
    when it names no removed copy."""
    hit = alias.get((d, field if field >= 0 else ~field))
    if hit is None:
        return field
    root, at, grad = hit
    if field >= 0 and grad:
        starts[d, root].add(at)
        return at
    return ~at


def alias_copies(tape, rec, live, reached, listed):
    """``Aliases`` for ``rec`` (a frozen trace's records, run by one compiled call on one
    arena dtype), or None when no copy goes.

    A copy of a contiguous range (``copy_range``: ``unbind``, ``select``, a slice, a reshape)
    writes ``v[out + i] = v[a + start + i]``, and a slot is written by one record only (an
    in-place op records a new slot), so its readers may read ``a + start`` instead; a chain of
    copies resolves to the first source (the *root*).  Their backward then adds straight into
    the root's adjoint range: the replay zeroes that range and sets the root's flag before
    the backward sweep (``zero_at``), so that the root's own backward runs on the whole
    range, as after the copies' backward.  An offset read inside it has a flag no record
    clears (no record writes there): set once (``flag_at``), it makes every contribution
    add, as the copies' backward added, whatever the order and overlap of the reads.  Only
    roots the backward reaches (``reached``: per arena, the slots a backward from the seeds
    reaches, in ``rec``'s own graph) are zeroed: a root no gradient reaches keeps its flag
    clear and its backward does not run.  A copy that sends a gradient goes only if no other record sends
    one to the elements it reads (``_read_alone``): its readers' terms then reach each
    element in the order the copy's backward added them, so gradients stay bit for bit
    (a replay of a batch row, which keeps the copies, has the same bits).  A copy stays if
    it is a result or seed (``live``), is read through a listed operand this pass does not
    rewrite (linear's bias, ...), or its range starts at offset 0 (a field ~0 is -1, "no
    operand").  ``listed``: ``listed_operands(rec, tape.ints)``."""
    if not (enabled and aliasing) or len(rec) < 2:
        return None
    ops = registry.OPS
    copy = [op.forward is RESHAPE.forward for op in ops]
    codes = rec[:, 0] >> 1
    if not np.array(copy)[codes].any() or (codes == CAST.opcode).any():   # (one arena: no casts)
        return None
    positions = [_listed_positions(op) if op.listed is not None else None for op in ops]
    blocked = set(live)    # (arena, slot): copies that stay
    listed_at, fields = listed
    for r in np.flatnonzero(np.diff(listed_at)).tolist():
        if positions[codes[r]] is None:
            d = int(rec[r, 0] & 1)
            blocked.update((d, _decode(int(f))) for f in fields[listed_at[r]:listed_at[r + 1]])
    ints = tape.ints
    rows = rec.tolist()
    listed_at, fields = listed_at.tolist(), fields.tolist()
    alone = _read_alone(rows, copy, listed_at, fields)
    columns = [_fields_of(op.opcode << 1) for op in ops]
    base = tape.nints + len(tape.pints)
    new_ints = []
    alias = {}    # (arena, out of a dropped copy) -> (root, offset it reads, takes a gradient)
    roots = {}    # (arena, root) -> its size
    starts = {}   # (arena, root) -> the offsets inside it that a gradient is sent to
    kept = []     # the kept records' fields, flat (NumPy converts that faster than rows)
    for r, row in enumerate(rows):
        code, out, a, b, p, q = row
        d = code & 1
        op = code >> 1
        if alias:
            for col in columns[op]:
                row[col] = _redirect(row[col], d, alias, starts)
            where = positions[op]
            if where is not None and any((d, f if f >= 0 else ~f) in alias
                                         for f in fields[listed_at[r]:listed_at[r + 1]]):
                length, operands = where(int(ints[p]))
                block = ints[p:p + length].tolist()
                for k in operands:
                    block[k] = _redirect(block[k], d, alias, starts)
                row[4] = base + len(new_ints)
                new_ints += block
        if copy[op] and p > 0 and (d, out) not in blocked and (a < 0 or r in alone):
            source = a if a >= 0 else ~a   # the field as recorded: a dropped copy's out, or a root
            hit = alias.get((d, source))
            if hit is not None:
                root, at, grad = hit[0], hit[1] + ~b, hit[2] and a >= 0
            else:
                root, at, grad = source, source + ~b, a >= 0
            if at != 0:
                if (d, root) not in roots:
                    roots[d, root] = q if hit is None else 0
                    starts[d, root] = set()
                alias[d, out] = (root, at, grad)
                continue
        kept += row
    if not alias:
        return None
    if new_ints:
        tape.add_int_array(np.array(new_ints, np.int64))
    zero_at, flag_at = [], []
    for (d, root), inside in starts.items():
        if not inside or not reached[d][root]:
            continue
        zero_at.append((root, roots[d, root]))
        for at in sorted(inside - {root}):
            flag_at.append(at)
    return Aliases(np.array(kept, np.int64).reshape(-1, 6), np.array(zero_at, np.int64).reshape(-1, 2),
                   np.array(flag_at, np.int64))


def _read_alone(rows, copy, listed_at, fields):
    """The copies (indices into ``rows``) whose source elements no other record sends a
    gradient to: no other copy of an overlapping range, and no other reader of the source
    (taken to read all of it)."""
    whole = 1 << 62
    reads = {}   # (arena, slot read by a copy with a gradient) -> [(first, end, record)]
    for r, (code, out, a, b, p, q) in enumerate(rows):
        if copy[code >> 1] and a >= 0 and p > 0:
            reads.setdefault((code & 1, a), []).append((~b, ~b + p, r))
    if not reads:
        return set()
    for r, row in enumerate(rows):
        code = row[0]
        if copy[code >> 1]:
            continue
        d = code & 1
        for col in _fields_of(code):
            found = reads.get((d, row[col]))   # (a field < 0 sends no gradient: never found)
            if found is not None:
                found.append((0, whole, r))
        if listed_at[r] != listed_at[r + 1]:
            for field in fields[listed_at[r]:listed_at[r + 1]]:
                found = reads.get((d, field))
                if found is not None:
                    found.append((0, whole, r))
    alone = set()
    for found in reads.values():
        found.sort()
        reach = -1   # the furthest end of the ranges before
        for i, (first, end, r) in enumerate(found):
            if reach <= first and (i + 1 == len(found) or found[i + 1][0] >= end):
                alone.add(r)
            reach = max(reach, end)
    return alone
