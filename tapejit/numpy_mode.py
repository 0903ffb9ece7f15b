"""NumPy mode: what ``tj.grad`` and ``tj.value_and_grad`` hand the differentiated function.

Inside ``tj.grad(f)`` the arguments, and everything computed from them, are
``TracedArray``s: NumPy-facing arrays, each holding one tapejit ``Tensor`` (slot ``_t``)
on the thread's tape, as HIPS autograd's ``ArrayBox`` holds a node and JAX's tracers hold
an abstract value.  There is no second engine: every operation records the registry's ops
through the ``Tensor`` API, and the gradient is the same compiled sweep.  What the wrapper
changes is the *semantics* the function sees, which are NumPy's, not torch's:

* attributes: ``shape`` (a tuple), ``ndim``, ``size`` (an int), ``dtype`` (a NumPy dtype:
  ``x.dtype == np.float64``), ``T``, ``real``/``imag``; ``len()``, iteration over the
  first axis; methods named as ndarray's, with NumPy's signatures (``sum(axis=,
  keepdims=)``, ``std(ddof=0)``, ``reshape(order='F')``, ``astype``, ``ravel``, ...).
* operators and ufuncs with NumPy's type promotion (NEP 50: Python scalars are weak,
  NumPy scalars and 0-d arrays are not; int with float gives float64, ``int / int``
  gives float64), NumPy's broadcasting errors, ``%``, ``//``, ``divmod``.
* NumPy's indexing, computed by NumPy itself: ``np.arange(x.size).reshape(x.shape)[key]``
  gives the flat source position of every element of the result (advanced-index
  placement, boolean masks, negative steps, duplicates, errors: all exactly NumPy's), and
  one gather of the flattened tensor takes them; its gradient scatters back, summing
  duplicates.  Basic keys (ints, slices with positive steps, ``None``, ``...``), where
  NumPy and torch agree, go straight to the tensor's own views.  Movement functions
  (``np.roll``, ``np.flip``, ``np.repeat``, ``np.tile``, ``np.diag``, the ``split``
  family, ``np.sort``, ...) are NumPy's own, applied to those positions the same way.
* comparisons, ``np.isnan`` and friends give boolean traced arrays (no gradient), usable
  in ``np.where`` and as masks.  Integer and boolean traced arrays hold values NumPy
  computed (nothing to differentiate); ``astype(int)`` is such a value (no gradient, as
  in NumPy-based autodiff: the derivative of a cast to integers is zero almost everywhere).
* reading a traced value into Python -- ``float()``, ``int()``, ``bool()`` (``if x > 0:``),
  ``operator.index``, ``math.*`` (which call ``float()``), ``.item()``, ``.tolist()`` --
  raises a ``TypeError`` naming the call: the gradient would silently miss whatever
  depends on the Python number.  This holds for boolean arrays too, so a function that
  runs eagerly also compiles (``tj.compile`` could not replay a branch on a value).

Packing traced values with NumPy.  ``np.array``, ``np.asarray`` and NumPy's Python code
that calls them (``np.mean`` of a list, ``np.r_``, ``np.append`` of lists, ...) do not
dispatch through ``__array_function__``; NumPy calls ``__array__`` on each element, and
whatever that returns becomes plain data.  Measured on NumPy 2.4, the options are:

1. an ``ndarray`` subclass holding the values, with the tape in an attribute: ``np.array
   ([x, 2 * x])`` copies the values into a plain array and the graph is silently lost
   (subclass instances are read through the buffer, not ``__array__``), and every value
   would have to be computed eagerly to fill the buffer.  Rejected: silently wrong.
2. ``__array__`` raising (JAX): safe, but ``np.array([x, 2 * x])`` is common NumPy.
3. ``__array__`` returning an *object* array of 0-d traced arrays (what this module does):
   ``np.array([x, 2 * x])`` is then an object array of the right shape whose elements are
   traced, NumPy's object loops call their Python operators (``+``, ``*``) and the
   ufunc-named methods object loops look up (``x.exp()``, ``x.sqrt()``,
   ``x.conjugate()``), so sums, means, norms and products of lists stay on the tape, and
   an object array reaching a traced operation (an operator, a ufunc, a NumPy function)
   is packed back into one tensor (a ``stack``).  NumPy's ``_mean``/``_var`` end with
   ``ret.dtype.type(ret / n)`` for results that have a dtype, a ``float()``; for those two
   callers only (checked by the calling frame's module), a traced array answers like a
   Python float, without ``dtype``, and NumPy takes its ``ret / n`` branch instead (were
   NumPy to change that code, the ``float()`` would raise: loud, never wrong).  A 0-d
   traced array is stored in the object array as itself.
   Object arrays compute element by element in Python: fine for the short lists numeric
   code builds, slow for large arrays (``np.asarray(x)`` of a million-element traced
   array), so those warn.  ``__array__`` with an integer or boolean dtype
   (``np.int64(x)``, ``np.asarray(x, dtype=int)``) gives the values (no gradient, as
   ``astype``); with a float dtype it refuses, as ``float()`` does.

Arrays are values here: a traced array is never written through a view.  ``x[i] = v``
raises (as in JAX; build the array with ``np.where`` or ``np.concatenate``), and an
in-place operator (``x += y``) rebinds the array it is applied to, which NumPy would do
too unless the array shares memory with another: an in-place operator on a traced array
that is a view, or that views were taken of (slicing, ``reshape``, ``.T``, ...), raises
instead of silently leaving the other one unchanged.  The arguments the caller passed
are never written.

Some results are computed from values NumPy reads: the quotient ``floor(x / y)`` of ``%``
(a constant in ``x - floor(x / y) * y``), ``//``, comparisons and masks, ``np.sort``'s
order, integer casts.  Eagerly that is exact; ``tj.compile`` refuses such a read, as it
refuses any (a replay would freeze it), until the registry has ops for them.

tapejit's torch-style functions take tensors: ``to_tensor(x)`` is the tensor a traced
array holds (same graph), ``from_tensor(t)`` wraps a tensor back; ``f`` may also return
a tensor.
"""
import functools
import inspect
import numbers
import operator
import sys
import types
import warnings

import numpy as np

from tapejit import dtypes, linalg as _linalg, special as _special
from tapejit import numpy_interop as _interop
from tapejit.api import Names, front_ends
from tapejit.ops.movement import CLONE as _COPY
from tapejit.ops.views import _copy_range, _plain
from tapejit.tape import state as _state
from tapejit.tensor import Tensor, _concrete

try:
    from numpy._core import _methods as _np_methods
except ImportError:   # NumPy 1.x
    from numpy.core import _methods as _np_methods

_new = object.__new__
_NUMPY_REDUCTIONS = _np_methods.__dict__   # see the module docstring: mean/var of object arrays

_NP_OF = {dtypes.float64: np.dtype(np.float64), dtypes.float32: np.dtype(np.float32),
          dtypes.int64: np.dtype(np.int64), dtypes.bool_: np.dtype(np.bool_)}
_TJ_OF = {v: k for k, v in _NP_OF.items()}
_F64 = np.dtype(np.float64)
_F32 = np.dtype(np.float32)

# Past this many elements, ``np.asarray`` of a traced array (an object array, computed
# element by element in Python) warns.
OBJECT_ARRAY_WARN = 10_000


class TracedArray:
    """A NumPy-semantics array inside ``tj.grad``; see the module docstring."""

    __slots__ = ("_t", "_shared")
    __hash__ = None   # as ndarray: mutable semantics, elementwise ==
    # Appended by tapejit.api to the TypeError of a torch-style function given a traced array.
    not_a_tensor_hint = (
        "tj.grad and tj.value_and_grad hand the function NumPy-mode traced arrays, which behave "
        "as NumPy arrays, not tapejit tensors. Use NumPy (np.tanh(x), x.sum(axis=0)), or "
        "tapejit.numpy_mode.to_tensor(x) for the tensor it holds (same graph)")

    # ---- metadata --------------------------------------------------------------------------

    @property
    def shape(self):
        return self._t._shape

    @property
    def ndim(self):
        return len(self._t._shape)

    @property
    def size(self):
        return self._t._numel

    @property
    def dtype(self):
        if sys._getframe(1).f_globals is _NUMPY_REDUCTIONS:
            # NumPy's mean/var of an object array: answer as the Python float it expects
            # there (module docstring), so it divides instead of calling float().
            raise AttributeError("dtype")
        return _NP_OF[self._t._dtype]

    @property
    def itemsize(self):
        return self._t._dtype.itemsize

    @property
    def nbytes(self):
        return self._t._dtype.itemsize * self._t._numel

    @property
    def T(self):
        return self.transpose()

    @property
    def mT(self):
        if self.ndim < 2:
            raise ValueError("matrix transpose with ndim < 2 is undefined")
        return self.swapaxes(-1, -2)

    @property
    def real(self):
        return self

    @property
    def imag(self):
        return _constant(np.zeros(self._t._shape, _NP_OF[self._t._dtype]))

    def __len__(self):
        shape = self._t._shape
        if not shape:
            raise TypeError("len() of unsized object")
        return shape[0]

    def __iter__(self):
        shape = self._t._shape
        if not shape:
            raise TypeError("iteration over a 0-d array")
        return iter([self[i] for i in range(shape[0])])

    # ---- reading the value into Python: refused ------------------------------------------

    def __float__(self):
        raise _read_error("float()", " (math.* functions and np.float64(x) call float() too, and "
                                     "NumPy calls it to store a traced value into a float array, as "
                                     "in out[i] = x)")

    def __int__(self):
        raise _read_error("int()")

    def __complex__(self):
        raise _read_error("complex()")

    def __index__(self):
        raise _read_error("using a traced array as a Python integer (operator.index)")

    def __bool__(self):
        raise _read_error("bool()", " (an `if`, `while`, `and`, `or` or `not` on it, or NumPy "
                                    "comparing the elements of an object array, as np.max of a "
                                    "list of traced values does: np.stack them first)")

    def item(self, *args):
        raise _read_error("x.item()")

    def tolist(self):
        raise _read_error("x.tolist()")

    def __array__(self, dtype=None, copy=None):
        _refuse_tensor_api(sys._getframe(1))
        t = self._t
        want = None if dtype is None else np.dtype(dtype)
        if want is not None and want.kind in "biu" or want is None and not t._dtype.is_floating_point:
            # An integer or boolean value has no gradient to lose (np.int64(x), masks).
            v = np.array(t._value())
            return v if want is None else v.astype(want)
        if want is not None and want != object:
            raise _read_error(f"converting a traced array to a NumPy {want} array (np.asarray(x, "
                              f"dtype=...), np.float64(x), ...)")
        scipy_name = _scipy_caller(sys._getframe(1))
        if scipy_name is not None:   # SciPy's code on an object array fails or loses the gradient
            raise _scipy_error(scipy_name, "np.asarray")
        return _object_array(self)

    # ---- printing ----------------------------------------------------------------------------

    def __repr__(self):
        t = self._t
        if _state.trace is not None:   # tj.compile: its value is not known in Python
            return f"TracedArray(shape={t._shape}, dtype={_NP_OF[t._dtype]})"
        text = repr(np.array(t._value()))
        return "TracedArray" + text[len("array"):] if text.startswith("array") else f"TracedArray({text})"

    def __str__(self):
        if _state.trace is not None:
            return repr(self)
        return str(np.array(self._t._value()))

    def __format__(self, spec):
        if not spec:
            return str(self)
        return format(np.array(self._t._value()), spec) if _state.trace is None else repr(self)

    # ---- operators -------------------------------------------------------------------------

    def __add__(self, other):
        t = self._t
        if type(other) is TracedArray:
            o = other._t
            if o._dtype is t._dtype and o._shape == t._shape and t._dtype.is_floating_point:
                return _wrap(t + o)
        elif (type(other) is float or type(other) is int) and t._dtype.is_floating_point:
            return _wrap(t + other)
        return _binary(np.add, self, other)

    def __radd__(self, other):
        t = self._t
        if (type(other) is float or type(other) is int) and t._dtype.is_floating_point:
            return _wrap(t + other)
        return _binary(np.add, other, self)

    def __sub__(self, other):
        t = self._t
        if type(other) is TracedArray:
            o = other._t
            if o._dtype is t._dtype and o._shape == t._shape and t._dtype.is_floating_point:
                return _wrap(t - o)
        elif (type(other) is float or type(other) is int) and t._dtype.is_floating_point:
            return _wrap(t - other)
        return _binary(np.subtract, self, other)

    def __rsub__(self, other):
        t = self._t
        if (type(other) is float or type(other) is int) and t._dtype.is_floating_point:
            return _wrap(other - t)
        return _binary(np.subtract, other, self)

    def __mul__(self, other):
        t = self._t
        if type(other) is TracedArray:
            o = other._t
            if o._dtype is t._dtype and o._shape == t._shape and t._dtype.is_floating_point:
                return _wrap(t * o)
        elif (type(other) is float or type(other) is int) and t._dtype.is_floating_point:
            return _wrap(t * other)
        return _binary(np.multiply, self, other)

    def __rmul__(self, other):
        t = self._t
        if (type(other) is float or type(other) is int) and t._dtype.is_floating_point:
            return _wrap(t * other)
        return _binary(np.multiply, other, self)

    def __truediv__(self, other):
        t = self._t
        if type(other) is TracedArray:
            o = other._t
            if o._dtype is t._dtype and o._shape == t._shape and t._dtype.is_floating_point:
                return _wrap(t / o)
        elif (type(other) is float or type(other) is int) and t._dtype.is_floating_point:
            return _wrap(t / other)
        return _binary(np.true_divide, self, other)

    def __rtruediv__(self, other):
        t = self._t
        if (type(other) is float or type(other) is int) and t._dtype.is_floating_point:
            return _wrap(other / t)
        return _binary(np.true_divide, other, self)

    def __pow__(self, other, modulo=None):
        if modulo is not None:
            return NotImplemented
        t = self._t
        if (type(other) is int or type(other) is float) and t._dtype.is_floating_point:
            return _wrap(t ** other)
        return _binary(np.power, self, other)

    def __rpow__(self, other, modulo=None):
        if modulo is not None:
            return NotImplemented
        return _binary(np.power, other, self)

    def __matmul__(self, other):
        return _binary(np.matmul, self, other)

    def __rmatmul__(self, other):
        return _binary(np.matmul, other, self)

    def __mod__(self, other):
        return _binary(np.remainder, self, other)

    def __rmod__(self, other):
        return _binary(np.remainder, other, self)

    def __floordiv__(self, other):
        return _binary(np.floor_divide, self, other)

    def __rfloordiv__(self, other):
        return _binary(np.floor_divide, other, self)

    def __divmod__(self, other):
        return _binary(np.floor_divide, self, other), _binary(np.remainder, self, other)

    def __rdivmod__(self, other):
        return _binary(np.floor_divide, other, self), _binary(np.remainder, other, self)

    def __neg__(self):
        t = self._t
        if t._dtype.is_floating_point:
            return _wrap(-t)
        return _unary(np.negative, self)

    def __pos__(self):
        return _wrap(self._t)

    def __abs__(self):
        return _unary(np.absolute, self)

    def __invert__(self):
        return _unary(np.invert, self)

    def __and__(self, other):
        return _binary(np.bitwise_and, self, other)

    def __rand__(self, other):
        return _binary(np.bitwise_and, other, self)

    def __or__(self, other):
        return _binary(np.bitwise_or, self, other)

    def __ror__(self, other):
        return _binary(np.bitwise_or, other, self)

    def __xor__(self, other):
        return _binary(np.bitwise_xor, self, other)

    def __rxor__(self, other):
        return _binary(np.bitwise_xor, other, self)

    def __lt__(self, other):
        return _binary(np.less, self, other)

    def __le__(self, other):
        return _binary(np.less_equal, self, other)

    def __gt__(self, other):
        return _binary(np.greater, self, other)

    def __ge__(self, other):
        return _binary(np.greater_equal, self, other)

    def __eq__(self, other):
        return _binary(np.equal, self, other)

    def __ne__(self, other):
        return _binary(np.not_equal, self, other)

    # In-place operators: see the module docstring (values, never written through views).
    def __iadd__(self, other):
        return _inplace(self, np.add, other)

    def __isub__(self, other):
        return _inplace(self, np.subtract, other)

    def __imul__(self, other):
        return _inplace(self, np.multiply, other)

    def __itruediv__(self, other):
        return _inplace(self, np.true_divide, other)

    def __ipow__(self, other):
        return _inplace(self, np.power, other)

    def __imod__(self, other):
        return _inplace(self, np.remainder, other)

    def __ifloordiv__(self, other):
        return _inplace(self, np.floor_divide, other)

    def __imatmul__(self, other):
        return _inplace(self, np.matmul, other)

    def __getattr__(self, name):
        # Only for names ndarray lacks and tapejit's Tensor has: torch-style code (x.detach(),
        # tj.tanh(x) reading x._dtype) meeting NumPy mode.  An AttributeError, so that
        # hasattr() probes still answer False.
        if hasattr(Tensor, name) and not hasattr(np.ndarray, name):
            raise AttributeError(f"'TracedArray' object has no attribute {name!r}: {self.not_a_tensor_hint}")
        raise AttributeError(f"'TracedArray' object has no attribute {name!r}")

    def __floor__(self):
        return _unary(np.floor, self)

    def __ceil__(self):
        return _unary(np.ceil, self)

    def __trunc__(self):
        return _unary(np.trunc, self)

    def __round__(self, ndigits=None):
        return _on_values(np.round, (self,), {"decimals": ndigits or 0})

    def __setitem__(self, key, value):
        raise TypeError(
            "tapejit: a traced array cannot be assigned to (x[...] = value) inside tj.grad: "
            "traced arrays are values, and NumPy would also write through every view of x. "
            "Build the new array instead: np.where(mask, value, x), np.concatenate of the "
            "pieces, or np.array/np.stack of a list")

    # ---- NumPy's protocols -----------------------------------------------------------------

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return _array_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return _array_function(func, types, args, kwargs)

    # ---- indexing ----------------------------------------------------------------------------

    def __getitem__(self, key):
        t = self._t
        kind = type(key)
        try:   # basic keys: the tensor's own views (an IndexError: NumPy's message, below)
            if kind is slice:
                step = key.step
                if t._shape and (step is None or type(step) is int and step > 0):
                    if (step is None or step == 1) and not _plain(t):
                        return _view(self, _row_range(t, key))
                    return _view(self, t[key])
            elif kind is int:
                if len(t._shape) > 1:
                    return _view(self, t[key])
                if t._shape:
                    return _wrap(t[key])
            elif kind is tuple and _basic(key, len(t._shape)):
                r = t[key]
                return _view(self, r) if r._shape or any(k is None or k is Ellipsis or type(k) is slice
                                                           for k in key) else _wrap(r)
        except IndexError:
            pass
        return _advanced_getitem(self, key)

    # ---- methods ---------------------------------------------------------------------------

    def copy(self, order="C"):
        return _wrap(self._t)

    def astype(self, dtype, order="K", casting="unsafe", subok=True, copy=True):
        return _astype(self, dtype, copy)

    def reshape(self, *shape, order="C", copy=None):
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        return _reshape(self, tuple(int(s) for s in shape), order)

    def ravel(self, order="C"):
        return _reshape(self, (-1,), order)

    def flatten(self, order="C"):
        r = _reshape(self, (-1,), order)
        r._shared = False   # a copy
        return r

    def transpose(self, *axes):
        if len(axes) == 1 and (axes[0] is None or not isinstance(axes[0], (int, np.integer))):
            axes = axes[0]
        return _transpose(self, axes or None)

    def swapaxes(self, axis1, axis2):
        return _np_swapaxes(self, axis1, axis2)

    def squeeze(self, axis=None):
        return _squeeze(self, axis)

    def sum(self, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
        t = self._t
        if (axis is None and dtype is None and out is None and keepdims is False and initial is None
                and where is None and t._dtype.is_floating_point):
            return _wrap(t.sum())   # the common case, without the general path's bookkeeping
        return _reduce(np.sum, _interop._sum, self, axis=axis, dtype=dtype, out=out, keepdims=keepdims,
                       initial=initial, where=where)

    def mean(self, axis=None, dtype=None, out=None, keepdims=False, where=None):
        t = self._t
        if (axis is None and dtype is None and out is None and keepdims is False and where is None
                and t._dtype.is_floating_point):
            return _wrap(t.mean())
        return _reduce(np.mean, _interop._mean, self, axis=axis, dtype=dtype, out=out, keepdims=keepdims,
                       where=where)

    def prod(self, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
        return _reduce(np.prod, _interop._prod, self, axis=axis, dtype=dtype, out=out, keepdims=keepdims,
                       initial=initial, where=where)

    def max(self, axis=None, out=None, keepdims=False, initial=None, where=None):
        return _reduce(np.max, _interop._max, self, axis=axis, out=out, keepdims=keepdims, initial=initial,
                       where=where)

    def min(self, axis=None, out=None, keepdims=False, initial=None, where=None):
        return _reduce(np.min, _interop._min, self, axis=axis, out=out, keepdims=keepdims, initial=initial,
                       where=where)

    def var(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False, where=None, mean=None,
            correction=None):
        return _reduce(np.var, _interop._var, self, axis=axis, dtype=dtype, out=out, ddof=ddof,
                       keepdims=keepdims, where=where, mean=mean, correction=correction)

    def std(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False, where=None, mean=None,
            correction=None):
        return _reduce(np.std, _interop._std, self, axis=axis, dtype=dtype, out=out, ddof=ddof,
                       keepdims=keepdims, where=where, mean=mean, correction=correction)

    def cumsum(self, axis=None, dtype=None, out=None):
        return _cumulative(np.cumsum, self, axis, dtype, out)

    def cumprod(self, axis=None, dtype=None, out=None):
        return _cumulative(np.cumprod, self, axis, dtype, out)

    def argmax(self, axis=None, out=None, keepdims=False):
        return _on_values(np.argmax, (self,), {"axis": axis, "out": out, "keepdims": keepdims})

    def argmin(self, axis=None, out=None, keepdims=False):
        return _on_values(np.argmin, (self,), {"axis": axis, "out": out, "keepdims": keepdims})

    def argsort(self, axis=-1, kind=None, order=None):
        return _on_values(np.argsort, (self,), {"axis": axis, "kind": kind, "order": order})

    def all(self, axis=None, out=None, keepdims=False, where=True):
        return _on_values(np.all, (self,), {"axis": axis, "out": out, "keepdims": keepdims, "where": where})

    def any(self, axis=None, out=None, keepdims=False, where=True):
        return _on_values(np.any, (self,), {"axis": axis, "out": out, "keepdims": keepdims, "where": where})

    def nonzero(self):
        return _on_values(np.nonzero, (self,), {})

    def round(self, decimals=0, out=None):
        return _on_values(np.round, (self,), {"decimals": decimals, "out": out})

    def dot(self, b, out=None):
        return _dot(self, b, out)

    def clip(self, min=None, max=None, out=None, **kwargs):
        return _clip(self, min, max, out, **kwargs)

    def conjugate(self):
        return self

    conj = conjugate

    def trace(self, offset=0, axis1=0, axis2=1, dtype=None, out=None):
        return _FUNCTIONS[np.trace](self, offset, axis1, axis2, dtype, out)

    def diagonal(self, offset=0, axis1=0, axis2=1):
        return _by_positions(np.diagonal, self, offset, axis1, axis2)

    def repeat(self, repeats, axis=None):
        return _by_positions(np.repeat, self, repeats, axis)

    def take(self, indices, axis=None, out=None, mode="raise"):
        return _by_positions(np.take, self, _index_values(indices), axis, out, mode)


def _ufunc_method(ufunc):
    def method(self):
        return _unary(ufunc, self)
    method.__name__ = method.__qualname__ = ufunc.__name__
    method.__doc__ = (f"numpy.{ufunc.__name__}(self): the method NumPy's loops over object arrays "
                      f"call on each element (np.array([x, 2 * x]) is one).")
    return method


def _row_range(t, key):
    """``t[a:b]`` as a copy of that range of rows: traced arrays are never written in
    place (``_inplace`` rebinds), so the tensor needs none of a torch view's bookkeeping
    (the hot path of ``x[1:] - x[:-1]``)."""
    n0 = t._shape[0]
    lo, hi, _ = key.indices(n0)
    rows = hi - lo if hi > lo else 0
    inner = t._numel // n0 if n0 else 0
    return _copy_range(_COPY, t, lo * inner if rows else 0, rows * inner, (rows,) + t._shape[1:])


def _wrap(t):
    a = _new(TracedArray)
    a._t = t
    a._shared = False
    return a


def _view(base, t):
    """A result NumPy returns as a view of ``base``: both now share memory in NumPy's model."""
    a = _new(TracedArray)
    a._t = t
    a._shared = True
    base._shared = True
    return a


def _constant(value):
    """A traced array of a value NumPy computed (no gradient)."""
    v = np.asarray(value)
    if v.dtype not in _TJ_OF:
        if v.dtype.kind in "iu":
            v = v.astype(np.int64)
        elif v.dtype.kind == "f" and v.dtype.itemsize < 4:
            v = v.astype(np.float32)
        else:
            return value   # complex, strings, objects: not a traced array
    return _wrap(_concrete(np.array(v, order="C")))


def to_tensor(x):
    """The tapejit ``Tensor`` a traced array holds (same graph), for tapejit's torch-style
    functions inside ``tj.grad``; tensors pass through; NumPy data becomes a constant."""
    if type(x) is TracedArray:
        return x._t
    if isinstance(x, Tensor):
        return x
    return _tensor_of(x)


def from_tensor(t):
    """A ``Tensor`` as a NumPy-mode traced array (same graph)."""
    if type(t) is TracedArray:
        return t
    if not isinstance(t, Tensor):
        raise TypeError(f"from_tensor: expected a tapejit Tensor, got {type(t).__name__}")
    return _wrap(t)


# ---- refusals --------------------------------------------------------------------------------

def _scipy_error(scipy_name, what):
    # SciPy's Python-level functions convert their arguments to ndarrays: no NumPy protocol
    # hands the call to NumPy mode (the few it intercepts are SCIPY_FUNCTIONS/SCIPY_METHODS).
    return TypeError(
        f"tapejit: {scipy_name} is not supported inside tj.grad/tj.value_and_grad (NumPy mode): "
        f"SciPy converts the traced array to a NumPy array ({what} on it), which would lose its "
        f"gradient. Write it with NumPy functions (np.max, np.exp, np.log, np.sum, ...), the "
        f"SciPy ufuncs NumPy mode differentiates (scipy.special.gammaln, digamma, erf, erfc, "
        f"erfinv, expit, logit, ndtr, xlogy, xlog1py) or the SciPy functions it intercepts "
        f"({', '.join(_SCIPY_SHORT_NAMES)})")


def _read_error(what, detail=""):
    scipy_name = _scipy_caller(sys._getframe(2))
    if scipy_name is not None:
        return _scipy_error(scipy_name, what)
    return TypeError(
        f"{what} reads the value of a traced array into Python inside tj.grad/tj.value_and_grad"
        f"{detail}: the gradient would silently miss everything computed from that Python "
        f"value. Keep the computation in NumPy: np.where(condition, a, b) instead of `if`, "
        f"np.sin instead of math.sin, np.stack or np.array([...]) instead of filling an array "
        f"element by element.")


def _scipy_caller(frame):
    """SciPy's public name of the SciPy function that called into ``frame`` (``scipy.special.
    logsumexp``, ``scipy.stats.norm.sf``): the outermost of the SciPy (and NumPy) frames
    from ``frame`` up, or ``None`` if the first frame outside NumPy is not SciPy's (a
    function ``scipy.optimize`` calls is the user's code, not SciPy's)."""
    found = None
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.startswith("scipy."):
            found = frame
        elif not module.startswith("numpy."):
            break
        frame = frame.f_back
    if found is None:
        return None
    parts = found.f_globals["__name__"].split(".")
    public = ".".join(p for p in parts[:2] if not p.startswith("_"))
    owner = found.f_locals.get("self")
    dist = getattr(owner, "name", None) if owner is not None else None
    if isinstance(dist, str):   # a scipy.stats distribution's method: norm.logpdf
        return f"{public}.{dist}.{found.f_code.co_name}"
    return f"{public}.{found.f_code.co_name}"


def _refuse_tensor_api(frame):
    """``__array__`` called by tapejit's own tensor code: a traced array passed to a
    torch-style tapejit function (``tj.tanh(x)``, ``tensor * x``)."""
    name = frame.f_globals.get("__name__", "")
    if name.startswith("tapejit.") and name != __name__:
        raise TypeError(
            "tapejit: a NumPy-mode traced array (what tj.grad hands the function) was passed to "
            "tapejit's torch-style tensor API. Use NumPy functions on it (np.tanh(x), x.sum(axis=0)), "
            "or convert explicitly: tapejit.numpy_mode.to_tensor(x) is its tensor (same graph) and "
            "from_tensor(t) wraps a tensor back.")


# ---- operands and promotion -----------------------------------------------------------------

def _contains_traced(x):
    if type(x) is TracedArray:
        return True
    if isinstance(x, (list, tuple)):
        return any(_contains_traced(e) for e in x)
    if isinstance(x, np.ndarray) and x.dtype == object:
        return any(_contains_traced(e) for e in x.flat)
    return False


def _cast(t, npdt):
    """Tensor ``t`` as NumPy float dtype ``npdt`` (a differentiable cast)."""
    dt = _TJ_OF[npdt]
    return t if t._dtype is dt else t.to(dt)


def _const_tensor(arr):
    """A NumPy array as a constant operand (float arrays stay live under tj.compile)."""
    from tapejit.recording import as_tensor_operand
    arr = np.asarray(arr)
    if arr.dtype not in _TJ_OF:
        if arr.dtype.kind in "iu":
            arr = arr.astype(np.int64)
        elif arr.dtype.kind == "f":
            arr = arr.astype(np.float64 if arr.dtype.itemsize > 4 else np.float32)
        elif arr.dtype == object:
            arr = np.array(arr.tolist())
            return _const_tensor(arr)
        else:
            raise TypeError(f"tapejit: a {arr.dtype} array cannot be used with traced arrays "
                            f"(they hold float32, float64, int64 and bool values)")
    if arr.dtype.kind == "f":
        return as_tensor_operand(arr)
    return _concrete(np.array(arr, order="C"))


def _tensor_of(x):
    """Any array-like as a tensor: traced parts keep their graph (object arrays and lists of
    traced values are packed with one ``stack``)."""
    if type(x) is TracedArray:
        return x._t
    if isinstance(x, Tensor):
        return x
    if isinstance(x, np.ndarray):
        if x.dtype == object and _contains_traced(x):
            return _pack(list(x.reshape(-1)), x.shape)
        return _const_tensor(x)
    if isinstance(x, (list, tuple)) and _contains_traced(x):
        return _pack_nested(x)
    if isinstance(x, complex):
        raise TypeError("tapejit: complex numbers are not supported by traced arrays")
    return _const_tensor(np.asarray(x))


def _pack_nested(seq):
    parts = [_tensor_of(e) for e in seq]
    shapes = {p._shape for p in parts}
    if len(shapes) > 1:
        raise ValueError(
            f"setting an array element with a sequence. The requested array has an inhomogeneous "
            f"shape after 1 dimensions. The detected shape was ({len(parts)},) + inhomogeneous part.")
    return _stack_promoted(parts, 0)


def _pack(items, shape):
    """The elements of an object array (traced 0-d arrays, numbers) as one tensor."""
    parts = []
    for e in items:
        if type(e) is TracedArray:
            if e._t._shape:
                raise ValueError(
                    f"tapejit: an object array holds a traced array of shape {e._t._shape} as one "
                    f"element; NumPy cannot compute with it as numbers. Use np.stack or "
                    f"np.concatenate to combine traced arrays")
            parts.append(e._t)
        elif isinstance(e, (numbers.Number, np.generic)) and not isinstance(e, complex):
            parts.append(_concrete(np.asarray(e, np.float64 if isinstance(e, float) else None)))
        elif isinstance(e, Tensor):
            parts.append(e)
        else:
            raise TypeError(f"tapejit: an object array holding a {type(e).__name__} cannot be "
                            f"used with traced arrays")
    if not parts:
        return _concrete(np.zeros(shape))
    return _stack_promoted(parts, 0).reshape(shape)


def _result_dtype(parts):
    """np.result_type of tensors (their NumPy dtypes)."""
    first = parts[0]._dtype
    if all(p._dtype is first for p in parts):
        return _NP_OF[first]
    return np.result_type(*[_NP_OF[p._dtype] for p in parts])


def _promoted(parts):
    """``parts`` (tensors) cast to their common NumPy dtype."""
    dt = _result_dtype(parts)
    if dt.kind == "f":
        return [_cast(p, dt) for p in parts]
    return [p if _NP_OF[p._dtype] == dt else _concrete(p._value().astype(dt)) for p in parts]


def _stack_promoted(parts, axis):
    tj = _tj()
    parts = _promoted(parts)
    if not parts[0]._dtype.is_floating_point:
        return _concrete(np.stack([p._value() for p in parts], axis))
    return tj.stack(parts, axis)


def _object_array(x):
    """``np.asarray(x)`` of a traced array: an object array of its 0-d elements."""
    t = x._t
    if not t._shape:
        out = np.empty((), object)
        out[()] = x
        return out
    n = t._numel
    if n > OBJECT_ARRAY_WARN:
        warnings.warn(
            f"tapejit: NumPy made an object array of a traced array of {n} elements (np.asarray, "
            f"np.array or a NumPy function that calls them): NumPy then computes element by "
            f"element in Python. Pass the traced array itself to NumPy functions, or combine "
            f"traced arrays with np.stack/np.concatenate", RuntimeWarning, stacklevel=3)
    flat = t.reshape(-1)
    out = np.empty(n, object)
    for i in range(n):
        out[i] = _wrap(flat[i])
    return out.reshape(t._shape)


# ---- ufuncs and operators ------------------------------------------------------------------------

# Python operators on float tensors of one dtype (an operand may be a Python scalar).
_FLOAT_OPS = {
    np.add: operator.add,
    np.subtract: operator.sub,
    np.multiply: operator.mul,
    np.true_divide: operator.truediv,
    np.power: operator.pow,
    np.matmul: operator.matmul,
}

_COMPARE = frozenset([np.equal, np.not_equal, np.less, np.less_equal, np.greater, np.greater_equal,
                      np.logical_and, np.logical_or, np.logical_xor, np.bitwise_and, np.bitwise_or,
                      np.bitwise_xor, np.left_shift, np.right_shift, np.gcd, np.lcm])


def _arith_operand(x):
    """An operand of a ufunc: a tensor, a Python scalar (weak in promotion, as NEP 50), or
    ``None`` when ``x`` is not an array-like NumPy would compute with."""
    if type(x) is TracedArray:
        return x._t
    if isinstance(x, Tensor):
        return x
    if isinstance(x, (bool, int, float)) and not isinstance(x, np.generic):
        return x
    if isinstance(x, (np.ndarray, np.generic, list, tuple)):
        return _tensor_of(x)
    if isinstance(x, complex):
        raise TypeError("tapejit: complex numbers are not supported by traced arrays")
    return None


def _promote_pair(a, b, ufunc):
    """NumPy's result dtype for ``ufunc(a, b)`` (Python scalars weak, as NEP 50)."""
    da = a if not isinstance(a, Tensor) else _NP_OF[a._dtype]
    db = b if not isinstance(b, Tensor) else _NP_OF[b._dtype]
    dt = np.result_type(da, db)
    if ufunc is np.true_divide and dt.kind in "biu":
        dt = _F64
    return dt


def _check_broadcast(a, b):
    sa = a._shape if isinstance(a, Tensor) else ()
    sb = b._shape if isinstance(b, Tensor) else ()
    if sa != sb:
        try:
            np.broadcast_shapes(sa, sb)
        except ValueError:
            raise ValueError(f"operands could not be broadcast together with shapes "
                             f"{_shape_text(sa)} {_shape_text(sb)}") from None


def _shape_text(shape):
    return "(" + ",".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def _binary(ufunc, a, b):
    ta, tb = _arith_operand(a), _arith_operand(b)
    if ta is None or tb is None:
        return NotImplemented
    if ufunc is np.matmul:
        for side, t in (("0", ta), ("1", tb)):
            if not isinstance(t, Tensor) or not t._shape:
                raise ValueError(f"matmul: Input operand {side} does not have enough dimensions "
                                 f"(has 0, gufunc core with signature (n?,k),(k,m?)->(n?,m?) requires 1)")
    else:
        _check_broadcast(ta, tb)
    dt = _promote_pair(ta, tb, ufunc)
    if ufunc in _COMPARE or dt.kind != "f" or ufunc is np.floor_divide:
        return _constant(_values_of(ufunc, ta, tb))
    if dt not in (_F64, _F32):
        raise TypeError(f"tapejit: traced arrays compute in float32 or float64, not {dt}")
    if isinstance(ta, Tensor):
        ta = _cast(ta, dt)
    if isinstance(tb, Tensor):
        tb = _cast(tb, dt)
    op = _FLOAT_OPS.get(ufunc)
    if op is not None:
        return _wrap(op(ta, tb))
    if ufunc is np.remainder:
        return _remainder(np.remainder, np.floor_divide, ta, tb, dt)
    if ufunc is np.fmod:
        return _remainder(np.fmod, _trunc_divide, ta, tb, dt)
    fn = _BINARY_FLOAT.get(ufunc) or _scipy_ufuncs().get(ufunc)
    if fn is None:
        raise _interop._unsupported(_ufunc_name(ufunc))
    if not isinstance(ta, Tensor):
        ta = _concrete(np.asarray(ta, dt))
    if not isinstance(tb, Tensor):
        tb = _concrete(np.asarray(tb, dt))
    return _wrap(fn(ta, tb))


def _values_of(ufunc, *operands):
    vals = [t._value() if isinstance(t, Tensor) else t for t in operands]
    with np.errstate(all="ignore"):
        return ufunc(*vals)


def _trunc_divide(a, b):
    return np.trunc(np.true_divide(a, b))


def _remainder(value_fn, quotient_fn, a, b, dt):
    """``a - q * b`` with ``q = floor(a / b)`` (or ``trunc`` for fmod) a constant: the
    gradient is ``(1, -q)``; a constant correction gives exactly NumPy's value."""
    if isinstance(a, Tensor):
        a = _cast(a, dt)
    if isinstance(b, Tensor):
        b = _cast(b, dt)
    va = a._value() if isinstance(a, Tensor) else a
    vb = b._value() if isinstance(b, Tensor) else b
    with np.errstate(all="ignore"):
        q = np.asarray(quotient_fn(va, vb), dt)
        exact = np.asarray(value_fn(va, vb), dt)
        rest = exact - (va - q * vb)
    qa = _concrete(q)
    if not isinstance(a, Tensor):
        a = _concrete(np.asarray(a, dt))
    r = a - qa * b
    if np.any(rest != 0) or np.isnan(rest).any():
        r = r + _concrete(np.asarray(rest, dt))
    return _wrap(r)


_TJ = Names(front_ends, linalg=_linalg, special=_special)


def _tj():
    return _TJ


def _copysign(a, b):
    sign = _concrete(np.where(np.signbit(b._value()), -1.0, 1.0).astype(_NP_OF[a._dtype]))
    return a.abs() * sign


# The registry's ops (tapejit/ops/special.py): each with its own derivative, exact at the
# points where a composition of elementary ops is not (arcsinh at 0, hypot at (0, 0)).
_BINARY_FLOAT = {
    np.maximum: lambda a, b: _tj().maximum(a, b),
    np.minimum: lambda a, b: _tj().minimum(a, b),
    np.fmax: lambda a, b: _tj().fmax(a, b),
    np.fmin: lambda a, b: _tj().fmin(a, b),
    np.logaddexp: _interop._logaddexp,
    np.logaddexp2: lambda a, b: _tj().logaddexp2(a, b),
    np.hypot: lambda a, b: _tj().hypot(a, b),
    np.arctan2: lambda a, b: _tj().atan2(a, b),
    np.copysign: _copysign,
}

_DEG = float(np.pi / 180.0)

_UNARY_FLOAT = dict(_interop._UNARY)   # with the registry's (np.arcsin: asin, ...)
_UNARY_FLOAT.update({
    np.deg2rad: lambda x: x * _DEG,
    np.radians: lambda x: x * _DEG,
    np.rad2deg: lambda x: x * (1.0 / _DEG),
    np.degrees: lambda x: x * (1.0 / _DEG),
    np.conjugate: lambda x: x,
    np.fabs: lambda x: x.abs(),
    np.cbrt: lambda x: x.sign() * x.abs() ** (1.0 / 3.0),
})


def _scipy_ufuncs():
    """SciPy's ufuncs NumPy mode differentiates (registry ops), once SciPy is imported: a
    SciPy ufunc reaching ``__array_ufunc__`` means the caller has imported it."""
    global _SCIPY_UFUNCS
    if _SCIPY_UFUNCS is None:
        special = sys.modules.get("scipy.special")
        if special is None:
            return {}
        tj = _tj()
        _SCIPY_UFUNCS = {
            special.gammaln: tj.special.gammaln,
            special.psi: tj.special.digamma,   # scipy.special.digamma is psi
            special.erf: tj.special.erf,
            special.erfc: tj.special.erfc,
            special.erfinv: tj.special.erfinv,
            special.expit: tj.special.expit,
            special.logit: tj.special.logit,
            special.ndtr: tj.special.ndtr,
            special.exp2: tj.special.exp2,
            special.expm1: tj.special.expm1,
            special.log1p: tj.special.log1p,
            special.xlogy: tj.special.xlogy,
            special.xlog1py: tj.special.xlog1py,
        }
    return _SCIPY_UFUNCS


_SCIPY_UFUNCS = None


def _ufunc_name(ufunc):
    """``numpy.arcsin``, or SciPy's name for a SciPy ufunc (``scipy.special.gammaln``)."""
    name = ufunc.__name__
    if getattr(np, name, None) is ufunc:
        return f"numpy.{name}"
    special = sys.modules.get("scipy.special")
    if special is not None and getattr(special, name, None) is ufunc:
        return f"scipy.special.{name}"
    return f"numpy.{name}"


for _u in (*_UNARY_FLOAT, np.rint):
    if _u.__name__ not in ("negative", "positive", "absolute", "square", "reciprocal", "sign", "isnan",
                           "isinf", "isfinite", "logical_not", "conjugate"):
        setattr(TracedArray, _u.__name__, _ufunc_method(_u))

# Piecewise-constant ufuncs: their value, and a zero gradient (NumPy-based autodiff's too).
_STEP = frozenset([np.floor, np.ceil, np.trunc, np.rint, np.signbit, np.spacing])
_VALUE_ONLY = frozenset([np.isnan, np.isinf, np.isfinite, np.logical_not, np.invert, np.isneginf,
                         np.isposinf])


def _unary(ufunc, x):
    t = _arith_operand(x)
    if t is None:
        return NotImplemented
    if ufunc in _VALUE_ONLY or ufunc in _STEP:
        return _constant(_values_of(ufunc, t))
    if not t._dtype.is_floating_point:
        if ufunc in (np.negative, np.positive, np.absolute, np.sign, np.square):
            return _constant(_values_of(ufunc, t))   # integer in, integer out
        t = _cast(t, _F64)
    if ufunc is np.sign:
        return _wrap(t.sign())
    fn = _UNARY_FLOAT.get(ufunc) or _scipy_ufuncs().get(ufunc)
    if fn is None:
        raise _interop._unsupported(_ufunc_name(ufunc))
    return _wrap(fn(t))


def _inplace(x, ufunc, other):
    if x._shared:
        raise TypeError(
            f"tapejit: an in-place operator ({ufunc.__name__}) on a traced array that shares memory "
            f"with another (a view made by slicing, reshape, .T, ..., or an array such views were "
            f"made of): NumPy would change both, and tapejit's traced arrays are values. Write "
            f"x = x + y (a new array) instead")
    r = _binary(ufunc, x, other)
    if r is NotImplemented:
        return NotImplemented
    t, rt = x._t, r._t
    if rt._shape != t._shape:
        raise ValueError(f"non-broadcastable output operand with shape {_shape_text(t._shape)} doesn't "
                         f"match the broadcast shape {_shape_text(rt._shape)}")
    if rt._dtype is not t._dtype:
        src, dst = _NP_OF[rt._dtype], _NP_OF[t._dtype]
        if not np.can_cast(src, dst, "same_kind"):
            raise TypeError(f"Cannot cast ufunc '{ufunc.__name__}' output from {src!r} to {dst!r} with "
                            f"casting rule 'same_kind'")
        rt = _cast(rt, dst) if dst.kind == "f" else _concrete(rt._value().astype(dst))
    x._t = rt
    return x


def _array_ufunc(ufunc, method, inputs, kwargs):
    name = _ufunc_name(ufunc)
    out = kwargs.pop("out", None)
    if out is not None and out is not Ellipsis:
        raise _interop._unsupported(f"{name} with out=", " (in-place output)")
    dtype = kwargs.pop("dtype", None)
    kwargs.pop("casting", None)
    kwargs.pop("subok", None)
    kwargs.pop("order", None)
    if kwargs.get("where", True) is True:
        kwargs.pop("where", None)
    if method == "__call__":
        if kwargs:
            raise _interop._unsupported(f"{name} with {', '.join(sorted(kwargs))}=")
        if ufunc.nin == 1 and ufunc.nout == 1:
            result = _unary(ufunc, inputs[0])
        elif ufunc is np.divmod:
            return (_binary(np.floor_divide, *inputs), _binary(np.remainder, *inputs))
        elif ufunc.nin == 2 and ufunc.nout == 1:
            result = _binary(ufunc, *inputs)
        else:
            raise _interop._unsupported(name)
        if result is NotImplemented:
            raise _interop._unsupported(name, f" for operands of type {', '.join(type(i).__name__ for i in inputs)}")
        return result if dtype is None else _astype(result, dtype, False)
    if method == "reduce" and ufunc in _interop._REDUCE:
        unknown = [k for k in kwargs if k not in ("axis", "keepdims")]
        if unknown:
            raise _interop._unsupported(f"{name}.reduce with {', '.join(unknown)}=")
        t = _tensor_of(inputs[0])
        if dtype is not None:
            t = _tensor_of(_astype(_wrap(t), dtype, False))
        if not t._dtype.is_floating_point:
            return _on_values(getattr(ufunc, "reduce"), (_wrap(t),), kwargs)
        axis = kwargs.get("axis", 0)
        return _wrap(_interop._REDUCE[ufunc](t, axis, bool(kwargs.get("keepdims", False))))
    if method == "accumulate" and ufunc in (np.add, np.multiply) and not kwargs.keys() - {"axis"}:
        fn = np.cumsum if ufunc is np.add else np.cumprod
        return _cumulative(fn, inputs[0], kwargs.get("axis", 0), dtype, None)
    raise _interop._unsupported(f"{name}.{method}")


# ---- indexing --------------------------------------------------------------------------------------

def _basic(key, ndim):
    """Whether tuple ``key`` is basic indexing torch's views compute as NumPy does."""
    ellipses = 0
    for k in key:
        if k is Ellipsis:
            ellipses += 1
            if ellipses > 1:
                return False
        kind = type(k)
        if kind is int or k is None or k is Ellipsis:
            continue
        if kind is slice:
            step = k.step
            if step is not None and (type(step) is not int or step <= 0):
                return False
            if not (k.start is None or type(k.start) is int) or not (k.stop is None or type(k.stop) is int):
                return False
            continue
        return False
    return ndim > 0 or all(k is None or k is Ellipsis for k in key)


def _index_values(key):
    """An index with traced parts replaced by their values (integer and boolean arrays have
    no gradient; a float one makes NumPy raise its own IndexError)."""
    if type(key) is TracedArray:
        return np.array(key._t._value())
    if isinstance(key, Tensor):
        return np.array(key._value())
    if isinstance(key, tuple):
        return tuple(_index_values(k) for k in key)
    if isinstance(key, list) and _contains_traced(key):
        return [_index_values(k) for k in key]
    return key


try:
    from numpy.lib.array_utils import normalize_axis_index as _normalize_axis
except ImportError:   # NumPy 1.x
    from numpy.core.multiarray import normalize_axis_index as _normalize_axis


def _axis(axis, ndim):
    """``axis`` in ``range(ndim)``, or NumPy's AxisError."""
    return _normalize_axis(operator.index(axis), ndim)


def _positions(t):
    return np.arange(t._numel, dtype=np.int64).reshape(t._shape)


def _take(t, pos):
    """Tensor of the elements of ``t`` at flat positions ``pos`` (any shape)."""
    flat = t.reshape(-1)
    if pos.ndim == 0:
        return flat[int(pos)]
    return flat[np.ascontiguousarray(pos).reshape(-1)].reshape(pos.shape)


def _advanced_getitem(x, key):
    t = x._t
    grid = _positions(t)
    pos = grid[_index_values(key)]
    if isinstance(pos, np.generic):
        return _wrap(t.reshape(-1)[int(pos)])
    r = _take(t, pos)
    return _view(x, r) if pos.base is grid else _wrap(r)


def _by_positions(numpy_fn, x, *args, **kwargs):
    """A movement function (NumPy's own) applied to positions, then one gather: exact
    NumPy semantics.  Elements it fills in (``np.diag`` of a vector, ``np.pad``,
    ``np.tril``) are zeros: positions are shifted by one so that 0 means "a zero"."""
    t = _tensor_of(x)
    grid = _positions(t) + 1
    # index arguments computed from traced values (np.argsort(x) for take_along_axis) are
    # integers: their values, else NumPy would hand the call back to NumPy mode
    args = [_index_argument(numpy_fn, a) for a in args]
    kwargs = {k: _index_argument(numpy_fn, v) for k, v in kwargs.items()}
    pos = numpy_fn(grid, *args, **kwargs)
    if isinstance(pos, (list, tuple)):
        return type(pos)(_gather_positions(t, np.asarray(p)) for p in pos)
    return _gather_positions(t, np.asarray(pos))


def _index_argument(numpy_fn, value):
    if isinstance(value, (list, tuple)) and any(type(v) is TracedArray for v in value):
        return type(value)(_index_argument(numpy_fn, v) for v in value)
    if type(value) is not TracedArray:
        return value
    t = value._t
    if t._dtype.is_floating_point:
        raise _read_error(f"numpy.{numpy_fn.__name__} with a float traced array as its index argument")
    return np.array(t._value())


def _gather_positions(t, pos):
    if pos.dtype.kind not in "iu":
        raise TypeError("tapejit: this NumPy function does not only move elements; it cannot be "
                        "differentiated by positions")
    if pos.size and pos.min() == 0:
        padded = _tj().cat([_concrete(np.zeros(1, _NP_OF[t._dtype])), t.reshape(-1)]) \
            if t._dtype.is_floating_point else _concrete(np.concatenate([[0], t._value().reshape(-1)]))
        if not t._dtype.is_floating_point:
            return _constant(padded._value()[pos])
        return _wrap(_take(padded, pos))
    if not t._dtype.is_floating_point:
        return _constant(t._value().reshape(-1)[pos - 1])
    return _wrap(_take(t, pos - 1))


# ---- shape methods ----------------------------------------------------------------------------------

def _reshape(x, shape, order):
    t = x._t
    if order in ("C", "A", "K"):
        try:
            return _view(x, t.reshape(*shape))
        except RuntimeError:
            np.empty(t._shape, np.bool_).reshape(shape)   # NumPy's own ValueError for a bad shape
            raise
    if order != "F":
        raise ValueError("order must be one of 'C', 'F', 'A', or 'K' (got '%s')" % order)
    # Column-major: reverse the axes, reshape to the reversed shape, reverse back.
    n = t._numel
    target = tuple(np.empty(n, np.bool_).reshape(shape).shape)   # resolves -1 and checks
    rev = t.permute(*range(t.ndim - 1, -1, -1)) if t.ndim > 1 else t
    out = rev.reshape(*target[::-1])
    if len(target) > 1:
        out = out.permute(*range(len(target) - 1, -1, -1))
    return _view(x, out)


def _transpose(x, axes):
    t = x._t
    n = len(t._shape)
    if axes is None:
        order = tuple(range(n - 1, -1, -1))
    else:
        np.empty((1,) * n, np.bool_).transpose(axes)   # NumPy's own checks and errors
        order = tuple(_axis(a, n) for a in axes)
    if n < 2 or order == tuple(range(n)):
        return _view(x, t.reshape(*t._shape))
    return _view(x, t.permute(*order))


def _squeeze(x, axis):
    t = x._t
    shape = t._shape
    if axis is None:
        target = tuple(s for s in shape if s != 1)
    else:
        target = np.empty(shape, np.bool_).squeeze(axis).shape   # NumPy's checks and errors
    return _view(x, t.reshape(*target))


def _astype(x, dtype, copy):
    t = _tensor_of(x)
    want = np.dtype(dtype)
    have = _NP_OF[t._dtype]
    if want == have:
        return _wrap(t) if copy or type(x) is not TracedArray else x
    if want in (_F64, _F32):
        if t._dtype.is_floating_point:
            return _wrap(_cast(t, want))
        return _constant(t._value().astype(want))
    if want.kind in "biu" and want in (np.dtype(np.int64), np.dtype(np.bool_)):
        # The value only: a cast to integers has no gradient (zero almost everywhere).
        return _constant(t._value().astype(want))
    raise TypeError(f"tapejit: traced arrays hold float32, float64, int64 and bool values; "
                    f"astype({want}) is not supported")


# ---- reductions and friends -------------------------------------------------------------------------

def _reduce(numpy_fn, handler, a, **kwargs):
    t = _tensor_of(a)
    dtype = kwargs.pop("dtype", None)
    if dtype is not None:
        if np.dtype(dtype).kind != "f":
            return _on_values(numpy_fn, (_wrap(t),), dict(kwargs, dtype=dtype))
        t = _cast(t, np.dtype(dtype)) if t._dtype.is_floating_point else _concrete(t._value().astype(dtype))
    if not t._dtype.is_floating_point:
        return _on_values(numpy_fn, (_wrap(t),), kwargs)
    kwargs = {k: v for k, v in kwargs.items() if v is not None or k in ("axis",)}
    return _out(handler(t, **kwargs))


def _cumulative(numpy_fn, a, axis, dtype, out):
    """cumsum/cumprod as log2(n) shifted adds (products): y += shift(y, k) for k = 1, 2, 4, ...
    (Hillis and Steele); differentiable with slices and concatenation."""
    if out is not None:
        raise _interop._unsupported(f"numpy.{numpy_fn.__name__} with out=")
    t = _tensor_of(a)
    if dtype is not None:
        t = _tensor_of(_astype(_wrap(t), dtype, False))
    if not t._dtype.is_floating_point:
        return _on_values(numpy_fn, (_wrap(t),), {"axis": axis})
    if axis is None:
        t = t.reshape(-1)
        axis = 0
    n = len(t._shape)
    axis = _axis(axis, n)
    length = t._shape[axis]
    tj = _tj()
    fill = 0.0 if numpy_fn is np.cumsum else 1.0
    lead = (slice(None),) * axis
    y = t
    k = 1
    while k < length:
        pad_shape = t._shape[:axis] + (k,) + t._shape[axis + 1:]
        pad = _concrete(np.full(pad_shape, fill, _NP_OF[t._dtype]))
        shifted = tj.cat([pad, y[lead + (slice(0, length - k),)]], axis)
        y = y + shifted if numpy_fn is np.cumsum else y * shifted
        k *= 2
    return _wrap(y if y is not t else t.reshape(*t._shape))


def _on_values(numpy_fn, args, kwargs):
    """``numpy_fn`` on the values of traced arguments: for results without a gradient
    (integer, boolean, piecewise constant); the result is a traced constant."""
    args = [_value_arg(a) for a in args]
    kwargs = {k: _value_arg(v) for k, v in kwargs.items()}
    with np.errstate(all="ignore"):
        return _constants(numpy_fn(*args, **kwargs))


def _value_arg(a):
    if type(a) is TracedArray:
        return np.array(a._t._value())
    if isinstance(a, (list, tuple)) and _contains_traced(a):
        return type(a)(_value_arg(e) for e in a)
    if isinstance(a, np.ndarray) and a.dtype == object and _contains_traced(a):
        return np.array([_value_arg(e) for e in a.reshape(-1)]).reshape(a.shape)
    return a


def _constants(r):
    if isinstance(r, tuple):
        return tuple(_constants(e) for e in r)
    if isinstance(r, list):
        return [_constants(e) for e in r]
    if isinstance(r, (np.ndarray, np.generic, bool, int, float)):
        return _constant(r)
    return r


def _out(r):
    """Tensors in a handler's result become traced arrays."""
    if isinstance(r, Tensor):
        return _wrap(r)
    if isinstance(r, tuple):
        return tuple(_out(e) for e in r)
    if isinstance(r, list):
        return [_out(e) for e in r]
    return r


def _all_constant(args, kwargs):
    """No traced argument can carry a gradient: NumPy may compute on the values."""
    def ok(x):
        if type(x) is TracedArray:
            t = x._t
            return t._tape is None and not t._rg
        if isinstance(x, (list, tuple)):
            return all(ok(e) for e in x)
        if isinstance(x, np.ndarray) and x.dtype == object:
            return all(ok(e) for e in x.flat)
        if isinstance(x, dict):
            return all(ok(e) for e in x.values())
        return not isinstance(x, Tensor)
    return ok(args) and ok(kwargs)


# ---- NumPy functions ----------------------------------------------------------------------------------

_FUNCTIONS = {}


def implements(*funcs):
    def register(handler):
        for f in funcs:
            _FUNCTIONS[f] = handler
        return handler
    return register


def _array_function(func, types, args, kwargs):
    for t in types:
        if not issubclass(t, (TracedArray, np.ndarray, Tensor)):
            return NotImplemented
    handler = _FUNCTIONS.get(func)
    if handler is not None:
        return handler(*args, **kwargs)
    if _all_constant(args, kwargs):
        return _on_values(func, args, kwargs)
    raise _interop._unsupported(_interop._public_name(func), " inside tj.grad (NumPy mode)")


def _reduction(numpy_fn, handler):
    def reduce(a, *args, **kwargs):
        names = _REDUCTION_ARGS[numpy_fn]
        kwargs.update(zip(names, args))
        return _reduce(numpy_fn, handler, a, **kwargs)
    return reduce


_REDUCTION_ARGS = {
    np.sum: ("axis", "dtype", "out", "keepdims", "initial", "where"),
    np.mean: ("axis", "dtype", "out", "keepdims", "where"),
    np.prod: ("axis", "dtype", "out", "keepdims", "initial", "where"),
    np.max: ("axis", "out", "keepdims", "initial", "where"),
    np.min: ("axis", "out", "keepdims", "initial", "where"),
    np.var: ("axis", "dtype", "out", "ddof", "keepdims"),
    np.std: ("axis", "dtype", "out", "ddof", "keepdims"),
}

for _fn, _handler in ((np.sum, _interop._sum), (np.mean, _interop._mean), (np.prod, _interop._prod),
                      (np.max, _interop._max), (np.min, _interop._min), (np.var, _interop._var),
                      (np.std, _interop._std)):
    implements(_fn)(_reduction(_fn, _handler))


@implements(np.sum)
def _np_sum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    if type(a) is TracedArray:
        return a.sum(axis, dtype, out, keepdims, initial, where)
    return _reduce(np.sum, _interop._sum, a, axis=axis, dtype=dtype, out=out, keepdims=keepdims,
                   initial=initial, where=where)


@implements(np.mean)
def _np_mean(a, axis=None, dtype=None, out=None, keepdims=False, where=None):
    if type(a) is TracedArray:
        return a.mean(axis, dtype, out, keepdims, where)
    return _reduce(np.mean, _interop._mean, a, axis=axis, dtype=dtype, out=out, keepdims=keepdims,
                   where=where)
_FUNCTIONS[np.amax] = _FUNCTIONS[np.max]
_FUNCTIONS[np.amin] = _FUNCTIONS[np.min]


@implements(np.average)
def _average(a, axis=None, weights=None, returned=False, *, keepdims=False):
    x = _traced(a)
    if weights is None:
        avg = x.mean(axis=axis, keepdims=keepdims)
        if returned:
            count = x.size // max(1, avg.size)
            return avg, _constant(np.full(avg.shape, count, _NP_OF[avg._t._dtype]))
        return avg
    w = _traced(weights)
    if w.shape != x.shape:
        if axis is None or w.ndim != 1:
            raise TypeError("Axis must be specified when shapes of a and weights differ.")
        shape = [1] * x.ndim
        shape[_axis(axis, x.ndim)] = -1
        w = w.reshape(shape)
    w = _by_positions(np.broadcast_to, w, x.shape)
    scale = w.sum(axis=axis, keepdims=keepdims)
    avg = (x * w).sum(axis=axis, keepdims=keepdims) / scale
    return (avg, scale) if returned else avg


@implements(np.ptp)
def _ptp(a, axis=None, out=None, keepdims=False):
    return (_reduce(np.max, _interop._max, a, axis=axis, out=out, keepdims=keepdims)
            - _reduce(np.min, _interop._min, a, axis=axis, keepdims=keepdims))


for _fn in (np.argmax, np.argmin, np.argsort, np.all, np.any, np.count_nonzero, np.nonzero,
            np.argwhere, np.flatnonzero, np.allclose, np.isclose, np.array_equal, np.array_equiv,
            np.round, np.around, np.fix, np.searchsorted, np.unique, np.isreal, np.iscomplex,
            np.isrealobj):
    implements(_fn)(lambda *args, _fn=_fn, **kwargs: _on_values(_fn, args, kwargs))


@implements(np.shape)
def _shape(a):
    return _traced(a).shape


@implements(np.ndim)
def _ndim(a):
    return len(_shape(a))


@implements(np.size)
def _size(a, axis=None):
    shape = _shape(a)
    if axis is None:
        return int(np.prod(shape, dtype=np.int64))
    return shape[axis]


@implements(np.result_type)
def _result_type(*arrays_and_dtypes):
    return np.result_type(*[a.dtype if type(a) is TracedArray else a for a in arrays_and_dtypes])


@implements(np.can_cast)
def _can_cast(from_, to, casting="safe"):
    return np.can_cast(from_.dtype if type(from_) is TracedArray else from_, to, casting)


@implements(np.iscomplexobj)
def _iscomplexobj(x):
    return False if type(x) is TracedArray else np.iscomplexobj(x)


def _like(numpy_fn):
    """``np.zeros_like(x)`` and friends: plain NumPy constants of the traced array's shape
    and dtype (nothing of its value is read)."""
    def like(a, *args, **kwargs):
        if type(a) is TracedArray:
            a = np.empty(a.shape, a.dtype)
        return numpy_fn(a, *args, **kwargs)
    return like


for _fn in (np.zeros_like, np.ones_like, np.empty_like, np.full_like):
    implements(_fn)(_like(_fn))


@implements(np.copy)
def _copy(a, order="K", subok=False):
    return _wrap(_tensor_of(a))


@implements(np.asarray, np.asanyarray, np.ascontiguousarray, np.array)   # like=x only
def _asarray(a, dtype=None, *args, **kwargs):
    return _wrap(_tensor_of(a)) if dtype is None else _astype(a, dtype, False)


@implements(np.real)
def _real(val):
    return val if type(val) is TracedArray else _wrap(_tensor_of(val))


@implements(np.imag)
def _imag(val):
    return _wrap(_tensor_of(val)).imag


@implements(np.reshape)
def _np_reshape(a, /, shape=None, order="C", *, newshape=None, copy=None):
    target = shape if shape is not None else newshape
    target = (int(target),) if isinstance(target, (int, np.integer)) else tuple(int(s) for s in target)
    return _reshape(_traced(a), target, order)


@implements(np.ravel)
def _np_ravel(a, order="C"):
    return _reshape(_traced(a), (-1,), order)


@implements(np.transpose)
def _np_transpose(a, axes=None):
    return _transpose(_traced(a), axes)


@implements(np.permute_dims)
def _np_permute_dims(a, axes=None):
    return _transpose(_traced(a), axes)


@implements(np.squeeze)
def _np_squeeze(a, axis=None):
    return _squeeze(_traced(a), axis)


@implements(np.expand_dims)
def _np_expand_dims(a, axis):
    x = _traced(a)
    target = np.expand_dims(np.empty(x.shape, np.bool_), axis).shape
    return _view(x, x._t.reshape(*target))


@implements(np.swapaxes)
def _np_swapaxes(a, axis1, axis2):
    x = _traced(a)
    n = x.ndim
    order = list(range(n))
    i, j = _axis(axis1, n), _axis(axis2, n)
    order[i], order[j] = order[j], order[i]
    return _transpose(x, order)


@implements(np.moveaxis)
def _np_moveaxis(a, source, destination):
    x = _traced(a)
    n = x.ndim
    labels = np.empty(tuple(range(2, n + 2)), np.bool_)   # axis k has length k + 2
    moved = np.moveaxis(labels, source, destination).shape
    return _transpose(x, [s - 2 for s in moved])


def _traced(a):
    return a if type(a) is TracedArray else _wrap(_tensor_of(a))


# Functions that only move elements: NumPy's own, on positions (see _by_positions).
for _fn in (np.roll, np.flip, np.fliplr, np.flipud, np.rot90, np.repeat, np.tile, np.diag, np.diagonal,
            np.tril, np.triu, np.broadcast_to, np.take_along_axis, np.array_split, np.hsplit, np.vsplit,
            np.dsplit, np.resize, np.diagflat, np.matrix_transpose, np.delete):
    implements(_fn)(lambda a, *args, _fn=_fn, **kwargs: _by_positions(_fn, a, *args, **kwargs))


def _atleast_fn(numpy_fn):
    def atleast(*arys):
        results = [_by_positions(numpy_fn, a) for a in arys]
        return results[0] if len(results) == 1 else tuple(results)
    return atleast


for _fn in (np.atleast_1d, np.atleast_2d, np.atleast_3d):
    _FUNCTIONS[_fn] = _atleast_fn(_fn)


@implements(np.take)
def _np_take(a, indices, axis=None, out=None, mode="raise"):
    if out is not None:
        raise _interop._unsupported("numpy.take with out=")
    return _by_positions(np.take, a, _index_values(indices), axis, None, mode)


@implements(np.sort)
def _np_sort(a, axis=-1, kind=None, order=None, *, stable=None):
    t = _tensor_of(a)
    values = np.array(t._value())
    if axis is None:
        values, t = values.reshape(-1), t.reshape(-1)
        axis = -1
    order_ = np.argsort(values, axis=axis, kind=kind, stable=stable)
    return _gather_positions(t, np.take_along_axis(_positions(t), order_, axis) + 1)


@implements(np.partition)
def _np_partition(a, kth, axis=-1, kind="introselect", order=None):
    t = _tensor_of(a)
    values = np.array(t._value())
    if axis is None:
        values, t = values.reshape(-1), t.reshape(-1)
        axis = -1
    order_ = np.argpartition(values, kth, axis=axis)
    return _gather_positions(t, np.take_along_axis(_positions(t), order_, axis) + 1)


@implements(np.gradient)
def _np_gradient(f, *varargs, axis=None, edge_order=1):
    """NumPy's central differences (one-sided at the edges), linear in ``f``: each output
    element is ``sum_r c_r[i] * f[j_r(i)]`` over a window of three neighbours (two for a
    length-2 axis).  The window's members have distinct residues mod 3, so NumPy's own
    ``np.gradient`` of the three comb signals ``(j % 3 == r)`` gives the coefficients
    exactly, for any spacing NumPy accepts.  Spacings are constants (traced ones refused)."""
    t = _tensor_of(f)
    if not t._dtype.is_floating_point:
        t = _cast(t, _F64)   # NumPy's gradient of integers is float64
    ndim = len(t._shape)
    axes = tuple(range(ndim)) if axis is None else _normalize_axes(axis, ndim)
    if any(type(v) is TracedArray for v in varargs):
        raise _read_error("numpy.gradient with traced spacings")
    if len(varargs) == 0:
        spacings = [()] * len(axes)
    elif len(varargs) == 1 and np.ndim(varargs[0]) == 0:
        spacings = [varargs] * len(axes)
    elif len(varargs) == len(axes):
        spacings = [(v,) for v in varargs]
    else:
        raise TypeError("invalid number of arguments")
    results = []
    for ax, spacing in zip(axes, spacings):
        n = t._shape[ax]
        if n < edge_order + 1:
            raise ValueError("Shape of array too small to calculate a numerical gradient, at least "
                             "(edge_order + 1) elements are required.")
        rows = np.arange(n)
        width = min(n, 3)
        start = np.clip(rows - 1, 0, n - width)
        view = [1] * ndim
        view[ax] = n
        total = None
        for r in range(width):
            comb = (np.arange(n) % width == r).astype(np.float64)
            coeff = np.gradient(comb, *spacing, edge_order=edge_order)
            member = start + (r - start) % width     # the window's member with residue r
            term = _take_axis(t, member, ax) * _concrete(coeff.reshape(view).astype(_NP_OF[t._dtype]))
            total = term if total is None else total + term
        results.append(_wrap(total))
    return results[0] if len(results) == 1 else tuple(results)


def _normalize_axes(axis, ndim):
    axes = (axis,) if np.ndim(axis) == 0 else tuple(axis)
    return tuple(int(a) % ndim if -ndim <= a < ndim else _axis_error(a, ndim) for a in axes)


def _axis_error(a, ndim):
    raise np.exceptions.AxisError(a, ndim)


def _take_axis(t, index, axis):
    from tapejit.ops.indexing import index_select
    return index_select(t, axis, _concrete(np.ascontiguousarray(index, np.int64)))


@implements(np.pad)
def _np_pad(array, pad_width, mode="constant", **kwargs):
    """The modes that only move elements (``reflect``/``symmetric`` with the default even
    reflection, ``edge``, ``wrap``) by positions; ``constant`` adds the fill values, which
    NumPy itself lays out (corners included) on an array of zeros."""
    if mode in ("reflect", "symmetric", "edge", "wrap") and kwargs.get("reflect_type", "even") == "even":
        return _by_positions(np.pad, array, pad_width, mode=mode)
    if mode != "constant" or set(kwargs) - {"constant_values"}:
        detail = f" reflect_type={kwargs['reflect_type']!r}" if "reflect_type" in kwargs else ""
        raise _interop._unsupported(f"numpy.pad with mode={mode!r}{detail}")
    padded = _by_positions(np.pad, array, pad_width, mode="constant")
    values = kwargs.get("constant_values", 0)
    if np.all(np.asarray(values) == 0):
        return padded
    fill = np.pad(np.zeros(np.shape(array), padded.dtype), pad_width, mode="constant", constant_values=values)
    return padded + fill


@implements(np.trace)
def _np_trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    if out is not None:
        raise _interop._unsupported("numpy.trace with out=")
    d = _by_positions(np.diagonal, a, offset, axis1, axis2)
    return _reduce(np.sum, _interop._sum, d, axis=-1, dtype=dtype)


def _operands(*xs):
    """Tensors of ``xs`` promoted to NumPy's common dtype."""
    return _promoted([_tensor_of(x) for x in xs])


@implements(np.dot)
def _dot(a, b, out=None):
    if out is not None:
        raise _interop._unsupported("numpy.dot with out=")
    a, b = _operands(a, b)
    if not a._dtype.is_floating_point:
        return _constant(np.dot(a._value(), b._value()))
    if not a._shape or not b._shape:
        return _wrap(a * b)
    if len(b._shape) <= 2:
        if len(a._shape) > 2 and len(b._shape) == 2:
            return _wrap((a.reshape(-1, a._shape[-1]) @ b).reshape(*a._shape[:-1], b._shape[-1]))
        return _wrap(a @ b)
    # dot(a, b)[i.., j.., m] = sum(a[i.., :] * b[j.., :, m])
    k = b._shape[-2]
    if a._shape[-1] != k:
        raise ValueError(f"shapes {_shape_text(a._shape)} and {_shape_text(b._shape)} not aligned: "
                         f"{a._shape[-1]} (dim {len(a._shape) - 1}) != {k} (dim {len(b._shape) - 2})")
    nb = len(b._shape)
    bt = b.permute(nb - 2, *range(nb - 2), nb - 1).reshape(k, -1)
    out_shape = a._shape[:-1] + b._shape[:-2] + b._shape[-1:]
    return _wrap((a.reshape(-1, k) @ bt).reshape(*out_shape))


@implements(np.vdot)
def _vdot(a, b):
    a, b = _operands(a, b)
    return _dot(_wrap(a.reshape(-1)), _wrap(b.reshape(-1)))


@implements(np.inner)
def _inner(a, b):
    a, b = _operands(a, b)
    if not a._dtype.is_floating_point:
        return _constant(np.inner(a._value(), b._value()))
    if not a._shape or not b._shape:
        return _wrap(a * b)
    k = a._shape[-1]
    if b._shape[-1] != k:
        raise ValueError(f"shapes {_shape_text(a._shape)} and {_shape_text(b._shape)} not aligned: "
                         f"{k} (dim {len(a._shape) - 1}) != {b._shape[-1]} (dim {len(b._shape) - 1})")
    out_shape = a._shape[:-1] + b._shape[:-1]
    r = a.reshape(-1, k) @ b.reshape(-1, k).t()
    return _wrap(r.reshape(*out_shape))


@implements(np.outer)
def _outer(a, b, out=None):
    if out is not None:
        raise _interop._unsupported("numpy.outer with out=")
    a, b = _operands(a, b)
    return _wrap(a.reshape(-1, 1) * b.reshape(1, -1))


@implements(np.tensordot)
def _tensordot(a, b, axes=2):
    a, b = _operands(a, b)
    na, nb = len(a._shape), len(b._shape)
    if isinstance(axes, (int, np.integer)):
        axes_a = list(range(na - int(axes), na))
        axes_b = list(range(int(axes)))
    else:
        axes_a, axes_b = axes
        axes_a = [axes_a] if isinstance(axes_a, (int, np.integer)) else list(axes_a)
        axes_b = [axes_b] if isinstance(axes_b, (int, np.integer)) else list(axes_b)
    axes_a = [int(i) % na for i in axes_a]
    axes_b = [int(i) % nb for i in axes_b]
    if len(axes_a) != len(axes_b) or any(a._shape[i] != b._shape[j] for i, j in zip(axes_a, axes_b)):
        raise ValueError("shape-mismatch for sum")
    free_a = [i for i in range(na) if i not in axes_a]
    free_b = [i for i in range(nb) if i not in axes_b]
    k = int(np.prod([a._shape[i] for i in axes_a], dtype=np.int64))
    at = a.permute(*free_a, *axes_a).reshape(-1, k) if na else a.reshape(1, 1)
    bt = b.permute(*axes_b, *free_b).reshape(k, -1) if nb else b.reshape(1, 1)
    shape = [a._shape[i] for i in free_a] + [b._shape[i] for i in free_b]
    return _wrap((at @ bt).reshape(*shape))


@implements(np.linalg.norm)
def _norm(x, ord=None, axis=None, keepdims=False):
    # torch.linalg.norm has NumPy's rules (vector or matrix by axis and ndim, the same ords).
    t = _tensor_of(x)
    if not t._dtype.is_floating_point:
        t = _cast(t, _F64)
    return _wrap(_tj().linalg.norm(t, ord, axis, bool(keepdims)))


@implements(np.where)
def _where(condition, x=None, y=None):
    if x is None and y is None:
        return _on_values(np.nonzero, (condition,), {})
    if x is None or y is None:
        raise ValueError("either both or neither of x and y should be given")
    c = _tensor_of(condition)
    cond = np.asarray(c._value()).astype(bool)
    tx, ty = _operands(x, y)
    if not tx._dtype.is_floating_point:
        return _constant(np.where(cond, tx._value(), ty._value()))
    shape = np.broadcast_shapes(cond.shape, tx._shape, ty._shape)
    return _wrap(_tj().where(_concrete(np.ascontiguousarray(np.broadcast_to(cond, shape))), tx, ty))


_NO_VALUE = getattr(np, "_NoValue", None)


@implements(np.clip)
def _np_clip(a, a_min=None, a_max=None, out=None, *, min=None, max=None, **kwargs):
    lo = a_min if a_min is not None and a_min is not _NO_VALUE else min
    hi = a_max if a_max is not None and a_max is not _NO_VALUE else max
    return _clip(a, None if lo is _NO_VALUE else lo, None if hi is _NO_VALUE else hi, out, **kwargs)


def _clip(a, lo, hi, out=None, **kwargs):
    if out is not None or kwargs:
        raise _interop._unsupported("numpy.clip with " + ", ".join(["out"] * (out is not None) + sorted(kwargs)) + "=")
    x = _traced(a)
    if lo is not None:
        x = _binary(np.maximum, x, lo)
    if hi is not None:
        x = _binary(np.minimum, x, hi)
    return x


def _sequence(arrays):
    parts = [_tensor_of(x) for x in arrays]
    if not parts:
        raise ValueError("need at least one array to concatenate")
    return _promoted(parts)


def _cat(parts, axis):
    if not parts[0]._dtype.is_floating_point:
        return _constant(np.concatenate([p._value() for p in parts], axis))
    if axis is None:
        return _wrap(_tj().cat([p.reshape(-1) for p in parts]))
    n = len(parts[0]._shape)
    for p in parts[1:]:
        if len(p._shape) != n:
            raise ValueError(
                f"all the input array dimensions except for the concatenation axis must match exactly, "
                f"but along dimension 0, the array at index 0 has {n} dimension(s) and the array "
                f"at index {parts.index(p)} has {len(p._shape)} dimension(s)")
    if n == 0:
        raise ValueError("zero-dimensional arrays cannot be concatenated")
    axis = _axis(axis, n)
    first = parts[0]._shape
    for i, p in enumerate(parts[1:], 1):
        for d in range(n):
            if d != axis and p._shape[d] != first[d]:
                raise ValueError(
                    f"all the input array dimensions except for the concatenation axis must match "
                    f"exactly, but along dimension {d}, the array at index 0 has size {first[d]} and "
                    f"the array at index {i} has size {p._shape[d]}")
    return _wrap(_tj().cat(parts, axis))


@implements(np.concatenate)
def _concatenate(arrays, axis=0, out=None, dtype=None, casting=None):
    if out is not None:
        raise _interop._unsupported("numpy.concatenate with out=")
    r = _cat(_sequence(arrays), axis)
    return r if dtype is None else _astype(r, dtype, False)


@implements(np.stack)
def _stack(arrays, axis=0, out=None, dtype=None, casting=None):
    if out is not None:
        raise _interop._unsupported("numpy.stack with out=")
    parts = _sequence(arrays)
    if len({p._shape for p in parts}) > 1:
        raise ValueError("all input arrays must have the same shape")
    n = len(parts[0]._shape) + 1
    axis = int(axis)
    if not -n <= axis < n:
        raise np.exceptions.AxisError(axis, n)
    r = _constant(np.stack([p._value() for p in parts], axis)) if not parts[0]._dtype.is_floating_point \
        else _wrap(_tj().stack(parts, axis % n))
    return r if dtype is None else _astype(r, dtype, False)


def _atleast_tensor(t, n):
    shape = t._shape
    if len(shape) >= n:
        return t
    if n == 1:
        return t.reshape(1)
    if n == 2:
        return t.reshape(1, -1) if shape else t.reshape(1, 1)
    if not shape:
        return t.reshape(1, 1, 1)
    if len(shape) == 1:
        return t.reshape(1, shape[0], 1)
    return t.reshape(*shape, 1)


@implements(np.hstack)
def _hstack(tup, dtype=None, casting=None):
    parts = [_atleast_tensor(p, 1) for p in _sequence(tup)]
    r = _cat(parts, 0 if len(parts[0]._shape) == 1 else 1)
    return r if dtype is None else _astype(r, dtype, False)


@implements(np.vstack, getattr(np, "row_stack", np.vstack))
def _vstack(tup, dtype=None, casting=None):
    r = _cat([_atleast_tensor(p, 2) for p in _sequence(tup)], 0)
    return r if dtype is None else _astype(r, dtype, False)


@implements(np.dstack)
def _dstack(tup):
    return _cat([_atleast_tensor(p, 3) for p in _sequence(tup)], 2)


@implements(np.column_stack)
def _column_stack(tup):
    parts = [p.reshape(-1, 1) if len(p._shape) < 2 else p for p in _sequence(tup)]
    return _cat(parts, 1)


@implements(np.append)
def _append(arr, values, axis=None):
    a, v = _sequence([arr, values])
    if axis is None:
        return _cat([a.reshape(-1), v.reshape(-1)], 0)
    return _cat([a, v], axis)


@implements(np.diff)
def _np_diff(a, n=1, axis=-1, prepend=None, append=None):
    t = _tensor_of(a)
    if prepend is not None or append is not None:
        axis = _axis(axis, len(t._shape))
        parts = []
        for p in (prepend, t, append):
            if p is None:
                continue
            p = _tensor_of(p)
            if not p._shape:   # a scalar: NumPy broadcasts it to one slice along axis
                shape = t._shape[:axis] + (1,) + t._shape[axis + 1:]
                p = _by_positions(np.broadcast_to, _wrap(p), shape)._t
            parts.append(p)
        t = _cat(_promoted(parts), axis)._t
    if not t._dtype.is_floating_point:
        return _on_values(np.diff, (_wrap(t), n, axis), {})
    return _out(_interop._diff(t, n, axis))


@implements(np.cumsum)
def _np_cumsum(a, axis=None, dtype=None, out=None):
    return _cumulative(np.cumsum, a, axis, dtype, out)


@implements(np.cumprod)
def _np_cumprod(a, axis=None, dtype=None, out=None):
    return _cumulative(np.cumprod, a, axis, dtype, out)


@implements(np.linspace)
def _linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, *, device=None):
    # start + (stop - start) * fractions: differentiable in both endpoints.
    steps = np.linspace(0.0, 1.0, num, endpoint=endpoint)
    s, e = _operands(start, stop)
    if not s._dtype.is_floating_point:
        s, e = _cast(s, _F64), _cast(e, _F64)
    frac_shape = (num,) + (1,) * len(np.broadcast_shapes(s._shape, e._shape))
    frac = _concrete(steps.reshape(frac_shape).astype(_NP_OF[s._dtype]))
    r = _wrap(s + (e - s) * frac)
    if axis != 0:
        r = _np_moveaxis(r, 0, axis)
    if dtype is not None:
        r = _astype(r, dtype, False)
    if retstep:
        div = (num - 1) if endpoint else num
        return r, _wrap((e - s) * (1.0 / div)) if div > 0 else _constant(np.nan)
    return r


@implements(np.split)
def _np_split(ary, indices_or_sections, axis=0):
    if isinstance(indices_or_sections, (int, np.integer)):
        size = _tensor_of(ary)._shape[axis]
        if size % int(indices_or_sections):
            raise ValueError("array split does not result in an equal division")
    return _by_positions(np.array_split, ary, indices_or_sections, axis)


@implements(np.select)
def _np_select(condlist, choicelist, default=0):
    if len(condlist) != len(choicelist):
        raise ValueError("list of cases must be same length as list of conditions")
    result = default
    for cond, choice in zip(condlist[::-1], choicelist[::-1]):
        result = _where(cond, choice, result)
    return result if type(result) is TracedArray else _wrap(_tensor_of(result))


@implements(np.nan_to_num)
def _nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    t = _tensor_of(x)
    if not t._dtype.is_floating_point:
        return _wrap(t)
    return _wrap(_tj().nan_to_num(t, nan, posinf, neginf))   # the registry's op: no value read


@implements(np.sinc)
def _sinc(x):
    t = _tensor_of(x)
    if not t._dtype.is_floating_point:
        t = _cast(t, _F64)
    return _wrap(_tj().sinc(t))


@implements(np.kron)
def _kron(a, b):
    a, b = _operands(a, b)
    nd = max(len(a._shape), len(b._shape))
    sa = (1,) * (nd - len(a._shape)) + a._shape
    sb = (1,) * (nd - len(b._shape)) + b._shape
    # kron(a, b)[i*sb + j] = a[i] * b[j]: interleave the axes, multiply, merge.
    ax = a.reshape(*[d for s in sa for d in (s, 1)])
    bx = b.reshape(*[d for s in sb for d in (1, s)])
    return _wrap((ax * bx).reshape(*[p * q for p, q in zip(sa, sb)]))


@implements(np.cross)
def _cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    if axis is not None:
        axisa = axisb = axisc = axis
    x = _np_moveaxis(_traced(a), axisa, -1)
    y = _np_moveaxis(_traced(b), axisb, -1)
    if x.shape[-1] != 3 or y.shape[-1] != 3:
        raise _interop._unsupported("numpy.cross", " for vectors of 2 components")
    c = [x[..., 1] * y[..., 2] - x[..., 2] * y[..., 1],
         x[..., 2] * y[..., 0] - x[..., 0] * y[..., 2],
         x[..., 0] * y[..., 1] - x[..., 1] * y[..., 0]]
    return _np_moveaxis(_stack(c, axis=-1), -1, axisc)


@implements(np.einsum)
def _einsum(*operands, out=None, dtype=None, order="K", casting="safe", optimize=False):
    if out is not None:
        raise _interop._unsupported("numpy.einsum with out=")
    if not operands:
        raise ValueError("No input operands")
    if not isinstance(operands[0], str):   # sublist form: einsum(a, [0, 1], b, [1, 2], [0, 2])
        operands = _einsum_sublists(operands)
    equation, parts = operands[0], _operands(*operands[1:])
    if dtype is not None:
        parts = [_tensor_of(_astype(_wrap(p), dtype, False)) for p in parts]
    return _wrap(_tj().einsum(equation.replace(" ", ""), *parts))


def _einsum_sublists(operands):
    """``(equation, *arrays)`` of einsum's sublist form, with NumPy's letters for the axis
    numbers (0-25 are a-z, 26-51 are A-Z)."""
    def letters(sublist):
        out = []
        for axis in sublist:
            if axis is Ellipsis:
                out.append("...")
            elif isinstance(axis, (int, np.integer)) and not isinstance(axis, bool) and 0 <= axis < 52:
                out.append(chr(ord("a") + axis) if axis < 26 else chr(ord("A") + axis - 26))
            else:
                raise ValueError("subscript is not within the valid range [0, 52)")
        return "".join(out)

    arrays, sublists = list(operands[0::2]), list(operands[1::2])
    output = None
    if len(operands) % 2:   # a trailing sublist names the output axes
        output = arrays.pop()
    equation = ",".join(letters(sub) for sub in sublists)
    if output is not None:
        equation += "->" + letters(output)
    return (equation, *arrays)


# ---- np.linalg: the registry's decompositions (tapejit/linalg.py), NumPy's signatures ----------

def _linalg_operand(a, name):
    t = _tensor_of(a)
    if not t._dtype.is_floating_point:
        t = _cast(t, _F64)   # NumPy's linalg computes integers in float64
    if len(t._shape) < 2:
        raise np.linalg.LinAlgError(f"{len(t._shape)}-dimensional array given. Array must be at least "
                                    f"two-dimensional")
    return t


def _linalg_result(kind, *parts):
    """NumPy's named result (``SVDResult``, ``EighResult``, ``SlogdetResult``) of traced arrays."""
    cls = getattr(getattr(np.linalg, "_linalg", None), kind, None)
    parts = [_wrap(p) for p in parts]
    return cls(*parts) if cls is not None else tuple(parts)


@implements(np.linalg.svd)
def _np_svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    t = _linalg_operand(a, "svd")
    if hermitian:
        raise _interop._unsupported("numpy.linalg.svd with hermitian=True", " (use numpy.linalg.eigh)")
    if not compute_uv:
        return _wrap(_tj().linalg.svdvals(t))
    m, n = t._shape[-2:]
    if full_matrices and m != n:
        # The columns of U (rows of Vh) past min(m, n) are any orthonormal completion: no
        # derivative exists (torch ignores their gradient, which would be silently wrong here).
        raise TypeError(
            f"tapejit: numpy.linalg.svd with full_matrices=True (NumPy's default) of a {m}x{n} matrix "
            f"cannot be differentiated: the {max(m, n) - min(m, n)} extra singular vectors are not "
            f"unique. Pass full_matrices=False (or compute_uv=False for the singular values only)")
    U, S, Vh = _tj().linalg.svd(t, full_matrices=False)
    return _linalg_result("SVDResult", U, S, Vh)


def _symmetric_from(t, UPLO):
    """The symmetric matrix NumPy's ``eigh``/``cholesky`` read from ``t``'s ``UPLO``
    triangle, as one gather: the other triangle gets no gradient, and each element of the
    read one gets the gradient of both places it fills (torch's gradient, symmetric, is the
    derivative for symmetric input only)."""
    if UPLO not in ("L", "U"):
        raise ValueError("UPLO argument must be 'L' or 'U'")
    n = t._shape[-1]
    if t._shape[-2] != n:
        raise np.linalg.LinAlgError("Last 2 dimensions of the array must be square")
    grid = _positions(t)
    read = np.tri(n, dtype=bool) if UPLO == "L" else np.tri(n, dtype=bool).T
    return _take(t, np.where(read, grid, np.swapaxes(grid, -1, -2)))


@implements(np.linalg.eigh)
def _np_eigh(a, UPLO="L"):
    L, Q = _tj().linalg.eigh(_symmetric_from(_linalg_operand(a, "eigh"), UPLO), UPLO)
    return _linalg_result("EighResult", L, Q)


@implements(np.linalg.eigvalsh)
def _np_eigvalsh(a, UPLO="L"):
    return _wrap(_tj().linalg.eigvalsh(_symmetric_from(_linalg_operand(a, "eigvalsh"), UPLO), UPLO))


@implements(np.linalg.det)
def _np_det(a):
    return _wrap(_tj().linalg.det(_linalg_operand(a, "det")))


@implements(np.linalg.slogdet)
def _np_slogdet(a):
    sign, logabsdet = _tj().linalg.slogdet(_linalg_operand(a, "slogdet"))
    return _linalg_result("SlogdetResult", sign, logabsdet)


@implements(np.linalg.inv)
def _np_inv(a):
    return _wrap(_tj().linalg.inv(_linalg_operand(a, "inv")))


@implements(np.linalg.cholesky)
def _np_cholesky(a, /, *, upper=False):
    t = _symmetric_from(_linalg_operand(a, "cholesky"), "U" if upper else "L")
    return _wrap(_tj().linalg.cholesky(t, upper=upper))


@implements(np.linalg.solve)
def _np_solve(a, b):
    A, B = _promoted([_linalg_operand(a, "solve"), _tensor_of(b)])
    n = A._shape[-1]
    if len(B._shape) == 1:
        # NumPy 2: b is one vector only when it is 1-D (torch also reads a batch of vectors).
        if B._shape[0] != n:
            raise ValueError(f"solve1: Input operand 1 has a mismatch in its core dimension 0, with gufunc "
                             f"signature (m,m),(m)->(m) (size {B._shape[0]} is different from {n})")
        x = _tj().linalg.solve(A, B.reshape(n, 1))
        return _wrap(x.reshape(*x._shape[:-1]))
    if B._shape[-2] != n:
        raise ValueError(f"solve: Input operand 1 has a mismatch in its core dimension 0, with gufunc "
                         f"signature (m,m),(m,n)->(m,n) (size {B._shape[-2]} is different from {n})")
    if len(B._shape) < len(A._shape):   # a matrix broadcast over A's batch, never torch's vectors
        B = B.reshape(*(1,) * (len(A._shape) - len(B._shape)), *B._shape)
    return _wrap(_tj().linalg.solve(A, B))


@implements(np.linalg.pinv)
def _np_pinv(a, rcond=None, hermitian=False, *, rtol=_NO_VALUE):
    """Of a full-rank matrix, the pseudo-inverse is ``solve(A^T A, A^T)`` (or its transpose
    form for wide matrices), smooth there: that formula records the gradient, and a constant
    correction gives exactly NumPy's (SVD-based) value.  At lower rank the pseudo-inverse
    jumps under any perturbation that raises the rank: no derivative, refused."""
    t = _linalg_operand(a, "pinv")
    if hermitian:   # NumPy reads the lower triangle (eigh)
        t = _symmetric_from(t, "L")
    kwargs = {"rcond": rcond, "hermitian": hermitian}
    if rtol is not _NO_VALUE:
        kwargs["rtol"] = rtol
    value = np.array(t._value())
    expected = np.linalg.pinv(value, **kwargs)
    m, n = t._shape[-2:]
    # NumPy's cut: singular values at most rcond (or rtol, default max(m, n) * eps) times
    # the largest are dropped.
    cut = rcond if rcond is not None else rtol if rtol is not _NO_VALUE and rtol is not None \
        else max(m, n) * np.finfo(value.dtype).eps
    sv = np.abs(np.linalg.eigvalsh(value)) if hermitian else np.linalg.svd(value, compute_uv=False)
    kept = sv > np.asarray(cut)[..., None] * sv.max(axis=-1, keepdims=True)
    if not kept.all():
        raise TypeError(
            f"tapejit: numpy.linalg.pinv of a rank-deficient {m}x{n} matrix (rank {kept.sum(-1).min()} "
            f"after NumPy's rcond cut) cannot be differentiated: the pseudo-inverse jumps under "
            f"perturbations that raise the rank")
    tj = _tj()
    tt = t.transpose(-1, -2)
    if m >= n:
        r = tj.linalg.solve(tt @ t, tt)
    else:
        r = tj.linalg.solve(t @ tt, t).transpose(-1, -2)
    rest = expected.astype(_NP_OF[t._dtype]) - np.array(r._value())
    return _wrap(r + _concrete(rest) if np.any(rest != 0) else r)


@implements(np.linalg.lstsq)
def _np_lstsq(a, b, rcond=None):
    """NumPy's ``(x, residuals, rank, s)``.  Of a full-rank ``a`` the least-squares (or, for a
    wide ``a``, minimum-norm) solution is smooth: ``solve(A^T A, A^T b)`` or
    ``A^T solve(A A^T, b)`` records its gradient and a constant correction gives exactly
    NumPy's value.  At lower rank the solution jumps under perturbations that raise the
    rank (as ``pinv``'s): refused."""
    t = _linalg_operand(a, "lstsq")
    rhs = _tensor_of(b)
    if len(t._shape) != 2:
        raise np.linalg.LinAlgError(f"{len(t._shape)}-dimensional array given. Array must be two-dimensional")
    common = np.result_type(_NP_OF[t._dtype], _NP_OF[rhs._dtype] if rhs._dtype.is_floating_point else _F64)
    t, rhs = _cast(t, common), _cast(rhs if rhs._dtype.is_floating_point else _cast(rhs, _F64), common)
    m, n = t._shape
    vector = len(rhs._shape) == 1
    if len(rhs._shape) not in (1, 2) or rhs._shape[0] != m:
        np.linalg.lstsq(np.zeros((m, n)), np.zeros(rhs._shape))   # NumPy's own error for the shapes
    expected = np.linalg.lstsq(np.array(t._value()), np.array(rhs._value()), rcond=rcond)
    rank = expected[2]
    if rank < min(m, n):
        raise TypeError(
            f"tapejit: numpy.linalg.lstsq of a rank-deficient {m}x{n} matrix (rank {rank}) cannot be "
            f"differentiated: the solution jumps under perturbations that raise the rank")
    tj = _tj()
    cols = rhs.unsqueeze(-1) if vector else rhs
    tt = t.transpose(0, 1)
    x = tj.linalg.solve(tt @ t, tt @ cols) if m >= n else tt @ tj.linalg.solve(t @ tt, cols)
    if vector:
        x = x.squeeze(-1)
    x = _corrected(x, expected[0])
    if m > n:
        diff = rhs - (t @ x)
        residuals = (diff * diff).sum(0)
        residuals = _corrected(residuals.reshape(1) if vector else residuals, expected[1])
    else:
        residuals = _concrete(np.asarray(expected[1], common))
    return _wrap(x), _wrap(residuals), rank, _wrap(_corrected(tj.linalg.svdvals(t), expected[3]))


def _corrected(r, value):
    """``r`` (its gradient) with NumPy's ``value`` exactly."""
    rest = np.asarray(value).astype(_NP_OF[r._dtype]) - np.array(r._value())
    return r + _concrete(rest) if np.any(rest != 0) else r


def _refuse_complex(name):
    def refuse(*args, **kwargs):
        raise TypeError(f"tapejit: {name} is not supported inside tj.grad/tj.value_and_grad (NumPy mode): the "
                        f"eigenvalues of a general real matrix are complex, and NumPy mode has no complex "
                        f"numbers. For a symmetric matrix use numpy.linalg.eigh or eigvalsh")
    refuse.refused = True   # not one of supported_functions()
    return refuse


implements(np.linalg.eig)(_refuse_complex("numpy.linalg.eig"))
implements(np.linalg.eigvals)(_refuse_complex("numpy.linalg.eigvals"))

del _fn, _handler


def supported_functions():
    """The public names of the NumPy and SciPy functions NumPy mode computes on traced
    arrays (``numpy.sum``, ``numpy.linalg.svd``, ``numpy.sin``, ``scipy.special.logsumexp``,
    ``scipy.stats.norm.logpdf``, ...), sorted: the function table, the ufuncs (integer and
    boolean ones give values, no gradient), SciPy's ufuncs and the SciPy functions NumPy mode
    intercepts.  Any other function given a traced array raises a TypeError naming it."""
    names = set()
    for func, handler in _FUNCTIONS.items():
        if getattr(handler, "refused", False):
            continue
        module = getattr(func, "__module__", None) or "numpy"
        names.add(f"numpy.linalg.{func.__name__}" if module == "numpy.linalg" else f"numpy.{func.__name__}")
    ufuncs = [*_FLOAT_OPS, *_BINARY_FLOAT, *_UNARY_FLOAT, *_STEP, *_VALUE_ONLY, *_COMPARE,
              np.remainder, np.fmod, np.floor_divide, np.divmod, np.sign]
    try:
        import scipy.special   # noqa: F401  (only to list its ufuncs)
    except ImportError:
        pass
    else:
        ufuncs += list(_scipy_ufuncs())
        names.update(SCIPY_FUNCTIONS, SCIPY_METHODS)
        names.add("scipy.special.digamma")   # SciPy's other name of psi
    names.update(_ufunc_name(u) for u in ufuncs)
    return sorted(names)


# ---- SciPy's Python-level functions ----------------------------------------------------------
#
# scipy.special.logsumexp/softmax/log_softmax and scipy.stats.norm's methods are Python code
# that converts its arguments with np.asarray, which no NumPy protocol lets tapejit see, and
# SciPy's own hook for other array types (``__array_namespace__``) only works with the
# environment variable SCIPY_ARRAY_API=1 set before SciPy is imported (SciPy 1.17).  So NumPy
# mode intercepts these named functions, and only for traced arguments: SciPy's function
# object hands a call with a traced array to the implementation below (NumPy mode's own ops,
# SciPy's formulas) and every other call to SciPy's original code.  The function object itself
# is changed, not the module attribute, so ``from scipy.special import logsumexp`` done before
# tapejit saw SciPy dispatches too.  A SciPy function not listed keeps raising a TypeError with
# SciPy's name (``_read_error``).


def _as_traced_operand(x):
    """An array argument of a SciPy function: traced arrays (and lists holding them) as one
    traced array, anything else as a NumPy array."""
    if type(x) is TracedArray:
        return x
    if _contains_traced(x):
        return _wrap(_tensor_of(x))
    return np.asarray(x)


def _floating(x):
    """SciPy's ``force_floating``: integer and boolean arrays compute in float64."""
    return x if x.dtype.kind == "f" else x.astype(np.float64)


def _float64(x):
    """scipy.stats computes in float64 whatever the input's float type."""
    return x if x.dtype == _F64 else x.astype(np.float64)


def _finite_or_zero(m):
    """``m`` where finite, else 0 (the shift of a log-sum-exp; a registry op, no value read)."""
    return np.nan_to_num(m, nan=0.0, posinf=0.0, neginf=0.0)


def _reduced_axes(axis, ndim):
    return tuple(range(ndim)) if axis is None else axis


def _scipy_logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    """``scipy.special.logsumexp`` on traced arrays: ``log(sum(b * exp(a)))`` shifted by the
    finite maximum; a weight of 0 ignores its element (even an infinite or NaN one), a
    negative sum gives NaN unless ``return_sign``, as SciPy's."""
    a = _floating(_as_traced_operand(a))
    if b is not None:
        b = _as_traced_operand(b)
        shape = np.broadcast_shapes(a.shape, b.shape)
        a, b = np.broadcast_to(a, shape), np.broadcast_to(b, shape)
        if type(b) is TracedArray or np.any(b == 0):
            a = np.where(b == 0, -np.inf, a)
    a = np.atleast_1d(a)
    if b is not None:
        b = np.atleast_1d(b)
    axis = _reduced_axes(axis, a.ndim)
    if a.size == 0:
        shape = list(a.shape)
        for ax in (axis if isinstance(axis, tuple) else (axis,)):
            shape[ax] = 1
        out = _constant(np.full(shape, -np.inf, a.dtype))
        sign = _constant(np.full(shape, -1.0, a.dtype))   # SciPy's sign(-inf)
    else:
        shift = _finite_or_zero(np.max(a, axis=axis, keepdims=True))
        terms = np.exp(a - shift) if b is None else b * np.exp(a - shift)
        total = np.sum(terms, axis=axis, keepdims=True)
        if return_sign:
            out = np.log(np.abs(total)) + shift
            sign = np.sign(total)
        else:   # a negative weighted sum: log gives NaN, as SciPy's result
            out = np.log(total) + shift
    if not keepdims:
        out = np.squeeze(out, axis=axis)
        if return_sign:
            sign = np.squeeze(sign, axis=axis)
    return (out, sign) if return_sign else out


def _scipy_softmax(x, axis=None):
    """``scipy.special.softmax`` on traced arrays: SciPy's formula."""
    x = _as_traced_operand(x)
    shifted = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return shifted / np.sum(shifted, axis=axis, keepdims=True)


def _scipy_log_softmax(x, axis=None):
    """``scipy.special.log_softmax`` on traced arrays: SciPy's formula (an infinite maximum
    shifts by 0)."""
    x = _as_traced_operand(x)
    shifted = x - _finite_or_zero(np.max(x, axis=axis, keepdims=True))
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


_LOG_SQRT_2PI = float(0.5 * np.log(2.0 * np.pi))


def _norm_operands(x, loc, scale):
    return (_float64(_floating(_as_traced_operand(x))), _float64(_floating(_as_traced_operand(loc))),
            _float64(_floating(_as_traced_operand(scale))))


def _invalid_scale_is_nan(value, scale):
    """scipy.stats' ``scale <= 0`` gives NaN."""
    bad = scale <= 0
    if type(bad) is not TracedArray and not np.any(bad):
        return value
    return np.where(bad, np.nan, value)


def _norm_logpdf(self, x, loc=0, scale=1):
    """``scipy.stats.norm.logpdf`` on traced arrays (float64, as SciPy's)."""
    x, loc, scale = _norm_operands(x, loc, scale)
    z = (x - loc) / scale
    return _invalid_scale_is_nan(-z ** 2 / 2.0 - _LOG_SQRT_2PI - np.log(scale), scale)


def _norm_pdf(self, x, loc=0, scale=1):
    """``scipy.stats.norm.pdf`` on traced arrays."""
    x, loc, scale = _norm_operands(x, loc, scale)
    z = (x - loc) / scale
    return _invalid_scale_is_nan(np.exp(-z ** 2 / 2.0 - _LOG_SQRT_2PI) / scale, scale)


def _norm_cdf(self, x, loc=0, scale=1):
    """``scipy.stats.norm.cdf`` on traced arrays: ``ndtr`` of the standardized value."""
    x, loc, scale = _norm_operands(x, loc, scale)
    return _invalid_scale_is_nan(_wrap(_tj().special.ndtr(_tensor_of((x - loc) / scale))), scale)


#: SciPy's name -> (module, attribute, NumPy mode's implementation, array parameters)
SCIPY_FUNCTIONS = {
    "scipy.special.logsumexp": ("scipy.special", "logsumexp", _scipy_logsumexp, ("a", "b")),
    "scipy.special.softmax": ("scipy.special", "softmax", _scipy_softmax, ("x",)),
    "scipy.special.log_softmax": ("scipy.special", "log_softmax", _scipy_log_softmax, ("x",)),
}
#: SciPy's name -> (module, distribution, method, NumPy mode's implementation)
SCIPY_METHODS = {
    "scipy.stats.norm.logpdf": ("scipy.stats", "norm", "logpdf", _norm_logpdf),
    "scipy.stats.norm.pdf": ("scipy.stats", "norm", "pdf", _norm_pdf),
    "scipy.stats.norm.cdf": ("scipy.stats", "norm", "cdf", _norm_cdf),
}
_SCIPY_SHORT_NAMES = [name[len("scipy."):] for name in (*SCIPY_FUNCTIONS, *SCIPY_METHODS)]
_scipy_waiting = {"scipy.special", "scipy.stats"}   # SciPy modules whose functions are not intercepted yet


def intercept_scipy():
    """Intercept the SciPy functions above for traced arguments, for each SciPy module
    imported by now (called by every differentiation entry; free once both are done)."""
    for module in tuple(_scipy_waiting):
        if module in sys.modules:
            _scipy_waiting.discard(module)
            for name, (mod, attr, impl, arrays) in SCIPY_FUNCTIONS.items():
                if mod == module:
                    _intercept_function(getattr(sys.modules[mod], attr, None), impl, arrays)
            for name, (mod, dist, method, impl) in SCIPY_METHODS.items():
                if mod == module:
                    _intercept_method(type(getattr(sys.modules[mod], dist, None)), method, impl)


def _intercept_function(f, impl, arrays):
    """Make SciPy's function object ``f`` hand a call with a traced array among the
    parameters ``arrays`` to ``impl``.  ``f``'s code becomes a two-line trampoline with ``f``'s
    own parameters (``inspect.signature``, defaults and docs unchanged) that calls the
    dispatcher kept on ``f``; SciPy's code runs, unchanged, as a copy of the function.  A
    function of another shape (a closure, keyword-only parameters, a name its module does
    not bind to it) is left alone: it keeps raising the TypeError with its name."""
    if not isinstance(f, types.FunctionType) or hasattr(f, "_tapejit_numpy_mode") or f.__closure__:
        return
    if f.__globals__.get(f.__name__) is not f:
        return   # the trampoline finds f through its module's global name
    params = list(inspect.signature(f).parameters.values())
    if any(p.kind is not p.POSITIONAL_OR_KEYWORD for p in params):
        return
    names = [p.name for p in params]
    if not set(arrays) <= set(names):
        return
    original = types.FunctionType(f.__code__, f.__globals__, f.__name__, f.__defaults__)
    positions = tuple(names.index(a) for a in arrays)

    def dispatch(*args):
        for i in positions:
            if _contains_traced(args[i]):   # a traced array, or a list/object array holding one
                return impl(*args)
        return original(*args)

    listed = ", ".join(names)
    source = f"def {f.__name__}({listed}):\n    return {f.__name__}._tapejit_numpy_mode({listed})\n"
    namespace = {}
    exec(compile(source, f"<tapejit NumPy mode: {f.__module__}.{f.__name__}>", "exec"), namespace)
    f._tapejit_numpy_mode = dispatch
    f.__code__ = namespace[f.__name__].__code__


def _intercept_method(cls, method, impl):
    """Give the distribution class ``cls`` (``norm_gen``) its own ``method`` that hands a call
    with a traced argument to ``impl`` and every other one to the inherited SciPy method, so
    ``scipy.stats.norm`` (and a frozen ``norm(loc, scale)``) dispatch however they were
    imported.  A method the class defines itself is left alone."""
    if cls is type(None) or method in cls.__dict__ or not callable(getattr(cls, method, None)):
        return
    inherited = getattr(cls, method)

    @functools.wraps(inherited)
    def dispatching(self, x, *args, **kwds):
        if (type(x) is TracedArray or _contains_traced(x) or args and _contains_traced(args)
                or kwds and _contains_traced(tuple(kwds.values()))):
            return impl(self, x, *args, **kwds)
        return inherited(self, x, *args, **kwds)

    dispatching._tapejit_numpy_mode = impl
    setattr(cls, method, dispatching)


# np.inner, hstack, vstack and cumsum of tensors have NumPy's semantics: these implementations
_interop.provide(_inner=_inner, _hstack=_hstack, _vstack=_vstack, _np_cumsum=_np_cumsum, to_tensor=to_tensor)
