"""The Tensor: a view of a value either on a tape (``_tape``/``_off``) or in its own
NumPy array (``_data``: leaves, constants, gradients).

A taped tensor's value is computed when first read (``tape.flush()``).  The attributes
set on every recorded op are few on purpose: recording a scalar op should cost well under
a microsecond and create one GC-tracked object.
"""
import warnings

import numpy as np

from tapejit import dtypes
from tapejit.device import CPU, check as _check_device, device as _as_device
from tapejit.dtypes import type_name
from tapejit.printing import tensor_repr
from tapejit.shapes import wrap_dim
from tapejit.tape import due_by_size, retire_if_due, state as _state

_new = object.__new__
_BY_NUMPY = dtypes._BY_NUMPY   # NumPy dtype -> the tapejit dtype whose arrays it is
_FLOAT32 = dtypes.float32


class _Above:
    """The functions of the layers above tensor.py that Tensor's methods call (in-place
    bookkeeping, casts, views, backward, NumPy's protocols, pickling): each of those modules
    hands its own over at import with ``provide``, so that tensor.py imports none of them."""
    __slots__ = ("share_value", "leave_shared", "detach_in_place", "note_leaf_write", "legacy_array",
                 "cast", "contiguous", "is_contiguous", "rows", "backward", "node_for",
                 "array_ufunc", "array_function", "reduce_tensor")


above = _Above()


def provide(**functions):
    """Install functions of an upper layer for Tensor's methods (see ``_Above``)."""
    for name, function in functions.items():
        setattr(above, name, function)


class Size(tuple):
    """``tensor.shape``: a tuple that also knows ``numel()``, as torch.Size."""

    def numel(self):
        n = 1
        for s in self:
            n *= s
        return n

    def __repr__(self):
        return f"tapejit.Size({list(self)})"


def _taped(tape, off, shape, numel, dt, rg):
    t = _new(Tensor)
    t._tape = tape
    t._off = off
    t._shape = shape
    t._numel = numel
    t._dtype = dt
    t._rg = rg
    return t


def _concrete(array, rg=False):
    """A tensor owning ``array``.  An array of another NumPy dtype (float16, int32, a
    non-native byte order) is converted to the tapejit dtype that holds its values, never
    labelled with it; one that no tapejit dtype holds (uint64, complex) raises."""
    dt = _BY_NUMPY.get(array.dtype)
    if dt is None:
        dt = dtypes.data_dtype(array.dtype)
        array = array.astype(dt.np)
    elif dt is _FLOAT32 and array.dtype.metadata is not None:
        # bfloat16 storage: a NumPy computation on it gave float32 values, rounded here
        dt = dtypes.bfloat16
        if not dtypes.is_bfloat16_rounded(array):
            array = dtypes.round_bfloat16(array)
    t = _new(Tensor)
    t._tape = None
    t._off = 0
    t._data = array
    t._shape = array.shape
    t._numel = array.size
    t._dtype = dt
    t._rg = rg
    # Set here, not left unset: reading an unset slot with a default (getattr) raises and
    # catches AttributeError, and leaves are read on every load and every backward.
    t._version = 0
    t._grad = None
    t._hooks = None
    if _state.trace is not None:   # made while tracing: its value is the trace's own
        _state.trace.note_created(t)
    return t


_NON_LEAF_GRAD = (
    "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. Its .grad "
    "attribute won't be populated during autograd.backward(). If you indeed want the .grad "
    "field to be populated for a non-leaf Tensor, use .retain_grad() on the non-leaf Tensor. "
    "If you access the non-leaf Tensor by mistake, make sure you access the leaf Tensor "
    "instead.")


class Tensor:
    __slots__ = ("_tape", "_off", "_data", "_shape", "_numel", "_dtype", "_rg", "_grad",
                 "_version", "_hooks", "_retains", "_node", "_view", "__weakref__")

    # Make NumPy defer to our reflected operators (``ndarray * tensor``) and ufunc hooks.
    __array_priority__ = 1000

    def __init__(self, *data, dtype=None):
        """``Tensor(data)`` or ``Tensor(*sizes)``: torch's legacy constructor, whose result
        has the default float dtype whatever ``data`` holds (``tensor()`` infers it)."""
        arr = above.legacy_array(data, dtype)
        self._tape = None
        self._off = 0
        self._data = arr
        self._shape = arr.shape
        self._numel = arr.size
        self._dtype = dtypes.from_numpy_dtype(arr.dtype)
        self._rg = False
        self._version = 0
        self._grad = None
        self._hooks = None

    # ---- values ----------------------------------------------------------------------------

    def _value(self):
        """The value as a NumPy array (a view; computes pending records first)."""
        tape = self._tape
        if tape is None:
            if _state.trace is not None and id(self) not in _state.trace.readable:
                _state.trace.on_read(self)   # a tensor from outside the function: read live only by loads
            return self._data
        if tape.tracing:   # tj.compile: a value read now would be frozen into every replay
            tape.trace.on_read(self)
        try:
            tape.flush()
        except MemoryError:
            # An op recorded after this tensor could not get memory and was dropped (see
            # Tape._drop_unallocatable): this tensor's value can still be computed.
            if tape.broken is None or self._off >= tape.broken[0][self._dtype.arena]:
                raise
            tape.flush()
        return tape.value(self)

    def _read(self):
        """The value for Python to read (``item``, ``numpy``, printing): a point where no
        expression is half-recorded, so a tape due for retirement can be retired."""
        v = self._value()
        tape = self._tape
        if tape is not None and (tape.n > 64 or due_by_size(tape)):
            retire_if_due(tape, 5)  # this tensor, the local, the thread state, the call, its argument
        return v

    def numpy(self, force=False):
        if self._rg and not force:
            raise RuntimeError(
                "Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
        if self._dtype is dtypes.bfloat16:
            raise TypeError("Got unsupported ScalarType BFloat16")   # NumPy has no bfloat16, as torch
        return self._read()

    def __array__(self, dtype=None, copy=None):
        if self._rg:   # as torch: NumPy would silently cut the tensor out of the graph
            raise RuntimeError(
                "Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
        if self._dtype is dtypes.bfloat16:
            raise TypeError("Got unsupported ScalarType BFloat16")
        v = self._read()
        if dtype is not None:
            v = v.astype(dtype, copy=False)
        return v.copy() if copy else v

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return above.array_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return above.array_function(func, types, args, kwargs)

    def item(self):
        if self._numel != 1:
            raise RuntimeError(
                f"a Tensor with {self._numel} elements cannot be converted to Scalar")
        return self._read().reshape(-1)[0].item()

    def tolist(self):
        return self._read().tolist()

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __index__(self):
        if self._dtype.is_floating_point:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def __bool__(self):
        if self._numel != 1:
            raise RuntimeError(
                "Boolean value of Tensor with more than one value is ambiguous")
        return bool(self.item())

    def __len__(self):
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def __hash__(self):
        return id(self)

    # ---- metadata --------------------------------------------------------------------------

    @property
    def shape(self):
        return Size(self._shape)

    def size(self, dim=None):
        if dim is None:
            return Size(self._shape)
        return self._shape[wrap_dim(dim, len(self._shape), "size")]

    @property
    def dtype(self):
        return self._dtype

    @property
    def ndim(self):
        return len(self._shape)

    def dim(self):
        return len(self._shape)

    def numel(self):
        return self._numel

    def nelement(self):
        return self._numel

    @property
    def device(self):
        return CPU

    @property
    def is_cuda(self):
        return False

    def is_floating_point(self):
        return self._dtype.is_floating_point

    def element_size(self):
        return self._dtype.itemsize

    @property
    def data(self):
        """The value without history, sharing memory but not the version counter (as
        ``torch``'s ``.data``): an in-place change through it is seen by the graph."""
        return above.share_value(_concrete(self._value()), self, False)

    @data.setter
    def data(self, other):
        """Swap in another value, shape and dtype included (as torch), sharing its memory."""
        if self._tape is not None:
            raise RuntimeError("tapejit can only assign .data of a leaf tensor")
        if isinstance(other, np.ndarray):   # beyond torch: a NumPy array, shared as is
            value, dt = other, dtypes.from_numpy_dtype(other.dtype)
        elif isinstance(other, Tensor):
            value, dt = other._value(), other._dtype
        else:
            raise TypeError(f"Variable data has to be a tensor, but got {type(other).__name__}")
        if self._rg and not dt.is_floating_point:
            raise RuntimeError("data set to a tensor that requires gradients must be floating point or complex dtype")
        _before_write(self)
        above.leave_shared(self)
        self._data = value
        self._shape = value.shape
        self._numel = value.size
        self._dtype = dt

    # ---- autograd attributes ---------------------------------------------------------------

    @property
    def requires_grad(self):
        return self._rg

    @requires_grad.setter
    def requires_grad(self, flag):
        if flag and not self._dtype.is_floating_point:
            raise RuntimeError("only Tensors of floating point and complex dtype can require gradients")
        self.requires_grad_(flag)

    def requires_grad_(self, requires_grad=True):
        if self._tape is not None and self._rg and not requires_grad:
            raise RuntimeError(
                "you can only change requires_grad flags of leaf variables. If you want to use a "
                "computed variable in a subgraph that doesn't require differentiation use "
                "var_no_grad = var.detach().")
        if requires_grad and not self._dtype.is_floating_point:
            raise RuntimeError("only Tensors of floating point dtype can require gradients")
        if requires_grad and self._dtype.narrow:
            raise RuntimeError(narrow_grad_error(self._dtype))
        self._rg = bool(requires_grad)
        return self

    @property
    def is_leaf(self):
        return self._tape is None or not self._rg

    @property
    def grad(self):
        if self._tape is not None and self._rg and not getattr(self, "_retains", False):
            if _state.trace is not None and id(self) in _state.trace.placeholders:
                return _state.trace.placeholders[id(self)].grad   # an argument, traced on the tape
            warnings.warn(_NON_LEAF_GRAD, UserWarning, stacklevel=2)
            return None
        g = getattr(self, "_grad", None)
        if _state.trace is not None:
            _state.trace.note_grad_read(self, g)
        return g

    @grad.setter
    def grad(self, value):
        if value is not None and not isinstance(value, Tensor):
            raise TypeError(f"assigned grad expected to be a Tensor or None but got grad of type {type(value).__name__}")
        if value is not None and value._shape != self._shape:
            raise RuntimeError(
                f"assigned grad has data of a different size: got {list(value._shape)}, "
                f"expected {list(self._shape)}")
        if _state.trace is not None:
            _state.trace.on_set_grad(self, value)
        self._grad = value

    @property
    def retains_grad(self):
        return getattr(self, "_retains", False)

    def retain_grad(self):
        if self._tape is None or not self._rg:
            if not self._rg:
                raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
            return  # leaves keep .grad anyway
        self._retains = True
        tape = self._tape
        if tape.retained is None:
            tape.retained = {}
        tape.retained[(self._dtype.arena, self._off)] = self

    def register_hook(self, hook):
        """Call ``hook(grad)`` when this tensor's gradient is computed; a returned tensor
        replaces the gradient.  Returns a handle with ``remove()``."""
        if not self._rg:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        hooks = getattr(self, "_hooks", None)
        if hooks is None:
            hooks = self._hooks = []
        hooks.append(hook)
        if self._tape is not None:
            tape = self._tape
            if tape.hooks is None:
                tape.hooks = {}
            tape.hooks[(self._dtype.arena, self._off)] = self
        return _HookHandle(hooks, hook)

    @property
    def grad_fn(self):
        if self._tape is None or not self._rg:
            return None
        return above.node_for(self)

    @property
    def _version_counter(self):
        return getattr(self, "_version", 0)

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        above.backward([self], None if gradient is None else [gradient], retain_graph,
                       create_graph, inputs=inputs)

    def detach(self):
        """Same value, no history: a new leaf sharing the value and the version counter (the
        leaf's array, or a view of the arena slot; see ``inplace._Shared``)."""
        tape = self._tape
        if tape is not None and tape.tracing:   # tj.compile: the slot itself, recomputed by replays
            return _taped(tape, self._off, self._shape, self._numel, self._dtype, False)
        return above.share_value(_concrete(self._value()), self, True)

    def detach_(self):
        """``detach()`` in place: this tensor becomes a leaf without history; records that
        saved its value still see in-place changes of it (one version counter)."""
        return above.detach_in_place(self)

    # ---- conversions -----------------------------------------------------------------------

    def to(self, *args, **kwargs):
        dt = kwargs.get("dtype")
        _check_device(kwargs.get("device"))
        for a in args:
            if isinstance(a, (dtypes.dtype, type, np.dtype)):
                dt = a
            elif isinstance(a, Tensor):
                dt = a._dtype
            else:
                _check_device(a)    # a device: the CPU, or an error
        if dt is None:
            return self
        return above.cast(self, dtypes.as_dtype(dt))

    def type(self, dtype=None, non_blocking=False, **kwargs):
        """torch's legacy type names: ``x.type()`` is ``'torch.FloatTensor'`` (the strings
        scripts compare with); ``x.type('torch.DoubleTensor')``, ``x.type(tj.float64)`` and
        ``x.type(tj.DoubleTensor)`` convert (``self`` when the type is the same)."""
        if dtype is None:
            dtype = kwargs.pop("dtype", None)
        if kwargs:
            raise TypeError(f"type() got an unexpected keyword argument '{next(iter(kwargs))}'")
        if dtype is None:
            return f"torch.{dtypes.SCALAR_TYPE_NAMES[self._dtype.name]}Tensor"
        dt = _legacy_type_dtype(dtype)
        if dt is self._dtype:
            return self
        return above.cast(self, dt)

    def type_as(self, other):
        if not isinstance(other, Tensor):
            raise TypeError(f"type_as(): argument 'other' (position 1) must be Tensor, not {type_name(other)}")
        return self.type(other._dtype)

    def float(self):
        return self.to(dtypes.float32)

    def double(self):
        return self.to(dtypes.float64)

    def long(self):
        return self.to(dtypes.int64)

    def int(self):
        return self.to(dtypes.int32)

    def short(self):
        return self.to(dtypes.int16)

    def char(self):
        return self.to(dtypes.int8)

    def byte(self):
        return self.to(dtypes.uint8)

    def half(self):
        return self.to(dtypes.float16)

    def bfloat16(self):
        return self.to(dtypes.bfloat16)

    def bool(self):
        return self.to(dtypes.bool_)

    def cpu(self):
        return self

    def cuda(self, device=None, non_blocking=False, memory_format=None):
        """Raises a CPU-only torch build's error: tapejit has no CUDA device."""
        if device is None:
            device = "cuda"
        elif not isinstance(device, int) and _as_device(device).type != "cuda":
            raise RuntimeError("Invalid device, must be cuda device")
        _check_device(device)

    def contiguous(self, memory_format=None):
        return above.contiguous(self)

    def is_contiguous(self, memory_format=None):
        return above.is_contiguous(self)

    # ---- printing --------------------------------------------------------------------------

    def __repr__(self):
        return tensor_repr(self)

    __str__ = __repr__

    def __format__(self, spec):
        if self._numel == 1 and not self._shape:
            return format(self.item(), spec)
        return repr(self)

    def __iter__(self):
        if not self._shape:
            raise TypeError("iteration over a 0-d tensor")
        if self._tape is None and not self._rg:
            if self._dtype is dtypes.bfloat16:   # 0-d views: NumPy's scalars would drop bfloat16's storage tag
                return iter([_concrete(self._data[i, ...]) for i in range(self._shape[0])])
            return iter([_concrete(row) for row in self._data])
        return iter(above.rows(self))  # torch iterates by unbind: one UnbindBackward0 per row

    def __reduce__(self):
        return above.reduce_tensor(self)

    def __deepcopy__(self, memo):
        if self._tape is not None:
            raise RuntimeError(
                "Only Tensors created explicitly by the user (graph leaves) support the deepcopy protocol")
        t = _concrete(self._data.copy(), self._rg)
        g = getattr(self, "_grad", None)
        if g is not None:
            t._grad = _concrete(g._value().copy())
        memo[id(self)] = t
        return t


def narrow_grad_error(dt):
    return (f"tapejit: {dt} tensors cannot require gradients (tapejit stores {dt} values but computes "
            f"them in float32 without a tape); train in float32 and convert with .to({dt}) for storage")


def _legacy_type_dtype(spec):
    """The dtype a ``Tensor.type()`` argument names: a dtype, a typed-tensor class
    (``tj.FloatTensor``) or torch's type string (``'torch.FloatTensor'``)."""
    if isinstance(spec, dtypes.dtype):
        return spec
    if isinstance(spec, type):
        typed = getattr(spec, "dtype", None)
        if isinstance(typed, dtypes.dtype):
            return typed
        name = spec.__qualname__ if spec.__module__ == "builtins" else f"{spec.__module__}.{spec.__qualname__}"
        raise ValueError(f"invalid type: {name!r}")
    if not isinstance(spec, str):
        raise TypeError("dtype must be a type, str, or dtype object")
    module, _, kind = spec.rpartition(".")
    if module in ("torch.cuda", "tapejit.cuda"):
        raise RuntimeError("Cannot initialize CUDA without ATen_cuda library (tapejit runs on the CPU "
                           "only, as a CPU-only PyTorch build)")
    if module in ("torch", "tapejit"):
        for name, scalar_type in dtypes.SCALAR_TYPE_NAMES.items():
            if kind == scalar_type + "Tensor":
                return getattr(dtypes, "bool_" if name == "bool" else name)
    raise ValueError(f"invalid type: {spec!r}")


def _rebuild(array, rg):
    """Files saved before tapejit's array records (NumPy's pickle; weights_only=False)."""
    return _concrete(array, rg)


class _HookHandle:
    def __init__(self, hooks, hook):
        self._hooks = hooks
        self._hook = hook

    def remove(self):
        if self._hook in self._hooks:
            self._hooks.remove(self._hook)



def _before_write(t):
    """A leaf is about to change in place: bump its version and let tapes notice."""
    above.note_leaf_write(t)
