"""Loss functions (``tapejit.nn.functional.mse_loss`` and friends), with PyTorch's
formulas, reductions and errors; their modules (``nn.MSELoss``, ...) are in ``loss.py``.

Class weights, ignored targets, label smoothing and probability targets are folded into
constant NumPy coefficients wherever the targets need no gradient, so a loss adds only a
few records to the tape: cross-entropy with class indices is
``log_softmax -> index -> dot`` whatever its options.
"""
import math
import warnings

import numpy as np

from tapejit import dtypes
from tapejit.api import export
from tapejit.recording import name_composite
from tapejit.ops.loss import binary_cross_entropy_elementwise
from tapejit.ops.softmax import log_softmax
from tapejit.ops.binary import minimum
from tapejit.ops.linalg import dot
from tapejit.ops.indexing import _gather, where
from tapejit.ops.movement import INDEX
from tapejit.ops.views import broadcast_tensors
from tapejit.ops.special import xlogy
from tapejit.ops.unary import clamp, relu, softplus
from tapejit.recording import broadcast_shapes
from tapejit import labels
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
    return name_composite(_reduce(diff * diff, reduction), "MseLossBackward0", input, target)


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
    return name_composite(_nll(input, targets, class_dim, weights, ignore_index, reduction, target),
                          "NllLossBackward0", input)


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
        loss = _probability_cross_entropy(log_probs, target, class_dim, weights, reduction, label_smoothing)
        # torch composes this case in Python: its last op is the mean's division or the negation
        return name_composite(loss, "DivBackward1" if reduction == "mean" else "NegBackward0", log_probs)
    targets, class_dim = _class_targets("cross_entropy", input, target, ignore_index)
    weights = _class_weights(weight, classes, input)
    if label_smoothing == 0.0:
        return name_composite(_nll(log_probs, targets, class_dim, weights, ignore_index, reduction, target),
                              "NllLossBackward0", log_probs)
    labels.read(target)
    if class_dim == 0:
        loss = cross_entropy(input.unsqueeze(0), target.reshape(1), weight, ignore_index=ignore_index,
                             reduction=reduction, label_smoothing=label_smoothing)
        return loss.reshape(()) if reduction == "none" else loss
    coeff = _smoothed_class_coefficients(targets, input._shape, class_dim, weights, ignore_index,
                                         label_smoothing, reduction, input._dtype.np)
    weighted = log_probs * _concrete(coeff)
    loss = weighted.sum(class_dim) if reduction == "none" else weighted.sum()
    # torch composes label smoothing in Python: (1 - eps) * nll + eps / C * smooth_loss
    return name_composite(loss, "AddBackward0", log_probs)


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
    at -100, with PyTorch's gradients (``tapejit/ops/loss.py``)."""
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
    return name_composite(_reduce(loss, reduction), "BinaryCrossEntropyBackward0", input, target)


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
    return name_composite(_reduce(loss, reduction), "BinaryCrossEntropyWithLogitsBackward0", input, target)


# ---- regression, distribution and embedding losses -------------------------------------------
# Compositions of differentiable ops following ATen's formulas (aten/src/ATen/native/Loss.cpp,
# Distance.cpp) and torch/nn/functional.py, so values and gradients are torch's, including
# at the kinks: ``clamp`` passes the gradient at its bound as torch's ``clamp_min`` does, and
# ``relu`` (zero gradient at 0) stands where torch's kernel tests ``z > 0``.

def legacy_reduction(size_average, reduce, reduction):
    """torch's ``_Reduction.legacy_get_string``: the deprecated ``size_average``/``reduce``
    flags, when given, override ``reduction``."""
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    reduction = "mean" if size_average and reduce else "sum" if reduce else "none"
    warnings.warn(f"size_average and reduce args will be deprecated, please use reduction='{reduction}' "
                  "instead.", UserWarning, stacklevel=3)
    return reduction


def _readable(t):
    """False while ``tj.compile`` traces a computed value, whose read would freeze it into
    every replay (value checks are then skipped, as ``_check_probabilities`` does)."""
    tape = t._tape
    return not (tape.tracing if tape is not None else state.trace is not None and id(t) not in state.trace.readable)


def _check_shapes(op, **tensors):
    """The loss's arguments broadcast together, else torch's error naming the loss and every
    shape (not the inner op that would fail)."""
    shapes = [t._shape for t in tensors.values()]
    if all(shape == shapes[0] for shape in shapes):
        return
    label = f"{op} (" + ", ".join(f"{name} {list(t._shape)}" for name, t in tensors.items()) + ")"
    shape = ()
    for other in shapes:
        shape = broadcast_shapes(label, shape, other)


def _scalar_type(dtype):
    return dtypes.SCALAR_TYPE_NAMES.get(dtype.name, dtype.name.capitalize())


def _stop_gradient_shift(t, target):
    """``t`` with the value ``target`` but ``t``'s gradient: torch's ``x.clamp_(...)`` under
    ``no_grad`` on a clone, which changes the value and leaves the gradient path alone."""
    return t + (target - t.detach())


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    """``0.5 z^2 / beta`` for ``z = |input - target| < beta``, else ``z - 0.5 beta``; the L1
    loss for ``beta = 0``."""
    _check_pair("smooth_l1_loss", input, target)
    reduction = legacy_reduction(size_average, reduce, reduction)
    check_reduction(reduction)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    diff = (input - target).abs()
    if beta == 0.0:
        return _reduce(diff, reduction)   # torch: l1_loss, MeanBackward0 of AbsBackward0
    # With q = min(z, beta): 0.5 q^2 / beta + (z - q).  No comparison, so tj.compile can trace
    # it; the gradient at z == beta is 1 as torch's, clamp passing it at the bound.
    quadratic = clamp(diff, max=beta)
    return name_composite(_reduce(quadratic * quadratic * (0.5 / beta) + (diff - quadratic), reduction),
                          "SmoothL1LossBackward0", input, target)


def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    """``0.5 z^2`` for ``z = |input - target| < delta``, else ``delta (z - 0.5 delta)``,
    optionally times an elementwise ``weight`` of the input's shape."""
    _check_pair("huber_loss", input, target)
    if weight is None:
        check_reduction(reduction)
    elif weight._shape != input._shape:
        raise ValueError("Weights and input must have the same size.")
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    diff = (input - target).abs()
    quadratic = clamp(diff, max=delta)     # as in smooth_l1_loss: 0.5 q^2 + delta (z - q)
    loss = quadratic * quadratic * 0.5 + (diff - quadratic) * delta
    if weight is not None:
        if reduction not in _REDUCTIONS:
            raise ValueError(f"Invalid reduction mode: {reduction}. Expected one of 'none', 'mean', 'sum'.")
        loss = loss * weight
        return _reduce(loss, reduction)
    return name_composite(_reduce(loss, reduction), "HuberLossBackward0", input, target)


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """``target (log target - input)`` pointwise (``input`` holds log-probabilities; so does
    ``target`` with ``log_target``); ``'batchmean'`` divides the sum by the batch size."""
    if size_average is not None or reduce is not None:
        reduction = legacy_reduction(size_average, reduce, reduction)
    elif reduction == "mean":
        warnings.warn("reduction: 'mean' divides the total loss by both the batch size and the support size."
                      "'batchmean' divides only by the batch size, and aligns with the KL div math definition."
                      "'mean' will be changed to behave the same as 'batchmean' in the next major release.",
                      UserWarning, stacklevel=2)
    if reduction != "batchmean":
        check_reduction(reduction)
    _check_shapes("kl_div", input=input, target=target)
    if log_target:
        loss = target.exp() * (target - input)
    else:
        loss = xlogy(target, target) - target * input
    if reduction == "batchmean":
        total = loss.sum()
        return total / input._shape[0] if input._shape else total
    return _reduce(loss, reduction)


def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-8, reduce=None,
                     reduction="mean"):
    """``exp(input) - target input`` (``log_input``) or ``input - target log(input + eps)``,
    plus with ``full`` the Stirling term ``t log t - t + 0.5 log(2 pi t)`` where ``t > 1``."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    if reduction not in _REDUCTIONS:
        raise ValueError(reduction + " is not a valid value for reduction")
    _check_shapes("poisson_nll_loss", input=input, target=target)
    if log_input:
        loss = input.exp() - target * input
    else:
        loss = input - target * (input + eps).log()
    if full:
        # Computed at max(t, 1) and masked by sign(relu(t - 1)) (1 where t > 1, else 0):
        # finite wherever it is masked, and without a comparison, which tj.compile could not trace.
        counts = clamp(target, min=1.0)
        stirling = counts * counts.log() - counts + (counts * (2 * math.pi)).log() * 0.5
        loss = loss + stirling * relu(target - 1.0).sign()
    return _reduce(loss, reduction)


def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):
    """``0.5 (log var + (input - target)^2 / var)`` (+ ``0.5 log 2 pi`` with ``full``), var
    clamped below at ``eps`` in value only, as torch does under ``no_grad``.  ``var`` is a
    float, or a tensor of the input's shape, of it without the last dim, or of it with one
    dim of size 1."""
    if isinstance(var, float):
        if var < 0:
            raise ValueError("var has negative entry/entries")
        var = _constant(np.full(input._shape, var), input)
    elif not isinstance(var, Tensor):
        raise TypeError(f"gaussian_nll_loss(): argument 'var' must be Tensor or float, not {type(var).__name__}")
    elif _readable(var) and (var._value() < 0).any():
        raise ValueError("var has negative entry/entries")
    if var._shape != input._shape:
        if input._shape[:-1] == var._shape:
            var = var.unsqueeze(-1)
        elif not (len(input._shape) == len(var._shape)
                  and sum(v for i, v in zip(input._shape, var._shape) if i != v) == 1):
            raise ValueError("var is of incorrect size")
    if reduction not in _REDUCTIONS:
        raise ValueError(reduction + " is not valid")
    _check_shapes("gaussian_nll_loss", input=input, target=target, var=var)
    var = _stop_gradient_shift(var, clamp(var.detach(), min=eps))
    loss = (var.log() + (input - target) ** 2 / var) * 0.5
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction)


@export()   # torch.cosine_similarity too
def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """``sum(x1 / max(|x1|, eps) * x2 / max(|x2|, eps))`` along ``dim`` of the broadcast
    inputs, the norms clamped in value only (ATen's Distance.cpp), so ``|result| <= 1``."""
    if not (x1._dtype.is_floating_point or x2._dtype.is_floating_point):
        common = dtypes.promote(x1._dtype, x2._dtype)
        raise RuntimeError(f"expected common dtype to be floating point, yet common dtype is "
                           f"{_scalar_type(common)}")
    if not x1._dtype.is_floating_point:
        x1 = x1.to(x2._dtype)
    elif not x2._dtype.is_floating_point:
        x2 = x2.to(x1._dtype)
    _check_shapes("cosine_similarity", x1=x1, x2=x2)
    x1, x2 = broadcast_tensors(x1, x2)
    n1 = x1.norm(2, dim, keepdim=True)
    n2 = x2.norm(2, dim, keepdim=True)
    n1 = _stop_gradient_shift(n1, clamp(n1.detach(), min=eps))
    n2 = _stop_gradient_shift(n2, clamp(n2.detach(), min=eps))
    return ((x1 / n1) * (x2 / n2)).sum(dim)


@export()   # torch.pairwise_distance too
def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """``|x1 - x2 + eps|_p`` along the last dim of the broadcast inputs."""
    _check_shapes("pairwise_distance", x1=x1, x2=x2)
    innermost = max(len(x1._shape), len(x2._shape)) - 1
    shifted = x1 - x2 + eps
    return name_composite(shifted.norm(p, innermost, keepdim=keepdim), "NormBackward1", shifted)


def cosine_embedding_loss(input1, input2, target, margin=0, size_average=None, reduce=None, reduction="mean"):
    """``1 - cos`` where ``target == 1``, ``max(0, cos - margin)`` where ``target == -1``
    (zero elsewhere), with ATen's ``cos = <x1, x2> / sqrt((|x1|^2 + 1e-12)(|x2|^2 + 1e-12))``."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    check_reduction(reduction)
    dims = len(target._shape)
    if dims > 1:
        raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
    if len(input1._shape) != dims + 1 or len(input2._shape) != dims + 1:
        raise RuntimeError(f"{dims}D target tensor expects {dims + 1}D input tensors, but found inputs with "
                           f"sizes {list(input1._shape)} and {list(input2._shape)}.")
    _check_shapes("cosine_embedding_loss", input1=input1, input2=input2)
    epsilon = 1e-12
    prod_sum = (input1 * input2).sum(dims)
    mag_square1 = (input1 * input1).sum(dims) + epsilon
    mag_square2 = (input2 * input2).sum(dims) + epsilon
    cos = prod_sum / (mag_square1 * mag_square2).sqrt()
    loss = where(target == 1, 1 - cos, 0.0) + where(target == -1, clamp(cos - margin, min=0), 0.0)
    return _reduce(loss, reduction)


def margin_ranking_loss(input1, input2, target, margin=0, size_average=None, reduce=None, reduction="mean"):
    """``max(0, -target (input1 - input2) + margin)``."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    check_reduction(reduction)
    if not len(input1._shape) == len(input2._shape) == len(target._shape):
        raise RuntimeError(f"margin_ranking_loss : All input tensors should have same dimension but got sizes: "
                           f"input1: {input1.shape}, input2: {input2.shape}, target: {target.shape} ")
    _check_shapes("margin_ranking_loss", input1=input1, input2=input2, target=target)
    return _reduce(clamp(-target * (input1 - input2) + margin, min=0), reduction)


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False, size_average=None,
                        reduce=None, reduction="mean"):
    """``max(0, margin + d(a, p) - d(a, n))`` with ``pairwise_distance`` ``d``; with ``swap``,
    ``d(a, n)`` is ``min(d(a, n), d(p, n))``."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    check_reduction(reduction)
    if margin <= 0:
        raise ValueError(f"margin must be greater than 0, got {margin}")
    a_dim, p_dim, n_dim = len(anchor._shape), len(positive._shape), len(negative._shape)
    if not a_dim == p_dim == n_dim:
        raise RuntimeError(f"The anchor, positive, and negative tensors are expected to have the same number of "
                           f"dimensions, but got: anchor {a_dim}D, positive {p_dim}D, and negative {n_dim}D inputs")
    _check_shapes("triplet_margin_loss", anchor=anchor, positive=positive, negative=negative)
    dist_pos = pairwise_distance(anchor, positive, p, eps)
    dist_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        dist_neg = minimum(dist_neg, pairwise_distance(positive, negative, p, eps))
    return _reduce(clamp(dist_pos - dist_neg + margin, min=0), reduction)


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    """``-(t log s(x) + (1 - t) log(1 - s(x)))`` (as ``t softplus(-x) + (1 - t) softplus(x)``)
    times ``weight``, averaged over the last (class) dim."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    _check_shapes("multilabel_soft_margin_loss", input=input, target=target)
    loss = target * softplus(-input) + (1 - target) * softplus(input)
    if weight is not None:
        loss = loss * weight
    class_dim = len(input._shape) - 1
    loss = loss.sum(class_dim) / input._shape[class_dim]
    if reduction not in _REDUCTIONS:
        raise ValueError(reduction + " is not valid")
    return _reduce(loss, reduction)


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """``log(1 + exp(-target input))``, computed as ATen does (``log1p(exp(.))``)."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    check_reduction(reduction)
    _check_shapes("soft_margin_loss", input=input, target=target)
    if _needs_grad(target):
        raise RuntimeError("The function 'soft_margin_loss' is not differentiable with respect to argument 'target'. "
                           "This input cannot have requires_grad True.")
    return name_composite(_reduce((-input * target).exp().log1p(), reduction), "SoftMarginLossBackward0", input)


def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None, reduction="mean"):
    """``input`` where ``target != -1`` plus ``max(0, margin - input)`` where ``target != 1``."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    check_reduction(reduction)
    _check_shapes("hinge_embedding_loss", input=input, target=target)
    loss = where(target != 1, clamp(margin - input, min=0), 0.0) + where(target != -1, input, 0.0)
    return _reduce(loss, reduction)


def multi_margin_loss(input, target, p=1, margin=1.0, weight=None, size_average=None, reduce=None,
                      reduction="mean"):
    """``sum_{j != y} w_y max(0, margin - x_y + x_j)^p / C`` per sample of (N, C) or (C,)
    ``input`` with class indices ``target``."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    check_reduction(reduction)
    if p not in (1, 2):
        raise ValueError("only p == 1 and p == 2 supported")
    if weight is not None and len(weight._shape) != 1:
        raise ValueError("weight must be one-dimensional")
    dims = len(input._shape)
    if not ((dims == 2 and input._shape[1] != 0) or (dims == 1 and input._shape[0] != 0) or dims == 0):
        raise RuntimeError(f"Expected non-empty vector or matrix with optional 0-dim batch size, but got: "
                           f"{list(input._shape)}")
    rows = input._shape[0] if dims == 2 else 1
    classes = input._shape[-1] if dims else 1
    if len(target._shape) > 1 or target._numel != rows:
        raise RuntimeError(f"multi_margin_loss: target tensor should be 1-D with size equal to the number of "
                           f"input samples (batch size). Expected target size [{rows}], but got "
                           f"{list(target._shape)}. Input has shape {list(input._shape)}.")
    if weight is not None and weight._numel != classes:
        raise RuntimeError(f"inconsistent weight size, expected {classes} but got {list(weight._shape)}")
    if target._dtype is not dtypes.int64:
        raise RuntimeError(f"expected scalar type Long but found {_scalar_type(target._dtype)}")
    targets = np.asarray(target._value()).reshape(rows)
    if ((targets < 0) | (targets >= classes)).any():
        raise RuntimeError("target out of range")
    x = input.reshape(rows, classes)
    picked = x[np.arange(rows), targets].unsqueeze(1)
    hinge = relu(margin - picked + x)
    if p == 2:
        hinge = hinge * hinge
    coeff = np.ones((rows, classes))
    coeff[np.arange(rows), targets] = 0.0      # the target's own term is left out
    if weight is not None:
        coeff *= np.asarray(weight._value(), np.float64).reshape(-1)[targets][:, None]
    loss = (hinge * _constant(coeff / classes, input)).sum(1)
    if reduction == "none":
        loss = loss if target._shape else loss.reshape(())
    else:
        loss = _reduce(loss, reduction)
    return name_composite(loss, "MultiMarginLossBackward0", input)
