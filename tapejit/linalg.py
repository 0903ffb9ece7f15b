"""``tj.linalg``: torch.linalg's functions that tapejit has.  The factorisations and matrix
functions are registry ops (``tapejit/ops/linalg_small.py``: cholesky, triangular solve;
``tapejit/ops/linalg_dense.py``: inv, det, slogdet, solve, qr, svd, eigh, with their kernels
and gradients); their front ends are here (shapes, batching, torch's errors), with the norms,
written with existing ops (vector norms, 'fro') and ``svdvals`` ('nuc', 2, -2), giving
torch's results, gradients and grad_fn names."""
import math
from collections import namedtuple

import numpy as np

from tapejit.api import front_end as _front_end
from tapejit.ops import linalg_dense as _linalg_dense
from tapejit.ops.linalg_dense import EIGH, EIGH_PART, INV, DET, QR, QR_PART, SLOGDET, SLOGDET_PART, SOLVE, SVD, SVD_PART
from tapejit.ops.linalg_small import (LinAlgError, _batch_and_square, cholesky as _cholesky,
                                      solve_triangular as _solve_triangular)
from tapejit.ops.indexing import where as _where
from tapejit.ops.reduce import norm as _norm
from tapejit.recording import broadcast_shapes, eager, expand, on_tape, operand, record
from tapejit.shapes import numel
from tapejit.tape import current as _current, state as _state
from tapejit.tensor import Tensor, _concrete, _taped

__all__ = ["LinAlgError", "cholesky", "solve_triangular", "inv", "det", "slogdet", "solve", "norm", "vector_norm",
           "matrix_norm", "qr", "svd", "svdvals", "eigh", "eigvalsh"]


# torch.return_types' names and fields
linalg_slogdet = namedtuple("linalg_slogdet", ["sign", "logabsdet"])
slogdet_result = namedtuple("slogdet", ["sign", "logabsdet"])
linalg_qr = namedtuple("linalg_qr", ["Q", "R"])
linalg_svd = namedtuple("linalg_svd", ["U", "S", "Vh"])
linalg_eigh = namedtuple("linalg_eigh", ["eigenvalues", "eigenvectors"])

_TORCH_NAME = {"int64": "Long", "bool": "Bool", "int32": "Int", "int16": "Short", "int8": "Char",
               "uint8": "Byte", "float32": "Float", "float64": "Double"}


def _type_name(dt):
    return _TORCH_NAME.get(dt.name, dt.name)


def _check_float(A, fn):
    if not isinstance(A, Tensor):
        raise TypeError(f"{fn}(): argument 'A' (position 1) must be Tensor, not {type(A).__name__}")
    if not A._dtype.is_floating_point:
        raise RuntimeError(f"{fn}: Expected a floating point or complex tensor as input. Got {_type_name(A._dtype)}")


def _square_record(op, A, batch, n, shape):
    if not on_tape(A):
        return eager(_square_record, op, A, batch, n, shape)
    tape = _state.tape or _current()
    p = tape.add_ints((batch, n))
    return record(op, (A,), shape, A._dtype, p, 0)


def _region(op, A, ints, total, shape=None):
    """One record of ``op`` on ``A`` whose result region holds ``total`` values; the tensor
    is its first result of ``shape`` (the whole region, flat, when None)."""
    tape = _state.tape or _current()
    dt = A._dtype
    p = tape.add_ints(ints)
    rg = _state.grad and A._rg
    src = A._off if (A._tape is tape and A._dtype is dt) else operand(tape, A, dt)
    off = tape.alloc(dt.arena, total)
    tape.append(op.opcode * 2 + dt.arena, off, src if rg else ~src, -1, p, 0)
    shape = (total,) if shape is None else tuple(shape)
    return _taped(tape, off, shape, numel(shape), dt, rg)


def _layout(shapes):
    offsets, at = [], 0
    for s in shapes:
        offsets.append(at)
        at += max(numel(s), 1)      # distinct offsets: a part's flag byte is its own
    return offsets, at


def _decompose(op, part_op, A, head, shapes, wanted=None):
    """The results of a multi-result record, as tensors of ``shapes``: ``ints`` are ``head``
    then the offsets of results 1.. in the region.  ``wanted``: indices of the results the
    caller returns (others get no part record; None: all)."""
    offsets, total = _layout(shapes)
    ints = list(head) + offsets[1:]
    wanted = range(len(shapes)) if wanted is None else wanted
    if not on_tape(A):
        flat = eager(_region, op, A, ints, total)._data
        return [_concrete(flat[offsets[i]:offsets[i] + numel(shapes[i])].reshape(shapes[i]).copy())
                if i in wanted else None for i in range(len(shapes))]
    first = _region(op, A, ints, total, shapes[0])
    tape = first._tape
    outs = [first]
    for i in range(1, len(shapes)):
        if i not in wanted:
            outs.append(None)
            continue
        p = tape.add_ints((offsets[i], numel(shapes[i]), first._numel))
        outs.append(record(part_op, (first,), shapes[i], A._dtype, p, 0))
    return outs


def _batch_prefix(i, batched):
    return f"(Batch element {i}): " if batched else ""


def _readable():
    return _state.trace is None     # tj.compile cannot read values: there failures give NaN


def _getrf_zero_pivot(m):
    """LAPACK getrf's info for ``m``: the 1-based index of U's first zero diagonal element, 0
    if none (torch's singularity test for inv and solve)."""
    from scipy.linalg import get_lapack_funcs
    getrf, = get_lapack_funcs(("getrf",), (m,))
    _, _, info = getrf(m)
    return int(info)


def _raise_if_singular(fn, A, X, batch, n):
    """After ``inv``/``solve``: a result holding NaN comes from a non-finite input (torch
    gives NaN too) or a singular matrix (torch raises)."""
    x = X.detach().numpy()
    if not np.isnan(x).any():
        return
    a = A.detach().numpy().reshape(batch, n, n)
    bad = np.isnan(x.reshape(batch, -1)).any(axis=1)
    for i in np.flatnonzero(bad):
        if not np.isfinite(a[i]).all():
            continue
        info = _getrf_zero_pivot(a[i])
        if info > 0:
            where = _batch_prefix(i, len(A._shape) > 2)
            if fn == "linalg.inv":
                raise LinAlgError(f"linalg.inv: {where}The diagonal element {info} is zero, the inversion could "
                                  f"not be completed because the input matrix is singular.")
            raise LinAlgError(f"torch.linalg.solve: {where}The solver failed because the input matrix is singular.")


def _inv(A):
    """``torch.linalg.inv``: the inverse of each square matrix; a singular one raises
    ``LinAlgError`` with torch's text."""
    _check_float(A, "linalg.inv")
    batch, n = _batch_and_square(A, "linalg.inv")
    X = _square_record(INV, A, batch, n, A._shape)
    if _readable() and batch * n:
        _raise_if_singular("linalg.inv", A, X, batch, n)
    return X


def _det(A):
    _check_float(A, "linalg.det")
    batch, n = _batch_and_square(A, "linalg.det")
    return _square_record(DET, A, batch, n, A._shape[:-2])


def _slogdet(A, result=linalg_slogdet):
    _check_float(A, "linalg.slogdet")
    batch, n = _batch_and_square(A, "linalg.slogdet")
    shape = A._shape[:-2]
    sign, logabsdet = _decompose(SLOGDET, SLOGDET_PART, A, (batch, n), [shape, shape])
    return result(sign, logabsdet)


def _logdet(A):
    """``torch.logdet``: ``log(det(A))``, NaN where the determinant is negative; torch's
    composite: ``where`` of slogdet's results."""
    _check_float(A, "logdet")
    sign, logabsdet = _slogdet(A)
    return _where(sign < 0, float("nan"), logabsdet)


def _solve(A, B, left=True):
    """``torch.linalg.solve``: ``X = A^-1 B`` (``X A = B`` with ``left=False``); ``B`` is a
    batch of vectors when 1-D or of ``A``'s shape without the last dimension, as torch
    reads it; batch dimensions broadcast."""
    _check_float(A, "linalg.solve")
    if not isinstance(B, Tensor):
        raise TypeError(f"linalg.solve(): argument 'B' (position 2) must be Tensor, not {type(B).__name__}")
    if A._dtype is not B._dtype:
        raise RuntimeError(f"linalg.solve: Expected A and B to have the same dtype, but found A of type "
                           f"{_type_name(A._dtype)} and B of type {_type_name(B._dtype)} instead")
    _batch_and_square(A, "linalg.solve")
    n = A._shape[-1]
    # torch's reading: a vector, or a batch of them, when B is 1-D or A's shape minus its last dim
    vector = len(B._shape) == 1 or (len(B._shape) == len(A._shape) - 1 and B._shape == A._shape[:-1])
    if vector:      # a column, length x 1, both ways (X A = B is refused below)
        rows, k, tail = (B._shape[-1] if left else 1), 1, B._shape[-1:]
    else:
        if len(B._shape) < 2:
            raise RuntimeError("linalg.solve: The input tensor B must have at least 2 dimensions.")
        k = B._shape[-1] if left else B._shape[-2]
        rows = B._shape[-2] if left else B._shape[-1]
        tail = B._shape[-2:]
    if rows != n:
        shape_b = f"{B._shape[-1]}x1" if vector else f"{B._shape[-2]}x{B._shape[-1]}"
        equation = "AX = B" if left else "XA = B"
        raise RuntimeError(f"linalg.solve: Incompatible shapes of A and B for the equation {equation} "
                           f"({A._shape[-2]}x{A._shape[-1]} and {shape_b})")
    if vector and not left:
        raise RuntimeError("linalg.solve: Vector broadcasting of the left hand side is not supported for "
                           "left=False. In this case linalg.solve is equivalent to B / A.squeeze(-1)")
    batch_shape = broadcast_shapes("linalg.solve", A._shape[:-2], B._shape[:-len(tail)])
    if A._shape[:-2] != batch_shape:
        A = expand(A, batch_shape + (n, n))
    if B._shape[:-len(tail)] != batch_shape:
        B = expand(B, batch_shape + tail)
    batch = numel(batch_shape)
    X = _solve_record(A, B, batch, n, k, 1 if left else 0, batch_shape + tail)
    if _readable() and batch * n * k:
        _raise_if_singular("linalg.solve", A, X, batch, n)
    return X


def _solve_record(A, B, batch, n, k, left, shape):
    if not on_tape(A, B):
        return eager(_solve_record, A, B, batch, n, k, left, shape)
    tape = _state.tape or _current()
    p = tape.add_ints((batch, n, k, left))
    return record(SOLVE, (A, B), shape, A._dtype, p, 0)


def _matrix_batch(A, fn):
    if len(A._shape) < 2:
        raise RuntimeError(f"{fn}: The input tensor A must have at least 2 dimensions.")
    return numel(A._shape[:-2]), A._shape[-2], A._shape[-1]


def _qr(A, mode="reduced"):
    """``torch.linalg.qr``: Householder QR as LAPACK's (R's diagonal may be negative), so the
    factors are torch's.  ``mode='r'`` gives an empty Q, as torch; unlike torch its R stays
    differentiable (Q is computed anyway)."""
    if mode not in ("reduced", "complete", "r"):
        raise RuntimeError(f"qr received unrecognized mode '{mode}' but expected one of 'reduced' (default), "
                           f"'r', or 'complete'")
    _check_float(A, "linalg.qr")
    batch, m, n = _matrix_batch(A, "linalg.qr")
    k = min(m, n)
    kq = m if mode == "complete" else k
    if kq > k and _state.grad and A._rg:
        raise RuntimeError("The QR decomposition is not differentiable when mode='complete' and nrows > ncols.")
    bs = A._shape[:-2]
    Q, R = _decompose(QR, QR_PART, A, (batch, m, n, kq), [bs + (m, kq), bs + (kq, n)],
                      wanted=(1,) if mode == "r" else None)
    if mode == "r":
        Q = _concrete(np.empty((0,), A._dtype.np))
    return linalg_qr(Q, R)


def _raise_if_not_finite(fn, A, message, lower=None):
    """``lower``: the triangle a symmetric routine reads (True lower, False upper)."""
    if not _readable() or A._numel == 0:
        return
    a = A.detach().numpy()
    a = a.reshape((-1,) + a.shape[-2:])
    if lower is not None:
        a = np.tril(a) if lower else np.triu(a)
    ok = np.isfinite(a).all(axis=(1, 2))
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        raise LinAlgError(f"{fn}: {_batch_prefix(i, len(A._shape) > 2)}{message}")


_SVD_NOT_FINITE = "The algorithm failed to converge because the input matrix contained non-finite values."


def _svd(A, full_matrices, wanted):
    _check_float(A, "linalg.svd")
    batch, m, n = _matrix_batch(A, "linalg.svd")
    _raise_if_not_finite("linalg.svd", A, _SVD_NOT_FINITE)
    k = min(m, n)
    ku, kv = (m, n) if full_matrices else (k, k)
    bs = A._shape[:-2]
    return _decompose(SVD, SVD_PART, A, (batch, m, n, k, ku, kv), [bs + (k,), bs + (m, ku), bs + (kv, n)],
                      wanted)


def _svd_results(A, full_matrices=True):
    """``torch.linalg.svd``: ``(U, S, Vh)`` from LAPACK's gesdd (singular vectors are defined
    up to sign; with ``full_matrices`` the gradients of the columns past ``min(m, n)`` are
    ignored, as torch does)."""
    S, U, Vh = _svd(A, full_matrices, None)
    return linalg_svd(U, S, Vh)


def _svdvals(A):
    return _svd(A, False, (0,))[0]


def _eigh(A, UPLO, wanted):
    if UPLO not in ("L", "U"):
        raise RuntimeError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
    if not A._dtype.is_floating_point:
        raise NotImplementedError(f"\"linalg_eigh_cpu\" not implemented for '{_type_name(A._dtype)}'")
    batch, n = _batch_and_square(A, "linalg.eigh")
    _raise_if_not_finite("linalg.eigh", A, "The algorithm failed to converge because the input matrix is "
                         "ill-conditioned or has too many repeated eigenvalues (it has non-finite values).",
                         lower=UPLO == "L")
    bs = A._shape[:-2]
    return _decompose(EIGH, EIGH_PART, A, (batch, n, 1 if UPLO == "U" else 0), [bs + (n,), bs + (n, n)], wanted)


def _eigh_results(A, UPLO="L"):
    """``torch.linalg.eigh``: ascending eigenvalues and orthonormal eigenvectors (columns,
    each defined up to sign) of the symmetric matrix whose ``UPLO`` triangle is read."""
    L, Q = _eigh(A, UPLO, None)
    return linalg_eigh(L, Q)


def _eigvalsh(A, UPLO="L"):
    return _eigh(A, UPLO, (0,))[0]


# ---- torch.linalg's signatures ----------------------------------------------------------------

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
    return _inv(A)


def det(A, *, out=None):
    _no_out(out, "linalg.det")
    return _det(A)


def slogdet(A, *, out=None):
    _no_out(out, "linalg.slogdet")
    return _slogdet(A)


def solve(A, B, *, left=True, out=None):
    _no_out(out, "linalg.solve")
    return _solve(A, B, left=left)


def qr(A, mode="reduced", *, out=None):
    _no_out(out, "linalg.qr")
    return _qr(A, mode)


def svd(A, full_matrices=True, *, driver=None, out=None):
    _no_out(out, "linalg.svd")
    return _svd_results(A, full_matrices)


def svdvals(A, *, driver=None, out=None):
    _no_out(out, "linalg.svdvals")
    return _svdvals(A)


def eigh(A, UPLO="L", *, out=None):
    _no_out(out, "linalg.eigh")
    return _eigh_results(A, UPLO)


def eigvalsh(A, UPLO="L", *, out=None):
    _no_out(out, "linalg.eigvalsh")
    return _eigvalsh(A, UPLO)


# ---- norms ----------------------------------------------------------------------------------

def _cast(x, dtype, fn):
    _check_float(x, fn)
    if dtype is not None:
        x = x.to(dtype)
    return x


def _dims(dim):
    return None if dim is None else (dim,) if isinstance(dim, int) else tuple(dim)


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None, out=None):
    """``torch.linalg.vector_norm`` for every real ``ord``: p > 0 and inf are the ``norm``
    op (LinalgVectorNormBackward0); -inf, 0 and p < 0 are written with existing ops."""
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
    if not isinstance(dim, (tuple, list)):
        raise TypeError(f"linalg_matrix_norm(): argument 'dim' must be tuple of ints, not {type(dim).__name__}")
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
        s = _svdvals(A.permute(*rest, d0, d1))
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

# torch's inverse, det, slogdet and logdet (tapejit/ops/linalg_dense.py) run these
_linalg_dense.provide(inv=inv, det=_det, slogdet=_slogdet, logdet=_logdet, slogdet_result=slogdet_result)
