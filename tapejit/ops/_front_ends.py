"""Front ends generated from the ops' names (``Names`` in tapejit/op_names.py).

An elementwise op whose ``define_*`` line gives ``names=names("log1p", in_place="function",
...)`` gets ``tj.log1p``, ``Tensor.log1p``, ``Tensor.log1p_`` and ``tj.log1p_`` from
``generate(globals())``, called once at the end of its module's rules.  Each front end is
the one-line call to the recorder it would be if written by hand (no table lookup per
call), so generating them costs nothing at run time.  ``tj.special`` and NumPy's
``__array_ufunc__`` read the same names (``front_end_of``).
"""
import sys

import numpy as np

from tapejit import registry
from tapejit.api import export, front_ends
from tapejit.inplace import in_place
from tapejit.recording import as_tensor_operand, float_input, record_binary, record_unary
from tapejit.tensor import _concrete

# op name -> its generated front end (the first of its names, or the op's own name when it
# has none in ``tj``: torch.special.xlog1py only)
GENERATED = {}


def _doc(op, public, integer):
    kept = "keeps its dtype (computed by NumPy, no gradient)" if integer is not None else "gives floats"
    return f"Elementwise {public} (grad_fn {op.node}); an integer tensor {kept}, as torch."


def _unary(op, public, integer):
    if integer is None:
        def front(input):
            return record_unary(op, input)
    else:
        def front(input):
            if not input._dtype.is_floating_point:
                return _concrete(np.asarray(integer(input._value())))
            return record_unary(op, input)
    front.__name__ = front.__qualname__ = public
    front.__doc__ = _doc(op, public, integer)
    return front


def _binary(op, public, integer):
    if integer is None:
        def front(input, other):
            other = as_tensor_operand(other, input)
            return record_binary(op, float_input(input), float_input(other), None)
    else:
        def front(input, other):
            return record_binary(op, input, as_tensor_operand(other, input), integer)
    front.__name__ = front.__qualname__ = public
    front.__doc__ = _doc(op, public, integer)
    return front


_MAKERS = {"unary": _unary, "binary": _binary}


def generate(namespace):
    """Make and export the front ends of the ops module ``namespace`` defines (its
    ``globals()``): each is also stored there under its public name."""
    module = namespace["__name__"]
    for op in registry.OPS:
        names = op.names
        if op.module != module or names is None or names.written:
            continue
        make = _MAKERS.get(op.kind)
        if make is None:
            raise TypeError(f"op {op.name!r}: front ends are generated for elementwise ops only, not for "
                            f"{op.kind!r} ops; write its front end and give names(..., written=True)")
        if not names.functions:
            namespace[op.name] = GENERATED[op.name] = make(op, op.name, names.integer)
        for i, public in enumerate(names.functions):
            front = make(op, public, names.integer)
            if i == 0:
                GENERATED[op.name] = front
            namespace[public] = export(front, method=names.method)
            if names.in_place:
                export(in_place(public + "_", front), method=True, function=names.in_place == "function")
        if names.dunders:
            export(GENERATED[op.name], method=False, function=False, dunders=names.dunders)


def front_end_of(op):
    """The function behind ``op``'s first name: generated, or written by hand (then found
    in its module, or, once the facade has installed them, among ``tj``'s front ends)."""
    front = GENERATED.get(op.name)
    if front is None:
        name = op.names.functions[0]
        front = getattr(sys.modules[op.module], name, None) or getattr(front_ends, name)
    return front


def named_ops():
    """Every op with names, in opcode order."""
    return [op for op in registry.OPS if op.names is not None]
