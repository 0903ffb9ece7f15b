from tapejit.distributions import constraints
from tapejit.distributions.distribution import Distribution, _tj, broadcast_all, generator

__all__ = ["Exponential"]


class Exponential(Distribution):
    """The exponential distribution with ``rate``; ``rsample`` is reparameterised."""
    arg_constraints = {"rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True

    def __init__(self, rate, validate_args=None):
        (self.rate,) = broadcast_all(rate)
        super().__init__(self.rate.size(), validate_args=validate_args)

    @property
    def mean(self):
        return self.rate.reciprocal()

    @property
    def mode(self):
        return _tj().zeros_like(self.rate)

    @property
    def stddev(self):
        return self.rate.reciprocal()

    @property
    def variance(self):
        return self.rate.pow(-2)

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        e = _tj().tensor(generator().standard_exponential(size=tuple(shape)), dtype=self.rate.dtype)
        return e / self.rate

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return self.rate.log() - self.rate * value

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return 1 - _tj().exp(-self.rate * value)

    def icdf(self, value):
        return -_tj().log1p(-value) / self.rate

    def entropy(self):
        return 1.0 - _tj().log(self.rate)
