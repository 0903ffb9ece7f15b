"""``tapejit.nn.functional``: layers and losses as functions, with PyTorch's names.

Everything here is composed from the core's differentiable ops (no opcodes of its own),
choosing compositions that add few records to the tape (``linear`` is the core's fused
record, AddmmBackward0 as torch).  The losses live in
``tapejit.nn.loss_functions`` and are re-exported here.
"""
import sys as _sys

import numpy as np

from tapejit import dtypes
from tapejit.api import argument_error, front_end as _front_end
from tapejit.autograd import profiler as _profiler
from tapejit.creation import rng as _rng
from tapejit.recording import name_composite
from tapejit.nn.loss_functions import (
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    cosine_embedding_loss,
    cosine_similarity,
    cross_entropy,
    gaussian_nll_loss,
    hinge_embedding_loss,
    huber_loss,
    kl_div,
    l1_loss,
    margin_ranking_loss,
    mse_loss,
    multi_margin_loss,
    multilabel_soft_margin_loss,
    nll_loss,
    pairwise_distance,
    poisson_nll_loss,
    smooth_l1_loss,
    soft_margin_loss,
    triplet_margin_loss,
)
from tapejit.nn.padding import pad
from tapejit.ops.softmax import log_softmax, softmax
from tapejit.ops.linalg import linear
from tapejit.ops.indexing import where as _where
from tapejit.ops.unary import clamp, expm1, gelu, sigmoid, softplus, tanh
from tapejit.ops.unary import leaky_relu as _leaky_relu
from tapejit.ops.unary import relu as _relu
from tapejit.printing import type_name
from tapejit.shapes import numel as _numel
from tapejit.tensor import Tensor, _concrete

_profiler.time_functions_of(_sys.modules[__name__])   # a profile times these functions too

__all__ = ["binary_cross_entropy", "binary_cross_entropy_with_logits", "cross_entropy", "dropout", "elu",
           "embedding", "gelu", "l1_loss", "layer_norm", "leaky_relu", "linear", "log_softmax", "mse_loss",
           "nll_loss", "normalize", "one_hot", "pad", "relu", "sigmoid", "silu", "softmax", "softplus", "tanh",
           "cosine_embedding_loss", "cosine_similarity", "gaussian_nll_loss", "hinge_embedding_loss",
           "huber_loss", "kl_div", "margin_ranking_loss", "multi_margin_loss", "multilabel_soft_margin_loss",
           "pairwise_distance", "poisson_nll_loss", "smooth_l1_loss", "soft_margin_loss", "triplet_margin_loss"]


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
    return name_composite(input * sigmoid(input), "SiluBackward0", input)


def elu(input, alpha=1.0, inplace=False):
    """``x`` for ``x > 0``, else ``alpha * (exp(x) - 1)``; the gradient at 0 is ``alpha``, as
    torch's."""
    if inplace:
        from tapejit.inplace import apply_inplace
        return apply_inplace(input, lambda: elu(input, alpha), "elu_")
    # relu'(0) = 0 and clamp passes the gradient at its bound, so the kink's gradient is alpha.
    # Clamping (not tapejit.where) keeps exp from overflowing on the unused branch (0 * inf is
    # NaN) and reads no values, so the composition can be traced.
    return name_composite(_relu(input) + expm1(clamp(input, max=0.0)) * alpha, "EluBackward0", input)


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
    if not isinstance(input, Tensor) or input._dtype not in (dtypes.int64, dtypes.int32):
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
    return name_composite(out, "EmbeddingBackward0", weight)


def _padding_index(padding_idx, rows):
    if padding_idx is None:
        return None
    if not -rows <= padding_idx < rows:
        raise AssertionError("Padding_idx must be within num_embeddings")
    return padding_idx % rows


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalize over the trailing ``normalized_shape`` dims (biased variance), then scale
    and shift: one record (NativeLayerNormBackward0, tapejit/ops/norm.py)."""
    from tapejit.ops import norm as _norm
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    k = len(shape)
    if k == 0:
        raise RuntimeError("Expected normalized_shape to be at least 1-dimensional, i.e., containing at least "
                           f"one element, but got normalized_shape = {list(shape)}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(t._shape) != shape:
            raise RuntimeError(f"Expected {name} to be of same shape as normalized_shape, but got {name} of shape "
                               f"{list(t._shape)} and normalized_shape = {list(shape)}")
    if len(input._shape) < k or tuple(input._shape[-k:]) != shape:
        raise RuntimeError(
            f"Given normalized_shape={list(shape)}, expected input with shape [*, "
            f"{', '.join(map(str, shape))}], but got input of size{list(input._shape)}")
    _norm_dtypes(input, "LayerNormKernelImpl", weight, bias)
    size = _numel(shape)
    rows = _numel(input._shape[:-k])
    return _norm.normalize(_norm.LAYER_NORM, input, weight, bias, None, None, eps, (1, rows, size, 1, 0, 1, size))


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



# ---- normalisation: one record each (tapejit/ops/norm.py) -----------------------------------

def _verify_batch_size(size):
    size_prods = size[0]
    for i in range(len(size) - 2):
        size_prods *= size[i + 2]
    if size_prods == 1:
        raise ValueError(f"Expected more than 1 value per channel when training, got input size {size}")


def _verify_spatial_size(size):
    size_prods = 1
    for i in range(2, len(size)):
        size_prods *= size[i]
    if size_prods == 1:
        raise ValueError(f"Expected more than 1 spatial element when training, got input size {size}")


def _norm_dtypes(input, kernel, *params):
    """torch's CPU rules: a float input, and parameters of its dtype."""
    if not input._dtype.is_floating_point:
        raise dtypes.not_implemented(kernel, input._dtype)
    for t in params:
        if t is not None and t._dtype is not input._dtype:
            if input._dtype is dtypes.float32:
                raise RuntimeError("mixed dtype (CPU): expect parameter to have scalar type of Float")
            raise RuntimeError("mixed dtype (CPU): all inputs must share same datatype.")


def _channels(input):
    if len(input._shape) < 2:
        raise IndexError(f"Dimension out of range (expected to be in range of [-{max(len(input._shape), 1)}, "
                         f"{max(len(input._shape), 1) - 1}], but got 1)")
    shape = input._shape
    return shape[0], shape[1], _numel(shape[2:])


def _not_differentiable(running_mean, running_var):
    from tapejit.grad_mode import is_grad_enabled
    for name, t in (("running_mean", running_mean), ("running_var", running_var)):
        if t is not None and t.requires_grad and is_grad_enabled():
            raise RuntimeError(f"The function 'native_batch_norm' is not differentiable with respect to argument "
                               f"'{name}'. This input cannot have requires_grad True.")


def _update_running_stats(input, running_mean, running_var, momentum, instances):
    """torch's in-place update of the running statistics in training: ``momentum * batch +
    (1 - momentum) * running``, with the unbiased variance, computed in float64.  With
    ``instances`` (instance norm) the statistics are per (sample, channel) and averaged over
    the samples."""
    from tapejit.grad_mode import no_grad
    from tapejit.tape import state
    if state.trace is not None:   # tj.compile: a replay would not repeat the update
        from tapejit.inplace import check_write
        check_write(running_mean)
    n, c = input._shape[:2]
    x = input._value().astype(np.float64).reshape(n, c, -1)
    count = x.shape[2] if instances else n * x.shape[2]
    if instances:
        mean = x.mean(axis=2)
        var = x.var(axis=2) * (count / (count - 1))
    else:
        mean = x.mean(axis=(0, 2))
        var = x.var(axis=(0, 2)) * (count / (count - 1))
    for buffer, batch in ((running_mean, mean), (running_var, var)):
        old = buffer._value().astype(np.float64)
        new = momentum * batch + (1 - momentum) * old
        if instances:
            new = new.mean(axis=0)
        with no_grad():
            buffer.copy_(_concrete(np.asarray(new, dtype=buffer._dtype.np)))


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1,
               eps=1e-5):
    """Normalize each channel (dim 1) by the batch's statistics in training (updating
    ``running_mean``/``running_var`` in place when given) or by the running ones."""
    from tapejit.ops import norm as _norm
    if training:
        _verify_batch_size(input.size())
    if training and eps <= 0.0:
        raise ValueError(f"batch_norm eps must be positive during training, but got {eps}")
    elif eps < 0.0:
        raise ValueError(f"batch_norm eps must be non-negative, but got {eps}")
    if (running_mean is None) != (running_var is None):
        raise ValueError("running_mean and running_var must either both be None or neither be None")
    n, c, length = _channels(input)
    if not training and running_mean is None:
        raise RuntimeError("running_mean must be defined in evaluation mode")
    for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
                    ("bias", bias)):
        if t is not None and t.numel() != c:
            raise RuntimeError(f"{name} should contain {c} elements not {t.numel()}")
    _norm_dtypes(input, "batch_norm", weight, bias, running_mean, running_var)
    _not_differentiable(running_mean, running_var)
    if training and running_mean is not None:
        _update_running_stats(input, running_mean, running_var, momentum, instances=False)
    given = not training
    return _norm.normalize(_norm.BATCH_NORM, input, weight, bias, running_mean if given else None,
                           running_var if given else None, eps, (n, c, length, c, 1, length, c))


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
                  momentum=0.1, eps=1e-5):
    """Normalize each channel of each sample by its own statistics (or by running ones when
    not ``use_input_stats``); running statistics given are updated with the samples' mean."""
    from tapejit.ops import norm as _norm
    if use_input_stats:
        _verify_spatial_size(input.size())
    n, c, length = _channels(input)
    if not use_input_stats and (running_mean is None or running_var is None):
        raise RuntimeError("Expected running_mean and running_var to be defined when use_input_stats is false")
    for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
                    ("bias", bias)):
        if t is not None and t.numel() != c:   # torch repeats them per sample first
            raise RuntimeError(f"{name} should contain {n * c} elements not {n * t.numel()}")
    _norm_dtypes(input, "batch_norm", weight, bias, running_mean, running_var)
    _not_differentiable(running_mean, running_var)
    if use_input_stats and running_mean is not None:
        _update_running_stats(input, running_mean, running_var, momentum, instances=True)
    given = not use_input_stats
    return _norm.normalize(_norm.INSTANCE_NORM, input, weight, bias, running_mean if given else None,
                           running_var if given else None, eps, (1, n * c, length, c, 1, length, c))


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """Normalize each group of ``C / num_groups`` channels of each sample; ``weight`` and
    ``bias`` are per channel."""
    from tapejit.ops import norm as _norm
    if input.dim() < 2:
        raise RuntimeError(f"Expected at least 2 dimensions for input tensor but received {input.dim()}")
    shape = input._shape
    n, c = shape[0], shape[1]
    _verify_batch_size([n * c // num_groups, num_groups] + list(shape[2:]))
    if c % num_groups:
        raise RuntimeError("Expected number of channels in input to be divisible by num_groups, but got input "
                           f"of shape {list(shape)} and num_groups={num_groups}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and (t.dim() != 1 or t.numel() != c):
            raise RuntimeError(f"Expected {name} to be a vector of size equal to the number of channels in input, "
                               f"but got {name} of shape {list(t._shape)} and input of shape {list(shape)}")
    _norm_dtypes(input, "group_norm", weight, bias)
    length = _numel(shape[2:])
    per = c // num_groups
    return _norm.normalize(_norm.GROUP_NORM, input, weight, bias, None, None, eps,
                           (1, n * num_groups, per * length, num_groups, per, length, c))


def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0):
    """``input / (k + alpha * mean of input**2 over size neighbouring channels) ** beta``,
    the window zero-padded at the edges as torch's."""
    from tapejit.ops.join import cat
    dim = input.dim()
    if dim < 3:
        raise ValueError(f"Expected 3D or higher dimensionality                          input (got {dim} dimensions)")
    if input.numel() == 0:
        return input
    shape = input._shape
    c = shape[1]
    div = input * input
    front, back = size // 2, (size - 1) // 2
    zeros = [_concrete(np.zeros((shape[0], m) + shape[2:], div._dtype.np)) for m in (front, back)]
    if front or back:
        div = cat(([zeros[0]] if front else []) + [div] + ([zeros[1]] if back else []), 1)
    total = div[:, 0:c]
    for i in range(1, size):
        total = total + div[:, i:i + c]
    return input / ((total / size) * alpha + k) ** beta


__all__ += ["batch_norm", "group_norm", "instance_norm", "local_response_norm"]


# ---- attention: compositions of the ops above (tapejit/nn/attention.py) ---------------------
from tapejit.nn.attention import multi_head_attention_forward, scaled_dot_product_attention  # noqa: E402

__all__ += ["multi_head_attention_forward", "scaled_dot_product_attention"]


# ---- more activations: compositions of the core's ops (no opcodes of their own) -----------
#
# Where torch's subgradient at a kink differs from what the composition would give, the
# composition is chosen to give torch's (the kink points are tested against torch).  Only
# threshold reads values (its comparison mask), so tj.compile refuses it; the others trace.

_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _float_only(input, kernel):
    """torch's NotImplementedError for an integer or bool input of a float-only kernel."""
    if isinstance(input, Tensor) and not input._dtype.is_floating_point:
        raise dtypes.not_implemented(kernel, input._dtype)


def _inplace(input, inplace, compute, op):
    if inplace:
        from tapejit.inplace import apply_inplace
        return apply_inplace(input, compute, op)
    return compute()


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    """``clamp(input, min_val, max_val)`` whose gradient, as torch's, is zero at the two
    bounds themselves (``clamp`` passes it there)."""
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")
    if not input._dtype.is_floating_point:   # torch clamps integers in their own dtype
        return _inplace(input, inplace, lambda: clamp(input, min_val, max_val).to(input._dtype), "hardtanh_")
    return _inplace(input, inplace, lambda: _hardtanh(input, min_val, max_val), "hardtanh_")


def _hardtanh(input, min_val, max_val):
    # The value is clamp's; the gradient that of min(x, max) - min clipped at 0 by two relus,
    # so zero at both bounds (relu'(0) = 0) and passed through NaN, as torch's
    # hardtanh_backward.  inner is finite for infinite x, so inner - inner.detach() is an exact
    # zero; no comparison reads values, so tj.compile can trace it.  It is subtracted, not
    # added: clamp's -0.0 (x = -0.0) minus +0.0 stays -0.0, as torch's value.
    inner = _relu((max_val - min_val) - _relu(max_val - input))
    return name_composite(clamp(input.detach(), min_val, max_val) - (inner.detach() - inner), "HardtanhBackward0",
                          input)


def relu6(input, inplace=False):
    """``hardtanh(input, 0, 6)`` (torch's node too: HardtanhBackward0)."""
    return hardtanh(input, 0.0, 6.0, inplace)


def hardsigmoid(input, inplace=False):
    """``relu6(x + 3) / 6``: gradient 1/6 strictly between -3 and 3, zero at them."""
    _float_only(input, "hardsigmoid_cpu")

    def compute():
        return name_composite(_hardtanh(input + 3.0, 0.0, 6.0) / 6.0, "HardsigmoidBackward0", input)
    return _inplace(input, inplace, compute, "hardsigmoid_")


def hardswish(input, inplace=False):
    """``x * relu6(x + 3) / 6``; by the product rule its gradient is 0 at -3 and 1 at 3, as
    torch's."""
    _float_only(input, "hardswish_cpu")

    def compute():
        return name_composite(input * (_hardtanh(input + 3.0, 0.0, 6.0) / 6.0), "HardswishBackward0", input)
    return _inplace(input, inplace, compute, "hardswish_")


def logsigmoid(input):
    """``log(sigmoid(x)) = -softplus(-x)``, stable for large ``|x|``."""
    _float_only(input, "log_sigmoid_cpu")
    return name_composite(-softplus(-input), "LogSigmoidBackward0", input)


def softsign(input):
    """``x / (1 + |x|)`` (torch's node: DivBackward0)."""
    return input / (input.abs() + 1.0)


def mish(input, inplace=False):
    """``x * tanh(softplus(x))``."""
    _float_only(input, "mish_cpu")
    return _inplace(input, inplace, lambda: name_composite(input * tanh(softplus(input)), "MishBackward0", input),
                    "mish_")


def selu(input, inplace=False):
    """``scale * elu(x, alpha)`` with torch's constants (torch's node: EluBackward0); the
    gradient at 0 is ``scale * alpha``."""
    _float_only(input, "elu_cpu")
    return _inplace(input, inplace, lambda: name_composite(elu(input, _SELU_ALPHA) * _SELU_SCALE, "EluBackward0",
                                                           input), "selu_")


def celu(input, alpha=1.0, inplace=False):
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``; the gradient at 0 is 1, as
    torch's (relu'(0) = 0, and clamp passes it at its bound)."""
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError: alpha cannot be 0 for CELU")
    _float_only(input, "elu_cpu")

    def compute():
        return name_composite(_relu(input) + expm1(clamp(input / alpha, max=0.0)) * alpha, "CeluBackward0", input)
    return _inplace(input, inplace, compute, "celu_")


def prelu(input, weight):
    """``x`` for ``x > 0``, else ``weight * x``, ``weight`` one slope or one per channel
    (dim 1).  The gradient at 0 is the slope, as torch's: ``relu(x) + weight * min(x, 0)``
    with clamp passing the gradient at its bound."""
    if not isinstance(input, Tensor):
        raise argument_error("prelu", "input", 1, input, "Tensor")
    if not isinstance(weight, Tensor):
        raise argument_error("prelu", "weight", 2, weight, "Tensor")
    ndim = len(input._shape)
    if ndim == 0:
        raise RuntimeError("Not allow zero-dim input tensor.")
    channels = input._shape[1] if ndim >= 2 else 1
    count = weight.numel()
    if count != 1:
        if weight.dim() != 1:
            raise RuntimeError(f"prelu: Expected `weight` to be a scalar or 1D tensor, but got: ndim = {weight.dim()}")
        if count != channels:
            raise RuntimeError(f"Mismatch of parameter numbers and input channel size. Found parameter numbers = "
                               f"{count} and channel size = {channels}.")
        slope = weight.reshape((channels,) + (1,) * (ndim - 2))
    else:
        slope = weight.reshape(()) if weight.dim() != 0 else weight
    return name_composite(_relu(input) + slope * clamp(input, max=0.0), "PreluKernelBackward0", input, weight)


def glu(input, dim=-1):
    """``a * sigmoid(b)`` for the two halves ``a``, ``b`` of ``input`` along ``dim``."""
    if len(input._shape) == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    size = input.size(dim)
    if size % 2:
        d = dim % len(input._shape)
        raise RuntimeError(f"Halving dimension must be even, but dimension {d} is size {size}")
    a, b = input.chunk(2, dim)
    return name_composite(a * sigmoid(b), "GluBackward0", input)


def softshrink(input, lambd=0.5):
    """``x - clamp(x, -lambd, lambd)``: ``x -+ lambd`` outside, 0 inside, gradient 0 at
    ``+-lambd`` as torch's."""
    _float_only(input, "softshrink_check")   # torch's kernel name for it
    largest = float(np.finfo(input._dtype.np).max) if input._dtype.is_floating_point else float("inf")
    if not 0 <= lambd <= largest:
        raise RuntimeError(f"lambda must be in range [0, {largest:g}] for input dtype "
                           f"{dtypes.SCALAR_TYPE_NAMES[input._dtype.name]}, but found {lambd:g}")
    return name_composite(input - clamp(input, -lambd, lambd), "SoftshrinkBackward0", input)


def hardshrink(input, lambd=0.5):
    """``x`` where ``|x| > lambd``, else 0: ``x`` times the mask ``sign(relu(|x| - lambd))``,
    which has no gradient, so the gradient is 0 at ``+-lambd`` as torch's.  Adding 0.0 turns
    the product's -0.0 (negative x inside) into torch's +0.0 and changes no other value."""
    _float_only(input, "hardshrink_cpu")
    return name_composite(input * _relu(input.abs() - lambd).sign() + 0.0, "HardshrinkBackward0", input)


def tanhshrink(input):
    """``x - tanh(x)`` (torch's node: SubBackward0)."""
    return input - tanh(input)


def threshold(input, threshold, value, inplace=False):
    """``x`` where ``x > threshold``, else ``value``; gradient 0 at the threshold, as torch's."""
    def compute():
        keep = ~(input <= threshold)   # torch's: NaN is kept
        return name_composite(_where(keep, input, value), "ThresholdBackward0", input)
    return _inplace(input, inplace, compute, "threshold_")


def rrelu(input, lower=1.0 / 8.0, upper=1.0 / 3.0, training=False, inplace=False):
    """Randomized leaky ReLU: in training each ``x <= 0`` is scaled by a slope drawn uniformly
    from ``[lower, upper)`` (tapejit's generator, so ``tj.manual_seed`` repeats it); otherwise
    the fixed slope ``(lower + upper) / 2``."""
    if not training:
        slope = (lower + upper) / 2.0
        return _inplace(input, inplace, lambda: name_composite(_leaky_relu(input, slope), "RreluWithNoiseBackward0",
                                                               input), "rrelu_")
    if not input._dtype.is_floating_point:
        raise dtypes.not_implemented("rrelu_with_noise_out_cpu", input._dtype)
    dt = input._dtype
    values = input.detach()._value()
    slopes = _rng().uniform(lower, upper, input._shape).astype(dt.np)
    noise = _concrete(np.where(values <= 0, slopes, dt.np.type(1.0)).astype(dt.np))
    return _inplace(input, inplace, lambda: name_composite(input * noise, "RreluWithNoiseBackward0", input),
                    "rrelu_")


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    """``softmax(-input, dim)``."""
    if dim is None:
        import warnings
        warnings.warn("Implicit dimension choice for softmin has been deprecated. Change the call to include dim=X "
                      "as an argument.", stacklevel=_stacklevel)
        dim = 0 if len(input._shape) in (0, 1, 3) else 1
    return softmax(-input, dim, dtype)


_SELU_ALPHA_PRIME = -_SELU_ALPHA * _SELU_SCALE   # the value alpha dropout sets dropped units to


def alpha_dropout(input, p=0.5, training=False, inplace=False):
    """Dropout that keeps a SELU network's mean and variance: dropped elements become
    ``-scale * alpha``, then an affine ``a * x + b`` restores the moments (torch's formula and
    node, AddBackward0; the mask from tapejit's generator)."""
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if p == 0.0 or not training or input._numel == 0:
        return input
    dt = input._dtype if input._dtype.is_floating_point else dtypes.get_default_dtype()
    if p == 1.0:
        zero = _concrete(np.zeros((), dt.np))
        return input.mul_(zero) if inplace else input * zero
    keep = (_rng().random(input._shape) < 1.0 - p).astype(dt.np)
    alpha = -_SELU_ALPHA_PRIME
    a = 1.0 / np.sqrt((alpha * alpha * p + 1) * (1 - p))
    b = ((keep - 1) * (alpha * a) + alpha * a * p).astype(dt.np)
    scale = (keep * a).astype(dt.np)
    if inplace:
        return input.mul_(_concrete(scale)).add_(_concrete(b))
    return input * _concrete(scale) + _concrete(b)


for _name in ("hardtanh", "relu6", "hardsigmoid", "hardswish", "mish", "selu", "celu", "glu", "threshold", "rrelu",
              "alpha_dropout", "softshrink", "hardshrink", "logsigmoid"):
    globals()[_name] = _front_end(globals()[_name], _name)
del _name

__all__ += ["alpha_dropout", "celu", "glu", "hardshrink", "hardsigmoid", "hardswish", "hardtanh", "logsigmoid",
            "mish", "prelu", "relu6", "rrelu", "selu", "softmin", "softshrink", "softsign", "tanhshrink",
            "threshold"]


# ---- pixel and channel shuffles, bilinear: reshapes, permutes and a matrix product ----------

def _shuffle_input(op, input, factor, name):
    if not isinstance(input, Tensor):
        raise argument_error(op, "input", 1, input, "Tensor")
    if len(input._shape) < 3:
        raise RuntimeError(f"{op} expects input to have at least 3 dimensions, but got input with "
                           f"{len(input._shape)} dimension(s)")
    if factor <= 0:
        raise RuntimeError(f"{op} expects a positive {name}, but got {factor}")


def pixel_shuffle(input, upscale_factor):
    """``(*, C r^2, H, W)`` to ``(*, C, H r, W r)``: each group of ``r^2`` channels becomes an
    ``r x r`` block of pixels."""
    r = upscale_factor
    _shuffle_input("pixel_shuffle", input, r, "upscale_factor")
    *batch, c, h, w = input._shape
    if c % (r * r):
        raise RuntimeError(f"pixel_shuffle expects its input's 'channel' dimension to be divisible by the square of "
                           f"upscale_factor, but input.size(-3)={c} is not divisible by {r * r}")
    k = len(batch)
    out = input.reshape(tuple(batch) + (c // (r * r), r, r, h, w))
    out = out.permute(*range(k), k, k + 3, k + 1, k + 4, k + 2)
    out = out.reshape(tuple(batch) + (c // (r * r), h * r, w * r))
    return name_composite(out, "PixelShuffleBackward0", input)


def pixel_unshuffle(input, downscale_factor):
    """The inverse of ``pixel_shuffle``: ``(*, C, H r, W r)`` to ``(*, C r^2, H, W)``."""
    r = downscale_factor
    _shuffle_input("pixel_unshuffle", input, r, "downscale_factor")
    *batch, c, h, w = input._shape
    for side, size in (("height", h), ("width", w)):
        if size % r:
            dim = -2 if side == "height" else -1
            raise RuntimeError(f"pixel_unshuffle expects {side} to be divisible by downscale_factor, but "
                               f"input.size({dim})={size} is not divisible by {r}")
    k = len(batch)
    out = input.reshape(tuple(batch) + (c, h // r, r, w // r, r))
    out = out.permute(*range(k), k, k + 2, k + 4, k + 1, k + 3)
    out = out.reshape(tuple(batch) + (c * r * r, h // r, w // r))
    return name_composite(out, "PixelUnshuffleBackward0", input)


def channel_shuffle(input, groups):
    """Interleave the channels (dim 1) of ``groups`` equal groups: ``(N, g, C/g, *)`` read as
    ``(N, C/g, g, *)``."""
    if not isinstance(input, Tensor):
        raise argument_error("channel_shuffle", "input", 1, input, "Tensor")
    if groups <= 0:
        raise RuntimeError(f"Number of groups to divide channels in must be positive. Value of groups:{groups}")
    if len(input._shape) <= 2:
        raise RuntimeError(f"channel_shuffle expects input to have at least 3 dimensions, but got input with "
                           f"{len(input._shape)} dimension(s)")
    n, c, *rest = input._shape
    if c % groups:
        raise RuntimeError(f"Number of channels must be divisible by groups. Got {c} channels and {groups} groups.")
    out = input.reshape((n, groups, c // groups) + tuple(rest)).transpose(1, 2).reshape(input._shape)
    return name_composite(out, "ChannelShuffleBackward0", input)


def bilinear(input1, input2, weight, bias=None):
    """``y[..., o] = sum_ij input1[..., i] weight[o, i, j] input2[..., j] + bias[o]``: one
    matrix product of ``input1`` with ``weight`` laid out as ``(i, o * j)``, then a product
    with ``input2`` summed over ``j``."""
    for position, (name, t) in enumerate((("input1", input1), ("input2", input2), ("weight", weight)), 1):
        if not isinstance(t, Tensor):
            raise argument_error("bilinear", name, position, t, "Tensor")
    s1, s2 = input1._shape, input2._shape
    if len(s1) != len(s2):
        raise RuntimeError(f"bilinear(): input dimensions do not match: got {len(s1)} and {len(s2)}")
    for d in range(len(s1) - 1):
        if s1[d] != s2[d]:
            raise RuntimeError(f"bilinear(): input batch dimensions do not match at dim {d}: got {s1[d]} and {s2[d]}")
    if len(weight._shape) != 3:
        raise RuntimeError(f"bilinear(): weight must be three-dimensional, got {len(weight._shape)} dimensions")
    o, i, j = weight._shape
    if s1[-1] != i:
        raise RuntimeError(f"bilinear(): input1 size does not match weight size: got {s1[-1]} but expected {i}")
    if s2[-1] != j:
        raise RuntimeError(f"bilinear(): input2 size does not match weight size: got {s2[-1]} but expected {j}")
    if bias is not None and (len(bias._shape) != 1 or bias._shape[0] != o):
        raise RuntimeError(f"bilinear(): bias size does not match weight size: got {bias._shape[-1]} but expected {o}")
    batch = tuple(s1[:-1])
    rows = _numel(batch)
    left = input1.reshape(rows, i) @ weight.permute(1, 0, 2).reshape(i, o * j)
    out = (left.reshape(rows, o, j) * input2.reshape(rows, 1, j)).sum(-1).reshape(batch + (o,))
    return out if bias is None else out + bias


__all__ += ["bilinear", "channel_shuffle", "pixel_shuffle", "pixel_unshuffle"]


# torch.nn.functional's in-place forms: the functions above with inplace=True
def relu_(input):
    return relu(input, inplace=True)


def elu_(input, alpha=1.0):
    return elu(input, alpha, inplace=True)


def leaky_relu_(input, negative_slope=0.01):
    return leaky_relu(input, negative_slope, inplace=True)


def hardtanh_(input, min_val=-1.0, max_val=1.0):
    return hardtanh(input, min_val, max_val, inplace=True)


def rrelu_(input, lower=1.0 / 8.0, upper=1.0 / 3.0, training=False):
    return rrelu(input, lower, upper, training, inplace=True)


_threshold = threshold


def threshold_(input, threshold, value):
    return _threshold(input, threshold, value, inplace=True)


def celu_(input, alpha=1.0):
    return celu(input, alpha, inplace=True)


def selu_(input):
    return selu(input, inplace=True)


__all__ += ["celu_", "elu_", "hardtanh_", "leaky_relu_", "relu_", "rrelu_", "selu_", "threshold_"]
