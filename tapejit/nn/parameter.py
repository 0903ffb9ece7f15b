"""``Parameter``: a leaf tensor that a ``Module`` registers when it is assigned as an attribute.

It is a ``Tensor`` subclass with no extra slots, so every op accepts it and results are
plain ``Tensor``s, as in torch.
"""
import numpy as np

from tapejit.inplace import note_leaf_write
from tapejit.ops import binary as _binary
from tapejit.recording import as_tensor_operand, record_binary
from tapejit.tensor import Tensor, _concrete, narrow_grad_error

_new = object.__new__


def _leaf_array(data):
    """The array a new leaf built from ``data`` holds: shared with a leaf, copied from a
    recorded value (an arena slot is reused once its tape is released)."""
    if data is None:
        return np.zeros(0, np.float32)
    if not isinstance(data, Tensor):
        raise TypeError(f"Parameter: expected a tensor as data, got {type(data).__name__}")
    if data._tape is None:
        return data._data
    return np.array(data._value())


def _hold(tensor, array):
    """Make ``tensor`` a leaf holding ``array`` (C-ordered, of a tapejit dtype)."""
    source = _concrete(array)
    tensor._tape = None
    tensor._off = 0
    tensor._data = source._data
    tensor._shape = source._shape
    tensor._numel = source._numel
    tensor._dtype = source._dtype


def _fill(target, array, requires_grad):
    _hold(target, array)
    if requires_grad and not target._dtype.is_floating_point:
        raise RuntimeError("Only Tensors of floating point and complex dtype can require gradients")
    if requires_grad and target._dtype.narrow:
        raise RuntimeError(narrow_grad_error(target._dtype))
    target._rg = bool(requires_grad)
    return target


class Parameter(Tensor):
    """``Parameter(data=None, requires_grad=True)``: shares ``data``'s memory when ``data``
    is a leaf, as ``torch.nn.Parameter`` does."""
    __slots__ = ()

    def __new__(cls, data=None, requires_grad=True):
        p = _new(cls)
        # Set, not left unset: a load or a backward reads them with getattr and a default,
        # which for an unset slot raises and catches AttributeError (see tensor._concrete).
        p._version = 0
        p._grad = None
        p._hooks = None
        return _fill(p, _leaf_array(data), requires_grad)

    def __init__(self, data=None, requires_grad=True):
        pass  # everything is set in __new__ (Tensor.__init__ would rebuild the value)

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()

    __str__ = __repr__

    def __deepcopy__(self, memo):
        copied = Parameter(_concrete(self._data.copy()), self._rg)
        grad = getattr(self, "_grad", None)
        if grad is not None:
            copied._grad = _concrete(np.array(grad._value()))
        memo[id(self)] = copied
        return copied

    # The core's binary front ends take their tensor path only for operands whose type is
    # exactly ``Tensor``; with a subclass as the right operand they fall back to converting
    # it, which leaves it unchanged and recurses without end.  Python calls a subclass's
    # reflected operator first, so ``x - p`` reaches these, which put the parameter on the
    # left (commutative ops) or record the op directly.  See the nn report for the core fix.
    def __radd__(self, other):
        return Tensor.__add__(self, other)

    def __rmul__(self, other):
        return Tensor.__mul__(self, other)

    def __rsub__(self, other):
        return _reflected(other, self, _binary.SUB, _binary.sub, np.subtract, "__rsub__")

    def __rtruediv__(self, other):
        return _reflected(other, self, _binary.DIV, _binary.div, None, "__rtruediv__")

    def __rpow__(self, other):
        return _reflected(other, self, _binary.POW, _binary.pow, np.power, "__rpow__")


def _reflected(left, param, op, front, numpy_fn, tensor_reflected):
    """``left <op> param`` for the non-commutative operators."""
    if not isinstance(left, Tensor):
        if not isinstance(left, np.ndarray):
            return getattr(Tensor, tensor_reflected)(param, left)  # a Python scalar
        left = as_tensor_operand(left, param)
    if not param._rg:
        # No gradient can reach the parameter: a plain alias of its value will do.
        return front(left, _concrete(param._value()))
    return record_binary(op, left, param, numpy_fn)


def _rebuild_parameter(array, requires_grad):
    """Files saved before tapejit's array records (NumPy's pickle; weights_only=False)."""
    return Parameter(_concrete(array), requires_grad)


def set_leaf_value(tensor, array):
    """Give leaf ``tensor`` a new value, possibly of another dtype or shape, keeping the
    object: ``Module.to(dtype)`` converts parameters in place as torch does, so an
    optimizer built earlier still holds them.  The version bump marks the old value as
    changed for any graph that saved it."""
    if tensor._tape is not None:
        raise RuntimeError("set_leaf_value: expected a leaf tensor")
    note_leaf_write(tensor)
    _hold(tensor, np.asarray(array, order="C"))  # (ascontiguousarray would make 0-d arrays 1-d)
