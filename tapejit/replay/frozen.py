"""A frozen trace: the tape of a first call, cut down to what its results need, replayed.

Freezing (``Frozen(...)``) drops the records that reach neither a returned tensor nor a
``backward()`` root, merges and fuses records (``optimize.py``), works out once which
leaves each backward reaches (the graph no longer changes,
so neither does that), and sorts the loads into those a replay must refresh -- the
arguments, and tensors ``fn`` closes over, read live so an optimizer's updates take
effect -- and constants made inside ``fn``, which stay as they are in the arena.

``Frozen.run`` is one replay: refresh the loads, then (the usual case: one float dtype,
one backward from a scalar) a single compiled call runs the forward sweep, seeds the
root and runs the backward sweep; Python then hands gradients to the leaves.  That call
runs ``replay_rec``: the records with copies of contiguous ranges read in place
(``optimize.alias_copies``); other replays (two dtypes, ``tj.compile(model)``'s node,
batches, tier 2) run ``tape.rec``, which keeps them.  Buffers
belong to the trace, so a replay allocates nothing but its results.
"""
import threading

import numpy as np

from tapejit import executor, registry
from tapejit.engine import _cast_backward, _deliver_leaf, _grad_lock
from tapejit.ops.core import CAST
from tapejit.dependencies import dependencies, listed_operands
from tapejit.replay.optimize import alias_copies, optimize
from tapejit.replay.trace import refuse
from tapejit.tape import sweeps
from tapejit.tensor import Tensor, _concrete

_LOAD = None
#: single-element records of codegen.FAST_OPS from which a replay runs them inline
INLINE_MIN = 1_000


def _load_opcode():
    global _LOAD
    if _LOAD is None:
        _LOAD = registry.BY_NAME["load"].opcode
    return _LOAD


class Load:
    """One slot a replay refreshes: argument ``arg`` or live tensor ``source`` (traced with
    ``shape``, ``dtype`` and ``requires_grad``; another of these needs another trace)."""
    __slots__ = ("arena", "off", "n", "arg", "source", "shape", "dtype", "rg")

    def __init__(self, arena, off, n, arg, source, shape):
        self.arena, self.off, self.n, self.arg, self.source, self.shape = arena, off, n, arg, source, shape
        self.dtype = source._dtype if source is not None else None
        self.rg = bool(source._rg) if source is not None else False


class Stale(Exception):
    """A tensor the trace reads live changed shape, dtype or requires_grad: trace again."""


class Backward:
    """A ``backward()`` of the trace: seeds, and where its gradients go."""
    __slots__ = ("seeds", "deliveries")

    def __init__(self, seeds, deliveries):
        self.seeds = seeds              # [(arena, off, n, None | ("slot", arena, off) | ("value", array))]
        self.deliveries = deliveries    # [(arena, off, n, shape, arg index or None, leaf or None)]


class Frozen:
    """A trace ready to replay (see the module docstring)."""

    def __init__(self, trace, arg_of, roots):
        """``arg_of``: {id(tensor): argument index} for the argument tensors the trace loaded;
        ``roots``: [(arena, off)] of the slots the caller reads after a replay."""
        tape = trace.tape
        backwards = [e for e in trace.events if e[0] == "backward"]
        live = set(roots)
        for _, entries, _ in backwards:
            for d, off, _, seed in entries:
                live.add((d, off))
                if seed is not None and seed[0] == "slot":
                    live.add(seed[1:])
        tape.kept = frozenset(live)   # values read after the sweeps: the rest may stay in cache
        tape.flush()
        self.name = trace.name
        self.lock = threading.Lock()
        rec = tape.rec[:tape.nrec]
        ints = tape.ints
        keep, _ = dependencies(rec, ints, [len(v) for v in tape.vals], live, grads_only=False)
        self.records_traced = len(rec)
        kept = np.flatnonzero(keep)
        load = _load_opcode()
        sources = tape.sources
        self.loads = []
        load_outs = [[], []]
        kept_loads = kept[(rec[kept, 0] >> 1) == load]
        for code, out, _, _, index, n in rec[kept_loads].tolist():
            d = code & 1
            load_outs[d].append(out)
            src = sources[index]
            if not isinstance(src, Tensor):
                refuse("a custom autograd.Function", "its backward is Python code.", name=trace.name)
            if id(src) in trace.grads_read:
                refuse("a .grad read after backward() is used in a computation",
                       "a replay computes every value before it runs backward().", name=trace.name)
            arg = arg_of.get(id(src))
            if arg is not None:
                self.loads.append(Load(d, out, n, arg, None, src._shape))
            elif id(src) in trace.created:
                pass   # made inside fn from no argument: the same value on every call
            elif src._tape is not None:
                if src._rg:
                    refuse(f"a {list(src._shape)} tensor computed outside the function and requiring grad",
                           "its gradient would have to flow into another graph. Pass its leaves "
                           "instead, or detach() it.", name=trace.name)
                self.loads.append(Load(d, out, n, None, src, src._shape))
            else:
                self.loads.append(Load(d, out, n, None, src, src._shape))
        self.load_outs = [np.array(o, np.int64) for o in load_outs]
        # The tape, cut to the live records and optimised (replay/optimize.py); offsets
        # stay, so values need no moving.
        records = optimize(tape, tape.rec[kept], live) if len(kept) else np.zeros((1, 6), np.int64)
        tape.use_records(np.ascontiguousarray(records))
        tape.n = tape.nrec = tape.cap = len(kept) and len(records)
        tape.freed = np.zeros(max(tape.nrec, 1), np.uint8)
        tape._producers = None
        tape.ensure_adjoints()
        for f in tape.flags:
            f[:] = 0
        self.tape = tape
        self.events = []
        self._grad_loads = {(d, off): sources[index] for index, d, off in tape.grad_loads}
        self._listed = None
        self._arg_of = arg_of
        for event in trace.events:
            if event[0] == "call":
                self.events.append(event)
                continue
            _, entries, only = event
            deliveries = self.deliveries([(d, off) for d, off, _, _ in entries], only)
            self.events.append(("backward", Backward(entries, deliveries)))
        self.mixed = bool(tape.cursor[0] and tape.cursor[1])
        self.arena = 1 if tape.cursor[1] and not tape.cursor[0] else 0
        self.arg_loads = [(ld.arena, ld.off, ld.n, ld.arg) for ld in self.loads if ld.arg is not None]
        self.live_loads = [ld for ld in self.loads if ld.arg is None]
        # Large arrays replay run by run, as eager mode does (tapejit/executor.py): chunk by
        # chunk, on every thread, with the vectorized backward loops.
        self._fast = None if executor.has_runs(tape) else self._fast_path()
        # Tier 2 (tier2.py): its compiled call once ready, else None; which tier ran last.
        self.tier2 = None
        self.tier2_call = None
        self.last_tier = None
        self.sweeps = sweeps()
        d = self.arena
        self.replay_rec = tape.rec[:tape.nrec]   # the records the single compiled call runs
        self.replay_sweep = self.sweeps.replay   # ... and that call
        if self._fast is not None:
            seed_at, seed_vals = self._fast
            if self._listed is None:
                self._listed = listed_operands(self.replay_rec, tape.ints)
            aliases = alias_copies(tape, self.replay_rec, live, self._reached(seed_at), self._listed)
            if aliases is not None:   # copies read in place (optimize.py): zero their sources first
                self.replay_rec = aliases.rec
                seed_at = np.concatenate([aliases.zero_at, seed_at])
                seed_vals = np.concatenate([np.zeros(aliases.zero_at[:, 1].sum(), seed_vals.dtype), seed_vals])
                tape.flags[d][aliases.flag_at] = 1
            # A long trace of scalars runs its common elementwise records inline (codegen.FAST_OPS):
            # worth the inline entry point's compile (a second or two, once per machine).
            scalars = (self.replay_rec[:, 4] == 1) & self.sweeps.inline_ops[self.replay_rec[:, 0] >> 1]
            if np.count_nonzero(scalars) >= INLINE_MIN:
                self.replay_sweep = self.sweeps.replay_inline
            # The compiled call's arguments, fixed for the trace's life (buffers never grow).
            self._fast_args = (self.replay_rec, len(self.replay_rec), tape.vals[d], tape.adj[d], tape.flags[d],
                               tape.freed, tape.ints, tape.floats[d], seed_at, seed_vals, self.load_outs[d],
                               self.sweeps.table(d))

    def deliveries(self, seeds, only=None):
        """``[(arena, off, n, shape, arg index or None, leaf or None)]``: the leaves a backward
        sweep from slots ``seeds`` reaches (all of them, or those in ``only``)."""
        tape = self.tape
        if self._listed is None:
            self._listed = listed_operands(tape.rec[:tape.nrec], tape.ints)
        _, reached = dependencies(tape.rec[:tape.nrec], tape.ints, [len(v) for v in tape.vals], seeds,
                                  grads_only=True, listed=self._listed)
        only_ids = None if only is None else {id(t) for t in only}
        found = []
        for (d, off), src in self._grad_loads.items():
            if not reached[d][off] or (only_ids is not None and id(src) not in only_ids):
                continue
            arg = self._arg_of.get(id(src))
            found.append((d, off, src._numel, src._shape, arg, None if arg is not None else src))
        return found

    def _reached(self, seed_at):
        """Per arena, the slots a backward sweep from the slots ``seed_at`` (rows of offset,
        count in this trace's arena) reaches."""
        tape = self.tape
        seeds = [(self.arena, int(off)) for off, _ in seed_at]
        return dependencies(tape.rec[:tape.nrec], tape.ints, [len(v) for v in tape.vals], seeds,
                            grads_only=True, listed=self._listed)[1]

    # ---- facts ----------------------------------------------------------------------------

    @property
    def records(self):
        """Records a replay runs (the single compiled call's, when it runs one)."""
        return len(self.replay_rec)

    @property
    def nbytes(self):
        t = self.tape
        arrays = [t.rec, t.ints, t.freed] + list(t.floats) + list(t.vals) + list(t.adj) + list(t.flags)
        if self.replay_rec.base is not t.rec:
            arrays.append(self.replay_rec)
        return sum(a.nbytes for a in arrays)

    def _fast_path(self):
        """Seed arrays for the single compiled call, or None when Python must run between
        the sweeps (two dtypes, several backward passes, a seed read from a slot)."""
        if self.mixed:
            return None
        backwards = [e for e in self.events if e[0] == "backward"]
        if len(backwards) > 1:
            return None
        seeds = backwards[0][1].seeds if backwards else []
        if any(seed is not None and seed[0] == "slot" for *_, seed in seeds):
            return None
        dt = self.tape.vals[self.arena].dtype
        at = np.array([(off, n) for _, off, n, _ in seeds], np.int64).reshape(-1, 2)
        values = [np.ones(n, dt) if seed is None else seed[1].astype(dt) for _, _, n, seed in seeds]
        return at, (np.concatenate(values) if values else np.zeros(0, dt))

    # ---- one replay -----------------------------------------------------------------------

    def refresh(self, inputs, arg_loads=None):
        """Copy the arguments (``inputs``: arrays by argument index; those of ``arg_loads``,
        default all) and live tensors in."""
        vals = self.tape.vals
        for d, off, n, arg in self.arg_loads if arg_loads is None else arg_loads:
            value = inputs[arg]
            if n == 1:
                vals[d][off] = value.item() if value.ndim else value[()]
            else:
                vals[d][off:off + n] = value.reshape(-1)
        for load in self.live_loads:
            src = load.source
            if src._shape != load.shape or src._dtype is not load.dtype or bool(src._rg) != load.rg:
                raise Stale()
            value = src._data if src._tape is None else src._value()
            if load.n == 1:
                vals[load.arena][load.off] = value.item() if value.ndim else value[()]
            else:
                vals[load.arena][load.off:load.off + load.n] = value.reshape(-1)

    def run(self, inputs, leaves):
        """One replay.  ``leaves[i]``: the tensor argument ``i`` whose ``.grad`` receives its
        gradient; with ``leaves=None`` gradients stay in the adjoint buffers (functional forms
        read them from there)."""
        tier2 = self.tier2_call
        fast = self._fast is not None or tier2 is not None
        if tier2 is not None:   # the trace's own fused function (tier2.Call)
            if tier2.small:
                self.refresh(inputs)
                self.check(tier2.fn(tier2.arena_ins, tier2.arena_outs))
            else:               # large arguments are read in place
                self.refresh(inputs, tier2.copied)
                self.check(tier2.fn(tier2.inputs(inputs), tier2.arena_outs))
            self.last_tier = 2
        elif fast:    # forward, seed and backward in one compiled call
            self.refresh(inputs)
            self.check(self.replay_sweep(*self._fast_args))
            self.last_tier = 1
        else:
            self.refresh(inputs)
            self.tape._run_forward(0, self.tape.nrec)
            self.last_tier = 1
        for event in self.events:
            if event[0] == "call":
                event[1](*event[2])
            else:
                if not fast:
                    self._backward(event[1])
                self._deliver(event[1], leaves)

    def check(self, r):
        """A sweep returns -1, or the record it stopped at (which a frozen trace never has)."""
        if r >= 0:
            raise RuntimeError(f"tj.compile({self.name}): the replay's backward sweep stopped at record {r}")

    def _backward(self, bw):
        """A backward event, segment by segment (two dtypes, or a seed from a slot)."""
        tape = self.tape
        for d, off, n, seed in bw.seeds:
            if seed is None:
                value = 1.0
            elif seed[0] == "slot":
                value = tape.vals[seed[1]][seed[2]:seed[2] + n]
            else:
                value = seed[1]
            flags, adj = tape.flags[d], tape.adj[d]
            if flags[off]:
                adj[off:off + n] += value
            else:
                adj[off:off + n] = value
                flags[off] = 1
        sw = self.sweeps
        segments = tape.segments(0, tape.nrec, CAST.opcode)
        for start, end, kind in reversed(list(segments)):
            if kind == "cast":
                _cast_backward(tape, start, True)
            else:
                self.check(executor.backward(tape, sw, start, end, kind, True))
        for d in (0, 1):
            tape.flags[d][self.load_outs[d]] = 0

    def _deliver(self, bw, leaves):
        """Accumulate into ``.grad`` as ``engine._deliver_leaf`` does, with its common cases
        (no hooks; no gradient yet, or a plain one to add to) inline: a training step pays
        this per parameter on every replay."""
        if leaves is None:
            return
        adj = self.tape.adj
        deliveries = bw.deliveries
        general = len(deliveries)
        with _grad_lock:
            for k, (d, off, n, shape, arg, leaf) in enumerate(deliveries):
                if arg is not None:
                    leaf = leaves[arg]
                current = getattr(leaf, "_grad", None)
                if getattr(leaf, "_hooks", None) or not (current is None or current._tape is None):
                    general = k
                    break
                g = adj[d][off:off + n].reshape(shape)
                if current is None:
                    leaf._grad = _concrete(g.copy())
                else:
                    current._data += g
        # Hooks, or a gradient with a graph: the engine's general path from there on.
        for d, off, n, shape, arg, leaf in deliveries[general:]:
            if arg is not None:
                leaf = leaves[arg]
            _deliver_leaf(leaf, adj[d][off:off + n].reshape(shape), None, None, True)

    def value(self, arena, off, shape):
        n = 1
        for s in shape:
            n *= s
        return self.tape.vals[arena][off:off + n].reshape(shape).copy()
