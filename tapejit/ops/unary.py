"""Elementwise ops of one tensor, optionally with static float parameters ``c0``, ``c1``.

Each op is its value rule and derivative rule, then one ``define_unary`` line.  The
derivative rule sees the input ``x``, the output ``y`` and the incoming adjoint ``g``.
Subgradients follow PyTorch: ``abs'(0) = 0``, ``relu'(0) = 0``, ``clamp`` passes the
gradient on the closed interval ``[min, max]``, ``pow(x, 0)`` has zero gradient.
Where PyTorch masks a gradient (relu, clamp, sign, ``pow(x, 0)``) it is an exact zero,
even for an infinite ``g``; elsewhere NaN and inf propagate through products as in
PyTorch (``abs`` at 0 with an infinite ``g`` is NaN).
"""
import math

import numpy as np

from tapejit._jit import rule
from tapejit.ops._kernel_helpers import tanh as fast_tanh
from tapejit.registry import define_unary, names


def define_arith(name, node, *args, **kwargs):
    """Arithmetic with a Python scalar: compiled with the binary arithmetic ops."""
    return define_unary(name, node, *args, group="arith", **kwargs)


def define_activation(name, node, *args, **kwargs):
    """Activation functions: compiled with softmax and friends."""
    return define_unary(name, node, *args, group="activation", **kwargs)

from tapejit.samples import unary_samples, positive, anywhere, away_from_zero, bounded

# ---- arithmetic with a Python scalar (the scalar is c0) -----------------------------------


@rule
def neg_value(x, c0, c1):
    return -x


@rule
def neg_grad(x, y, g, c0, c1):
    return -g


NEG = define_arith("neg", "NegBackward0", neg_value, neg_grad, saves=False, vectorized=True,
                   samples=unary_samples("neg", anywhere),
                   names=names("neg", "negative", in_place="function", numpy=("negative",), dunders=("__neg__",),
                               integer=np.negative))


@rule
def add_scalar_value(x, c0, c1):
    return x + c0


@rule
def add_scalar_grad(x, y, g, c0, c1):
    return g


ADD_SCALAR = define_arith("add_scalar", "AddBackward0", add_scalar_value, add_scalar_grad,
                          nconst=1, vectorized=True, saves=False,
                          operands=2, samples=unary_samples("add_scalar", anywhere, lambda tj, x: x + 1.5))


@rule
def fill_value(x, c0, c1):
    return c0


@rule
def fill_grad(x, y, g, c0, c1):
    return 0.0   # the old value's gradient: an exact zero, even for an infinite g (torch's)


# ``fill_``/``zero_`` of a recorded tensor: the value, with the tensor still in the graph.
FILL = define_arith("fill", "FillBackward2", fill_value, fill_grad, nconst=1, saves=False,
                    samples=unary_samples("fill", anywhere, lambda tj, x: (x * 1).fill_(0.5)))


@rule
def rsub_scalar_value(x, c0, c1):
    return c0 - x


@rule
def rsub_scalar_grad(x, y, g, c0, c1):
    return -g


RSUB_SCALAR = define_arith("rsub_scalar", "RsubBackward1", rsub_scalar_value, rsub_scalar_grad,
                           nconst=1, vectorized=True, saves=False,
                           samples=unary_samples("rsub_scalar", anywhere, lambda tj, x: 2.0 - x))


@rule
def mul_scalar_value(x, c0, c1):
    return x * c0


@rule
def mul_scalar_grad(x, y, g, c0, c1):
    return g * c0


MUL_SCALAR = define_arith("mul_scalar", "MulBackward0", mul_scalar_value, mul_scalar_grad,
                          nconst=1, vectorized=True, saves=False,
                          operands=2, samples=unary_samples("mul_scalar", anywhere, lambda tj, x: x * -3.0))


@rule
def div_scalar_value(x, c0, c1):
    return x / c0


@rule
def div_scalar_grad(x, y, g, c0, c1):
    return g / c0


DIV_SCALAR = define_arith("div_scalar", "DivBackward0", div_scalar_value, div_scalar_grad,
                          nconst=1, vectorized=True, saves=False,
                          operands=2, samples=unary_samples("div_scalar", anywhere, lambda tj, x: x / 4.0))


@rule
def rdiv_scalar_value(x, c0, c1):
    return c0 / x


@rule
def rdiv_scalar_grad(x, y, g, c0, c1):
    return -g * y / x


# PyTorch computes ``c / x`` as ``x.reciprocal() * c``, so its node is a MulBackward0, and
# what it saves is the reciprocal, an intermediate no in-place op can reach.
RDIV_SCALAR = define_arith("rdiv_scalar", "MulBackward0", rdiv_scalar_value, rdiv_scalar_grad,
                           nconst=1, vectorized=True, saved="",
                           operands=2, samples=unary_samples("rdiv_scalar", away_from_zero, lambda tj, x: 2.0 / x))


@rule
def square_value(x, c0, c1):
    return x * x


@rule
def square_grad(x, y, g, c0, c1):
    return g * 2.0 * x


# ``x ** 2``, most of the powers people write, is an op of its own: x * x is exact and far
# cheaper than pow, and a loop with no branch on the exponent vectorizes.
# front end: binary.py's square (pow's scalar path)
SQUARE = define_arith("square", "PowBackward0", square_value, square_grad, vectorized=True,
                      names=names("square", written=True),
                      samples=lambda rng: (unary_samples("square", anywhere, lambda tj, x: x ** 2)(rng)
                                           + unary_samples("square_fn", anywhere, lambda tj, x: tj.square(x))(rng)))


@rule
def pow_scalar_value(x, c0, c1):
    return x ** c0


@rule
def pow_scalar_grad(x, y, g, c0, c1):
    if c0 == 0.0:
        return 0.0   # PyTorch's zeros_like: an exact zero, even for an infinite g
    return g * c0 * x ** (c0 - 1.0)


POW_SCALAR = define_arith("pow_scalar", "PowBackward0", pow_scalar_value, pow_scalar_grad,
                          nconst=1, vectorized=True,
                          samples=lambda rng: (unary_samples("pow_scalar", anywhere, lambda tj, x: x ** 3)(rng)
                                               + unary_samples("pow_scalar_frac", positive,
                                                               lambda tj, x: x ** 1.5)(rng)
                                               + unary_samples("pow_scalar_neg", positive,
                                                               lambda tj, x: x ** -0.5)(rng)))


@rule
def rpow_scalar_value(x, c0, c1):
    return c0 ** x


@rule
def rpow_scalar_grad(x, y, g, c0, c1):
    if c0 == 0.0 and x >= 0.0:
        return g * 0.0
    return g * y * np.log(c0)


RPOW_SCALAR = define_arith("rpow_scalar", "PowBackward2", rpow_scalar_value, rpow_scalar_grad,
                           nconst=1, vectorized=True, saved="ao",
                           samples=unary_samples("rpow_scalar", anywhere, lambda tj, x: 2.0 ** x))

# ---- elementary functions ----------------------------------------------------------------


@rule
def abs_value(x, c0, c1):
    return np.abs(x)


@rule
def abs_grad(x, y, g, c0, c1):
    # g * sgn(x) with PyTorch's sgn, which is 0 at NaN (NumPy's sign is NaN there)
    if x > 0:
        return g
    if x < 0:
        return -g
    return g * 0.0


ABS = define_unary("abs", "AbsBackward0", abs_value, abs_grad,
                   samples=unary_samples("abs", away_from_zero),
                   names=names("abs", in_place="function", numpy=("absolute",), dunders=("__abs__",),
                               integer=np.abs))


@rule
def sign_value(x, c0, c1):
    # PyTorch's sign: +0.0 for NaN and for -0.0, where NumPy's gives NaN and -0.0
    if x > 0:
        return 1.0
    if x < 0:
        return -1.0
    return c0


@rule
def sign_grad(x, y, g, c0, c1):
    return 0.0   # PyTorch's zeros_like, even for an infinite g


SIGN = define_unary("sign", "SignBackward0", sign_value, sign_grad, saves=False,
                    samples=unary_samples("sign", away_from_zero),
                    names=names("sign", in_place="method", numpy=("sign",), integer=np.sign))


@rule
def exp_value(x, c0, c1):
    return np.exp(x)


@rule
def exp_grad(x, y, g, c0, c1):
    return g * y


EXP = define_unary("exp", "ExpBackward0", exp_value, exp_grad, saved="o", samples=unary_samples("exp", bounded),
                   names=names("exp", in_place="function", numpy=("exp",)))


@rule
def log_value(x, c0, c1):
    return np.log(x)


@rule
def log_grad(x, y, g, c0, c1):
    return g / x


LOG = define_unary("log", "LogBackward0", log_value, log_grad, samples=unary_samples("log", positive),
                   names=names("log", in_place="function", numpy=("log",)))


@rule
def log1p_value(x, c0, c1):
    return np.log1p(x)


@rule
def log1p_grad(x, y, g, c0, c1):
    return g / (x + 1.0)


LOG1P = define_unary("log1p", "Log1PBackward0", log1p_value, log1p_grad,
                     samples=unary_samples("log1p", positive),
                     names=names("log1p", in_place="function", special=("log1p",), numpy=("log1p",)))


@rule
def expm1_value(x, c0, c1):
    return np.expm1(x)


@rule
def expm1_grad(x, y, g, c0, c1):
    return g * (y + 1.0)


EXPM1 = define_unary("expm1", "Expm1Backward0", expm1_value, expm1_grad,
                     saved="o", samples=unary_samples("expm1", bounded),
                     names=names("expm1", in_place="function", special=("expm1",), numpy=("expm1",)))


@rule
def sqrt_value(x, c0, c1):
    return np.sqrt(x)


@rule
def sqrt_grad(x, y, g, c0, c1):
    return g / (2.0 * y)


SQRT = define_unary("sqrt", "SqrtBackward0", sqrt_value, sqrt_grad, saved="o", samples=unary_samples("sqrt", positive),
                    names=names("sqrt", in_place="function", numpy=("sqrt",)))


@rule
def rsqrt_value(x, c0, c1):
    return 1.0 / np.sqrt(x)


@rule
def rsqrt_grad(x, y, g, c0, c1):
    return -0.5 * g * y * y * y


RSQRT = define_unary("rsqrt", "RsqrtBackward0", rsqrt_value, rsqrt_grad,
                     saved="o", samples=unary_samples("rsqrt", positive), names=names("rsqrt", in_place="function"))


@rule
def sin_value(x, c0, c1):
    return np.sin(x)


@rule
def sin_grad(x, y, g, c0, c1):
    return g * np.cos(x)


SIN = define_unary("sin", "SinBackward0", sin_value, sin_grad, samples=unary_samples("sin", anywhere),
                   names=names("sin", in_place="function", numpy=("sin",)))


@rule
def cos_value(x, c0, c1):
    return np.cos(x)


@rule
def cos_grad(x, y, g, c0, c1):
    return -g * np.sin(x)


COS = define_unary("cos", "CosBackward0", cos_value, cos_grad, samples=unary_samples("cos", anywhere),
                   names=names("cos", in_place="function", numpy=("cos",)))


@rule
def tan_value(x, c0, c1):
    return np.tan(x)


@rule
def tan_grad(x, y, g, c0, c1):
    return g * (1.0 + y * y)


TAN = define_unary("tan", "TanBackward0", tan_value, tan_grad, saved="o", samples=unary_samples("tan", bounded),
                   names=names("tan", in_place="function", numpy=("tan",)))


@rule
def tanh_value(x, c0, c1):
    return fast_tanh(x)


@rule
def tanh_grad(x, y, g, c0, c1):
    return g * (1.0 - y * y)


TANH = define_activation("tanh", "TanhBackward0", tanh_value, tanh_grad, saved="o", samples=unary_samples("tanh", anywhere),
                         names=names("tanh", in_place="function", numpy=("tanh",)))


@rule
def sigmoid_value(x, c0, c1):
    # Two branches so exp never overflows: exact in both float32 and float64.
    if x >= 0:
        return 1.0 / (1.0 + np.exp(-x))
    e = np.exp(x)
    return e / (1.0 + e)


@rule
def sigmoid_grad(x, y, g, c0, c1):
    return g * y * (1.0 - y)


SIGMOID = define_activation("sigmoid", "SigmoidBackward0", sigmoid_value, sigmoid_grad,
                            saved="o", samples=unary_samples("sigmoid", anywhere),
                            names=names("sigmoid", in_place="function", special=("expit",)))


@rule
def relu_value(x, c0, c1):
    # c0 is a zero of x's type.  PyTorch's relu gives +0.0 for a negative x (x * 0.0 would be
    # -0.0, and 1 / relu(-1) -inf) and keeps -0.0 and NaN.
    return c0 if x < 0 else x


@rule
def relu_grad(x, y, g, c0, c1):
    # PyTorch's threshold_backward: an exact zero where y <= 0 (even for an infinite g),
    # g elsewhere, NaN included
    return c0 if y <= 0 else g


RELU = define_activation("relu", "ReluBackward0", relu_value, relu_grad, saved="o", samples=unary_samples("relu", away_from_zero),
                         names=names("relu", in_place="function", integer=lambda v: np.maximum(v, 0)))


@rule
def softplus_value(x, c0, c1):
    # c0 = beta, c1 = threshold: above it softplus is the identity, as in PyTorch.
    if x * c0 > c1:
        return x
    return np.log1p(np.exp(x * c0)) / c0


@rule
def softplus_grad(x, y, g, c0, c1):
    if x * c0 > c1:
        return g
    z = np.exp(x * c0)
    return g * z / (z + 1.0)


SOFTPLUS = define_activation("softplus", "SoftplusBackward0", softplus_value, softplus_grad, nconst=2,
                        samples=unary_samples("softplus", anywhere,
                                              lambda tj, x: tj.nn.functional.softplus(x, beta=1.5)))


@rule
def erf_value(x, c0, c1):
    return math.erf(x)


@rule
def erf_grad(x, y, g, c0, c1):
    return g * 1.1283791670955126 * np.exp(-x * x)


ERF = define_unary("erf", "ErfBackward0", erf_value, erf_grad, samples=unary_samples("erf", anywhere),
                   names=names("erf", in_place="function", special=("erf",)))


@rule
def clamp_value(x, c0, c1):
    # c0 = min, c1 = max (+-inf when not given): PyTorch's min(max(x, min), max), so max
    # wins when min > max; NaN stays NaN.
    if x < c0:
        if c0 > c1:
            return c1
        return c0
    if x > c1:
        return c1
    return x


@rule
def clamp_grad(x, y, g, c0, c1):
    # PyTorch masks: outside [min, max] (or NaN) an exact zero, even for an infinite g
    if x >= c0 and x <= c1:
        return g
    return 0.0


# front ends written below: min and max are numbers or tensors
CLAMP = define_activation("clamp", "ClampBackward1", clamp_value, clamp_grad, nconst=2,
                          names=names("clamp", "clip", in_place="function", written=True),
                     samples=unary_samples("clamp", away_from_zero, lambda tj, x: tj.clamp(x, -0.5, 0.7)))


@rule
def gelu_value(x, c0, c1):
    return 0.5 * x * (1.0 + math.erf(x * 0.7071067811865476))


@rule
def gelu_grad(x, y, g, c0, c1):
    cdf = 0.5 * (1.0 + math.erf(x * 0.7071067811865476))
    pdf = 0.3989422804014327 * np.exp(-0.5 * x * x)
    return g * (cdf + x * pdf)


GELU = define_activation("gelu", "GeluBackward0", gelu_value, gelu_grad,
                    samples=unary_samples("gelu", anywhere, lambda tj, x: tj.nn.functional.gelu(x)))


@rule
def gelu_tanh_value(x, c0, c1):
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    return 0.5 * x * (1.0 + np.tanh(inner))


@rule
def gelu_tanh_grad(x, y, g, c0, c1):
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    t = np.tanh(inner)
    dinner = 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x)
    return g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * dinner)


GELU_TANH = define_activation("gelu_tanh", "GeluBackward0", gelu_tanh_value, gelu_tanh_grad,
                         samples=unary_samples("gelu_tanh", anywhere,
                                               lambda tj, x: tj.nn.functional.gelu(x, approximate="tanh")))


@rule
def leaky_relu_value(x, c0, c1):
    return x if x > 0 else x * c0


@rule
def leaky_relu_grad(x, y, g, c0, c1):
    return g if x > 0 else g * c0


LEAKY_RELU = define_activation("leaky_relu", "LeakyReluBackward0", leaky_relu_value, leaky_relu_grad, nconst=1,
                          samples=unary_samples("leaky_relu", away_from_zero,
                                                lambda tj, x: tj.nn.functional.leaky_relu(x, 0.1)))


# ---- front ends ---------------------------------------------------------------------------
# (Defined after all rules so the opcodes above stay in one block.)
import numpy as _np  # noqa: E402

from tapejit.api import argument_error, export  # noqa: E402
from tapejit.ops._front_ends import generate  # noqa: E402
from tapejit.recording import record_unary, name_composite  # noqa: E402
from tapejit.tensor import Tensor, _concrete  # noqa: E402


generate(globals())   # tj.exp, Tensor.exp, exp_, ... from the names above


@export(method=True)
def clamp(input, min=None, max=None):
    """Clamp into ``[min, max]``; the gradient passes where ``min <= x <= max``."""
    if min is None and max is None:
        raise RuntimeError("clamp: At least one of 'min' or 'max' must not be None")
    from tapejit.tensor import Tensor
    if isinstance(min, Tensor) or isinstance(max, Tensor):
        # PyTorch's min(max(x, min), max) and its masks (not maximum's split gradient at a tie)
        from tapejit.ops.binary import CLAMP_MAX_TENSOR, CLAMP_MIN_TENSOR
        from tapejit.recording import as_tensor_operand, record_binary
        out = input
        if min is not None:
            out = record_binary(CLAMP_MIN_TENSOR, out, as_tensor_operand(min, out), _np.maximum)
        if max is not None:
            out = record_binary(CLAMP_MAX_TENSOR, out, as_tensor_operand(max, out), _np.minimum)
        return out
    if not input._dtype.is_floating_point:
        return _concrete(_np.clip(input._value(), min, max))
    lo = -_np.inf if min is None else float(min)
    hi = _np.inf if max is None else float(max)
    return record_unary(CLAMP, input, lo, hi)


export(clamp, name="clip", method=True)


@export(method=True)
def clamp_(input, min=None, max=None):
    from tapejit.inplace import apply_inplace
    return apply_inplace(input, lambda: clamp(input, min, max), "clamp_")


export(clamp_, name="clip_", method=True)


@export(method=True)
def clamp_min(input, min):
    out = clamp(input, min=min)
    # torch's node for a number bound (a tensor bound's record is already ClampMinBackward1)
    return out if hasattr(min, "_shape") else name_composite(out, "ClampMinBackward0", input)


@export(method=True)
def clamp_max(input, max):
    out = clamp(input, max=max)
    return out if hasattr(max, "_shape") else name_composite(out, "ClampMaxBackward0", input)


@export(method=True, function=False)
def clamp_min_(input, min):
    return clamp_(input, min=min)


@export(method=True, function=False)
def clamp_max_(input, max):
    return clamp_(input, max=max)


def softplus(input, beta=1.0, threshold=20.0):
    # Checked where a non-tensor fails, not in a front end: scalar code calls this per op.
    try:
        return record_unary(SOFTPLUS, input, float(beta), float(threshold))
    except AttributeError:
        if not isinstance(input, Tensor):
            raise argument_error("softplus", "input", 1, input, "Tensor") from None
        raise


def gelu(input, approximate="none"):
    if approximate == "tanh":
        return record_unary(GELU_TANH, input)
    if approximate != "none":
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return record_unary(GELU, input)


def leaky_relu(input, negative_slope=0.01, inplace=False):
    return record_unary(LEAKY_RELU, input, float(negative_slope))


# ---- derivative formulas (create_graph) ----------------------------------------------------
# One per op, applied by create_graph passes (tapejit/autograd/higher.py); plain Python,
# not compiled: see tapejit/ops/_formulas.py.  Kept last so define_ edits merge cleanly.

import math  # noqa: E402
from tapejit.api import front_ends as tj  # noqa: E402  (tj's functions, read at call time)
from tapejit.ops import _formulas as _f  # noqa: E402
from tapejit.ops._formulas import derivative  # noqa: E402

_d_SQRT_2_OVER_PI = 0.7978845608028654
_d_INV_SQRT_2PI = 0.3989422804014327
_d_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


@derivative(NEG, RSUB_SCALAR)
def _d_neg(c):
    return (-c.g, None)


@derivative(ADD_SCALAR)
def _d_identity(c):
    return (c.g, None)


@derivative(FILL)
def _d_fill(c):
    return (_f.zeros(c.n, c.dt), None)


@derivative(MUL_SCALAR)
def _d_mul_scalar(c):
    return (c.g * c.c0, None)


@derivative(DIV_SCALAR)
def _d_div_scalar(c):
    return (c.g / c.c0, None)


@derivative(RDIV_SCALAR)
def _d_rdiv_scalar(c):
    return (-c.g * c.out() / c.x(), None)


@derivative(SQUARE)
def _d_square(c):
    return (c.g * 2.0 * c.x(), None)


@derivative(POW_SCALAR)
def _d_pow_scalar(c):
    e = c.c0
    if e == 0.0:
        return (_f.zeros(c.n, c.dt), None)
    x = c.x()
    if e == 1.0:
        return (c.g, None)
    if e == 2.0:
        return (c.g * 2.0 * x, None)
    return (c.g * e * x ** (e - 1.0), None)


@derivative(RPOW_SCALAR)
def _d_rpow_scalar(c):
    base = c.c0
    if base == 0.0:   # the rule's: g * 0 where x >= 0, g * y * log(0) elsewhere
        return (_f.where(_f.value(c.x()) >= 0, 0.0 * c.g, c.g * c.out() * -math.inf), None)
    return (c.g * c.out() * math.log(base), None)


@derivative(ABS)
def _d_abs(c):
    return (c.g * tj.sign(c.x()), None)


@derivative(SIGN)
def _d_sign(c):
    return (_f.zeros(c.n, c.dt), None)


@derivative(EXP)
def _d_exp(c):
    return (c.g * c.out(), None)


@derivative(LOG)
def _d_log(c):
    return (c.g / c.x(), None)


@derivative(LOG1P)
def _d_log1p(c):
    return (c.g / (c.x() + 1.0), None)


@derivative(EXPM1)
def _d_expm1(c):
    return (c.g * (c.out() + 1.0), None)


@derivative(SQRT)
def _d_sqrt(c):
    return (c.g / (2.0 * c.out()), None)


@derivative(RSQRT)
def _d_rsqrt(c):
    y = c.out()
    return (-0.5 * c.g * y * y * y, None)


@derivative(SIN)
def _d_sin(c):
    return (c.g * tj.cos(c.x()), None)


@derivative(COS)
def _d_cos(c):
    return (-c.g * tj.sin(c.x()), None)


@derivative(TAN)
def _d_tan(c):
    y = c.out()
    return (c.g * (1.0 + y * y), None)


@derivative(TANH)
def _d_tanh(c):
    y = c.out()
    return (c.g * (1.0 - y * y), None)


@derivative(SIGMOID)
def _d_sigmoid(c):
    y = c.out()
    return (c.g * y * (1.0 - y), None)


@derivative(RELU)
def _d_relu(c):
    y = c.out()
    return (_f.on_graph_of(_f.where(_f.value(y) > 0, c.g, 0.0), y), None)


@derivative(SOFTPLUS)
def _d_softplus(c):
    beta, threshold = c.c0, c.c1
    x = c.x()
    linear = _f.value(x) * beta > threshold
    return (_f.where(linear, c.g, c.g * tj.sigmoid(x * beta)), None)


@derivative(ERF)
def _d_erf(c):
    x = c.x()
    return (c.g * _d_TWO_OVER_SQRT_PI * tj.exp(-(x * x)), None)


@derivative(CLAMP)
def _d_clamp(c):
    x = _f.value(c.x())
    return (_f.where((x >= c.c0) & (x <= c.c1), c.g, 0.0), None)


@derivative(GELU)
def _d_gelu(c):
    x = c.x()
    cdf = 0.5 * (1.0 + tj.erf(x * 0.7071067811865476))
    pdf = _d_INV_SQRT_2PI * tj.exp(-0.5 * x * x)
    return (c.g * (cdf + x * pdf), None)


@derivative(GELU_TANH)
def _d_gelu_tanh(c):
    x = c.x()
    t = tj.tanh(_d_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x))
    dinner = _d_SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044715 * x * x)
    return (c.g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * dinner), None)


@derivative(LEAKY_RELU)
def _d_leaky_relu(c):
    x = c.x()
    return (_f.on_graph_of(_f.where(_f.value(x) > 0, c.g, c.g * c.c0), x), None)
