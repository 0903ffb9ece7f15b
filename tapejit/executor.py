"""Runs of large elementwise records, executed chunk by chunk across cores.

A tape over large arrays is mostly elementwise records of one length ``n`` (arithmetic,
activations, the copies behind slices), each a pass over memory.  A *run* of such
records is executed here as chunks of ``CHUNK`` elements: chunk ``c`` is a copy of the
run's records with every operand shifted to elements ``c * CHUNK ...``, run by the
compiled sweeps (``forward_chunks``/``backward_chunks`` in the generated module loop
over a range of chunks; backward runs use ``backward_elementwise``, whose same-shape
binary loops vectorize).  The chunks are shared out to ``THREADS`` threads; the sweeps
release the GIL, so the threads run at once: on 2 cores a 10^6-element Rosenbrock
forward pass took 5.3 ms against 8.1 ms on one.

Values and gradients kept in cache.  A thread takes each chunk through the whole run,
so what one record writes the next reads from cache.  Writing it to its slot as well is
what costs: a 10^6-element Rosenbrock gradient wrote and read back some 20 arrays of
8 MB, and memory bandwidth, not arithmetic, set its time.  So a slot made and read in
the run, read by no record outside it and by no backward rule (``_cache_only``), is
computed in a scratch area, one per thread, reused by every chunk: the first elements
of the slot itself, which nothing else uses (thread ``s`` at ``slot + s * CHUNK``); in
the forward sweep its value, in the backward sweep its gradient (only gradients are
written there, so a value the backward sweep reads is never overwritten).  A value
kept in cache only is computed again, whole, if anything reads it later: a tensor's
value, or a new record (``Tape.keep_values``).  While ``tj.compile`` traces, every
value is kept; a frozen trace keeps those its replays read (``Tape.kept``).  A copy (a
slice) kept in cache only is not made at all in the forward chunks: its readers read its
source's elements (``_read_in_place``); in the backward chunks a slice's one reader adds
its gradient straight into the source's, where that keeps the order in which each
element's terms are added (``_add_in_place``).

What may join a run (the conditions keep chunks independent):

* forward: unary ops, binary ops (a size-1 operand of a broadcast is read whole, not
  shifted), and range copies (slices) whose source is not computed inside the run
  (a chunk would read another chunk's elements);
* both: the full sum (``.sum()``, ``.mean()``) of a value the run computes and nothing
  else reads, right after the run (``_with_sum``): each chunk sums its own elements;
* backward: unary ops, same-shape binary ops and slices.  A broadcast operand's gradient
  is a sum over every chunk, so those records run whole, between runs.  A slice adds
  into its source's range shifted by its start, which overlaps the next chunk's.  On one
  thread the chunks run in turn.  On several, a slice joins a run only if it starts
  within a chunk of its source's start, so that it reaches into the next chunk alone;
  its source's gradient is zeroed and flagged before the run, and each share's last
  chunk runs after the others (``_slice_sources_ready``, ``_shared_out``).

In both, a slot that a chunk reads whole (a slice's source, a broadcast operand) must
not be computed in the run nor read chunk by chunk elsewhere in it.

The backward sweep marks an adjoint slot as written in ``flags[slot]``.  A chunk's
shifted offsets look up ``flags[slot + start]``, positions inside the slot that nothing
else uses: they are set from ``flags[slot]`` before the run and cleared after it, so
every chunk sees the flags chunk 0 sees.
"""
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from tapejit import registry
from tapejit._inline import reads
from tapejit import threads as _threads
from tapejit.threads import default_threads

#: records shorter than this run whole: below it a parallel launch costs more than it saves
MIN_ELEMENTS = 1 << 16
#: elements per chunk: a run's intermediates for one chunk stay in the core's cache
CHUNK = 8192

_NONE, _UNARY, _BINARY, _COPY = 0, 1, 2, 3
_kinds = None
#: opcode -> values its backward rule reads: 1 operand a, 2 operand b, 4 its output
_saved = None
#: opcode -> 1 for the sums (sum, mean; their kernel's blocks, SUM_BLOCK elements each)
_sums = None
_SUM_BLOCK = None
#: opcode -> 1 for ops with operands listed in ints (cat, stack, linear's bias)
_lists = None
#: threads working on a run, the caller's included (``tj.set_num_threads``)
THREADS = default_threads()
_threads.use_executor(sys.modules[__name__])   # set_num_threads sets THREADS here
_pool = [None, 0]   # a ThreadPoolExecutor and its number of workers, made on first use
_plans = {}         # see _planned
_PLANS_KEPT = 16
_plans_lock = threading.Lock()
if hasattr(os, "register_at_fork"):
    # a forked child has none of the parent's worker threads: it makes its own pool
    os.register_at_fork(after_in_child=lambda: _pool.__setitem__(slice(None), [None, 0]))


def _kind_table():
    """Opcode -> what the chunked sweeps may do with it (built once all ops are registered)."""
    global _kinds, _saved, _lists, _sums, _SUM_BLOCK
    if _kinds is None or len(_kinds) != len(registry.OPS):
        _sums = np.array([op.runs == "sum" for op in registry.OPS])
        _SUM_BLOCK = max((op.block for op in registry.OPS if op.runs == "sum"), default=None)
        _lists = np.array([op.listed is not None for op in registry.OPS])
        code = {"unary": _UNARY, "binary": _BINARY, "copy": _COPY, None: _NONE}
        kinds = np.zeros(len(registry.OPS), np.int8)
        saved = np.zeros(len(registry.OPS), np.int8)
        for op in registry.OPS:
            kinds[op.opcode] = code[registry.elementwise_kind(op)]
            # From the rules themselves, not ``op.saved``: that is PyTorch's list for the
            # in-place checks, and a rule may read more (pow reads its output).
            if op.kind == "unary":
                used = reads(op.grad)
                saved[op.opcode] = (0 in used) + 4 * (1 in used)
            elif op.kind == "binary":
                used = reads(op.grad_x) | reads(op.grad_y)
                saved[op.opcode] = (0 in used) + 2 * (1 in used) + 4 * (2 in used)
        _kinds, _saved = kinds, saved
    return _kinds


def worth_it(tape):
    """Cheap test first: a tape whose arenas are small has no large record."""
    return tape.cursor[0] + tape.cursor[1] >= 2 * MIN_ELEMENTS


def has_runs(tape):
    """Whether the flushed records of ``tape`` hold a run (a large arena may be only
    large parameters, with no large elementwise record)."""
    return worth_it(tape) and bool(_runs(tape.rec, 0, tape.nrec, backward=False))


def _runs(rec, lo, hi, backward):
    """``[(start, end)]``: maximal runs of chunkable records in ``rec[lo:hi]`` (loads may sit
    inside a run: neither sweep does anything for them)."""
    rows = rec[lo:hi]
    kind = _kind_table()[rows[:, 0] >> 1]
    size = rows[:, 4]
    is_load = (rows[:, 0] >> 1) == registry.BY_NAME["load"].opcode
    ok = (kind != _NONE) & (size >= MIN_ELEMENTS)
    if backward:
        same_shape = (kind == _UNARY) | ((kind == _BINARY) & (rows[:, 5] == 0))
        # A slice adds into its source shifted by its start: on several threads, only a
        # start under a chunk keeps that to the chunk next door (_slice_sources_ready).
        ok &= same_shape | ((kind == _COPY) & ((THREADS == 1) | (~rows[:, 3] < CHUNK)))
    if not ok.any():
        return []
    runs = []
    start = None
    for i in range(len(rows)):
        if is_load[i] and start is not None:
            continue
        if ok[i]:
            whole, aligned = _operands(rows[i], kind[i])
        # A slot a chunk reads whole is neither computed in the run (a chunk would read
        # other chunks' elements) nor also read chunk by chunk (a chunk's first gradient
        # would overwrite what another chunk added to the whole slot).
        fits = ok[i] and (start is None or (size[i] == length and not (
            whole & made or whole & by_chunk or aligned & read_whole)))
        if not fits:
            if start is not None:
                runs.append((lo + start, lo + i))
                start = None
            if not ok[i]:
                continue
        if start is None:
            start, length, made, by_chunk, read_whole = i, size[i], set(), set(), set()
        made.add(int(rows[i, 1]))
        by_chunk |= aligned
        read_whole |= whole
    if start is not None:
        runs.append((lo + start, hi))
    return runs


def _operands(row, kind):
    """``(whole, aligned)``: the slots of a record's operands read whole (a copy's source,
    a broadcast size-1 operand) and read element by element."""
    a = int(row[2]) if row[2] >= 0 else ~int(row[2])
    if kind == _COPY:
        return {a}, set()
    if kind == _UNARY:
        return set(), {a}
    b = int(row[3]) if row[3] >= 0 else ~int(row[3])
    q = int(row[5])
    whole, aligned = set(), set()
    (whole if q & 1 else aligned).add(a)
    (whole if q & 2 else aligned).add(b)
    return whole, aligned


def _shifted(rec, start, end, n, backward):
    """The run's records once per chunk, each chunk's operands moved to its elements."""
    rows = rec[start:end]
    kind = _kind_table()[rows[:, 0] >> 1]
    firsts = np.arange(0, n, CHUNK, dtype=np.int64)
    k = len(firsts)
    chunks = np.repeat(rows[None, :, :], k, axis=0)
    shift = firsts[:, None]
    work = kind != _NONE                      # loads stay as they are
    counts = np.minimum(CHUNK, n - firsts)
    chunks[:, work, 4] = counts[:, None]
    chunks[:, work, 1] += shift

    def move(field, where):
        enc = rows[:, field]
        chunks[:, where & (enc >= 0), field] += shift
        chunks[:, where & (enc < 0), field] -= shift      # ~(x + s) == ~x - s

    unary = kind == _UNARY
    binary = kind == _BINARY
    copy = kind == _COPY
    q = rows[:, 5]
    move(2, unary | (binary & ((q & 1) == 0)))
    move(3, binary & ((q & 2) == 0))
    # A copy's field b is ~start within its source: start + first is ~b - first.
    move(3, copy)
    return chunks, firsts


def forward(tape, sw, lo, hi, d):
    """The forward sweep over ``rec[lo:hi]`` (arena ``d``) with large elementwise runs chunked."""
    rec, ints, floats, table = tape.rec, tape.ints, tape.floats[d], sw.table(d)
    if not worth_it(tape):
        sw.forward(rec, lo, hi, tape.vals[d], ints, floats, table)
        return
    at = lo
    for start, end, chunks, cached, sums in _planned(tape, lo, hi, d, False):
        if start > at:
            sw.forward(rec, at, start, tape.vals[d], ints, floats, table)
        if cached and tape.kept is None:   # a frozen trace's replays read only its kept values
            tape.note_unkept(start, end, d, cached)
        _shared_out(sw.forward_chunks, chunks, tape.vals[d], ints, floats, table)
        if sums is not None:
            _add_chunk_sums(tape.vals[d], floats, rec[end - 1], sums)
        at = end
    if hi > at:
        sw.forward(rec, at, hi, tape.vals[d], ints, floats, table)


def _forward_plan(tape, lo, hi, d):
    plan = []
    for start, end in _runs(tape.rec, lo, hi, backward=False):
        if tape.tracing:   # any value may be read into the trace
            end, cached, summed = end, [], None
        else:
            end, cached, summed = _with_sum(tape, start, end, hi, None)
        chunks, firsts = _shifted(tape.rec, start, end, int(tape.rec[start, 4]), False)
        rows = tape.rec[start:end]
        views = _read_in_place(chunks, firsts, rows, cached)
        _to_scratch(chunks, rows, [s for s in cached if s not in views])
        sums = None if summed is None else _sum_by_chunk(chunks, firsts, rows, summed)
        plan.append((start, end, chunks, cached, sums))
    return plan


def _with_sum(tape, start, end, hi, flags):
    """``(end, cached, summed)`` for the run ``rec[start:end]``: with the full sum of one
    of its results (a loss's ``.sum()``/``.mean()``) right after it, when that sum can join
    it.  Each chunk then sums its elements, so the summed values are never written (nor,
    backward, their gradients).  It joins when those values stay in cache
    (``_cache_only``), so that the elements of their slot past the threads' scratch areas
    are free to hold each chunk's sum (``_sum_by_chunk``), and when chunks are the sum
    kernel's blocks: the chunks' sums then add up to the same bits."""
    summed = _joining_sum(tape, start, end, hi)
    if summed is not None:
        cached = _cache_only(tape, start, end + 1, flags, summed)
        n = int(tape.rec[start, 4])
        k = -(-n // CHUNK)
        if summed in cached and n >= CHUNK * min(THREADS, k) + k:
            return end + 1, cached, summed
    return end, _cache_only(tape, start, end, flags), None


def _joining_sum(tape, start, end, hi):
    """The slot summed by record ``end`` if that is a sum of all the elements of a value
    the run ``rec[start:end]`` computes (layout ``[1, 1, n, 0]``), else None."""
    if end >= hi or CHUNK != _SUM_BLOCK:
        return None
    row = tape.rec[end]
    if not _sums[row[0] >> 1] or row[4] < 0:
        return None
    p, n = int(row[4]), int(tape.rec[start, 4])
    if tape.ints[p:p + 4].tolist() != [1, 1, n, 0]:
        return None
    rows = tape.rec[start:end]
    kind = _kind_table()[rows[:, 0] >> 1]
    summed = int(row[2]) if row[2] >= 0 else ~int(row[2])
    return summed if summed in rows[(kind == _UNARY) | (kind == _BINARY), 1].tolist() else None


def _sum_by_chunk(chunks, firsts, rows, summed):
    """Make the run's last record, a full sum of slot ``summed`` (kept in cache), a sum
    of each chunk's elements (``p < 0`` in the sum kernels: ``~p`` elements): read from
    its thread's scratch area, and with its output (forward: the chunk's sum; backward: a
    copy of the sum's gradient) at ``spare[c]``, past the scratch areas.  Returns ``spare``."""
    k = len(chunks)
    r = len(rows) - 1
    spare = summed + CHUNK * min(THREADS, k) + np.arange(k, dtype=np.int64)
    chunks[:, r, 1] = spare
    scratch = summed + _share_of_chunk(k) * CHUNK
    chunks[:, r, 2] = scratch if rows[r, 2] >= 0 else ~scratch
    chunks[:, r, 4] = ~np.minimum(CHUNK, int(rows[0, 4]) - firsts)
    return spare


def _add_chunk_sums(v, floats, row, spare):
    """A joined sum's value: its chunks' sums added in order, as ``sum_forward`` adds its
    blocks (``accumulate`` adds one after the other), then scaled (``mean``)."""
    out, q = int(row[1]), int(row[5])
    v[out] = np.add.accumulate(v[spare])[-1]
    if floats[q] != 1.0:
        v[out:out + 1] *= floats[q]


def _read_in_place(chunks, firsts, rows, cached):
    """In the forward chunks, a copy whose result is kept in cache only is not made: its
    readers read the elements of its source instead (the source is not computed in the
    run, so it is whole in memory).  A slice costs a pass over the chunk otherwise, some
    7% of a 10^6-element Rosenbrock forward pass for each.  Returns the copies' results."""
    kind = _kind_table()[rows[:, 0] >> 1]
    views = {}
    for r in np.flatnonzero(kind == _COPY).tolist():
        out = int(rows[r, 1])
        if out in cached:
            views[out] = _copied_from(rows[r])
            chunks[:, r, 4] = 0
    for r, field, enc in _aligned_reads(rows, kind) if views else ():
        first = views.get(enc if enc >= 0 else ~enc)
        if first is not None:
            at = first + firsts
            chunks[:, r, field] = at if enc >= 0 else ~at
    return views


def _copied_from(row):
    """The arena position of a copy record's first element in its source (field b holds
    ``~start``)."""
    source = int(row[2])
    return (source if source >= 0 else ~source) + ~int(row[3])


def _aligned_reads(rows, kind):
    """``(record, field, encoded operand)`` for every operand read element by element."""
    for field, where in ((2, kind == _UNARY), (2, (kind == _BINARY) & ((rows[:, 5] & 1) == 0)),
                         (3, (kind == _BINARY) & ((rows[:, 5] & 2) == 0))):
        for r in np.flatnonzero(where).tolist():
            yield r, field, int(rows[r, field])


def backward(tape, sw, lo, hi, d, retain):
    """The backward sweep over ``rec[lo:hi]`` (newest first) with large elementwise runs
    chunked; returns -1 or the index of a record that cannot run, as the sweep does."""
    rec, freed, ints, floats, table = tape.rec, tape.freed, tape.ints, tape.floats[d], sw.table(d)

    def whole(first, last):
        return sw.backward(rec, first, last, tape.vals[d], tape.adj[d], tape.flags[d], freed, ints,
                           floats, retain, table)

    if not worth_it(tape):
        return whole(lo, hi)
    top = hi
    for run in _planned(tape, lo, hi, d, True):
        start, end, _, cached, _, _, views, _, sums = run
        if end < top:
            r = whole(end, top)
            if r >= 0:
                return r
        # a gradient already there: see _cache_only and _add_in_place
        if (cached or views) and tape.flags[d][cached + views].any():
            run = _backward_run_plan(tape, start, end - (sums is not None), hi, d, tape.flags[d])
        r = _backward_run(tape, sw, run, d, retain)
        if r >= 0:
            return r
        top = start
    if top > lo:
        return whole(lo, top)
    return -1


def _backward_plan(tape, lo, hi, d):
    return [_backward_run_plan(tape, start, end, hi, d, None)
            for start, end in reversed(_runs(tape.rec, lo, hi, backward=True))]


def _backward_run_plan(tape, start, end, hi, d, flags):
    """The chunks of the run ``rec[start:end]``, with the full sum after it if that joins
    (``_with_sum``; records up to ``hi`` are in this sweep)."""
    rec = tape.rec
    end, cached, summed = _with_sum(tape, start, end, hi, flags)
    rows = rec[start:end]
    chunks, firsts = _shifted(rec, start, end, int(rec[start, 4]), True)
    _to_scratch(chunks, rows, cached)
    sums = None if summed is None else _sum_by_chunk(chunks, firsts, rows, summed)
    kind = _kind_table()[rows[:, 0] >> 1]
    views, in_place = _add_in_place(chunks, firsts, rows, kind, flags)
    slots = set()
    for row, k in zip(rows, kind):
        if k != _NONE:
            slots.add(int(row[1]))
            slots |= _operands(row, k)[1]
    slots = np.array(sorted(slots.difference(cached)), np.int64)
    mirrors = (slots[None, :] + firsts[1:, None]).ravel()
    return start, end, chunks, cached, slots, mirrors, views, in_place, sums


def _add_in_place(chunks, firsts, rows, kind, flags):
    """In the backward chunks, a slice read by one operand of one record in the run: that
    record adds its gradient straight into the slice's source, and the slice (its output
    never gets a gradient) does nothing.  Each slice otherwise costs a pass over the chunk.

    Only where the sum stays the same to the last bit: each element of a source's gradient
    must receive its terms in the order the unchunked sweep adds them, slice by slice from
    the newest.  A slice read in place adds when its reader runs, so it qualifies only if
    its reader comes before the term added next (``latest``).  A slice whose output already
    has a gradient (``flags``) is left as it is.  Returns the slices' outputs, and the
    positions in their sources the readers' operands now point to, whose flags must read
    "written" during the run (the source is zeroed and flagged first)."""
    readers = {}
    for r, field, enc in _aligned_reads(rows, kind):
        readers.setdefault(enc if enc >= 0 else ~enc, []).append((r, field, enc))
    by_source = {}
    for r in np.flatnonzero(kind == _COPY).tolist():
        if rows[r, 2] >= 0:
            by_source.setdefault(int(rows[r, 2]), []).append(r)
    views, in_place = [], []
    for source, copies in by_source.items():
        latest = len(rows)
        for r in reversed(copies):
            out = int(rows[r, 1])
            read = readers.get(out, ())
            if (len(read) == 1 and read[0][2] >= 0 and read[0][0] < latest
                    and (flags is None or not flags[out])):
                reader, field, _ = read[0]
                at = _copied_from(rows[r]) + firsts
                chunks[:, reader, field] = at
                views.append(out)
                in_place.append(at[at != source])   # the source's own flag is its gradient's
                latest = reader
            else:
                latest = r
    return views, (np.concatenate(in_place) if in_place else np.empty(0, np.int64))


def _backward_run(tape, sw, run, d, retain):
    start, end, chunks, cached, slots, mirrors, _, in_place, sums = run
    v, g, flags, freed = tape.vals[d], tape.adj[d], tape.flags[d], tape.freed
    k = len(chunks)
    shares = min(THREADS, k)
    for slot in cached:   # the scratch areas: each producer clears them again, chunk by chunk
        flags[slot:slot + CHUNK * shares] = 0
    total = None if sums is None else int(tape.rec[end - 1, 1])
    if total is not None:   # every chunk of the sum reads the sum's gradient from its copy
        g[sums] = g[total]
        flags[sums] = flags[total]
    slices = (shares > 1 or len(in_place)) and _slice_sources_ready(tape.rec[start:end], g, flags,
                                                                     total is not None)
    flags[mirrors] = np.tile(flags[slots], k - 1)
    flags[in_place] = 1
    freeds = np.repeat(freed[None, start:end], k, axis=0)
    status = np.empty(k, np.int64)
    _shared_out(sw.backward_chunks, chunks, v, g, flags, freeds, tape.ints, tape.floats[d], retain, status,
                sw.table(d), apart=bool(slices) and shares > 1)
    flags[mirrors] = 0
    flags[in_place] = 0
    if total is not None:
        flags[total] = 0   # the sum's own record has run, as the unchunked sweep marks it
    freed[start:end] = freeds[0]
    r = int(status[0])
    return r + start if r >= 0 else -1


def _slice_sources_ready(rows, g, flags, ends_in_sum):
    """Before a backward run on several threads, or one where slices' readers add into their
    sources (``_add_in_place``): the gradient of each slice's source that the run will
    reach is zeroed and flagged, so that every chunk adds into it (a chunk's first write
    would overwrite its neighbour's additions).  Which slices the sweep will
    reach follows from the flags, as the sweep itself decides.  Returns whether the run
    has slices: their chunks must then run apart (``_shared_out``)."""
    kind = _kind_table()[rows[:, 0] >> 1]
    if not (kind == _COPY).any():
        return False
    if ends_in_sum:   # the sum passes its gradient to its operand, as a unary op does
        kind = kind.copy()
        kind[-1] = _UNARY
    reached = {int(o) for o in rows[:, 1] if flags[o]}
    for row, k in zip(rows[::-1], kind[::-1]):
        if k == _NONE or int(row[1]) not in reached:
            continue
        for field in (2, 3) if k == _BINARY else (2,):
            if row[field] >= 0:
                reached.add(int(row[field]))
        if k == _COPY and row[2] >= 0 and not flags[row[2]]:
            a, size = int(row[2]), int(row[5])
            g[a:a + size] = 0.0
            flags[a] = 1
    return True


def _planned(tape, lo, hi, d, backward):
    """The runs of ``rec[lo:hi]`` with their chunk records, for the forward or backward
    sweep.  Working them out costs about a millisecond of NumPy calls, as much as the
    sweeps over 10^5 elements, and a loop of steps records the same tape every time: so
    plans are kept, keyed by everything they are made of."""
    rec = tape.rec
    # A large arena may hold only parameters (an MLP's weights) and no large record: one
    # comparison rules that out, where planning costs ~50 us a step (field 4 is the length
    # of an elementwise record; for other ops an index, which at worst plans for nothing).
    if not (rec[lo:hi, 4] >= MIN_ELEMENTS).any():
        return ()
    _kind_table()
    if _lists[rec[lo:tape.n, 0] >> 1].any():   # operands listed in ints: not in the key
        return _backward_plan(tape, lo, hi, d) if backward else _forward_plan(tape, lo, hi, d)
    key = (backward, rec[lo:tape.n].tobytes(), lo, hi, d, tape.cursor[d], tape.tracing, tape.kept, THREADS,
           CHUNK, MIN_ELEMENTS)
    plan = _plans.get(key)
    if plan is None:
        plan = _backward_plan(tape, lo, hi, d) if backward else _forward_plan(tape, lo, hi, d)
        with _plans_lock:
            while len(_plans) >= _PLANS_KEPT:
                del _plans[next(iter(_plans))]
            _plans[key] = plan
    return plan


def _cache_only(tape, start, end, flags, summed=None):
    """Slots made by the run ``rec[start:end]`` whose values (forward) or gradients
    (backward, given its ``flags``) need not reach memory: no record outside the run reads
    them and no backward rule reads their value.  Each chunk then computes them in a
    scratch area its thread reuses, which stays in cache: a 10^6-element Rosenbrock
    gradient otherwise writes and rereads some 20 arrays of 8 MB, and memory bandwidth,
    not arithmetic, sets its time.  A value kept only in cache is computed again if it is
    read later (``Tape.keep_values``)."""
    rec = tape.rec
    rows = rec[start:end]
    ops = rows[:, 0] >> 1
    kind = _kind_table()[ops]
    # Only values the run itself reads: one nothing reads is a result the caller holds.
    read = set(_decoded(rows[(kind == _UNARY) | (kind == _BINARY), 2]).tolist())
    read.update(_decoded(rows[kind == _BINARY, 3]).tolist())
    if summed is not None:   # read by the full sum that ends the run (_with_sum)
        read.add(summed)
    made = read.intersection(rows[kind != _NONE, 1].tolist())
    saved = _saved[ops]
    needed = set(_decoded(rows[(saved & 1) != 0, 2]).tolist())
    needed.update(_decoded(rows[(saved & 2) != 0, 3]).tolist())
    needed.update(rows[(saved & 4) != 0, 1].tolist())
    if tape.kept:   # a frozen trace's results
        d = int(rows[0, 0] & 1)
        needed.update(slot for arena, slot in tape.kept if arena == d)
    later = rec[end:tape.n]
    needed.update(_decoded(later[:, 2]).tolist())
    needed.update(_decoded(later[:, 3]).tolist())
    needed.update(_listed(later, tape.ints))
    if int(rows[0, 4]) < CHUNK * min(THREADS, -(-int(rows[0, 4]) // CHUNK)):
        return []   # too short to hold every thread's scratch area
    cached = made - needed
    if flags is not None:   # a gradient already present (the seed) lives in its slot
        cached = {s for s in cached if not flags[s]}
    return sorted(cached)


def reads_unkept(tape, lo, hi):
    """Whether records ``lo:hi`` read a value a run kept in cache only."""
    rows = tape.rec[lo:hi]
    _kind_table()
    read = set(_decoded(rows[:, 2:4]).ravel().tolist())
    read.update(_listed(rows, tape.ints))
    unkept = tape.unkept[1]
    return any((d, s) in unkept for s in read for d in (0, 1))


def _decoded(column):
    return np.where(column >= 0, column, ~column)


def _listed(rows, ints):
    """The operands of ``rows`` listed in ``ints`` (cat, stack, linear's bias)."""
    if not _lists[rows[:, 0] >> 1].any():
        return []
    return listed_operands(rows, ints)[1].tolist()


def listed_operands(rec, ints):
    """``(listed_at, listed)``: the extra operands of each record (``Op.listed``: cat, stack,
    linear's bias) in CSR form, ``listed[listed_at[r]:listed_at[r + 1]]`` for record ``r``."""
    n = len(rec)
    ops = rec[:, 0] >> 1
    _kind_table()   # the per-opcode table, not a list of opcodes and np.isin (~100 us) per call
    rows = np.flatnonzero(_lists[ops]) if n else np.zeros(0, np.int64)
    counts = np.zeros(n, np.int64)
    listed = []
    for r in rows.tolist():
        fields = registry.OPS[int(ops[r])].listed(ints, int(rec[r, 4]))
        counts[r] = len(fields)
        listed.extend(fields)
    listed_at = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=listed_at[1:])
    return listed_at, np.array(listed, np.int64)


def _to_scratch(chunks, rows, cached):
    """Point every chunk's references to the slots ``cached`` at its thread's scratch area:
    the elements ``s * CHUNK ...`` of the slot itself for the thread of share ``s``."""
    if not cached:
        return
    kind = _kind_table()[rows[:, 0] >> 1]
    share = _share_of_chunk(len(chunks))
    cached = set(cached)
    for field, where in ((1, kind != _NONE), (2, (kind == _UNARY) | (kind == _BINARY)), (3, kind == _BINARY)):
        for r in np.flatnonzero(where).tolist():
            enc = int(rows[r, field])
            slot = enc if enc >= 0 else ~enc
            if slot in cached:
                off = slot + share * CHUNK
                chunks[:, r, field] = off if enc >= 0 else ~off


def _share_of_chunk(k):
    """The share (thread) each of ``k`` chunks goes to (``_shared_out``)."""
    return np.searchsorted(_bounds(k), np.arange(k), side="right") - 1


def _bounds(k):
    """How ``_shared_out`` splits ``k`` chunks: share ``s`` is chunks ``bounds[s]:bounds[s + 1]``."""
    shares = min(THREADS, k)
    return [k * i // shares for i in range(shares + 1)]


def _shared_out(sweep, chunks, *args, apart=False):
    """``sweep(chunks, first, last, *args)`` over every chunk: one contiguous share per
    thread, the calling thread taking the first.  With ``apart`` each share's last chunk
    runs after the others, one at a time: a slice's chunk adds into the next chunk's first
    elements, which belong to the next share there."""
    bounds = _bounds(len(chunks))
    shares = len(bounds) - 1
    if _pool[1] < shares - 1:
        _pool[:] = [ThreadPoolExecutor(shares - 1, thread_name_prefix="tapejit-chunks"), shares - 1]
    held = 1 if apart and shares > 1 else 0
    others = [_pool[0].submit(sweep, chunks, bounds[i], bounds[i + 1] - held, *args) for i in range(1, shares)]
    sweep(chunks, bounds[0], bounds[1] - held, *args)
    for f in others:
        f.result()
    for i in range(1, shares + 1) if held else ():
        sweep(chunks, bounds[i] - 1, bounds[i], *args)
