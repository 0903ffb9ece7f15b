"""NumPy's protocols on tensors: ``np.exp(t)``, ``np.sum(t, axis=0)``, ``ndarray * t``.

``Tensor.__array_ufunc__`` and ``Tensor.__array_function__`` route NumPy calls to the
tapejit op that records them on the tape, so a function written for NumPy arrays can be
differentiated by ``tj.grad`` unchanged.  The supported functions are listed explicitly
below; anything else raises a ``TypeError`` naming the function, because letting NumPy
convert the tensor to an array would silently drop it from the graph.
"""
import itertools
import math

import numpy as np

from tapejit.api import front_ends
from tapejit.ops._front_ends import front_end_of, named_ops
from tapejit.recording import as_tensor_operand
from tapejit.tensor import Tensor, _concrete, provide as _provide_to_tensor

# ---- ufuncs ----------------------------------------------------------------------------

_LN2 = math.log(2.0)
_LN10 = math.log(10.0)


def _tj():
    return front_ends   # tj's front ends (this module is imported by the facade, not above it)


def _logaddexp(a, b):
    # max(a, b) + log1p(exp(-|a - b|)): stable, and at a == b the subgradients of maximum
    # and abs give each input one half, as the exact derivative does.  Where a == b the
    # difference is taken as 0, so equal infinities give inf/-inf rather than inf - inf.
    tj = _tj()
    diff = tj.where(a == b, _tensor_operand(0.0, a), a - b)
    return tj.maximum(a, b) + (-diff.abs()).exp().log1p()


def _from_registry(kind):
    """NumPy's ufuncs that ops name as theirs (``names(..., numpy=("log1p",))``): the op's
    front end, the one ``tj.<name>`` runs."""
    table = {}
    for op in named_ops():
        if op.kind != kind:
            continue
        for name in op.names.numpy:
            ufunc = getattr(np, name, None)
            if not isinstance(ufunc, np.ufunc):
                raise TypeError(f"op {op.name!r}: numpy.{name} is not a NumPy ufunc; a NumPy function other "
                                f"than a ufunc is routed by __array_function__'s table (_FUNCTIONS)")
            table[ufunc] = front_end_of(op)
    return table


# np.exp(t), np.log1p(t), ...: from the registry; these below are compositions of ops.
_UNARY = _from_registry("unary")
_UNARY.update({
    np.positive: lambda x: x.clone(),
    np.exp2: lambda x: (x * _LN2).exp(),
    np.log2: lambda x: x.log() * (1.0 / _LN2),
    np.log10: lambda x: x.log() * (1.0 / _LN10),
    np.square: lambda x: x ** 2,
    np.reciprocal: lambda x: 1.0 / x,
    np.isnan: lambda x: _tj().isnan(x),
    np.isinf: lambda x: _tj().isinf(x),
    np.isfinite: lambda x: _tj().isfinite(x),
    np.logical_not: lambda x: _tj().logical_not(x),
})

_BINARY = {
    np.add: lambda a, b: a + b,
    np.subtract: lambda a, b: a - b,
    np.multiply: lambda a, b: a * b,
    np.true_divide: lambda a, b: a / b,
    np.power: lambda a, b: a ** b,
    np.matmul: lambda a, b: a @ b,
    np.equal: lambda a, b: a == b,
    np.not_equal: lambda a, b: a != b,
    np.less: lambda a, b: a < b,
    np.less_equal: lambda a, b: a <= b,
    np.greater: lambda a, b: a > b,
    np.greater_equal: lambda a, b: a >= b,
}

# Functions of two tensors (no Python-operator form): scalars become tensors first.
_BINARY_TENSORS = _from_registry("binary")
_BINARY_TENSORS.update({
    np.maximum: lambda a, b: _tj().maximum(a, b),
    np.minimum: lambda a, b: _tj().minimum(a, b),
    np.logaddexp: _logaddexp,
    np.logical_and: lambda a, b: _tj().logical_and(a, b),
    np.logical_or: lambda a, b: _tj().logical_or(a, b),
    np.logical_xor: lambda a, b: _tj().logical_xor(a, b),
})

_REDUCE = {
    np.add: lambda x, dim, keep: _tj().sum(x, dim, keep),
    np.multiply: lambda x, dim, keep: _tj().prod(x, dim, keep),
    np.maximum: lambda x, dim, keep: _tj().amax(x, () if dim is None else dim, keep),
    np.minimum: lambda x, dim, keep: _tj().amin(x, () if dim is None else dim, keep),
}


def _unsupported(name, detail=""):
    return TypeError(
        f"tapejit: {name} is not supported on tapejit tensors{detail}. A gradient through it "
        f"cannot be recorded, and converting the tensor to an array would silently lose it; "
        f"rewrite it with supported NumPy functions or tapejit ops")


def _tensor_operand(x, like):
    """A non-tensor operand of a NumPy call as a constant tensor (NumPy arrays keep their
    dtype; Python and NumPy scalars take the float dtype of the tensor operand)."""
    if isinstance(x, Tensor):
        return x
    if isinstance(x, np.generic):
        x = x.item()
    return as_tensor_operand(x, like)


def _operands(inputs):
    like = next(x for x in inputs if isinstance(x, Tensor))
    # NumPy scalars (np.float64 subclasses float) must become Python scalars or tensors:
    # their own operators would hand the call straight back to NumPy.
    return [x if isinstance(x, (Tensor, int, float, bool)) and not isinstance(x, np.generic)
            else _tensor_operand(x, like) for x in inputs]


def array_ufunc(ufunc, method, inputs, kwargs):
    name = f"numpy.{ufunc.__name__}"
    if kwargs.get("out") is not None:
        raise _unsupported(f"{name} with out=", " (in-place output)")
    extra = sorted(k for k, v in kwargs.items() if k != "out" and v is not None)
    if method == "__call__":
        if extra:
            raise _unsupported(f"{name} with {', '.join(extra)}=")
        if ufunc in _UNARY:
            return _UNARY[ufunc](_tensor_operand(inputs[0], None))
        if ufunc in _BINARY:
            a, b = _operands(inputs)   # a Python scalar left: the tensor's reflected operator
            return _BINARY[ufunc](a, b)
        if ufunc in _BINARY_TENSORS:
            like = next(x for x in inputs if isinstance(x, Tensor))
            a, b = (_tensor_operand(x, like) for x in inputs)
            return _BINARY_TENSORS[ufunc](a, b)
        raise _unsupported(name)
    if method == "reduce" and ufunc in _REDUCE:
        unknown = [k for k in extra if k not in ("axis", "keepdims")]
        if unknown:
            raise _unsupported(f"{name}.reduce with {', '.join(unknown)}=")
        axis = kwargs.get("axis", 0)
        return _REDUCE[ufunc](_tensor_operand(inputs[0], None), axis, bool(kwargs.get("keepdims", False)))
    raise _unsupported(f"{name}.{method}")


# ---- array functions -------------------------------------------------------------------

_FUNCTIONS = {}


def implements(*funcs):
    def register(handler):
        for f in funcs:
            _FUNCTIONS[f] = handler
        return handler
    return register


def _no_extras(name, **given):
    for v in given.values():
        if v is not None and v is not False:
            bad = sorted(k for k, v in given.items() if v is not None and v is not False)
            raise _unsupported(f"numpy.{name} with {', '.join(bad)}=")


def _dim(axis):
    return tuple(axis) if isinstance(axis, list) else axis


def _reduces_nothing(axis):
    """NumPy's ``axis=()`` reduces no axis (torch's ``dim=()`` would reduce them all)."""
    return isinstance(axis, (tuple, list)) and len(axis) == 0


@implements(np.sum)
def _sum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    _no_extras("sum", dtype=dtype, out=out, initial=initial, where=where)
    if _reduces_nothing(axis):
        return _tensor_operand(a, None).clone()
    return _tj().sum(_tensor_operand(a, None), _dim(axis), bool(keepdims))


@implements(np.mean)
def _mean(a, axis=None, dtype=None, out=None, keepdims=False, where=None):
    _no_extras("mean", dtype=dtype, out=out, where=where)
    if _reduces_nothing(axis):
        return _tensor_operand(a, None).clone()
    return _tj().mean(_tensor_operand(a, None), _dim(axis), bool(keepdims))


@implements(np.prod)
def _prod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    _no_extras("prod", dtype=dtype, out=out, initial=initial, where=where)
    if _reduces_nothing(axis):
        return _tensor_operand(a, None).clone()
    return _tj().prod(_tensor_operand(a, None), _dim(axis), bool(keepdims))


@implements(np.max, np.amax)
def _max(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    _no_extras("max", out=out, initial=initial, where=where)
    if _reduces_nothing(axis):
        return _tensor_operand(a, None).clone()
    return _tj().amax(_tensor_operand(a, None), () if axis is None else _dim(axis), bool(keepdims))


@implements(np.min, np.amin)
def _min(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    _no_extras("min", out=out, initial=initial, where=where)
    if _reduces_nothing(axis):
        return _tensor_operand(a, None).clone()
    return _tj().amin(_tensor_operand(a, None), () if axis is None else _dim(axis), bool(keepdims))


@implements(np.var)
def _var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, where=None, mean=None,
         correction=None):
    _no_extras("var", dtype=dtype, out=out, where=where, mean=mean)
    c = ddof if correction is None else correction
    return _tj().var(_tensor_operand(a, None), _dim(axis), keepdim=bool(keepdims), correction=c)


@implements(np.std)
def _std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, where=None, mean=None,
         correction=None):
    _no_extras("std", dtype=dtype, out=out, where=where, mean=mean)
    c = ddof if correction is None else correction
    return _tj().std(_tensor_operand(a, None), _dim(axis), keepdim=bool(keepdims), correction=c)


@implements(np.argmax)
def _argmax(a, axis=None, out=None, keepdims=False):
    _no_extras("argmax", out=out)
    return _tj().argmax(_tensor_operand(a, None), axis, bool(keepdims))


@implements(np.argmin)
def _argmin(a, axis=None, out=None, keepdims=False):
    _no_extras("argmin", out=out)
    return _tj().argmin(_tensor_operand(a, None), axis, bool(keepdims))


@implements(np.linalg.norm)
def _norm(x, ord=None, axis=None, keepdims=False):
    x = _tensor_operand(x, None)
    vector = axis is not None and not isinstance(axis, (tuple, list)) or x.ndim == 1 and axis is None
    if ord is None or ord == "fro" and not vector:
        return _tj().norm(x, 2, _dim(axis), bool(keepdims))
    if vector and isinstance(ord, (int, float)):
        return _tj().norm(x, float(ord), axis, bool(keepdims))
    raise _unsupported(f"numpy.linalg.norm with ord={ord!r}", f" for shape {list(x.shape)}")


@implements(np.dot)
def _dot(a, b, out=None):
    _no_extras("dot", out=out)
    like = a if isinstance(a, Tensor) else b
    a, b = _tensor_operand(a, like), _tensor_operand(b, like)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    if a.ndim > 2 or b.ndim > 2:
        raise _unsupported("numpy.dot", f" for shapes {list(a.shape)} and {list(b.shape)} "
                           f"(above 2-D NumPy's dot is not matmul)")
    return a @ b


# NumPy mode's implementations by name, and its ``to_tensor``: tapejit/numpy_mode.py, above
# this module, hands them over at import with ``provide``.
_numpy_mode = {}


def provide(**functions):
    _numpy_mode.update(functions)


def _numpy_semantics(name):
    """NumPy's function on tensors with NumPy's semantics: NumPy mode's implementation
    (tapejit/numpy_mode.py), which takes tensors, its traced results unwrapped."""
    def call(*args, **kwargs):
        result = _numpy_mode[name](*args, **kwargs)
        to_tensor = _numpy_mode["to_tensor"]
        if isinstance(result, (list, tuple)):
            return type(result)(to_tensor(r) for r in result)
        return to_tensor(result)
    return call


# np.inner of 0-d and n-d operands, hstack of 0-d pieces: NumPy's rules, not torch.inner's.
implements(np.inner)(_numpy_semantics("_inner"))


@implements(np.outer)
def _outer(a, b, out=None):
    _no_extras("outer", out=out)
    like = a if isinstance(a, Tensor) else b
    return _tj().outer(_tensor_operand(a, like).reshape(-1), _tensor_operand(b, like).reshape(-1))


@implements(np.trace)
def _trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    _no_extras("trace", dtype=dtype, out=out)
    a = _tensor_operand(a, None)
    if a.ndim != 2 or offset or (axis1, axis2) != (0, 1):
        raise _unsupported("numpy.trace", f" beyond the main diagonal of a matrix (shape {list(a.shape)})")
    n = min(a.shape)
    i = np.arange(n)
    return a[i, i].sum()


@implements(np.where)
def _where(condition, x=None, y=None):
    if x is None or y is None:
        raise _unsupported("numpy.where with one argument", " (use numpy.nonzero on values)")
    like = x if isinstance(x, Tensor) else y if isinstance(y, Tensor) else None
    c = condition._value() if isinstance(condition, Tensor) else np.asarray(condition)
    if like is None:
        return _concrete(np.where(c, x, y))
    return _tj().where(_concrete(c.astype(bool)), _tensor_operand(x, like), _tensor_operand(y, like))


@implements(np.clip)
def _clip(a, a_min=None, a_max=None, out=None, *, min=None, max=None, **kwargs):
    _no_extras("clip", out=out, **kwargs)
    lo = a_min if a_min is not None else min
    hi = a_max if a_max is not None else max
    return _tj().clamp(_tensor_operand(a, None), lo, hi)


def _sequence(arrays):
    arrays = list(arrays)
    like = next((x for x in arrays if isinstance(x, Tensor)), None)
    return [_tensor_operand(x, like) for x in arrays]


@implements(np.concatenate)
def _concatenate(arrays, axis=0, out=None, dtype=None, casting=None):
    _no_extras("concatenate", out=out, dtype=dtype)
    tensors = _sequence(arrays)
    if axis is None:
        return _tj().cat([t.reshape(-1) for t in tensors])
    return _tj().cat(tensors, axis)


@implements(np.stack)
def _stack(arrays, axis=0, out=None, dtype=None, casting=None):
    _no_extras("stack", out=out, dtype=dtype)
    return _tj().stack(_sequence(arrays), axis)


implements(np.hstack)(_numpy_semantics("_hstack"))
implements(np.vstack)(_numpy_semantics("_vstack"))


@implements(np.reshape)
def _reshape(a, newshape=None, order="C", *, shape=None, copy=None):
    if order != "C":
        raise _unsupported(f"numpy.reshape with order={order!r}")
    target = shape if shape is not None else newshape
    target = (target,) if isinstance(target, int) else tuple(target)
    return _tensor_operand(a, None).reshape(*target)


@implements(np.ravel)
def _ravel(a, order="C"):
    if order != "C":
        raise _unsupported(f"numpy.ravel with order={order!r}")
    return _tensor_operand(a, None).reshape(-1)


@implements(np.transpose)
def _transpose(a, axes=None):
    a = _tensor_operand(a, None)
    order = tuple(range(a.ndim))[::-1] if axes is None else tuple(axes)
    return a.permute(*order)


@implements(np.swapaxes)
def _swapaxes(a, axis1, axis2):
    return _tensor_operand(a, None).transpose(axis1, axis2)


@implements(np.moveaxis)
def _moveaxis(a, source, destination):
    a = _tensor_operand(a, None)
    n = a.ndim
    src = [s % n for s in ((source,) if isinstance(source, int) else source)]
    dst = [d % n for d in ((destination,) if isinstance(destination, int) else destination)]
    order = [i for i in range(n) if i not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return a.permute(*order)


@implements(np.squeeze)
def _squeeze(a, axis=None):
    a = _tensor_operand(a, None)
    if axis is None:
        return a.squeeze()
    n = a.ndim
    axes = sorted({d % n for d in ((axis,) if isinstance(axis, int) else axis)}, reverse=True)
    for d in axes:   # last first, so the earlier axes keep their positions
        if a.shape[d] != 1:
            raise ValueError("cannot select an axis to squeeze out which has size not equal to one")
        a = a.squeeze(d)
    return a


@implements(np.expand_dims)
def _expand_dims(a, axis):
    a = _tensor_operand(a, None)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    n = a.ndim + len(axes)
    for d in sorted(x % n for x in axes):
        a = a.unsqueeze(d)
    return a


@implements(np.diff)
def _diff(a, n=1, axis=-1, prepend=None, append=None):
    _no_extras("diff", prepend=prepend, append=append)
    a = _tensor_operand(a, None)
    axis = axis % a.ndim
    for _ in range(n):
        head = [slice(None)] * axis + [slice(1, None)]
        tail = [slice(None)] * axis + [slice(None, -1)]
        a = a[tuple(head)] - a[tuple(tail)]
    return a


@implements(np.split)
def _split(ary, indices_or_sections, axis=0):
    a = _tensor_operand(ary, None)
    size = a.shape[axis]
    if isinstance(indices_or_sections, int):
        if size % indices_or_sections:
            raise ValueError("array split does not result in an equal division")
        return list(_tj().split(a, size // indices_or_sections, axis))
    # Indices are slice bounds, as NumPy takes them: negative ones count from the end, and
    # a bound below the previous one gives an empty piece.
    bounds = [0] + [int(i) for i in indices_or_sections] + [size]
    lead = (slice(None),) * (axis % a.ndim)
    return [a[lead + (slice(lo, hi),)] for lo, hi in itertools.pairwise(bounds)]


@implements(np.copy)
def _copy(a, order="K", subok=False):
    return _tensor_operand(a, None).clone()


implements(np.cumsum)(_numpy_semantics("_np_cumsum"))   # differentiable: shifted adds


# Metadata and values: nothing to differentiate.

@implements(np.shape)
def _shape(a):
    return tuple(a.shape)


@implements(np.ndim)
def _ndim(a):
    return a.ndim


@implements(np.size)
def _size(a, axis=None):
    return a.numel() if axis is None else a.shape[axis]


def _like(numpy_fn):
    """``np.zeros_like(t)`` and friends: constants (NumPy arrays) of the tensor's shape."""
    def like(a, *args, **kwargs):
        return numpy_fn(a._value() if isinstance(a, Tensor) else a, *args, **kwargs)
    return like


for _name in ("zeros_like", "ones_like", "empty_like", "full_like"):
    implements(getattr(np, _name))(_like(getattr(np, _name)))


def _on_values(numpy_fn):
    def on_values(*args, **kwargs):
        args = [a._value() if isinstance(a, Tensor) else a for a in args]
        return numpy_fn(*args, **kwargs)
    return on_values


for _fn in (np.allclose, np.isclose, np.array_equal, np.count_nonzero, np.nonzero, np.argwhere,
            np.flatnonzero):
    implements(_fn)(_on_values(_fn))


def array_function(func, types, args, kwargs):
    if not all(issubclass(t, (Tensor, np.ndarray)) for t in types):
        return NotImplemented
    handler = _FUNCTIONS.get(func)
    if handler is None:
        raise _unsupported(_public_name(func))
    return handler(*args, **kwargs)


def supported_functions():
    """Names of the NumPy functions and ufuncs tensors support (for docs and tests)."""
    names = {f"numpy.{u.__name__}" for u in (*_UNARY, *_BINARY, *_BINARY_TENSORS)}
    names |= {_public_name(f) for f in _FUNCTIONS}
    return sorted(names)


def _public_name(func):
    module = getattr(func, "__module__", None) or "numpy"
    return f"{'numpy' if module.startswith('numpy._core') else module}.{func.__name__}"


del _name, _fn


_provide_to_tensor(array_ufunc=array_ufunc, array_function=array_function)
