"""Where op modules publish their front-end functions, and where their arguments are checked.

An op module defines ``tj.exp`` next to its rules and calls ``export(exp, method=True)``;
``install()`` then puts it in the ``tapejit`` namespace and on ``Tensor``, so adding an
op touches one file.

``install()`` also puts torch's argument check in front of each function and method: a
parameter named as torch names its tensor arguments (``input``, ``other``, ``tensors``,
...) refuses a value that is not one with torch's ``TypeError`` ("exp(): argument 'input'
(position 1) must be Tensor, not str"), where the op would otherwise fail deep inside on
a missing attribute.  Binary operators return ``NotImplemented`` for such a value, so
Python tries the other operand and raises its own ``TypeError``, as with torch.  The
checks run before the op, in a thin generated front end; a method whose only tensor is
``self`` (``x.exp()``) is installed unwrapped, and so are ``x + y`` and ``x * y``, whose
operator functions return ``NotImplemented`` themselves.
"""
import inspect
import numbers
import os

import numpy as np

from tapejit.dtypes import type_name
from tapejit.tensor import Tensor

EXPORTS = []   # (name, fn, method_name_or_None, dunders)


class FrontEnds:
    """``tj.<name>`` for the modules below the facade (tensor_math, numpy_interop), which do
    not import it: the same objects, filled in by ``install``."""


front_ends = FrontEnds()


def export(fn=None, *, name=None, method=False, dunders=(), function=True):
    def register(f):
        public = name or f.__name__
        meth = public if method is True else (method or None)
        EXPORTS.append((public if function else None, f, meth, tuple(dunders)))
        return f
    return register(fn) if fn is not None else register


def install(namespace, tensor_cls):
    for public, fn, meth, dunders in EXPORTS:
        if public is not None:
            namespace.setdefault(public, front_end(fn, public))
            setattr(front_ends, public, namespace[public])
        if meth is not None:
            setattr(tensor_cls, meth, front_end(fn, meth, method=True))
        for d in dunders:
            setattr(tensor_cls, d, operator(fn) if d in _BINARY_OPERATORS else fn)


# ---- argument checks -----------------------------------------------------------------------

TENSOR = "Tensor"               # a Tensor
OPERAND = "Tensor or Number"    # also a number, a NumPy array or a nested sequence of numbers
TENSORS = "tuple of Tensors"    # a list or tuple of Tensors

# torch's parameter names, and what each takes.
_KIND_OF = {"input": TENSOR, "tensor": TENSOR, "mat2": TENSOR, "vec": TENSOR, "vec2": TENSOR,
            "other": OPERAND, "exponent": OPERAND, "index": OPERAND, "mask": OPERAND,
            "condition": OPERAND, "value": OPERAND, "src": OPERAND, "min": OPERAND, "max": OPERAND,
            "tensors": TENSORS}
# Front ends whose parameter takes more or less than its name says.
_KIND_EXCEPTIONS = {
    ("pow", "input"): OPERAND,        # tj.pow(2, x)
    ("add", "input"): OPERAND, ("sub", "input"): OPERAND, ("subtract", "input"): OPERAND,
    ("mul", "input"): OPERAND, ("multiply", "input"): OPERAND, ("div", "input"): OPERAND,
    ("divide", "input"): OPERAND, ("true_divide", "input"): OPERAND,
    ("remainder", "input"): OPERAND, ("floor_divide", "input"): OPERAND,   # tj.div(2, x), as torch
    ("where", "input"): OPERAND,      # tj.where(c, 1.0, x)
    ("view_as", "other"): TENSOR, ("reshape_as", "other"): TENSOR,
    ("expand_as", "other"): TENSOR, ("equal", "other"): TENSOR,
    ("linear", "weight"): TENSOR, ("linear", "bias"): TENSOR,             # nn.functional's
    ("layer_norm", "weight"): TENSOR, ("layer_norm", "bias"): TENSOR,
}

_BINARY_OPERATORS = {
    "__sub__", "__rsub__", "__truediv__", "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__",
    "__rmod__", "__pow__",
    "__rpow__", "__matmul__", "__rmatmul__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__",
    "__and__", "__rand__", "__or__", "__ror__", "__xor__", "__rxor__",
    "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ipow__",
}

_operand_types = ()   # filled by _types() once Tensor exists


def _types():
    global _operand_types
    if not _operand_types:
        _operand_types = (Tensor, float, int, np.ndarray, np.generic, list, tuple, numbers.Real)
    return _operand_types


def is_operand(x):
    """Whether ``x`` can stand for a tensor operand: a Tensor, a real number, a NumPy
    array or scalar, or a (nested) sequence of them."""
    return isinstance(x, _types()) and not isinstance(x, complex)


def argument_error(fn, name, position, value, kind):
    where = f" (position {position})" if position else ""
    hint = getattr(type(value), "not_a_tensor_hint", None)   # NumPy mode's traced arrays
    return TypeError(f"{fn}(): argument '{name}'{where} must be {kind}, not {type_name(value)}"
                     + (f". {hint}" if hint else ""))


def _reject(value, fn, name, position, kind):
    raise argument_error(fn, name, position, value, kind)


def _reject_tensors(value, fn, name, position):
    if not isinstance(value, (list, tuple)):
        raise argument_error(fn, name, position, value, TENSORS)
    for i, x in enumerate(value):
        if not isinstance(x, Tensor):
            raise TypeError(f"{fn}(): expected Tensor as element {i} in argument {position - 1}, "
                            f"but got {type_name(x)}")


def operator(fn):
    """A binary operator: ``fn(self, other)``, or ``NotImplemented`` when ``other`` is no
    operand, so Python tries ``other``'s reflected operator and then raises its own
    ``TypeError`` ("unsupported operand type(s) for -: 'Tensor' and 'str'")."""
    types = _types()
    common = frozenset(types[:3])   # Tensor, float, int: a set lookup, cheaper than isinstance

    def binary(self, other):
        if type(other) in common or (isinstance(other, types) and not isinstance(other, complex)):
            return fn(self, other)
        return NotImplemented
    binary.__name__ = binary.__qualname__ = fn.__name__
    # The frame's name is the op's, as tj.compile's errors name the op user code called.
    binary.__code__ = binary.__code__.replace(co_name=getattr(fn, "__code__", binary.__code__).co_name)
    binary.__doc__ = fn.__doc__
    binary.__wrapped__ = fn
    return binary


def _kind(fn_name, param):
    return _KIND_EXCEPTIONS.get((fn_name, param.name), _KIND_OF.get(param.name))


def front_end(fn, public=None, method=False):
    """``fn`` behind the check of its tensor parameters (``fn`` itself when it has none).

    The front end is generated with ``fn``'s own signature, so a call costs one more
    Python frame and a type test per tensor argument, and nothing when the check passes.
    ``method``: the first parameter is ``self`` (not checked, not counted in positions).
    """
    public = public or fn.__name__
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return fn
    checks = []
    for i, p in enumerate(params):
        if method and i == 0:
            continue
        kind = _kind(public, p)
        if kind is None:
            continue
        positional = p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
        position = i + (0 if method else 1) if positional else 0
        checks.append((p, kind, position))
    if not checks:
        return fn
    env = {"_fn": fn, "_T": _tensor_cls(), "_operands": _types(), "_common": frozenset(_types()[:3]),
           "_reject": _reject, "_reject_tensors": _reject_tensors}
    signature, call = [], []
    keyword_only = False
    for i, p in enumerate(params):
        default = ""
        if p.default is not p.empty:
            env[f"_d{i}"] = p.default
            default = f"=_d{i}"
        if p.kind is p.VAR_POSITIONAL:
            signature.append(f"*{p.name}")
            call.append(f"*{p.name}")
            keyword_only = True
        elif p.kind is p.VAR_KEYWORD:
            signature.append(f"**{p.name}")
            call.append(f"**{p.name}")
        elif p.kind is p.KEYWORD_ONLY:
            if not keyword_only:
                signature.append("*")
                keyword_only = True
            signature.append(p.name + default)
            call.append(f"{p.name}={p.name}")
        else:
            signature.append(p.name + default)
            call.append(p.name)
    body = []
    for p, kind, position in checks:
        v = p.name
        optional = f"{v} is not None and " if p.default is None else ""
        where = f"{public!r}, {v!r}, {position}"
        if p.kind is p.VAR_POSITIONAL or kind is TENSORS:
            if p.kind is not p.VAR_POSITIONAL:
                body.append(f"    if {optional}not isinstance({v}, (list, tuple)): _reject_tensors({v}, {where})")
            body.append(f"    for _x in {v}:\n"
                        f"        if type(_x) is not _T and not isinstance(_x, _T): _reject_tensors({v}, {where})")
        elif kind is TENSOR:
            body.append(f"    if {optional}type({v}) is not _T and not isinstance({v}, _T): "
                        f"_reject({v}, {where}, {kind!r})")
        else:
            body.append(f"    if {optional}type({v}) not in _common and (not isinstance({v}, _operands) "
                        f"or isinstance({v}, complex)): _reject({v}, {where}, {kind!r})")
    source = (f"def {public}({', '.join(signature)}):\n" + "\n".join(body)
              + f"\n    return _fn({', '.join(call)})\n")
    # A file name inside the package: tracebacks say what the frame is, and tj.compile
    # counts it as tapejit's own code when it names the line of user code at fault.
    exec(compile(source, os.path.join(os.path.dirname(os.path.abspath(__file__)), f"<front end {public}>"),
                 "exec"), env)
    checked = env[public]
    checked.__qualname__ = getattr(fn, "__qualname__", public)
    checked.__module__ = fn.__module__
    checked.__doc__ = fn.__doc__
    checked.__wrapped__ = fn
    return checked


def _tensor_cls():
    return Tensor


class Names:
    """``tj.<name>`` for user-level code below the facade, which does not import it: each
    use looks ``name`` up in ``sources`` in turn (``front_ends`` and the modules the facade
    takes its names from), so a profile's timing wrappers, put in those, are seen;
    ``fixed`` names sub-namespaces (``linalg=...``)."""
    __slots__ = ("_sources", "_fixed")

    def __init__(self, *sources, **fixed):
        self._sources = sources
        self._fixed = fixed

    def __getattr__(self, name):
        value = self._fixed.get(name, self)
        if value is not self:
            return value
        for source in self._sources:
            value = getattr(source, name, self)
            if value is not self:
                return value
        raise AttributeError(f"module 'tapejit' has no attribute {name!r}")

