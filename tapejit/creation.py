"""Tensor creation functions, with torch's dtype inference (Python floats -> default
float dtype, NumPy float64 arrays stay float64, ints -> int64)."""
import builtins
import numbers

import numpy as np

from tapejit import dtypes
from tapejit.api import export
from tapejit.device import check as _check_device
from tapejit.tape import state as _state
from tapejit.tensor import Size, Tensor, _concrete

_rng = [np.random.default_rng()]


def _infer_np_dtype(data):
    """NumPy dtype torch would give a nested Python sequence of scalars (the default float
    dtype when it holds none)."""
    kind = [None]

    def walk(x):
        if isinstance(x, (list, tuple)):
            for e in x:
                walk(e)
        elif isinstance(x, Tensor):
            if x._dtype.is_floating_point:
                kind[0] = float
            elif x._dtype is dtypes.int64 and kind[0] in (None, bool):
                kind[0] = int
            elif kind[0] is None:
                kind[0] = bool
        elif isinstance(x, (builtins.bool, np.bool_)):
            if kind[0] is None:
                kind[0] = bool
        elif isinstance(x, (numbers.Integral,)):
            if kind[0] in (None, bool):
                kind[0] = int
        elif isinstance(x, numbers.Real):
            kind[0] = float
        else:
            raise TypeError(f"tensor(): could not infer dtype of {type(x).__name__}")
    walk(data)
    if kind[0] is None or kind[0] is float:
        return dtypes.get_default_dtype().np
    return np.int64 if kind[0] is int else np.bool_


def _to_array(data, dtype):
    """A fresh NumPy array of a tapejit dtype from any tensor-like ``data``."""
    dt = dtypes.as_dtype(dtype) if dtype is not None else None
    if isinstance(data, Tensor):
        arr = np.array(data._value())
    elif isinstance(data, np.ndarray):
        arr = data
        if dt is None:
            dt = dtypes.as_dtype(arr.dtype)
    elif isinstance(data, np.generic):
        arr = np.asarray(data)
        if dt is None:
            dt = dtypes.as_dtype(arr.dtype)
    else:
        if dt is None:
            dt = dtypes.from_numpy_dtype(np.dtype(_infer_np_dtype(data)))
        if isinstance(data, (list, tuple)):
            data = _unwrap(data)
        arr = np.asarray(data)
    if dt is None:
        dt = dtypes.as_dtype(arr.dtype)
    return np.array(arr, dtype=dt.np, copy=True, order="C")


def legacy_array(args, dtype):
    """The array of ``Tensor(*args)``: data, or sizes (zeros, where torch leaves the memory
    uninitialized), in ``dtype`` or the default float dtype."""
    dt = dtypes.as_dtype(dtype) if dtype is not None else dtypes.get_default_dtype()
    if not args:
        return np.zeros(0, dt.np)
    if len(args) == 1 and isinstance(args[0], Size):
        args = tuple(args[0])
    if all(type(a) is int for a in args):
        if any(s < 0 for s in args):
            raise RuntimeError(f"Tensor(): negative dimension in sizes {list(args)}")
        return np.zeros(args, dt.np)
    if len(args) > 1:
        raise TypeError(f"Tensor(): expected one sequence of data or integer sizes, got "
                        f"({', '.join(type(a).__name__ for a in args)})")
    return _to_array(args[0], dt)


class _TypedTensor(type):
    """``FloatTensor`` and its kin: constructors of one dtype, and ``isinstance`` tests of
    a tensor's dtype, as in torch."""

    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor) and obj._dtype is cls.dtype

    def __call__(cls, *data):
        return Tensor(*data, dtype=cls.dtype)


FloatTensor = _TypedTensor("FloatTensor", (), {"dtype": dtypes.float32})
DoubleTensor = _TypedTensor("DoubleTensor", (), {"dtype": dtypes.float64})
LongTensor = _TypedTensor("LongTensor", (), {"dtype": dtypes.int64})
BoolTensor = _TypedTensor("BoolTensor", (), {"dtype": dtypes.bool_})


def _unwrap(seq):
    return [_unwrap(e) if isinstance(e, (list, tuple)) else (e._value() if isinstance(e, Tensor) else e)
            for e in seq]


def _leaf(arr, requires_grad):
    t = _concrete(arr)
    if requires_grad:
        if not t._dtype.is_floating_point:
            raise RuntimeError("Only Tensors of floating point and complex dtype can require gradients")
        t._rg = True
    if _state.trace is not None:   # made inside a compiled function: free to change in place
        _state.trace.note_created(t)
    return t


def tensor(data, dtype=None, device=None, requires_grad=False, pin_memory=False):
    _check_device(device)
    return _leaf(_to_array(data, dtype), requires_grad)


def as_tensor(data, dtype=None, device=None):
    _check_device(device)
    if isinstance(data, Tensor) and (dtype is None or dtypes.as_dtype(dtype) is data._dtype):
        return data
    if isinstance(data, np.ndarray) and data.dtype in (np.float64, np.float32, np.int64, np.bool_) \
            and (dtype is None or dtypes.as_dtype(dtype).np == data.dtype) and data.flags.c_contiguous:
        return _shared(data)
    return tensor(data, dtype=dtype)


def _shared(array):
    """A tensor on the caller's own array: while tracing, not a constant of the trace (its
    memory can change between calls), so replays load it live."""
    t = _concrete(array)
    if _state.trace is not None:
        _state.trace.note_external(t)
    return t


def from_numpy(array):
    """Shares memory with ``array`` (which must be float32/64, int64 or bool)."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(array).__name__})")
    if array.dtype not in (np.float64, np.float32, np.int64, np.bool_):
        raise TypeError(
            f"can't convert np.ndarray of type numpy.{array.dtype}. The only supported types are: "
            "float64, float32, int64 and bool.")
    return _shared(np.ascontiguousarray(array))


def _shape_arg(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    shape = tuple(int(s) for s in size)
    for s in shape:
        if s < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {s}: {list(shape)}")
    return shape


def _float_dtype(dtype):
    return dtypes.as_dtype(dtype) if dtype is not None else dtypes.get_default_dtype()


def zeros(*size, dtype=None, device=None, requires_grad=False, out=None):
    _check_device(device)
    return _leaf(np.zeros(_shape_arg(size), _float_dtype(dtype).np), requires_grad)


def ones(*size, dtype=None, device=None, requires_grad=False, out=None):
    _check_device(device)
    return _leaf(np.ones(_shape_arg(size), _float_dtype(dtype).np), requires_grad)


def empty(*size, dtype=None, device=None, requires_grad=False, out=None):
    _check_device(device)
    return _leaf(np.zeros(_shape_arg(size), _float_dtype(dtype).np), requires_grad)


def full(size, fill_value, dtype=None, device=None, requires_grad=False):
    _check_device(device)
    if dtype is None:
        if isinstance(fill_value, builtins.bool):
            dtype = dtypes.bool_
        elif isinstance(fill_value, numbers.Integral):
            dtype = dtypes.int64
    return _leaf(np.full(_shape_arg((size,)), fill_value, _float_dtype(dtype).np), requires_grad)


@export(method=True, function=False)
def new_tensor(self, data, dtype=None, device=None, requires_grad=False):
    """A tensor of ``data`` with this tensor's dtype unless ``dtype`` is given."""
    return tensor(data, dtype=_like(self, dtype), device=device, requires_grad=requires_grad)


@export(method=True, function=False)
def new_zeros(self, *size, dtype=None, device=None, requires_grad=False):
    return zeros(*size, dtype=_like(self, dtype), device=device, requires_grad=requires_grad)


@export(method=True, function=False)
def new_ones(self, *size, dtype=None, device=None, requires_grad=False):
    return ones(*size, dtype=_like(self, dtype), device=device, requires_grad=requires_grad)


@export(method=True, function=False)
def new_empty(self, *size, dtype=None, device=None, requires_grad=False):
    return empty(*size, dtype=_like(self, dtype), device=device, requires_grad=requires_grad)


@export(method=True, function=False)
def new_full(self, size, fill_value, dtype=None, device=None, requires_grad=False):
    return full(size, fill_value, dtype=_like(self, dtype), device=device, requires_grad=requires_grad)


def _like(t, dtype):
    return dtypes.as_dtype(dtype) if dtype is not None else t._dtype


def zeros_like(input, dtype=None, device=None, requires_grad=False):
    _check_device(device)
    return _leaf(np.zeros(input._shape, _like(input, dtype).np), requires_grad)


def ones_like(input, dtype=None, device=None, requires_grad=False):
    _check_device(device)
    return _leaf(np.ones(input._shape, _like(input, dtype).np), requires_grad)


def empty_like(input, dtype=None, device=None, requires_grad=False):
    _check_device(device)
    return zeros_like(input, dtype, requires_grad=requires_grad)


def full_like(input, fill_value, dtype=None, device=None, requires_grad=False):
    _check_device(device)
    return _leaf(np.full(input._shape, fill_value, _like(input, dtype).np), requires_grad)


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad=False):
    _check_device(device)
    if end is None:
        start, end = 0, start
    args = (start, end, step)
    if dtype is None:
        is_int = all(isinstance(a, numbers.Integral) for a in args)
        dtype = dtypes.int64 if is_int else dtypes.get_default_dtype()
    dt = dtypes.as_dtype(dtype)
    return _leaf(np.arange(start, end, step, dtype=np.float64).astype(dt.np), requires_grad)


def linspace(start, end, steps, dtype=None, device=None, requires_grad=False):
    _check_device(device)
    dt = _float_dtype(dtype)
    return _leaf(np.linspace(start, end, steps, dtype=np.float64).astype(dt.np), requires_grad)


def eye(n, m=None, dtype=None, device=None, requires_grad=False):
    _check_device(device)
    return _leaf(np.eye(n, m, dtype=_float_dtype(dtype).np), requires_grad)


def manual_seed(seed):
    _rng[0] = np.random.default_rng(seed)
    return _rng[0]


def rng():
    """The generator behind every random op (tj.compile refuses random ops in a trace)."""
    if _state.trace is not None:
        from tapejit.replay.trace import refuse_random, _caller
        refuse_random(_caller()[0])
    return _rng[0]


def rand(*size, dtype=None, device=None, requires_grad=False, generator=None):
    _check_device(device)
    dt = _float_dtype(dtype)
    return _leaf(rng().random(_shape_arg(size)).astype(dt.np), requires_grad)


def randn(*size, dtype=None, device=None, requires_grad=False, generator=None):
    _check_device(device)
    dt = _float_dtype(dtype)
    return _leaf(rng().standard_normal(_shape_arg(size)).astype(dt.np), requires_grad)


def randint(low, high=None, size=(), dtype=None, device=None, requires_grad=False):
    _check_device(device)
    if high is None:
        low, high = 0, low
    return _leaf(rng().integers(low, high, size=tuple(size)).astype(np.int64), False)


def randperm(n, dtype=None, device=None):
    _check_device(device)
    return _concrete(rng().permutation(n).astype(np.int64))


def rand_like(input, dtype=None, requires_grad=False):
    return rand(*input._shape, dtype=dtype or input._dtype, requires_grad=requires_grad)


def randn_like(input, dtype=None, requires_grad=False):
    return randn(*input._shape, dtype=dtype or input._dtype, requires_grad=requires_grad)
