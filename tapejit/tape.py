"""The flat Wengert tape: records in NumPy columns, values in per-dtype arenas.

Record layout (one row of ``Tape.rec``, six int64 fields)::

    code  = opcode << 1 | (1 if float32 else 0)
    out   = arena offset of the result
    a, b  = arena offsets of the operands; ``~offset`` (< 0) when that operand needs no
            gradient, -1 when there is no operand
    p, q  = static parameters: an element count, or an index into ``ints`` (layouts,
            index arrays) or ``floats`` (Python scalars, softplus's beta, ...)

Every value lives in one arena per float dtype at its ``out`` offset, so a slot is an
offset and the sweeps need no table.  A record is packed straight into the ``rec``
column (which grows by doubling); variable-length ``ints`` and ``floats`` go to Python
lists first.  Values are computed lazily: ``flush()`` moves the lists into their columns
and runs the compiled forward over the new records when Python reads a value or
``backward()`` runs.  Leaves and constants are copied into the arena when recorded
(``load``), so a later in-place change of the source cannot change what the graph
computed.  Only differentiable work is recorded (see ``recording.eager``).

One tape per thread (``current()``).  After ``backward()`` without ``retain_graph`` the
thread moves on to a fresh tape; a finished tape whose tensors are all gone is rewound
and reused, keeping its buffers, so a training loop allocates nothing per step.

Pending work is bounded: a tape that has grown while few tensors still refer to it (a
loop of forward passes whose results are never read) is retired once the call in
progress returns (``_note_growth``), so its records do not pile up.

Threads: only the owner thread records on a tape.  Another thread may read its values or
run backward through it (``autograd.grad`` from several threads on one graph): each tape
has a lock held across a flush and across a whole backward pass (adjoint buffers, flags
and the leaves' gradients), and a thread flushing a tape it does not own first takes it
from its owner (``_take_from_owner``), whose next operations record on a new tape.
"""
import os
import struct
import sys
import threading
import time
import weakref

import numpy as np

from tapejit import executor, registry
from tapejit._jit import sweep

_ARENA_DTYPES = (np.float64, np.float32)
# Writes one record's six fields straight into the record column: no Python objects are
# kept per record and nothing needs converting at flush.
pack_record = struct.Struct("6q").pack_into


class _ThreadState(threading.local):
    def __init__(self):
        self.tape = None
        self.grad = True
        self.pool = []
        self.eager = False       # inside recording.eager(): record, compute, then drop
        self.inference = False
        self.trace = None        # inside tj.compile's first call: the Trace being recorded
        # [tape, frame, calls]: a tape due for retirement while the call that was running when
        # it grew (``frame``, the outermost of tapejit's) has not returned (see _note_growth)
        self.hold = None
        # [(weak reference, serial)]: tapes retired while their graph may still be used
        self.opened = []


state = _ThreadState()


class _Above:
    """What tapes call in inplace.py (above this module): handed over at import (``provide``)."""
    __slots__ = ("release_views",)


above = _Above()


def provide(**functions):
    for name, function in functions.items():
        setattr(above, name, function)


class _ProcessModes:
    """Modes that hold for every thread, as torch's: anomaly detection is process-wide
    (``torch.autograd.detect_anomaly`` in one thread makes every thread's backward check)."""
    anomaly = False       # backward checks each node's gradients for NaN (detect_anomaly)


modes = _ProcessModes()
_serial = [0]
# The compiled sweeps (``codegen.Sweeps``), made on first use.
_process = {"sweeps": None}


def sweeps():
    """The compiled sweeps' entry points and their tables of compiled op sweeps
    (``sw.table(d)``).  Nothing is loaded ahead: each op's code is loaded or compiled, per
    arena dtype, when a sweep first meets the op."""
    found = _process["sweeps"]
    if found is None:
        from tapejit.codegen import Sweeps     # ~4 ms of start-up: at the first sweep
        found = _process["sweeps"] = Sweeps(_ARENA_DTYPES)
    return found


class Tape:
    __slots__ = ("n", "cap", "pints", "pfloats", "nrec", "nints", "nfloats", "rec", "ints", "floats",
                 "cursor", "vals", "adj", "flags", "freed", "sources", "packed", "loaded", "loads_of", "grad_loads",
                 "serial", "thread", "hooks", "retained", "functions", "poisoned", "_producers",
                 "tracing", "trace", "kept", "unkept", "lock", "home", "broken", "stale", "views", "checked",
                 "__weakref__")

    def __init__(self):
        # Held across a flush and a whole backward pass: another thread may read this tape's
        # values or run backward through it (reentrant: hooks and reads happen inside).
        self.lock = threading.RLock()
        # While this is a thread's current (or held) tape, that thread's state (its
        # thread-local dict): another thread that must flush it first takes it from its
        # owner (_take_from_owner).  Cleared on retirement, so that a finished thread's
        # state and tapes are freed by reference counting, not by a GC cycle.
        self.home = None
        self.use_records(np.zeros((256, 6), np.int64))
        self.ints = np.zeros(256, np.int64)
        self.floats = [np.zeros(256, np.float64), np.zeros(256, np.float32)]
        self.vals = [np.zeros(256, np.float64), np.zeros(256, np.float32)]
        self.adj = [np.zeros(0, np.float64), np.zeros(0, np.float32)]
        self.flags = [np.zeros(0, np.uint8), np.zeros(0, np.uint8)]
        self.freed = np.zeros(256, np.uint8)
        self.reset()

    def reset(self):
        """Forget all records and values but keep the buffers for reuse."""
        self.freed[:getattr(self, "n", len(self.freed))] = 0
        self.n = 0          # records written
        self.pints = []
        self.pfloats = []
        self.nrec = 0       # records whose values are computed
        self.nints = 0
        self.nfloats = 2  # floats[0:2] stay 0.0 (unused constants read as 0)
        self.cursor = [0, 0]
        self.sources = []
        self.loaded = {}      # (id, arena) -> (off, version, tensor): reused loads of grad leaves
        self.loads_of = {}    # (id, arena) -> [(off, version, tensor)]: every load, for in-place checks
        self.grad_loads = []
        self.hooks = None
        self.retained = None
        self.functions = None   # [(first output load record, ctx)] of custom Functions
        self.poisoned = None
        self._producers = None
        self.tracing = False    # a tj.compile trace: never pooled or retired, values not readable
        self.trace = None       # ... and the Trace recording it (replay/trace.py): refuses reads
        # A frozen trace: {(arena, slot)} whose values its replays read (the rest may stay
        # in cache, executor.py).  None on an eager tape, and on a trace being recorded.
        self.kept = None
        self.unkept = None      # ([(start, end, arena)], {(arena, slot)}): see keep_values
        # After a failed allocation: ((arena 0 end, arena 1 end), message).  Slots past the
        # ends have no value (their records were dropped); reading one raises the message.
        self.broken = None
        # Leaves whose array changed through ``.data`` after they were loaded: their load
        # slots take the new value before the next backward (as torch's saved tensors do).
        self.stale = None
        # Set when a tensor's array became a view of this tape's arenas (detach(), .data of a
        # recorded tensor): they get copies before the arenas are reused or freed.
        self.views = None
        self.checked = _FIRST_CHECK   # record count of the next growth check (grow)
        self.cap = min(len(self.rec), _FIRST_CHECK)
        _serial[0] += 1
        self.serial = _serial[0]
        if getattr(self, "thread", None) is None:   # a reused tape stays in its thread's pool
            self.thread = threading.get_ident()

    # ---- recording helpers ---------------------------------------------------------------

    def use_records(self, rec):
        """Make ``rec`` the record column.  Records are written through ``packed``, a byte
        view of it: ``struct.pack_into`` fills a memoryview about twice as fast as an array."""
        self.rec = rec
        self.packed = memoryview(rec).cast("B")

    def append(self, code, out, a, b, p, q):
        n = self.n
        if n == self.cap:
            self.grow()
        pack_record(self.packed, n * 48, code, out, a, b, p, q)
        self.n = n + 1

    def grow(self):
        """Called when ``n`` reaches ``cap``: the record column's size, or earlier a check
        point (``checked``) at which ``_note_growth`` looks at the tape.  Check points come
        every few thousand records, sooner for large values, however large the columns of
        a reused tape already are."""
        n = self.n
        if n >= len(self.rec):
            size = 2 * len(self.rec)
            try:
                rec = _grown(self.rec, size, n)
                freed = np.zeros(size, np.uint8)
            except MemoryError:
                self._abandon()
                raise
            freed[:n] = self.freed[:n]
            self.use_records(rec)
            self.freed = freed
        if n >= self.checked:
            _note_growth(self)
            self.checked = _next_check(self)
        self.cap = min(len(self.rec), max(self.checked, n + 1))

    def add_ints(self, values):
        """Append static ints; returns their index in ``ints``."""
        at = self.nints + len(self.pints)
        self.pints.extend(values)
        return at

    def add_int_array(self, values):
        """``add_ints`` for a long int64 array (a where mask): copied into ``ints`` in one
        NumPy call, where ``add_ints`` would make a Python int of every element and
        ``_flush`` convert them back (~30 us per 1,000).  The pending ints go first, so
        ``ints`` stays in recording order."""
        if self.pints:
            self._store_pints()
        at = self.nints
        end = at + values.size
        if end > len(self.ints):
            self.ints = _grown(self.ints, max(end, 2 * len(self.ints)), at)
        self.ints[at:end] = values
        self.nints = end
        return at

    def _store_pints(self):
        end = self.nints + len(self.pints)
        if end > len(self.ints):
            self.ints = _grown(self.ints, max(end, 2 * len(self.ints)), self.nints)
        self.ints[self.nints:end] = self.pints
        self.pints.clear()
        self.nints = end

    def add_floats(self, c0, c1=0.0):
        at = self.nfloats + len(self.pfloats)
        self.pfloats += (c0, c1)
        return at

    def alloc(self, arena, n):
        off = self.cursor[arena]
        self.cursor[arena] = off + (n if n > 0 else 1)
        return off

    def load(self, t, dt):
        """Arena offset of tensor ``t`` as dtype ``dt`` on this tape, copying it in if needed."""
        d = dt.arena
        key = (id(t), d)
        version = getattr(t, "_version", 0)
        rg = t._rg
        # A leaf that requires grad is loaded once per tape (one slot, one adjoint).  A
        # constant is copied at every use: its array may be shared with NumPy
        # (``from_numpy``) and changed there, and each op must see the value it had then.
        if rg:
            hit = self.loaded.get(key)
            if hit is not None and hit[1] == version and hit[2] is t:
                return hit[0]
        src_tape = t._tape
        if src_tape is None:
            value = t._data
        else:
            if src_tape.thread != self.thread:
                raise RuntimeError(
                    "a tensor recorded on another thread's tape was used on this thread; "
                    "detach() it (or pass the leaf tensors instead): each thread records its own graph")
            src_tape.flush()
            value = src_tape.value(t)
        index = len(self.sources)
        off = self.load_value(value, dt, t)
        entry = (off, version, t)
        if rg and state.grad:
            if dt is t._dtype:
                self.grad_loads.append((index, d, off))
            self.loaded[key] = entry
        loads = self.loads_of.get(key)
        if loads is None:
            self.loads_of[key] = [entry]
        else:
            loads.append(entry)
        return off

    def load_value(self, value, dt, source):
        """A load record copying array ``value`` into a new slot of arena ``dt``; ``source``
        (a tensor, or a custom Function's context) is what the slot was loaded from."""
        # Tape.alloc, _ensure_arena and append, inlined: every leaf and constant comes here.
        n = value.size
        d = dt.arena
        cursor = self.cursor
        off = cursor[d]
        end = off + (n if n > 0 else 1)
        cursor[d] = end
        vals = self.vals[d]
        if end > len(vals):
            try:
                self._ensure_arena(d, end)
            except MemoryError:
                cursor[d] = off
                self._abandon()
                raise MemoryError(_no_memory(f"loading a tensor of {n:,} {_ARENA_DTYPES[d].__name__} "
                                             f"values", end - len(vals), d)) from None
            vals = self.vals[d]
        if n == 1:
            vals[off] = value.item() if value.ndim else value[()]
        elif n:
            vals[off:end] = value.reshape(-1)
        index = len(self.sources)
        self.sources.append(source)
        r = self.n
        if r == self.cap:
            self.grow()
        load = _LOAD or _load_op()
        pack_record(self.packed, r * 48, load[0] + d, off, -1, -1, index, n)
        self.n = r + 1
        return off

    def note_function(self, ctx, first):
        """Records ``first`` up to ``ctx._stop`` load the outputs of a custom Function: the
        backward sweep must stop above them for its Python ``backward``."""
        if self.functions is None:
            self.functions = []
        self.functions.append((first, ctx))

    # ---- storage -------------------------------------------------------------------------

    def _ensure_arena(self, d, need):
        vals = self.vals[d]
        if need > len(vals):
            try:
                grown = np.empty(max(need, 2 * len(vals)), _ARENA_DTYPES[d])
            except MemoryError:   # doubling is a habit, not a need: try the size asked for
                grown = np.empty(need, _ARENA_DTYPES[d])
            grown[:len(vals)] = vals
            self.vals[d] = grown
            _note_growth(self)

    def ensure_adjoints(self):
        if len(self.adj[0]) >= len(self.vals[0]) and len(self.adj[1]) >= len(self.vals[1]):
            return
        for d in (0, 1):
            need = len(self.vals[d])
            if len(self.adj[d]) < need:
                # Both allocated before either is kept: adjoints longer than their flags would
                # pass this check next time, and the sweep would write past the flags' end.
                adj = np.empty(need, _ARENA_DTYPES[d])
                flags = np.zeros(need, np.uint8)
                old = self.flags[d]
                flags[:len(old)] = old
                self.adj[d] = adj
                self.flags[d] = flags

    def note_unkept(self, start, end, d, slots):
        """The chunked run ``rec[start:end]`` left the values of ``slots`` in cache only."""
        if self.unkept is None:
            self.unkept = ([], set())
        self.unkept[0].append((start, end, d))
        self.unkept[1].update((d, s) for s in slots)

    def keep_values(self):
        """Compute again, into their slots, the values chunked runs kept in cache only: a
        tensor's value is about to be read, or a new record reads one."""
        runs, _ = self.unkept
        sw = sweeps()
        for start, end, d in runs:
            sw.forward(self.rec, start, end, self.vals[d], self.ints, self.floats[d], sw.table(d))
        self.unkept = None   # after: another thread may be reading (``value``)

    def value(self, t):
        """The (flushed) value of taped tensor ``t`` as a view into the arena."""
        d = t._dtype.arena
        if self.broken is not None:
            self.check_computed(t)
        if self.unkept is not None:
            with self.lock:
                if self.unkept is not None and (d, t._off) in self.unkept[1]:
                    self.keep_values()
        return self.vals[d][t._off:t._off + t._numel].reshape(t._shape)

    def check_computed(self, t):
        """After a failed allocation: raise its MemoryError if ``t`` was one of the results
        dropped with the op that could not be computed (or came after it)."""
        if self.broken is not None and t._off >= self.broken[0][t._dtype.arena]:
            raise MemoryError(self.broken[1])

    def release_views(self):
        """Give every tensor that still views this tape's arenas (a detached value) a copy,
        so the arenas can be reused (the tape is rewound) or freed."""
        self.views = None
        above.release_views(self)

    def flush(self):
        if self.n == self.nrec:
            return
        if self.thread != threading.get_ident():
            self._take_from_owner()
        with self.lock:
            self._flush()

    def _flush(self):
        lo = self.nrec
        hi = self.n
        if hi == lo:
            return
        if self.pints:
            self._store_pints()
        if self.pfloats:
            end = self.nfloats + len(self.pfloats)
            if end > len(self.floats[0]):
                size = max(end, 2 * len(self.floats[0]))
                self.floats = [_grown(f, size, self.nfloats) for f in self.floats]
            f64, f32 = self.floats
            f64[self.nfloats:end] = self.pfloats
            f32[self.nfloats:end] = f64[self.nfloats:end]
            self.pfloats.clear()
            self.nfloats = end
        cursor = self.cursor
        if cursor[0] > len(self.vals[0]) or cursor[1] > len(self.vals[1]):
            try:
                for d in (0, 1):
                    self._ensure_arena(d, cursor[d])
            except MemoryError:
                hi = self._drop_unallocatable(lo, hi)   # raises once the tape is consistent
        self._producers = None
        try:
            if self.unkept is not None and executor.reads_unkept(self, lo, hi):
                self.keep_values()
            self._run_forward(lo, hi)
        except BaseException:
            # Nothing half-computed may pass for a value: the records run again next time.
            if self is state.tape:   # later operations must not wait on these records
                retire_current(open_graph=True)
            raise
        # Only now: another thread that sees ``nrec == n`` reads the values without the lock.
        self.nrec = hi

    def _drop_unallocatable(self, lo, hi):
        """The values of records ``lo .. hi`` do not fit in memory.  Drop the record with the
        largest result and everything recorded after it (their tensors raise this error when
        read), keep what fits, retire the tape, and raise a MemoryError naming the op."""
        rec = self.rec[lo:hi]
        arena = rec[:, 0] & 1
        outs = rec[:, 1]
        sizes = np.zeros(hi - lo, np.int64)
        for d in (0, 1):
            mine = np.flatnonzero(arena == d)
            if len(mine):
                ends = np.append(outs[mine[1:]], self.cursor[d])
                sizes[mine] = ends - outs[mine]
        worst = int(np.argmax(sizes))
        r = lo + worst
        d = int(arena[worst])
        op = registry.OPS[int(rec[worst, 0]) >> 1]
        message = _no_memory(f"the result of {op.name} ({op.node})", int(sizes[worst]), d)
        ends = list(self.cursor)
        for a in (0, 1):
            later = np.flatnonzero(arena[worst:] == a)
            if len(later):
                ends[a] = int(outs[worst + later[0]])
        self.n = r
        self.cursor[0], self.cursor[1] = ends
        self.broken = (tuple(ends), message)
        self.grad_loads = [g for g in self.grad_loads if g[2] < ends[g[1]]]
        for key in list(self.loaded):
            if self.loaded[key][0] >= ends[key[1]]:
                del self.loaded[key]
        for key, loads in list(self.loads_of.items()):
            self.loads_of[key] = [e for e in loads if e[0] < ends[key[1]]]
        if self is state.tape:
            state.tape = None       # later operations start on a fresh tape
        hold = state.hold
        if hold is not None and hold[0] is self:
            state.hold = None
        self.home = None
        try:
            for a in (0, 1):
                self._ensure_arena(a, ends[a])
        except MemoryError:
            if r > lo:
                self._drop_unallocatable(lo, r)
            raise
        raise MemoryError(message)

    def _abandon(self):
        """An op failed half-way through recording (no memory): records it made may remain,
        so later ops record on a new tape; this one keeps serving the tensors it holds."""
        if self is state.tape:
            retire_current(open_graph=True)

    def _take_from_owner(self):
        """This thread is about to flush a tape another thread records on.  The owner's next
        operations go to a new tape, and this waits for the one it may be recording now:
        two threads never change one tape at once."""
        home = self.home
        if home is None:
            return
        taken = False
        if home.get("tape") is self:
            home["tape"] = None
            taken = True
        hold = home.get("hold")
        if hold is not None and hold[0] is self:
            home["hold"] = None
            taken = True
        if taken:   # else the owner records elsewhere, and flushes this tape under its lock
            self.home = None
            _wait_outside(self.thread)

    def _run_forward(self, lo, hi):
        sw = sweeps()
        for start, end, kind in self.segments(lo, hi, registry.BY_NAME["cast"].opcode):
            if kind == "cast":
                self._cast_forward(start)
            else:
                executor.forward(self, sw, start, end, kind)

    def _cast_forward(self, r):
        code, out, a, _, n, _ = self.rec[r]
        dst = code & 1
        src = 1 - dst
        a = a if a >= 0 else ~a
        if dst == 1:   # float64 past float32's range is inf, silently as torch
            with np.errstate(over="ignore"):
                self.vals[1][out:out + n] = self.vals[0][a:a + n]
        else:
            self.vals[dst][out:out + n] = self.vals[src][a:a + n]

    def segments(self, lo, hi, cast_opcode, stops=()):
        """``segments()`` with a shortcut: a tape that used one arena has no casts and one dtype."""
        if not stops and not (self.cursor[0] and self.cursor[1]):
            if hi > lo:
                return ((lo, hi, 0 if self.cursor[0] else 1),)
            return ()
        return segments(self.rec, lo, hi, cast_opcode, stops)

    # ---- graph queries (slow path: grad_fn, hooks, printing) -----------------------------

    def summary(self):
        """A printable table of every record: op, PyTorch node, operands, leading values."""
        from tapejit.summary import records_table   # only to print a tape: ~0.7 ms of start-up
        self.flush()
        if self.unkept is not None:
            self.keep_values()
        return records_table(self, self.nrec - 1) if self.nrec else "(an empty tape)"

    def producer(self, arena, off):
        """Index of the record whose result is at ``off`` in arena ``arena``."""
        self.flush()
        if self._producers is None:
            rec = self.rec[:self.nrec]
            keys = rec[:, 1] * 2 + (rec[:, 0] & 1)
            self._producers = dict(zip(keys.tolist(), range(self.nrec)))
        return self._producers.get(off * 2 + arena)


_LOAD = []   # (opcode * 2,) of the load op, filled on first use (ops register late)


def _no_memory(what, elements, d):
    itemsize = np.dtype(_ARENA_DTYPES[d]).itemsize
    return (f"not enough memory for {what}: {elements:,} {_ARENA_DTYPES[d].__name__} values "
            f"({elements * itemsize:,} bytes).  It and the ops recorded after it were dropped "
            f"(reading their results raises this error); later ops record on a new tape.")


def _load_op():
    op = registry.BY_NAME["load"]
    _LOAD[:] = (op.opcode * 2,)
    return _LOAD


def _grown(arr, size, keep):
    out = np.zeros((size,) + arr.shape[1:], arr.dtype)
    out[:keep] = arr[:keep]
    return out


def segments(rec, lo, hi, cast_opcode, stops=()):
    """Split records [lo, hi) into runs the compiled sweeps can take: one dtype, no casts.

    Yields ``(start, end, arena)`` or ``(r, r + 1, "cast")``; ``stops`` are extra record
    indices at which a run must begin (hooks need Python between runs).
    """
    if hi <= lo:
        return
    codes = rec[lo:hi, 0]
    bits = codes & 1
    casts = (codes >> 1) == cast_opcode
    if not stops and not casts.any() and bits.min() == bits.max():
        yield lo, hi, int(bits[0])
        return
    cut = np.zeros(hi - lo + 1, bool)
    cut[0] = cut[-1] = True
    cut[1:-1] |= bits[1:] != bits[:-1]
    where = np.flatnonzero(casts)
    cut[where] = True
    cut[where + 1] = True
    for s in stops:
        if lo < s < hi:
            cut[s - lo] = True
    edges = np.flatnonzero(cut) + lo
    for start, end in zip(edges[:-1].tolist(), edges[1:].tolist()):
        if casts[start - lo]:
            yield start, end, "cast"
        else:
            yield start, end, int(bits[start - lo])


def current():
    """This thread's tape, creating (or reusing a finished) one when needed."""
    tape = state.tape
    if tape is None:
        if state.hold is not None:
            tape = _held()
            if tape is not None:
                return tape
        tape = _fresh_tape()
        tape.home = state.__dict__
        state.tape = tape
    return tape


def recording_tape():
    """The tape this thread records on now, if any (without making one)."""
    tape = state.tape
    if tape is None and state.hold is not None:
        return state.hold[0]
    return tape


def _fresh_tape():
    pool = state.pool
    for i in range(len(pool)):
        old = pool[i]
        # Reusable when nothing outside the pool refers to the tape or its arenas (a
        # tensor, a grad_fn node, or a NumPy view handed to the user).  The counts are
        # the pool's, this frame's and getrefcount's own references.
        if sys.getrefcount(old) > 3:
            continue
        free = sys.getrefcount(old.vals[0]) <= 2 and sys.getrefcount(old.vals[1]) <= 2
        if not free and old.views:
            old.release_views()   # detached tensors still viewing the arenas get copies
            free = sys.getrefcount(old.vals[0]) <= 2 and sys.getrefcount(old.vals[1]) <= 2
        if free:
            del pool[i]
            old.reset()
            return old
    return Tape()


def retire_if_due(tape, own_refs):
    """Retire this thread's tape if it has grown while few tensors still refer to it (a
    loop of forward passes never followed by backward, or backward with retain_graph):
    later ops start a fresh tape, and this one lives only as long as those tensors.  Called
    where no expression is half-recorded (a value read by Python, the end of a backward),
    so the next op does not link the new tape to this one.  ``own_refs`` counts the
    caller's own references (its locals, the thread state, getrefcount's argument).

    Large values retire a tape sooner: a loop evaluating ``f(x)`` on a million elements
    without backward would otherwise grow one arena by the whole graph every iteration
    (and copy it on each growth), where a retired tape is reused at the same size."""
    if tape is not state.tape or tape.tracing:
        return
    refs = sys.getrefcount(tape) - own_refs
    if (tape.n > 64 and refs * 64 < tape.n) or (due_by_size(tape) and refs < 16):
        retire_current(open_graph=True)


# Elements of value arena (32 MB of float64) past which a tape used by few tensors retires.
_LARGE_ARENA = 1 << 22
# Records past which a growing tape few tensors refer to is retired (see _note_growth).
_RETIRE_RECORDS = 4096
# Records of a (re)started tape at which growth is first checked (for large values).
_FIRST_CHECK = 64
# References to a tape held by the frames of an op being recorded when it grows (the
# record functions' locals, grow's ``self``, the thread state, getrefcount's argument).
# An estimate: the test it serves allows one live tensor per 64 records.
_GROWTH_OWN_REFS = 8
# Operations recorded on a held tape before the hold is given up (see _held).
_HOLD_CALLS = 256
_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def due_by_size(tape):
    return tape.cursor[0] + tape.cursor[1] > _LARGE_ARENA


def _note_growth(tape):
    """A check point of ``tape`` (``grow``: every few thousand records) or an arena's
    growth: rare events.  If few tensors still refer to it and its newest records do not
    depend on its old ones, nothing reads most of its records any more (a loop of forward
    passes whose results are never read, which would otherwise grow without bound): retire
    it.  Not at once: an op is being recorded, and ops keep offsets and ``ints`` indices of
    this tape in their locals.  So the tape is held (``state.hold``) until the outermost
    tapejit call now running (a module's forward, an operator) has returned; operations
    recorded meanwhile still go to it (``current()``, ``_held``)."""
    if tape is not state.tape or tape.tracing or state.hold is not None:
        return
    n = tape.n
    refs = sys.getrefcount(tape) - _GROWTH_OWN_REFS
    if ((n >= _RETIRE_RECORDS and refs * 64 < n) or (due_by_size(tape) and refs < 16)) \
            and _independent_halves(tape):
        outer = None
        f = sys._getframe(1)
        while f is not None:
            if f.f_code.co_filename.startswith(_PACKAGE):
                outer = f
            f = f.f_back
        state.hold = [tape, outer, 0]
        state.tape = None


def _next_check(tape):
    """Record count of the next growth check: doubling from 4,096 records, or every 32 MB
    of values for large ones."""
    n = tape.n
    step = max(n, _RETIRE_RECORDS)
    per_record = (tape.cursor[0] + tape.cursor[1]) / max(n, 1)
    if per_record * step > _LARGE_ARENA:
        step = max(16, int(_LARGE_ARENA / per_record))
    return n + step


def _independent_halves(tape):
    """Whether the newest records of ``tape`` depend on none of its first quarter (loads
    aside): iterations of a loop that do not depend on one another, not one long
    computation whose last result needs every record.  This only decides whether retiring
    the tape is worth it (retiring is always correct), so operands listed in ``ints``
    (cat, stack) are not followed."""
    n = tape.n
    rec = tape.rec[:n]
    arena = rec[:, 0] & 1
    rows0 = np.flatnonzero(arena == 0)
    rows1 = np.flatnonzero(arena == 1)
    load_op = (_LOAD or _load_op())[0] >> 1
    earliest = _earliest_reached(rec, n, min(8, n), load_op, registry.BY_NAME["cast"].opcode,
                                 rows0, rec[rows0, 1], rows1, rec[rows1, 1])
    return earliest >= n // 4


@sweep
def _earliest_reached(rec, n, seeds, load_op, cast_op, rows0, outs0, rows1, outs1):
    """The first record (loads aside) that the last ``seeds`` records depend on.  Records
    of one arena have increasing result offsets, so a slot's producer is a binary search."""
    marked = np.zeros(n, np.uint8)
    marked[n - seeds:] = 1
    earliest = n
    for r in range(n - 1, -1, -1):
        if marked[r] == 0:
            continue
        code = rec[r, 0]
        op = code >> 1
        if op == load_op:
            continue
        earliest = r
        d = code & 1
        for k in range(2):
            field = rec[r, 2 + k]
            if field == -1:
                continue
            slot = field if field >= 0 else ~field
            arena = 1 - d if (k == 0 and op == cast_op) else d
            outs = outs0 if arena == 0 else outs1
            rows = rows0 if arena == 0 else rows1
            i = np.searchsorted(outs, slot, "right") - 1
            if i >= 0 and outs[i] == slot:
                marked[rows[i]] = 1
    return earliest


def _held():
    """``current()`` while a tape is held: the held tape as long as the call that was
    running when it grew has not returned; after that, None (the held tape is retired and
    the caller starts a new one).  A call that goes on recording for long (a long
    function under ``value_and_grad``) keeps its tape: the hold is given up."""
    hold = state.hold
    tape, outer, calls = hold
    if tape.lock._is_owned():
        # Backward is sweeping it (ops in a hook or a custom Function's backward): those
        # never record on the swept tape.  Backward is not called half-way through an op,
        # so the hold ends here and the tape is left to its tensors.
        state.hold = None
        tape.home = None
        return None
    f = sys._getframe(2)
    while f is not None and f is not outer:
        f = f.f_back
    if f is None:
        state.hold = None
        state.tape = tape
        retire_current(open_graph=True)
        return None
    hold[2] = calls + 1
    if calls >= _HOLD_CALLS:
        state.hold = None
        state.tape = tape
        tape.checked = 2 * tape.n
        tape.cap = min(len(tape.rec), tape.checked)
    return tape


def _wait_outside(thread_id, timeout=10.0):
    """Wait until the tapejit call thread ``thread_id`` is running now has returned (it may
    be recording on a tape this thread is about to flush)."""
    frames = sys._current_frames()
    outer = _outermost(frames.get(thread_id))
    del frames
    if outer is None:
        return
    deadline = time.monotonic() + timeout
    while True:
        time.sleep(5e-5)
        f = sys._current_frames().get(thread_id)
        while f is not None and f is not outer:
            f = f.f_back
        if f is None:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(
                "tapejit: a tensor recorded by another thread was read or used for backward "
                "while that thread kept recording on the same tape; let the recording thread "
                "finish its call (or read the value on it) first")


def _outermost(f):
    outer = None
    while f is not None:
        if f.f_code.co_filename.startswith(_PACKAGE):
            outer = f
        f = f.f_back
    return outer


def forget_opened(tape):
    """A backward without retain_graph freed ``tape``'s graph: in-place changes need not
    mark its records any more."""
    state.opened[:] = [e for e in state.opened if e[0]() is not tape]


def retire_current(open_graph=False):
    """Later ops start on a fresh tape: called after a backward that freed the graph, or
    with ``open_graph`` when the tape's graph may still be used (retired for its size, or
    with retain_graph): in-place changes of leaves then still mark its records
    (``inplace.note_leaf_write`` looks at ``state.opened``)."""
    tape = state.tape
    if tape is None or tape.tracing:
        return
    state.tape = None
    tape.home = None
    if open_graph:
        opened = state.opened
        opened[:] = [e for e in opened if e[0]() is not None and e[0]().serial == e[1]]
        opened.append((weakref.ref(tape), tape.serial))
    pool = state.pool
    pool.append(tape)
    if len(pool) > 2:
        evicted = pool.pop(0)
        if evicted.views:
            evicted.release_views()   # its arenas can be freed once no tensor refers to it
