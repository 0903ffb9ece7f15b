"""Dense matrix functions and factorisations of ``torch.linalg`` with torch's gradients:
``inv``, ``det``, ``slogdet``, ``solve``, ``qr``, ``svd`` and ``eigh``.

A record works on a batch of contiguous row-major matrices (its ``ints[p]`` = batch size,
then the sizes).  The forward kernels call LAPACK through Numba's ``np.linalg`` one matrix
at a time; the backward kernels are torch's formulas (``FunctionsManual.cpp``) written with
``np.dot`` on the same matrices.  Numba's ``np.linalg`` raises on non-finite input and on a
singular matrix (``inv``, ``solve``), which would abort a sweep with NumPy's error, so the
kernels test first and write NaN instead; the front ends raise torch's ``LinAlgError``
before recording when they can read the value (not inside ``tj.compile``).

Decompositions with several results (slogdet, qr, svd, eigh) are one record whose region
holds every result, the first of them the record's tensor; the others are taken out by a
``*_part`` record (same grad_fn name as torch's one node), as ``lstm_c`` takes an LSTM's
cell state (``rnn.py``): its backward zeroes the first result's adjoint if nothing else
wrote it and marks the flag byte at its own result, so the decomposition's backward knows
which results received a gradient.  That matters where torch's formula depends on which
gradients are defined: ``svdvals`` and ``eigvalsh`` of a matrix with repeated values have
a gradient, ``U``'s and ``Q``'s do not (division by the gaps).  So the first result is
always the one whose zero gradient changes nothing: S for svd, the eigenvalues for eigh.
These kernels are in their own group, "decomp": LAPACK calls are slow to compile.
"""
import numpy as np

from tapejit._jit import helper, kernel
from tapejit.ops._kernel_helpers import acc
from tapejit.registry import define_kernel, same_kernels
from tapejit.samples import cases

GROUP = "decomp"


def well_conditioned(rng, shape):
    """Square matrices with a dominant diagonal (far from singular), other shapes uniform."""
    m = rng.uniform(-1.0, 1.0, size=shape)
    if len(shape) >= 2 and shape[-1] == shape[-2]:
        m = m + np.eye(shape[-1]) * rng.choice([-1.0, 1.0], size=shape[:-1])[..., None] * 2.5
    return m


def spread_spectrum(rng, shape):
    """Matrices whose singular values (and, symmetrised, eigenvalues) are well apart: a
    random orthogonal product of values 1, 2.2, 3.4, ... (gradients divide by their gaps)."""
    *batch, m, n = shape
    out = np.empty(shape)
    for idx in np.ndindex(*batch):
        k = min(m, n)
        u, _ = np.linalg.qr(rng.normal(size=(m, m)))
        w, _ = np.linalg.qr(rng.normal(size=(n, n)))
        s = 1.0 + 1.2 * np.arange(k) + rng.uniform(0, 0.3, size=k)
        out[idx] = (u[:, :k] * s) @ w[:k, :]
    return out


# ---- shared helpers ---------------------------------------------------------------------

@helper
def load(v, start, rows, cols):
    m = np.empty((rows, cols), v.dtype)
    for i in range(rows):
        for j in range(cols):
            m[i, j] = v[start + i * cols + j]
    return m


@helper
def store(v, start, m):
    rows, cols = m.shape
    for i in range(rows):
        for j in range(cols):
            v[start + i * cols + j] = m[i, j]


@helper
def fill(v, start, size, value):
    for i in range(size):
        v[start + i] = value


@helper
def add_into(g, start, m, mode):
    rows, cols = m.shape
    for i in range(rows):
        for j in range(cols):
            acc(g, start + i * cols + j, m[i, j], mode)


@helper
def finite(m):
    for x in m.ravel():
        if not np.isfinite(x):
            return False
    return True


@helper
def invertible(m):
    """Whether LU finds no zero pivot (Numba's inv and solve raise there)."""
    sign, _ = np.linalg.slogdet(m)
    return sign != 0


@helper
def inverse_transpose(m):
    """``A^-T``; for a singular ``A`` the adjugate over zero (infinities, as torch's LU
    solve gives), from the SVD."""
    if invertible(m):
        return np.ascontiguousarray(np.linalg.inv(m).T)
    cof = cofactors_svd(m)
    return cof / np.zeros_like(cof)


@helper
def cofactors_svd(m):
    """The cofactor matrix ``det(A) A^-T`` of any square ``A`` (torch's singular-case path):
    with ``A = U S Vh``, ``det(U) det(Vh) U diag(prod_{j != i} S_j) Vh``."""
    u, s, vh = np.linalg.svd(m, True)
    n = s.shape[0]
    c = np.ones(n, m.dtype)
    for i in range(n):
        for j in range(n):
            if j != i:
                c[i] *= s[j]
    cof = np.dot(u * c, vh)
    if np.linalg.det(u) * np.linalg.det(vh) < 0:   # det(U) det(Vh) = +-1 (a float64 for float32 input)
        cof = -cof
    return cof


@helper
def solve_upper_right(b, r):
    """``X R^T = B`` for upper-triangular ``R`` (k x k): ``X = B R^-T``, by back substitution
    (a zero on R's diagonal gives infinities, never an exception)."""
    rows, k = b.shape
    x = np.empty((rows, k), b.dtype)
    for i in range(rows):
        for j in range(k - 1, -1, -1):
            s = b[i, j]
            for c in range(j + 1, k):
                s -= x[i, c] * r[j, c]
            x[i, j] = s / r[j, j]
    return x


@helper
def qr_square_backward(gq, gr, q, r):
    """torch's QR gradient for ``m >= n`` (``k = n``): ``(gQ + Q copyltu(M)) R^-T`` with
    ``M = R gR^T - gQ^T Q`` and ``copyltu(M) = tril(M) + tril(M, -1)^T``."""
    mm = np.dot(r, np.ascontiguousarray(gr.T)) - np.dot(np.ascontiguousarray(gq.T), q)
    k = mm.shape[0]
    sym = np.empty((k, k), mm.dtype)
    for i in range(k):
        for j in range(k):
            sym[i, j] = mm[i, j] if j <= i else mm[j, i]
    return solve_upper_right(gq + np.dot(q, sym), r)


# ---- inv --------------------------------------------------------------------------------

@kernel
def inv_forward(v, out, a, b, p, q, ints, floats):
    batch = ints[p]
    n = ints[p + 1]
    for t in range(batch):
        if n == 0:
            continue
        m = load(v, a + t * n * n, n, n)
        if finite(m) and invertible(m):
            store(v, out + t * n * n, np.linalg.inv(m))
        else:
            fill(v, out + t * n * n, n * n, np.nan)


@kernel
def inv_backward(v, g, flags, out, a, b, ma, mb, p, q, ints, floats):
    # gA = -X^T gX X^T
    if ma == 0:
        return
    batch = ints[p]
    n = ints[p + 1]
    for t in range(batch):
        x = load(v, out + t * n * n, n, n)
        gx = load(g, out + t * n * n, n, n)
        xt = np.ascontiguousarray(x.T)
        add_into(g, a + t * n * n, -np.dot(np.dot(xt, gx), xt), ma)


INV = define_kernel(
    "inv", "LinalgInvExBackward0", inv_forward, inv_backward, saved="o", operands=1, group=GROUP,
    samples=cases(("inv", lambda tj, m: tj.linalg.inv(m), [(3, 3)], well_conditioned),
                  ("inv_batch", lambda tj, m: tj.linalg.inv(m), [(2, 3, 3)], well_conditioned),
                  ("inverse_method", lambda tj, m: m.inverse(), [(2, 2)], well_conditioned)))


# ---- det --------------------------------------------------------------------------------

@kernel
def det_forward(v, out, a, b, p, q, ints, floats):
    batch = ints[p]
    n = ints[p + 1]
    for t in range(batch):
        m = load(v, a + t * n * n, n, n)
        if n == 0:
            v[out + t] = 1.0
        elif finite(m):
            v[out + t] = np.linalg.det(m)
        else:
            v[out + t] = np.nan


@kernel
def det_backward(v, g, flags, out, a, b, ma, mb, p, q, ints, floats):
    # gA = g det(A) A^-T, the cofactors; from the SVD where A is singular, as torch
    if ma == 0:
        return
    batch = ints[p]
    n = ints[p + 1]
    for t in range(batch):
        m = load(v, a + t * n * n, n, n)
        gd = g[out + t]
        if not finite(m):
            cof = np.full((n, n), np.nan, m.dtype)
        elif invertible(m):
            cof = np.ascontiguousarray(np.linalg.inv(m).T) * v[out + t]
        else:
            cof = cofactors_svd(m)
        add_into(g, a + t * n * n, cof * gd, ma)


DET = define_kernel(
    "det", "LinalgDetBackward0", det_forward, det_backward, saved="ao", operands=1, group=GROUP,
    samples=cases(("det", lambda tj, m: tj.linalg.det(m), [(3, 3)], well_conditioned),
                  ("det_batch", lambda tj, m: tj.det(m), [(2, 2, 3, 3)], well_conditioned),
                  ("det_method", lambda tj, m: m.det(), [(4, 4)], well_conditioned),
                  ("det_singular", lambda tj, m: tj.linalg.det(m[..., :1] * m[..., :1, :]), [(3, 3)],
                   well_conditioned)))


# ---- multi-result records: the part kernels -------------------------------------------------

@kernel
def part_forward(v, out, a, b, p, q, ints, floats):
    src = a + ints[p]
    for i in range(ints[p + 1]):
        v[out + i] = v[src + i]


@kernel
def part_backward(v, g, flags, out, a, b, ma, mb, p, q, ints, floats):
    # [offset of the result in the record's region, its size, the first result's size]
    if ma == 0:
        return
    if ma == 1:   # the first gradient to reach the record: its first result's adjoint is zero
        fill(g, a, ints[p + 2], 0.0)
    m = a + ints[p]
    n = ints[p + 1]
    if n == 0:
        return
    if flags[m] == 0:
        flags[m] = 1
        for i in range(n):
            g[m + i] = g[out + i]
    else:
        for i in range(n):
            g[m + i] += g[out + i]


@helper
def part_gradient(g, flags, start, rows, cols):
    """The adjoint of a result taken out by a part record, or None if none arrived; clears
    the part's mark."""
    if rows * cols == 0 or flags[start] == 0:
        return False, np.zeros((rows, cols), g.dtype)
    flags[start] = 0
    return True, load(g, start, rows, cols)


# ---- slogdet ----------------------------------------------------------------------------

@kernel
def slogdet_forward(v, out, a, b, p, q, ints, floats):
    # region: [sign (batch) | logabsdet (batch) at ints[p + 2]]
    batch = ints[p]
    n = ints[p + 1]
    lad = out + ints[p + 2]
    for t in range(batch):
        m = load(v, a + t * n * n, n, n)
        if n == 0:
            v[out + t] = 1.0
            v[lad + t] = 0.0
        elif finite(m):
            sign, logabs = np.linalg.slogdet(m)
            v[out + t] = sign
            v[lad + t] = logabs
        else:   # torch's values for a NaN matrix
            v[out + t] = 0.0
            v[lad + t] = np.nan


@kernel
def slogdet_backward(v, g, flags, out, a, b, ma, mb, p, q, ints, floats):
    # The sign is piecewise constant: only logabsdet's gradient counts, gA = g A^-T.
    batch = ints[p]
    n = ints[p + 1]
    has, glog = part_gradient(g, flags, out + ints[p + 2], 1, batch)
    if ma == 0 or not has:
        if ma == 1:
            fill(g, a, batch * n * n, 0.0)
        return
    for t in range(batch):
        m = load(v, a + t * n * n, n, n)
        if finite(m):
            grad = inverse_transpose(m) * glog[0, t]
        else:
            grad = np.full((n, n), np.nan, m.dtype)
        add_into(g, a + t * n * n, grad, ma)


SLOGDET = define_kernel(
    "slogdet", "LinalgSlogdetBackward0", slogdet_forward, slogdet_backward, saved="a", operands=1, group=GROUP,
    samples=cases(("slogdet_logabsdet", lambda tj, m: tj.linalg.slogdet(m).logabsdet, [(3, 3)], well_conditioned),
                  ("slogdet_sign", lambda tj, m: tj.linalg.slogdet(m)[0], [(2, 2)], well_conditioned)))
SLOGDET_PART = define_kernel(
    "slogdet_part", "LinalgSlogdetBackward0", part_forward, part_backward, saves=False, operands=1, group=GROUP,
    samples=cases(("slogdet_batch", lambda tj, m: tj.linalg.slogdet(m)[1], [(2, 3, 3)], well_conditioned),
                  ("slogdet_fn", lambda tj, m: tj.slogdet(m).logabsdet, [(2, 2)], well_conditioned)))


# ---- solve ------------------------------------------------------------------------------

@kernel
def solve_forward(v, out, a, b, p, q, ints, floats):
    # ints[p + 3]: 1 for A X = B (B, X: n x k), 0 for X A = B (B, X: k x n, solved as
    # A^T X^T = B^T); a 1-D B is a column (left) or a row (right) of the same memory
    batch = ints[p]
    n = ints[p + 1]
    k = ints[p + 2]
    left = ints[p + 3] != 0
    for t in range(batch):
        if n * k == 0:
            continue
        m = load(v, a + t * n * n, n, n)
        if left:
            rhs = load(v, b + t * n * k, n, k)
        else:
            m = np.ascontiguousarray(m.T)
            rhs = np.ascontiguousarray(load(v, b + t * n * k, k, n).T)
        if finite(m) and finite(rhs) and invertible(m):
            x = np.linalg.solve(m, rhs)
            store(v, out + t * n * k, x if left else np.ascontiguousarray(x.T))
        else:
            fill(v, out + t * n * k, n * k, np.nan)


@kernel
def solve_backward(v, g, flags, out, a, b, ma, mb, p, q, ints, floats):
    # A X = B: gB = A^-T gX, gA = -gB X^T;  X A = B: gB = gX A^-T, gA = -X^T gB
    if ma == 0 and mb == 0:
        return
    batch = ints[p]
    n = ints[p + 1]
    k = ints[p + 2]
    left = ints[p + 3] != 0
    for t in range(batch):
        m = load(v, a + t * n * n, n, n)
        if left:
            gx = load(g, out + t * n * k, n, k)
            m = np.ascontiguousarray(m.T)
        else:
            gx = np.ascontiguousarray(load(g, out + t * n * k, k, n).T)
        # both cases solve M y = gX^(T) with M = A^T (left) or A (right)
        if finite(m) and finite(gx) and invertible(m):
            y = np.linalg.solve(m, gx)
        elif finite(m):
            y = np.dot(inverse_transpose(np.ascontiguousarray(m.T)), gx)
        else:
            y = np.full((n, k), np.nan, m.dtype)
        gb = np.ascontiguousarray(y) if left else np.ascontiguousarray(y.T)
        if mb != 0:
            add_into(g, b + t * n * k, gb, mb)
        if ma != 0:
            if left:
                x = load(v, out + t * n * k, n, k)
                add_into(g, a + t * n * n, -np.dot(gb, np.ascontiguousarray(x.T)), ma)
            else:
                x = load(v, out + t * n * k, k, n)
                add_into(g, a + t * n * n, -np.dot(np.ascontiguousarray(x.T), gb), ma)


SOLVE = define_kernel(
    "solve", "LinalgSolveExBackward0", solve_forward, solve_backward, saved="ao", group=GROUP,
    samples=cases(("solve", lambda tj, m, x: tj.linalg.solve(m, x), [(3, 3), (3, 2)], well_conditioned),
                  ("solve_vector", lambda tj, m, x: tj.linalg.solve(m, x), [(3, 3), (3,)], well_conditioned),
                  ("solve_batch", lambda tj, m, x: tj.linalg.solve(m, x), [(2, 3, 3), (3, 1)], well_conditioned),
                  ("solve_left_false", lambda tj, m, x: tj.linalg.solve(m, x, left=False), [(3, 3), (2, 3)],
                   well_conditioned)))


# ---- qr ---------------------------------------------------------------------------------

@kernel
def qr_forward(v, out, a, b, p, q, ints, floats):
    # region: [Q (batch, m, kq) | R (batch, kq, n)]; kq = min(m, n), or m for mode='complete'
    batch = ints[p]
    m = ints[p + 1]
    n = ints[p + 2]
    kq = ints[p + 3]
    r_at = out + ints[p + 4]
    for t in range(batch):
        mat = load(v, a + t * m * n, m, n)
        qo = out + t * m * kq
        ro = r_at + t * kq * n
        if m * n == 0:
            fill(v, qo, m * kq, 0.0)
            for i in range(min(m, kq)):
                v[qo + i * kq + i] = 1.0
            fill(v, ro, kq * n, 0.0)
        elif not finite(mat):
            fill(v, qo, m * kq, np.nan)
            fill(v, ro, kq * n, np.nan)
        elif kq > min(m, n):
            # complete Q of a tall matrix: the Householder QR of [A | I] has A's reflectors
            # first, so its Q extends A's reduced Q, and its first n columns of R are A's R
            wide = np.zeros((m, n + m), mat.dtype)
            wide[:, :n] = mat
            for i in range(m):
                wide[i, n + i] = 1.0
            qf, rf = np.linalg.qr(wide)
            store(v, qo, qf)
            store(v, ro, np.ascontiguousarray(rf[:, :n]))
        else:
            qf, rf = np.linalg.qr(mat)
            store(v, qo, qf)
            store(v, ro, rf)


@kernel
def qr_backward(v, g, flags, out, a, b, ma, mb, p, q, ints, floats):
    # torch's linalg_qr_backward, reduced mode (the front end refuses gradients otherwise).
    # m >= n: qr_square_backward.  m < n, A = Q [X | Y]: gX from (gQ + Y gY^T, gR_X) as
    # for a square matrix, gY = Q gR_Y.
    batch = ints[p]
    m = ints[p + 1]
    n = ints[p + 2]
    k = ints[p + 3]
    r_at = out + ints[p + 4]
    hasr = batch * k * n > 0 and flags[r_at] != 0
    if hasr:
        flags[r_at] = 0
    if ma == 0:
        return
    for t in range(batch):
        qm = load(v, out + t * m * k, m, k)
        rm = load(v, r_at + t * k * n, k, n)
        gq = load(g, out + t * m * k, m, k)
        gr = load(g, r_at + t * k * n, k, n) if hasr else np.zeros((k, n), qm.dtype)
        if m >= n:
            ga = qr_square_backward(gq, gr, qm, rm)
        else:
            x = np.ascontiguousarray(rm[:, :m])
            gy = np.ascontiguousarray(gr[:, m:])
            y = np.dot(qm, np.ascontiguousarray(rm[:, m:]))
            ga = np.empty((m, n), qm.dtype)
            ga[:, :m] = qr_square_backward(gq + np.dot(y, np.ascontiguousarray(gy.T)),
                                           np.ascontiguousarray(gr[:, :m]), qm, x)
            ga[:, m:] = np.dot(qm, gy)
        add_into(g, a + t * m * n, ga, ma)


QR = define_kernel(
    "qr", "LinalgQrBackward0", qr_forward, qr_backward, saved="o", operands=1, group=GROUP,
    samples=cases(("qr_q", lambda tj, m: tj.linalg.qr(m).Q, [(4, 3)], well_conditioned),
                  ("qr_q_wide", lambda tj, m: tj.linalg.qr(m)[0], [(2, 3)], well_conditioned)))
QR_PART = define_kernel(
    "qr_part", "LinalgQrBackward0", part_forward, part_backward, saves=False, operands=1, group=GROUP,
    samples=cases(("qr_r", lambda tj, m: tj.linalg.qr(m).R, [(4, 3)], well_conditioned),
                  ("qr_r_square_batch", lambda tj, m: tj.linalg.qr(m)[1], [(2, 3, 3)], well_conditioned),
                  ("qr_r_wide", lambda tj, m: tj.linalg.qr(m).R, [(2, 4)], well_conditioned)))


def _squared(x):
    return x * x


# ---- svd --------------------------------------------------------------------------------

@kernel
def svd_forward(v, out, a, b, p, q, ints, floats):
    # region: [S (batch, k) | U (batch, m, ku) | Vh (batch, kv, n)]; ku = kv = k = min(m, n),
    # or m and n with full_matrices
    batch = ints[p]
    m = ints[p + 1]
    n = ints[p + 2]
    k = ints[p + 3]
    ku = ints[p + 4]
    kv = ints[p + 5]
    u_at = out + ints[p + 6]
    vh_at = out + ints[p + 7]
    for t in range(batch):
        mat = load(v, a + t * m * n, m, n)
        so = out + t * k
        uo = u_at + t * m * ku
        vo = vh_at + t * kv * n
        if m * n == 0:
            fill(v, uo, m * ku, 0.0)
            for i in range(min(m, ku)):
                v[uo + i * ku + i] = 1.0
            fill(v, vo, kv * n, 0.0)
            for i in range(min(kv, n)):
                v[vo + i * n + i] = 1.0
        elif finite(mat):
            u, s, vh = np.linalg.svd(mat, ku > k or kv > k)
            for i in range(k):
                v[so + i] = s[i]
            store(v, uo, u)
            store(v, vo, vh)
        else:
            fill(v, so, k, np.nan)
            fill(v, uo, m * ku, np.nan)
            fill(v, vo, kv * n, np.nan)


@kernel
def svd_backward(v, g, flags, out, a, b, ma, mb, p, q, ints, floats):
    # torch's svd_backward on U[:, :k], S, Vh[:k] (with full_matrices the other singular
    # vectors are arbitrary bases and their gradients are ignored, as torch does):
    # without gU and gVh, gA = U diag(gS) Vh; else, with E_ij = S_j^2 - S_i^2 (1 on the
    # diagonal) and skew(X) = X - X^T,
    #   gA = U [(skew(U^T gU) S + S skew(Vh gVh^T)) / E + diag(gS)] Vh
    # plus (I - U U^T) gU S^-1 Vh for m > n, U S^-1 gVh (I - V Vh) for m < n.
    batch = ints[p]
    m = ints[p + 1]
    n = ints[p + 2]
    k = ints[p + 3]
    ku = ints[p + 4]
    kv = ints[p + 5]
    u_at = out + ints[p + 6]
    vh_at = out + ints[p + 7]
    hasu, gu_all = part_gradient(g, flags, u_at, batch * m, ku)
    hasv, gv_all = part_gradient(g, flags, vh_at, batch * kv, n)
    if ma == 0:
        return
    for t in range(batch):
        s = np.empty(k, v.dtype)
        gs = np.empty(k, v.dtype)
        for i in range(k):
            s[i] = v[out + t * k + i]
            gs[i] = g[out + t * k + i]
        u = np.ascontiguousarray(load(v, u_at + t * m * ku, m, ku)[:, :k])
        vh = np.ascontiguousarray(load(v, vh_at + t * kv * n, kv, n)[:k, :])
        gu = np.ascontiguousarray(gu_all[t * m:(t + 1) * m, :k])
        gvh = np.ascontiguousarray(gv_all[t * kv:t * kv + k, :])
        inner = np.zeros((k, k), v.dtype)
        if hasu or hasv:
            if hasu:
                uhgu = np.dot(np.ascontiguousarray(u.T), gu)
                uhgu = uhgu - np.ascontiguousarray(uhgu.T)
            if hasv:
                vhgv = np.dot(vh, np.ascontiguousarray(gvh.T))
                vhgv = vhgv - np.ascontiguousarray(vhgv.T)
            for i in range(k):
                for j in range(k):
                    if i == j:
                        continue
                    e = s[j] * s[j] - s[i] * s[i]
                    x = 0.0 * s[0]
                    if hasu:
                        x += uhgu[i, j] * s[j]
                    if hasv:
                        x += s[i] * vhgv[i, j]
                    inner[i, j] = x / e
        for i in range(k):
            inner[i, i] = gs[i]
        if m > n and hasu:
            ga = np.dot(u, inner)
            gus = gu / s.reshape((1, k))
            ga = ga + gus - np.dot(u, np.dot(np.ascontiguousarray(u.T), gus))
            ga = np.dot(ga, vh)
        elif m < n and hasv:
            ga = np.dot(inner, vh)
            sgv = gvh / s.reshape((k, 1))
            ga = ga + sgv - np.dot(np.dot(sgv, np.ascontiguousarray(vh.T)), vh)
            ga = np.dot(u, ga)
        else:
            ga = np.dot(np.dot(u, inner), vh)
        add_into(g, a + t * m * n, ga, ma)


SVD = define_kernel(
    "svd", "LinalgSvdBackward0", svd_forward, svd_backward, saved="o", operands=1, group=GROUP,
    samples=cases(("svdvals", lambda tj, m: tj.linalg.svdvals(m), [(3, 3)], spread_spectrum),
                  ("svd_s_tall", lambda tj, m: tj.linalg.svd(m, full_matrices=False).S, [(4, 2)], spread_spectrum),
                  ("svd_s_wide_batch", lambda tj, m: tj.linalg.svd(m)[1], [(2, 2, 3)], spread_spectrum)))
SVD_PART = define_kernel(
    "svd_part", "LinalgSvdBackward0", part_forward, part_backward, saves=False, operands=1, group=GROUP,
    # singular vectors are defined up to sign: the samples square them (LAPACK builds differ)
    samples=cases(("svd_u_squared", lambda tj, m: _squared(tj.linalg.svd(m, full_matrices=False).U), [(4, 3)],
                   spread_spectrum),
                  ("svd_vh_squared", lambda tj, m: _squared(tj.linalg.svd(m, full_matrices=False).Vh), [(2, 4)],
                   spread_spectrum),
                  ("svd_full_u_squared", lambda tj, m: _squared(tj.linalg.svd(m).U[..., :2]), [(3, 2)],
                   spread_spectrum)))


# ---- eigh -------------------------------------------------------------------------------

@kernel
def eigh_forward(v, out, a, b, p, q, ints, floats):
    # region: [eigenvalues (batch, n) | eigenvectors (batch, n, n)]; the triangle named by
    # ints[p + 2] (0 lower, 1 upper) is read, as LAPACK's syevd('L' / 'U') does for torch
    batch = ints[p]
    n = ints[p + 1]
    upper = ints[p + 2] != 0
    q_at = out + ints[p + 3]
    for t in range(batch):
        if n == 0:
            continue
        raw = load(v, a + t * n * n, n, n)
        sym = np.empty((n, n), raw.dtype)
        for i in range(n):
            for j in range(n):
                lower_half = j <= i
                sym[i, j] = raw[i, j] if lower_half != upper or i == j else raw[j, i]
        if finite(sym):
            w, z = np.linalg.eigh(sym)
            for i in range(n):
                v[out + t * n + i] = w[i]
            store(v, q_at + t * n * n, z)
        else:
            fill(v, out + t * n, n, np.nan)
            fill(v, q_at + t * n * n, n * n, np.nan)


@kernel
def eigh_backward(v, g, flags, out, a, b, ma, mb, p, q, ints, floats):
    # torch's linalg_eig_backward for Hermitian input: gA = V M V^T with M's diagonal gL
    # and, when the eigenvectors have a gradient, M_ij = skew_ij / (L_j - L_i) off it,
    # skew = (V^T gV - gV^T V) / 2
    batch = ints[p]
    n = ints[p + 1]
    q_at = out + ints[p + 3]
    hasv, gv_all = part_gradient(g, flags, q_at, batch * n, n)
    if ma == 0:
        return
    for t in range(batch):
        vecs = load(v, q_at + t * n * n, n, n)
        inner = np.zeros((n, n), v.dtype)
        if hasv:
            gv = np.ascontiguousarray(gv_all[t * n:(t + 1) * n, :])
            vhgv = np.dot(np.ascontiguousarray(vecs.T), gv)
            for i in range(n):
                for j in range(n):
                    if i != j:
                        inner[i, j] = 0.5 * (vhgv[i, j] - vhgv[j, i]) / (v[out + t * n + j] - v[out + t * n + i])
        for i in range(n):
            inner[i, i] = g[out + t * n + i]
        add_into(g, a + t * n * n, np.dot(np.dot(vecs, inner), np.ascontiguousarray(vecs.T)), ma)


def _symmetric(tj, m):
    return (m + m.mT) * 0.5


EIGH = define_kernel(
    "eigh", "LinalgEighBackward0", eigh_forward, eigh_backward, saved="o", operands=1, group=GROUP,
    samples=cases(("eigvalsh", lambda tj, m: tj.linalg.eigvalsh(_symmetric(tj, m)), [(3, 3)], spread_spectrum),
                  ("eigh_values_batch", lambda tj, m: tj.linalg.eigh(_symmetric(tj, m))[0], [(2, 3, 3)],
                   spread_spectrum),
                  ("eigvalsh_upper", lambda tj, m: tj.linalg.eigvalsh(_symmetric(tj, m), UPLO="U"), [(3, 3)],
                   spread_spectrum)))
EIGH_PART = define_kernel(
    "eigh_part", "LinalgEighBackward0", part_forward, part_backward, saves=False, operands=1, group=GROUP,
    samples=cases(("eigh_vectors_squared", lambda tj, m: _squared(tj.linalg.eigh(_symmetric(tj, m)).eigenvectors),
                   [(3, 3)], spread_spectrum)))


# ---- torch's functions and Tensor methods outside torch.linalg ---------------------------------
# Their work is done by the front ends of tapejit/linalg.py (shapes, batching, torch's
# errors), which sits above ops/ and hands them over at import with ``provide``.
from tapejit.api import export  # noqa: E402


class _Above:
    __slots__ = ("inv", "det", "slogdet", "logdet", "slogdet_result")


above = _Above()


def provide(**functions):
    for name, function in functions.items():
        setattr(above, name, function)


@export(method=True)
def inverse(input):
    return above.inv(input)


@export(method=True)
def det(input):
    return above.det(input)


@export(method=True)
def slogdet(input):
    return above.slogdet(input, above.slogdet_result)


@export(method=True)
def logdet(input):
    return above.logdet(input)


# ---- derivative formulas (create_graph) ----------------------------------------------------
# One per op, applied by create_graph passes (tapejit/autograd/higher.py); plain Python,
# not compiled: see tapejit/ops/_formulas.py.  Kept last so define_ edits merge cleanly.

from tapejit.api import front_ends as tj  # noqa: E402  (tj's functions, read at call time)
from tapejit.ops import _formulas as _f  # noqa: E402
from tapejit.ops._formulas import derivative  # noqa: E402


@derivative(INV)
def _d_inv(c):
    """-Y^T G Y^T with Y = inv(A); a singular (NaN) inverse raises."""
    batch, n = c.int(c.p), c.int(c.p + 1)
    y = c.out((batch, n, n))
    if not np.all(np.isfinite(_f.value(y))):
        raise _f.refuse(c, "a singular or non-finite matrix")
    yt = y.transpose(1, 2)
    return (-tj.matmul(tj.matmul(yt, _f.shaped(c.g, (batch, n, n))), yt), None)


@derivative(DET)
def _d_det(c):
    """g det(A) inv(A)^T; a singular matrix (det 0: torch goes through an SVD) raises."""
    batch, n = c.int(c.p), c.int(c.p + 1)
    x = c.x(batch * n * n, (batch, n, n))
    d = _f.value(c.out())
    if not np.all(np.isfinite(d)) or np.any(d == 0.0):
        raise _f.refuse(c, "a singular or non-finite matrix")
    scale = _f.shaped(c.g * c.out(), (batch, 1, 1))
    return (scale * inverse(x).transpose(1, 2), None)


def _solved(A, B, left):
    """``A X = B`` (``X A = B`` unless ``left``) of ``(batch, n, n)`` and ``(batch, n, k)``
    (``(batch, k, n)``): a solve record, as ``linalg.solve`` writes it."""
    from tapejit.recording import eager, on_tape, record
    from tapejit.tape import current, state
    if not on_tape(A, B):
        return eager(_solved, A, B, left)
    batch, n = A.shape[0], A.shape[1]
    tape = state.tape or current()
    p = tape.add_ints((batch, n, B.shape[2] if left else B.shape[1], int(left)))
    return record(SOLVE, (A, B), tuple(B.shape), A._dtype, p, 0)


@derivative(SOLVE)
def _d_solve(c):
    """``A X = B``: ``gB = A^-T gX``, ``gA = -gB X^T``; ``X A = B``: ``gB = gX A^-T``,
    ``gA = -X^T gB`` (the rule's, with recorded solves)."""
    batch, n, k, left = (c.int(c.p + i) for i in range(4))
    shape = (batch, n, k) if left else (batch, k, n)
    A = c.x(batch * n * n, (batch, n, n))
    if not np.all(np.isfinite(_f.value(c.out(shape)))):
        raise _f.refuse(c, "a singular or non-finite system")
    gB = _solved(A.mT, _f.shaped(c.g, shape), left)
    gA = None
    if c.wants_a:
        X = c.out(shape)
        gA = -tj.matmul(gB, X.mT) if left else -tj.matmul(X.mT, gB)
    return (gA, gB if c.wants_b else None)


@derivative(SLOGDET)
def _d_slogdet(c):
    """The sign is piecewise constant: its gradient is zero (torch's)."""
    return (_f.zeros(c.int(c.p) * c.int(c.p + 1) ** 2, c.dt), None)


@derivative(SLOGDET_PART)
def _d_slogdet_part(c):
    """logabsdet: ``g A^-T``, to the matrix of the slogdet record it is taken from."""
    op, a, _, p, _ = _f.producer(c)
    batch, n = int(c.tape.ints[p]), int(c.tape.ints[p + 1])
    if not np.all(np.isfinite(_f.value(c.out()))):
        raise _f.refuse(c, "a singular or non-finite matrix")
    A = _f.slot(c.tape, c.arena, a, batch * n * n, (batch, n, n))
    return [(a, inverse(A).mT * _f.shaped(c.g, (batch, 1, 1)))]


def _on_this_tape(c):
    """A formula recording a part record over ``c``'s region must record on the region's
    tape (a load from another tape copies the first result only)."""
    from tapejit.tape import current, state
    if (state.tape or current()) is not c.tape:
        raise _f.refuse(c, "a create_graph pass recording on another thread's or an older tape")


def _part_of(c, part_op, start, size, shape, first=None):
    """A new part record of the region of ``c``'s record (of ``first``, its first result,
    for a part record's ``c``), as ``linalg._decompose`` writes one: the result at
    ``start`` as a differentiable tensor of ``shape``."""
    from tapejit.recording import record
    _on_this_tape(c)
    first = c.out() if first is None else first
    p = c.tape.add_ints((start, size, first._numel))
    return record(part_op, (first,), shape, c.dt, p, 0)


@derivative(EIGH)
def _d_eigh(c):
    """The eigenvalues' term of torch's formula: ``V diag(gL) V^T`` (the eigenvectors' term
    is their part record's formula: the gradient is linear in both)."""
    batch, n = c.int(c.p), c.int(c.p + 1)
    V = _part_of(c, EIGH_PART, c.int(c.p + 3), batch * n * n, (batch, n, n))
    return (tj.matmul(V * _f.shaped(c.g, (batch, 1, n)), V.mT), None)


@derivative(EIGH_PART)
def _d_eigh_part(c):
    """The eigenvectors' term: ``V M V^T``, ``M_ij = skew(V^T gV)_ij / (L_j - L_i)`` off the
    diagonal, 0 on it (torch's, as the rule), to the eigh record's matrix."""
    _, a, _, p, _ = _f.producer(c)
    batch, n = int(c.tape.ints[p]), int(c.tape.ints[p + 1])
    V = c.out((batch, n, n))
    L = _f.slot(c.tape, c.arena, c.a, batch * n)
    VtG = tj.matmul(V.mT, _f.shaped(c.g, (batch, n, n)))
    off = ~np.eye(n, dtype=bool)
    lv = _f.value(L).reshape(batch, n)   # the eigh record's result (read, not a record written here)
    if np.any((lv[:, None, :] - lv[:, :, None])[:, off] == 0.0):
        raise _f.refuse(c, "repeated eigenvalues")
    gaps = _f.shaped(L, (batch, 1, n)) - _f.shaped(L, (batch, n, 1))
    M = _f.where(np.broadcast_to(off, (batch, n, n)), 0.5 * (VtG - VtG.mT) / _f.where(~off, 1.0, gaps), 0.0)
    return [(a, tj.matmul(tj.matmul(V, M), V.mT))]


def _copyltu(M):
    return tj.tril(M) + tj.tril(M, -1).mT


def _qr_square_terms(Q, R, gQ, gR):
    """torch's ``(gQ + Q copyltu(M)) R^-T``, ``M = R gR^T - gQ^T Q``, for ``m >= n``; either
    gradient may be None (the formula is linear in them: Q's and R's terms apart)."""
    from tapejit.ops.linalg_small import solve_triangular
    M = None if gR is None else tj.matmul(R, gR.mT)
    if gQ is not None:
        M = -tj.matmul(gQ.mT, Q) if M is None else M - tj.matmul(gQ.mT, Q)
    B = tj.matmul(Q, _copyltu(M))
    if gQ is not None:
        B = gQ + B
    return solve_triangular(R.mT, B, upper=False, left=False)


def _qr_terms(Q, R, gQ, gR, m, n):
    """The rule's ``gA``: for ``m < n``, ``A = Q [X | Y]``: X's from ``(gQ + Y gY^T, gR_X)``
    as for a square matrix, ``gY = Q gR_Y``."""
    if m >= n:
        return _qr_square_terms(Q, R, gQ, gR)
    X = R[:, :, :m]
    if gR is None:
        return tj.cat([_qr_square_terms(Q, X, gQ, None), _f.zeros(Q.shape[0] * m * (n - m), Q.dtype).reshape(
            Q.shape[0], m, n - m)], 2)
    gY = gR[:, :, m:]
    through_y = tj.matmul(tj.matmul(Q, R[:, :, m:]), gY.mT)
    gQx = through_y if gQ is None else gQ + through_y
    return tj.cat([_qr_square_terms(Q, X, gQx, gR[:, :, :m]), tj.matmul(Q, gY)], 2)


def _qr_refuse_singular(c, r):
    """``r``: R's values (of the record's region: not a record written by the formula)."""
    k = min(r.shape[1], r.shape[2])
    if np.any(np.diagonal(r[:, :k, :k], axis1=1, axis2=2) == 0.0):
        raise _f.refuse(c, "a rank-deficient matrix (a zero on R's diagonal)")


@derivative(QR)
def _d_qr(c):
    """Q's term of torch's formula (R from a new part record over the region)."""
    batch, m, n, k = (c.int(c.p + i) for i in range(4))
    _qr_refuse_singular(c, _f.value(_f.slot(c.tape, c.arena, ~(c.out_off + c.int(c.p + 4)), batch * k * n,
                                            (batch, k, n))))
    R = _part_of(c, QR_PART, c.int(c.p + 4), batch * k * n, (batch, k, n))
    return (_qr_terms(c.out((batch, m, k)), R, _f.shaped(c.g, (batch, m, k)), None, m, n), None)


@derivative(QR_PART)
def _d_qr_part(c):
    """R's term, to the qr record's matrix."""
    _, a, _, p, _ = _f.producer(c)
    batch, m, n, k = (int(c.tape.ints[p + i]) for i in range(4))
    R = c.out((batch, k, n))
    _qr_refuse_singular(c, _f.value(R))
    Q = _f.slot(c.tape, c.arena, c.a, batch * m * k, (batch, m, k))
    return [(a, _qr_terms(Q, R, None, _f.shaped(c.g, (batch, k, n)), m, n))]


def _svd_factors(c, p, first, own=None):
    """``(S, U_k, Vh_k)`` of the svd record with ints at ``p`` whose first result (S) is
    ``first``: U and Vh are ``own`` (the part record being differentiated, with its start)
    or new part records over the region."""
    batch, m, n, k, ku, kv, u_at, vh_at = (int(c.tape.ints[p + i]) for i in range(8))
    factors = {}
    for start, size, shape in ((u_at, batch * m * ku, (batch, m, ku)), (vh_at, batch * kv * n, (batch, kv, n))):
        if own is not None and own[0] == start:
            factors[start] = _f.shaped(own[1], shape)
        else:
            factors[start] = _part_of(c, SVD_PART, start, size, shape, first)
    return _f.shaped(first, (batch, k)), factors[u_at][:, :, :k], factors[vh_at][:, :k, :]


def _svd_inner(c, S, skew, s_on_left):
    """``skew_ij S_j / E_ij`` (``S_i skew_ij / E_ij``) off the diagonal, 0 on it, with
    ``E_ij = S_j^2 - S_i^2``; repeated singular values refuse by name."""
    batch, k = S.shape
    off = ~np.eye(k, dtype=bool)
    sv = _f.value(S)   # the svd record's result (read, not the records written here)
    if np.any((sv[:, None, :] ** 2 - sv[:, :, None] ** 2)[:, off] == 0.0):
        raise _f.refuse(c, "repeated singular values")
    gaps = _f.shaped(S * S, (batch, 1, k)) - _f.shaped(S * S, (batch, k, 1))
    scaled = _f.shaped(S, (batch, k, 1)) * skew if s_on_left else skew * _f.shaped(S, (batch, 1, k))
    return _f.where(np.broadcast_to(off, (batch, k, k)), scaled / _f.where(~off, 1.0, gaps), 0.0)


@derivative(SVD)
def _d_svd(c):
    """The singular values' term of torch's formula, ``U diag(gS) Vh`` (U, Vh from new part
    records; the singular vectors' terms are their part records' formulas: the gradient is
    linear in the three)."""
    batch, k = c.int(c.p), c.int(c.p + 3)
    S, U, Vh = _svd_factors(c, c.p, c.out())
    return (tj.matmul(U * _f.shaped(c.g, (batch, 1, k)), Vh), None)


@derivative(SVD_PART)
def _d_svd_part(c):
    """U's term: ``U [skew(U^T gU) S / E] Vh``, plus ``(I - U U^T) gU S^-1 Vh`` when
    ``m > n``; Vh's: ``U [S skew(Vh gVh^T) / E] Vh``, plus ``U S^-1 gVh (I - V Vh)`` when
    ``m < n`` (the rule's, torch's), to the svd record's matrix."""
    _, a, _, p, _ = _f.producer(c)
    batch, m, n, k, ku, kv, u_at, vh_at = (int(c.tape.ints[p + i]) for i in range(8))
    start = int(c.tape.ints[c.p])
    first = _f.slot(c.tape, c.arena, c.a, batch * k)
    S, U, Vh = _svd_factors(c, p, first, (start, c.out()))
    if start == u_at:
        gU = _f.shaped(c.g, (batch, m, ku))[:, :, :k]
        UtgU = tj.matmul(U.mT, gU)
        ga = tj.matmul(U, _svd_inner(c, S, UtgU - UtgU.mT, False))
        if m > n:
            gus = gU / _f.shaped(S, (batch, 1, k))
            ga = ga + gus - tj.matmul(U, tj.matmul(U.mT, gus))
        return [(a, tj.matmul(ga, Vh))]
    gVh = _f.shaped(c.g, (batch, kv, n))[:, :k, :]
    VhgV = tj.matmul(Vh, gVh.mT)
    ga = tj.matmul(_svd_inner(c, S, VhgV - VhgV.mT, True), Vh)
    if m < n:
        sgv = gVh / _f.shaped(S, (batch, k, 1))
        ga = ga + sgv - tj.matmul(tj.matmul(sgv, Vh.mT), Vh)
    return [(a, tj.matmul(U, ga))]
