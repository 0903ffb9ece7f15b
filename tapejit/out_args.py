"""``out=`` on the torch functions scripts pass it to (``torch.add(a, b, out=c)``,
``torch.cat(ts, out=buf)``, ``torch.zeros(3, out=t)``), with torch's semantics: the result
is computed as without ``out`` and written into ``out``, which is returned; an ``out`` of
another shape is resized (with torch's deprecation warning unless it is empty); a result
that cannot be cast to ``out``'s dtype (float into an integer tensor) is torch's error; and
with gradients on, ``out=`` refuses any argument that requires grad, as torch does (the
write could not be recorded).

The wrappers are installed over the front ends in the ``tapejit`` namespace (one keyword
check per call when ``out`` is not given)."""
import functools
import warnings

from tapejit import dtypes
from tapejit.grad_mode import is_grad_enabled, no_grad
from tapejit.tensor import Tensor

#: functions of the ``tapejit`` namespace that take ``out=`` (torch's keyword)
FUNCTIONS = (
    "add", "sub", "subtract", "mul", "multiply", "div", "divide", "true_divide", "pow", "neg", "abs",
    "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh", "sigmoid", "clamp", "clip", "floor", "ceil",
    "round", "trunc", "sign", "reciprocal", "maximum", "minimum", "remainder", "fmod", "floor_divide",
    "matmul", "mm", "bmm", "mv", "dot", "outer", "addmm", "baddbmm", "cat", "concat", "concatenate", "stack",
    "hstack", "vstack", "sum", "mean", "prod", "cumsum", "cumprod", "logsumexp", "where", "lerp", "erf",
    "zeros", "ones", "empty", "arange", "linspace", "eq", "ne", "lt", "le", "gt", "ge", "logical_and",
    "logical_or", "logical_not",
    "asin", "acos", "atan", "atan2", "sinh", "cosh", "asinh", "acosh", "atanh", "expm1", "log1p", "log2", "log10",
    "exp2", "erfc", "erfinv", "lgamma", "digamma", "polygamma", "frac", "square", "logit", "sinc", "xlogy", "hypot",
    "logaddexp", "nan_to_num", "clamp_min", "clamp_max", "addmv", "addcmul", "addcdiv", "tensordot", "kron",
    "cross", "inverse", "gather", "index_select", "take", "index_add", "scatter", "scatter_add", "tril", "triu",
    "diag", "nonzero", "histc", "argmax", "argmin", "amax", "amin", "all", "any", "std", "var", "norm",
    "softmax", "log_softmax", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not",
    # (values, indices) results: out= is a pair of tensors, as torch's
    "max", "min", "sort", "topk",
)

_CREATION = frozenset({"zeros", "ones", "empty", "arange", "linspace"})
_CATEGORY = {"bool": 0, "int64": 1}   # anything else is floating point: 2


def _category(dt):
    return _CATEGORY.get(dt.name, 2)


def write_out(name, result, out):
    """torch's ``out=``: ``result`` into ``out`` (resized and cast as torch does)."""
    if isinstance(result, tuple) and isinstance(out, (tuple, list)) and len(out) == len(result):
        return tuple(write_out(name, part, into) for part, into in zip(result, out))
    if not isinstance(out, Tensor):
        raise TypeError(f"{name}(): argument 'out' must be Tensor, not {type(out).__name__}")
    if not isinstance(result, Tensor):
        raise TypeError(f"{name}(): out= needs a single tensor result (got {type(result).__name__})")
    if _category(result._dtype) > _category(out._dtype):
        raise RuntimeError(f"result type {dtypes.SCALAR_TYPE_NAMES[result._dtype.name]} can't be cast to the "
                           f"desired output type {dtypes.SCALAR_TYPE_NAMES[out._dtype.name]}")
    with no_grad():
        if out._shape != result._shape:
            if out._numel and name not in _CREATION:   # torch's factories resize silently
                warnings.warn(
                    f"An output with one or more elements was resized since it had shape {list(out._shape)}, "
                    f"which does not match the required output shape {list(result._shape)}. This behavior is "
                    f"deprecated, and in a future PyTorch release outputs will not be resized unless they have "
                    f"zero elements. You can explicitly reuse an out tensor t by resizing it, inplace, to zero "
                    f"elements with t.resize_(0). (Triggered internally in {name})", UserWarning, stacklevel=3)
            if out._tape is not None:
                raise RuntimeError(f"{name}(): cannot resize out= tensor of shape {list(out._shape)}: it is the "
                                   f"result of a recorded op (use a fresh tensor)")
            out.data = result.to(out._dtype).detach().clone()
        else:
            out.copy_(result)
    return out


def _with_out(name, fn):
    @functools.wraps(fn)
    def call(*args, out=None, **kwargs):
        if out is None:
            return fn(*args, **kwargs)
        if is_grad_enabled() and (_requires_grad(args) or _requires_grad(kwargs.values()) or
                                  (isinstance(out, Tensor) and out._rg)):
            raise RuntimeError(f"{name}(): functions with out=... arguments don't support automatic "
                               f"differentiation, but one of the arguments requires grad.")
        return write_out(name, fn(*args, **kwargs), out)
    return call


def _requires_grad(values):
    for v in values:
        if isinstance(v, Tensor):
            if v._rg:
                return True
        elif isinstance(v, (list, tuple)) and any(isinstance(t, Tensor) and t._rg for t in v):
            return True
    return False


def install(namespace):
    for name in FUNCTIONS:
        fn = namespace.get(name)
        if fn is not None:
            namespace[name] = _with_out(name, fn)
