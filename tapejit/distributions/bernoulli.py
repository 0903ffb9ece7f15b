import numbers

import numpy as np

from tapejit.distributions import constraints
from tapejit.distributions.distribution import (Distribution, _tj, broadcast_all, generator, lazy_property,
                                                logits_to_probs, probs_to_logits)

__all__ = ["Bernoulli"]


class Bernoulli(Distribution):
    """Bernoulli trials with ``probs`` or ``logits`` (one of them)."""
    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.boolean
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args=None):
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        if probs is not None:
            is_scalar = isinstance(probs, numbers.Number)
            (self.probs,) = broadcast_all(probs)
        else:
            is_scalar = isinstance(logits, numbers.Number)
            (self.logits,) = broadcast_all(logits)
        self._param = self.probs if probs is not None else self.logits
        batch_shape = () if is_scalar else self._param.size()
        super().__init__(batch_shape, validate_args=validate_args)

    def _expandable(self):
        return {"probs", "logits", "_param"}

    @property
    def mean(self):
        return self.probs

    @property
    def mode(self):
        p = self.probs.detach().numpy()
        mode = (p >= 0.5).astype(p.dtype)
        mode[p == 0.5] = np.nan
        return _tj().tensor(mode)

    @property
    def variance(self):
        return self.probs * (1 - self.probs)

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits, is_binary=True)

    @property
    def param_shape(self):
        return self._param.size()

    def sample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        p = np.broadcast_to(self.probs.detach().numpy(), tuple(shape))
        return _tj().tensor((generator().random(tuple(shape)) < p).astype(p.dtype))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        return -_tj().nn.functional.binary_cross_entropy_with_logits(logits, value, reduction="none")

    def entropy(self):
        return _tj().nn.functional.binary_cross_entropy_with_logits(self.logits, self.probs, reduction="none")

    def enumerate_support(self, expand=True):
        values = _tj().arange(2, dtype=self._param.dtype)
        values = values.view((-1,) + (1,) * len(self._batch_shape))
        if expand:
            values = values.expand((-1,) + tuple(self._batch_shape))
        return values


