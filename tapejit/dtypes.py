"""tapejit dtypes: float32, float64, int64 and bool, with torch's promotion rules."""
import builtins

import numpy as np


class dtype:
    """A tensor element type; ``is_floating_point`` types can require gradients."""

    __slots__ = ("name", "np", "is_floating_point", "arena", "itemsize")

    def __init__(self, name, np_dtype, is_floating_point, arena):
        self.name = name
        self.np = np.dtype(np_dtype)
        self.is_floating_point = is_floating_point
        # Index of the value arena a float tensor of this dtype lives in (-1: never taped).
        self.arena = arena
        self.itemsize = self.np.itemsize

    def __repr__(self):
        return f"tapejit.{self.name}"

    def __reduce__(self):
        # By reference to this module's attribute: the bool dtype is ``bool_`` here.
        return "bool_" if self.name == "bool" else self.name


float64 = dtype("float64", np.float64, True, 0)
float32 = dtype("float32", np.float32, True, 1)
int64 = dtype("int64", np.int64, False, -1)
bool_ = dtype("bool", np.bool_, False, -1)
double = float64
float = float32  # noqa: A001 - torch spells it tapejit.float
long = int64

FLOAT_DTYPES = (float64, float32)
_BY_NUMPY = {
    np.dtype(np.float64): float64,
    np.dtype(np.float32): float32,
    np.dtype(np.int64): int64,
    np.dtype(np.bool_): bool_,
}

_default_float = [float32]


def get_default_dtype():
    return _default_float[0]


def set_default_dtype(d):
    d = as_dtype(d)
    if not d.is_floating_point:
        raise TypeError(f"only floating-point types are supported as the default type, got {d}")
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
        return found
    return as_dtype(npd)


def data_dtype(npd, fn="tensor"):
    """The tapejit dtype that holds NumPy data of dtype ``npd`` without changing a value:
    narrower ints and floats widen to int64 and float32.  uint64 (past int64's range) and
    the types tapejit has no dtype for are a ``TypeError`` naming them, never wrapped or
    rounded values."""
    found = _BY_NUMPY.get(npd)
    if found is not None:
        return found
    if (npd.kind == "f" and npd.itemsize <= 8) or npd.kind == "i" or (npd.kind == "u" and npd.itemsize < 8):
        return as_dtype(npd)
    hint = " (int64 cannot hold all its values; convert with .astype(np.int64) if they fit)" \
        if npd == np.uint64 else ""
    raise TypeError(f"{fn}(): can't convert np.ndarray of type numpy.{npd}: tapejit has no such dtype, its "
                    f"dtypes are float32, float64, int64 and bool{hint}")


# torch's ScalarType names, as its kernels' errors spell them ("not implemented for 'Long'").
SCALAR_TYPE_NAMES = {"float64": "Double", "float32": "Float", "int64": "Long", "bool": "Bool"}


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


def promote(a, b):
    """torch.promote_types for two tensor dtypes."""
    if a is b:
        return a
    if a.is_floating_point or b.is_floating_point:
        if a.is_floating_point and b.is_floating_point:
            return float64 if (a is float64 or b is float64) else float32
        return a if a.is_floating_point else b
    if a is int64 or b is int64:
        return int64
    return bool_
