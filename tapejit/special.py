"""``tj.special``: torch.special's names for tapejit's special functions (SciPy's names too,
where torch has them: ``gammaln``, ``psi``, ``expit``, ``xlogy``, ``xlog1py``, ``ndtr``).

The functions are the registry's ops (``tapejit/ops/special.py`` and the elementary ones);
``ndtr`` is torch's own composition ``(1 + erf(x / sqrt(2))) / 2``.
"""
from tapejit.api import front_end as _front_end
from tapejit.ops import activation as _activation
from tapejit.ops import reduce as _reduce
from tapejit.ops import special as _special
from tapejit.ops import unary as _unary

__all__ = ["digamma", "erf", "erfc", "erfinv", "exp2", "expit", "expm1", "gammaln", "log1p",
           "log_softmax", "logit", "logsumexp", "ndtr", "polygamma", "psi", "round", "sinc", "softmax",
           "xlog1py", "xlogy"]


def _named(name, fn):
    def special(input):
        return fn(input)
    special.__name__ = special.__qualname__ = name
    special.__doc__ = fn.__doc__
    return _front_end(special, f"special_{name}")


gammaln = _named("gammaln", _special.lgamma)
digamma = _named("digamma", _special.digamma)
psi = _named("psi", _special.digamma)
erf = _named("erf", _unary.erf)
erfc = _named("erfc", _special.erfc)
erfinv = _named("erfinv", _special.erfinv)
expit = _named("expit", _unary.sigmoid)
exp2 = _named("exp2", _special.exp2)
expm1 = _named("expm1", _unary.expm1)
log1p = _named("log1p", _unary.log1p)
sinc = _named("sinc", _special.sinc)


def polygamma(n, input):
    return _special.polygamma(n, input)


def round(input, *, decimals=0):  # noqa: A001 (torch.special's name)
    return _special.round(input, decimals=decimals)


def logit(input, eps=None):
    return _special.logit(input, eps)


def xlogy(input, other):
    return _special.xlogy(input, other)


def xlog1py(input, other):
    return _special.xlog1py(input, other)


def logsumexp(input, dim, keepdim=False):
    return _reduce.logsumexp(input, dim, keepdim)


def softmax(input, dim, dtype=None):
    return _activation.softmax(input, dim, dtype)


def log_softmax(input, dim, dtype=None):
    return _activation.log_softmax(input, dim, dtype)


def ndtr(input):
    """The standard normal CDF, as torch computes it: ``(1 + erf(x / sqrt(2))) * 0.5``."""
    return (_unary.erf(input * 0.7071067811865476) + 1.0) * 0.5


for _name in ("polygamma", "round", "logit", "xlogy", "xlog1py", "logsumexp", "softmax", "log_softmax",
              "ndtr"):
    globals()[_name] = _front_end(globals()[_name], f"special_{_name}")
del _name
