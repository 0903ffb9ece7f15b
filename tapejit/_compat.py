"""What older and everyday PyTorch scripts call that is no op of its own: in-place forms
of shape ops (``x.unsqueeze_(0)``, ``x.t_()``), ``normal_``/``uniform_`` as methods, and
the function forms of in-place methods torch has (``torch.sin_(x)``).

Each is installed only where nothing else defines the name, so an op module that adds one
of its own (with a recorded rule) takes precedence.
"""
import numpy as np

from tapejit import dtypes, inplace
from tapejit.api import type_name
from tapejit.creation import rng
from tapejit.inplace import apply_inplace, check_leaf, note_leaf_write, poison, _rebound
from tapejit.inplace import ONE_OF_SEVERAL, view_positions
from tapejit.tape import recording_tape
from tapejit.tensor import Tensor, _concrete


# ---- shape ops in place ---------------------------------------------------------------------

def _reshape_in_place(t, compute, numpy_view, op):
    """``t`` takes the shape of ``compute()`` (``t``'s out-of-place shape op, which checks
    the arguments), as torch's in-place view ops change a tensor's sizes and strides, not
    its values.  ``numpy_view(array, result)``: the same op on a NumPy array of ``t``'s
    shape.

    As in torch the version counter goes up (a record that saved ``t`` then refuses its
    backward), a leaf that requires grad is refused, and a view of another tensor stays
    its view (later in-place writes through it still reach the base)."""
    view = getattr(t, "_view", None)
    if view is ONE_OF_SEVERAL:
        raise RuntimeError(
            f"{op}: an output of UnbindBackward0 is a view and is being modified inplace. This view is "
            f"the output of a function that returns multiple views (iterating a tensor, unbind). Such "
            f"functions do not allow the output views to be modified inplace.")
    shared = inplace._shared.get(id(t))
    if shared is not None and any(other is not t for other, _ in shared.alive()):
        # The aliases follow the value of ``t`` (inplace._Shared) in its old shape: they would
        # read its elements in the wrong order.  torch's share the storage with their own strides.
        raise RuntimeError(
            f"{op}: tapejit cannot change the shape in place of a tensor that shares its memory with "
            f"another (detach(), .data): [{t._dtype.name} {list(t._shape)}]; use the out-of-place "
            f"{op[:-1]}(), or clone() first")
    check_leaf(t, op)
    tape = recording_tape()
    before = tape.n if tape is not None else 0   # records from here on are this op's own
    result = compute()
    if t._tape is None:
        note_leaf_write(t)
        t._data = numpy_view(t._data, result)   # a NumPy view: tensors sharing the memory still do
        t._shape = t._data.shape
        t._numel = t._data.size
        return t
    if view is not None:
        base, where, stamp = view
        view = (base, _where_of(numpy_view(view_positions(base, where, t._shape), result)), stamp)
    old = getattr(t, "_version", 0)
    poison(t._tape, t._dtype.arena, t._off, t, old, before if t._tape is tape else None)
    t._version = old + 1
    t._tape = result._tape
    t._off = result._off
    t._rg = result._rg
    t._data = result._data if result._tape is None else None
    t._node = None
    t._shape = result._shape
    t._numel = result._numel
    t._view = view
    _rebound(t)
    return t


def _where_of(positions):
    """The ``_view`` position spec (see ops/views.py) of a view whose elements are the
    flat ``positions`` of its base: a start for a contiguous range, else sizes, strides
    and start (views are affine in their index, so the steps from the first element give
    the strides)."""
    if positions.size == 0:
        return 0
    start = int(positions.flat[0])
    if np.array_equal(positions.reshape(-1), np.arange(start, start + positions.size)):
        return start
    nd = positions.ndim
    strides = tuple(int(positions[(0,) * k + (1,) + (0,) * (nd - k - 1)]) - start
                    if positions.shape[k] > 1 else 0 for k in range(nd))
    return tuple(positions.shape), strides, start


def _same_values_new_shape(array, result):
    return array.reshape(result._shape)   # only sizes of 1 come or go: a view, never a copy


def unsqueeze_(self, dim):
    return _reshape_in_place(self, lambda: self.unsqueeze(dim), _same_values_new_shape, "unsqueeze_")


def squeeze_(self, dim=None):
    return _reshape_in_place(self, lambda: self.squeeze() if dim is None else self.squeeze(dim),
                             _same_values_new_shape, "squeeze_")


def _swap(self, dim0, dim1, op):
    nd = len(self._shape)

    def swapped(array, result):
        if nd == 0:
            return array
        return np.swapaxes(array, dim0 % nd, dim1 % nd)   # in range: transpose checked them
    return _reshape_in_place(self, lambda: self.transpose(dim0, dim1), swapped, op)


def transpose_(self, dim0, dim1):
    return _swap(self, dim0, dim1, "transpose_")


def swapdims_(self, dim0, dim1):
    return _swap(self, dim0, dim1, "swapdims_")


def swapaxes_(self, axis0, axis1):
    return _swap(self, axis0, axis1, "swapaxes_")


def t_(self):
    if len(self._shape) > 2:
        raise RuntimeError(f"t_() expects a tensor with <= 2 dimensions, but self is {len(self._shape)}D")
    return _swap(self, 0, -1, "t_") if self._shape else _swap(self, 0, 0, "t_")


# ---- random fills ---------------------------------------------------------------------------

def _fill_random(t, sample, op):
    """``t`` filled in place with ``sample`` (an array of its shape).  A recorded tensor keeps
    its history with a zero gradient, as torch's ``NormalBackward0``/``UniformBackward0``."""
    check_leaf(t, op)
    value = _concrete(np.asarray(sample, t._dtype.np))
    if t._tape is None and getattr(t, "_view", None) is None:
        note_leaf_write(t)
        np.copyto(t._data, value._data)
        return t
    return apply_inplace(t, lambda: t * 0.0 + value, op)


def normal_(self, mean=0.0, std=1.0, *, generator=None):
    if not self._dtype.is_floating_point:
        raise dtypes.not_implemented("normal_kernel_cpu", self._dtype)
    if std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std:g}")
    return _fill_random(self, rng().normal(mean, std, self._shape), "normal_")


def uniform_(self, from_=0.0, to=1.0, *, generator=None, **kwargs):
    from_ = kwargs.pop("from", from_)   # torch's keyword is ``from``
    if kwargs:
        raise TypeError(f"uniform_() got an unexpected keyword argument '{next(iter(kwargs))}'")
    if not self._dtype.is_floating_point:
        raise dtypes.not_implemented("check_uniform_bounds", self._dtype)
    if from_ > to:
        raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={from_:g} > to={to:g}")
    return _fill_random(self, rng().uniform(from_, to, self._shape), "uniform_")


def bernoulli_(self, p=0.5, *, generator=None):
    if isinstance(p, Tensor):
        probs = np.broadcast_to(p._value(), self._shape)
    else:
        if not 0 <= p <= 1:
            raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={p:g}")
        probs = p
    return _fill_random(self, rng().random(self._shape) < probs, "bernoulli_")


def exponential_(self, lambd=1.0, *, generator=None):
    if not self._dtype.is_floating_point:
        raise dtypes.not_implemented("exponential_cpu", self._dtype)
    if not lambd > 0:
        raise RuntimeError(f"exponential_ expects lambda > 0.0, but found lambda={lambd:g}")
    return _fill_random(self, rng().exponential(1.0 / lambd, self._shape), "exponential_")


_METHODS = {f.__name__: f for f in (unsqueeze_, squeeze_, transpose_, swapdims_, swapaxes_, t_,
                                    normal_, uniform_, bernoulli_, exponential_)}

# torch's function forms of in-place methods (torch.sin_(x) is x.sin_()) that no op's
# names declare (``names(..., in_place="function")`` makes tj.sin_ with the op's front ends).
_FUNCTION_FORMS = ("square_", "clamp_min_", "clamp_max_", "fill_", "zero_", "detach_")


def _function_form(name):
    def in_place_function(input, *args, **kwargs):
        if not isinstance(input, Tensor):
            raise TypeError(f"{name}(): argument 'input' (position 1) must be Tensor, not {type_name(input)}")
        return getattr(input, name)(*args, **kwargs)
    in_place_function.__name__ = in_place_function.__qualname__ = name
    in_place_function.__doc__ = f"``input.{name}(...)``: in place, as torch.{name}."
    return in_place_function


def install(namespace):
    for name, method in _METHODS.items():
        if not hasattr(Tensor, name):
            setattr(Tensor, name, method)
    for name in _FUNCTION_FORMS:
        if name not in namespace and hasattr(Tensor, name):
            namespace[name] = _function_form(name)
