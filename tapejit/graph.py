"""``grad_fn`` nodes: a read-only window on the tape with PyTorch's names.

A node is (tape, record index); its class is named after the op's PyTorch node
(``MulBackward0``), and ``next_functions`` follows the record's operands: an operand
loaded from a leaf that requires grad shows as ``AccumulateGrad``, a constant as
``(None, 0)``.

As in torch, one record has one node object while anything holds it, so
``y.grad_fn is y.grad_fn`` and the nodes of ``next_functions`` are the same objects at
every access.  The caches hold nodes weakly: a node keeps its tape alive (as torch's node
keeps its graph), the cache keeps nothing alive.  They are keyed by the tape's serial,
which changes when a pooled tape is reset for a new graph, so a node never outlives the
records it shows (a tape that a node refers to is never reused anyway).
"""
import weakref

from tapejit import registry
from tapejit.ops.core import LOAD
from tapejit.recording import composite_at as _composite_at
from tapejit.tensor import Tensor, provide as _provide_to_tensor

_classes = {}
_nodes = weakref.WeakValueDictionary()          # (tape serial, record) -> Node
_accumulators = weakref.WeakValueDictionary()   # id(leaf) -> AccumulateGrad


class Node:
    __slots__ = ("_tape", "_r", "__weakref__")

    def __init__(self, tape, r):
        self._tape = tape
        self._r = r

    def name(self):
        return type(self).__name__

    def __repr__(self):
        return f"<{self.name()} object at {id(self):#x}>"

    def __eq__(self, other):
        return isinstance(other, Node) and other._tape is self._tape and other._r == self._r

    def __hash__(self):
        return hash((id(self._tape), self._r))

    @property
    def metadata(self):
        return {}

    def _operands(self):
        tape = self._tape
        code, out, a, b, p, q = tape.rec[self._r].tolist()
        op = registry.OPS[code >> 1]
        arena = code & 1
        if op.name in ("cat", "stack"):
            k = int(tape.ints[p])
            encs = [int(tape.ints[p + 2 + 2 * j]) for j in range(k)]
            return [(arena, e) for e in encs]
        if op.name == "linear":   # bias listed in ints; torch's addmm order: (bias, input, weight)
            return [(arena, int(tape.ints[p + 4])), (arena, a), (arena, b)]
        if op.kind == "cast":
            return [(1 - arena, a)]
        return [(arena, e) for e in (a, b)[:op.operands]]

    @property
    def next_functions(self):
        tape = self._tape
        result = []
        for arena, enc in self._operands():
            if enc < 0:
                result.append((None, 0))
                continue
            result.append((_node_at(tape, arena, enc), 0))
        return tuple(result)

    def register_hook(self, fn):
        raise NotImplementedError("tapejit: hooks on grad_fn nodes are not supported; use Tensor.register_hook")


class CompositeNode(Node):
    """The node of a composite op's output record, shown as torch's single node: its name
    is torch's (``NllLossBackward0``), its ``next_functions`` the nodes of the composite's
    inputs (the records inside it are not shown, as torch has none)."""

    __slots__ = ("_inputs",)

    def name(self):
        cls = type(self).__name__
        return "torch::autograd::CopySlices" if cls == "CopySlices" else cls   # torch's C++ node

    @property
    def next_functions(self):
        result = []
        for operand in self._inputs:
            if operand is None:
                result.append((None, 0))
            elif isinstance(operand, Tensor):   # a leaf that requires grad
                result.append((_accumulator(operand), 0))
            else:
                result.append((_node_at(self._tape, *operand), 0))
        return tuple(result)


class AccumulateGrad:
    """The node of a leaf that requires grad; ``variable`` is the leaf."""

    __slots__ = ("variable", "__weakref__")

    def __init__(self, variable):
        self.variable = variable

    def name(self):
        return "torch::autograd::AccumulateGrad"

    def __repr__(self):
        return f"<AccumulateGrad object at {id(self):#x}>"

    def __eq__(self, other):
        return isinstance(other, AccumulateGrad) and other.variable is self.variable

    def __hash__(self):
        return id(self.variable)

    next_functions = ()


def _node_class(node_name):
    cls = _classes.get(node_name)
    if cls is None:
        cls = _classes[node_name] = type(node_name, (Node,), {"__slots__": ()})
    return cls


def _composite_class(node_name):
    cls = _classes.get(("composite", node_name))
    if cls is None:
        cls = _classes[("composite", node_name)] = type(node_name, (CompositeNode,), {"__slots__": ()})
    return cls


def _node_at(tape, arena, off):
    r = tape.producer(arena, off)
    if r is None:
        return None
    op = registry.OPS[tape.rec[r, 0] >> 1]
    if op is LOAD:
        src = tape.sources[int(tape.rec[r, 4])]
        if not isinstance(src, Tensor):   # an output of a custom Function: its context
            return src
        if src._tape is None:
            return _accumulator(src) if src._rg else None
        return node_for(src)
    key = (tape.serial, r)
    node = _nodes.get(key)
    if node is None:
        composite = _composite_at(tape, r)
        if composite is None:
            node = _nodes[key] = _node_class(op.node)(tape, r)
        else:
            name, inputs = composite
            node = _nodes[key] = _composite_class(name)(tape, r)
            node._inputs = inputs
    return node


def _accumulator(leaf):
    node = _accumulators.get(id(leaf))
    if node is None or node.variable is not leaf:
        node = _accumulators[id(leaf)] = AccumulateGrad(leaf)
    return node


def node_for(t):
    """The grad_fn of taped tensor ``t``."""
    return _node_at(t._tape, t._dtype.arena, t._off)


_provide_to_tensor(node_for=node_for)
