"""A replayed function whose results continue the caller's graph (``tj.compile(model)``).

When ``fn`` returns tensors that require grad and does not call ``backward()`` itself, a
replay is one node of the caller's graph, as ``torch.compile``'s ``CompiledFunction``:
the forward sweep runs now, and the backward sweep runs when the caller's
``backward()`` reaches the node.  It is an ``autograd.Function`` whose inputs are the
leaves the trace reaches (the parameters ``fn`` closes over, and the arguments that
require grad) so the engine hands their gradients on as for any custom op: into
``.grad`` for leaves, into the caller's tape for arguments with a graph of their own.

Each call keeps its own copy of the value arena, so two calls before one ``backward()``
(two batches through one model) do not overwrite each other's saved values.
"""
import numpy as np

from tapejit.autograd.function import Function
from tapejit.replay.trace import refuse
from tapejit.tensor import _concrete


class CompiledFunction(Function):
    @staticmethod
    def forward(ctx, call, *leaves):
        ctx.call = call
        outs = call.forward()
        every = outs if isinstance(outs, tuple) else (outs,)
        ctx.mark_non_differentiable(*[o for o, rg in zip(every, call.plan.slot_rg) if not rg])
        return outs

    @staticmethod
    def backward(ctx, *grads):
        return (None,) + ctx.call.backward(grads)


class DifferentiableCall:
    """The per-trace plan of a differentiable replay, and one call's saved values."""

    def __init__(self, frozen, slots, slot_rg):
        """``slots``: ``[(arena, off, shape, dtype)]`` of the results, in order; ``slot_rg``:
        which of them require grad."""
        if frozen.mixed:
            refuse("a function that mixes float32 and float64 and returns tensors requiring grad",
                   "its replay runs as one node of your graph, on one dtype.", name=frozen.name)
        self.frozen = frozen
        self.slots = slots
        self.slot_rg = slot_rg
        self.deliveries = frozen.deliveries([(d, off) for d, off, _, _ in slots])

    def apply(self, inputs, arg_leaves, patches=()):
        """Replay with ``inputs`` (arrays by argument index) and label ``patches``; results as
        tensors on the caller's tape when some input requires grad."""
        leaves = tuple(arg_leaves[arg] if arg is not None else leaf
                       for _, _, _, _, arg, leaf in self.deliveries)
        call = _Call(self, inputs, patches)
        outs = CompiledFunction.apply(call, *leaves)
        return outs if isinstance(outs, tuple) else (outs,)


class _Call:
    def __init__(self, plan, inputs, patches):
        self.plan = plan
        self.inputs = inputs
        self.patches = patches
        self.values = None

    def forward(self):
        frozen = self.plan.frozen
        tape = frozen.tape
        d = frozen.arena
        with frozen.lock:
            for patch, values in self.patches:
                patch.write(tape.ints, values)
            frozen.refresh(self.inputs)
            frozen.sweeps.forward(tape.rec, 0, tape.nrec, tape.vals[d], tape.ints, tape.floats[d],
                                  frozen.sweeps.table(d))
            self.values = tape.vals[d].copy()
            # The backward sweep reads the positions too: keep this call's.
            self.ints = tape.ints.copy() if self.patches else tape.ints
        self.inputs = self.patches = None
        outs = tuple(_concrete(self.values[off:off + _size(shape)].reshape(shape).copy())
                     for _, off, shape, _ in self.plan.slots)
        return outs if len(outs) > 1 else outs[0]

    def backward(self, grads):
        plan = self.plan
        frozen = plan.frozen
        tape = frozen.tape
        d = frozen.arena
        with frozen.lock:
            adj, flags = tape.adj[d], tape.flags[d]
            for (_, off, shape, dt), g in zip(plan.slots, grads):
                if g is None:
                    continue
                n = _size(shape)
                g = np.asarray(g._value(), dt.np).reshape(-1)
                if flags[off]:
                    adj[off:off + n] += g
                else:
                    adj[off:off + n] = g
                    flags[off] = 1
            r = frozen.sweeps.backward(tape.rec, 0, tape.nrec, self.values, adj, flags, tape.freed,
                                       self.ints, tape.floats[d], True, frozen.sweeps.table(d))
            results = []
            for _, off, n, shape, _, _ in plan.deliveries:
                results.append(_concrete(adj[off:off + n].reshape(shape).copy()) if flags[off] else None)
            flags[frozen.load_outs[d]] = 0
        frozen.check(r)
        return tuple(results)


def _size(shape):
    n = 1
    for s in shape:
        n *= s
    return n
