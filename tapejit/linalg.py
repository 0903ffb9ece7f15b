"""``tj.linalg``: torch.linalg's functions that tapejit has.  The factorisations and matrix
functions are registry ops (``tapejit/ops/linalg_small.py``: cholesky, triangular solve;
``tapejit/ops/linalg_dense.py``: inv, det, slogdet, solve, qr, svd, eigh); the norms are
written here with existing ops (vector norms, 'fro'), and with ``svdvals`` ('nuc', 2, -2),
giving torch's results, gradients and grad_fn names."""
import math

from tapejit.api import front_end as _front_end
from tapejit.ops import linalg_dense as _dense
from tapejit.ops.linalg_small import LinAlgError, cholesky as _cholesky, solve_triangular as _solve_triangular

__all__ = ["LinAlgError", "cholesky", "solve_triangular", "inv", "det", "slogdet", "solve", "norm", "vector_norm",
           "matrix_norm", "qr", "svd", "svdvals", "eigh", "eigvalsh"]


def _no_out(out, fn):
    if out is not None:
        raise NotImplementedError(f"{fn}: out= is not supported by tapejit")


def cholesky(input, *, upper=False, out=None):
    _no_out(out, "linalg.cholesky")
    return _cholesky(input, upper=upper)


def solve_triangular(input, B, *, upper, left=True, unitriangular=False, out=None):
    _no_out(out, "linalg.solve_triangular")
    return _solve_triangular(input, B, upper=upper, left=left, unitriangular=unitriangular)


def inv(A, *, out=None):
    _no_out(out, "linalg.inv")
    return _dense.inv(A)


def det(A, *, out=None):
    _no_out(out, "linalg.det")
    return _dense.det(A)


def slogdet(A, *, out=None):
    _no_out(out, "linalg.slogdet")
    return _dense.slogdet(A)


def solve(A, B, *, left=True, out=None):
    _no_out(out, "linalg.solve")
    return _dense.solve(A, B, left=left)


def qr(A, mode="reduced", *, out=None):
    _no_out(out, "linalg.qr")
    return _dense.qr(A, mode)


def svd(A, full_matrices=True, *, driver=None, out=None):
    _no_out(out, "linalg.svd")
    return _dense.svd(A, full_matrices)


def svdvals(A, *, driver=None, out=None):
    _no_out(out, "linalg.svdvals")
    return _dense.svdvals(A)


def eigh(A, UPLO="L", *, out=None):
    _no_out(out, "linalg.eigh")
    return _dense.eigh(A, UPLO)


def eigvalsh(A, UPLO="L", *, out=None):
    _no_out(out, "linalg.eigvalsh")
    return _dense.eigvalsh(A, UPLO)


# ---- norms ----------------------------------------------------------------------------------

def _cast(x, dtype, fn):
    _dense.check_float(x, fn)
    if dtype is not None:
        x = x.to(dtype)
    return x


def _dims(dim):
    return None if dim is None else (dim,) if isinstance(dim, int) else tuple(dim)


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None, out=None):
    """``torch.linalg.vector_norm`` for every real ``ord``: p > 0 and inf are the ``norm``
    op (LinalgVectorNormBackward0); -inf, 0 and p < 0 are written with existing ops."""
    from tapejit.ops.reduce import norm as _norm
    _no_out(out, "linalg.vector_norm")
    if isinstance(ord, str) or not isinstance(ord, (int, float)):
        raise TypeError(f"linalg_vector_norm(): argument 'ord' (position 2) must be Number, not "
                        f"{type(ord).__name__}")
    x = _cast(x, dtype, "linalg.vector_norm")
    dims = _dims(dim)
    if ord > 0:
        return _norm(x, float(ord), dims, keepdim)
    if ord == -math.inf:
        return x.abs().amin(() if dims is None else dims, keepdim=keepdim)
    if ord == 0:    # the number of non-zeros: piecewise constant, no gradient
        return (x != 0).to(x.dtype).sum(dims, keepdim=keepdim)
    return x.abs().pow(float(ord)).sum(dims, keepdim=keepdim).pow(1.0 / ord)


def _matrix_dims(A, dim, fn):
    if len(A.shape) < 2:
        raise RuntimeError(f"{fn}: The input tensor A must have at least 2 dimensions.")
    dims = _dims(dim)
    if len(dims) != 2:
        raise RuntimeError(f"linalg.matrix_norm: dim must be a 2-tuple. Got {' '.join(str(d) for d in dims)}")
    nd = len(A.shape)
    d0, d1 = (d % nd if -nd <= d < nd else d for d in dims)
    for d in dims:
        if not -nd <= d < nd:
            raise IndexError(f"Dimension out of range (expected to be in range of [{-nd}, {nd - 1}], but got {d})")
    if d0 == d1:
        raise RuntimeError(f"linalg.matrix_norm: dims must be different. Got ({dims[0]}, {dims[1]})")
    return d0, d1


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None, out=None):
    """``torch.linalg.matrix_norm``: 'fro', 'nuc', 2, -2 (from the singular values), 1, -1,
    inf, -inf (column and row sums), written as torch composes them."""
    _no_out(out, "linalg.matrix_norm")
    A = _cast(A, dtype, "linalg.matrix_norm")
    d0, d1 = _matrix_dims(A, dim, "linalg.matrix_norm")
    if ord == "fro":
        return vector_norm(A, 2, (d0, d1), keepdim)
    if ord in ("nuc", 2, -2):
        rest = [d for d in range(len(A.shape)) if d not in (d0, d1)]
        s = _dense.svdvals(A.permute(*rest, d0, d1))
        if ord == "nuc":
            r = s.sum(-1)
        else:
            r = s.amax(-1) if ord == 2 else s.amin(-1)
        if keepdim:
            for d in sorted((d0, d1)):
                r = r.unsqueeze(d)
        return r
    if ord in (1, -1, math.inf, -math.inf):
        # 1: the largest column sum of |A| (sum over rows d0, extreme over d1); inf: rows
        along, across = (d0, d1) if ord in (1, -1) else (d1, d0)
        sums = A.abs().sum(along, keepdim=True)
        r = sums.amax(across, keepdim=True) if ord > 0 else sums.amin(across, keepdim=True)
        if not keepdim:
            r = r.squeeze(max(d0, d1)).squeeze(min(d0, d1))
        return r
    raise RuntimeError(f"linalg.matrix_norm: Order {ord} not supported.")


def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None, out=None):
    """``torch.linalg.norm``: a vector norm over one dim (or all, flattened, when neither
    ``ord`` nor ``dim`` is given), a matrix norm over two."""
    _no_out(out, "linalg.norm")
    dims = _dims(dim)
    if dims is not None:
        if len(dims) == 1:
            return vector_norm(A, 2 if ord is None else ord, dims, keepdim, dtype=dtype)
        if len(dims) == 2:
            return matrix_norm(A, "fro" if ord is None else ord, dims, keepdim, dtype=dtype)
        raise RuntimeError(f"linalg.norm: If dim is specified, it must be of length 1 or 2. Got {list(dims)}")
    if ord is None:
        return vector_norm(A, 2, None, keepdim, dtype=dtype)
    if len(A.shape) == 1 and not isinstance(ord, str):
        return vector_norm(A, ord, None, keepdim, dtype=dtype)
    if len(A.shape) in (1, 2):      # a string order on a vector: matrix_norm's error, as torch
        return matrix_norm(A, ord, (-2, -1), keepdim, dtype=dtype)
    raise RuntimeError(f"linalg.norm: If dim is not specified but ord is, the input must be 1D or 2D. "
                       f"Got {len(A.shape)}D.")


for _name in __all__[1:]:
    globals()[_name] = _front_end(globals()[_name], "linalg_" + _name)
del _name
