"""Cholesky factorisation and lower-triangular solves of small batched matrices, with
torch's gradients: what ``tj.distributions.MultivariateNormal`` needs.

A record works on a batch of contiguous row-major matrices, ``ints[p:p+3]`` =
``(batch, n, k)``: ``cholesky`` maps each ``n x n`` block to its lower factor (reading the
lower triangle only, as LAPACK's ``potrf('L')`` does for torch), ``solve_triangular`` maps a
lower ``n x n`` factor ``L`` and an ``n x k`` right-hand side ``B`` to ``X = L^-1 B``.
Backward rules are torch's: for ``L = cholesky(A)``, ``dA = L^-T Phi(L^T tril(dL)) L^-1``
with ``Phi`` symmetrising the lower triangle (half its diagonal), so ``dA`` is symmetric; for
the solve, ``dB = L^-T dX`` and ``dL = -tril(dB X^T)``.  The loops are plain O(n^3) code
meant for the small matrices of distributions (covariances of a few dozen dimensions); a
matrix that is not positive-definite gives NaN in the factor (the front end raises torch's
error first when it can read the value).  These kernels are in the "special" group.
"""
import numpy as np

from tapejit._jit import kernel
from tapejit.ops._kernel_helpers import acc
from tapejit.registry import define_kernel
from tapejit.samples import cases


def spd_factor(rng, shape):
    """A matrix M whose ``M @ M.T + n I`` (the samples' input) is well conditioned."""
    return rng.uniform(-1.0, 1.0, size=shape)


def lower_factor(rng, shape):
    """Square matrices get a diagonal far from 0 (the solve reads their lower triangle);
    right-hand sides are plain uniform values."""
    m = rng.uniform(-0.5, 0.5, size=shape)
    if len(shape) < 2 or shape[-1] != shape[-2]:
        return m
    return m + np.eye(shape[-1]) * rng.uniform(1.5, 2.5, size=shape[:-1])[..., None]


@kernel
def cholesky_forward(v, out, a, b, p, q, ints, floats):
    batch = ints[p]
    n = ints[p + 1]
    zero = floats[0]
    for k in range(batch):
        A = a + k * n * n
        L = out + k * n * n
        for i in range(n * n):
            v[L + i] = zero
        for j in range(n):
            s = v[A + j * n + j]
            for m in range(j):
                s -= v[L + j * n + m] * v[L + j * n + m]
            d = np.sqrt(s) if s > 0 else s * np.nan   # not positive-definite: NaN, as torch's cholesky_ex
            v[L + j * n + j] = d
            for i in range(j + 1, n):
                s = v[A + i * n + j]
                for m in range(j):
                    s -= v[L + i * n + m] * v[L + j * n + m]
                v[L + i * n + j] = s / d


@kernel
def cholesky_backward(v, g, flags, out, a, b, ma, mb, p, q, ints, floats):
    if ma == 0:
        return
    batch = ints[p]
    n = ints[p + 1]
    phi = np.empty((n, n), np.float64)
    y = np.empty((n, n), np.float64)
    for k in range(batch):
        L = out + k * n * n
        # Phi = symmetrised tril(L^T tril(gL)), its diagonal halved
        for i in range(n):
            for j in range(i + 1):
                s = 0.0
                for m in range(i, n):
                    s += v[L + m * n + i] * g[L + m * n + j]
                phi[i, j] = 0.5 * s
                phi[j, i] = 0.5 * s
        # Y = Phi L^-1 (row by row: y L = phi_r)
        for r in range(n):
            for j in range(n - 1, -1, -1):
                s = phi[r, j]
                for i in range(j + 1, n):
                    s -= y[r, i] * v[L + i * n + j]
                y[r, j] = s / v[L + j * n + j]
        # dA = L^-T Y (column by column: L^T z = y_c)
        for c in range(n):
            for i in range(n - 1, -1, -1):
                s = y[i, c]
                for m in range(i + 1, n):
                    s -= v[L + m * n + i] * phi[m, c]
                phi[i, c] = s / v[L + i * n + i]
        A = a + k * n * n
        for i in range(n):
            for j in range(n):
                acc(g, A + i * n + j, phi[i, j], ma)


CHOLESKY = define_kernel(
    "cholesky", "LinalgCholeskyExBackward0", cholesky_forward, cholesky_backward, saved="o", operands=1,
    group="special",
    samples=cases(("cholesky", lambda tj, m: tj.linalg.cholesky(m @ m.mT + 3.0 * tj.eye(3, dtype=m.dtype)),
                   [(3, 3)], spd_factor),
                  ("cholesky_batch", lambda tj, m: tj.linalg.cholesky(m @ m.mT + 4.0 * tj.eye(4, dtype=m.dtype)),
                   [(2, 4, 4)], spd_factor)))


@kernel
def solve_triangular_forward(v, out, a, b, p, q, ints, floats):
    batch = ints[p]
    n = ints[p + 1]
    kk = ints[p + 2]
    for t in range(batch):
        L = a + t * n * n
        B = b + t * n * kk
        X = out + t * n * kk
        for c in range(kk):
            for i in range(n):
                s = v[B + i * kk + c]
                for m in range(i):
                    s -= v[L + i * n + m] * v[X + m * kk + c]
                v[X + i * kk + c] = s / v[L + i * n + i]


@kernel
def solve_triangular_backward(v, g, flags, out, a, b, ma, mb, p, q, ints, floats):
    if ma == 0 and mb == 0:
        return
    batch = ints[p]
    n = ints[p + 1]
    kk = ints[p + 2]
    gb = np.empty((n, kk), np.float64)
    for t in range(batch):
        L = a + t * n * n
        B = b + t * n * kk
        X = out + t * n * kk
        # gB = L^-T gX: an upper-triangular solve with L^T
        for c in range(kk):
            for i in range(n - 1, -1, -1):
                s = 0.0 + g[X + i * kk + c]
                for m in range(i + 1, n):
                    s -= v[L + m * n + i] * gb[m, c]
                gb[i, c] = s / v[L + i * n + i]
        if mb != 0:
            for i in range(n):
                for c in range(kk):
                    acc(g, B + i * kk + c, gb[i, c], mb)
        if ma != 0:
            # gL = -tril(gB X^T); the upper triangle gets an exact zero
            for i in range(n):
                for j in range(n):
                    s = 0.0
                    if j <= i:
                        for c in range(kk):
                            s -= gb[i, c] * v[X + j * kk + c]
                    acc(g, L + i * n + j, s, ma)


SOLVE_TRIANGULAR = define_kernel(
    "solve_triangular", "LinalgSolveTriangularBackward0", solve_triangular_forward, solve_triangular_backward,
    saved="ao", group="special",
    samples=cases(("solve_triangular", lambda tj, m, x: tj.linalg.solve_triangular(m, x, upper=False),
                   [(3, 3), (3, 2)], lower_factor),
                  ("solve_triangular_batch",
                   lambda tj, m, x: tj.linalg.solve_triangular(m, x, upper=False),
                   [(2, 3, 3), (3, 1)], lower_factor)))


# ---- front ends ---------------------------------------------------------------------------
from tapejit.recording import eager, float_input, on_tape, record  # noqa: E402
from tapejit.tape import current as _current, state as _state  # noqa: E402


def _batch_and_square(A, fn, name="A"):
    shape = A._shape
    if len(shape) < 2:
        raise RuntimeError(f"{fn}: The input tensor {name} must have at least 2 dimensions.")
    if shape[-1] != shape[-2]:
        raise RuntimeError(f"{fn}: {name} must be batches of square matrices, but they are "
                           f"{shape[-2]} by {shape[-1]} matrices")
    batch = 1
    for s in shape[:-2]:
        batch *= s
    return batch, shape[-1]


def cholesky(A, upper=False):
    """``torch.linalg.cholesky``: the lower factor of each symmetric positive-definite matrix
    (its lower triangle is read); ``upper=True`` gives its transpose."""
    A = float_input(A)
    batch, n = _batch_and_square(A, "linalg.cholesky")
    if _state.trace is None:      # tj.compile cannot read the value: there a failure gives NaN
        _check_positive_definite(A)
    L = _cholesky(A, batch, n)
    return L.mT if upper else L


def _cholesky(A, batch, n):
    if not on_tape(A):
        return eager(_cholesky, A, batch, n)
    tape = _state.tape or _current()
    p = tape.add_ints((batch, n, n))
    return record(CHOLESKY, (A,), A._shape, A._dtype, p, 0)


class LinAlgError(RuntimeError):
    """torch.linalg.LinAlgError: a factorisation that cannot be completed."""


def _check_positive_definite(A):
    value = A.detach().numpy()
    if value.size == 0:
        return
    lower = np.tril(value)
    sym = lower + np.swapaxes(np.tril(value, -1), -1, -2)   # what the factorisation reads
    flat = sym.reshape((-1,) + sym.shape[-2:])
    for i, m in enumerate(flat):
        with np.errstate(all="ignore"):
            try:
                np.linalg.cholesky(m)
                continue
            except np.linalg.LinAlgError:
                pass
        order = _failing_minor(m)
        where = f"(Batch element {i}): " if flat.shape[0] > 1 else ""
        raise LinAlgError(f"linalg.cholesky: {where}The factorization could not be completed because the input "
                           f"is not positive-definite (the leading minor of order {order} is not "
                           f"positive-definite).")


def _failing_minor(m):
    for k in range(1, m.shape[0] + 1):
        try:
            np.linalg.cholesky(m[:k, :k])
        except np.linalg.LinAlgError:
            return k
    return m.shape[0]


def solve_triangular(A, B, *, upper, left=True, unitriangular=False):
    """``torch.linalg.solve_triangular`` for ``upper=False, left=True`` (``X = A^-1 B`` with A
    lower triangular; the upper triangle is not read), batches broadcast; other forms are
    written through it where they reduce to it, else refused."""
    from tapejit.recording import broadcast_shapes, expand
    if unitriangular:
        raise NotImplementedError("linalg.solve_triangular: unitriangular=True is not implemented in tapejit")
    if not left:
        # X A = B  <=>  A^T X^T = B^T
        return solve_triangular(A.mT, B.mT, upper=not upper).mT
    if upper:
        # an upper system is a lower one with rows and columns reversed
        n = A._shape[-1] if len(A._shape) >= 1 else 0
        rev = list(range(n - 1, -1, -1))
        Ar = A[..., rev, :][..., :, rev]
        return solve_triangular(Ar, B[..., rev, :], upper=False)[..., rev, :]
    A, B = float_input(A), float_input(B)
    if A._dtype is not B._dtype:
        raise RuntimeError(f"linalg.solve_triangular: Expected A and B to have the same dtype, but found "
                           f"A of type {A._dtype} and B of type {B._dtype} instead.")
    _, n = _batch_and_square(A, "linalg.solve_triangular")
    if len(B._shape) < 2:
        raise RuntimeError("linalg.solve_triangular: The input tensor B must have at least 2 dimensions.")
    if B._shape[-2] != n:
        raise RuntimeError(f"linalg.solve_triangular: Incompatible shapes of A and B for the equation AX = B "
                           f"({A._shape[-2]}x{A._shape[-1]} and {B._shape[-2]}x{B._shape[-1]})")
    batch_shape = broadcast_shapes("linalg.solve_triangular", A._shape[:-2], B._shape[:-2])
    k = B._shape[-1]
    if A._shape[:-2] != batch_shape:
        A = expand(A, batch_shape + (n, n))
    if B._shape[:-2] != batch_shape:
        B = expand(B, batch_shape + (n, k))
    batch = 1
    for s in batch_shape:
        batch *= s
    return _solve_lower(A, B, batch, n, k, batch_shape)


def _solve_lower(A, B, batch, n, k, batch_shape):
    if not on_tape(A, B):
        return eager(_solve_lower, A, B, batch, n, k, batch_shape)
    tape = _state.tape or _current()
    p = tape.add_ints((batch, n, k))
    return record(SOLVE_TRIANGULAR, (A, B), batch_shape + (n, k), A._dtype, p, 0)


# ---- derivative formulas (create_graph) ----------------------------------------------------
# One per op, applied by create_graph passes (tapejit/autograd/higher.py); plain Python,
# not compiled: see tapejit/ops/_formulas.py.  Kept last so define_ edits merge cleanly.

from tapejit.api import front_ends as tj  # noqa: E402  (tj's functions, read at call time)
from tapejit.ops import _formulas as _f  # noqa: E402
from tapejit.ops._formulas import derivative  # noqa: E402


@derivative(CHOLESKY)
def _d_cholesky(c):
    """torch's: ``gA = L^-T Phi(L^T gL) L^-1``, ``Phi`` the lower triangle symmetrised with
    its diagonal halved (the rule's), as recorded triangular solves."""
    batch, n = c.int(c.p), c.int(c.p + 1)
    L = c.out((batch, n, n))
    if not np.all(np.isfinite(_f.value(L))):
        raise _f.refuse(c, "a matrix that is not positive-definite (a NaN factor)")
    P = tj.tril(tj.matmul(L.mT, _f.shaped(c.g, (batch, n, n))))
    phi = 0.5 * (P + tj.tril(P, -1).mT)
    Z = solve_triangular(L.mT, phi, upper=True)
    return (solve_triangular(L.mT, Z.mT, upper=True).mT, None)


@derivative(SOLVE_TRIANGULAR)
def _d_solve_triangular(c):
    """``gB = L^-T gX`` (an upper solve with ``L^T``), ``gL = -tril(gB X^T)``."""
    batch, n, k = c.int(c.p), c.int(c.p + 1), c.int(c.p + 2)
    L = c.x(batch * n * n, (batch, n, n))
    gB = solve_triangular(L.mT, _f.shaped(c.g, (batch, n, k)), upper=True)
    gL = -tj.tril(tj.matmul(gB, c.out((batch, n, k)).mT)) if c.wants_a else None
    return (gL, gB if c.wants_b else None)
