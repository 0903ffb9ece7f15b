"""tapejit dtypes, with torch's promotion rules.

float32 and float64 are taped (they have an arena); the integer dtypes and bool never need
gradients and are computed with NumPy.  float16 and bfloat16 are *narrow* floats: stored in
the narrow type (bfloat16, which NumPy lacks, as float32 arrays holding bfloat16 values) and
computed in float32 with every result rounded back, as torch's CPU kernels do."""
import builtins

import numpy as np


class dtype:
    """A tensor element type; ``is_floating_point`` types can require gradients."""

    __slots__ = ("name", "np", "is_floating_point", "arena", "itemsize", "narrow", "is_signed")

    def __init__(self, name, np_dtype, is_floating_point, arena, itemsize=None, narrow=False):
        self.name = name
        # The NumPy dtype of the arrays holding this dtype's values (float32 for bfloat16).
        self.np = np.dtype(np_dtype)
        self.is_floating_point = is_floating_point
        # Index of the value arena a float tensor of this dtype lives in (-1: never taped).
        self.arena = arena
        self.itemsize = itemsize or self.np.itemsize
        # float16/bfloat16: computed in float32, each result rounded to this dtype.
        self.narrow = narrow
        self.is_signed = name not in ("uint8", "bool")

    def __repr__(self):
        return f"tapejit.{self.name}"

    def __reduce__(self):
        # By reference to this module's attribute: the bool dtype is ``bool_`` here.
        return "bool_" if self.name == "bool" else self.name


float64 = dtype("float64", np.float64, True, 0)
float32 = dtype("float32", np.float32, True, 1)
int64 = dtype("int64", np.int64, False, -1)
bool_ = dtype("bool", np.bool_, False, -1)
int32 = dtype("int32", np.int32, False, -1)
int16 = dtype("int16", np.int16, False, -1)
int8 = dtype("int8", np.int8, False, -1)
uint8 = dtype("uint8", np.uint8, False, -1)
float16 = dtype("float16", np.float16, True, -1, narrow=True)
# NumPy has no bfloat16: its arrays are float32 ones whose dtype carries this metadata (kept
# by views and copies, so movement ops keep the dtype; ``tensor._concrete`` rounds any
# such array a NumPy computation produced).
BFLOAT16_STORAGE = np.dtype(np.float32, metadata={"tapejit": "bfloat16"})
bfloat16 = dtype("bfloat16", BFLOAT16_STORAGE, True, -1, itemsize=2, narrow=True)
double = float64
float = float32  # noqa: A001 - torch spells it tapejit.float
long = int64
int = int32  # noqa: A001 - torch spells it tapejit.int
short = int16
half = float16

FLOAT_DTYPES = (float64, float32)
INTEGER_DTYPES = (uint8, int8, int16, int32, int64)
ALL_DTYPES = (float64, float32, float16, bfloat16, int64, int32, int16, int8, uint8, bool_)
# NumPy dtype -> the tapejit dtype whose arrays it is (bfloat16, stored as float32, is not).
_BY_NUMPY = {
    np.dtype(np.float64): float64,
    np.dtype(np.float32): float32,
    np.dtype(np.int64): int64,
    np.dtype(np.bool_): bool_,
    np.dtype(np.int32): int32,
    np.dtype(np.int16): int16,
    np.dtype(np.int8): int8,
    np.dtype(np.uint8): uint8,
    np.dtype(np.float16): float16,
}


def round_bfloat16(array):
    """float32 values rounded to the nearest bfloat16 (ties to even, NaN kept a quiet NaN),
    as a bfloat16 storage array: torch's ``round_to_nearest_even``."""
    array = np.asarray(array, np.float32)
    bits = array.view(np.uint32)
    rounded = ((bits + (0x7FFF + ((bits >> 16) & 1))) & 0xFFFF0000).astype(np.uint32).view(np.float32)
    rounded = np.where(np.isnan(array), np.float32(np.nan), rounded).astype(np.float32, copy=False)
    return rounded.view(BFLOAT16_STORAGE)


def is_bfloat16_rounded(array):
    """Whether every float32 value of ``array`` is a bfloat16 value already."""
    return not (array.view(np.uint32) & 0xFFFF).any()


def as_storage(array, dt):
    """``array``, holding values of dtype ``dt``, as ``dt``'s storage: a NumPy function
    (concatenate, where) returns bfloat16 storage as plain float32, which would label the
    result float32."""
    if dt is bfloat16 and array.dtype.metadata is None:
        return array.view(BFLOAT16_STORAGE)
    return array


def narrow_values(array, dt):
    """``array`` (any float or int array) as the storage array of narrow float ``dt``."""
    if dt is float16:
        with np.errstate(over="ignore"):   # past float16's range is inf, silently as torch
            return np.asarray(array).astype(np.float16)
    with np.errstate(over="ignore"):
        return round_bfloat16(np.asarray(array).astype(np.float32))


_default_float = [float32]


def get_default_dtype():
    return _default_float[0]


def set_default_dtype(d):
    d = as_dtype(d)
    if not d.is_floating_point:
        raise TypeError(f"only floating-point types are supported as the default type, got {d}")
    if d.narrow:   # the default dtype is what ops compute in, and tapejit computes narrow floats in float32
        raise TypeError(f"tapejit: {d} cannot be the default dtype (tapejit stores {d} but computes in "
                        f"float32); use float32 or float64")
    _default_float[0] = d


def as_dtype(d, fn=None):
    """The tapejit dtype of a ``dtype=`` argument: a tapejit dtype, Python's ``float``,
    ``int`` or ``bool`` (float64, int64 and bool, as torch and NumPy read them), or a NumPy
    dtype (NumPy mode's ``x.dtype``).  Anything else, a dtype name string included, is
    torch's ``TypeError``; ``fn`` names the function in its message."""
    if isinstance(d, dtype):
        return d
    if d is None:
        return None
    if d is builtins.float:
        return float64
    if d is builtins.int:
        return int64
    if d is builtins.bool:
        return bool_
    if not (isinstance(d, np.dtype) or (isinstance(d, type) and issubclass(d, np.generic))):
        where = f"{fn}(): argument 'dtype'" if fn else "dtype"
        raise TypeError(f"{where} must be tapejit.dtype, not {type_name(d)}")
    npd = np.dtype(d)
    found = _BY_NUMPY.get(npd)
    if found is not None:
        return bfloat16 if found is float32 and npd.metadata is not None else found
    found = _BY_NUMPY.get(npd.newbyteorder("="))   # a non-native byte order: the same values
    if found is not None:
        return found
    if npd.kind == "f":
        return float32 if npd.itemsize <= 4 else float64
    if npd.kind in "iu":
        return int64
    if npd.kind == "b":
        return bool_
    raise TypeError(f"tapejit has no dtype for {d!r}")


def from_numpy_dtype(npd):
    found = _BY_NUMPY.get(npd)
    if found is not None:
        return bfloat16 if found is float32 and npd.metadata is not None else found
    return as_dtype(npd)


def data_dtype(npd, fn="tensor"):
    """The tapejit dtype that holds NumPy data of dtype ``npd`` without changing a value:
    narrower ints and floats widen to int64 and float32.  uint64 (past int64's range) and
    the types tapejit has no dtype for are a ``TypeError`` naming them, never wrapped or
    rounded values."""
    found = _BY_NUMPY.get(npd)
    if found is not None:
        return bfloat16 if found is float32 and npd.metadata is not None else found
    if npd.kind == "u" and npd.itemsize < 8:
        return int32 if npd.itemsize == 2 else int64   # the smallest signed type holding them all
    if (npd.kind == "f" and npd.itemsize <= 8) or npd.kind == "i":
        return as_dtype(npd)
    hint = " (int64 cannot hold all its values; convert with .astype(np.int64) if they fit)" \
        if npd == np.uint64 else ""
    raise TypeError(f"{fn}(): can't convert np.ndarray of type numpy.{npd}: tapejit has no such dtype, its "
                    f"dtypes are float16, bfloat16, float32, float64, uint8, int8, int16, int32, int64 "
                    f"and bool{hint}")


# torch's ScalarType names, as its kernels' errors spell them ("not implemented for 'Long'").
SCALAR_TYPE_NAMES = {"float64": "Double", "float32": "Float", "int64": "Long", "bool": "Bool",
                     "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte",
                     "float16": "Half", "bfloat16": "BFloat16"}


def type_name(x):
    """The name torch's errors give the type of ``x``: ``str``, ``NoneType``, ``Tensor``,
    ``numpy.ndarray``."""
    t = type(x)
    # A Tensor (or subclass: Parameter) by its class, which this bottom layer does not import
    if any(c.__name__ == "Tensor" and c.__module__ == "tapejit.tensor" for c in t.__mro__):
        return "Tensor"
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def not_implemented(kernel, dt):
    """torch's error for a kernel that has no version for dtype ``dt``."""
    return NotImplementedError(f"\"{kernel}\" not implemented for '{SCALAR_TYPE_NAMES[dt.name]}'")


def promote_types(type1, type2):
    """torch.promote_types: the dtype an op on tensors of ``type1`` and ``type2`` gives."""
    return promote(as_dtype(type1, "promote_types"), as_dtype(type2, "promote_types"))


def category(d):
    """torch's promotion category: 0 bool, 1 integer, 2 floating point."""
    return 2 if d.is_floating_point else (0 if d is bool_ else 1)


def promote(a, b):
    """torch.promote_types for two tensor dtypes."""
    if a is b:
        return a
    if a.is_floating_point or b.is_floating_point:
        if a.is_floating_point and b.is_floating_point:
            if a is float64 or b is float64:
                return float64
            return float32   # float32 with a narrow float, or float16 with bfloat16
        return a if a.is_floating_point else b
    if a is bool_ or b is bool_:
        return b if a is bool_ else a
    return _BY_NUMPY[np.promote_types(a.np, b.np)]   # NumPy's table is torch's for these
