"""``compiled.batch(*stacked)``: one trace evaluated for every row of a leading batch axis.

A trace of elementwise records, copies and sums runs with the rows as the vector axis
(``rows.py``: each record once per block of rows, on tapejit's threads) once that module
is compiled (in the background: ``rows.driver``).  Any other trace, and every trace until
then, runs its rows as independent replays: ``replay_batch`` (generated with the sweeps)
in a ``prange`` over chunks of rows, each chunk with its own value, adjoint and flag
buffers.  With tier 2 on (``tj.compile``'s ``tier2``), a trace of fused loops with no
kernel call between them gets its own row function (``fused.generate_rows``: the rows of a
block innermost in each loop), compiled in the background from its first batch on
(``tier2.py``); once it is ready it runs instead.  ``compiled.stats()["batch"]`` says which
ran and the state of both compiles (``stats``).  The trace comes from the first row
(traced now if this signature is new); parameters and constants are read once per call,
before the rows run.

Supported: ``tj.compile(tj.value_and_grad(f))`` and ``tj.compile(tj.grad(f))`` (values and
per-sample gradients), and functions without ``backward()`` whose result is a tensor or a
tuple of tensors (stacked results).  A training step updates ``.grad``, which has no
per-sample meaning, so it is refused.
"""
import threading

import numba
import numpy as np

from tapejit.replay import rows, tier2
from tapejit.replay.frozen import Stale
from tapejit.replay.trace import CompileError
from tapejit.tensor import Tensor, _concrete

# Rows as the vector axis (rows.py) where the trace allows: "on" (compiled in the background),
# "sync" (compiled in the caller) or "off" (always row by row); TAPEJIT_BATCH_ROWS sets it.
ROWS = rows.default_mode()
# Numba's "workqueue" threading layer aborts when two threads enter parallel code at once.
_one_at_a_time = threading.Lock()


def _rows_of(x, name):
    if isinstance(x, Tensor):
        x = x._value()
    x = np.asarray(x)
    if x.ndim == 0:
        raise CompileError(f"{name}.batch: every batched argument needs a leading batch axis, got a 0-d value")
    return x


def run_batch(compiled, stacked, kwargs):
    name = compiled.__name__
    if not stacked:
        raise CompileError(f"{name}.batch: pass at least one stacked argument")
    functional = compiled.functional
    arrays = []
    batch = None
    if any(isinstance(v, (Tensor, np.ndarray)) for v in kwargs.values()):
        raise CompileError(f"{name}.batch: pass batched arrays as positional arguments, not keywords")
    for i, x in enumerate(stacked):
        if isinstance(x, (Tensor, np.ndarray)) or isinstance(x, (list, tuple)) and x and not isinstance(x[0], str):
            x = _rows_of(x, name)
            if x.dtype.kind not in "f":
                raise CompileError(f"{name}.batch: argument {i} is an integer or boolean array; only float "
                                   f"arguments can vary over the batch (integers are part of a trace)")
            if batch is None:
                batch = x.shape[0]
            elif x.shape[0] != batch:
                raise CompileError(f"{name}.batch: argument {i} has {x.shape[0]} rows, argument 0 has {batch}")
            arrays.append(x)
        else:
            arrays.append(None)   # a static argument, the same for every row
    if batch is None:
        raise CompileError(f"{name}.batch: no argument has a batch axis")
    if batch == 0:
        raise CompileError(f"{name}.batch: the batch has 0 rows; batch() traces the function on its first "
                           f"row, so it needs at least one")
    first = [x[0] if x is not None else s for x, s in zip(arrays, stacked)]
    if functional is None:
        first = [_concrete(np.ascontiguousarray(x)) if isinstance(x, np.ndarray) else x for x in first]
    entry = _entry_for(compiled, first, kwargs)
    frozen = entry.frozen
    if frozen.mixed:
        raise CompileError(f"{name}.batch: the trace mixes float32 and float64; batch() needs one dtype")
    if any(e[0] == "call" for e in frozen.events):
        raise CompileError(f"{name}.batch: the function resets gradients (zero_grad); batch() replays "
                           "value-and-gradient functions and functions without backward()")
    d = frozen.arena
    tape = frozen.tape
    dt = tape.vals[d].dtype
    if entry.label_patches:
        raise CompileError(f"{name}.batch: the function's labels are patched per call; batch() needs "
                           "float arguments only")
    with frozen.lock:
        values = [np.asarray(x) if x is not None else None for x in first]
        if functional is None:
            values = [x._value() if isinstance(x, Tensor) else x for x in values]
        try:
            frozen.refresh(values)
        except Stale:
            raise CompileError(f"{name}.batch: a tensor the function uses changed shape, dtype or "
                               f"requires_grad since it was traced; call the function once to "
                               f"trace it again") from None
        v0 = tape.vals[d].copy()
    columns = {}
    width = 0
    for i, x in enumerate(arrays):
        if x is not None:
            columns[i] = width
            width += int(np.prod(x.shape[1:], dtype=np.int64))
    batched = [x for x in arrays if x is not None]
    if len(batched) == 1 and batched[0].dtype == dt and batched[0].flags.c_contiguous \
            and batched[0].flags.writeable:     # (a read-only array is another type to compile for)
        inputs = batched[0].reshape(batch, width)      # only read: no copy
    else:
        inputs = np.empty((batch, width), dt)
        for i, x in enumerate(arrays):
            if x is not None:
                inputs[:, columns[i]:columns[i] + x[0].size] = x.reshape(batch, -1)
    in_at = np.array([(ld.off, columns[ld.arg], ld.n) for ld in frozen.loads
                      if ld.arg is not None and ld.arg in columns], np.int64).reshape(-1, 3)
    if functional is not None:
        out_slots, grad_at, grad_shapes = _functional_layout(compiled, entry, arrays, batch)
    else:
        out_slots, grad_at, grad_shapes = _forward_layout(compiled, entry)
    out_at = np.array([(off, col, n) for off, col, n, _ in out_slots], np.int64).reshape(-1, 3)
    outputs = np.zeros((batch, sum(n for _, _, n, _ in out_slots)), dt)
    # (a column per element of every differentiated argument: one no gradient reaches stays 0)
    grads = np.zeros((batch, sum(n for _, _, n in grad_shapes.values()) if grad_shapes else 0), dt)
    grad_at = np.array(grad_at, np.int64).reshape(-1, 3)
    # (None for a trace with chunked runs, whose single replays run run by run: its seeds are
    # the same)
    fast = frozen._fast if frozen._fast is not None else frozen._fast_path()
    if fast is None:
        raise CompileError(f"{name}.batch: the function's gradient is seeded from a computed value; "
                           "batch() replays value-and-gradient functions and functions without backward()")
    seed_at, seed_values = fast
    mode = ROWS
    found = rows.plan(frozen) if mode != "off" else None
    if mode != "off" and tier2.run_rows(frozen, compiled.tier2, v0, in_at, inputs, out_at, outputs, grad_at, grads):
        entry.batch_path = "tier2"     # the trace's own fused row loops (fused.generate_rows)
    elif found is not None and rows.run(frozen, found, v0, seed_at, seed_values, in_at, inputs, out_at, outputs,
                                        grad_at, grads, mode):
        entry.batch_path = "rows"
    else:
        chunks = max(1, min(batch, 4 * numba.get_num_threads()))
        with _one_at_a_time:
            frozen.sweeps.replay_batch(tape.rec, tape.nrec, v0, tape.ints, tape.floats[d], seed_at, seed_values,
                                       frozen.load_outs[d], in_at, inputs, out_at, outputs, grad_at, grads, chunks,
                                       frozen.sweeps.table(d))
        entry.batch_path = "per-row"
    return _results(compiled, entry, outputs, out_slots, grads, grad_shapes, batch, len(stacked))


def stats(entry):
    """``compiled.stats()["batch"]`` for a trace: ``path``, how its last ``batch()`` ran
    ("tier2", "rows" or "per-row"), the row module's state for it (``rows.stats``) and, as
    ``"tier2"``, that of its own tier-2 row function (``tier2.rows_stats``; None with tier 2
    off)."""
    return {"path": entry.batch_path, **rows.stats(entry.frozen, ROWS), "tier2": tier2.rows_stats(entry.frozen)}


def _entry_for(compiled, first, kwargs):
    keys = [compiled.signature(first, kwargs), compiled.signature(first, kwargs, compiled._label_positions)]
    for _ in range(2):
        for key in keys:
            entry = compiled.traces.get(key)
            if entry is not None:
                return entry
        compiled(*first, **kwargs)
    raise CompileError(f"{compiled.__name__}.batch: no trace for the first row's signature")


def _functional_layout(compiled, entry, arrays, batch):
    d, off, nums, single, differentiated, shapes, slots = entry.functional
    if compiled.functional[3]:
        raise CompileError(f"{compiled.__name__}.batch: has_aux=True is not supported by batch()")
    grad_at = []
    grad_shapes = {}
    col = 0
    for i in differentiated:
        if arrays[i] is None:
            raise CompileError(f"{compiled.__name__}.batch: differentiated argument {i} has no batch axis")
        shape, _ = shapes[i]
        n = int(np.prod(shape, dtype=np.int64))
        grad_shapes[i] = (col, shape, n)
        if i in slots:
            grad_at.append((slots[i][1], col, n))
        col += n
    return [(off, 0, 1, ())], grad_at, grad_shapes


def _forward_layout(compiled, entry):
    frozen = entry.frozen
    if any(e[0] == "backward" for e in frozen.events):
        raise CompileError(f"{compiled.__name__}.batch: the function calls backward(), which updates "
                           ".grad and has no per-sample meaning; batch tj.value_and_grad(f) instead")
    output = entry.output
    spec = output.spec
    items = [spec] if spec[0] == "slot" else spec[1] if spec[0] in ("tuple", "list") else None
    if items is None or any(s[0] != "slot" for s in items):
        raise CompileError(f"{compiled.__name__}.batch: the function must return a tensor or a tuple of "
                           "tensors computed from its arguments")
    slots = []
    col = 0
    for _, index in items:
        _, off, shape, _ = output.slots[index]
        n = int(np.prod(shape, dtype=np.int64))
        slots.append((off, col, n, shape))
        col += n
    return slots, [], None


def _results(compiled, entry, outputs, out_slots, grads, grad_shapes, batch, nargs):
    if compiled.functional is None:
        stacked = [_concrete(outputs[:, col:col + n].reshape((batch,) + tuple(shape)).copy())
                   for _, col, n, shape in out_slots]
        return stacked[0] if entry.output.spec[0] == "slot" else tuple(stacked)
    nums, single = entry.functional[2:4]
    per_arg = []
    for i in nums:
        col, shape, n = grad_shapes[i % nargs]
        g = grads[:, col:col + n].reshape((batch,) + tuple(shape))
        whole = single and n == grads.shape[1]      # the caller's alone: no copy
        per_arg.append(g if whole else g.copy())
    g = per_arg[0] if single else tuple(per_arg)
    if compiled.functional[4] == "grad":
        return g
    return outputs[:, 0].copy(), g
