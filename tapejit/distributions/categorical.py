import numpy as np

from tapejit.distributions import constraints
from tapejit.distributions.distribution import (Distribution, _tj, generator, lazy_property, logits_to_probs,
                                                probs_to_logits)

__all__ = ["Categorical"]


class Categorical(Distribution):
    """A categorical distribution over ``0 .. K-1`` (``K`` = the last dim of ``probs`` or
    ``logits``); ``probs`` are normalised to sum to 1, ``logits`` to log-probabilities."""
    arg_constraints = {"probs": constraints.simplex, "logits": constraints.independent(constraints.real, 1)}
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args=None):
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        if probs is not None:
            if probs.dim() < 1:
                raise ValueError("`probs` parameter must be at least one-dimensional.")
            self.probs = probs / probs.sum(-1, keepdim=True)
        else:
            if logits.dim() < 1:
                raise ValueError("`logits` parameter must be at least one-dimensional.")
            self.logits = logits - logits.logsumexp(dim=-1, keepdim=True)
        self._param = self.probs if probs is not None else self.logits
        self._num_events = self._param.size()[-1]
        batch_shape = self._param.size()[:-1] if self._param.dim() > 1 else ()
        super().__init__(batch_shape, validate_args=validate_args)

    def _expandable(self):
        return {"probs", "logits", "_param"}

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self):
        return constraints.integer_interval(0, self._num_events - 1)

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits)

    @property
    def param_shape(self):
        return self._param.size()

    @property
    def mean(self):
        return _tj().full(tuple(self._extended_shape()), float("nan"), dtype=self.probs.dtype)

    @property
    def mode(self):
        return self.probs.argmax(-1)

    @property
    def variance(self):
        return _tj().full(tuple(self._extended_shape()), float("nan"), dtype=self.probs.dtype)

    def sample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        n = int(np.prod(tuple(shape[:len(shape) - len(self._batch_shape)]), dtype=np.int64))
        probs_2d = self.probs.detach().numpy().reshape(-1, self._num_events).astype(np.float64)
        cdf = np.cumsum(probs_2d, axis=-1)
        cdf /= cdf[:, -1:]
        u = generator().random((n, probs_2d.shape[0]))
        # inverse CDF per row: the first category whose cumulative probability exceeds u
        samples = np.empty((n, probs_2d.shape[0]), np.int64)
        for r in range(probs_2d.shape[0]):
            samples[:, r] = np.minimum(np.searchsorted(cdf[r], u[:, r], side="right"), self._num_events - 1)
        return _tj().tensor(samples.reshape(tuple(shape)))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        value = value.long().unsqueeze(-1)
        value, log_pmf = _tj().broadcast_tensors(value, self.logits)
        value = value[..., :1]
        return log_pmf.gather(-1, value).squeeze(-1)

    def entropy(self):
        # torch clamps at its dtype's lowest value, so that -inf logits times 0 probabilities give 0;
        # float32's lowest gives the same products and fits every float dtype
        min_real = float(np.finfo(np.float32).min)
        logits = _tj().clamp(self.logits, min=min_real)
        p_log_p = logits * self.probs
        return -p_log_p.sum(-1)

    def enumerate_support(self, expand=True):
        values = _tj().arange(self._num_events, dtype=_tj().int64)
        values = values.view((-1,) + (1,) * len(self._batch_shape))
        if expand:
            values = values.expand((-1,) + tuple(self._batch_shape))
        return values
