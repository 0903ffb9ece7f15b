"""Special functions, inverse trigonometric and hyperbolic functions, rounding, and the
elementwise two-operand functions of ``torch`` and ``torch.special`` (``atan2``, ``hypot``,
``logaddexp``, ``xlogy``, ``fmax``, ...).

Values and gradients follow torch, with its rules at poles and outside domains
(``lgamma`` is inf at the non-positive integers, ``digamma`` NaN there and -inf/inf at
+0/-0, ``acosh(0.5)`` and ``erfinv(1.5)`` NaN, ``atanh(1)`` inf).  ``digamma`` is torch's
(Cephes) algorithm plus a Taylor series around its two first roots, where the sum of the
recurrence cancels, and the polygamma functions (``trigamma = polygamma(1, x)``, every
``polygamma`` of order 1 and more) come from the Hurwitz zeta function
``psi^(n)(x) = (-1)^(n+1) n! zeta(n + 1, x)`` (Cephes' Euler-Maclaurin sum, which is also
torch's for n >= 2): both are accurate to a few ulp against SciPy over the real line.
torch's own ``polygamma(1, x)`` (digamma's gradient) is a shorter asymptotic series with a
relative error up to 5e-10, so the gradient tests' samples of ``digamma`` and
``polygamma(1, .)`` lie where torch's series has converged (x >= 5);
tests/test_special.py checks the whole range against SciPy.  ``erfinv`` refines torch's
initial rational approximation by Newton steps, on ``erfc`` in the tails so that values
near +-1 keep full precision.

The gamma functions are whole-record kernels around compiled scalar helpers
(``digamma_scalar``, ``polygamma_scalar``); the other ops are rules, inlined into the sweeps
(``tapejit/_inline.py``).  All compute in float64 and store in the record's dtype.  The
special functions (with tapejit/ops/linalg_small.py) form the "special" op group, the
elementary functions and rounding the "elementary" group: a program compiles each only
when its tape uses one of its ops (cold, each adds about as much as the "math" group).
"""
import inspect
import math

import numpy as np

from tapejit._jit import helper, kernel, rule
from tapejit.ops._kernel_helpers import acc
from tapejit.registry import define_binary, define_kernel, define_unary, names, same_kernels
from tapejit.samples import anywhere, away_from_zero, binary_samples, cases, positive, unary_samples


def _special(name, node, *args, **kwargs):
    return define_unary(name, node, *args, group="special", **kwargs)


def _elementary(name, node, *args, **kwargs):
    """Elementary functions and rounding: a group apart from the special functions, whose
    long inlined sums (digamma, zeta, erfinv) triple the group's compile time."""
    return define_unary(name, node, *args, group="elementary", **kwargs)


# ---- input domains of the samples ------------------------------------------------------------

def inside_unit(rng, shape):
    return rng.uniform(-0.9, 0.9, size=shape)


def above_one(rng, shape):
    return rng.uniform(1.2, 3.0, size=shape)


def probability(rng, shape):
    return rng.uniform(0.1, 0.9, size=shape)


def non_integer(rng, shape):
    """Values in (-3.5, 3.5) at least 0.15 from every integer (poles of the gamma functions)."""
    return rng.integers(-4, 4, size=shape) + rng.uniform(0.15, 0.85, size=shape)


def between_steps(rng, shape):
    """Values whose fractional part is in [0.1, 0.4] or [0.6, 0.9]: at least 0.1 from the
    jumps of floor, ceil, round and trunc."""
    frac = rng.uniform(0.1, 0.4, size=shape) + rng.choice([0.0, 0.5], size=shape)
    return rng.integers(-3, 3, size=shape) + frac


def converged(rng, shape):
    """Where torch's trigamma series has converged to 1e-12 (see the module docstring)."""
    return rng.uniform(5.0, 12.0, size=shape)


# ---- gamma functions --------------------------------------------------------------------------
# Whole-record kernels around compiled scalar helpers, not inlined rules: the digamma and zeta
# sums are long, and inlined into each rule that needs them (three sweeps each) they made
# the group's compile several times slower.  The helpers are compiled once, into the kernels.


@helper
def digamma_scalar(x):
    s = x * 1.0
    if s == 0.0:
        return math.copysign(np.inf, -s)   # torch: -inf at +0, inf at -0
    # Taylor series around the positive root and the first negative root (coefficients
    # psi^(n)(x0) / n!, from mpmath), where the recurrence below cancels to a few ulp
    # absolute but loses all relative precision.
    d = s - 1.4616321449683622
    if abs(d) < 0.2:
        p = 0.0
        for c in (0.00011063372768747428, -0.00016170622091974827, 0.00023635601564027086,
                  -0.0003454680251063082, 0.0005049532658346027, -0.000738070938996006,
                  0.0010788252019162978, -0.001576936771430199, 0.00230512632673493,
                  -0.0033698016554393312, 0.004926781395729858, -0.007204534386356875,
                  0.010538791616612184, -0.01542476590494897, 0.022597648232218118,
                  -0.033161126474847376, 0.04880428816414313, -0.07219956125645474,
                  0.10782405069126241, -0.16394270544240658, 0.2584997609556511,
                  -0.4427631689835922, 0.9676722454476212):
            p = p * d + c
        return p * d - 9.241265521729427e-17
    d = s + 0.5040830082644554
    if abs(d) < 0.05:
        p = 0.0
        for c in (530280.3912420176, -36529.945969485576, 132262.95480834588, -8051.818155363481,
                  32997.785655255044, -1743.3646088673593, 8234.667099203069, -368.5783503832184,
                  2055.5357119463315, -75.37700066344615, 513.2704629562861, -14.706721735530332,
                  128.27342343090902, -2.7610116487908227, 32.258572064915505, -0.8093454625306499,
                  8.939798558792134):
            p = p * d + c
        return p * d + 7.289763902976895e-17
    r = 0.0
    if s < 0.0:
        if s == np.floor(s):
            return np.nan
        r = -np.pi / np.tan(np.pi * (s - np.trunc(s)))   # reflection: psi(1 - x) - pi cot(pi x)
        s = 1.0 - s
    while s < 10.0:
        r -= 1.0 / s
        s += 1.0
    if s == 10.0:
        return r + 2.25175258906672110764
    z = 1.0 / (s * s)
    y = 0.0
    if s < 1.0e17:
        y = z * (((((((8.33333333333333333333E-2 * z - 2.10927960927960927961E-2) * z
                      + 7.57575757575757575758E-3) * z - 4.16666666666666666667E-3) * z
                    + 3.96825396825396825397E-3) * z - 8.33333333333333333333E-3) * z
                  + 8.33333333333333333333E-2))
    return r + np.log(s) - 0.5 / s - y


_ZETA_COEF = (12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9, 7.47242496e10,
              -2.950130727918164224e12, 1.1646782814350067249e14, -4.5979787224074726105e15,
              1.8152105401943546773e17, -7.1661652561756670113e18)


@helper
def polygamma_scalar(n, x):
    """psi^(n)(x) for n >= 1: (-1)^(n+1) n! zeta(n + 1, x), the Hurwitz zeta function by
    Cephes' Euler-Maclaurin sum (torch's ``zeta``)."""
    s = n + 1.0
    q = x * 1.0
    sign = 1.0 if n % 2.0 == 1.0 else -1.0
    if q == np.inf:
        return 0.0
    if q <= 0.0 and q == np.floor(q):
        return sign * np.inf                   # a pole (or -inf): (-1)^(n+1) inf, as torch
    acc_ = q ** -s
    a = q
    b = 0.0
    i = 0
    while i < 9 or a <= 9.0:
        i += 1
        a += 1.0
        b = a ** -s
        acc_ += b
        if abs(b / acc_) < 1.11022302462515654042E-16:
            return sign * math.gamma(n + 1.0) * acc_
    w = a
    acc_ += b * w / (s - 1.0)
    acc_ -= 0.5 * b
    fa = 1.0
    k = 0.0
    for j in range(12):
        fa *= s + k
        b /= w
        t = fa * b / _ZETA_COEF[j]
        acc_ += t
        if abs(t / acc_) < 1.11022302462515654042E-16:
            break
        k += 1.0
        fa *= s + k
        b /= w
        k += 1.0
    return sign * math.gamma(n + 1.0) * acc_


# ints[p] = element count; floats[q] = the order n (polygamma) or -1 (lgamma), -2 (digamma)


@kernel
def gamma_family_forward(v, out, a, b, p, q, ints, floats):
    order = floats[q]
    for i in range(ints[p]):
        x = v[a + i]
        if order == -1.0:
            v[out + i] = math.lgamma(x)
        elif order == -2.0:
            v[out + i] = digamma_scalar(x)
        else:
            v[out + i] = polygamma_scalar(order, x)


@kernel
def gamma_family_backward(v, g, flags, out, a, b, ma, mb, p, q, ints, floats):
    if ma == 0:
        return
    order = floats[q]
    for i in range(ints[p]):
        x = v[a + i]
        # lgamma' = digamma, digamma' = polygamma(1, .), polygamma(n, .)' = polygamma(n + 1, .)
        if order == -1.0:
            d = digamma_scalar(x)
        elif order == -2.0:
            d = polygamma_scalar(1.0, x)
        else:
            d = polygamma_scalar(order + 1.0, x)
        acc(g, a + i, g[out + i] * d, ma)


def _gamma_family(name, node, samples, names=None):
    return define_kernel(name, node, gamma_family_forward, gamma_family_backward, operands=1, saved="a",
                         group="special", samples=samples, names=names)


LGAMMA = _gamma_family("lgamma", "LgammaBackward0", unary_samples("lgamma", non_integer),
                       names=names("lgamma", in_place="method", special=("gammaln",), written=True))
DIGAMMA = _gamma_family("digamma", "DigammaBackward0",
                        lambda rng: (unary_samples("digamma", converged)(rng)
                                     + unary_samples("digamma_psi", converged,
                                                     lambda tj, x: tj.special.psi(x), shapes=[(3,)])(rng)),
                        names=names("digamma", in_place="method", special=("digamma", "psi"), written=True))
POLYGAMMA = _gamma_family("polygamma", "PolygammaBackward0",
                          cases(("polygamma0", lambda tj, x: tj.polygamma(0, x), [(4,)], converged),
                                ("polygamma1", lambda tj, x: tj.polygamma(1, x), [(4,)], converged),
                                ("polygamma2", lambda tj, x: tj.polygamma(2, x), [(2, 3)], positive),
                                ("polygamma3_method", lambda tj, x: x.polygamma(3), [(5,)], non_integer)),
                                names=names("polygamma", in_place="method", written=True))


# ---- error function ---------------------------------------------------------------------------


@rule
def erfc_value(x, c0, c1):
    return math.erfc(x)


@rule
def erfc_grad(x, y, g, c0, c1):
    return -1.1283791670955126 * np.exp(-x * x) * g


ERFC = _special("erfc", "ErfcBackward0", erfc_value, erfc_grad, samples=unary_samples("erfc", anywhere),
                names=names("erfc", in_place="function", special=("erfc",)))


@rule
def erfinv_value(x, c0, c1):
    z = x * 1.0
    a = abs(z)
    if a > 1.0:
        return np.nan
    if a == 1.0:
        return math.copysign(np.inf, z)
    # torch's initial rational approximation ...
    if a <= 0.7:
        u = z * z
        r = z * (((-0.140543331 * u + 0.914624893) * u - 1.645349621) * u + 0.886226899) / (
            (((0.012229801 * u - 0.329097515) * u + 1.442710462) * u - 2.118377725) * u + 1.0)
    else:
        u = np.sqrt(-np.log((1.0 - a) / 2.0))
        r = math.copysign(((1.641345311 * u + 3.429567803) * u - 1.624906493) * u - 1.970840454, z) / (
            (1.637067800 * u + 3.543889200) * u + 1.0)
    # ... then Newton steps: on erf near 0; in the tails on log(erfc(t)) = log(1 - |x|), which
    # is exact there (1 - |x| is) and nearly linear in t, where erf(t) - x would have lost the
    # digits that matter
    if a <= 0.5:
        r -= (math.erf(r) - z) / (1.1283791670955126 * np.exp(-r * r))
        r -= (math.erf(r) - z) / (1.1283791670955126 * np.exp(-r * r))
        return r
    t = abs(r)
    c = 1.0 - a
    for k in range(3):
        e = math.erfc(t)
        t += (np.log(e) - np.log(c)) * e / (1.1283791670955126 * np.exp(-t * t))
    return math.copysign(t, z)


@rule
def erfinv_grad(x, y, g, c0, c1):
    return 0.886226925452758 * np.exp(y * y) * g


ERFINV = _special("erfinv", "ErfinvBackward0", erfinv_value, erfinv_grad,
                  samples=unary_samples("erfinv", inside_unit),
                  names=names("erfinv", in_place="method", special=("erfinv",)))


# ---- inverse trigonometric and hyperbolic functions ------------------------------------------


@rule
def asin_value(x, c0, c1):
    return np.arcsin(x)


@rule
def asin_grad(x, y, g, c0, c1):
    return g / np.sqrt(1.0 - x * x)


@rule
def acos_value(x, c0, c1):
    return np.arccos(x)


@rule
def acos_grad(x, y, g, c0, c1):
    return -g / np.sqrt(1.0 - x * x)


@rule
def atan_value(x, c0, c1):
    return np.arctan(x)


@rule
def atan_grad(x, y, g, c0, c1):
    return g / (x * x + 1.0)


@rule
def asinh_value(x, c0, c1):
    return np.arcsinh(x)


@rule
def asinh_grad(x, y, g, c0, c1):
    return g / np.sqrt(x * x + 1.0)


@rule
def acosh_value(x, c0, c1):
    return np.arccosh(x)


@rule
def acosh_grad(x, y, g, c0, c1):
    return g / np.sqrt(x * x - 1.0)


@rule
def atanh_value(x, c0, c1):
    return np.arctanh(x)


@rule
def atanh_grad(x, y, g, c0, c1):
    return g / (1.0 - x * x)


@rule
def sinh_value(x, c0, c1):
    return np.sinh(x)


@rule
def sinh_grad(x, y, g, c0, c1):
    return g * np.cosh(x)


@rule
def cosh_value(x, c0, c1):
    return np.cosh(x)


@rule
def cosh_grad(x, y, g, c0, c1):
    return g * np.sinh(x)


ASIN = _elementary("asin", "AsinBackward0", asin_value, asin_grad, samples=unary_samples("asin", inside_unit),
                   names=names("asin", "arcsin", in_place="function", numpy=("arcsin",)))
ACOS = _elementary("acos", "AcosBackward0", acos_value, acos_grad, samples=unary_samples("acos", inside_unit),
                   names=names("acos", "arccos", in_place="function", numpy=("arccos",)))
ATAN = _elementary("atan", "AtanBackward0", atan_value, atan_grad, samples=unary_samples("atan", anywhere),
                   names=names("atan", "arctan", in_place="function", numpy=("arctan",)))
ASINH = _elementary("asinh", "AsinhBackward0", asinh_value, asinh_grad, samples=unary_samples("asinh", anywhere),
                    names=names("asinh", "arcsinh", in_place="function", numpy=("arcsinh",)))
ACOSH = _elementary("acosh", "AcoshBackward0", acosh_value, acosh_grad, samples=unary_samples("acosh", above_one),
                    names=names("acosh", "arccosh", in_place="function", numpy=("arccosh",)))
ATANH = _elementary("atanh", "AtanhBackward0", atanh_value, atanh_grad, samples=unary_samples("atanh", inside_unit),
                    names=names("atanh", "arctanh", in_place="function", numpy=("arctanh",)))
SINH = _elementary("sinh", "SinhBackward0", sinh_value, sinh_grad, samples=unary_samples("sinh", anywhere),
                   names=names("sinh", in_place="function", numpy=("sinh",)))
COSH = _elementary("cosh", "CoshBackward0", cosh_value, cosh_grad, samples=unary_samples("cosh", anywhere),
                   names=names("cosh", in_place="function", numpy=("cosh",)))


# ---- logarithms and exponentials in base 2 and 10 --------------------------------------------


@rule
def log2_value(x, c0, c1):
    return np.log2(x)


@rule
def log2_grad(x, y, g, c0, c1):
    return g / (x * 0.6931471805599453)


@rule
def log10_value(x, c0, c1):
    return np.log10(x)


@rule
def log10_grad(x, y, g, c0, c1):
    return g / (x * 2.302585092994046)


@rule
def exp2_value(x, c0, c1):
    return np.exp2(x)


@rule
def exp2_grad(x, y, g, c0, c1):
    return g * y * 0.6931471805599453


LOG2 = _elementary("log2", "Log2Backward0", log2_value, log2_grad, samples=unary_samples("log2", positive),
                   names=names("log2", in_place="function"))
LOG10 = _elementary("log10", "Log10Backward0", log10_value, log10_grad, samples=unary_samples("log10", positive),
                    names=names("log10", in_place="function"))
EXP2 = _elementary("exp2", "Exp2Backward0", exp2_value, exp2_grad, saved="o", samples=unary_samples("exp2", anywhere),
                   names=names("exp2", in_place="function", special=("exp2",)))


@rule
def reciprocal_value(x, c0, c1):
    return 1.0 / x


@rule
def reciprocal_grad(x, y, g, c0, c1):
    return -g * y * y


RECIPROCAL = _elementary("reciprocal", "ReciprocalBackward0", reciprocal_value, reciprocal_grad, saved="o",
                      samples=unary_samples("reciprocal", away_from_zero),
                      names=names("reciprocal", in_place="function"))


# ---- rounding: piecewise constant, an exact zero gradient as torch's zeros_like --------------


@rule
def floor_value(x, c0, c1):
    return np.floor(x)


@rule
def ceil_value(x, c0, c1):
    return np.ceil(x)


@rule
def trunc_value(x, c0, c1):
    return np.trunc(x)


@rule
def round_value(x, c0, c1):
    return np.rint(x)   # half to even, as torch's nearbyint


@rule
def round_decimals_value(x, c0, c1):
    # torch's: c0 = 10 ** |decimals|, c1 = 1 for negative decimals
    if c1 == 1.0:
        return np.rint(x / c0) * c0
    return np.rint(x * c0) / c0


@rule
def zero_grad(x, y, g, c0, c1):
    return 0.0


@rule
def frac_value(x, c0, c1):
    return x - np.trunc(x)


@rule
def frac_grad(x, y, g, c0, c1):
    return g


FLOOR = _elementary("floor", "FloorBackward0", floor_value, zero_grad, saves=False,
                 samples=unary_samples("floor", between_steps),
                 names=names("floor", in_place="function", integer=np.copy))
CEIL = _elementary("ceil", "CeilBackward0", ceil_value, zero_grad, saves=False,
                samples=unary_samples("ceil", between_steps),
                names=names("ceil", in_place="function", integer=np.copy))
TRUNC = _elementary("trunc", "TruncBackward0", trunc_value, zero_grad, saves=False,
                 samples=lambda rng: (unary_samples("trunc", between_steps)(rng)
                                      + unary_samples("fix", between_steps, lambda tj, x: x.fix(), [(4,)])(rng)),
                 names=names("trunc", "fix", in_place="function", integer=np.copy))
ROUND = _elementary("round", "RoundBackward0", round_value, zero_grad, saves=False,
                 samples=unary_samples("round", between_steps),
                 names=names("round", in_place="function", written=True))
ROUND_DECIMALS = _elementary("round_decimals", "RoundBackward1", round_decimals_value, zero_grad, nconst=2,
                          saves=False,
                          samples=cases(("round_decimals", lambda tj, x: tj.round(x * 10.0, decimals=1),
                                         [(4,)], lambda rng, s: between_steps(rng, s) / 10.0),
                                        ("round_decimals_neg", lambda tj, x: x.round(decimals=-1),
                                         [(2, 3)], lambda rng, s: between_steps(rng, s) * 10.0)))
FRAC = _elementary("frac", "FracBackward0", frac_value, frac_grad, saves=False,
                samples=unary_samples("frac", between_steps),
                names=names("frac", in_place="function", written=True))


# ---- sinc, degrees, logit ---------------------------------------------------------------------


@rule
def sinc_value(x, c0, c1):
    if x == 0.0:
        return 1.0
    t = np.pi * x
    return np.sin(t) / t


@rule
def sinc_grad(x, y, g, c0, c1):
    if x == 0.0:
        return 0.0
    t = np.pi * x
    return g * (np.cos(t) * t - np.sin(t)) / (t * x)


SINC = _elementary("sinc", "SincBackward0", sinc_value, sinc_grad, samples=unary_samples("sinc", anywhere),
                   names=names("sinc", in_place="function", special=("sinc",)))


@rule
def deg2rad_value(x, c0, c1):
    return x * 0.017453292519943295


@rule
def deg2rad_grad(x, y, g, c0, c1):
    return g * 0.017453292519943295


@rule
def rad2deg_value(x, c0, c1):
    return x * 57.29577951308232


@rule
def rad2deg_grad(x, y, g, c0, c1):
    return g * 57.29577951308232


DEG2RAD = _elementary("deg2rad", "Deg2RadBackward0", deg2rad_value, deg2rad_grad, saves=False,
                   samples=unary_samples("deg2rad", anywhere),
                   names=names("deg2rad", in_place="function"))
RAD2DEG = _elementary("rad2deg", "Rad2DegBackward0", rad2deg_value, rad2deg_grad, saves=False,
                   samples=unary_samples("rad2deg", anywhere),
                   names=names("rad2deg", in_place="function"))


@rule
def logit_value(x, c0, c1):
    # c0 = eps, or -1 for none (no clamping)
    z = x
    if c0 >= 0.0:
        if z < c0:
            z = c0
        elif z > 1.0 - c0:
            z = 1.0 - c0
    return np.log(z / (1.0 - z))


@rule
def logit_grad(x, y, g, c0, c1):
    # torch's logit_backward: NaN outside [0, 1] without eps; with eps, zero outside [eps, 1 - eps]
    if c0 < 0.0:
        if x < 0.0 or x > 1.0:
            return np.nan
        return g / (x * (1.0 - x))
    if x < c0 or x > 1.0 - c0:
        return 0.0
    return g / (x * (1.0 - x))


LOGIT = _special("logit", "LogitBackward0", logit_value, logit_grad, nconst=1,
                 samples=cases(("logit", lambda tj, x: tj.logit(x), [(3, 4)], probability),
                               ("logit_eps", lambda tj, x: x.logit(0.2), [(6,)], probability),
                               ("logit_special", lambda tj, x: tj.special.logit(x), [(2,)], probability)),
                               names=names("logit", in_place="function", written=True))


# ---- nan_to_num: three static floats, so a kernel -------------------------------------------


@kernel
def nan_to_num_forward(v, out, a, b, p, q, ints, floats):
    # ints[p] = size, ints[p + 1] = 1 where posinf / 2 where neginf is the dtype's limit
    # (kept out of ``floats``, whose float32 copy cannot hold float64's limits)
    n = ints[p]
    nan = floats[q]
    posinf = floats[q + 1]
    neginf = floats[q + 2]
    # the dtype's limits by its size: np.finfo would make loading the cached sweep import
    # Numba's array maths (its result type lives there), which start-up avoids
    big = 3.4028234663852886e38 if v.itemsize == 4 else 1.7976931348623157e308
    if ints[p + 1] & 1:
        posinf = big
    if ints[p + 1] & 2:
        neginf = -big
    for i in range(n):
        x = v[a + i]
        if np.isnan(x):
            v[out + i] = nan
        elif x == np.inf:
            v[out + i] = posinf
        elif x == -np.inf:
            v[out + i] = neginf
        else:
            v[out + i] = x


@kernel
def nan_to_num_backward(v, g, flags, out, a, b, ma, mb, p, q, ints, floats):
    if ma == 0:
        return
    for i in range(ints[p]):
        # torch: grad * isfinite(x)
        acc(g, a + i, g[out + i] * (1.0 if np.isfinite(v[a + i]) else 0.0), ma)


NAN_TO_NUM = define_kernel("nan_to_num", "NanToNumBackward0", nan_to_num_forward, nan_to_num_backward,
                           operands=1, saved="a", group="special",
                           samples=cases(("nan_to_num", lambda tj, x: tj.nan_to_num(x), [(3, 4)], anywhere),
                                         ("nan_to_num_args", lambda tj, x: x.nan_to_num(1.0, 2.0, -2.0),
                                          [(5,)], anywhere)),
                                          names=names("nan_to_num", in_place="function", written=True))


# ---- two operands -----------------------------------------------------------------------------


@rule
def atan2_value(x, y):
    return np.arctan2(x, y)


# torch's: 1 / (x^2 + y^2) taken as 0 where x = y = 0, so the origin gets a zero gradient


@rule
def atan2_grad_x(x, y, z, g):
    d = x * x + y * y
    if d == 0.0:
        return g * y * 0.0
    return g * y / d


@rule
def atan2_grad_y(x, y, z, g):
    d = x * x + y * y
    if d == 0.0:
        return g * -x * 0.0
    return g * -x / d


ATAN2 = define_binary("atan2", "Atan2Backward0", atan2_value, atan2_grad_x, atan2_grad_y, group="elementary",
                      samples=binary_samples("atan2", away_from_zero),
                      names=names("atan2", "arctan2", in_place="method"))


@rule
def hypot_value(x, y):
    return np.hypot(x, y)


@rule
def hypot_grad_x(x, y, z, g):
    return g * x / z


@rule
def hypot_grad_y(x, y, z, g):
    return g * y / z


HYPOT = define_binary("hypot", "HypotBackward0", hypot_value, hypot_grad_x, hypot_grad_y, group="elementary",
                      samples=binary_samples("hypot", away_from_zero),
                      names=names("hypot", in_place="method"))


@rule
def logaddexp_value(x, y):
    if np.isinf(x) and x == y:
        return x
    m = x if x >= y else y
    return m + np.log1p(np.exp(-abs(x - y)))


@rule
def logaddexp_grad_x(x, y, z, g):
    return g / (1.0 + np.exp(y - x))


@rule
def logaddexp_grad_y(x, y, z, g):
    return g / (1.0 + np.exp(x - y))


LOGADDEXP = define_binary("logaddexp", "LogaddexpBackward0", logaddexp_value, logaddexp_grad_x,
                          logaddexp_grad_y, group="elementary", samples=binary_samples("logaddexp", anywhere),
                          names=names("logaddexp"))


@rule
def logaddexp2_value(x, y):
    if np.isinf(x) and x == y:
        return x
    m = x if x >= y else y
    return m + np.log1p(np.exp2(-abs(x - y))) * 1.4426950408889634


@rule
def logaddexp2_grad_x(x, y, z, g):
    return g / (1.0 + np.exp2(y - x))


@rule
def logaddexp2_grad_y(x, y, z, g):
    return g / (1.0 + np.exp2(x - y))


LOGADDEXP2 = define_binary("logaddexp2", "Logaddexp2Backward0", logaddexp2_value, logaddexp2_grad_x,
                           logaddexp2_grad_y, group="elementary", samples=binary_samples("logaddexp2", anywhere),
                           names=names("logaddexp2"))


@rule
def xlogy_value(x, y):
    if np.isnan(y):
        return np.nan
    if x == 0.0:
        return 0.0
    return x * np.log(y)


@rule
def xlogy_grad_x(x, y, z, g):
    # torch: xlogy(g, y), masked to 0 where x == 0 and y <= 0
    if x == 0.0 and y <= 0.0:
        return 0.0
    if np.isnan(y):
        return np.nan
    if g == 0.0:
        return g * 0.0
    return g * np.log(y)


@rule
def xlogy_grad_y(x, y, z, g):
    return g * x / y


XLOGY = define_binary("xlogy", "XlogyBackward0", xlogy_value, xlogy_grad_x, xlogy_grad_y, group="special",
                      samples=binary_samples("xlogy", anywhere, positive),
                      names=names("xlogy", in_place="function", special=("xlogy",)))


@rule
def xlog1py_value(x, y):
    if np.isnan(y):
        return np.nan
    if x == 0.0:
        return 0.0
    return x * np.log1p(y)


@rule
def xlog1py_grad_x(x, y, z, g):
    # torch: xlog1py(g, y), masked to 0 where x == 0 and y <= -1
    if x == 0.0 and y <= -1.0:
        return 0.0
    if np.isnan(y):
        return np.nan
    if g == 0.0:
        return g * 0.0
    return g * np.log1p(y)


@rule
def xlog1py_grad_y(x, y, z, g):
    return g * x / (y + 1.0)


XLOG1PY = define_binary("xlog1py", "SpecialXlog1PyBackward0", xlog1py_value, xlog1py_grad_x, xlog1py_grad_y,
                        group="special",
                        samples=binary_samples("xlog1py", anywhere, positive,
                                               fn=lambda tj, x, y: tj.special.xlog1py(x, y)),
                                               names=names(special=("xlog1py",)))


@rule
def fmax_value(x, y):
    if np.isnan(x):
        return y
    if np.isnan(y):
        return x
    return x if x >= y else y


@rule
def fmax_grad_x(x, y, z, g):
    # torch: g where x >= y or y is NaN (ties go to x), else an exact zero
    if x >= y or np.isnan(y):
        return g
    return 0.0


@rule
def fmax_grad_y(x, y, z, g):
    if x >= y or np.isnan(y):
        return 0.0
    return g


@rule
def fmin_value(x, y):
    if np.isnan(x):
        return y
    if np.isnan(y):
        return x
    return x if x <= y else y


@rule
def fmin_grad_x(x, y, z, g):
    if x <= y or np.isnan(y):
        return g
    return 0.0


@rule
def fmin_grad_y(x, y, z, g):
    if x <= y or np.isnan(y):
        return 0.0
    return g


FMAX = define_binary("fmax", "FmaxBackward0", fmax_value, fmax_grad_x, fmax_grad_y, group="elementary",
                     samples=binary_samples("fmax", away_from_zero),
                     names=names("fmax", integer=np.fmax))
FMIN = define_binary("fmin", "FminBackward0", fmin_value, fmin_grad_x, fmin_grad_y, group="elementary",
                     samples=binary_samples("fmin", away_from_zero),
                     names=names("fmin", integer=np.fmin))


# ---- front ends -------------------------------------------------------------------------------
from tapejit.api import export  # noqa: E402
from tapejit.ops._front_ends import generate  # noqa: E402
from tapejit.inplace import apply_inplace  # noqa: E402
from tapejit.ops import binary as _binary  # noqa: E402
from tapejit.ops import unary as _unary  # noqa: E402
from tapejit.recording import eager, float_input, on_tape, record, record_binary, record_unary  # noqa: E402
from tapejit.recording import narrowed, wide  # noqa: E402
from tapejit.tape import current as _current, state as _state  # noqa: E402
from tapejit.tensor import Tensor, _concrete  # noqa: E402


def _in_place(name, fn, function=False):
    def method(input, *args, **kwargs):
        return apply_inplace(input, lambda: fn(input, *args, **kwargs), name)
    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"``{fn.__name__}`` in place."
    # the front end (api.install) checks the parameters of this signature, and names them
    method.__signature__ = inspect.signature(fn)
    export(method, method=True, function=function)
    return method


generate(globals())   # tj.asin, Tensor.asin, asin_, tj.atan2, ... from the names above


@export(method=True)
def round(input, *, decimals=0):
    """Round half to even; with ``decimals``, torch's ``round(x * 10**d) / 10**d``."""
    if type(decimals) is not int:
        raise TypeError(f"round(): argument 'decimals' must be int, not {type(decimals).__name__}")
    if not input._dtype.is_floating_point:
        if decimals != 0:
            raise RuntimeError(f"round_cpu not implemented for '{input._dtype.name.capitalize()}' "
                               f"with decimals={decimals}")
        return _concrete(np.array(input._value(), copy=True))
    if decimals == 0:
        return record_unary(ROUND, input)
    return record_unary(ROUND_DECIMALS, input, 10.0 ** abs(decimals), 1.0 if decimals < 0 else 0.0)


_in_place("round_", round, True)


@export(method=True)
def frac(input):
    """``x - trunc(x)``; gradient 1."""
    if not input._dtype.is_floating_point:
        raise RuntimeError(f"\"frac_cpu\" not implemented for '{input._dtype.name.capitalize()}'")
    return record_unary(FRAC, input)


_in_place("frac_", frac, True)


def _order(n, fn):
    if isinstance(n, Tensor):
        n = n.item()
    if type(n) is not int and not (isinstance(n, (np.integer,))):
        raise TypeError(f"{fn}(): argument 'n' must be int, not {type(n).__name__}")
    if n < 0:
        raise RuntimeError(f"{fn}(n, x) does not support negative n (got n = {n}).")
    return int(n)


def _gamma_record(op, x, order):
    x = float_input(x)
    if not on_tape(x):
        return eager(_gamma_record, op, x, order)
    tape = _state.tape or _current()
    p = tape.add_ints((x._numel,))
    q = tape.add_floats(order)
    return record(op, (x,), x._shape, x._dtype, p, q)


@export(method=True)
def lgamma(input):
    """``log |Gamma(x)|``; inf at the non-positive integers (grad_fn LgammaBackward0)."""
    return _gamma_record(LGAMMA, input, -1.0)


@export(method=True)
def digamma(input):
    """``d/dx log Gamma(x)``; NaN at the negative integers, -inf/inf at +0/-0 (DigammaBackward0)."""
    return _gamma_record(DIGAMMA, input, -2.0)


_in_place("lgamma_", lgamma)
_in_place("digamma_", digamma)


@export
def polygamma(n, input):
    """The ``n``-th derivative of digamma; ``polygamma(0, x)`` is ``digamma(x)``."""
    n = _order(n, "polygamma")
    return _gamma_record(POLYGAMMA, input, -2.0 if n == 0 else float(n))


def _polygamma_method(input, n):
    return polygamma(n, input)


export(_polygamma_method, name="polygamma", method=True, function=False)
_in_place("polygamma_", _polygamma_method)


@export(method=True)
def logit(input, eps=None):
    """``log(x / (1 - x))``, with ``x`` clamped into ``[eps, 1 - eps]`` when ``eps`` is given."""
    return record_unary(LOGIT, input, -1.0 if eps is None else float(eps))


_in_place("logit_", logit, True)


@export(method=True)
def nan_to_num(input, nan=0.0, posinf=None, neginf=None):
    """NaN, +inf and -inf replaced by ``nan``, ``posinf``, ``neginf`` (default: the dtype's
    largest and lowest finite values); the gradient passes where the input is finite."""
    if not input._dtype.is_floating_point:
        return _concrete(np.array(input._value(), copy=True))
    if not on_tape(input):
        return eager(nan_to_num, input, nan, posinf, neginf)
    tape = _state.tape or _current()
    q = tape.add_floats(float(nan), 0.0 if posinf is None else float(posinf))
    tape.add_floats(0.0 if neginf is None else float(neginf))
    p = tape.add_ints((input._numel, (posinf is None) + 2 * (neginf is None)))
    return record(NAN_TO_NUM, (input,), input._shape, input._dtype, p, q)


_in_place("nan_to_num_", nan_to_num, True)


@export(method=True)
def isposinf(input):
    return _concrete(np.isposinf(input._value()))


@export(method=True)
def isneginf(input):
    return _concrete(np.isneginf(input._value()))


# lerp is a composition recorded as torch's formula ``input + weight * (end - input)``; its
# last record runs the add kernel under torch's node names for the two forms.
LERP_SCALAR = same_kernels("lerp_scalar", "LerpBackward0", _binary.ADD,
                           samples=binary_samples("lerp_scalar", anywhere,
                                                  fn=lambda tj, x, y: tj.lerp(x, y, 0.3)),
                                                  names=names("lerp", in_place="method", written=True))
LERP_TENSOR = same_kernels("lerp_tensor", "LerpBackward1", _binary.ADD,
                           samples=cases(("lerp_tensor", lambda tj, x, y, w: tj.lerp(x, y, w),
                                          [(3, 4), (3, 4), (3, 4)], anywhere),
                                         ("lerp_tensor_bcast", lambda tj, x, y, w: x.lerp(y, w),
                                          [(3, 4), (4,), (3, 1)], anywhere)))


@export(method=True)
def lerp(input, end, weight):
    """``input + weight * (end - input)``, with a tensor or a number as ``weight``."""
    if not isinstance(end, Tensor):
        raise TypeError(f"lerp(): argument 'end' (position 2) must be Tensor, not {type(end).__name__}")
    if input._dtype.narrow and end._dtype is input._dtype and getattr(weight, "_dtype", input._dtype) is input._dtype:
        # one float32 kernel in torch, its result rounded once
        return narrowed(lerp(wide(input), wide(end), wide(weight) if isinstance(weight, Tensor) else weight),
                        input._dtype)
    if isinstance(weight, Tensor):
        if not (input._dtype.is_floating_point and end._dtype.is_floating_point
                and weight._dtype.is_floating_point):
            raise RuntimeError(f"lerp: expected floating point tensors, got {input._dtype}, {end._dtype} "
                               f"and {weight._dtype}")
        return record_binary(LERP_TENSOR, input, weight * (end - input))
    if not isinstance(weight, (int, float, np.floating, np.integer)) or isinstance(weight, bool):
        raise TypeError(f"lerp(): argument 'weight' (position 3) must be Tensor or Number, not "
                        f"{type(weight).__name__}")
    if not (input._dtype.is_floating_point and end._dtype.is_floating_point):
        raise RuntimeError(f"lerp: expected floating point tensors, got {input._dtype} and {end._dtype}")
    return record_binary(LERP_SCALAR, input, (end - input) * float(weight))


_in_place("lerp_", lerp)

# torch.special.expit is the sigmoid (SigmoidBackward0)
expit = _unary.sigmoid


# ---- derivative formulas (create_graph) ----------------------------------------------------
# One per op, applied by create_graph passes (tapejit/autograd/higher.py); plain Python,
# not compiled: see tapejit/ops/_formulas.py.  Kept last so define_ edits merge cleanly.

from tapejit.api import front_ends as tj  # noqa: E402  (tj's functions, read at call time)
from tapejit.ops import _formulas as _f  # noqa: E402
from tapejit.ops._formulas import derivative  # noqa: E402
from tapejit.tensor import _concrete  # noqa: E402
_d_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _d_unary(op):
    """``@_d_unary(OP)``: a formula ``f(c, x, y, g)`` of the input, output and gradient."""
    def register(fn):
        derivative(op)(lambda c: (fn(c, c.x(), c.out(), c.g), None))
        return fn
    return register


@_d_unary(ASIN)
def _d_asin(c, x, y, g):
    return g / tj.sqrt(1.0 - x * x)


@_d_unary(ACOS)
def _d_acos(c, x, y, g):
    return -g / tj.sqrt(1.0 - x * x)


@_d_unary(ATAN)
def _d_atan(c, x, y, g):
    return g / (1.0 + x * x)


@_d_unary(ASINH)
def _d_asinh(c, x, y, g):
    return g / tj.sqrt(x * x + 1.0)


@_d_unary(ACOSH)
def _d_acosh(c, x, y, g):
    return g / tj.sqrt(x * x - 1.0)


@_d_unary(ATANH)
def _d_atanh(c, x, y, g):
    return g / (1.0 - x * x)


@_d_unary(SINH)
def _d_sinh(c, x, y, g):
    return g * tj.cosh(x)


@_d_unary(COSH)
def _d_cosh(c, x, y, g):
    return g * tj.sinh(x)


@_d_unary(LOG2)
def _d_log2(c, x, y, g):
    return g / (x * math.log(2.0))


@_d_unary(LOG10)
def _d_log10(c, x, y, g):
    return g / (x * math.log(10.0))


@_d_unary(EXP2)
def _d_exp2(c, x, y, g):
    return g * y * math.log(2.0)


@_d_unary(RECIPROCAL)
def _d_reciprocal(c, x, y, g):
    return -g * y * y


@_d_unary(DEG2RAD)
def _d_deg2rad(c, x, y, g):
    return g * (math.pi / 180.0)


@_d_unary(RAD2DEG)
def _d_rad2deg(c, x, y, g):
    return g * (180.0 / math.pi)


@_d_unary(FRAC)
def _d_frac(c, x, y, g):
    return g


@derivative(FLOOR, CEIL, TRUNC, ROUND, ROUND_DECIMALS)
def _d_step(c):
    return (_f.zeros(c.n, c.dt), None)


@_d_unary(ERFC)
def _d_erfc(c, x, y, g):
    return -g * _d_TWO_OVER_SQRT_PI * tj.exp(-(x * x))


@_d_unary(ERFINV)
def _d_erfinv(c, x, y, g):
    return g * (math.sqrt(math.pi) / 2.0) * tj.exp(y * y)


@derivative(LGAMMA, DIGAMMA, POLYGAMMA)
def _d_gamma_family(c):
    """lgamma' = digamma, digamma' = polygamma(1, .), polygamma(n, .)' = polygamma(n + 1, .)."""
    order = c.float(c.q)
    x = c.x()
    if order == -1.0:
        d = tj.digamma(x)
    else:
        d = tj.polygamma(1 if order == -2.0 else int(order) + 1, x)
    return (c.g * d, None)


@_d_unary(SINC)
def _d_sinc(c, x, y, g):
    # the rule's: 0 at x = 0 (torch's masked_fill), so its derivative there is 0 too
    at_zero = _f.value(x) == 0.0
    safe = _f.where(at_zero, 1.0, x) if at_zero.any() else x
    t = math.pi * safe
    d = g * (tj.cos(t) * t - tj.sin(t)) / (t * safe)
    return _f.where(at_zero, 0.0, d) if at_zero.any() else d


@_d_unary(LOGIT)
def _d_logit(c, x, y, g):
    eps = c.c0
    xv = _f.value(x)
    if eps < 0.0:
        if np.any((xv < 0.0) | (xv > 1.0)):
            raise _f.refuse(c, "an input outside [0, 1] (its gradient is NaN)")
        return g / (x * (1.0 - x))
    outside = (xv < eps) | (xv > 1.0 - eps)
    return _f.where(outside, 0.0, g / (x * (1.0 - x))) if outside.any() else g / (x * (1.0 - x))


@derivative(NAN_TO_NUM)
def _d_nan_to_num(c):
    # torch's: grad * isfinite(x), a product (an infinite g times 0 is NaN there too)
    finite = np.isfinite(_f.value(c.x()))
    return (c.g * _concrete(finite.astype(c.dt.np)), None)


@derivative(ATAN2)
def _d_atan2(c):
    x, y = _f.binary_operands(c)
    xv, yv = np.broadcast_arrays(_f.value(x), _f.value(y))
    origin = (xv == 0.0) & (yv == 0.0)   # torch's: a zero gradient at the origin
    d = x * x + y * y
    if origin.any():
        d = _f.where(origin, 1.0, d)
    gx = _f.where(origin, 0.0, c.g * y / d) if c.wants_a else None
    gy = _f.where(origin, 0.0, -c.g * x / d) if c.wants_b else None
    return _f.pair(c, gx, gy)


@derivative(HYPOT)
def _d_hypot(c):
    x, y = _f.binary_operands(c)
    z = c.out()
    return _f.pair(c, c.g * x / z if c.wants_a else None, c.g * y / z if c.wants_b else None)


@derivative(LOGADDEXP)
def _d_logaddexp(c):
    x, y = _f.binary_operands(c)
    return _f.pair(c, c.g / (1.0 + tj.exp(y - x)) if c.wants_a else None,
                 c.g / (1.0 + tj.exp(x - y)) if c.wants_b else None)


@derivative(LOGADDEXP2)
def _d_logaddexp2(c):
    x, y = _f.binary_operands(c)
    return _f.pair(c, c.g / (1.0 + tj.exp2(y - x)) if c.wants_a else None,
                 c.g / (1.0 + tj.exp2(x - y)) if c.wants_b else None)


@derivative(XLOGY)
def _d_xlogy(c):
    x, y = _f.binary_operands(c)
    xv = np.broadcast_arrays(_f.value(x), _f.value(y))[0]
    # torch's: xlogy(g, y), which is 0 where g is 0 (NaN y aside), masked where x = 0, y <= 0
    gx = tj.xlogy(c.g, y) if c.wants_a else None
    if gx is not None:
        yv = np.broadcast_arrays(_f.value(x), _f.value(y))[1]
        masked = (xv == 0.0) & (yv <= 0.0)
        if masked.any():
            gx = _f.where(masked, 0.0, gx)
    return _f.pair(c, gx, c.g * x / y if c.wants_b else None)


@derivative(XLOG1PY)
def _d_xlog1py(c):
    x, y = _f.binary_operands(c)
    gx = xlog1py(c.g, y) if c.wants_a else None
    if gx is not None:
        xv, yv = np.broadcast_arrays(_f.value(x), _f.value(y))
        masked = (xv == 0.0) & (yv <= -1.0)
        if masked.any():
            gx = _f.where(masked, 0.0, gx)
    return _f.pair(c, gx, c.g * x / (y + 1.0) if c.wants_b else None)


def _d_nan_extreme(c, larger):
    """fmax/fmin: g to the operand chosen (x on ties, the other one of a NaN)."""
    x, y = _f.binary_operands(c)
    xv, yv = np.broadcast_arrays(_f.value(x), _f.value(y))
    with np.errstate(invalid="ignore"):
        x_chosen = ((xv >= yv) if larger else (xv <= yv)) | np.isnan(yv)
    return _f.pair(c, _f.where(x_chosen, c.g, 0.0) if c.wants_a else None,
                 _f.where(x_chosen, 0.0, c.g) if c.wants_b else None)


@derivative(FMAX)
def _d_fmax(c):
    return _d_nan_extreme(c, True)


@derivative(FMIN)
def _d_fmin(c):
    return _d_nan_extreme(c, False)


# lerp is recorded as its last step, an add (``same_kernels`` of ADD)
derivative(LERP_SCALAR, LERP_TENSOR)(_binary._d_add)
