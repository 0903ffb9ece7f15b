"""Derivative formulas for ``create_graph=True`` (see ``tapejit/autograd/higher.py``).

One ``@derivative(OP)`` per op (or per kernel, for ops sharing one): the vector-Jacobian
product of the op's record written with tapejit's recorded ops, so its result can be
differentiated again.  The formulas mirror the op modules' compiled rules (same
subgradients: PyTorch's), in the order of ``tapejit/ops/*.py``.  Adjoints are flat; a
formula returns ``(grad of operand a, grad of operand b)`` (None for no gradient), or
``[(encoded operand, grad)]`` for ops with operands listed in ``ints``.

Masks (relu, clamp, where, maximum) are constants: ``where(mask, g, 0)`` gives an exact
zero off the mask, even for an infinite ``g``, as the rules and PyTorch's do.

Kept here, not beside each op's rules, until the registry hashes only compiled code: as
long as editing an op module's text recompiles every sweep, formulas live apart (they
are plain Python).  Ops without a formula raise ``higher.unsupported`` by name.
"""
import math

import numpy as np

from tapejit import linalg as tj_linalg, special as tj_special
from tapejit.api import front_ends as tj   # the facade's functions, without importing it
from tapejit import registry
from tapejit.autograd.higher import derivative, shaped, slot
from tapejit.ops import activation as _act, binary as _bin, linalg as _lin, movement as _mov
from tapejit.ops.indexing import _gather
from tapejit.ops.views import strided_view
from tapejit.ops import reduce as _red, unary as _un, indexed as _idx, special as _sp
from tapejit.ops import linalg_dense as _ld, norm as _nrm
from tapejit.tensor import _concrete

_SQRT_2_OVER_PI = 0.7978845608028654
_INV_SQRT_2PI = 0.3989422804014327
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


# ---- helpers: constants and the two index primitives ---------------------------------------

def _zeros(n, dt):
    return _concrete(np.zeros(n, dt.np))


def _where(mask, a, b):
    """``where`` with a constant NumPy mask; ``b`` may be a Python number."""
    return tj.where(_concrete(np.asarray(mask, bool)), a, b)


def _value(t):
    """The value of an operand or result slot of the record being differentiated: read
    from the arena without a flush (the walk flushed the tape up to that record first;
    a flush here would run the forward of the records the walk wrote so far, once per
    mask).  Under ``tj.compile`` the read is refused as any value read (a mask would be
    frozen into the replays)."""
    tape = t._tape
    if tape is None or tape.tracing or tape.broken is not None or tape.unkept is not None:
        return t._value()
    return tape.vals[t._dtype.arena][t._off:t._off + t._numel].reshape(t._shape)


def gather(x, positions):
    """``x[positions]`` of flat ``x`` (an ``index`` record; its gradient scatters back)."""
    return _gather(_mov.INDEX, x, np.asarray(positions, np.int64))


def scatter_add(g, positions, size):
    """A flat tensor of ``size`` zeros with ``g[i]`` added at ``positions[i]`` (duplicates
    sum): the transpose of ``gather`` (a ``scatter_add`` record; its gradient gathers)."""
    from tapejit.tensor_math import _place
    positions = np.asarray(positions, np.int64).reshape(-1)
    return _place(_idx.SCATTER_ADD, (size,), None, g, 1, positions, np.arange(positions.size))


# ---- unary: arithmetic with a Python scalar (tapejit/ops/unary.py) ----------------------

@derivative(_un.NEG, _un.RSUB_SCALAR)
def _neg(c):
    return (-c.g, None)


@derivative(_un.ADD_SCALAR, registry.BY_NAME["sub_scalar"])
def _identity(c):
    return (c.g, None)


@derivative(_un.FILL)
def _fill(c):
    return (_zeros(c.n, c.dt), None)


@derivative(_un.MUL_SCALAR)
def _mul_scalar(c):
    return (c.g * c.c0, None)


@derivative(_un.DIV_SCALAR)
def _div_scalar(c):
    return (c.g / c.c0, None)


@derivative(_un.RDIV_SCALAR)
def _rdiv_scalar(c):
    return (-c.g * c.out() / c.x(), None)


@derivative(_un.SQUARE)
def _square(c):
    return (c.g * 2.0 * c.x(), None)


@derivative(_un.POW_SCALAR)
def _pow_scalar(c):
    e = c.c0
    if e == 0.0:
        return (_zeros(c.n, c.dt), None)
    x = c.x()
    if e == 1.0:
        return (c.g, None)
    if e == 2.0:
        return (c.g * 2.0 * x, None)
    return (c.g * e * x ** (e - 1.0), None)


@derivative(_un.RPOW_SCALAR)
def _rpow_scalar(c):
    base = c.c0
    if base == 0.0:   # the rule's: g * 0 where x >= 0, g * y * log(0) elsewhere
        return (_where(_value(c.x()) >= 0, 0.0 * c.g, c.g * c.out() * -math.inf), None)
    return (c.g * c.out() * math.log(base), None)


# ---- unary: elementary functions ------------------------------------------------------------

@derivative(_un.ABS)
def _abs(c):
    return (c.g * tj.sign(c.x()), None)


@derivative(_un.SIGN)
def _sign(c):
    return (_zeros(c.n, c.dt), None)


@derivative(_un.EXP)
def _exp(c):
    return (c.g * c.out(), None)


@derivative(_un.LOG)
def _log(c):
    return (c.g / c.x(), None)


@derivative(_un.LOG1P)
def _log1p(c):
    return (c.g / (c.x() + 1.0), None)


@derivative(_un.EXPM1)
def _expm1(c):
    return (c.g * (c.out() + 1.0), None)


@derivative(_un.SQRT)
def _sqrt(c):
    return (c.g / (2.0 * c.out()), None)


@derivative(_un.RSQRT)
def _rsqrt(c):
    y = c.out()
    return (-0.5 * c.g * y * y * y, None)


@derivative(_un.SIN)
def _sin(c):
    return (c.g * tj.cos(c.x()), None)


@derivative(_un.COS)
def _cos(c):
    return (-c.g * tj.sin(c.x()), None)


@derivative(_un.TAN)
def _tan(c):
    y = c.out()
    return (c.g * (1.0 + y * y), None)


@derivative(_un.TANH)
def _tanh(c):
    y = c.out()
    return (c.g * (1.0 - y * y), None)


@derivative(_un.SIGMOID)
def _sigmoid(c):
    y = c.out()
    return (c.g * y * (1.0 - y), None)


@derivative(_un.RELU)
def _relu(c):
    return (_where(_value(c.out()) > 0, c.g, 0.0), None)


@derivative(_un.SOFTPLUS)
def _softplus(c):
    beta, threshold = c.c0, c.c1
    x = c.x()
    linear = _value(x) * beta > threshold
    return (_where(linear, c.g, c.g * tj.sigmoid(x * beta)), None)


@derivative(_un.ERF)
def _erf(c):
    x = c.x()
    return (c.g * _TWO_OVER_SQRT_PI * tj.exp(-(x * x)), None)


@derivative(_un.CLAMP)
def _clamp(c):
    x = _value(c.x())
    return (_where((x >= c.c0) & (x <= c.c1), c.g, 0.0), None)


@derivative(_un.GELU)
def _gelu(c):
    x = c.x()
    cdf = 0.5 * (1.0 + tj.erf(x * 0.7071067811865476))
    pdf = _INV_SQRT_2PI * tj.exp(-0.5 * x * x)
    return (c.g * (cdf + x * pdf), None)


@derivative(_un.GELU_TANH)
def _gelu_tanh(c):
    x = c.x()
    t = tj.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x))
    dinner = _SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044715 * x * x)
    return (c.g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * dinner), None)


@derivative(_un.LEAKY_RELU)
def _leaky_relu(c):
    return (_where(_value(c.x()) > 0, c.g, c.g * c.c0), None)


# ---- binary (tapejit/ops/binary.py): q = 1 / 2 when x / y is a single element -------------

def _binary(c):
    """Operands of a binary record and how to bring a gradient back to each one's size."""
    q = c.q
    x = c.x(1 if q == 1 else c.n)
    y = c.y(1 if q == 2 else c.n)
    return x, y


def _to(g, scalar):
    return shaped(g.sum(), (1,)) if scalar else g


def _pair(c, gx, gy):
    return (None if gx is None or not c.wants_a else _to(gx, c.q == 1),
            None if gy is None or not c.wants_b else _to(gy, c.q == 2))


@derivative(_bin.ADD)
def _add(c):
    return _pair(c, c.g, c.g)


@derivative(_bin.SUB)
def _sub(c):
    return _pair(c, c.g, -c.g)


@derivative(_bin.MUL)
def _mul(c):
    x, y = _binary(c)
    return _pair(c, c.g * y if c.wants_a else None, c.g * x if c.wants_b else None)


@derivative(_bin.COPY)
def _copy(c):
    return _pair(c, c.g * 0.0 if c.wants_a else None, c.g)


@derivative(_bin.DIV)
def _div(c):
    x, y = _binary(c)
    gx = c.g / y
    return _pair(c, gx, -gx * x / y if c.wants_b else None)


@derivative(_bin.POW)
def _pow(c):
    x, y = _binary(c)
    xv, yv = np.broadcast_arrays(_value(x), _value(y))
    gx = gy = None
    if c.wants_a:
        gx = _where(yv == 0.0, 0.0, c.g * y * x ** (y - 1.0))
    if c.wants_b:
        with np.errstate(divide="ignore"):
            gy = _where((xv == 0.0) & (yv >= 0.0), 0.0 * c.g, c.g * c.out() * tj.log(x))
    return _pair(c, gx, gy)


def _extreme(c, larger):
    """maximum/minimum: the larger (smaller) operand gets g, ties split it (PyTorch's)."""
    x, y = _binary(c)
    xv, yv = np.broadcast_arrays(_value(x), _value(y))
    x_wins = xv > yv if larger else xv < yv
    y_wins = yv > xv if larger else yv < xv
    tie = xv == yv
    gx = _where(x_wins, c.g, _where(tie, c.g * 0.5, 0.0)) if c.wants_a else None
    gy = _where(y_wins, c.g, _where(tie, c.g * 0.5, 0.0)) if c.wants_b else None
    return _pair(c, gx, gy)


@derivative(_bin.MAXIMUM)
def _maximum(c):
    return _extreme(c, True)


@derivative(_bin.MINIMUM)
def _minimum(c):
    return _extreme(c, False)


@derivative(_bin.CLAMP_MIN_TENSOR)
def _clamp_min_tensor(c):
    x, y = _binary(c)
    keep = np.broadcast_arrays(_value(x), _value(y))
    keep = keep[0] >= keep[1]
    return _pair(c, _where(keep, c.g, 0.0), _where(keep, 0.0, c.g))


@derivative(_bin.CLAMP_MAX_TENSOR)
def _clamp_max_tensor(c):
    x, y = _binary(c)
    keep = np.broadcast_arrays(_value(x), _value(y))
    keep = keep[0] <= keep[1]
    return _pair(c, _where(keep, c.g, 0.0), _where(keep, 0.0, c.g))


@derivative(_bin.REMAINDER, registry.BY_NAME["remainder_scalar"])
def _remainder(c):
    x, y = _binary(c)
    with np.errstate(all="ignore"):
        quotient = np.floor_divide(*np.broadcast_arrays(_value(x), _value(y)))
    return _pair(c, c.g, -c.g * _concrete(quotient) if c.wants_b else None)


@derivative(_bin.FMOD, registry.BY_NAME["fmod_scalar"])
def _fmod(c):
    x, y = _binary(c)
    with np.errstate(all="ignore"):
        quotient = np.trunc(np.divide(*np.broadcast_arrays(_value(x), _value(y))))
    return _pair(c, c.g, -c.g * _concrete(quotient) if c.wants_b else None)


# lerp is recorded as its last step, an add (``same_kernels`` of ADD)
derivative(_sp.LERP_SCALAR, _sp.LERP_TENSOR)(_add)


# ---- special functions and the rarer elementary ones (tapejit/ops/special.py) ------------

def _unary(op):
    """``@_unary(OP)``: a formula ``f(c, x, y, g)`` of the input, output and gradient."""
    def register(fn):
        derivative(op)(lambda c: (fn(c, c.x(), c.out(), c.g), None))
        return fn
    return register


@_unary(_sp.ASIN)
def _asin(c, x, y, g):
    return g / tj.sqrt(1.0 - x * x)


@_unary(_sp.ACOS)
def _acos(c, x, y, g):
    return -g / tj.sqrt(1.0 - x * x)


@_unary(_sp.ATAN)
def _atan(c, x, y, g):
    return g / (1.0 + x * x)


@_unary(_sp.ASINH)
def _asinh(c, x, y, g):
    return g / tj.sqrt(x * x + 1.0)


@_unary(_sp.ACOSH)
def _acosh(c, x, y, g):
    return g / tj.sqrt(x * x - 1.0)


@_unary(_sp.ATANH)
def _atanh(c, x, y, g):
    return g / (1.0 - x * x)


@_unary(_sp.SINH)
def _sinh(c, x, y, g):
    return g * tj.cosh(x)


@_unary(_sp.COSH)
def _cosh(c, x, y, g):
    return g * tj.sinh(x)


@_unary(_sp.LOG2)
def _log2(c, x, y, g):
    return g / (x * math.log(2.0))


@_unary(_sp.LOG10)
def _log10(c, x, y, g):
    return g / (x * math.log(10.0))


@_unary(_sp.EXP2)
def _exp2(c, x, y, g):
    return g * y * math.log(2.0)


@_unary(_sp.RECIPROCAL)
def _reciprocal(c, x, y, g):
    return -g * y * y


@_unary(_sp.DEG2RAD)
def _deg2rad(c, x, y, g):
    return g * (math.pi / 180.0)


@_unary(_sp.RAD2DEG)
def _rad2deg(c, x, y, g):
    return g * (180.0 / math.pi)


@_unary(_sp.FRAC)
def _frac(c, x, y, g):
    return g


@derivative(_sp.FLOOR, _sp.CEIL, _sp.TRUNC, _sp.ROUND, _sp.ROUND_DECIMALS)
def _step(c):
    return (_zeros(c.n, c.dt), None)


@_unary(_sp.ERFC)
def _erfc(c, x, y, g):
    return -g * _TWO_OVER_SQRT_PI * tj.exp(-(x * x))


@_unary(_sp.ERFINV)
def _erfinv(c, x, y, g):
    return g * (math.sqrt(math.pi) / 2.0) * tj.exp(y * y)


@derivative(_sp.LGAMMA, _sp.DIGAMMA, _sp.POLYGAMMA)
def _gamma_family(c):
    """lgamma' = digamma, digamma' = polygamma(1, .), polygamma(n, .)' = polygamma(n + 1, .)."""
    order = c.float(c.q)
    x = c.x()
    if order == -1.0:
        d = tj.digamma(x)
    else:
        d = tj.polygamma(1 if order == -2.0 else int(order) + 1, x)
    return (c.g * d, None)


@_unary(_sp.SINC)
def _sinc(c, x, y, g):
    # the rule's: 0 at x = 0 (torch's masked_fill), so its derivative there is 0 too
    at_zero = _value(x) == 0.0
    safe = _where(at_zero, 1.0, x) if at_zero.any() else x
    t = math.pi * safe
    d = g * (tj.cos(t) * t - tj.sin(t)) / (t * safe)
    return _where(at_zero, 0.0, d) if at_zero.any() else d


@_unary(_sp.LOGIT)
def _logit(c, x, y, g):
    eps = c.c0
    xv = _value(x)
    if eps < 0.0:
        if np.any((xv < 0.0) | (xv > 1.0)):
            raise _refuse(c, "an input outside [0, 1] (its gradient is NaN)")
        return g / (x * (1.0 - x))
    outside = (xv < eps) | (xv > 1.0 - eps)
    return _where(outside, 0.0, g / (x * (1.0 - x))) if outside.any() else g / (x * (1.0 - x))


@derivative(_sp.NAN_TO_NUM)
def _nan_to_num(c):
    # torch's: grad * isfinite(x), a product (an infinite g times 0 is NaN there too)
    finite = np.isfinite(_value(c.x()))
    return (c.g * _concrete(finite.astype(c.dt.np)), None)


@derivative(_sp.ATAN2)
def _atan2(c):
    x, y = _binary(c)
    xv, yv = np.broadcast_arrays(_value(x), _value(y))
    origin = (xv == 0.0) & (yv == 0.0)   # torch's: a zero gradient at the origin
    d = x * x + y * y
    if origin.any():
        d = _where(origin, 1.0, d)
    gx = _where(origin, 0.0, c.g * y / d) if c.wants_a else None
    gy = _where(origin, 0.0, -c.g * x / d) if c.wants_b else None
    return _pair(c, gx, gy)


@derivative(_sp.HYPOT)
def _hypot(c):
    x, y = _binary(c)
    z = c.out()
    return _pair(c, c.g * x / z if c.wants_a else None, c.g * y / z if c.wants_b else None)


@derivative(_sp.LOGADDEXP)
def _logaddexp(c):
    x, y = _binary(c)
    return _pair(c, c.g / (1.0 + tj.exp(y - x)) if c.wants_a else None,
                 c.g / (1.0 + tj.exp(x - y)) if c.wants_b else None)


@derivative(_sp.LOGADDEXP2)
def _logaddexp2(c):
    x, y = _binary(c)
    return _pair(c, c.g / (1.0 + tj.exp2(y - x)) if c.wants_a else None,
                 c.g / (1.0 + tj.exp2(x - y)) if c.wants_b else None)


@derivative(_sp.XLOGY)
def _xlogy(c):
    x, y = _binary(c)
    xv = np.broadcast_arrays(_value(x), _value(y))[0]
    # torch's: xlogy(g, y), which is 0 where g is 0 (NaN y aside), masked where x = 0, y <= 0
    gx = tj.xlogy(c.g, y) if c.wants_a else None
    if gx is not None:
        yv = np.broadcast_arrays(_value(x), _value(y))[1]
        masked = (xv == 0.0) & (yv <= 0.0)
        if masked.any():
            gx = _where(masked, 0.0, gx)
    return _pair(c, gx, c.g * x / y if c.wants_b else None)


@derivative(_sp.XLOG1PY)
def _xlog1py(c):
    x, y = _binary(c)
    gx = tj_special.xlog1py(c.g, y) if c.wants_a else None
    if gx is not None:
        xv, yv = np.broadcast_arrays(_value(x), _value(y))
        masked = (xv == 0.0) & (yv <= -1.0)
        if masked.any():
            gx = _where(masked, 0.0, gx)
    return _pair(c, gx, c.g * x / (y + 1.0) if c.wants_b else None)


def _nan_extreme(c, larger):
    """fmax/fmin: g to the operand chosen (x on ties, the other one of a NaN)."""
    x, y = _binary(c)
    xv, yv = np.broadcast_arrays(_value(x), _value(y))
    with np.errstate(invalid="ignore"):
        x_chosen = ((xv >= yv) if larger else (xv <= yv)) | np.isnan(yv)
    return _pair(c, _where(x_chosen, c.g, 0.0) if c.wants_a else None,
                 _where(x_chosen, 0.0, c.g) if c.wants_b else None)


@derivative(_sp.FMAX)
def _fmax(c):
    return _nan_extreme(c, True)


@derivative(_sp.FMIN)
def _fmin(c):
    return _nan_extreme(c, False)


# ---- activation kernels (tapejit/ops/activation.py) ---------------------------------------

@derivative(_act.SOFTMAX, _act.LOG_SOFTMAX)
def _softmax(c):
    outer, length, inner = (c.int(c.p + i) for i in range(3))
    shape = (outer, length, inner)
    g = shaped(c.g, shape)
    y = c.out(shape)
    if c.q == 1:   # log_softmax: g - softmax * sum(g)
        return (g - tj.exp(y) * g.sum(1, keepdim=True), None)
    gy = g * y
    return (gy - y * gy.sum(1, keepdim=True), None)


# ---- movement: copies, views, gathers, cat, where (tapejit/ops/movement.py) ----------------

def _ops_with(kernel):
    return [op for op in registry.OPS if op.forward is kernel]


@derivative(*_ops_with(_mov.copy_range_forward))
def _copy_range(c):
    start, count, size = ~c.b, c.p, c.q
    if start == 0 and count == size:
        return (c.g, None)
    # zeros, g, zeros: contiguous copies (a cat), cheaper than a scatter of every position
    parts = [c.g]
    if start:
        parts.insert(0, _zeros(start, c.dt))
    if size - start - count:
        parts.append(_zeros(size - start - count, c.dt))
    return (tj.cat(parts), None)


def _strided_positions(ints, p):
    nd = int(ints[p])
    start = int(ints[p + 1])
    sizes = ints[p + 3:p + 3 + nd]
    strides = ints[p + 3 + nd:p + 3 + 2 * nd]
    pos = np.full(tuple(int(s) for s in sizes), start, np.int64)
    for d in range(nd):
        shape = [1] * nd
        shape[d] = int(sizes[d])
        pos = pos + (np.arange(int(sizes[d])) * int(strides[d])).reshape(shape)
    return pos.reshape(-1), int(ints[p + 2])


@derivative(*_ops_with(_mov.strided_forward))
def _strided(c):
    positions, size = _strided_positions(c.tape.ints, c.p)
    return (scatter_add(c.g, positions, size), None)


@derivative(*_ops_with(_mov.gather_forward))
def _gathered(c):
    positions = c.ints(c.p + 2, c.q)
    return (scatter_add(c.g, positions, c.int(c.p + 1)), None)


@derivative(*_ops_with(_mov.cat_forward))
def _cat(c):
    k, outer = c.int(c.p), c.int(c.p + 1)
    inners = [c.int(c.p + 3 + 2 * j) for j in range(k)]
    total = sum(inners)
    g = shaped(c.g, (outer, total))
    result = []
    at = 0
    for j, inner in enumerate(inners):
        enc = c.int(c.p + 2 + 2 * j)
        if c.wants(enc):
            result.append((enc, g[:, at:at + inner]))
        at += inner
    return result


@derivative(_mov.WHERE)
def _where_op(c):
    mask = c.ints(c.p + 1, c.q) != 0
    return (_where(mask, c.g, 0.0) if c.wants_a else None,
            _where(mask, 0.0, c.g) if c.wants_b else None)


# ---- sums (tapejit/ops/reduce.py) ---------------------------------------------------------

@derivative(*_ops_with(_red.sum_forward))
def _sum(c):
    if c.p < 0:   # a chunk of a full sum (tapejit/chunked.py): ~p elements into one
        return (gather(c.g, np.zeros(~c.p, np.int64)), None)
    ints = c.tape.ints
    p = c.p
    nd = int(ints[p])
    sizes = [int(s) for s in ints[p + 2:p + 2 + nd]]
    ostrides = ints[p + 2 + nd:p + 2 + 2 * nd]
    # input element idx reads g at sum(idx * ostrides): a strided view of g (an expand)
    g = strided_view(_mov.EXPAND, c.g, tuple(sizes), tuple(int(s) for s in ostrides), 0)
    scale = c.float(c.q)
    return (g * scale if scale != 1.0 else g, None)


def _along_axis(c):
    """An (outer, length, inner) reduction: its input, result and gradient as 3-D tensors."""
    outer, length, inner = (c.int(c.p + i) for i in range(3))
    x = c.x(outer * length * inner, (outer, length, inner))
    y = c.out((outer, 1, inner))
    return x, y, shaped(c.g, (outer, 1, inner))


def _refuse(c, why):
    from tapejit.autograd.higher import unsupported
    err = unsupported(c.op)
    return NotImplementedError(f"{err.args[0]} ({why})")


@derivative(*_ops_with(_red.prod_forward))
def _prod(c):
    if c.float(c.q) == 2.0:   # a 0-d input: its gradient is g
        return (c.g, None)
    x, y, g = _along_axis(c)
    if not np.any(_value(x) == 0.0):
        return (g * y / x, None)
    # With zeros, each element's gradient is g times the product of the others: the
    # slice repeated once per element, that element replaced by 1, and multiplied out.
    outer, length, inner = x.shape
    repeated = x.unsqueeze(1).expand(outer, length, length, inner)
    eye = np.eye(length, dtype=bool).reshape(1, length, length, 1)
    others = _where(np.broadcast_to(eye, (outer, length, length, inner)), 1.0, repeated).prod(2)
    return (g * others, None)


@derivative(_red.LOGSUMEXP)
def _logsumexp(c):
    x, y, g = _along_axis(c)
    if not np.all(np.isfinite(_value(y))):
        raise _refuse(c, "an infinite result")
    return (g * tj.exp(x - y), None)


@derivative(*_ops_with(_red.amax_forward))
def _amax(c):
    """The gradient split evenly between the elements equal to the extreme (a constant
    weight per element), as the rule does."""
    x, y, g = _along_axis(c)
    xv, yv = _value(x), _value(y)
    if np.isnan(xv).any():
        raise _refuse(c, "a NaN input")
    ties = xv == yv
    weights = ties / ties.sum(axis=1, keepdims=True)
    return (g * _concrete(weights.astype(xv.dtype)), None)


@derivative(*_ops_with(_red.var_forward))
def _var(c):
    """var: 2 / (n - correction) * g * (x - mean); std: var's with g / (2 std), 0 where
    std is 0 (the rule's cases; the NaN/inf one of a reduction over too few raises)."""
    x, y, g = _along_axis(c)
    dof = x.shape[1] - c.float(c.q)
    if dof <= 0.0:
        raise _refuse(c, "n - correction <= 0")
    if c.float(c.q + 1) >= 2.0:
        at_zero = _value(y) == 0.0
        safe = _where(at_zero, 1.0, y) if at_zero.any() else y
        g = _where(at_zero, 0.0, g / (safe * 2.0)) if at_zero.any() else g / (y * 2.0)
    return (g * (2.0 / dof) * (x - x.mean(1, keepdim=True)), None)


@derivative(_red.NORM)
def _norm(c):
    """The rule's cases: sgn(x) g for the 1-norm, g x / |x| for the 2-norm, g sgn(x)
    |x|^(p-1) |x|_p^(1-p) for the others, zero where the norm is zero (and, p < 1, where
    x is); the inf-norm's g split between the elements equal to it (constant weights)."""
    order = c.float(c.q)
    x, y, g = _along_axis(c)
    xv, yv = _value(x), _value(y)
    if np.isnan(xv).any():
        raise _refuse(c, "a NaN input")
    if order == 1.0:
        return (g * tj.sign(x), None)
    at_zero = np.broadcast_to(yv == 0.0, xv.shape)
    safe_y = _where(yv == 0.0, 1.0, y) if at_zero.any() else y
    if np.isinf(order):
        hits = np.abs(xv) == yv
        weights = hits / hits.sum(axis=1, keepdims=True)
        return (g * tj.sign(x) * _concrete(weights.astype(xv.dtype)), None)
    if order == 2.0:
        d = g * x / safe_y
    else:
        masked = at_zero | (xv == 0.0) if order < 1.0 else at_zero
        ax = tj.abs(x)
        if order < 1.0 and masked.any():
            ax = _where(xv == 0.0, 1.0, ax)
        d = g * tj.sign(x) * ax ** (order - 1.0) * safe_y ** (1.0 - order)
        at_zero = masked
    return (_where(at_zero, 0.0, d) if at_zero.any() else d, None)


@derivative(registry.BY_NAME["cumsum"])
def _cumsum(c):
    outer, length, inner, kind = (c.int(c.p + i) for i in range(4))
    if kind != 0:
        raise _refuse(c, "cumprod")
    g = shaped(c.g, (outer, length, inner))
    return (tj.flip(tj.cumsum(tj.flip(g, (1,)), 1), (1,)), None)


@derivative(registry.BY_NAME["cumprod"])
def _cumprod(c):
    """Without zeros: dx_j = (sum over k >= j of g_k y_k) / x_j.  With zeros, exactly and
    without division: dx_j = sum over k >= j of g_k times the cumulative product up to k
    of the slice with x_j replaced by 1 (one such slice per j)."""
    outer, length, inner, kind = (c.int(c.p + i) for i in range(4))
    shape = (outer, length, inner)
    x = c.x(shape=shape)
    g = shaped(c.g, shape)
    if not np.any(_value(x) == 0.0):
        gy = g * c.out(shape)
        return (tj.flip(tj.cumsum(tj.flip(gy, (1,)), 1), (1,)) / x, None)
    full = (outer, length, length, inner)   # (., j, k, .)
    eye = np.broadcast_to(np.eye(length, dtype=bool).reshape(1, length, length, 1), full)
    later = np.broadcast_to(np.triu(np.ones((length, length), dtype=bool)).reshape(1, length, length, 1), full)
    others = tj.cumprod(_where(eye, 1.0, x.unsqueeze(1).expand(*full)), 2)
    return (_where(later, others * g.unsqueeze(1), 0.0).sum(2), None)


# ---- losses' building blocks (tapejit/ops/activation.py) ----------------------------------

@derivative(_act.BINARY_CROSS_ENTROPY)
def _binary_cross_entropy(c):
    """torch's: g (x - t) / max((1 - x) x, eps) and -log(x / (1 - x)) g; inputs outside
    [0, 1] (NaN gradients in the rule) raise."""
    x, t = _binary(c)
    xv, tv = np.broadcast_arrays(_value(x), _value(t))
    if not (np.all((xv >= 0) & (xv <= 1)) and np.all((tv >= 0) & (tv <= 1))):
        raise _refuse(c, "an input or target outside [0, 1]")
    eps = 9.999999960041972e-13
    small = (1.0 - xv) * xv < eps
    if small.any():
        raise _refuse(c, "an input within 1e-12 of 0 or 1 (the clamped denominator)")
    gx = c.g * (x - t) / ((1.0 - x) * x) if c.wants_a else None
    gt = -tj.log(x / (1.0 - x)) * c.g if c.wants_b else None
    return _pair(c, gx, gt)


# ---- matrix products (tapejit/ops/linalg.py) ----------------------------------------------

@derivative(*_ops_with(_lin.bmm_forward))
def _bmm(c):
    batch, m, k, n = (c.int(c.p + i) for i in range(4))
    g = shaped(c.g, (batch, m, n))
    ga = gb = None
    if c.wants_a:
        ga = tj.matmul(g, c.y(batch * k * n, (batch, k, n)).transpose(1, 2))
    if c.wants_b:
        gb = tj.matmul(c.x(batch * m * k, (batch, m, k)).transpose(1, 2), g)
    return (ga, gb)


@derivative(*_ops_with(_lin.linear_forward))
def _linear(c):
    m, k, n, has_bias, bias = (c.int(c.p + i) for i in range(5))
    g = shaped(c.g, (m, n))
    result = []
    if c.wants_a:
        result.append((c.a, tj.matmul(g, c.y(n * k, (n, k)))))
    if c.wants_b:
        result.append((c.b, tj.matmul(g.t(), c.x(m * k, (m, k)))))
    if has_bias and c.wants(bias):
        result.append((bias, g.sum(0)))
    return result


# ---- linalg (tapejit/ops/linalg_dense.py) -------------------------------------------------

@derivative(_ld.INV)
def _inv(c):
    """-Y^T G Y^T with Y = inv(A); a singular (NaN) inverse raises."""
    batch, n = c.int(c.p), c.int(c.p + 1)
    y = c.out((batch, n, n))
    if not np.all(np.isfinite(_value(y))):
        raise _refuse(c, "a singular or non-finite matrix")
    yt = y.transpose(1, 2)
    return (-tj.matmul(tj.matmul(yt, shaped(c.g, (batch, n, n))), yt), None)


@derivative(_ld.DET)
def _det(c):
    """g det(A) inv(A)^T; a singular matrix (det 0: torch goes through an SVD) raises."""
    batch, n = c.int(c.p), c.int(c.p + 1)
    x = c.x(batch * n * n, (batch, n, n))
    d = _value(c.out())
    if not np.all(np.isfinite(d)) or np.any(d == 0.0):
        raise _refuse(c, "a singular or non-finite matrix")
    scale = shaped(c.g * c.out(), (batch, 1, 1))
    return (scale * tj_linalg.inv(x).transpose(1, 2), None)


# ---- normalization (tapejit/ops/norm.py) --------------------------------------------------

@derivative(*_ops_with(_nrm.normalize_forward))
def _normalize(c):
    """Batch, instance, group and layer norm: the record's forward written again with
    formulated ops (mean, variance, rsqrt, gathers of the weights), and the vjp of that,
    itself recorded (a nested create_graph pass over those few records)."""
    from tapejit.autograd.higher import run
    P, Q, S, mq, ma, ds, nw, given, has_w, has_b, bias, mean_at, var_at = (c.int(c.p + i) for i in range(13))
    eps = c.float(c.q)
    x = c.x(P * Q * S, (P, Q, S))
    w = c.y(nw) if has_w else None
    b = slot(c.tape, c.arena, bias, nw) if has_b else None
    stats = []
    if given:
        per_q = np.arange(Q) % mq
        stats = [slot(c.tape, c.arena, mean_at, mq), slot(c.tape, c.arena, var_at, mq)]
        mean = shaped(gather(stats[0], per_q), (1, Q, 1))
        var = shaped(gather(stats[1], per_q), (1, Q, 1))
    else:
        mean = x.mean((0, 2), keepdim=True)
        centered = x - mean
        var = (centered * centered).mean((0, 2), keepdim=True)
    y = (x - mean) * tj.rsqrt(var + eps)
    index = (((np.arange(Q) % mq) * ma)[:, None] + (np.arange(S) // max(ds, 1))[None, :]).reshape(-1)
    if w is not None:
        y = y * shaped(gather(w, index), (1, Q, S))
    if b is not None:
        y = y + shaped(gather(b, index), (1, Q, S))
    operands = [(c.a, x), (c.b, w), (bias, b)] + list(zip((mean_at, var_at), stats))
    wanted = [(enc, t) for enc, t in operands if t is not None and c.wants(enc)]
    if not wanted or not y.requires_grad:
        return []
    found = run([(y, shaped(c.g, (P, Q, S)))], [t for _, t in wanted], accumulate=False)
    return [(enc, g) for (enc, _), g in zip(wanted, found) if g is not None]


# ---- placement (tapejit/ops/indexed.py) ---------------------------------------------------

@derivative(*_ops_with(_idx.place_forward))
def _place(c):
    from tapejit.tensor_math import _place as place
    ints = c.tape.ints
    p = c.p
    mode, has_base, n, size, src_size = (int(ints[p + i]) for i in range(5))
    dest = ints[p + 5:p + 5 + n].copy()
    src = ints[p + 5 + n:p + 5 + 2 * n].copy()
    result = []
    if has_base and c.wants_a:
        base_grad = c.g if mode == 1 else place(_idx.SCATTER_VALUE, (size,), c.g, None, 2, dest, None)
        result.append((c.a, base_grad))
    src_enc = c.b if has_base else c.a
    if mode != 2 and c.wants(src_enc):
        result.append((src_enc, scatter_add(gather(c.g, dest), src, src_size)))
    return result

