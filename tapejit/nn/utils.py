"""``tapejit.nn.utils``: gradient clipping and parameter/vector conversion, as
``torch.nn.utils``.

Norms are computed with NumPy in each gradient's own dtype; gradients are then scaled or
clamped in place through tapejit's in-place ops, so their version counters move as
torch's do.
"""
import math
import types
import warnings

import numpy as np

from tapejit.api import front_ends as _tj
from tapejit.creation import tensor as _tensor
from tapejit.dtypes import get_default_dtype as _get_default_dtype
from tapejit.grad_mode import no_grad
from tapejit.tensor import Tensor

__all__ = ["clip_grad_norm_", "clip_grad_value_", "clip_grads_with_norm_", "get_total_norm",
           "parameters_to_vector", "vector_to_parameters"]


def _as_list(parameters):
    return [parameters] if isinstance(parameters, Tensor) else list(parameters)


def _grads(parameters):
    return [p.grad for p in parameters if p.grad is not None]


def _vector_norm(array, norm_type):
    """torch.linalg.vector_norm of ``array`` as a NumPy scalar of its dtype."""
    magnitudes = np.abs(array).reshape(-1)
    if norm_type == math.inf:
        return magnitudes.max(initial=0)
    if norm_type == -math.inf:
        return magnitudes.min()
    if norm_type == 0:
        return array.dtype.type(np.count_nonzero(magnitudes))
    if norm_type == 1:
        return magnitudes.sum()
    if norm_type == 2:
        return np.sqrt(np.dot(magnitudes, magnitudes))
    return (magnitudes ** norm_type).sum() ** (1 / norm_type)


def get_total_norm(tensors, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """The ``norm_type`` norm of all ``tensors`` taken together as one vector, as a 0-d
    tensor (0.0 when there are none)."""
    tensors = _as_list(tensors)
    norm_type = float(norm_type)
    if not tensors:
        return _tensor(0.0)
    norms = [_vector_norm(t._value(), norm_type) for t in tensors]
    total = _vector_norm(np.array(norms, dtype=np.result_type(*norms)), norm_type)
    if error_if_nonfinite and not np.isfinite(total):
        raise RuntimeError(
            f"The total norm of order {norm_type} for gradients from `parameters` is "
            "non-finite, so it cannot be clipped. To disable this error and scale the "
            "gradients by the non-finite norm anyway, set `error_if_nonfinite=False`")
    return _tensor(total)


def clip_grads_with_norm_(parameters, max_norm, total_norm, foreach=None):
    """Scale the gradients in place by ``min(max_norm / (total_norm + 1e-6), 1)``."""
    grads = _grads(_as_list(parameters))
    if not grads:
        return
    total = np.asarray(total_norm._value() if isinstance(total_norm, Tensor) else total_norm)
    if not np.issubdtype(total.dtype, np.floating):
        total = total.astype(_get_default_dtype().np)
    # torch evaluates ``scalar / tensor`` as ``tensor.reciprocal() * scalar``, in the
    # norm's dtype: the same steps give the same coefficient to the last bit.
    coefficient = np.reciprocal(total + total.dtype.type(1e-6)) * total.dtype.type(max_norm)
    coefficient = float(np.minimum(coefficient, 1.0))   # NaN stays NaN, as torch.clamp
    with no_grad():
        for g in grads:
            g.mul_(coefficient)


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """Scale the gradients of ``parameters`` in place so that their total ``norm_type``
    norm is at most ``max_norm``; returns the total norm before clipping (a 0-d tensor)."""
    is_generator = isinstance(parameters, types.GeneratorType)
    parameters = _as_list(parameters)
    if is_generator and not parameters:
        warnings.warn("`parameters` is an empty generator, no gradient clipping will occur.",
                      stacklevel=2)
    total_norm = get_total_norm(_grads(parameters), norm_type, error_if_nonfinite)
    clip_grads_with_norm_(parameters, max_norm, total_norm)
    return total_norm


def clip_grad_value_(parameters, clip_value, foreach=None):
    """Clamp the gradients of ``parameters`` in place to ``[-clip_value, clip_value]``."""
    clip_value = float(clip_value)
    with no_grad():
        for g in _grads(_as_list(parameters)):
            g.clamp_(min=-clip_value, max=clip_value)


def parameters_to_vector(parameters):
    """All parameters flattened and concatenated into one 1-D tensor (differentiable)."""
    return _tj.cat([p.view(-1) for p in parameters])


def vector_to_parameters(vec, parameters):
    """Give each parameter, in order, the next ``numel()`` values of ``vec`` as its data."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected torch.Tensor, but got: {type(vec).__name__}")
    start = 0
    for p in parameters:
        end = start + p.numel()
        p.data = vec[start:end].view_as(p).data
        start = end


# ---- torch.nn.utils.rnn: packed and padded sequences (defined in tapejit/nn/rnn.py) ---------
import sys as _sys  # noqa: E402

from tapejit.nn import rnn as _recurrent  # noqa: E402

rnn = types.ModuleType(__name__ + ".rnn", "torch.nn.utils.rnn: packing and padding sequences of different lengths.")
for _name in _recurrent.SEQUENCE_UTILITIES:
    setattr(rnn, _name, getattr(_recurrent, _name))
rnn.__all__ = list(_recurrent.SEQUENCE_UTILITIES)
_sys.modules[rnn.__name__] = rnn   # ``from tapejit.nn.utils.rnn import pad_sequence``
