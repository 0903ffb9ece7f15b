"""The multivariate normal distribution, on tapejit's small differentiable Cholesky
factorisation and triangular solve (``tapejit/ops/linalg_small.py``).

``covariance_matrix`` is factorised by ``tj.linalg.cholesky``; ``precision_matrix`` P by
``L = cholesky(C^-T C^-1)`` with ``C = cholesky(P)`` (torch flips P instead: the same factor,
to rounding); log densities use a triangular solve, as torch's do.
"""
import math

from tapejit.distributions import constraints
from tapejit.distributions.distribution import Distribution, _size, _tj, lazy_property, standard_normal

__all__ = ["MultivariateNormal"]


def _batch_mv(bmat, bvec):
    return (bmat @ bvec.unsqueeze(-1)).squeeze(-1)


def _diagonal(bmat):
    n = bmat.shape[-1]
    return (bmat * _tj().eye(n, dtype=bmat.dtype)).sum(-1)


def _batch_mahalanobis(bL, bx):
    """``x^T (L L^T)^-1 x`` over broadcast batches."""
    y = _tj().linalg.solve_triangular(bL, bx.unsqueeze(-1), upper=False).squeeze(-1)
    return (y * y).sum(-1)


def _lower_inverse(L):
    n = L.shape[-1]
    eye = _tj().eye(n, dtype=L.dtype)
    return _tj().linalg.solve_triangular(L, eye, upper=False)


def _precision_to_scale_tril(P):
    c_inv = _lower_inverse(_tj().linalg.cholesky(P))
    return _tj().linalg.cholesky(c_inv.mT @ c_inv)


def _broadcast_shape(*shapes):
    out = ()
    for s in shapes:
        out = tuple(_tj().broadcast_tensors(_tj().zeros(out), _tj().zeros(tuple(s)))[0].shape)
    return out


class MultivariateNormal(Distribution):
    """``N(loc, Sigma)`` with ``Sigma`` given by exactly one of ``covariance_matrix``,
    ``precision_matrix`` and ``scale_tril``; ``rsample`` is reparameterised."""
    arg_constraints = {"loc": constraints.real_vector, "covariance_matrix": constraints.positive_definite,
                       "precision_matrix": constraints.positive_definite,
                       "scale_tril": constraints.lower_cholesky}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc, covariance_matrix=None, precision_matrix=None, scale_tril=None, validate_args=None):
        if loc.dim() < 1:
            raise ValueError("loc must be at least one-dimensional.")
        if (covariance_matrix is not None) + (scale_tril is not None) + (precision_matrix is not None) != 1:
            raise ValueError("Exactly one of covariance_matrix or precision_matrix or scale_tril may be specified.")
        if scale_tril is not None:
            if scale_tril.dim() < 2:
                raise ValueError("scale_tril matrix must be at least two-dimensional, with optional leading batch "
                                 "dimensions")
            batch_shape = _broadcast_shape(scale_tril.shape[:-2], loc.shape[:-1])
            self.scale_tril = scale_tril.expand(batch_shape + (-1, -1))
        elif covariance_matrix is not None:
            if covariance_matrix.dim() < 2:
                raise ValueError("covariance_matrix must be at least two-dimensional, with optional leading batch "
                                 "dimensions")
            batch_shape = _broadcast_shape(covariance_matrix.shape[:-2], loc.shape[:-1])
            self.covariance_matrix = covariance_matrix.expand(batch_shape + (-1, -1))
        else:
            if precision_matrix.dim() < 2:
                raise ValueError("precision_matrix must be at least two-dimensional, with optional leading batch "
                                 "dimensions")
            batch_shape = _broadcast_shape(precision_matrix.shape[:-2], loc.shape[:-1])
            self.precision_matrix = precision_matrix.expand(batch_shape + (-1, -1))
        self.loc = loc.expand(batch_shape + (-1,))
        event_shape = self.loc.shape[-1:]
        super().__init__(batch_shape, event_shape, validate_args=validate_args)
        if scale_tril is not None:
            self._unbroadcasted_scale_tril = scale_tril
        elif covariance_matrix is not None:
            self._unbroadcasted_scale_tril = _tj().linalg.cholesky(covariance_matrix)
        else:
            self._unbroadcasted_scale_tril = _precision_to_scale_tril(precision_matrix)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(MultivariateNormal, _instance)
        batch_shape = tuple(_size(batch_shape))
        loc_shape = batch_shape + tuple(self.event_shape)
        cov_shape = batch_shape + tuple(self.event_shape) + tuple(self.event_shape)
        new.loc = self.loc.expand(loc_shape)
        new._unbroadcasted_scale_tril = self._unbroadcasted_scale_tril
        for name in ("covariance_matrix", "scale_tril", "precision_matrix"):
            if name in self.__dict__:
                new.__dict__[name] = self.__dict__[name].expand(cov_shape)
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @lazy_property
    def scale_tril(self):
        return self._unbroadcasted_scale_tril.expand(tuple(self._batch_shape) + tuple(self._event_shape) * 2)

    @lazy_property
    def covariance_matrix(self):
        L = self._unbroadcasted_scale_tril
        return (L @ L.mT).expand(tuple(self._batch_shape) + tuple(self._event_shape) * 2)

    @lazy_property
    def precision_matrix(self):
        inv = _lower_inverse(self._unbroadcasted_scale_tril)
        return (inv.mT @ inv).expand(tuple(self._batch_shape) + tuple(self._event_shape) * 2)

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        return self._unbroadcasted_scale_tril.pow(2).sum(-1).expand(tuple(self._batch_shape)
                                                                     + tuple(self._event_shape))

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        eps = standard_normal(shape, self.loc.dtype)
        return self.loc + _batch_mv(self._unbroadcasted_scale_tril, eps)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        diff = value - self.loc
        M = _batch_mahalanobis(self._unbroadcasted_scale_tril, diff)
        half_log_det = _diagonal(self._unbroadcasted_scale_tril).log().sum(-1)
        return -0.5 * (self._event_shape[0] * math.log(2 * math.pi) + M) - half_log_det

    def entropy(self):
        half_log_det = _diagonal(self._unbroadcasted_scale_tril).log().sum(-1)
        H = 0.5 * self._event_shape[0] * (1.0 + math.log(2 * math.pi)) + half_log_det
        if len(self._batch_shape) == 0:
            return H
        return H.expand(tuple(self._batch_shape))
