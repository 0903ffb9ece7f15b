"""The elementwise binary cross-entropy of probabilities, ``nn.functional.binary_cross_entropy``
before its reduction, with PyTorch's clamps and gradients."""
import numpy as np

from tapejit._jit import rule
from tapejit.registry import define_binary
from tapejit.samples import binary_samples


# ---- binary cross-entropy of probabilities, elementwise ---------------------------------
# PyTorch's formulas, whose gradients are not the derivative of its clamped loss: at a
# probability of exactly 0 or 1 the loss is capped at 100 but the input's gradient is
# (x - t) / 1e-12, not 0 (a saturated sigmoid keeps learning), and the target's is
# -logit(x), unclamped.


# Outside [0, 1] (NaN included), which the front end refuses as PyTorch does but cannot check
# in a tj.compile replay, the loss and its gradients are NaN, not finite and wrong.


@rule
def bce_value(x, t):
    if not (x >= 0.0 and x <= 1.0 and t >= 0.0 and t <= 1.0):
        return np.nan
    return (t - 1.0) * np.maximum(np.log1p(-x), -100.0) - t * np.maximum(np.log(x), -100.0)


@rule
def bce_grad_x(x, t, z, g):
    if not (x >= 0.0 and x <= 1.0 and t >= 0.0 and t <= 1.0):
        return np.nan
    # 9.99...e-13 is PyTorch's EPSILON, the float nearest 1e-12
    return g * (x - t) / np.maximum((1.0 - x) * x, 9.999999960041972e-13)


@rule
def bce_grad_t(x, t, z, g):
    if not (x >= 0.0 and x <= 1.0 and t >= 0.0 and t <= 1.0):
        return np.nan
    return -np.log(x / (1.0 - x)) * g


def _probabilities(rng, shape):
    return rng.uniform(0.05, 0.95, size=shape)


def _targets(rng, shape):
    return rng.uniform(0.0, 1.0, size=shape)


BINARY_CROSS_ENTROPY = define_binary(
    "binary_cross_entropy", "BinaryCrossEntropyBackward0", bce_value, bce_grad_x, bce_grad_t,
    samples=binary_samples("binary_cross_entropy", _probabilities, _targets,
                           shapes=[((), ()), ((5,), (5,)), ((3, 4), (3, 4))],
                           fn=lambda tj, x, t: tj.nn.functional.binary_cross_entropy(x, t, reduction="none")))


# ---- front ends ---------------------------------------------------------------------------
from tapejit.recording import record_binary  # noqa: E402


def binary_cross_entropy_elementwise(input, target):
    """The unreduced loss of ``nn.functional.binary_cross_entropy``, which checks its inputs."""
    return record_binary(BINARY_CROSS_ENTROPY, input, target)


# ---- derivative formulas (create_graph) ----------------------------------------------------
# One per op, applied by create_graph passes (tapejit/autograd/higher.py); plain Python,
# not compiled: see tapejit/ops/_formulas.py.  Kept last so define_ edits merge cleanly.

from tapejit.api import front_ends as tj  # noqa: E402  (tj's functions, read at call time)
from tapejit.ops import _formulas as _f  # noqa: E402
from tapejit.ops._formulas import derivative  # noqa: E402


@derivative(BINARY_CROSS_ENTROPY)
def _d_binary_cross_entropy(c):
    """torch's: g (x - t) / max((1 - x) x, eps) and -log(x / (1 - x)) g; inputs outside
    [0, 1] (NaN gradients in the rule) raise."""
    x, t = _f.binary_operands(c)
    xv, tv = np.broadcast_arrays(_f.value(x), _f.value(t))
    if not (np.all((xv >= 0) & (xv <= 1)) and np.all((tv >= 0) & (tv <= 1))):
        raise _f.refuse(c, "an input or target outside [0, 1]")
    eps = 9.999999960041972e-13
    small = (1.0 - xv) * xv < eps
    if small.any():
        raise _f.refuse(c, "an input within 1e-12 of 0 or 1 (the clamped denominator)")
    gx = c.g * (x - t) / ((1.0 - x) * x) if c.wants_a else None
    gt = -tj.log(x / (1.0 - x)) * c.g if c.wants_b else None
    return _f.pair(c, gx, gt)
