"""Tensor creation functions, with torch's dtype inference (Python floats -> default
float dtype, NumPy float64 arrays stay float64, ints -> int64)."""
import builtins
import math
import numbers
import warnings

import numpy as np

from tapejit import dtypes
from tapejit.api import export, type_name
from tapejit.device import check as _check_device
from tapejit.tape import state as _state
from tapejit.tensor import Size, Tensor, _concrete, narrow_grad_error, provide as _provide_to_tensor

_rng = [np.random.default_rng()]


_SEQUENCES = (list, tuple, range)
_INT64_MIN, _INT64_END = -2 ** 63, 2 ** 63
_OVERFLOW = "Overflow when unpacking long long"
_FLOAT32_MAX = float(np.finfo(np.float32).max)


class _Scan:
    """What a walk over nested data found: the promoted dtype of its scalars (torch's
    inference: Python float -> default float dtype, int -> int64, bool -> bool, a tensor
    or NumPy scalar -> its own), and whether it holds tensors (read as their one value)
    or Python ints outside int64."""
    __slots__ = ("dt", "tensors", "big_int", "other_sequences")

    def __init__(self):
        self.dt = None
        self.tensors = False
        self.big_int = False
        self.other_sequences = False   # a deque, array.array, ...: read as a list

    def add(self, dt):
        self.dt = dt if self.dt is None else dtypes.promote(self.dt, dt)


def _other_sequence(x):
    """Whether torch reads ``x`` as a sequence, ``x`` being no list, tuple or range: what
    can be indexed and has a length and is no dict (``collections.deque``, ``array.array``,
    ``bytearray``, ``memoryview``, a class with ``__len__`` and ``__getitem__``), as
    CPython's sequence check.  Iterators, sets and dicts are not (torch: "Could not infer
    dtype of generator")."""
    cls = type(x)
    return (hasattr(cls, "__getitem__") and hasattr(cls, "__len__")
            and not isinstance(x, (str, bytes, dict, Tensor, np.ndarray, np.generic)))


def _nested_shape(data):
    """The shape torch reads from nested sequences: each dim's length from its first
    element (the rest must match, see ``_scan``)."""
    shape = []
    x = data
    while True:
        if isinstance(x, _SEQUENCES):
            shape.append(len(x))
            if not len(x):
                return shape
            x = x[0]
        elif isinstance(x, np.ndarray):
            shape.extend(x.shape)
            return shape
        elif _other_sequence(x):
            x = list(x)
        else:
            return shape


def _scan(x, d, shape, scan):
    if d < len(shape):
        if isinstance(x, np.ndarray):
            if x.shape != tuple(shape[d:]):
                raise ValueError(f"expected sequence of shape {list(shape[d:])} at dim {d} (got {list(x.shape)})")
            scan.add(dtypes.data_dtype(x.dtype))
            return
        if isinstance(x, Tensor) and x._shape:   # a tensor where a sequence goes: its rows, as torch
            if x._shape != tuple(shape[d:]):
                raise ValueError(f"expected sequence of shape {list(shape[d:])} at dim {d} (got {list(x._shape)})")
            scan.add(x._dtype)
            scan.tensors = True
            return
        if not isinstance(x, _SEQUENCES) and _other_sequence(x):
            x = list(x)
            scan.other_sequences = True
        if not isinstance(x, _SEQUENCES):
            if isinstance(x, str):
                raise ValueError("too many dimensions 'str'")
            raise TypeError(f"not a sequence: expected a sequence of length {shape[d]} at dim {d}, "
                            f"got {_type_name(x)}")
        if len(x) != shape[d]:
            raise ValueError(f"expected sequence of length {shape[d]} at dim {d} (got {len(x)})")
        if d == len(shape) - 1:
            kinds = set(map(type, x))
            if kinds <= {float, int, builtins.bool}:   # the common case, at C speed
                if float in kinds:
                    scan.add(dtypes.get_default_dtype())
                if int in kinds:
                    scan.add(dtypes.int64)
                    ints = x if len(kinds) == 1 else [e for e in x if type(e) is int]
                    if max(ints) >= _INT64_END or min(ints) < _INT64_MIN:
                        scan.big_int = True
                if builtins.bool in kinds:
                    scan.add(dtypes.bool_)
                return
        for e in x:
            _scan(e, d + 1, shape, scan)
        return
    _scan_scalar(x, d, scan)


def _scan_scalar(x, d, scan):
    if isinstance(x, (builtins.bool, np.bool_)):
        scan.add(dtypes.bool_)
    elif isinstance(x, int):
        scan.add(dtypes.int64)
        if not _INT64_MIN <= x < _INT64_END:
            scan.big_int = True
    elif isinstance(x, float):
        scan.add(dtypes.float64 if isinstance(x, np.float64) else dtypes.get_default_dtype())
    elif isinstance(x, np.generic):
        if x.dtype == np.uint64:   # as torch ("an integer is required"), never a wrapped value
            raise TypeError("tensor(): a numpy.uint64 scalar cannot be converted (tapejit has no uint64 "
                            "dtype); use int(x)")
        scan.add(dtypes.data_dtype(x.dtype))
    elif isinstance(x, Tensor):
        if x._numel != 1:
            raise ValueError("only one element tensors can be converted to Python scalars")
        if x._rg:
            warnings.warn("Converting a tensor with requires_grad=True to a scalar may lead to unexpected "
                          "behavior. Consider using tensor.detach() first.", UserWarning, stacklevel=4)
        scan.add(x._dtype)
        scan.tensors = True
    elif isinstance(x, np.ndarray):   # 0-d
        scan.add(dtypes.data_dtype(x.dtype))
    elif isinstance(x, numbers.Integral):
        scan.add(dtypes.int64)
        if not _INT64_MIN <= int(x) < _INT64_END:
            scan.big_int = True
    elif isinstance(x, numbers.Real):
        scan.add(dtypes.get_default_dtype())
    elif isinstance(x, _SEQUENCES) or _other_sequence(x):
        raise TypeError(f"expected a number at dim {d}, got {_type_name(x)} (the sequences of one dim "
                        "must all be as deep)")
    elif isinstance(x, str):
        raise ValueError("too many dimensions 'str'")
    elif isinstance(x, complex):
        raise TypeError("tensor(): tapejit has no complex dtype")
    else:
        raise RuntimeError(f"Could not infer dtype of {_type_name(x)}")


def _type_name(x):
    return type_name(x)


def _nested_array(data, dt):
    """``data``, a Python scalar or nested sequence, as a fresh array of dtype ``dt`` (or
    the one torch infers), checked as torch checks it: ragged sequences, a value int64
    cannot hold, a multi-element tensor among the scalars are errors, never garbage."""
    shape = _nested_shape(data)
    scan = _Scan()
    _scan(data, 0, shape, scan)
    if dt is None:
        dt = scan.dt or dtypes.get_default_dtype()
    if scan.big_int and dt is dtypes.int64:
        raise ValueError(_OVERFLOW)
    if scan.tensors or scan.other_sequences:
        data = _unwrap(data, len(shape))
    if dt in dtypes.INTEGER_DTYPES and dt is not dtypes.int64:
        # Read wide, then checked: torch refuses a value the narrower type cannot hold
        with np.errstate(invalid="ignore"):
            wide = np.array(data, dtype=np.float64 if scan.dt is not None and scan.dt.is_floating_point
                            else np.int64)
        info = np.iinfo(dt.np)
        if wide.size and not (info.min <= np.trunc(wide.min()) and np.trunc(wide.max()) <= info.max):
            raise RuntimeError(f"value cannot be converted to type {dt.name} without overflow")
        return wide.astype(dt.np)
    if dt is dtypes.int64 and scan.dt is not None and scan.dt.is_floating_point:
        # NumPy converts each float itself, refusing NaN, inf and values past int64
        try:
            return np.array(data, dtype=np.int64)
        except (OverflowError, ValueError):
            raise RuntimeError("value cannot be converted to type int64 without overflow") from None
    if dt.narrow:
        with np.errstate(over="ignore"):   # past float16's range is inf, silently as torch
            return np.array(data, dtype=dt.np)
    return np.array(data, dtype=dt.np)


def _array_as(arr, dt, fn):
    """A fresh copy of NumPy array ``arr`` in dtype ``dt`` (default: the tapejit dtype of
    its data); floats to int64 convert as torch's (C) cast does, NaN included."""
    if dt is None or (dt is dtypes.int64 and arr.dtype == np.uint64):
        found = dtypes.data_dtype(arr.dtype, fn)
        dt = dt or found
    with np.errstate(invalid="ignore", over="ignore"):
        return np.array(arr, dtype=dt.np, copy=True, order="C")


def _to_array(data, dtype, fn="tensor"):
    """A fresh NumPy array of a tapejit dtype from any tensor-like ``data``: a tensor, a
    NumPy array or scalar, a Python number or a nested sequence of them."""
    dt = dtypes.as_dtype(dtype, fn) if dtype is not None else None
    if isinstance(data, Tensor):
        with np.errstate(invalid="ignore", over="ignore"):   # float -> int64 as torch's C cast
            return np.array(data._value(), dtype=(dt or data._dtype).np, copy=True, order="C")
    if isinstance(data, np.ndarray):
        return _array_as(data, dt, fn)
    if not isinstance(data, (numbers.Number, np.generic) + _SEQUENCES) and not _other_sequence(data):
        raise TypeError(f"expected a Tensor, a number or a sequence of numbers, not {_type_name(data)}")
    return _nested_array(data, dt)


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
IntTensor = _TypedTensor("IntTensor", (), {"dtype": dtypes.int32})
ShortTensor = _TypedTensor("ShortTensor", (), {"dtype": dtypes.int16})
CharTensor = _TypedTensor("CharTensor", (), {"dtype": dtypes.int8})
ByteTensor = _TypedTensor("ByteTensor", (), {"dtype": dtypes.uint8})
HalfTensor = _TypedTensor("HalfTensor", (), {"dtype": dtypes.float16})
BFloat16Tensor = _TypedTensor("BFloat16Tensor", (), {"dtype": dtypes.bfloat16})


def _unwrap(seq, ndim):
    """Nested lists of ``ndim`` dims with each tensor replaced by its value (its one element
    at the innermost dim, its rows, an array, above it) and each sequence by a list."""
    if isinstance(seq, Tensor):
        return seq._value() if ndim else seq._value().reshape(-1)[0]
    if not isinstance(seq, _SEQUENCES) and not (ndim and _other_sequence(seq)):
        return seq
    return [_unwrap(e, ndim - 1) for e in seq]


def _leaf(arr, requires_grad):
    t = _concrete(arr)
    if requires_grad:
        if not t._dtype.is_floating_point:
            raise RuntimeError("Only Tensors of floating point and complex dtype can require gradients")
        if t._dtype.narrow:
            raise RuntimeError(narrow_grad_error(t._dtype))
        t._rg = True
    if _state.trace is not None:   # made inside a compiled function: free to change in place
        _state.trace.note_created(t)
    return t


def tensor(data, dtype=None, device=None, requires_grad=False, pin_memory=False):
    _check_device(device)
    if isinstance(data, (str, bytes)):
        raise TypeError(f"tensor(): invalid data type '{type(data).__name__}'")
    if not isinstance(data, (Tensor, np.ndarray, numbers.Number, np.generic) + _SEQUENCES) \
            and not _other_sequence(data):
        raise RuntimeError(f"Could not infer dtype of {_type_name(data)}")
    return _leaf(_to_array(data, dtype), requires_grad)


def as_tensor(data, dtype=None, device=None):
    _check_device(device)
    if isinstance(data, Tensor) and (dtype is None or dtypes.as_dtype(dtype) is data._dtype):
        return data
    if isinstance(data, np.ndarray) and data.dtype in _SHAREABLE \
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


# NumPy dtypes whose arrays a tensor can share (bfloat16 has none in NumPy).
_SHAREABLE = tuple(np.dtype(d) for d in (np.float64, np.float32, np.float16, np.int64, np.int32, np.int16,
                                         np.int8, np.uint8, np.bool_))


def from_numpy(array):
    """Shares memory with ``array`` (which must be of a dtype tapejit has, bfloat16 aside)."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(array).__name__})")
    if array.dtype not in _SHAREABLE or array.dtype.metadata is not None:
        raise TypeError(
            f"can't convert np.ndarray of type numpy.{array.dtype}. The only supported types are: "
            "float64, float32, float16, int64, int32, int16, int8, uint8, and bool.")
    return _shared(np.ascontiguousarray(array))


def _shape_arg(size, fn):
    """The shape in ``fn(*size)``: ints, or one tuple, list or Size of them, as torch reads
    them (no float, bool or multi-element tensor silently taken for a size)."""
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = size[0]
        single = False
    else:
        single = len(size) == 1
    for s in size:
        if type(s) is not int or not _INT64_MIN <= s < _INT64_END:
            size = [_size_int(s, fn, i, single) for i, s in enumerate(size)]
            break
    shape = tuple(size)
    for s in shape:
        if s < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {s}: {list(shape)}")
    return shape


def _size_int(s, fn, i, single):
    """One size of a shape argument: an int, or an object standing for one (a NumPy
    integer, a one-element integer tensor); torch's TypeError for anything else."""
    if isinstance(s, Tensor):
        if not s._dtype.is_floating_point and s._dtype is not dtypes.bool_ and s._numel == 1:
            return int(s.item())
    elif not isinstance(s, (builtins.bool, np.bool_)) and hasattr(type(s), "__index__"):
        s = int(s.__index__())
        if not _INT64_MIN <= s < _INT64_END:
            raise TypeError(f"{fn}(): argument 'size' (position 1) failed to unpack the object at pos "
                            f"{i + 1} with error \"{_OVERFLOW}\"")
        return s
    if single:
        raise TypeError(f"{fn}(): argument 'size' (position 1) must be tuple of ints, not {_type_name(s)}")
    raise TypeError(f"{fn}(): argument 'size' (position 1) must be tuple of ints, but found element of "
                    f"type {_type_name(s)} at pos {i}")


def _float_dtype(dtype, fn=None):
    return dtypes.as_dtype(dtype, fn) if dtype is not None else dtypes.get_default_dtype()


def zeros(*size, dtype=None, device=None, requires_grad=False, out=None):
    _check_device(device)
    return _leaf(np.zeros(_shape_arg(size, 'zeros'), _float_dtype(dtype, 'zeros').np), requires_grad)


def ones(*size, dtype=None, device=None, requires_grad=False, out=None):
    _check_device(device)
    return _leaf(np.ones(_shape_arg(size, 'ones'), _float_dtype(dtype, 'ones').np), requires_grad)


def empty(*size, dtype=None, device=None, requires_grad=False, out=None):
    _check_device(device)
    return _leaf(np.zeros(_shape_arg(size, 'empty'), _float_dtype(dtype, 'empty').np), requires_grad)


def full(size, fill_value, dtype=None, device=None, requires_grad=False):
    _check_device(device)
    shape = _shape_arg((size,), "full")
    return _leaf(_filled(shape, fill_value, dtype, None, "full"), requires_grad)


def _filled(shape, fill_value, dtype, like, fn):
    """``np.full`` of torch's ``full``: ``fill_value`` must be a number (or a 0-d tensor),
    and one its dtype cannot hold (NaN or 2**63 as int64, 1e39 as float32) is torch's
    RuntimeError, not a wrapped value."""
    if isinstance(fill_value, Tensor) and not fill_value._shape:
        value_dt = fill_value._dtype
        fill_value = fill_value.item()
    elif isinstance(fill_value, (numbers.Real, np.bool_)) and not isinstance(fill_value, np.ndarray):
        if isinstance(fill_value, (builtins.bool, np.bool_)):
            value_dt = dtypes.bool_ if isinstance(fill_value, builtins.bool) else None
        elif isinstance(fill_value, numbers.Integral):
            value_dt = dtypes.int64
        else:
            value_dt = None
    elif isinstance(fill_value, complex):
        raise TypeError(f"{fn}(): tapejit has no complex dtype for fill_value {fill_value!r}")
    else:
        raise TypeError(f"{fn}(): argument 'fill_value' (position 2) must be Number, not {_type_name(fill_value)}")
    if dtype is not None:
        dt = dtypes.as_dtype(dtype, fn)
    else:
        dt = like or value_dt or dtypes.get_default_dtype()
    if dt is dtypes.int64 or dt in dtypes.INTEGER_DTYPES:
        v = fill_value
        info = np.iinfo(dt.np)
        if not (math.isfinite(v) if isinstance(v, float) else True) or not info.min <= int(v) <= info.max:
            raise RuntimeError(f"value cannot be converted to type {dt.name}_t without overflow")
    elif dt is dtypes.float32 and isinstance(fill_value, numbers.Real) and not isinstance(fill_value, builtins.bool):
        if math.isfinite(fill_value) and abs(fill_value) > _FLOAT32_MAX:
            raise RuntimeError("value cannot be converted to type float without overflow")
    return np.full(shape, fill_value, dt.np)


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
    return dtypes.as_dtype(dtype, "new_*") if dtype is not None else t._dtype


@export()
def zeros_like(input, dtype=None, device=None, requires_grad=False):
    _check_device(device)
    return _leaf(np.zeros(input._shape, _like(input, dtype).np), requires_grad)


@export()
def ones_like(input, dtype=None, device=None, requires_grad=False):
    _check_device(device)
    return _leaf(np.ones(input._shape, _like(input, dtype).np), requires_grad)


@export()
def empty_like(input, dtype=None, device=None, requires_grad=False):
    _check_device(device)
    return zeros_like(input, dtype, requires_grad=requires_grad)


@export()
def full_like(input, fill_value, dtype=None, device=None, requires_grad=False):
    _check_device(device)
    return _leaf(_filled(input._shape, fill_value, dtype, input._dtype, "full_like"), requires_grad)


def _number(x, fn, name, position):
    """A Python number from a scalar argument (a number, a NumPy scalar, a 0-d tensor)."""
    if isinstance(x, Tensor) and x._numel == 1 and not x._shape:
        return x.item()
    if isinstance(x, (numbers.Real, np.bool_)) and not isinstance(x, np.ndarray):
        return x.item() if isinstance(x, np.generic) else x
    raise TypeError(f"{fn}(): argument '{name}' (position {position}) must be Number, not {_type_name(x)}")


def _int_arg(x, fn, name, position):
    """An int argument as torch takes it: an int or an object standing for one, not a
    float or a bool."""
    if isinstance(x, Tensor):
        if not x._dtype.is_floating_point and x._dtype is not dtypes.bool_ and x._numel == 1:
            return int(x.item())
    elif not isinstance(x, (builtins.bool, np.bool_)) and hasattr(type(x), "__index__"):
        return int(x.__index__())
    raise TypeError(f"{fn}(): argument '{name}' (position {position}) must be int, not {_type_name(x)}")


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad=False):
    _check_device(device)
    if end is None:
        start, end = 0, _number(start, "arange", "end", 1)
    else:
        start, end = _number(start, "arange", "start", 1), _number(end, "arange", "end", 2)
    step = _number(step, "arange", "step", 3)
    if dtype is None:
        integral = all(isinstance(a, numbers.Integral) for a in (start, end, step))
        dt = dtypes.int64 if integral else dtypes.get_default_dtype()
    else:
        dt = dtypes.as_dtype(dtype, "arange")
    if dt is dtypes.bool_:
        raise dtypes.not_implemented("arange_cpu", dt)
    if not (math.isfinite(start) and math.isfinite(end)):
        raise RuntimeError(f"unsupported range: {start} -> {end}")
    if dt is dtypes.int64:   # torch casts the bounds first, and counts exactly
        start, end, step = int(start), int(end), int(step) if math.isfinite(step) else 0
    if not step or step != step:
        raise RuntimeError("step must be nonzero")
    if (step > 0 and start > end) or (step < 0 and start < end):
        raise RuntimeError("upper bound and lower bound inconsistent with step sign")
    if dt is dtypes.int64:
        return _leaf(np.arange(start, end, step, dtype=np.int64), requires_grad)
    return _leaf(np.arange(start, end, step, dtype=np.float64).astype(dt.np), requires_grad)


def linspace(start, end, steps, dtype=None, device=None, requires_grad=False):
    _check_device(device)
    start, end = _number(start, "linspace", "start", 1), _number(end, "linspace", "end", 2)
    steps = _int_arg(steps, "linspace", "steps", 3)
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    dt = _float_dtype(dtype, "linspace")
    if dt is dtypes.bool_:
        raise dtypes.not_implemented("linspace_cpu", dt)
    return _leaf(np.linspace(start, end, steps, dtype=np.float64).astype(dt.np), requires_grad)


def eye(n, m=None, dtype=None, device=None, requires_grad=False):
    _check_device(device)
    n = _int_arg(n, "eye", "n", 1)
    if n < 0:
        raise RuntimeError(f"n must be greater or equal to 0, got {n}")
    if m is not None:
        m = _int_arg(m, "eye", "m", 2)
        if m < 0:
            raise RuntimeError(f"m must be greater or equal to 0, got {m}")
    return _leaf(np.eye(n, m, dtype=_float_dtype(dtype, "eye").np), requires_grad)


def manual_seed(seed):
    """Seed the generator of every random op.  As torch: ``int(seed)`` (so a float seed
    is truncated), any value in [-2**63, 2**64) (a negative one taken modulo 2**64)."""
    seed = int(seed)
    if not _INT64_MIN <= seed < 2 ** 64:
        raise ValueError(_OVERFLOW)
    _rng[0] = np.random.default_rng(seed % 2 ** 64)
    return _rng[0]


def rng():
    """The generator behind every random op (tj.compile refuses random ops in a trace)."""
    if _state.trace is not None:
        _state.trace.on_random()
    return _rng[0]


def _random_dtype(dtype, kernel, fn):
    """The dtype of a float random op: torch's NotImplementedError for an integer or bool
    one (rather than samples truncated to it)."""
    dt = _float_dtype(dtype, fn)
    if not dt.is_floating_point:
        raise dtypes.not_implemented(kernel, dt)
    return dt


def rand(*size, dtype=None, device=None, requires_grad=False, generator=None):
    _check_device(device)
    dt = _random_dtype(dtype, "check_uniform_bounds", "rand")
    return _leaf(rng().random(_shape_arg(size, "rand")).astype(dt.np), requires_grad)


def randn(*size, dtype=None, device=None, requires_grad=False, generator=None):
    _check_device(device)
    dt = _random_dtype(dtype, "normal_kernel_cpu", "randn")
    return _leaf(rng().standard_normal(_shape_arg(size, "randn")).astype(dt.np), requires_grad)


def randint(low, high=None, size=None, dtype=None, device=None, requires_grad=False, generator=None):
    """``randint(high, size)`` or ``randint(low, high, size)``, int64 unless ``dtype``."""
    _check_device(device)
    if size is None:   # randint(high, size)
        low, high, size = 0, low, high
        names = (None, ("high", 1), ("size", 2))
    elif high is None:   # randint(high, size=size)
        low, high = 0, low
        names = (None, ("high", 1), ("size", 2))
    else:
        names = (("low", 1), ("high", 2), ("size", 3))
    low = _int_arg(low, "randint", *names[0]) if names[0] else 0
    high = _int_arg(high, "randint", *names[1])
    for bound in (low, high):
        if not _INT64_MIN <= bound < _INT64_END:
            raise ValueError(_OVERFLOW)
    if not isinstance(size, (tuple, list)):
        raise TypeError(f"randint(): argument 'size' (position {names[2][1]}) must be tuple of ints, "
                        f"not {_type_name(size)}")
    shape = _shape_arg((size,), "randint")
    if low >= high:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")
    dt = dtypes.as_dtype(dtype, "randint") if dtype is not None else dtypes.int64
    if dt is dtypes.bool_ and not (0 <= low and high <= 2):
        raise RuntimeError("from is out of bounds for bool" if low < 0 else "to - 1 is out of bounds for bool")
    return _leaf(rng().integers(low, high, size=shape).astype(dt.np), requires_grad)


def randperm(n, dtype=None, device=None, requires_grad=False, generator=None):
    _check_device(device)
    n = _int_arg(n, "randperm", "n", 1)
    if n < 0:
        raise RuntimeError(f"Trying to create tensor with negative dimension {n}: [{n}]")
    dt = dtypes.as_dtype(dtype, "randperm") if dtype is not None else dtypes.int64
    if dt is dtypes.bool_:
        raise dtypes.not_implemented("randperm", dt)
    return _leaf(rng().permutation(n).astype(dt.np), requires_grad)


def normal(mean, std=1.0, size=None, *, generator=None, dtype=None, device=None, requires_grad=False):
    """Draws from N(mean, std): tensor ``mean``/``std`` broadcast against each other, or
    numbers with ``size``.  As torch's, the draw has no gradient with respect to ``mean``
    or ``std`` (zeros, not a reparameterisation: ``distributions.Normal.rsample`` has one)."""
    if not isinstance(mean, Tensor) and not isinstance(std, Tensor):
        if size is None:
            raise TypeError(f"normal() received an invalid combination of arguments - got "
                            f"({type_name(mean)}, {type_name(std)}), but expected one of: (Tensor mean, Tensor std), "
                            f"(Tensor mean, float std = 1), (float mean, Tensor std), "
                            f"(float mean, float std, tuple of ints size)")
        _check_device(device)
        if std < 0:
            raise RuntimeError(f"normal expects std >= 0.0, but found std {std:g}")
        dt = _random_dtype(dtype, "normal_kernel_cpu", "normal")
        return _leaf(rng().normal(mean, std, _shape_arg((size,), "normal")).astype(dt.np), requires_grad)
    tensors = [t for t in (mean, std) if isinstance(t, Tensor)]
    dt = tensors[0]._dtype
    for t in tensors:
        if not t._dtype.is_floating_point:
            raise dtypes.not_implemented("normal_kernel_cpu", t._dtype)
    m = mean._value() if isinstance(mean, Tensor) else mean
    s = std._value() if isinstance(std, Tensor) else std
    if isinstance(std, Tensor):
        if (np.asarray(s) < 0).any():
            raise RuntimeError("normal expects all elements of std >= 0.0")
    elif std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std:g}")
    sample = _concrete(np.asarray(rng().normal(m, s, np.broadcast_shapes(np.shape(m), np.shape(s))), dt.np))
    differentiable = [t for t in tensors if t._rg]
    if not differentiable or not _state.grad:
        return sample
    # the draw's gradient is zero with respect to mean and std (torch's NormalBackward)
    for t in differentiable:
        sample = sample + t * 0.0
    return sample


def bernoulli(input, p=None, *, generator=None):
    """0/1 draws in ``input``'s dtype with probability ``input`` (or the number ``p``); no
    gradient flows through them (zeros, as torch's BernoulliBackward)."""
    if not isinstance(input, Tensor):
        raise TypeError(f"bernoulli(): argument 'input' (position 1) must be Tensor, not {type_name(input)}")
    if not input._dtype.is_floating_point:
        raise dtypes.not_implemented("bernoulli_tensor_cpu_p_" if p is None else "bernoulli_scalar_cpu_",
                                     input._dtype)
    probs = input._value() if p is None else np.full(input._shape, float(p))
    if not ((probs >= 0) & (probs <= 1)).all():
        raise RuntimeError("Expected p_in >= 0 && p_in <= 1 to be true, but got false.  (Could this error message "
                           "be improved?  If so, please report an enhancement request to PyTorch.)")
    draws = _concrete(np.asarray(rng().random(input._shape) < probs, input._dtype.np))
    return draws + input * 0.0 if input._rg and _state.grad else draws


@export(method=True)
def multinomial(input, num_samples, replacement=False, *, generator=None):
    """``num_samples`` category indices (int64) per row of the weights ``input`` (1-D or 2-D,
    not necessarily normalised), with or without replacement; drawn from tapejit's generator
    (``tj.manual_seed`` repeats them; torch's draws differ)."""
    if not isinstance(input, Tensor):
        raise TypeError(f"multinomial(): argument 'input' (position 1) must be Tensor, not {type_name(input)}")
    if len(input._shape) not in (1, 2):
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    if not input._dtype.is_floating_point:
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: "
                           f"{dtypes.SCALAR_TYPE_NAMES[input._dtype.name]}")
    num_samples = _int_arg(num_samples, "multinomial", "num_samples", 2)
    if num_samples <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    weights = np.asarray(input._value(), np.float64).reshape(-1, input._shape[-1])
    categories = weights.shape[1]
    if not replacement and num_samples > categories:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    if not np.isfinite(weights).all() or (weights < 0).any():
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    totals = weights.sum(1)
    if (totals <= 0).any():
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
    if not replacement and ((weights > 0).sum(1) < num_samples).any():
        raise RuntimeError("invalid multinomial distribution (with replacement=False, not enough non-negative "
                           "category to sample)")
    draw = rng()
    rows = [draw.choice(categories, num_samples, replace=replacement, p=row / total)
            for row, total in zip(weights, totals)]
    samples = np.array(rows, np.int64).reshape(input._shape[:-1] + (num_samples,))
    return _leaf(samples, False)


@export()
def rand_like(input, dtype=None, device=None, requires_grad=False):
    return rand(*input._shape, dtype=dtype or input._dtype, device=device, requires_grad=requires_grad)


@export()
def randn_like(input, dtype=None, device=None, requires_grad=False):
    return randn(*input._shape, dtype=dtype or input._dtype, device=device, requires_grad=requires_grad)


_provide_to_tensor(legacy_array=legacy_array)
