"""Elementwise ops of two tensors of one shape (or one of them of size 1).

Broadcasting between other shapes is done before the op by an ``expand`` record, so the
rules here never see it and the summing-back of gradients lives in one place
(``expand``'s backward).  Each rule gets ``x``, ``y``, the output ``z`` and the adjoint ``g``.
Ties follow PyTorch: ``maximum``/``minimum`` split the gradient evenly when ``x == y``,
and a NaN gives both operands the gradient.  Integer ``//``, ``%`` and ``fmod`` by zero
raise, as PyTorch (NumPy would give 0).
"""
import numpy as np

from tapejit._jit import rule, small_kernel
from tapejit.ops._kernel_helpers import acc, claim, decode
from tapejit.registry import define_binary, define_kernel, names
from tapejit.samples import binary_samples, cases, anywhere, positive, away_from_zero


@rule
def add_value(x, y):
    return x + y


@rule
def add_grad_x(x, y, z, g):
    return g


@rule
def add_grad_y(x, y, z, g):
    return g


ADD = define_binary("add", "AddBackward0", add_value, add_grad_x, add_grad_y, saves=False,
                    vectorized=True, samples=binary_samples("add", anywhere, fn=lambda tj, x, y: x + y),
                    names=names("add", in_place="method", written=True))


@rule
def sub_value(x, y):
    return x - y


@rule
def sub_grad_y(x, y, z, g):
    return -g


SUB = define_binary("sub", "SubBackward0", sub_value, add_grad_x, sub_grad_y, saves=False,
                    vectorized=True, samples=binary_samples("sub", anywhere, fn=lambda tj, x, y: x - y),
                    names=names("sub", "subtract", in_place="method", written=True))


@rule
def mul_value(x, y):
    return x * y


@rule
def mul_grad_x(x, y, z, g):
    return g * y


@rule
def mul_grad_y(x, y, z, g):
    return g * x


MUL = define_binary("mul", "MulBackward0", mul_value, mul_grad_x, mul_grad_y, saved="AB",
                    vectorized=True, samples=binary_samples("mul", anywhere, fn=lambda tj, x, y: x * y),
                    names=names("mul", "multiply", in_place="method", written=True))


@rule
def copy_value(x, y):
    return y


@rule
def copy_grad_x(x, y, z, g):
    return 0.0   # the overwritten value's gradient: an exact zero, even for an infinite g


@rule
def copy_grad_y(x, y, z, g):
    return g


# ``copy_`` into a recorded tensor, or from one that requires grad: ``y``, with ``x`` still
# in the graph (``x * 0 + y`` would turn an infinite x or gradient into NaN).
COPY = define_binary("copy", "CopyBackwards", copy_value, copy_grad_x, copy_grad_y, saves=False,
                     samples=cases(("copy", lambda tj, x, y: (x * 1).copy_(y), [(3, 4), (3, 4)], anywhere),
                                   ("copy_expanded", lambda tj, x, y: (x * 1).copy_(y), [(3, 4), (4,)], anywhere)))


@rule
def div_value(x, y):
    return x / y


@rule
def div_grad_x(x, y, z, g):
    return g / y


@rule
def div_grad_y(x, y, z, g):
    return -g * ((x / y) / y)   # torch's order: x / x gives gradients that cancel exactly


DIV = define_binary("div", "DivBackward0", div_value, div_grad_x, div_grad_y, saved="Ab",
                    vectorized=True, samples=binary_samples("div", anywhere, away_from_zero, fn=lambda tj, x, y: x / y),
                    names=names("div", "divide", "true_divide", in_place="method", written=True))


@rule
def pow_value(x, y):
    return x ** y


@rule
def pow_grad_x(x, y, z, g):
    if y == 0.0:
        return 0.0   # PyTorch's where(): an exact zero, even for an infinite g
    return g * y * x ** (y - 1.0)


@rule
def pow_grad_y(x, y, z, g):
    if x == 0.0 and y >= 0.0:
        return g * 0.0
    return g * z * np.log(x)


POW = define_binary("pow", "PowBackward1", pow_value, pow_grad_x, pow_grad_y, saved="abo",
                    samples=binary_samples("pow", positive, anywhere, fn=lambda tj, x, y: x ** y),
                    names=names("pow", in_place="method", written=True))


@rule
def maximum_value(x, y):
    if np.isnan(x) or np.isnan(y):
        return x + y
    return x if x >= y else y


# PyTorch's rules, also for NaN: half each at a tie, an exact zero for the smaller (a
# masked_fill, even for an infinite g), g otherwise (so both operands of a NaN result get g).


@rule
def maximum_grad_x(x, y, z, g):
    if x == y:
        return g * 0.5
    if x < y:
        return 0.0
    return g


@rule
def maximum_grad_y(x, y, z, g):
    if x == y:
        return g * 0.5
    if y < x:
        return 0.0
    return g


MAXIMUM = define_binary("maximum", "MaximumBackward0", maximum_value, maximum_grad_x, maximum_grad_y,
                        samples=binary_samples("maximum", away_from_zero),
                        names=names("maximum", written=True))


@rule
def minimum_value(x, y):
    if np.isnan(x) or np.isnan(y):
        return x + y
    return x if x <= y else y


@rule
def minimum_grad_x(x, y, z, g):
    if x == y:
        return g * 0.5
    if x > y:
        return 0.0
    return g


@rule
def minimum_grad_y(x, y, z, g):
    if x == y:
        return g * 0.5
    if y > x:
        return 0.0
    return g


MINIMUM = define_binary("minimum", "MinimumBackward0", minimum_value, minimum_grad_x, minimum_grad_y,
                        samples=binary_samples("minimum", away_from_zero),
                        names=names("minimum", written=True))


# clamp with a tensor bound (x, bound): PyTorch's value, NaN from either, and its masks: the
# gradient goes to x inside the bound (NaN excluded), to the bound where it clips.


@rule
def clamp_min_tensor_grad_x(x, y, z, g):
    if x >= y:
        return g
    return 0.0


@rule
def clamp_min_tensor_grad_y(x, y, z, g):
    if x < y:
        return g
    return 0.0


@rule
def clamp_max_tensor_grad_x(x, y, z, g):
    if x <= y:
        return g
    return 0.0


@rule
def clamp_max_tensor_grad_y(x, y, z, g):
    if x > y:
        return g
    return 0.0


CLAMP_MIN_TENSOR = define_binary("clamp_min_tensor", "ClampMinBackward1", maximum_value, clamp_min_tensor_grad_x,
                                 clamp_min_tensor_grad_y,
                                 samples=binary_samples("clamp_min_tensor", away_from_zero,
                                                        fn=lambda tj, x, y: tj.clamp_min(x, y)))
CLAMP_MAX_TENSOR = define_binary("clamp_max_tensor", "ClampMaxBackward1", minimum_value, clamp_max_tensor_grad_x,
                                 clamp_max_tensor_grad_y,
                                 samples=binary_samples("clamp_max_tensor", away_from_zero,
                                                        fn=lambda tj, x, y: tj.clamp_max(x, y)))


@rule
def remainder_value(x, y):
    # PyTorch's (and Python's) modulo, with the sign of the divisor
    m = np.fmod(x, y)
    if m != 0 and ((y < 0) != (m < 0)):
        return m + y
    return m


@rule
def remainder_grad_y(x, y, z, g):
    # -g * floor(x / y), the quotient rounded as PyTorch's div(rounding_mode="floor")
    if y == 0:
        return -g * (x / y)
    m = np.fmod(x, y)
    q = (x - m) / y
    if m != 0 and ((y < 0) != (m < 0)):
        q -= 1.0
    if q != 0:
        f = np.floor(q)
        if q - f > 0.5:
            f += 1.0
        return -g * f
    return g * 0.0


def _modulo_inputs(sign):
    """Dividends and divisors whose quotient stays between integers (the remainder is
    continuous there): |x| in [0.5, 2], |y| in [2.5, 3]."""
    def dividends(rng, shape):
        return rng.choice([-1.0, 1.0], size=shape) * rng.uniform(0.5, 2.0, size=shape)

    def divisors(rng, shape):
        return sign(rng, shape) * rng.uniform(2.5, 3.0, size=shape)
    return dividends, divisors


_DIVIDENDS, _DIVISORS = _modulo_inputs(lambda rng, shape: rng.choice([-1.0, 1.0], size=shape))

REMAINDER = define_binary("remainder", "RemainderBackward1", remainder_value, add_grad_x, remainder_grad_y,
                          samples=binary_samples("remainder", _DIVIDENDS, _DIVISORS,
                                                 fn=lambda tj, x, y: tj.remainder(x, y)),
                          names=names("remainder", written=True))


@rule
def fmod_value(x, y):
    return np.fmod(x, y)


@rule
def fmod_grad_y(x, y, z, g):
    return -g * np.trunc(x / y)


FMOD = define_binary("fmod", "FmodBackward1", fmod_value, add_grad_x, fmod_grad_y,
                     samples=binary_samples("fmod", _DIVIDENDS, _DIVISORS, fn=lambda tj, x, y: tj.fmod(x, y)),
                     names=names("fmod", written=True))


# ---- n-ary add: a chain of adds, fused when tj.compile freezes a trace --------------------
# ``sum(tensors)`` records ``0 + t0`` (add_scalar) and one add per further term; the frozen-tape
# optimiser (tapejit/replay/optimize.py) replaces such a chain by one record.  ``ints[p:]`` is
# ``[k, n, operand, ..., operand]`` (k operands of n elements each, encoded as in a record's
# fields); ``q`` is the index in ``floats`` of the constant the chain starts from, or -1.
# The terms are added in the chain's order, so the values are the chain's to the bit.

@small_kernel
def add_n_forward(v, out, a, b, p, q, ints, floats):
    k = ints[p]
    n = ints[p + 1]
    first = decode(ints[p + 2])
    for i in range(n):
        s = v[first + i]
        if q >= 0:
            s = floats[q] + s
        for j in range(1, k):
            s = s + v[decode(ints[p + 2 + j]) + i]
        v[out + i] = s


@small_kernel
def add_n_backward(v, g, flags, out, a, b, ma, mb, p, q, ints, floats):
    n = ints[p + 1]
    for j in range(ints[p]):
        enc = ints[p + 2 + j]
        mode = claim(flags, enc)
        if mode != 0:
            for i in range(n):
                acc(g, enc + i, g[out + i], mode)


def _add_n_operands(ints, p):
    return [int(ints[p + 2 + j]) for j in range(int(ints[p]))]


ADD_N = define_kernel("add_n", "AddBackward0", add_n_forward, add_n_backward, saves=False, group="arith",
                      listed=_add_n_operands,
                      samples=cases(("sum_scalars", lambda tj, x, y, z: sum([x, y, z, x]), [(), (), ()], anywhere),
                                    ("add_chain", lambda tj, x, y: x + y + x * 2.0 + y, [(2, 3), (2, 3)], anywhere)))


# ---- front ends ---------------------------------------------------------------------------
import numbers as _numbers  # noqa: E402

from tapejit import dtypes as _dtypes  # noqa: E402
from tapejit.api import export, is_operand  # noqa: E402
from tapejit.inplace import in_place  # noqa: E402
from tapejit.ops import unary as _u  # noqa: E402
from tapejit.recording import record_binary, record_unary, as_tensor_operand, result_dtype, name_composite  # noqa: E402
from tapejit.registry import same_kernels as _same  # noqa: E402
from tapejit.tensor import Tensor, _concrete  # noqa: E402
from tapejit.tape import state as _state  # noqa: E402

SUB_SCALAR = _same("sub_scalar", "SubBackward0", _u.ADD_SCALAR,
                   samples=lambda rng: [(f"sub_scalar{list(s)}", lambda tj, x: x - 1.5, [rng.uniform(-2, 2, s)])
                                        for s in [(), (4,), (2, 3)]])
REMAINDER_SCALAR = _same("remainder_scalar", "RemainderBackward0", REMAINDER,
                         samples=lambda rng: [(f"remainder_scalar{list(s)}{c}", lambda tj, x, c=c: x % c,
                                               [_DIVIDENDS(rng, s)]) for s in [(), (4,), (2, 3)] for c in (2.5, -2.75)])
FMOD_SCALAR = _same("fmod_scalar", "FmodBackward0", FMOD,
                    samples=lambda rng: [(f"fmod_scalar{list(s)}{c}", lambda tj, x, c=c: tj.fmod(x, c),
                                          [_DIVIDENDS(rng, s)]) for s in [(), (4,), (2, 3)] for c in (2.5, -2.75)])

_Scalar = (_numbers.Real,)


def _is_scalar(x):
    t = type(x)
    if t is float or t is int:
        return True
    return isinstance(x, _Scalar) and not isinstance(x, Tensor)


def _int_result(t, c):
    """Integer tensor with an integer Python scalar stays integer (computed by NumPy)."""
    return not t._dtype.is_floating_point and isinstance(c, _numbers.Integral)


def _int64_scalar(name, c):
    """An integer scalar for NumPy's int64 arithmetic.  torch reads one in [2**63, 2**64) as
    uint64 wrapped to a negative int64 (so its ``x < 2**63`` is False) and refuses the rest;
    tapejit refuses all that int64 cannot hold, never a wrapped value."""
    if not -0x8000000000000000 <= c <= 0x7FFFFFFFFFFFFFFF:
        raise OverflowError(f"{name}: the Python int {c} does not fit in int64 (range [-2**63, 2**63 - 1]); "
                            f"tapejit refuses it rather than wrap it modulo 2**64")
    return c


def _int_scalar(name, t, c):
    """An integer scalar operand of integer tensor ``t``: torch computes in ``t``'s dtype,
    so a value past a narrower type's range wraps into it (``int8 + 300`` is ``int8 + 44``)."""
    c = _int64_scalar(name, c)
    dt = t._dtype
    if dt is _dtypes.int64 or dt is _dtypes.bool_:
        return c
    return np.array(c, np.int64).astype(dt.np)[()]


def _scalar_op(op, t, c, numpy_fn):
    if _int_result(t, c):
        return _concrete(np.asarray(numpy_fn(t._value(), _int_scalar(op.name.removesuffix("_scalar"), t, c))))
    return record_unary(op, t, float(c))


def _commutative_operator(tensor_op, scalar_op, numpy_fn, general):
    """``__add__``/``__mul__`` and their reflections: the two common operand kinds go
    straight to the tape (these run once per op in scalar-heavy code), the rest to ``general``."""
    def operator(input, other):
        if isinstance(other, Tensor):
            return record_binary(tensor_op, input, other, numpy_fn)
        if (type(other) is float or type(other) is int) and input._dtype.is_floating_point:
            return record_unary(scalar_op, input, float(other))
        if not is_operand(other):
            return NotImplemented   # Python then tries other's operator, and raises TypeError
        return general(input, other)
    return operator


def _number_first(input, other):
    """torch.add(2, t) and the like: torch takes a Python number as the first operand."""
    return input if isinstance(input, Tensor) else as_tensor_operand(
        input, other if isinstance(other, Tensor) else None)


@export(method=True)
def add(input, other, alpha=1):
    input = _number_first(input, other)
    if isinstance(other, Tensor):
        if alpha != 1:
            other = mul(other, alpha)
        return record_binary(ADD, input, other, np.add)
    if _is_scalar(other):
        return _scalar_op(_u.ADD_SCALAR, input, other * alpha, np.add)
    return add(input, as_tensor_operand(other, input), alpha)


@export(method=True, dunders=("__sub__",))
def sub(input, other, alpha=1):
    input = _number_first(input, other)
    if isinstance(other, Tensor):
        if alpha != 1:
            other = mul(other, alpha)
        return record_binary(SUB, input, other, np.subtract)
    if _is_scalar(other):
        if _int_result(input, other):
            return _concrete(np.asarray(input._value() - _int_scalar("sub", input, other * alpha)))
        return record_unary(SUB_SCALAR, input, -float(other) * alpha)
    return sub(input, as_tensor_operand(other, input), alpha)


export(sub, name="subtract", method=True)


@export(function=False, dunders=("__rsub__",))
def rsub(input, other, alpha=1):
    if _is_scalar(other):
        if _int_result(input, other):
            return _concrete(np.asarray(_int_scalar("rsub", input, other) - input._value()))
        if alpha != 1:
            input = mul(input, alpha)
        return record_unary(_u.RSUB_SCALAR, input, float(other))
    return sub(as_tensor_operand(other, input), input, alpha)


@export(method=True)
def mul(input, other):
    input = _number_first(input, other)
    if isinstance(other, Tensor):
        return record_binary(MUL, input, other, np.multiply)
    if _is_scalar(other):
        return _scalar_op(_u.MUL_SCALAR, input, other, np.multiply)
    return mul(input, as_tensor_operand(other, input))


export(mul, name="multiply", method=True)
export(_commutative_operator(ADD, _u.ADD_SCALAR, np.add, add), function=False, dunders=("__add__", "__radd__"))
export(_commutative_operator(MUL, _u.MUL_SCALAR, np.multiply, mul), function=False,
       dunders=("__mul__", "__rmul__"))


def _true_div_np(x, y):
    with np.errstate(divide="ignore", invalid="ignore"):   # inf and nan, silently, as torch
        return np.true_divide(x, y).astype(_dtypes.get_default_dtype().np)


def _integer_division(name, fn, x, y, dt):
    """``fn(x, y)`` on integer arrays, which PyTorch refuses for a zero divisor (NumPy
    would give 0 and warn)."""
    if np.any(y == 0):
        raise RuntimeError(f"ZeroDivisionError: {name}: integer division by zero (dividend of shape "
                           f"{list(np.shape(x))}, divisor of shape {list(np.shape(y))} with a zero)")
    return np.asarray(fn(x, y)).astype(dt.np, copy=False)


def _trunc_divide(x, y):
    """Integer division rounded toward zero, exactly (through floats it would round above 2**53)."""
    q = np.floor_divide(x, y)
    return q + ((q < 0) & (q * y != x))


_ROUNDED = {"floor": (np.floor_divide, np.floor_divide),
            "trunc": (_trunc_divide, lambda x, y: np.trunc(np.true_divide(x, y)))}


@export(method=True, dunders=("__truediv__",))
def div(input, other, rounding_mode=None):
    input = _number_first(input, other)
    if rounding_mode is not None:
        if rounding_mode not in _ROUNDED:
            raise RuntimeError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found "
                               f"{rounding_mode!r}")
        if input._rg or (isinstance(other, Tensor) and other._rg):
            raise RuntimeError(f"div: rounding_mode={rounding_mode!r} is not differentiable in tapejit")
        divisor = as_tensor_operand(other, input)
        dt = result_dtype(input, divisor)
        integer, floating = _ROUNDED[rounding_mode]
        x, y = input._value(), divisor._value()
        if not dt.is_floating_point:
            name = "floor_divide" if rounding_mode == "floor" else "div(rounding_mode='trunc')"
            return _concrete(_integer_division(name, integer, x, y, dt))
        with np.errstate(divide="ignore", invalid="ignore"):   # inf and nan, silently, as torch
            return _concrete(np.asarray(floating(x.astype(dt.np, copy=False), y.astype(dt.np, copy=False))))
    if isinstance(other, Tensor):
        if not input._dtype.is_floating_point and not other._dtype.is_floating_point:
            return _concrete(_true_div_np(input._value(), other._value()))
        return record_binary(DIV, input, other)
    if _is_scalar(other):
        return record_unary(_u.DIV_SCALAR, input, float(other))
    return div(input, as_tensor_operand(other, input))


export(div, name="divide", method=True)
export(div, name="true_divide", method=True)


@export(function=False, dunders=("__rtruediv__",))
def rdiv(input, other):
    if _is_scalar(other):
        if input._dtype.narrow:   # torch's ``reciprocal() * other``: the reciprocal rounded first
            with np.errstate(divide="ignore"):
                inverse = np.float32(1) / input._value().astype(np.float32)
            return record_unary(_u.MUL_SCALAR, _concrete(_dtypes.narrow_values(inverse, input._dtype)), float(other))
        return record_unary(_u.RDIV_SCALAR, input, float(other))
    return div(as_tensor_operand(other, input), input)


@export(method=True, dunders=("__floordiv__",))
def floor_divide(input, other):
    return div(input, other, rounding_mode="floor")


@export(function=False, dunders=("__rfloordiv__",))
def rfloordiv(input, other):
    return div(as_tensor_operand(other, input), input, rounding_mode="floor")


def _modulo(op, scalar_op, name, numpy_fn, input, other):
    if not isinstance(input, Tensor):
        input = as_tensor_operand(input, other)
    divisor = as_tensor_operand(other, input)
    dt = result_dtype(input, divisor)
    if not dt.is_floating_point:
        return _concrete(_integer_division(name, numpy_fn, input._value(), divisor._value(), dt))
    return record_binary(op if isinstance(other, Tensor) else scalar_op, input, divisor)


@export(method=True, dunders=("__mod__",))
def remainder(input, other):
    """``input - floor(input / other) * other``, with the sign of ``other``; differentiable
    in both (the quotient's gradient is zero almost everywhere)."""
    return _modulo(REMAINDER, REMAINDER_SCALAR, "remainder", np.remainder, input, other)


@export(function=False, dunders=("__rmod__",))
def rremainder(input, other):
    return remainder(as_tensor_operand(other, input), input)


@export(method=True)
def fmod(input, other):
    """``input - trunc(input / other) * other``, with the sign of ``input``."""
    return _modulo(FMOD, FMOD_SCALAR, "fmod", np.fmod, input, other)


@export(method=True, dunders=("__pow__",))
def pow(input, exponent):
    if not isinstance(input, Tensor):
        return rpow(exponent, input)
    if isinstance(exponent, Tensor):
        return record_binary(POW, input, exponent, np.power)
    if _is_scalar(exponent):
        if _int_result(input, exponent):
            return _concrete(np.asarray(input._value() ** exponent))
        if exponent == 2:
            return record_unary(_u.SQUARE, input)
        return record_unary(_u.POW_SCALAR, input, float(exponent))
    return pow(input, as_tensor_operand(exponent, input))


@export(method=True)
def square(input):
    return pow(input, 2)


@export(function=False, dunders=("__rpow__",))
def rpow(input, other):
    if _is_scalar(other):
        return record_unary(_u.RPOW_SCALAR, input, float(other))
    return pow(as_tensor_operand(other, input), input)


@export(method=True)
def maximum(input, other):
    return record_binary(MAXIMUM, input, as_tensor_operand(other, input), np.maximum)


@export(method=True)
def minimum(input, other):
    return record_binary(MINIMUM, input, as_tensor_operand(other, input), np.minimum)


# ---- comparisons and logic: values only, never gradients ---------------------------------

def _narrow_operands(input, other, x, y):
    """A comparison's operands in the narrow float dtype torch compares them in: a number
    or a 0-d float32 tensor against a bfloat16 tensor is rounded to bfloat16 first (NumPy
    does so for float16 arrays and Python numbers, not for bfloat16's float32 storage)."""
    if isinstance(other, Tensor):
        dt = result_dtype(input, other)
    elif _is_scalar(other) and not isinstance(other, bool):
        dt = input._dtype
    else:
        return x, y
    if not dt.narrow:
        return x, y
    return _dtypes.narrow_values(x, dt), _dtypes.narrow_values(y, dt)


def _compare(name, fn):
    def compare(input, other):
        x = input._value()
        y = other._value() if isinstance(other, Tensor) else other
        if input._dtype.narrow or (isinstance(other, Tensor) and other._dtype.narrow):
            x, y = _narrow_operands(input, other, x, y)
        return _concrete(np.asarray(fn(x, y)))
    compare.__name__ = compare.__qualname__ = name
    return compare


for _name, _fn, _dunder in [("eq", np.equal, "__eq__"), ("ne", np.not_equal, "__ne__"),
                            ("lt", np.less, "__lt__"), ("le", np.less_equal, "__le__"),
                            ("gt", np.greater, "__gt__"), ("ge", np.greater_equal, "__ge__")]:
    export(_compare(_name, _fn), method=True, dunders=(_dunder,))
export(_compare("greater", np.greater), method=True)
export(_compare("less", np.less), method=True)
export(_compare("logical_and", np.logical_and), method=True)
export(_compare("logical_or", np.logical_or), method=True)
export(_compare("logical_xor", np.logical_xor), method=True)
export(_compare("bitwise_and", np.bitwise_and), function=False, dunders=("__and__", "__rand__"))
export(_compare("bitwise_or", np.bitwise_or), function=False, dunders=("__or__", "__ror__"))
export(_compare("bitwise_xor", np.bitwise_xor), function=False, dunders=("__xor__", "__rxor__"))


@export(method=True)
def logical_not(input):
    return _concrete(np.logical_not(input._value()))


@export(function=False, dunders=("__invert__",))
def invert(input):
    v = input._value()
    return _concrete(np.logical_not(v) if v.dtype == np.bool_ else np.invert(v))


@export(method=True)
def isnan(input):
    return _concrete(np.isnan(input._value()))


@export(method=True)
def isfinite(input):
    return _concrete(np.isfinite(input._value()))


@export(method=True)
def isinf(input):
    return _concrete(np.isinf(input._value()))


@export(method=True)
def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    return bool(np.allclose(input._value(), np.asarray(other._value() if isinstance(other, Tensor) else other),
                            rtol=rtol, atol=atol, equal_nan=equal_nan))


@export(method=True)
def equal(input, other):
    return input._shape == other._shape and bool(np.array_equal(input._value(), other._value()))


# ---- in-place arithmetic ----------------------------------------------------------------

export(in_place("add_", add), method=True, function=False, dunders=("__iadd__",))
export(in_place("sub_", sub), method=True, function=False, dunders=("__isub__",))
export(in_place("mul_", mul), method=True, function=False, dunders=("__imul__",))
export(in_place("div_", div), method=True, function=False, dunders=("__itruediv__",))
export(in_place("pow_", pow), method=True, function=False, dunders=("__ipow__",))
export(in_place("square_", square), method=True, function=False)
for _fn in (fmod, remainder, floor_divide):
    export(in_place(_fn.__name__ + "_", _fn), method=True, function=False)


@export(method=True)
def addcmul(input, tensor1, tensor2, *, value=1):
    """``input + value * tensor1 * tensor2``, rounded in torch's order (node AddcmulBackward0)."""
    product = mul(mul(tensor1, value) if value != 1 else tensor1, tensor2)
    return name_composite(add(input, product), "AddcmulBackward0", input, tensor1, tensor2)


@export(method=True)
def addcdiv(input, tensor1, tensor2, *, value=1):
    """``input + value * tensor1 / tensor2``, rounded in torch's order (node AddcdivBackward0)."""
    if all(isinstance(t, Tensor) and not t._dtype.is_floating_point for t in (tensor1, tensor2)):
        raise RuntimeError("Integer division with addcdiv is no longer supported, and in a future  release addcdiv "
                           "will perform a true division of tensor1 and tensor2. The historic addcdiv behavior can "
                           "be implemented as (input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for "
                           "integer inputs and as (input + value * tensor1 / tensor2) for float inputs. The future "
                           "addcdiv behavior is just the latter implementation: (input + value * tensor1 / tensor2), "
                           "for all dtypes.")
    quotient = div(mul(tensor1, value) if value != 1 else tensor1, tensor2)
    return name_composite(add(input, quotient), "AddcdivBackward0", input, tensor1, tensor2)


export(in_place("addcmul_", addcmul), method=True, function=False)
export(in_place("addcdiv_", addcdiv), method=True, function=False)


# torch's in-place forms of the aliases (Tensor.subtract_, ...): no function forms, as torch
for _alias, _fn in (("subtract", sub), ("multiply", mul), ("divide", div), ("true_divide", div)):
    export(in_place(_alias + "_", _fn), method=True, function=False)


@export(method=True, function=False)
def zero_(input):
    return fill_(input, 0.0)


@export(method=True, function=False)
def fill_(input, value):
    from tapejit.inplace import apply_inplace, check_leaf, note_write, shares_root_memory
    check_leaf(input, "fill_")
    if isinstance(value, Tensor):
        value = value.item()
    if input._tape is None and (getattr(input, "_view", None) is None or shares_root_memory(input)):
        note_write(input)   # refused while tracing for a tensor from outside the function
        input._data.fill(value)
        return input
    return apply_inplace(input, lambda: record_unary(_u.FILL, input, float(value)), "fill_")


def _partly_overlapping(a, b):
    """torch's ``get_overlap_status(a, b)`` is ``Partial`` (copy_ refuses then): ``a`` and
    ``b`` share elements of one storage, both dense, and are not the same range with the
    same strides.  An exact alias is fine, and so is a tensor that is not dense (torch's
    "too hard": no check)."""
    from tapejit.inplace import _root, root_positions
    from tapejit.ops.views import torch_strides
    if not a._numel or not b._numel:
        return False
    if _root(a) is not _root(b):
        return (a._tape is None and b._tape is None and _root(a)._tape is None and _root(b)._tape is None
                and a._data is not b._data and np.may_share_memory(a._data, b._data)
                and np.shares_memory(a._data, b._data))
    begins = []
    for p in (root_positions(a)[1], root_positions(b)[1]):
        first = int(p.min())
        if int(p.max()) - first + 1 != p.size or np.unique(p).size != p.size:
            return False
        begins.append(first)
    if begins[0] == begins[1] and a._numel == b._numel:
        return torch_strides(a) != torch_strides(b)
    return begins[0] < begins[1] + b._numel and begins[1] < begins[0] + a._numel


@export(method=True, function=False)
def copy_(input, src, non_blocking=False):
    from tapejit.inplace import apply_inplace, check_leaf
    from tapejit.recording import expand as _expand_to
    check_leaf(input, "copy_")
    src = as_tensor_operand(src, input)
    if src is not input and _partly_overlapping(input, src):
        raise RuntimeError(
            "copy_: unsupported operation: some elements of the input tensor and the written-to tensor "
            "refer to a single memory location. Please clone() the tensor before performing the operation.")

    def copied():
        # A recorded tensor stays in its graph (its old value gets zero gradient), as in torch,
        # and one that takes a value requiring grad joins it.
        if input._dtype.is_floating_point and (input._tape is not None or (src._rg and _state.grad)):
            return record_binary(COPY, input, src)
        return _expand_to(src, input._shape) if src._shape != input._shape else src
    return apply_inplace(input, copied, "copy_")


# ---- derivative formulas (create_graph) ----------------------------------------------------
# One per op, applied by create_graph passes (tapejit/autograd/higher.py); plain Python,
# not compiled: see tapejit/ops/_formulas.py.  Kept last so define_ edits merge cleanly.

from tapejit.api import front_ends as tj  # noqa: E402  (tj's functions, read at call time)
from tapejit.ops import _formulas as _f  # noqa: E402
from tapejit.ops._formulas import derivative  # noqa: E402


@derivative(ADD)
def _d_add(c):
    return _f.pair(c, c.g, c.g)


derivative(SUB_SCALAR)(_u._d_identity)   # x - c runs add_scalar's kernels


@derivative(SUB)
def _d_sub(c):
    return _f.pair(c, c.g, -c.g)


@derivative(MUL)
def _d_mul(c):
    x, y = _f.binary_operands(c)
    return _f.pair(c, c.g * y if c.wants_a else None, c.g * x if c.wants_b else None)


@derivative(COPY)
def _d_copy(c):
    return _f.pair(c, c.g * 0.0 if c.wants_a else None, c.g)


@derivative(DIV)
def _d_div(c):
    x, y = _f.binary_operands(c)
    gx = c.g / y
    return _f.pair(c, gx, -gx * x / y if c.wants_b else None)


@derivative(POW)
def _d_pow(c):
    x, y = _f.binary_operands(c)
    xv, yv = np.broadcast_arrays(_f.value(x), _f.value(y))
    gx = gy = None
    if c.wants_a:
        gx = _f.where(yv == 0.0, 0.0, c.g * y * x ** (y - 1.0))
    if c.wants_b:
        with np.errstate(divide="ignore"):
            gy = _f.where((xv == 0.0) & (yv >= 0.0), 0.0 * c.g, c.g * c.out() * tj.log(x))
    return _f.pair(c, gx, gy)


def _d_extreme(c, larger):
    """maximum/minimum: the larger (smaller) operand gets g, ties split it (PyTorch's)."""
    x, y = _f.binary_operands(c)
    xv, yv = np.broadcast_arrays(_f.value(x), _f.value(y))
    x_wins = xv > yv if larger else xv < yv
    y_wins = yv > xv if larger else yv < xv
    tie = xv == yv
    gx = _f.where(x_wins, c.g, _f.where(tie, c.g * 0.5, 0.0)) if c.wants_a else None
    gy = _f.where(y_wins, c.g, _f.where(tie, c.g * 0.5, 0.0)) if c.wants_b else None
    return _f.pair(c, gx, gy)


@derivative(MAXIMUM)
def _d_maximum(c):
    return _d_extreme(c, True)


@derivative(MINIMUM)
def _d_minimum(c):
    return _d_extreme(c, False)


@derivative(CLAMP_MIN_TENSOR)
def _d_clamp_min_tensor(c):
    x, y = _f.binary_operands(c)
    keep = np.broadcast_arrays(_f.value(x), _f.value(y))
    keep = keep[0] >= keep[1]
    return _f.pair(c, _f.where(keep, c.g, 0.0), _f.where(keep, 0.0, c.g))


@derivative(CLAMP_MAX_TENSOR)
def _d_clamp_max_tensor(c):
    x, y = _f.binary_operands(c)
    keep = np.broadcast_arrays(_f.value(x), _f.value(y))
    keep = keep[0] <= keep[1]
    return _f.pair(c, _f.where(keep, c.g, 0.0), _f.where(keep, 0.0, c.g))


@derivative(REMAINDER, REMAINDER_SCALAR)
def _d_remainder(c):
    x, y = _f.binary_operands(c)
    with np.errstate(all="ignore"):
        quotient = np.floor_divide(*np.broadcast_arrays(_f.value(x), _f.value(y)))
    return _f.pair(c, c.g, -c.g * _concrete(quotient) if c.wants_b else None)


@derivative(FMOD, FMOD_SCALAR)
def _d_fmod(c):
    x, y = _f.binary_operands(c)
    with np.errstate(all="ignore"):
        quotient = np.trunc(np.divide(*np.broadcast_arrays(_f.value(x), _f.value(y))))
    return _f.pair(c, c.g, -c.g * _concrete(quotient) if c.wants_b else None)


@derivative(ADD_N)
def _d_add_n(c):
    operands = (c.int(c.p + 2 + j) for j in range(c.int(c.p)))
    return [(enc, c.g) for enc in operands if c.wants(enc)]


# lerp is recorded as its last step, an add (``same_kernels`` of ADD)
