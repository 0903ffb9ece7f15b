"""``tapejit.nn.functional``: layers and losses as functions, with PyTorch's names.

Everything here is composed from the core's differentiable ops (no opcodes of its own),
choosing compositions that add few records to the tape (``linear`` is the core's fused
record, AddmmBackward0 as torch).  The losses live in
``tapejit.nn.losses`` and are re-exported here.
"""
import numpy as np

from tapejit import dtypes
from tapejit.api import argument_error, front_end as _front_end
from tapejit.creation import rng as _rng
from tapejit.nn.losses import (
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    cross_entropy,
    l1_loss,
    mse_loss,
    nll_loss,
)
from tapejit.ops.activation import log_softmax, softmax
from tapejit.ops.linalg import linear
from tapejit.ops.movement import where as _where
from tapejit.ops.unary import clamp, expm1, gelu, sigmoid, softplus, tanh
from tapejit.ops.unary import leaky_relu as _leaky_relu
from tapejit.ops.unary import relu as _relu
from tapejit.printing import type_name
from tapejit.tensor import Tensor, _concrete

__all__ = ["binary_cross_entropy", "binary_cross_entropy_with_logits", "cross_entropy", "dropout", "elu",
           "embedding", "gelu", "l1_loss", "layer_norm", "leaky_relu", "linear", "log_softmax", "mse_loss",
           "nll_loss", "normalize", "one_hot", "relu", "sigmoid", "silu", "softmax", "softplus", "tanh"]


def relu(input, inplace=False):
    if inplace:
        from tapejit.inplace import apply_inplace
        return apply_inplace(input, lambda: _relu(input), "relu_")
    return _relu(input)


def leaky_relu(input, negative_slope=0.01, inplace=False):
    if inplace:
        from tapejit.inplace import apply_inplace
        return apply_inplace(input, lambda: _leaky_relu(input, negative_slope), "leaky_relu_")
    return _leaky_relu(input, negative_slope)


def silu(input, inplace=False):
    """``x * sigmoid(x)``."""
    if inplace:
        from tapejit.inplace import apply_inplace
        return apply_inplace(input, lambda: silu(input), "silu_")
    return input * sigmoid(input)


def elu(input, alpha=1.0, inplace=False):
    """``x`` for ``x > 0``, else ``alpha * (exp(x) - 1)``; the gradient at 0 is ``alpha``, as
    torch's."""
    if inplace:
        from tapejit.inplace import apply_inplace
        return apply_inplace(input, lambda: elu(input, alpha), "elu_")
    # relu'(0) = 0 and clamp passes the gradient at its bound, so the kink's gradient is alpha.
    # Clamping (not tapejit.where) keeps exp from overflowing on the unused branch (0 * inf is
    # NaN) and reads no values, so the composition can be traced.
    return _relu(input) + expm1(clamp(input, max=0.0)) * alpha


def normalize(input, p=2.0, dim=1, eps=1e-12):
    """``input`` divided by its ``p``-norm along ``dim``, the norm clamped below at ``eps``."""
    return input / clamp(input.norm(p, dim, keepdim=True), min=eps)


def dropout(input, p=0.5, training=True, inplace=False):
    """Zero each element with probability ``p`` and scale the rest by ``1/(1-p)`` (a
    multiply by a constant mask drawn from tapejit's generator, so ``tj.manual_seed``
    makes it reproducible).  The identity when not ``training``."""
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    dt = input._dtype if input._dtype.is_floating_point else dtypes.get_default_dtype()
    keep = 1.0 - p
    if keep == 0.0:
        mask = np.zeros(input._shape, dt.np)
    else:
        mask = (_rng().random(input._shape) < keep).astype(dt.np) * dt.np.type(1.0 / keep)
    if inplace:
        return input.mul_(_concrete(mask))
    return input * _concrete(mask)


def one_hot(tensor, num_classes=-1):
    """int64 one-hot encoding along a new last dimension."""
    if not isinstance(tensor, Tensor):
        raise argument_error("one_hot", "input", 1, tensor, "Tensor")
    if tensor._dtype is not dtypes.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    values = tensor._value()
    if num_classes == -1:
        if values.size == 0:
            raise RuntimeError("Can not infer total number of classes from empty tensor.")
        num_classes = int(values.max()) + 1
    if values.size and values.min() < 0:
        raise RuntimeError("Class values must be non-negative.")
    if values.size and values.max() >= num_classes:
        raise RuntimeError("Class values must be smaller than num_classes.")
    return _concrete((values[..., None] == np.arange(num_classes)).astype(np.int64))


def embedding(input, weight, padding_idx=None):
    """Rows of ``weight`` picked by the int64 ``input`` (its gradient scatters back into
    the rows, summing repeats).  The ``padding_idx`` row is returned but gets no gradient."""
    # torch's order and positions: its embedding() takes (weight, indices)
    if not isinstance(weight, Tensor):
        raise argument_error("embedding", "weight", 1, weight, "Tensor")
    if not isinstance(input, Tensor):
        raise argument_error("embedding", "indices", 2, input, "Tensor")
    if not isinstance(input, Tensor) or input._dtype is not dtypes.int64:
        got = type_name(input) if isinstance(input, Tensor) else type(input).__name__
        raise RuntimeError("Expected tensor for argument #1 'indices' to have one of the following scalar "
                           f"types: Long, Int; but got {got} instead (while checking arguments for embedding)")
    rows = weight._shape[0]
    index = input._value()
    if index.size and (index.min() < 0 or index.max() >= rows):
        bad = index[(index < 0) | (index >= rows)].reshape(-1)[0]
        raise IndexError(f"index out of range in self (embedding: index {bad} with {rows} rows)")
    padding_idx = _padding_index(padding_idx, rows)
    out = weight[index]
    if padding_idx is not None and out._rg:
        padded = index == padding_idx
        if padded.any():
            fixed_row = _concrete(np.array(weight._value()[padding_idx]))
            out = _where(padded[..., None], fixed_row, out)
    return out


def _padding_index(padding_idx, rows):
    if padding_idx is None:
        return None
    if not -rows <= padding_idx < rows:
        raise AssertionError("Padding_idx must be within num_embeddings")
    return padding_idx % rows


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalize over the trailing ``normalized_shape`` dims (biased variance), then scale
    and shift."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    k = len(shape)
    if k == 0 or len(input._shape) < k or tuple(input._shape[-k:]) != shape:
        raise RuntimeError(
            f"Given normalized_shape={list(shape)}, expected input with shape [*, "
            f"{', '.join(map(str, shape))}], but got input of size{list(input._shape)}")
    dims = tuple(range(-k, 0))
    centred = input - input.mean(dims, keepdim=True)
    variance = (centred * centred).mean(dims, keepdim=True)
    out = centred * (variance + eps).rsqrt()
    if weight is not None:
        out = weight * out
    if bias is not None:
        out = bias + out
    return out


# torch's TypeError naming the argument that is not a tensor, from a front end built from
# each signature (api.front_end: one more Python frame per call, nothing measurable for a
# layer).  softplus checks where a non-tensor fails instead (scalar code calls it per op);
# sigmoid, tanh, softmax, log_softmax, normalize and the MSE, L1 and BCE losses are not
# wrapped: torch implements them in Python on tensor methods, so a non-tensor raises
# AttributeError there, as here.
for _name in ("relu", "leaky_relu", "silu", "elu", "gelu", "linear", "dropout", "layer_norm", "cross_entropy",
              "nll_loss"):
    globals()[_name] = _front_end(globals()[_name], _name)
del _name


# ---- convolution, pooling, upsampling (their ops: tapejit/ops/conv.py, tapejit/ops/pool.py) ----
from tapejit.ops.conv import conv1d, conv2d, conv_transpose1d, conv_transpose2d  # noqa: E402
from tapejit.ops.pool import (  # noqa: E402
    adaptive_avg_pool1d,
    adaptive_avg_pool2d,
    adaptive_max_pool1d,
    adaptive_max_pool2d,
    avg_pool1d,
    avg_pool2d,
    interpolate,
    max_pool1d,
    max_pool2d,
)

__all__ += ["adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_max_pool1d", "adaptive_max_pool2d",
            "avg_pool1d", "avg_pool2d", "conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d", "dropout2d",
            "interpolate", "max_pool1d", "max_pool2d"]


def dropout2d(input, p=0.5, training=True, inplace=False):
    """Zero whole channels (``input[n, c]``) with probability ``p`` and scale the rest by
    ``1/(1-p)``: a multiply by a constant ``(N, C, 1, 1)`` mask (grad_fn ``MulBackward0``, as
    torch).  A 3-d input is taken as ``(N, C, L)``, with torch's warnings for other ranks."""
    import warnings
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    ndim = len(input._shape)
    if ndim not in (3, 4):
        warnings.warn(f"dropout2d: Received a {ndim}-D input to dropout2d, which is deprecated and will result in an "
                      "error in a future release. To retain the behavior and silence this warning, please use dropout "
                      "instead. Note that dropout2d exists to provide channel-wise dropout on inputs with 2 spatial "
                      "dimensions, a channel dimension, and an optional batch dimension (i.e. 3D or 4D inputs).",
                      stacklevel=2)
    if ndim == 3:
        warnings.warn("dropout2d: Received a 3D input to dropout2d and assuming that channel-wise 1D dropout behavior "
                      "is desired - input is interpreted as shape (N, C, L), where C is the channel dim. This behavior "
                      "will change in a future release to interpret the input as one without a batch dimension, i.e. "
                      "shape (C, H, W). To maintain the 1D channel-wise dropout behavior, please switch to using "
                      "dropout1d instead.", stacklevel=2)
    if not training or p == 0.0 or input._numel == 0:
        return input
    if ndim < 2:
        raise RuntimeError(f"Feature dropout requires at least 2 dimensions in the input (got input of size "
                           f"{list(input._shape)})")
    if not input._dtype.is_floating_point:
        name = dtypes.SCALAR_TYPE_NAMES[dtypes.get_default_dtype().name]
        raise RuntimeError(f"result type {name} can't be cast to the desired output type "
                           f"{dtypes.SCALAR_TYPE_NAMES[input._dtype.name]}")
    dt = input._dtype
    keep = 1.0 - p
    shape = tuple(input._shape[:2]) + (1,) * (ndim - 2)
    if keep == 0.0:
        mask = np.zeros(shape, dt.np)
    else:
        mask = (_rng().random(shape) < keep).astype(dt.np) * dt.np.type(1.0 / keep)
    if inplace:
        return input.mul_(_concrete(mask))
    return input * _concrete(mask)
