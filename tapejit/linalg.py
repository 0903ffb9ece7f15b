"""``tj.linalg``: the linear algebra of ``torch.linalg`` that tapejit has so far, the
factorisation and solve ``tj.distributions.MultivariateNormal`` is built on
(``tapejit/ops/linalg_small.py``)."""
from tapejit.api import front_end as _front_end
from tapejit.ops.linalg_small import LinAlgError, cholesky as _cholesky, solve_triangular as _solve_triangular

__all__ = ["LinAlgError", "cholesky", "solve_triangular"]


def cholesky(input, *, upper=False, out=None):
    if out is not None:
        raise NotImplementedError("linalg.cholesky: out= is not supported by tapejit")
    return _cholesky(input, upper=upper)


def solve_triangular(input, B, *, upper, left=True, unitriangular=False, out=None):
    if out is not None:
        raise NotImplementedError("linalg.solve_triangular: out= is not supported by tapejit")
    return _solve_triangular(input, B, upper=upper, left=left, unitriangular=unitriangular)


cholesky = _front_end(cholesky, "linalg_cholesky")
solve_triangular = _front_end(solve_triangular, "linalg_solve_triangular")
