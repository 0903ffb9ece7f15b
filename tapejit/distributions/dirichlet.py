import numpy as np

from tapejit.distributions import constraints
from tapejit.distributions.distribution import Distribution, _tj
from tapejit.distributions.gamma import standard_gamma

__all__ = ["Dirichlet"]


class Dirichlet(Distribution):
    """The Dirichlet distribution over the simplex of the last dim of ``concentration``.

    ``rsample`` normalises independent standard gamma samples, each differentiated
    implicitly (tapejit/distributions/gamma.py): a reparameterisation gradient of the same
    expectation as torch's, though not the same per-sample estimator."""
    arg_constraints = {"concentration": constraints.independent(constraints.positive, 1)}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, concentration, validate_args=None):
        if concentration.dim() < 1:
            raise ValueError("`concentration` parameter must be at least one-dimensional.")
        self.concentration = concentration
        batch_shape, event_shape = concentration.shape[:-1], concentration.shape[-1:]
        super().__init__(batch_shape, event_shape, validate_args=validate_args)

    def rsample(self, sample_shape=()):
        shape = tuple(self._extended_shape(sample_shape))
        gammas = standard_gamma(self.concentration.expand(shape))
        x = gammas / gammas.sum(-1, keepdim=True)
        tiny = float(np.finfo(x.dtype.np).tiny)
        if x.requires_grad:
            return x
        return x.clamp(min=tiny, max=1 - float(np.finfo(x.dtype.np).eps))

    def log_prob(self, value):
        tj = _tj()
        if self._validate_args:
            self._validate_sample(value)
        c = self.concentration
        return tj.xlogy(c - 1.0, value).sum(-1) + tj.lgamma(c.sum(-1)) - tj.lgamma(c).sum(-1)

    @property
    def mean(self):
        return self.concentration / self.concentration.sum(-1, True)

    @property
    def mode(self):
        concentrationm1 = (self.concentration - 1).clamp(min=0.0)
        mode = concentrationm1 / concentrationm1.sum(-1, True)
        c = self.concentration.detach().numpy()
        if (c < 1).all(axis=-1).any():
            m = mode.detach().numpy().copy()
            below = (c < 1).all(axis=-1)
            m[below] = np.eye(c.shape[-1], dtype=m.dtype)[c[below].argmax(-1)]
            return _tj().tensor(m)
        return mode

    @property
    def variance(self):
        con0 = self.concentration.sum(-1, True)
        return self.concentration * (con0 - self.concentration) / (con0.pow(2) * (con0 + 1))

    def entropy(self):
        tj = _tj()
        k = self.concentration.size(-1)
        a0 = self.concentration.sum(-1)
        return (tj.lgamma(self.concentration).sum(-1) - tj.lgamma(a0) - (k - a0) * tj.digamma(a0)
                - ((self.concentration - 1.0) * tj.digamma(self.concentration)).sum(-1))
