import numpy as np

from tapejit.distributions import constraints
from tapejit.distributions.distribution import Distribution, _tj, broadcast_all, generator

__all__ = ["Poisson"]


class Poisson(Distribution):
    """The Poisson distribution with ``rate``."""
    arg_constraints = {"rate": constraints.nonnegative}
    support = constraints.nonnegative_integer

    def __init__(self, rate, validate_args=None):
        (self.rate,) = broadcast_all(rate)
        super().__init__(self.rate.size(), validate_args=validate_args)

    @property
    def mean(self):
        return self.rate

    @property
    def mode(self):
        return self.rate.floor()

    @property
    def variance(self):
        return self.rate

    def sample(self, sample_shape=()):
        shape = tuple(self._extended_shape(sample_shape))
        rate = np.broadcast_to(self.rate.detach().numpy(), shape)
        return _tj().tensor(generator().poisson(rate).astype(rate.dtype))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        rate, value = broadcast_all(self.rate, value)
        return value.xlogy(rate) - rate - (value + 1).lgamma()
