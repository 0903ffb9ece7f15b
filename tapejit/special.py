"""``tj.special``: torch.special's names for tapejit's special functions (SciPy's names too,
where torch has them: ``gammaln``, ``psi``, ``expit``, ``xlogy``, ``xlog1py``, ``ndtr``).

The functions of one or two tensors are the registry's ops that name themselves here
(``names(..., special=("expit",))`` in ``tapejit/ops/``); the others, with more arguments, are
written below; ``ndtr`` is torch's own composition ``(1 + erf(x / sqrt(2))) / 2``.
"""
from tapejit.api import front_end as _front_end
from tapejit.ops import softmax as _softmax
from tapejit.ops import reduce as _reduce
from tapejit.ops import special as _special
from tapejit.ops import unary as _unary
from tapejit.ops._front_ends import front_end_of as _front_end_of, named_ops as _named_ops


def _named(name, fn, kind):
    if kind == "binary":
        def special(input, other):
            return fn(input, other)
    else:
        def special(input):
            return fn(input)
    special.__name__ = special.__qualname__ = name
    special.__doc__ = fn.__doc__
    return _front_end(special, f"special_{name}")


_FROM_OPS = []
for _op in _named_ops():
    for _name in _op.names.special:
        # a whole-record kernel named here (lgamma) takes one tensor, as the elementwise unary ops
        globals()[_name] = _named(_name, _front_end_of(_op), "binary" if _op.kind == "binary" else "unary")
        _FROM_OPS.append(_name)
del _op


def polygamma(n, input):
    return _special.polygamma(n, input)


def round(input, *, decimals=0):  # noqa: A001 (torch.special's name)
    return _special.round(input, decimals=decimals)


def logit(input, eps=None):
    return _special.logit(input, eps)


def logsumexp(input, dim, keepdim=False):
    return _reduce.logsumexp(input, dim, keepdim)


def softmax(input, dim, dtype=None):
    return _softmax.softmax(input, dim, dtype)


def log_softmax(input, dim, dtype=None):
    return _softmax.log_softmax(input, dim, dtype)


def ndtr(input):
    """The standard normal CDF, as torch computes it: ``(1 + erf(x / sqrt(2))) * 0.5``."""
    return (_unary.erf(input * 0.7071067811865476) + 1.0) * 0.5


_WRITTEN = ["polygamma", "round", "logit", "logsumexp", "softmax", "log_softmax", "ndtr"]
for _name in _WRITTEN:
    globals()[_name] = _front_end(globals()[_name], f"special_{_name}")
del _name

__all__ = sorted(_FROM_OPS + _WRITTEN)
