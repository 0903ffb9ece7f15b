"""Higher-order derivatives: ``backward(create_graph=True)`` and ``autograd.grad(...,
create_graph=True)``.

Design.  The plain backward is the compiled sweep (``tapejit/engine.py``), untouched: no
flag is tested on its hot path, so it is no slower.  With ``create_graph=True`` the engine
hands the pass to ``run`` here instead: a Python-level reverse walk over the graph's
records that applies each op's *derivative formula* (one ``@derivative(OP)`` function per
op, at the end of the op's module in ``tapejit/ops/``; see ``tapejit/ops/_formulas.py``).  A formula is
written with tapejit's own recorded ops, so the gradients it returns are ordinary tensors
on the tape, with a ``grad_fn``: they can be differentiated again by the compiled sweep
(second order) or by another ``create_graph`` pass (any order).

The walk sees the tape as the sweep does: one record per op, operands as arena slots.  An
operand becomes a tensor through ``slot`` (a flat 1-D tensor over the slot, requiring
grad when the record's operand field says it receives a gradient), so the records a
formula writes read the very values the forward computed, and the second backward flows
through them to the same leaves (their load slots).  Every adjoint is kept flat (the
slot's element count); the formulas of shape-changing ops read their layouts from the
record's ``ints``, as the kernels do.

Errors, never wrong values: an op without a formula raises ``NotImplementedError`` naming
it (its PyTorch node name) when the walk reaches a record of it that needs a gradient; a
record freed by an earlier backward raises torch's "backward through the graph a second
time" error, and one whose saved input was changed in place raises the message the
compiled sweep would have raised.  ``create_graph`` implies ``retain_graph`` (torch's
default): nothing is freed.  Custom ``autograd.Function``s are refused by name.
"""
import sys

import numpy as np

from tapejit import engine, registry
from tapejit.engine import FREED, _refresh_stale
from tapejit.ops.core import CAST, LOAD
from tapejit.ops._formulas import ARENA_DTYPE as _ARENA_DTYPE, formula_of, shaped, slot, unsupported
from tapejit.grad_mode import enable_grad
from tapejit.inplace import note_writes_since_loads
from tapejit.tape import state
from tapejit.tensor import Tensor, _concrete


class Ctx:
    """One record, as its formula sees it: operands ``x()``/``y()``, result ``out()``, the
    incoming gradient ``g`` (flat), the static fields and the tape's ``ints``/``floats``."""

    __slots__ = ("tape", "r", "op", "arena", "dt", "out_off", "a", "b", "p", "q", "g", "n", "marked")

    def __init__(self, tape, r, op, row, g, marked=None):
        code, self.out_off, self.a, self.b, self.p, self.q = row
        self.tape = tape
        self.r = r
        self.op = op
        self.arena = code & 1
        self.dt = _ARENA_DTYPE[self.arena]
        self.g = g
        self.n = g._numel
        self.marked = marked   # per arena, a set of the slots leading to autograd.grad's inputs (None: all)

    def x(self, n=None, shape=None):
        return slot(self.tape, self.arena, self.a, self.n if n is None else n, shape)

    def y(self, n=None, shape=None):
        return slot(self.tape, self.arena, self.b, self.n if n is None else n, shape)

    def out(self, shape=None):
        return slot(self.tape, self.arena, self.out_off, self.n, shape)

    def ints(self, start, count):
        return self.tape.ints[start:start + count].copy()

    def int(self, i):
        return int(self.tape.ints[i])

    def float(self, i):
        return float(self.tape.floats[self.arena][i])

    @property
    def c0(self):
        return self.float(self.q)

    @property
    def c1(self):
        return self.float(self.q + 1)

    def wants(self, enc):
        """Whether operand ``enc`` takes a gradient in this pass (needs one and, for
        ``autograd.grad``, leads to one of its inputs)."""
        return enc >= 0 and (self.marked is None or enc in self.marked[self.arena])

    @property
    def wants_a(self):
        return self.wants(self.a)

    @property
    def wants_b(self):
        return self.wants(self.b)

    def vjp(self, seeds, targets):
        """A nested create_graph pass over records a formula wrote (``run``'s gradients of
        ``targets``): for formulas that write the op's forward again and differentiate it."""
        return run(seeds, targets, accumulate=False)


def _flat(t):
    return shaped(t, (t._numel,))


def _add(adj, key, g):
    old = adj.get(key)
    adj[key] = g if old is None else old + g


def run(seeds, targets, accumulate):
    """The create_graph pass: ``seeds`` are ``[(output tensor, gradient tensor)]``;
    returns the gradients of ``targets`` (tensors) as tensors (None where unused), and with
    ``accumulate`` adds the leaves' gradients to their ``.grad``."""
    if not state.grad:
        # torch records the backward pass when create_graph is set, whatever the grad mode
        with enable_grad():
            return run(seeds, targets, accumulate)
    target_ids = {}
    for i, t in enumerate(targets or ()):
        target_ids.setdefault(id(t), []).append(i)
    found = [None] * len(targets or ())
    work = {}   # id(tape) -> [tape, {(arena, off): flat gradient}]

    def deliver(t, g):
        g = shaped(g, t._shape)
        if t._tape is None:
            if not t._rg:
                return
            hooks = getattr(t, "_hooks", None)
            if hooks:
                g = _hooked(hooks, g)
            slots = target_ids.get(id(t))
            if slots is not None:
                for i in slots:
                    found[i] = g if found[i] is None else found[i] + g
                if not accumulate:
                    return
            if accumulate:
                with engine._grad_lock:
                    current = getattr(t, "_grad", None)
                    t._grad = g if current is None else current + g
            return
        w = work.get(id(t._tape))
        if w is None:
            w = work[id(t._tape)] = [t._tape, {}]
        _add(w[1], (t._dtype.arena, t._off), _flat(g))

    for t, g in seeds:
        if t._tape is None:
            if id(t) in target_ids or accumulate:
                deliver(t, g)
            continue
        deliver(t, g)
    while work:
        tape, adj = max(work.values(), key=lambda w: w[0].serial)
        del work[id(tape)]
        _walk(tape, adj, targets, target_ids, found, accumulate, deliver)
    return found


def _hooked(hooks, g):
    for hook in list(hooks):
        out = hook(g)
        if out is not None:
            g = out
    return g


def _walk(tape, adj, targets, target_ids, found, accumulate, deliver):
    with tape.lock:
        tape.flush()
        if tape is not state.tape:
            note_writes_since_loads(tape)
        if tape.stale is not None:
            _refresh_stale(tape)
        end = tape.nrec
        rows = tape.rec[:end].tolist()   # records appended by the formulas go after ``end``
    wanted, marked = _needed(tape, rows, targets) if targets is not None else (None, None)
    target_slots = {}
    for t in targets or ():
        if t._tape is tape:
            target_slots.setdefault((t._dtype.arena, t._off), []).append(t)
    hooked = {}
    if tape.hooks:
        hooked.update({k: t for k, t in tape.hooks.items() if t._tape is tape})
    retained = {}
    if tape.retained and accumulate:
        retained.update({k: t for k, t in tape.retained.items() if t._tape is tape})
    grad_loads = {(d, off): index for index, d, off in tape.grad_loads}
    functions = {}
    for first, ctx in tape.functions or ():
        for r in range(first, ctx._stop):
            functions[r] = ctx
    ops = registry.OPS
    for r in range(end - 1, -1, -1):
        row = rows[r]
        arena = row[0] & 1
        key = (arena, row[1])
        g = adj.pop(key, None)
        if g is None:
            continue
        if key in hooked:
            g = _flat(_hooked(getattr(hooked[key], "_hooks", None) or (), shaped(g, hooked[key]._shape)))
        if key in retained:
            t = retained[key]
            old = getattr(t, "_grad", None)
            t._grad = shaped(g, t._shape) if old is None else old + shaped(g, t._shape)
        for t in target_slots.get(key, ()):
            for i in target_ids[id(t)]:
                gi = shaped(g, t._shape)
                found[i] = gi if found[i] is None else found[i] + gi
        if wanted is not None and not wanted[r]:
            continue
        op = ops[row[0] >> 1]
        if op is LOAD:
            if r in functions:
                raise NotImplementedError(
                    f"tapejit: create_graph=True through the custom autograd.Function "
                    f"{type(functions[r]).__name__!s} is not supported")
            index = grad_loads.get(key)
            if index is not None:
                deliver(tape.sources[index], g)
            continue
        if tape.freed[r]:
            if tape.freed[r] == 2:
                raise RuntimeError(tape.poisoned[r])
            raise RuntimeError(FREED)
        if op is CAST:
            if row[2] >= 0:
                src_arena = 1 - arena
                _add(adj, (src_arena, row[2]), g.to(_ARENA_DTYPE[src_arena]))
            continue
        formula = formula_of(op)
        if formula is None:
            raise unsupported(op)
        ctx = Ctx(tape, r, op, row, g, marked)
        result = formula(ctx)
        pairs = zip((row[2], row[3]), result) if type(result) is tuple else result
        for enc, gi in pairs:
            if enc is None or gi is None or not ctx.wants(enc):
                continue
            _add(adj, (arena, enc), _flat(gi))
    # Gradients that reached slots no record of this tape produces: tensors of older tapes
    # are loads (handled above); what is left is the seed of a leaf-like slot.
    for key, g in adj.items():
        for t in target_slots.get(key, ()):
            for i in target_ids[id(t)]:
                gi = shaped(g, t._shape)
                found[i] = gi if found[i] is None else found[i] + gi


def _needed(tape, rows, targets):
    """Per record, whether its result depends on a target (``autograd.grad``'s inputs), and
    per arena the set of slots that do: torch's engine runs only the nodes on a path to
    them, so an op without a formula off that path does not raise, and a leaf not asked
    for costs nothing.  A value loaded from an older tape counts as leading to a target
    (that tape's graph is not followed here)."""
    ids = {id(t) for t in targets}
    marked = (set(), set())   # sets, not flags per slot: an MLP's arena has ~10^5 slots
    slots = {(t._dtype.arena, t._off) for t in targets if t._tape is tape}
    sources = tape.sources
    ops = registry.OPS
    need = []
    for code, out, a, b, p, q in rows:
        d = code & 1
        op = ops[code >> 1]
        if op is LOAD:
            src = sources[p]
            hit = not isinstance(src, Tensor) or id(src) in ids or src._tape is not None
        elif op is CAST:
            hit = a >= 0 and a in marked[1 - d]
        else:
            mine = marked[d]
            hit = (a >= 0 and a in mine) or (b >= 0 and b in mine)
            if not hit and op.listed is not None:
                hit = any(e >= 0 and e in mine for e in op.listed(tape.ints, p))
        need.append(hit)
        if hit or (d, out) in slots:
            marked[d].add(out)
    return need, marked


def _seed_tensors(outputs, grads):
    """``[(output, gradient tensor)]``: torch's checks, with the gradients kept as tensors
    (a ``grad_outputs`` that requires grad is differentiated through, as torch's)."""
    outputs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    if grads is None:
        grads = [None] * len(outputs)
    elif isinstance(grads, Tensor):
        grads = [grads]
    else:
        grads = list(grads)
    if len(grads) != len(outputs):
        raise RuntimeError(f"grad can be implicitly created only for scalar outputs"
                           if not grads else
                           f"Mismatch in number of gradients: {len(grads)} gradients for "
                           f"{len(outputs)} outputs")
    seeds = []
    for i, (t, g) in enumerate(zip(outputs, grads)):
        if not t._rg:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not have a grad_fn")
        if g is None:
            if t._numel != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            g = _concrete(np.ones(t._shape, t._dtype.np))
        elif not isinstance(g, Tensor):
            g = _concrete(np.asarray(g, dtype=t._dtype.np))
        if g._shape != t._shape:
            raise RuntimeError(
                f"Mismatch in shape: grad_output[{i}] has a shape of {list(g._shape)} and output[{i}] "
                f"has a shape of {list(t._shape)}.")
        if g._dtype is not t._dtype:
            g = g.to(t._dtype)
        seeds.append((t, g))
    return seeds


def backward_graph(tensors, grad_tensors, inputs):
    """``backward(create_graph=True)``: leaves' ``.grad`` become tensors with a grad_fn."""
    seeds = _seed_tensors(tensors, grad_tensors)
    targets = None
    if inputs is not None:
        targets = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    run(seeds, targets, accumulate=True)


def grad_graph(outputs, inputs, grad_outputs, allow_unused, materialize_grads):
    """``autograd.grad(create_graph=True)``: differentiable gradients of ``inputs``."""
    seeds = _seed_tensors(outputs, grad_outputs)
    found = run(seeds, inputs, accumulate=False)
    result = []
    for t, g in zip(inputs, found):
        if g is None:
            if materialize_grads:
                g = _concrete(np.zeros(t._shape, t._dtype.np))
            elif not allow_unused:
                raise RuntimeError(
                    "One of the differentiated Tensors appears to not have been used in the graph. "
                    "Set allow_unused=True if this is the desired behavior.")
        result.append(g)
    return tuple(result)


engine.provide_recorded_backward(sys.modules[__name__])
