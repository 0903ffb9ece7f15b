"""Derivative formulas for ``create_graph=True``: how an op module declares one, and the
helpers they share (the walk that applies them is ``tapejit/autograd/higher.py``).

Each op module ends with a section ``# ---- derivative formulas (create_graph) ----``
holding one ``@derivative(OP)`` per op (or per kernel, for ops sharing one): the
vector-Jacobian product of the op's record written with tapejit's recorded ops, so its
result can be differentiated again.  A formula mirrors the op's compiled rules (same
subgradients: PyTorch's).  It receives a ``Ctx`` (``higher.Ctx``: operands ``x()``/
``y()``, result ``out()``, flat incoming gradient ``g``, the record's ``ints``/``floats``)
and returns ``(grad of operand a, grad of operand b)`` (None for no gradient), or
``[(encoded operand, grad)]`` for ops with operands listed in ``ints``.  Adjoints are flat.

A formula reaches tapejit's functions through ``tapejit.api.front_ends`` (filled in when
the facade installs them; read at call time), never through the facade itself.  Formulas
are plain Python stored on the op outside its compiled parts, so writing or editing one
recompiles no sweep (``registry.registry_hash`` skips them).

Masks (relu, clamp, where, maximum) are constants: ``where(mask, g, 0)`` gives an exact
zero off the mask, even for an infinite ``g``, as the rules and PyTorch's do.  Where the
rule's value is a special case a formula does not cover, it raises ``refuse`` by name.
"""
import numpy as np

from tapejit import dtypes
from tapejit.api import front_ends as tj   # tj's functions, without importing the facade
from tapejit.recording import on_tape, record
from tapejit.tape import current, state
from tapejit.tensor import _concrete, _taped

_BY_KERNEL = {}   # forward kernel -> formula, for every op running that kernel


def derivative(*targets):
    """``@derivative(OP, ...)``: the formula applied to records of these ops by create_graph
    passes.  A target may also be a forward kernel: then every op running it (those that
    ``same_kernels`` defines in other modules too) uses the formula."""
    def register(fn):
        for target in targets:
            if hasattr(target, "opcode"):
                target.formula = fn   # an attribute, not a compiled part: not hashed
            else:
                _BY_KERNEL[target] = fn
        return fn
    return register


def formula_of(op):
    """The derivative formula of ``op`` (None: it has none, create_graph raises by name)."""
    fn = op.__dict__.get("formula")
    if fn is None and op.forward is not None:
        fn = _BY_KERNEL.get(op.forward)
    return fn


def unsupported(op):
    return NotImplementedError(
        f"tapejit: the derivative of {op.node} (op {op.name!r}) is not implemented for "
        f"create_graph=True (double backward); its first derivative is, through the plain "
        f"backward. See README, 'Higher-order derivatives', for the ops that support it.")


def refuse(c, why):
    """The error of a formula at a point it does not cover (the rule's special case)."""
    err = unsupported(c.op)
    return NotImplementedError(f"{err.args[0]} ({why})")


ARENA_DTYPE = (dtypes.float64, dtypes.float32)


def slot(tape, arena, enc, n, shape=None):
    """The value in slot ``enc`` (an operand field: ``~off`` when it takes no gradient) as a
    tensor on ``tape``; flat unless ``shape`` is given."""
    off = enc if enc >= 0 else ~enc
    return _taped(tape, off, (n,) if shape is None else tuple(shape), n, ARENA_DTYPE[arena], enc >= 0)


def shaped(t, shape):
    """``t`` with another shape of the same element count.  A taped tensor's slot is
    contiguous, so this is a second tensor over the same slot (no record: its gradient
    is the slot's); a reshape record would copy the values on every pass."""
    shape = tuple(shape)
    if t._shape == shape:
        return t
    if t._tape is None:
        return t.reshape(shape)
    return _taped(t._tape, t._off, shape, t._numel, t._dtype, t._rg)


# ---- constants, masks and values -----------------------------------------------------------

def zeros(n, dt):
    return _concrete(np.zeros(n, dt.np))


def where(mask, a, b):
    """``where`` with a constant NumPy mask; ``b`` may be a Python number."""
    return tj.where(_concrete(np.asarray(mask, bool)), a, b)


def on_graph_of(d, t):
    """``d``, made to depend on ``t`` (with a zero derivative) if it does not require grad:
    torch's double backward of relu and leaky_relu (and of hardtanh, built on relu here) is
    a node over their saved tensor, so the gradient has a grad_fn, whose own gradient is
    zeros, even for a constant incoming gradient.  ``where`` with an all-false constant
    mask: an exact 0 whatever ``t`` holds (inf and NaN too)."""
    if d.requires_grad or not t.requires_grad:
        return d
    return d + where(np.zeros(t.shape, bool), t, 0.0)


def value(t):
    """The value of an operand or result slot of the record being differentiated: read
    from the arena without a flush (the walk flushed the tape up to that record first;
    a flush here would run the forward of the records the walk wrote so far, once per
    mask).  Under ``tj.compile`` the read is refused as any value read (a mask would be
    frozen into the replays)."""
    tape = t._tape
    if tape is None or tape.tracing or tape.broken is not None or tape.unkept is not None:
        return t._value()
    return tape.vals[t._dtype.arena][t._off:t._off + t._numel].reshape(t._shape)


# ---- the two index primitives --------------------------------------------------------------

def gather(x, positions):
    """``x[positions]`` of flat ``x`` (an ``index`` record; its gradient scatters back)."""
    from tapejit.ops import movement, indexing
    return indexing._gather(movement.INDEX, x, np.asarray(positions, np.int64))


def scatter_add(g, positions, size):
    """A flat tensor of ``size`` zeros with ``g[i]`` added at ``positions[i]`` (duplicates
    sum): the transpose of ``gather`` (a ``scatter_add`` record; its gradient gathers)."""
    from tapejit.ops import indexed
    positions = np.asarray(positions, np.int64).reshape(-1)
    if not on_tape(g):
        out = np.zeros(size, g._dtype.np)
        np.add.at(out, positions, g._value().reshape(-1))
        return _concrete(out)
    tape = state.tape or current()
    p = tape.add_ints([1, 0, positions.size, size, g._numel] + positions.tolist()
                      + list(range(positions.size)))
    q = tape.add_floats(0.0)
    return record(indexed.SCATTER_ADD, (g,), (size,), g._dtype, p, q)


# ---- elementwise binary records: q = 1 / 2 when x / y is a single element -------------------

def binary_operands(c):
    """Operands of a binary record, each at its own size (1 for a broadcast scalar)."""
    q = c.q
    x = c.x(1 if q == 1 else c.n)
    y = c.y(1 if q == 2 else c.n)
    return x, y


def _to(g, scalar):
    return shaped(g.sum(), (1,)) if scalar else g


def pair(c, gx, gy):
    """A binary record's result: each gradient brought back to its operand's size (None
    where the operand takes none)."""
    return (None if gx is None or not c.wants_a else _to(gx, c.q == 1),
            None if gy is None or not c.wants_b else _to(gy, c.q == 2))


def producer(c):
    """``(op, a, b, p, q)`` of the record whose result ``c``'s operand a is (the multi-result
    record a part record reads): a part's formula differentiates its result with respect to
    that record's input directly, so the region it reads needs no adjoint of its own."""
    from tapejit import registry
    off = c.a if c.a >= 0 else ~c.a
    rows = c.tape.rec[:c.r]
    hits = np.flatnonzero((rows[:, 1] == off) & ((rows[:, 0] & 1) == c.arena))
    code, _, a, b, p, q = rows[hits[-1]].tolist()
    return registry.OPS[code >> 1], a, b, p, q
