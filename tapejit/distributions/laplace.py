import numpy as np

from tapejit.distributions import constraints
from tapejit.distributions.distribution import Distribution, _tj, broadcast_all, uniform

__all__ = ["Laplace"]


class Laplace(Distribution):
    """The Laplace distribution; ``rsample`` is reparameterised."""
    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        self.loc, self.scale = broadcast_all(loc, scale)
        super().__init__(self.loc.size(), validate_args=validate_args)

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        return 2 * self.scale.pow(2)

    @property
    def stddev(self):
        return (2 ** 0.5) * self.scale

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        eps = float(np.finfo(self.loc.dtype.np).eps)
        u = uniform(shape, self.loc.dtype, eps - 1, 1)
        return self.loc - self.scale * u.sign() * _tj().log1p(-u.abs())

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return -_tj().log(2 * self.scale) - _tj().abs(value - self.loc) / self.scale

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return 0.5 - 0.5 * (value - self.loc).sign() * _tj().expm1(-(value - self.loc).abs() / self.scale)

    def icdf(self, value):
        term = value - 0.5
        return self.loc - self.scale * term.sign() * _tj().log1p(-2 * term.abs())

    def entropy(self):
        return 1 + _tj().log(2 * self.scale)
