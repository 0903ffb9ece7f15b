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
    sign = np.linalg.det(u) * np.linalg.det(vh)
    return np.dot(u * c, vh) * sign


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


# ---- front ends ---------------------------------------------------------------------------
from collections import namedtuple  # noqa: E402

from tapejit.api import export  # noqa: E402
from tapejit.ops.linalg_small import LinAlgError, _batch_and_square  # noqa: E402
from tapejit.recording import broadcast_shapes, eager, expand, on_tape, operand, record  # noqa: E402
from tapejit.shapes import numel  # noqa: E402
from tapejit.tape import current as _current, state as _state  # noqa: E402
from tapejit.tensor import Tensor, _concrete, _taped  # noqa: E402

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


def check_float(A, fn):
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
    tape.groups |= op.bit
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


def _batch_prefix(i, batch):
    return f"(Batch element {i}): " if batch > 1 else ""


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
            where = _batch_prefix(i, batch)
            if fn == "linalg.inv":
                raise LinAlgError(f"linalg.inv: {where}The diagonal element {info} is zero, the inversion could "
                                  f"not be completed because the input matrix is singular.")
            raise LinAlgError(f"torch.linalg.solve: {where}The solver failed because the input matrix is singular.")


def inv(A):
    """``torch.linalg.inv``: the inverse of each square matrix; a singular one raises
    ``LinAlgError`` with torch's text."""
    check_float(A, "linalg.inv")
    batch, n = _batch_and_square(A, "linalg.inv")
    X = _square_record(INV, A, batch, n, A._shape)
    if _readable() and batch * n:
        _raise_if_singular("linalg.inv", A, X, batch, n)
    return X


def det(A):
    check_float(A, "linalg.det")
    batch, n = _batch_and_square(A, "linalg.det")
    return _square_record(DET, A, batch, n, A._shape[:-2])


def slogdet(A, result=linalg_slogdet):
    check_float(A, "linalg.slogdet")
    batch, n = _batch_and_square(A, "linalg.slogdet")
    shape = A._shape[:-2]
    sign, logabsdet = _decompose(SLOGDET, SLOGDET_PART, A, (batch, n), [shape, shape])
    return result(sign, logabsdet)


def logdet(A):
    """``torch.logdet``: ``log(det(A))``, NaN where the determinant is negative; torch's
    composite: ``where`` of slogdet's results."""
    from tapejit.ops.movement import where
    check_float(A, "logdet")
    sign, logabsdet = slogdet(A)
    return where(sign < 0, float("nan"), logabsdet)


def solve(A, B, left=True):
    """``torch.linalg.solve``: ``X = A^-1 B`` (``X A = B`` with ``left=False``); ``B`` is a
    batch of vectors when 1-D or of ``A``'s shape without the last dimension, as torch
    reads it; batch dimensions broadcast."""
    check_float(A, "linalg.solve")
    check_float(B, "linalg.solve")
    if A._dtype is not B._dtype:
        raise RuntimeError(f"linalg.solve: Expected A and B to have the same dtype, but found A of type "
                           f"{_type_name(A._dtype)} and B of type {_type_name(B._dtype)} instead")
    _batch_and_square(A, "linalg.solve")
    n = A._shape[-1]
    # torch's reading: a vector, or a batch of them, when B is 1-D or A's shape minus its last dim
    vector = len(B._shape) == 1 or (len(B._shape) == len(A._shape) - 1 and B._shape == A._shape[:-1])
    if vector:
        rows, k, tail = n, 1, (n,)
    else:
        if len(B._shape) < 2:
            raise RuntimeError("linalg.solve: The input tensor B must have at least 2 dimensions.")
        k = B._shape[-1] if left else B._shape[-2]
        rows = B._shape[-2] if left else B._shape[-1]
        tail = B._shape[-2:]
    if rows != n:
        shape_b = f"{B._shape[-1]}" if vector else f"{B._shape[-2]}x{B._shape[-1]}"
        equation = "AX = B" if left else "XA = B"
        raise RuntimeError(f"linalg.solve: Incompatible shapes of A and B for the equation {equation} "
                           f"({A._shape[-2]}x{A._shape[-1]} and {shape_b})")
    batch_shape = broadcast_shapes("linalg.solve", A._shape[:-2], B._shape[:-len(tail)])
    if A._shape[:-2] != batch_shape:
        A = expand(A, batch_shape + (n, n))
    if B._shape[:-len(tail)] != batch_shape:
        B = expand(B, batch_shape + tail)
    batch = numel(batch_shape)
    X = _solve(A, B, batch, n, k, 1 if left else 0, batch_shape + tail)
    if _readable() and batch * n * k:
        _raise_if_singular("linalg.solve", A, X, batch, n)
    return X


def _solve(A, B, batch, n, k, left, shape):
    if not on_tape(A, B):
        return eager(_solve, A, B, batch, n, k, left, shape)
    tape = _state.tape or _current()
    p = tape.add_ints((batch, n, k, left))
    return record(SOLVE, (A, B), shape, A._dtype, p, 0)


def _matrix_batch(A, fn):
    if len(A._shape) < 2:
        raise RuntimeError(f"{fn}: The input tensor A must have at least 2 dimensions.")
    return numel(A._shape[:-2]), A._shape[-2], A._shape[-1]


def qr(A, mode="reduced"):
    """``torch.linalg.qr``: Householder QR as LAPACK's (R's diagonal may be negative), so the
    factors are torch's.  ``mode='r'`` gives an empty Q, as torch; unlike torch its R stays
    differentiable (Q is computed anyway)."""
    if mode not in ("reduced", "complete", "r"):
        raise RuntimeError(f"qr received unrecognized mode '{mode}' but expected one of 'reduced' (default), "
                           f"'r', or 'complete'")
    check_float(A, "linalg.qr")
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
        raise LinAlgError(f"{fn}: {_batch_prefix(i, a.shape[0])}{message}")


_SVD_NOT_FINITE = "The algorithm failed to converge because the input matrix contained non-finite values."


def _svd(A, full_matrices, wanted):
    check_float(A, "linalg.svd")
    batch, m, n = _matrix_batch(A, "linalg.svd")
    _raise_if_not_finite("linalg.svd", A, _SVD_NOT_FINITE)
    k = min(m, n)
    ku, kv = (m, n) if full_matrices else (k, k)
    bs = A._shape[:-2]
    return _decompose(SVD, SVD_PART, A, (batch, m, n, k, ku, kv), [bs + (k,), bs + (m, ku), bs + (kv, n)],
                      wanted)


def svd(A, full_matrices=True):
    """``torch.linalg.svd``: ``(U, S, Vh)`` from LAPACK's gesdd (singular vectors are defined
    up to sign; with ``full_matrices`` the gradients of the columns past ``min(m, n)`` are
    ignored, as torch does)."""
    S, U, Vh = _svd(A, full_matrices, None)
    return linalg_svd(U, S, Vh)


def svdvals(A):
    return _svd(A, False, (0,))[0]


def _eigh(A, UPLO, wanted):
    if UPLO not in ("L", "U"):
        raise RuntimeError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
    check_float(A, "linalg.eigh")
    batch, n = _batch_and_square(A, "linalg.eigh")
    _raise_if_not_finite("linalg.eigh", A, "The algorithm failed to converge because the input matrix is "
                         "ill-conditioned or has too many repeated eigenvalues (it has non-finite values).",
                         lower=UPLO == "L")
    bs = A._shape[:-2]
    return _decompose(EIGH, EIGH_PART, A, (batch, n, 1 if UPLO == "U" else 0), [bs + (n,), bs + (n, n)], wanted)


def eigh(A, UPLO="L"):
    """``torch.linalg.eigh``: ascending eigenvalues and orthonormal eigenvectors (columns,
    each defined up to sign) of the symmetric matrix whose ``UPLO`` triangle is read."""
    L, Q = _eigh(A, UPLO, None)
    return linalg_eigh(L, Q)


def eigvalsh(A, UPLO="L"):
    return _eigh(A, UPLO, (0,))[0]


# torch's functions and Tensor methods outside torch.linalg
@export(method=True)
def inverse(input):
    return inv(input)


@export(name="det", method=True)
def _det_fn(input):
    return det(input)


@export(name="slogdet", method=True)
def _slogdet_fn(input):
    return slogdet(input, slogdet_result)


@export(name="logdet", method=True)
def _logdet_fn(input):
    return logdet(input)
