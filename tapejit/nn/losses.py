"""Loss functions (``tapejit.nn.functional.mse_loss`` and friends), with PyTorch's
formulas, reductions and errors.

Class weights, ignored targets, label smoothing and probability targets are folded into
constant NumPy coefficients wherever the targets need no gradient, so a loss adds only a
few records to the tape: cross-entropy with class indices is
``log_softmax -> index -> dot`` whatever its options.
"""
import warnings

import numpy as np

from tapejit import dtypes
from tapejit.ops.activation import binary_cross_entropy_elementwise, log_softmax
from tapejit.ops.linalg import dot
from tapejit.ops.movement import INDEX, _gather, where
from tapejit.ops.unary import softplus
from tapejit.recording import broadcast_shapes
from tapejit.replay import labels
from tapejit.tape import current, state
from tapejit.tensor import Tensor, _concrete

_REDUCTIONS = ("mean", "sum", "none")


def check_reduction(reduction):
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")


def _reduce(loss, reduction):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


def _check_pair(op, input, target):
    """torch warns when input and target shapes differ but broadcast, and fails when they
    do not broadcast."""
    if not isinstance(target, Tensor):
        raise TypeError(f"{op}(): argument 'target' must be Tensor, not {type(target).__name__}")
    if input._shape == target._shape:
        return
    broadcast_shapes(f"{op} (input {list(input._shape)}, target {list(target._shape)})",
                     input._shape, target._shape)
    warnings.warn(f"Using a target size ({target.shape}) that is different to the input size "
                  f"({input.shape}). This will likely lead to incorrect results due to broadcasting. "
                  "Please ensure they have the same size.", UserWarning, stacklevel=3)


def _constant(values, like):
    """A NumPy array as a constant tensor of ``like``'s float dtype."""
    return _concrete(np.asarray(values, dtype=like._dtype.np, order="C"))


def _needs_grad(t):
    return isinstance(t, Tensor) and t._rg


def mse_loss(input, target, *, reduction="mean"):
    check_reduction(reduction)
    _check_pair("mse_loss", input, target)
    diff = input - target
    return _reduce(diff * diff, reduction)


def l1_loss(input, target, *, reduction="mean"):
    check_reduction(reduction)
    _check_pair("l1_loss", input, target)
    return _reduce((input - target).abs(), reduction)


# ---- class-index targets ----------------------------------------------------------------------

def _class_targets(op, input, target, ignore_index):
    """Validate class-index ``target`` for ``input`` of shape (N, C, d1...) or (C,); return
    its values and the class dimension."""
    if not input._shape:
        raise RuntimeError(f"{op}: input tensor should be at least 1D, got a 0-D tensor")
    if not isinstance(target, Tensor):
        raise TypeError(f"{op}(): argument 'target' must be Tensor, not {type(target).__name__}")
    if target._dtype is not dtypes.int64:
        raise RuntimeError(f"{op}: expected target dtype to be Long (int64 class indices), but got "
                           f"{target._dtype.name.capitalize()} (input {list(input._shape)}, "
                           f"target {list(target._shape)})")
    class_dim = 1 if len(input._shape) >= 2 else 0
    expected = input._shape[:class_dim] + input._shape[class_dim + 1:]
    if target._shape != expected:
        if class_dim == 1 and target._shape and target._shape[0] != input._shape[0]:
            raise ValueError(f"Expected input batch_size ({input._shape[0]}) to match target batch_size "
                             f"({target._shape[0]}).")
        raise RuntimeError(f"{op}: expected target size {list(expected)}, got {list(target._shape)} "
                           f"(input {list(input._shape)})")
    classes = input._shape[class_dim]
    values = labels.values(target)
    if values.size and (values.min() < 0 or values.max() >= classes):   # two reductions: the common case
        bad = (values != ignore_index) & ((values < 0) | (values >= classes))
        if bad.any():
            raise IndexError(f"Target {values[bad].reshape(-1)[0]} is out of bounds. "
                             f"({op}: {classes} classes, ignore_index={ignore_index})")
    return values, class_dim


def _class_weights(weight, classes, like):
    if weight is None:
        return None
    if weight._shape != (classes,):
        raise RuntimeError(f"weight tensor should be defined either for all {classes} classes or no classes "
                           f"but got weight tensor of shape: {list(weight._shape)}")
    return np.asarray(weight._value(), like._dtype.np)


def _nll(log_probs, targets, class_dim, weights, ignore_index, reduction, source=None):
    """``-log_probs[target]`` weighted and reduced as torch's ``nll_loss``.

    The per-target log-probabilities are one index record; the weighted mean or sum of
    them is one ``dot`` with constant coefficients.  Ignored targets are left out of the
    index (not multiplied by zero), so a ``-inf`` log-probability of an ignored row
    cannot turn the loss into NaN."""
    if class_dim == 0:  # unbatched (C,) input: a batch of one
        loss = _nll(log_probs.unsqueeze(0), targets.reshape(1), 1, weights, ignore_index, reduction, source)
        return loss.reshape(()) if reduction == "none" else loss
    if (reduction != "none" and weights is None and log_probs.ndim == 2 and targets.size
            and not (targets == ignore_index).any()):
        return _nll_every_row(log_probs, targets, ignore_index, reduction, source)
    valid = targets != ignore_index
    if reduction == "none":
        labels.read(source)
        safe = np.where(valid, targets, 0)
        grid = list(np.indices(targets.shape))
        picked = log_probs[tuple([grid[0], safe] + grid[1:])]
        if weights is None and valid.all():
            return -picked
        scale = -(weights[safe] if weights is not None else np.ones(targets.shape)) * valid
        loss = picked * _constant(scale, log_probs)
        return loss if valid.all() else where(valid, loss, 0.0)
    at = np.nonzero(valid)
    chosen = targets[valid]
    if log_probs.ndim == 2:
        picked = _picked_rows(log_probs, at[0], chosen, source, ignore_index,
                              weights is None and chosen.size == targets.size)
    else:
        labels.read(source)
        picked = log_probs[(at[0], chosen) + at[1:]]
    coeff = weights[chosen] if weights is not None else np.ones(chosen.shape, log_probs._dtype.np)
    if reduction == "mean":
        total = coeff.sum(dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            coeff = coeff / total if total != 0 else coeff * np.nan
    loss = dot(picked, _constant(-coeff, log_probs))
    if reduction == "mean" and not chosen.size:
        loss = loss * float("nan")  # torch: the mean over no targets is NaN
    return loss


def _nll_every_row(log_probs, targets, ignore_index, reduction, source):
    """``_nll`` in a training step's usual case: (N, C) log-probabilities, no class weights,
    no ignored label.  One gather and a scaled sum, without the masks and coefficients the
    general case builds (a 64 x 10 cross-entropy recorded in 58 us, 29 us this way)."""
    rows = log_probs._shape[0]
    total = _picked_rows(log_probs, np.arange(rows), targets, source, ignore_index, True).sum()
    return total * (-1.0 / rows) if reduction == "mean" else -total


def _picked_rows(log_probs, rows, chosen, source, ignore_index, patchable):
    """``log_probs[rows, chosen]`` of an (N, C) tensor: one index record on the flat
    positions ``row * C + class``, without the index grid general integer-array indexing
    builds.  With ``patchable``, a ``tj.compile`` trace writes each replay's labels into
    those positions (``labels.patch``); else its labels are read as constants."""
    tape = current()
    ints_at = tape.nints + len(tape.pints) + 2     # where _gather's positions go
    classes = log_probs._shape[1]
    picked = _gather(INDEX, log_probs, rows * classes + chosen)
    if patchable:
        labels.patch(source, ints_at, classes, ignore_index)
    else:
        labels.read(source)
    return picked


def nll_loss(input, target, weight=None, *, ignore_index=-100, reduction="mean"):
    check_reduction(reduction)
    targets, class_dim = _class_targets("nll_loss", input, target, ignore_index)
    weights = _class_weights(weight, input._shape[class_dim], input)
    return _nll(input, targets, class_dim, weights, ignore_index, reduction, target)


def _smoothed_class_coefficients(targets, shape, class_dim, weights, ignore_index, smoothing, reduction, np_dtype):
    """Coefficients ``A`` with ``loss = sum(A * log_probs)`` (summed over the class dim only
    for ``reduction='none'``) for torch's label-smoothed cross-entropy with class indices:
    ``(1 - eps) * nll + eps / C * smooth``, where ``smooth`` is ``-sum_c w_c log p_c``, both
    zero for ignored targets and, for the mean, divided by the summed weight of the kept targets."""
    classes = shape[class_dim]
    valid = targets != ignore_index
    safe = np.where(valid, targets, 0)
    class_view = [1] * len(shape)
    class_view[class_dim] = classes
    w = weights if weights is not None else np.ones(classes)
    coeff = np.broadcast_to((smoothing / classes) * w.reshape(class_view), shape).astype(np.float64)
    picked = np.expand_dims(safe, class_dim)
    on_target = np.take_along_axis(coeff, picked, class_dim) + (1.0 - smoothing) * w[picked]
    np.put_along_axis(coeff, picked, on_target, class_dim)
    coeff *= np.expand_dims(valid, class_dim)
    if reduction == "mean":
        total = w[safe][valid].sum()
        with np.errstate(invalid="ignore", divide="ignore"):
            coeff = coeff / total
    return -coeff.astype(np_dtype)


def cross_entropy(input, target, weight=None, *, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    """Cross-entropy of logits ``input`` (N, C, d1...) or (C,) against class indices
    (int64, the input's shape without the class dim) or class probabilities (float, the
    input's shape)."""
    check_reduction(reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    if not input._shape:
        raise RuntimeError("cross_entropy: input tensor should be at least 1D, got a 0-D tensor")
    class_dim = 1 if len(input._shape) >= 2 else 0
    classes = input._shape[class_dim]
    log_probs = log_softmax(input, class_dim)
    if isinstance(target, Tensor) and target._dtype.is_floating_point and target._shape == input._shape:
        weights = _class_weights(weight, classes, input)
        return _probability_cross_entropy(log_probs, target, class_dim, weights, reduction, label_smoothing)
    targets, class_dim = _class_targets("cross_entropy", input, target, ignore_index)
    weights = _class_weights(weight, classes, input)
    if label_smoothing == 0.0:
        return _nll(log_probs, targets, class_dim, weights, ignore_index, reduction, target)
    labels.read(target)
    if class_dim == 0:
        loss = cross_entropy(input.unsqueeze(0), target.reshape(1), weight, ignore_index=ignore_index,
                             reduction=reduction, label_smoothing=label_smoothing)
        return loss.reshape(()) if reduction == "none" else loss
    coeff = _smoothed_class_coefficients(targets, input._shape, class_dim, weights, ignore_index,
                                         label_smoothing, reduction, input._dtype.np)
    weighted = log_probs * _concrete(coeff)
    return weighted.sum(class_dim) if reduction == "none" else weighted.sum()


def _probability_cross_entropy(log_probs, target, class_dim, weights, reduction, smoothing):
    """torch's cross-entropy with probability targets: ``-sum_c w_c t_c log p_c`` per
    element, the mean dividing by the number of elements (not by weights)."""
    shape = log_probs._shape
    classes = shape[class_dim]
    scale = np.ones([classes if d == class_dim else 1 for d in range(len(shape))])
    if weights is not None:
        scale = scale * weights.reshape(scale.shape)
    if reduction == "mean":
        scale = scale / (log_probs._numel // classes)
    if _needs_grad(target):
        # The gradient flows into the target too: keep it a tensor expression.
        smoothed = target * (1.0 - smoothing) + smoothing / classes if smoothing else target
        coeff = smoothed * _constant(-scale, log_probs)
    else:
        probs = np.asarray(target._value(), np.float64)
        if smoothing:
            probs = probs * (1.0 - smoothing) + smoothing / classes
        coeff = _constant(-(probs * scale), log_probs)
    weighted = log_probs * coeff
    return weighted.sum(class_dim) if reduction == "none" else weighted.sum()


# ---- binary cross-entropy -------------------------------------------------------------------

def _check_probabilities(name, t):
    """torch refuses values outside [0, 1] (NaN too), whose loss would be NaN or finite and
    wrong.  Skipped while ``tj.compile`` traces a computed value, whose read would freeze it
    into every replay."""
    tape = t._tape
    if tape.tracing if tape is not None else state.trace is not None and id(t) not in state.trace.readable:
        return
    values = t._value()
    outside = ~((values >= 0) & (values <= 1))
    if outside.any():
        raise RuntimeError(f"all elements of {name} should be between 0 and 1 (binary_cross_entropy: "
                           f"{values[outside].reshape(-1)[0]} in {name} of shape {list(t._shape)})")


def binary_cross_entropy(input, target, weight=None, *, reduction="mean"):
    """``-w [t log(x) + (1 - t) log(1 - x)]`` of probabilities ``input``, each log clamped
    at -100, with PyTorch's gradients (``tapejit/ops/activation.py``)."""
    check_reduction(reduction)
    if not isinstance(target, Tensor):
        raise TypeError(f"binary_cross_entropy(): argument 'target' must be Tensor, not {type(target).__name__}")
    if target._shape != input._shape:
        raise ValueError(f"Using a target size ({target.shape}) that is different to the input size "
                         f"({input.shape}) is deprecated. Please ensure they have the same size.")
    _check_probabilities("input", input)
    _check_probabilities("target", target)
    if not _needs_grad(target) and target._dtype is not input._dtype:
        target = _constant(target._value(), input)
    loss = binary_cross_entropy_elementwise(input, target)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def binary_cross_entropy_with_logits(input, target, weight=None, *, reduction="mean", pos_weight=None):
    """``-w [p t log s(x) + (1 - t) log(1 - s(x))]`` computed stably as
    ``lw * softplus(x) - p t x`` with ``lw = 1 + (p - 1) t`` (softplus never overflows)."""
    check_reduction(reduction)
    if not isinstance(target, Tensor):
        raise TypeError(f"binary_cross_entropy_with_logits(): argument 'target' must be Tensor, "
                        f"not {type(target).__name__}")
    if target._shape != input._shape:
        raise ValueError(f"Target size ({target.shape}) must be the same as input size ({input.shape})")
    if _needs_grad(target) or _needs_grad(pos_weight):
        if pos_weight is None:
            loss = softplus(input) - input * target
        else:
            loss = (1.0 + (pos_weight - 1.0) * target) * softplus(input) - input * (pos_weight * target)
    else:
        t = np.asarray(target._value(), np.float64)
        if pos_weight is None:
            loss = softplus(input) - input * _constant(t, input)
        else:
            p = np.asarray(pos_weight._value(), np.float64)
            loss = softplus(input) * _constant(1.0 + (p - 1.0) * t, input) - input * _constant(p * t, input)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)
