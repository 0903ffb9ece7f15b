"""``tapejit.save`` / ``tapejit.load``: objects holding tensors (state dicts, optimizer
states, checkpoints) to and from a file.

The file format is tapejit's own: a plain pickle.  It is not PyTorch's zip format, so
PyTorch cannot read these files, and ``load`` refuses PyTorch's files with an error
saying so.

Arrays are stored as a record of plain values, never as NumPy's own pickle: a tensor is
``_tensor_from_record(dtype, shape, data, requires_grad)``, a Parameter the same through
``_parameter_from_record``, and a NumPy array, scalar or dtype of a numeric type (bool,
signed and unsigned integers, float16/32/64, complex64/128) ``_ndarray_from_record``,
``_numpy_scalar_from_record`` and ``_numpy_dtype_from_record``.  ``dtype`` is NumPy's
little-endian type string (``"<f4"``), ``shape`` a tuple of ints and ``data`` the
C-ordered little-endian bytes.  Arrays of other dtypes (strings, objects, dates) and
other NumPy objects fall back to NumPy's pickle, which only ``weights_only=False`` reads.

As torch >= 2.6, ``load`` defaults to ``weights_only=True``.  It then reads the file with
an unpickler that builds only plain Python values, containers, tensors and arrays from
those records, tapejit dtypes, ``Size`` and CPU devices (and what ``add_safe_globals``
allows), and raises ``pickle.UnpicklingError`` on anything else: unpickling an arbitrary
object can run arbitrary code, and NumPy's own pickle can build arrays over arbitrary
memory (a crafted file then crashes the process).  A crafted or corrupt file raises an
exception, and neither crashes the process nor changes anything outside what it builds:

- every record is checked before anything is allocated: an allowed dtype, a shape of at
  most 64 non-negative ints, exactly ``prod(shape) * itemsize`` bytes of data;
- each global it calls is a function or class of this module that checks its arguments
  (``bytearray(10**12)``, ``_codecs.encode(x, "zlib")``, ``Size(["a"])`` are refused);
- the opcodes that set state or items (``BUILD``, ``SETITEM``, ``APPEND``, ``ADDITEMS``)
  act only on the objects that need them, never on a tensor or a dtype;
- no length in the file makes it allocate more than the file holds;
- tuples nested more than 100 deep (hashing one recurses in C) and more than 32 unequal
  keys of one hash (n of them take n**2 steps to insert) are refused.

Files written before this format (arrays in NumPy's pickle) load only with
``weights_only=False``; saving them again converts them.  ``weights_only=False`` loads
anything, with Python's own unpickler: use it only on files you trust.
"""
import _compat_pickle
import contextlib
import io
import os
import pickle
import struct
import sys
from collections import Counter, OrderedDict

import numpy as np

from tapejit import dtypes
from tapejit.device import device
from tapejit.nn.parameter import Parameter
from tapejit.tensor import Size, _concrete, provide as _provide_to_tensor

__all__ = ["add_safe_globals", "get_safe_globals", "load", "save"]

_user_safe_globals = {}

_ZIP_MAGIC = b"PK\x03\x04"
# PyTorch's pre-1.6 format opens with its magic number pickled under protocol 2.
_TORCH_LEGACY_MAGIC = b"\x80\x02\x8a\nl\xfc\x9cF\xf9 j\xa8P\x19"


# ---- array records ----------------------------------------------------------------------

# NumPy's type strings, little-endian (``|``: one byte, no order), of the dtypes a record
# may hold: plain numbers only, whose every bit pattern is a valid value.
_ARRAY_DTYPES = frozenset({
    "|b1", "|i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8",
    "<f2", "<f4", "<f8", "<c8", "<c16",
})
# tapejit's tensor dtypes: float32, float64, float16, int64 ... uint8, bool; bfloat16, which
# NumPy lacks, is a record of its own kind holding float32 bytes of bfloat16 values.
_BFLOAT16 = "bfloat16"
_TENSOR_DTYPES = frozenset({"<f4", "<f8", "<f2", "<i8", "<i4", "<i2", "|i1", "|u1", "|b1", _BFLOAT16})
_MAX_NDIM = 64   # NumPy 2's limit


def _record_dtype(numpy_dtype):
    """The record's type string for ``numpy_dtype``, or None if records do not hold it."""
    if numpy_dtype.metadata is not None:
        return None
    little = numpy_dtype.newbyteorder("<")
    return little.str if little.str in _ARRAY_DTYPES else None


def _array_record(array):
    """``(dtype, shape, data)`` for ``array``, or None if its dtype has no record."""
    kind = _record_dtype(array.dtype)
    if kind is None:
        return None
    return kind, tuple(array.shape), array.astype(kind, copy=False).tobytes()


def _refuse(message):
    raise pickle.UnpicklingError(f"Weights only load failed: {message}")


def _array_from_record(kind, shape, data, allowed):
    """A new, writable, native-order array from a record whose every field comes from the
    file: each is checked before anything is allocated."""
    if type(kind) is not str or kind not in allowed:
        _refuse(f"an array record has dtype {kind!r}; records hold only {sorted(allowed)}")
    if type(shape) is not tuple or len(shape) > _MAX_NDIM:
        _refuse(f"an array record's shape must be a tuple of at most {_MAX_NDIM} ints")
    if any(type(n) is not int or n < 0 for n in shape):
        _refuse(f"an array record's shape must hold non-negative ints, got {shape!r}")
    if type(data) is not bytes:
        _refuse(f"an array record's data must be bytes, got {type(data).__name__}")
    numpy_dtype = np.dtype(kind)
    count, span = 1, numpy_dtype.itemsize
    for n in shape:
        count *= n
        span *= max(n, 1)   # bounds the strides NumPy computes, even for an empty array
    if span > sys.maxsize:
        _refuse(f"an array record's shape {shape} is too large")
    if count * numpy_dtype.itemsize != len(data):
        _refuse(f"an array record of dtype {kind} and shape {shape} needs "
                f"{count * numpy_dtype.itemsize} bytes of data, got {len(data)}")
    if kind == "|b1" and data and np.frombuffer(data, np.uint8).max() > 1:
        _refuse("a bool array record holds a byte other than 0 and 1")
    # astype copies: the array owns writable memory in the machine's byte order.
    return np.frombuffer(data, numpy_dtype).reshape(shape).astype(numpy_dtype.newbyteorder("="))


def _checked_requires_grad(requires_grad, kind):
    if type(requires_grad) is not bool:
        _refuse(f"a tensor record's requires_grad must be a bool, got {type(requires_grad).__name__}")
    if requires_grad and kind not in ("<f4", "<f8"):
        _refuse(f"a tensor record of dtype {kind} requires grad; only floating point tensors can")
    return requires_grad


def _tensor_array_from_record(kind, shape, data):
    if kind == _BFLOAT16:   # rounded again: a file's bytes are not trusted to hold bfloat16 values
        return dtypes.round_bfloat16(_array_from_record("<f4", shape, data, _TENSOR_DTYPES))
    return _array_from_record(kind, shape, data, _TENSOR_DTYPES)


def _tensor_from_record(kind, shape, data, requires_grad):
    array = _tensor_array_from_record(kind, shape, data)
    return _concrete(array, _checked_requires_grad(requires_grad, kind))


def _parameter_from_record(kind, shape, data, requires_grad):
    array = _tensor_array_from_record(kind, shape, data)
    return Parameter(_concrete(array), _checked_requires_grad(requires_grad, kind))


def _ndarray_from_record(kind, shape, data):
    return _array_from_record(kind, shape, data, _ARRAY_DTYPES)


def _numpy_scalar_from_record(kind, data):
    return _array_from_record(kind, (), data, _ARRAY_DTYPES)[()]


def _numpy_dtype_from_record(kind):
    if type(kind) is not str or kind not in _ARRAY_DTYPES:
        _refuse(f"a NumPy dtype record has type {kind!r}; records hold only {sorted(_ARRAY_DTYPES)}")
    return np.dtype(kind).newbyteorder("=")


def reduce_tensor(tensor):
    """``Tensor.__reduce__`` and ``Parameter.__reduce__``: the value as a record, with
    ``requires_grad`` (not ``.grad``, as torch)."""
    rebuild = _parameter_from_record if isinstance(tensor, Parameter) else _tensor_from_record
    value = np.asarray(tensor._value())
    if tensor._dtype is dtypes.bfloat16:
        return rebuild, (_BFLOAT16, tuple(value.shape), value.astype("<f4").tobytes(), tensor._rg)
    return rebuild, (*_array_record(value), tensor._rg)


class _RecordPickler(pickle.Pickler):
    """Pickles NumPy arrays, scalars and dtypes of the numeric types as records (tensors
    reduce to records themselves); anything else as Python would."""

    def reducer_override(self, obj):
        if type(obj) is np.ndarray:
            record = _array_record(obj)
            if record is not None:
                return _ndarray_from_record, record
        elif isinstance(obj, np.generic):
            record = _array_record(np.asarray(obj))
            if record is not None:
                return _numpy_scalar_from_record, (record[0], record[2])
        elif isinstance(obj, np.dtype):
            kind = _record_dtype(obj)
            if kind is not None and obj.isnative:
                return _numpy_dtype_from_record, (kind,)
        return NotImplemented


# ---- what weights_only=True builds --------------------------------------------------------
# Each global the unpickler may return is a function or class of this module that checks
# its arguments: a crafted file chooses them.

def _set_from_list(items=None):
    """``builtins.set`` and ``frozenset``: protocols 2 and 3 pickle them from a list."""
    if items is None:
        return set()
    if type(items) is not list:
        _refuse(f"set() of a {type(items).__name__}; expected a list")
    return set(items)


def _frozenset_from_list(items=None):
    return frozenset(_set_from_list(items))


def _is_latin1_text(args):
    return (len(args) == 2 and type(args[0]) is str and type(args[1]) is str
            and args[1] in ("latin1", "latin-1"))


def _bytearray_from(*args):
    """``builtins.bytearray``: ``()``, ``(bytes,)`` (protocols 3, 4) or ``(str, "latin-1")``
    (protocol 2)."""
    if not args:
        return bytearray()
    if len(args) == 1 and type(args[0]) is bytes:
        return bytearray(args[0])
    if _is_latin1_text(args):
        return bytearray(args[0].encode("latin-1"))
    _refuse("bytearray is allowed only from bytes or (str, 'latin-1'); never bytearray(n), "
            "which allocates n bytes")


def _latin1_bytes(*args):
    """``_codecs.encode(text, "latin1")``: bytes under protocol 2."""
    if not _is_latin1_text(args):
        _refuse("_codecs.encode is allowed only as encode(str, 'latin1') (bytes under protocol 2)")
    return args[0].encode("latin-1")


def _empty_bytes(*args):
    """``builtins.bytes``: protocol 2 pickles ``b""`` as ``bytes()``; never ``bytes(n)``."""
    if args:
        _refuse("builtins.bytes is allowed only without arguments (b'' under protocol 2)")
    return b""


def _complex_from(real=0.0, imag=0.0):
    if type(real) not in (int, float) or type(imag) not in (int, float):
        _refuse("complex() is allowed only from two numbers")
    return complex(real, imag)


def _ordered_dict(*args):
    """``collections.OrderedDict``: pickled as ``OrderedDict()`` then its items."""
    if args:
        _refuse("OrderedDict is allowed only without arguments (its items follow)")
    return OrderedDict()


def _counter(mapping=None):
    if mapping is None:
        return Counter()
    if type(mapping) is not dict:
        _refuse(f"Counter() of a {type(mapping).__name__}; expected a dict")
    return Counter(mapping)


class _SizeFromInts:
    """``tapejit.tensor.Size``, pickled as ``NEWOBJ(Size, (dims,))``: a class, as NEWOBJ
    requires, that makes plain ``Size`` objects of ints."""

    def __new__(cls, dims=()):
        if type(dims) is not tuple or any(type(n) is not int for n in dims):
            _refuse("tapejit.Size is allowed only from a tuple of ints")
        return Size(dims)


class _CpuDevice:
    """``tapejit.device.device``: the CPU device.  Pickled as ``REDUCE(device, ("cpu",
    index))``; files written before devices had ``__reduce__`` hold ``NEWOBJ(device, ())``
    then ``BUILD`` with its slots (which ``_WeightsOnlyUnpickler.load_build`` checks)."""

    def __new__(cls, *args):
        if not args:
            return device("cpu")
        if (len(args) == 2 and type(args[0]) is str and args[0] == "cpu"
                and (args[1] is None or (type(args[1]) is int and args[1] >= 0))):
            return device("cpu", args[1])
        _refuse("a device is allowed only as device('cpu', None or an int >= 0), or as device() "
                "followed by its state")


def _device_state(inst, state):
    """BUILD on a device: only ``(None, {"type": "cpu", "index": None or int >= 0})``."""
    if type(state) is tuple and len(state) == 2 and state[0] is None and type(state[1]) is dict:
        slots = state[1]
        index = slots.get("index")
        kind = slots.get("type")
        if (slots.keys() <= {"type", "index"} and type(kind) is str and kind == "cpu"
                and (index is None or (type(index) is int and index >= 0))):
            inst.__init__("cpu", index)
            return
    _refuse("a device's state must be the CPU's ((None, {'type': 'cpu', 'index': None or an int}))")


def _state_dict_metadata(inst, state):
    """BUILD on an OrderedDict: only a module ``state_dict()``'s ``_metadata`` attribute (a
    dict of per-module versions, as torch's), which names no method of the dict."""
    if type(state) is dict and state.keys() == {"_metadata"} and isinstance(state["_metadata"], dict):
        inst._metadata = state["_metadata"]
        return
    _refuse("an OrderedDict's state may hold only a state_dict's '_metadata' (a dict)")


_SAFE_GLOBALS = {
    ("builtins", "set"): _set_from_list,
    ("builtins", "frozenset"): _frozenset_from_list,
    ("builtins", "bytearray"): _bytearray_from,
    ("builtins", "bytes"): _empty_bytes,
    ("builtins", "complex"): _complex_from,
    ("_codecs", "encode"): _latin1_bytes,
    ("collections", "OrderedDict"): _ordered_dict,
    ("collections", "Counter"): _counter,
    ("tapejit.tensor", "Size"): _SizeFromInts,
    ("tapejit.device", "device"): _CpuDevice,
    ("tapejit.serialization", "_tensor_from_record"): _tensor_from_record,
    ("tapejit.serialization", "_parameter_from_record"): _parameter_from_record,
    ("tapejit.serialization", "_ndarray_from_record"): _ndarray_from_record,
    ("tapejit.serialization", "_numpy_scalar_from_record"): _numpy_scalar_from_record,
    ("tapejit.serialization", "_numpy_dtype_from_record"): _numpy_dtype_from_record,
}
_CALLABLE = frozenset(id(f) for f in _SAFE_GLOBALS.values())
_CONSTRUCTIBLE = frozenset({id(_SizeFromInts), id(_CpuDevice)})   # by NEWOBJ
_DTYPE_GLOBALS = {name: d for name, d in vars(dtypes).items() if isinstance(d, dtypes.dtype)}
# What files written before the record format name (their arrays are NumPy's pickle).
_OLD_FORMAT_GLOBALS = {("tapejit.tensor", "_rebuild"), ("tapejit.nn.parameter", "_rebuild_parameter")}
_MAX_TUPLE_NESTING = 100   # see _WeightsOnlyUnpickler._push_tuple
_MAX_KEYS_PER_HASH = 32    # see _WeightsOnlyUnpickler._check_keys
_MAX_MEMO_INDEX = 1 << 32  # what BINPUT and LONG_BINPUT can write
_OLD_FORMAT_MESSAGE = (
    "the file holds NumPy objects in NumPy's own pickle (it needs {}), which "
    "tapejit.load(weights_only=True) does not unpickle: a crafted NumPy pickle can crash "
    "the process.  Either the file was written by an older tapejit (arrays in NumPy's "
    "pickle; tapejit.save now writes them as records of dtype, shape and bytes), or it "
    "holds a NumPy object records do not cover (an array of a non-numeric dtype).  If you "
    "trust its source, load it with weights_only=False, and save it again with "
    "tapejit.save to rewrite it in the current format.")


def add_safe_globals(safe_globals):
    """Let ``load(weights_only=True)`` rebuild these classes or functions too (called with
    the file's arguments, and ``BUILD``, ``NEWOBJ``, ``SETITEM``, ``APPEND`` and ``ADDITEMS``
    on their instances are allowed: add only what you trust with any argument)."""
    for obj in safe_globals:
        _user_safe_globals[(obj.__module__, obj.__qualname__)] = obj


def get_safe_globals():
    return list(_user_safe_globals.values())


class _BoundedReader:
    """The file, for the weights-only unpickler: a length field in a crafted file (a frame
    or bytes of 10**12 bytes) makes the unpickler call ``read(10**12)``, and a file object
    allocates what it is asked for before reading.  Large reads are checked against what
    the file holds, or made in chunks when it cannot tell."""

    _CHUNK = 1 << 20

    def __init__(self, file):
        self._file = file
        self.readline = file.readline
        self._end = None
        seekable = getattr(file, "seekable", None)
        if seekable is not None and seekable():
            here = file.tell()
            try:
                self._end = file.seek(0, io.SEEK_END)
            except (OSError, ValueError):   # gzip.GzipFile seeks, but not from the end
                pass
            file.seek(here)

    def read(self, n):
        if n <= self._CHUNK:
            return self._file.read(n)
        if self._end is not None:
            left = self._end - self._file.tell()
            if n > left:
                _refuse(f"the file is truncated or corrupt: it claims a record of {n} bytes, "
                        f"and only {left} remain")
            return self._file.read(n)
        chunks = []
        while n > 0:
            chunk = self._file.read(min(n, self._CHUNK))
            if not chunk:
                break
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)


def _refuse_opcode(name):
    def refuse(self):
        _refuse(f"the file uses the pickle opcode {name}, which tapejit.save never writes")
    return refuse


class _WeightsOnlyUnpickler(pickle._Unpickler):
    """Python's own unpickler (``pickle._Unpickler``, written in Python, so no file makes it
    read memory it should not) with every opcode that calls or builds something checked."""

    dispatch = dict(pickle._Unpickler.dispatch)

    def __init__(self, file, **kwargs):
        super().__init__(_BoundedReader(file), **kwargs)
        user = list(_user_safe_globals.values())
        self._user_classes = {id(c) for c in user if isinstance(c, type)}
        self._callable = _CALLABLE | {id(g) for g in user}
        self._constructible = _CONSTRUCTIBLE | self._user_classes
        self._nesting = {}   # id(tuple) -> (the tuple, its depth) for depths over 1
        self._keys_by_hash = {}

    def find_class(self, module, name):
        if self.proto < 3 and self.fix_imports:   # Python 2's names, as pickle.find_class
            if (module, name) in _compat_pickle.NAME_MAPPING:
                module, name = _compat_pickle.NAME_MAPPING[(module, name)]
            elif module in _compat_pickle.IMPORT_MAPPING:
                module = _compat_pickle.IMPORT_MAPPING[module]
        key = (module, name)
        if key in _user_safe_globals:
            return _user_safe_globals[key]
        if key in _SAFE_GLOBALS:
            return _SAFE_GLOBALS[key]
        if module == "tapejit.dtypes" and name in _DTYPE_GLOBALS:
            return _DTYPE_GLOBALS[name]
        if module == "numpy" or module.startswith("numpy.") or key in _OLD_FORMAT_GLOBALS:
            _refuse(_OLD_FORMAT_MESSAGE.format(f"{module}.{name}"))
        _refuse(
            f"the file needs {module}.{name}, which tapejit.load(weights_only=True) does not "
            "unpickle: it loads only tensors, Parameters, NumPy arrays, dtypes, containers and "
            "plain Python values. If you trust the file's source, load it with "
            "weights_only=False (unpickling can run arbitrary code), or allow this global with "
            f"tapejit.serialization.add_safe_globals([{name}]).")

    def _is_user_instance(self, obj):
        return id(type(obj)) in self._user_classes

    # -- calls -----------------------------------------------------------------------------

    def load_reduce(self):
        args = self.stack.pop()
        func = self.stack[-1]
        if id(func) not in self._callable:
            _refuse(f"the file calls a {type(func).__name__} (REDUCE), which is not an allowed global")
        if type(args) is not tuple:
            _refuse("REDUCE arguments must be a tuple")
        if (func is _set_from_list or func is _frozenset_from_list) and args and type(args[0]) is list:
            self._check_keys(args[0])
        self.stack[-1] = func(*args)
    dispatch[pickle.REDUCE[0]] = load_reduce

    def _new_object(self, cls, args, kwargs):
        if id(cls) not in self._constructible:
            _refuse(f"the file constructs an object from a {type(cls).__name__} (NEWOBJ), which "
                    "is not an allowed class")
        if type(args) is not tuple or type(kwargs) is not dict:
            _refuse("NEWOBJ arguments must be a tuple and a dict")
        self.append(cls.__new__(cls, *args, **kwargs))

    def load_newobj(self):
        args = self.stack.pop()
        self._new_object(self.stack.pop(), args, {})
    dispatch[pickle.NEWOBJ[0]] = load_newobj

    def load_newobj_ex(self):
        kwargs = self.stack.pop()
        args = self.stack.pop()
        self._new_object(self.stack.pop(), args, kwargs)
    dispatch[pickle.NEWOBJ_EX[0]] = load_newobj_ex

    # -- state and items: only on the objects that need them --------------------------------

    def load_build(self):
        state = self.stack.pop()
        inst = self.stack[-1]
        if type(inst) is device:
            _device_state(inst, state)
        elif type(inst) is OrderedDict:
            _state_dict_metadata(inst, state)
        elif self._is_user_instance(inst):
            self.append(state)
            pickle._Unpickler.load_build(self)
        else:
            # BUILD on a tensor or a dtype would set its slots to anything (a shape its data
            # does not have); on a container, attributes shadowing its methods.
            _refuse(f"the file sets the state of a {type(inst).__name__} (BUILD); only devices "
                    "and classes given to add_safe_globals have one")
    dispatch[pickle.BUILD[0]] = load_build

    def _target(self, kind, opcode):
        target = self.stack[-1]
        if not (isinstance(target, kind) or self._is_user_instance(target)):
            _refuse(f"the file applies {opcode} to a {type(target).__name__}; it applies only "
                    f"to a {kind.__name__}")
        return target

    def load_append(self):
        value = self.stack.pop()
        self._target(list, "APPEND").append(value)
    dispatch[pickle.APPEND[0]] = load_append

    def load_appends(self):
        items = self.pop_mark()
        target = self._target(list, "APPENDS")
        if isinstance(target, list) or hasattr(target, "extend"):
            target.extend(items)
        else:
            for item in items:
                target.append(item)
    dispatch[pickle.APPENDS[0]] = load_appends

    def load_setitem(self):
        value = self.stack.pop()
        key = self.stack.pop()
        self._check_keys((key,))
        self._target(dict, "SETITEM")[key] = value
    dispatch[pickle.SETITEM[0]] = load_setitem

    def load_setitems(self):
        items = self.pop_mark()
        target = self._target(dict, "SETITEMS")
        self._check_keys(items[0::2])
        for i in range(0, len(items), 2):
            target[items[i]] = items[i + 1]
    dispatch[pickle.SETITEMS[0]] = load_setitems

    def load_dict(self):
        items = self.pop_mark()
        self._check_keys(items[0::2])
        self.append({items[i]: items[i + 1] for i in range(0, len(items), 2)})
    dispatch[pickle.DICT[0]] = load_dict

    def load_additems(self):
        items = self.pop_mark()
        target = self._target(set, "ADDITEMS")
        self._check_keys(items)
        for item in items:
            target.add(item)
    dispatch[pickle.ADDITEMS[0]] = load_additems

    def load_frozenset(self):
        items = self.pop_mark()
        self._check_keys(items)
        self.append(frozenset(items))
    dispatch[pickle.FROZENSET[0]] = load_frozenset

    def _check_keys(self, keys):
        """Refuse more than ``_MAX_KEYS_PER_HASH`` unequal keys of one hash in the file.
        Inserting n keys of one hash in a dict or set takes n**2 steps, and ints that
        differ by a multiple of 2**61 - 1 (or tuples of chosen ints) hash alike: ten
        megabytes of them would take hours to load.  (str and bytes hashes are
        randomised per process.)"""
        for key in keys:
            if type(key) is str or type(key) is bytes:
                continue
            alike = self._keys_by_hash.setdefault(hash(key), [])
            if not any(seen is key or seen == key for seen in alike):
                alike.append(key)
                if len(alike) > _MAX_KEYS_PER_HASH:
                    _refuse(f"the file holds more than {_MAX_KEYS_PER_HASH} unequal keys of "
                            "one hash (a hash-collision attack: loading it would take hours)")

    def load_put(self):
        # Text PUT takes any int; its keys stay ints below 2**32, which never hash alike.
        index = int(self.readline()[:-1])
        if not 0 <= index < _MAX_MEMO_INDEX:
            _refuse(f"the file memoizes at index {index}")
        self.memo[index] = self.stack[-1]
    dispatch[pickle.PUT[0]] = load_put

    # -- tuples: bounded depth --------------------------------------------------------------

    def _push_tuple(self, made):
        """Push a new tuple, refused if it nests tuples more than ``_MAX_TUPLE_NESTING``
        deep: hashing a tuple recurses in C without a depth check, so one nested deep
        enough crashes the process as a set item or a dict key.  (A frozenset stops the
        recursion: it hashes from its items' stored hashes.)"""
        depth = 1
        for item in made:
            if type(item) is tuple:
                entry = self._nesting.get(id(item))
                depth = max(depth, 1 + (entry[1] if entry is not None else 1))
        if depth > _MAX_TUPLE_NESTING:
            _refuse(f"the file nests tuples more than {_MAX_TUPLE_NESTING} deep")
        if depth > 1:
            self._nesting[id(made)] = (made, depth)   # kept alive: its id stays its own
        self.append(made)

    def load_tuple(self):
        self._push_tuple(tuple(self.pop_mark()))
    dispatch[pickle.TUPLE[0]] = load_tuple

    def load_tuple1(self):
        self._push_tuple((self.stack.pop(),))
    dispatch[pickle.TUPLE1[0]] = load_tuple1

    def load_tuple2(self):
        second = self.stack.pop()
        self._push_tuple((self.stack.pop(), second))
    dispatch[pickle.TUPLE2[0]] = load_tuple2

    def load_tuple3(self):
        third = self.stack.pop()
        second = self.stack.pop()
        self._push_tuple((self.stack.pop(), second, third))
    dispatch[pickle.TUPLE3[0]] = load_tuple3

    # -- reads -------------------------------------------------------------------------------

    def load_bytearray8(self):
        # pickle._Unpickler allocates the claimed length first, then reads into it.
        size, = struct.unpack("<Q", self.read(8))
        data = self.read(size)
        if len(data) != size:
            _refuse("the file is truncated: a bytearray is shorter than its length")
        self.append(bytearray(data))
    dispatch[pickle.BYTEARRAY8[0]] = load_bytearray8

    for _opcode in ("INST", "OBJ", "PERSID", "BINPERSID", "NEXT_BUFFER", "READONLY_BUFFER"):
        dispatch[getattr(pickle, _opcode)[0]] = _refuse_opcode(_opcode)
    for _opcode in range(256):
        if _opcode not in dispatch:
            dispatch[_opcode] = _refuse_opcode(f"{_opcode:#04x} (not a pickle opcode)")
    del _opcode


def _opened(f, mode):
    if isinstance(f, (str, os.PathLike)):
        return open(f, mode)
    return contextlib.nullcontext(f)


def save(obj, f, pickle_module=pickle, pickle_protocol=pickle.DEFAULT_PROTOCOL):
    """Pickle ``obj`` to ``f`` (a path or a binary file object) in tapejit's format (a
    plain pickle, not PyTorch's zip format; arrays as records, see the module docstring)."""
    pickler = _RecordPickler if pickle_module is pickle else pickle_module.Pickler
    with _opened(f, "wb") as file:
        pickler(file, protocol=pickle_protocol).dump(obj)


def _refuse_torch_file(file, f):
    """Raise if ``file`` starts like a PyTorch checkpoint; leave its position unchanged."""
    start = file.tell()
    head = file.read(len(_TORCH_LEGACY_MAGIC))
    file.seek(start)
    if head.startswith(_ZIP_MAGIC) or head == _TORCH_LEGACY_MAGIC:
        where = f"{os.fspath(f)!r}" if isinstance(f, (str, os.PathLike)) else "the file"
        raise RuntimeError(
            f"{where} is a PyTorch checkpoint (written by torch.save); tapejit.load reads "
            "only tapejit's own format (a plain pickle written by tapejit.save). Convert it "
            "with PyTorch: torch.load it and rebuild each tensor t as tapejit.tensor(t.numpy()).")


def load(f, map_location=None, pickle_module=None, *, weights_only=None, mmap=None,
         **pickle_load_args):
    """Unpickle an object written by ``tapejit.save`` from ``f`` (a path or a binary file
    object).  ``weights_only`` defaults to True, as in torch >= 2.6 (see the module
    docstring).  tapejit tensors always live on the CPU, so ``map_location`` and ``mmap``
    are accepted and have no effect."""
    if weights_only is None:
        weights_only = pickle_module is None
    if weights_only and pickle_module is not None:
        raise RuntimeError("Can not safely load weights when explicit pickle_module is specified")
    with _opened(f, "rb") as file:
        if getattr(file, "seekable", lambda: False)():
            _refuse_torch_file(file, f)
        if weights_only:
            return _WeightsOnlyUnpickler(file, **pickle_load_args).load()
        return (pickle_module or pickle).Unpickler(file, **pickle_load_args).load()


_provide_to_tensor(reduce_tensor=reduce_tensor)
