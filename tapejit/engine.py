"""The backward engine: seeds adjoints, runs the compiled sweep in as few segments as
possible, and hands gradients to leaves, hooks and ``autograd.grad`` callers.

Several threads may run backward through one graph at once (torch allows it): a tape's
adjoint and flag buffers are shared, so each tape's lock is held from its flush to the
hand-off of its leaves' gradients, and leaves accumulate ``.grad`` under ``_grad_lock``.

The compiled sweep covers every record; Python runs only between segments: at a cast
between dtype arenas, at a tensor with hooks or ``retain_grad``, at a non-leaf input of
``autograd.grad``.  A graph can span tapes (a tensor from a finished tape used on the
next one): such a tensor was loaded like a leaf, and its gradient seeds its own tape,
which is swept next (newest tape first, so every seed is complete before its sweep).
"""
import threading

import numpy as np

from tapejit import executor, registry
from tapejit.dependencies import dependencies, listed_operands, prune_fields
from tapejit.ops.core import CAST, LOAD
from tapejit.inplace import note_writes_since_loads
from tapejit.tape import forget_opened, modes, sweeps, retire_current, retire_if_due, state
from tapejit.tensor import Tensor, _concrete, provide as _provide_to_tensor

_grad_lock = threading.Lock()

FREED = (
    "Trying to backward through the graph a second time (or directly access saved tensors after "
    "they have already been freed). Saved intermediate values of the graph are freed when you "
    "call .backward() or autograd.grad(). Specify retain_graph=True if you need to backward "
    "through the graph a second time or if you need to access saved tensors after calling backward.")


def seed_value(root, grad):
    """The flat seed for ``root``'s backward: ones for a scalar when ``grad`` is None, else
    ``grad`` checked against ``root``'s shape (torch's errors)."""
    if grad is None:
        if root._numel != 1:
            raise RuntimeError("grad can be implicitly created only for scalar outputs")
        return np.ones(1, root._dtype.np)
    g = grad._value() if isinstance(grad, Tensor) else np.asarray(grad)
    if g.shape != root._shape:
        raise RuntimeError(
            f"Mismatch in shape: grad_output[0] has a shape of {list(g.shape)} and output[0] has "
            f"a shape of {list(root._shape)}.")
    return np.ascontiguousarray(g, dtype=root._dtype.np).reshape(-1)


def _seeds(outputs, grads, create_graph):
    """``[(output, flat seed)]`` for the roots of a backward pass."""
    outputs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    if grads is None:
        grads = [None] * len(outputs)
    elif isinstance(grads, Tensor):
        grads = [grads]
    seeds = []
    for t, g in zip(outputs, grads):
        if not t._rg:
            raise RuntimeError("element 0 of tensors does not require grad and does not have a grad_fn")
        seeds.append((t, seed_value(t, g)))
    return seeds


# The recorded backward pass (``create_graph=True``) applies derivative formulas written with
# front ends, a layer above the engine: tapejit/autograd/higher.py hands itself over at import.
_higher = {}


def provide_recorded_backward(module):
    _higher["module"] = module


def _recorded_backward():
    module = _higher.get("module")
    if module is None:
        raise NotImplementedError("create_graph=True needs tapejit.autograd.higher, which is not loaded")
    return module


def recorded_grad(outputs, inputs, grad_outputs=None, allow_unused=False, materialize_grads=False):
    """Differentiable gradients (``create_graph=True``), also inside a function tj.compile
    traces (a nested ``tj.grad``: the recorded pass is itself traced)."""
    return _recorded_backward().grad_graph(outputs, inputs, grad_outputs, allow_unused, materialize_grads)


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """``Tensor.backward`` / ``autograd.backward``: accumulate into leaves' ``.grad``."""
    if state.trace is not None:   # inside tj.compile's first call: also kept for the replays
        return state.trace.on_backward(tensors, grad_tensors, retain_graph, create_graph, inputs)
    if (grad_tensors is None and inputs is None and not retain_graph and not create_graph
            and type(tensors) is list and len(tensors) == 1 and _plain_scalar_root(tensors[0])):
        _backward_scalar(tensors[0])
        return
    if create_graph:   # a recorded backward pass, not the compiled sweep (autograd/higher.py)
        return _recorded_backward().backward_graph(tensors, grad_tensors, inputs)
    seeds = _seeds(tensors, grad_tensors, create_graph)
    only = None
    if inputs is not None:
        only = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    run_backward(seeds, bool(retain_graph), targets=only, accumulate=True)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         allow_unused=False, materialize_grads=False):
    """``autograd.grad``: return d(outputs)/d(inputs) without touching ``.grad``."""
    if state.trace is not None:
        state.trace.refuse("autograd.grad", "its results would be constants in the replays; use "
                           "loss.backward() in the function, or tj.compile(tj.grad(f)).")
    inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    for t in inputs:
        if not t._rg:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
    if create_graph:
        return recorded_grad(outputs, inputs, grad_outputs, allow_unused, materialize_grads)
    seeds = _seeds(outputs, grad_outputs, create_graph)
    found = run_backward(seeds, bool(retain_graph), targets=inputs, accumulate=False)
    result = []
    for t, g in zip(inputs, found):
        if g is None:
            if materialize_grads:
                g = np.zeros(t._shape, t._dtype.np)
            elif not allow_unused:
                raise RuntimeError(
                    "One of the differentiated Tensors appears to not have been used in the graph. "
                    "Set allow_unused=True if this is the desired behavior.")
        result.append(None if g is None else _concrete(g))
    return tuple(result)


def _plain_scalar_root(root):
    """``loss.backward()`` in its most common form: a scalar on this thread's tape, one
    float dtype, nothing for Python to do mid-sweep.  The tape may have been retired
    already: reading ``loss.item()`` first retires a tape over large arrays."""
    tape = root._tape
    return (tape is not None and (tape is state.tape or tape.thread == threading.get_ident())
            and root._rg and root._numel == 1
            and not (tape.hooks or tape.retained or tape.functions or modes.anomaly)
            and not (tape.cursor[0] and tape.cursor[1]))


def _backward_scalar(root, leaves=None):
    """What ``run_backward`` does for a ``_plain_scalar_root``, without the bookkeeping for hooks and
    several roots: this fixed cost is paid on every training step.  With ``leaves`` (leaf
    tensors), returns their gradients (None where unused) and leaves ``.grad`` alone, as
    ``autograd.grad`` does."""
    tape = root._tape
    with tape.lock:   # another thread may be running backward through this tape (engine doc)
        tape.flush()
        if tape.broken is not None:
            tape.check_computed(root)
        if tape is not state.tape:
            note_writes_since_loads(tape)
        if tape.stale is not None:
            _refresh_stale(tape)
        tape.ensure_adjoints()
        d = root._dtype.arena
        off = root._off
        flags, adj = tape.flags[d], tape.adj[d]
        if flags[off]:
            adj[off] += 1.0
        else:
            adj[off] = 1.0
            flags[off] = 1
        sw = sweeps()
        try:
            _check(tape, executor.backward(tape, sw, 0, tape.nrec, d, False))
        except BaseException:
            flags[:] = 0
            raise
        older = []
        sources = tape.sources
        wanted = None if leaves is None else {id(t): i for i, t in enumerate(leaves)}
        found = None if leaves is None else [None] * len(leaves)
        for index, _, loff in tape.grad_loads:
            if not flags[loff]:
                continue
            flags[loff] = 0
            src = sources[index]
            g = adj[loff:loff + src._numel]
            if src._tape is not None:
                older.append((src, g.copy()))
            elif wanted is not None:
                i = wanted.get(id(src))
                if i is not None:
                    found[i] = g.reshape(src._shape).copy()
            else:
                _deliver_leaf(src, g.reshape(src._shape), None, None, True)
    if tape is state.tape:
        retire_current()
    elif state.opened:
        forget_opened(tape)
    if older:   # tensors from earlier tapes: their tapes are swept next, as run_backward does
        more = run_backward(older, False, leaves, leaves is None)
        for i, g in enumerate(more):
            if g is not None:
                found[i] = g if found[i] is None else found[i] + g
    return found


def _refresh_stale(tape):
    """Leaves changed through ``.data`` since they were loaded: torch's saved tensors share
    their memory, so backward reads the new values; so do the load slots, from now on."""
    stale = tape.stale
    tape.stale = None
    for t in stale:
        for d in (0, 1):
            for off, _, source in tape.loads_of.get((id(t), d), ()):
                if source is t and t._tape is None:
                    tape.vals[d][off:off + t._numel] = t._data.reshape(-1)


class _Work:
    """Seeds waiting for one tape's sweep."""

    def __init__(self, tape):
        self.tape = tape
        self.seeds = []


def run_backward(seeds, retain, targets, accumulate):
    """Sweep back from ``seeds`` (``[(root, flat seed)]``); ``accumulate``: into the leaves'
    ``.grad`` (backward), else returned per tensor of ``targets`` (autograd.grad)."""
    target_ids = None
    if targets is not None:
        target_ids = {}
        for i, t in enumerate(targets):
            target_ids.setdefault(id(t), []).append(i)
    found = [None] * (len(targets) if targets is not None else 0)
    work = {}
    swept = {}    # id -> tape (held, so that no new tape takes a swept one's id)

    def seed(tensor, g):
        if tensor._tape is None:        # a leaf as root: its gradient is the seed itself
            _deliver_leaf(tensor, g.reshape(tensor._shape), target_ids, found, accumulate)
            return
        if id(tensor._tape) in swept:
            # Tapes are swept newest first, and a tape reads only tensors of older ones; a
            # tensor changed in place is re-recorded on the tape of the change, so an older
            # tape that read it before may point at a tape already swept.  Sweeping it
            # again would loop (or count its gradient twice): refuse.
            raise RuntimeError(
                f"tapejit: backward reached a tensor of shape {list(tensor._shape)} through an op "
                "recorded before that tensor was changed in place (after a backward or a new "
                "graph began); its gradient cannot be followed to the value the op read.  "
                "Clone the tensor before changing it in place.")
        w = work.get(id(tensor._tape))
        if w is None:
            w = work[id(tensor._tape)] = _Work(tensor._tape)
        w.seeds.append((tensor, g))

    for t, g in seeds:
        seed(t, g)
    current = state.tape
    touched_current = False
    while work:
        w = max(work.values(), key=lambda item: item.tape.serial)
        del work[id(w.tape)]
        swept[id(w.tape)] = w.tape
        touched_current |= w.tape is current
        _sweep_tape(w, retain, targets, target_ids, found, accumulate, seed)
    if touched_current:
        if not retain:
            retire_current()
        else:
            retire_if_due(current, 4)
    return found


def _sweep_tape(w, retain, targets, target_ids, found, accumulate, seed):
    tape = w.tape
    tape.flush()    # outside the lock: it may wait for the owner thread (Tape._take_from_owner)
    with tape.lock:
        _sweep_locked(tape, w, retain, targets, target_ids, found, accumulate, seed)
    if not retain and state.opened:
        forget_opened(tape)


def _sweep_locked(tape, w, retain, targets, target_ids, found, accumulate, seed):
    tape.flush()
    if tape is not state.tape:
        note_writes_since_loads(tape)
    if tape.broken is not None:
        for t, _ in w.seeds:
            tape.check_computed(t)
    if tape.stale is not None:
        _refresh_stale(tape)
    tape.ensure_adjoints()
    for t, g in w.seeds:
        d = t._dtype.arena
        off = t._off
        flags, adj = tape.flags[d], tape.adj[d]
        if flags[off]:
            adj[off:off + len(g)] += g
        else:
            adj[off:off + len(g)] = g
            flags[off] = 1
    stops = _stops(tape, targets) if (tape.hooks or tape.retained or targets or tape.functions) else {}
    skipped = _unneeded_functions(tape, targets) if (targets is not None and tape.functions) else ()
    rec = tape.rec if targets is None else _toward(tape, targets)
    sw = sweeps()
    anomaly = {} if modes.anomaly else None   # slot sizes per arena, for _check_nan
    segments = tape.segments(0, tape.nrec, CAST.opcode, stops=list(stops))
    try:
        _at_stop(tape, stops.get(tape.nrec, ()), target_ids, found, accumulate, retain, skipped)
        for start, end, kind in (segments[::-1] if type(segments) is tuple else reversed(list(segments))):
            if kind == "cast":
                _cast_backward(tape, start, retain, rec)
            elif anomaly is not None:
                _sweep_checking_nan(tape, rec, sw, start, end, kind, retain, anomaly)
            else:
                _check(tape, sw.backward(rec, start, end, tape.vals[kind], tape.adj[kind],
                                         tape.flags[kind], tape.freed, tape.ints,
                                         tape.floats[kind], retain, sw.table(kind)))
            _at_stop(tape, stops.get(start, ()), target_ids, found, accumulate, retain, skipped)
    except BaseException:
        for f in tape.flags:
            f[:] = 0
        raise
    _leaf_gradients(tape, target_ids, found, accumulate, seed)


def _check(tape, r):
    if r < 0:
        return
    for f in tape.flags:
        f[:] = 0
    if tape.freed[r] == 2:
        raise RuntimeError(tape.poisoned[r])
    raise RuntimeError(FREED)


def _sweep_checking_nan(tape, rec, sw, start, end, d, retain, sizes):
    """``detect_anomaly``: the records one at a time, each followed by a NaN check of the
    gradients it wrote.  Only records that ran (their result had a gradient) are checked:
    an adjoint slot this pass did not write still holds an earlier pass's values, NaN
    included (a pass stopped by this very error leaves them)."""
    flags = tape.flags[d]
    for r in range(end - 1, start - 1, -1):
        if not flags[rec[r, 1]]:
            continue
        _check(tape, sw.backward(rec, r, r + 1, tape.vals[d], tape.adj[d], flags, tape.freed,
                                 tape.ints, tape.floats[d], retain, sw.table(d)))
        _check_nan(tape, rec, r, d, sizes)


def _check_nan(tape, rec, r, d, sizes):
    code, out, a, b, p, q = rec[r].tolist()
    op = registry.OPS[code >> 1]
    if d not in sizes:
        sizes[d] = _slot_sizes(tape, d)
    flags = tape.flags[d]
    for k, off in enumerate((a, b)):
        if off >= 0 and flags[off]:
            n = sizes[d].get(off, 1)
            if np.isnan(tape.adj[d][off:off + n]).any():
                raise RuntimeError(f"Function '{op.node}' returned nan values in its {k}th output.")


def _slot_sizes(tape, d):
    rec = tape.rec[:tape.nrec]
    mine = rec[(rec[:, 0] & 1) == d]
    outs = np.unique(mine[:, 1])
    ends = np.append(outs[1:], tape.cursor[d])
    return dict(zip(outs.tolist(), (ends - outs).tolist()))


def _cast_backward(tape, r, retain, rec=None):
    code, out, a, _, n, _ = (tape.rec if rec is None else rec)[r].tolist()
    dst = code & 1
    src = 1 - dst
    if not tape.flags[dst][out]:
        return
    tape.flags[dst][out] = 0
    if not retain:
        tape.freed[r] = 1
    if a < 0:
        return
    g = tape.adj[dst][out:out + n]
    with np.errstate(over="ignore"):   # a float64 gradient past float32's range is inf, as torch's
        if tape.flags[src][a]:
            tape.adj[src][a:a + n] += g
        else:
            tape.adj[src][a:a + n] = g
            tape.flags[src][a] = 1


def _at_stop(tape, items, target_ids, found, accumulate, retain, skipped):
    """Python's turn between compiled segments: tensors first (their hooks may change the
    gradient a custom Function's backward then receives), then custom Functions (those in
    ``skipped`` only drop their outputs' gradients)."""
    for item in items:
        if isinstance(item, Tensor):
            _at_tensor(tape, item, target_ids, found, accumulate)
    for item in items:
        if not isinstance(item, Tensor):
            item.run_backward(tape, retain, item not in skipped)


def _toward(tape, targets):
    """The records for a sweep toward ``targets`` only (``autograd.grad``'s inputs,
    ``backward(inputs=)``): an operand none of whose values depends on a target gets no
    gradient (its field is rewritten as a constant's, in a copy), as torch's engine runs
    only the nodes on a path to the inputs: no products for leaves not asked for (an
    MLP's weights when the gradient is the input's, or the input's when it is the
    weights'), and no hooks of tensors off those paths.  ``tape.rec`` itself when every
    leaf that takes a gradient is a target.  A value loaded from an older tape and a
    custom Function's output count as leading to a target (their graphs are not followed)."""
    ids = {id(t) for t in targets}
    sources = tape.sources
    kept = []
    others = False
    for index, d, off in tape.grad_loads:
        src = sources[index]
        if id(src) in ids or src._tape is not None:
            kept.append((d, off))
        else:
            others = True
    if not others:
        return tape.rec
    marks = [np.zeros(max(size, 1), np.uint8) for size in tape.cursor]
    for d, off in kept:
        marks[d][off] = 1
    for t in targets:
        if t._tape is tape:
            marks[t._dtype.arena][t._off] = 1
    for _, ctx in tape.functions or ():
        for arena, off, _, _ in ctx._outputs:
            marks[arena][off] = 1
    n = tape.nrec
    rec = tape.rec[:n].copy()
    forced = np.zeros(n, np.uint8)
    with_listed = np.flatnonzero(_has_listed()[rec[:, 0] >> 1])
    if len(with_listed) <= _LISTED_READ:
        listed_at, listed = listed_operands(rec, tape.ints)
    else:   # reading each one's list costs Python per record: their results count as reached
        listed_at, listed = np.zeros(n + 1, np.int64), np.zeros(0, np.int64)
        forced[with_listed] = 1
    cut = prune_fields(rec, n, listed_at, listed, forced, LOAD.opcode, CAST.opcode, marks[0], marks[1])
    return rec if cut else tape.rec


#: records with operands listed in ``ints`` (cat, stack, linear's bias) whose lists
#: ``_toward`` reads (~2 us each); past this many (a scalar graph's stacks) it assumes
#: each such record's result leads to a target, which cuts fewer fields but never a needed one
_LISTED_READ = 64
_HAS_LISTED = [np.zeros(0, bool)]


def _has_listed():
    """Per opcode, whether its records list operands in ``ints`` (rebuilt if ops were added)."""
    if len(_HAS_LISTED[0]) != len(registry.OPS):
        _HAS_LISTED[0] = np.array([op.listed is not None for op in registry.OPS], bool)
    return _HAS_LISTED[0]


def _unneeded_functions(tape, targets):
    """The custom Functions on ``tape`` none of whose inputs leads to a tensor in ``targets``
    (``autograd.grad``'s inputs): torch's engine runs only the nodes on a path to them, so
    their Python ``backward`` (a module's backward hooks) must not run.  A value loaded from
    an older tape counts as leading to a target (its graph is not followed): a Function is
    skipped only when certainly unneeded."""
    rec = tape.rec[:tape.nrec]
    ids = {id(t) for t in targets}
    wanted = ([], [])   # per arena, the slots of targets and of needed Functions' outputs
    for t in targets:
        if t._tape is tape:
            wanted[t._dtype.arena].append(t._off)
    sources = tape.sources
    for index, d, off in tape.grad_loads:
        src = sources[index]
        if id(src) in ids or src._tape is not None:
            wanted[d].append(off)
    listed = listed_operands(rec, tape.ints)
    sizes = (tape.cursor[0], tape.cursor[1])
    skipped = set()
    for first, ctx in tape.functions:   # in recording order: a Function's inputs come from earlier ones
        roots = {(e[1], e[2]) for e in ctx._inputs if e is not None and e[2] is not None}
        needed = False
        if roots:
            _, marks = dependencies(rec[:first], tape.ints, sizes, roots, True, listed)
            needed = any(marks[d][wanted[d]].any() for d in (0, 1) if wanted[d])
        if needed:
            for arena, off, _, _ in ctx._outputs:
                wanted[arena].append(off)
        else:
            skipped.add(ctx)
    return skipped


def _stops(tape, targets):
    """Where Python must run during the sweep: {record index just above: [tensors and custom
    Function contexts]}.  A tensor output by a custom Function stops with the Function, so
    its hooks run before the Function's backward."""
    stops = {}
    output_stop = {}
    for first, ctx in tape.functions or ():
        stops.setdefault(ctx._stop, []).append(ctx)
        for r in range(first, ctx._stop):
            output_stop[r + 1] = ctx._stop
    wanted = []
    if tape.hooks:
        wanted += [t for t in tape.hooks.values() if t._tape is tape]
    if tape.retained:
        wanted += [t for t in tape.retained.values() if t._tape is tape]
    if targets is not None:
        wanted += [t for t in targets if t._tape is tape]
    seen = set()
    for t in wanted:
        if id(t) in seen:
            continue
        seen.add(id(t))
        r = tape.producer(t._dtype.arena, t._off)
        if r is not None:
            stops.setdefault(output_stop.get(r + 1, r + 1), []).append(t)
    return stops


def _at_tensor(tape, t, target_ids, found, accumulate):
    d = t._dtype.arena
    off = t._off
    if not tape.flags[d][off]:
        return
    view = tape.adj[d][off:off + t._numel]
    g = view.reshape(t._shape).copy()
    hooks = getattr(t, "_hooks", None)
    if hooks:
        g = _run_hooks(hooks, g)
        view[:] = g.reshape(-1)
    if target_ids is not None and id(t) in target_ids:
        for i in target_ids[id(t)]:
            found[i] = g
    elif getattr(t, "_retains", False) and accumulate:
        _accumulate(t, g)


def _run_hooks(hooks, g):
    for hook in list(hooks):
        out = hook(_concrete(g))
        if out is not None:
            g = np.asarray(out._value() if isinstance(out, Tensor) else out, dtype=g.dtype).reshape(g.shape)
    return g


def _leaf_gradients(tape, target_ids, found, accumulate, seed):
    sources = tape.sources
    for index, d, off in tape.grad_loads:
        src = sources[index]
        flags = tape.flags[d]
        if not flags[off]:
            continue
        flags[off] = 0
        g = tape.adj[d][off:off + src._numel]  # a view: whoever keeps it makes a copy
        if src._tape is None:
            _deliver_leaf(src, g.reshape(src._shape), target_ids, found, accumulate)
        else:
            seed(src, g.copy())


def _deliver_leaf(leaf, g, target_ids, found, accumulate):
    """Hand a leaf its gradient ``g`` (possibly a view of an adjoint buffer: copied when kept)."""
    if not leaf._rg:   # requires_grad_(False) or detach_() since it was recorded: as torch, no .grad
        return
    hooks = getattr(leaf, "_hooks", None)
    if hooks:
        g = _run_hooks(hooks, g.copy())
    if target_ids is not None:
        slots = target_ids.get(id(leaf))
        if slots is not None:
            for i in slots:
                found[i] = g.copy() if found[i] is None else found[i] + g
        if not accumulate or slots is None:
            return
    if not accumulate:
        return
    _accumulate(leaf, g)


def _accumulate(t, g):
    with _grad_lock:
        current = getattr(t, "_grad", None)
        if current is None:
            t._grad = _concrete(g.copy())
        elif current._tape is None:
            current._data += g
        else:
            t._grad = _concrete(current._value() + g)


_provide_to_tensor(backward=backward)
