"""tj.linalg's matrix functions and factorisations (tapejit/ops/linalg_dense.py) and norms
(tapejit/linalg.py): values and gradients against torch, batches, float32, torch's errors,
and the cases where torch's gradient formula depends on which results are used.

The registry's samples (tests/test_gradients.py) check every op against finite
differences, float32 and torch on small cases; this file checks the API around them.
Singular vectors and eigenvectors are defined up to sign (LAPACK builds differ), so their
comparisons go through sign-invariant functions of them.
"""
import math
import zlib

import numpy as np
import pytest

import tapejit as tj
from tapejit.testing import check_grads


def _rng(seed=0):
    return np.random.default_rng(seed)


def _well(rng, *shape):
    m = rng.normal(size=shape)
    return m + 3.0 * np.eye(shape[-1]) if shape[-1] == shape[-2] else m


def _run(lib, fn, arrays, cotangent_seed=1):
    """Value and gradients of ``sum(fn(lib, *tensors) * u)`` for a fixed random ``u``."""
    xs = [lib.tensor(a, requires_grad=True) for a in arrays]
    y = fn(lib, *xs)
    u = np.random.default_rng(cotangent_seed).normal(size=tuple(y.shape))
    (y * lib.tensor(u, dtype=y.dtype)).sum().backward()
    return y.detach().numpy(), [x.grad.numpy() for x in xs]


def _against_torch(fn, *arrays, rtol=1e-10, atol=1e-12):
    torch = pytest.importorskip("torch")
    y, grads = _run(tj, fn, arrays)
    y_pt, grads_pt = _run(torch, fn, arrays)
    np.testing.assert_allclose(y, y_pt, rtol=rtol, atol=atol, err_msg="value")
    for g, g_pt in zip(grads, grads_pt):
        np.testing.assert_allclose(g, g_pt, rtol=rtol, atol=atol, err_msg="gradient")


def _finite_differences(fn, *arrays):
    """Every gradient element against central finite differences, float64."""
    check_grads(lambda *tensors: fn(tj, *tensors), arrays, rtol=1e-6, atol=1e-7)


# ---- values and gradients against torch ------------------------------------------------------

CASES = {
    "inv": (lambda lib, a: lib.linalg.inv(a), [(3, 3)]),
    "inv_batch": (lambda lib, a: lib.linalg.inv(a), [(2, 3, 4, 4)]),
    "inverse_fn": (lambda lib, a: lib.inverse(a), [(3, 3)]),
    "inverse_method": (lambda lib, a: a.inverse(), [(2, 2, 2)]),
    "det": (lambda lib, a: lib.linalg.det(a), [(4, 4)]),
    "det_batch": (lambda lib, a: lib.det(a), [(3, 2, 2)]),
    "det_method": (lambda lib, a: a.det(), [(3, 3)]),
    "slogdet_logabsdet": (lambda lib, a: lib.linalg.slogdet(a).logabsdet, [(2, 3, 3)]),
    "slogdet_fn": (lambda lib, a: lib.slogdet(a)[1], [(3, 3)]),
    "slogdet_method": (lambda lib, a: a.slogdet().logabsdet, [(3, 3)]),
    "slogdet_both": (lambda lib, a: lib.linalg.slogdet(a).sign * lib.linalg.slogdet(a).logabsdet, [(2, 3, 3)]),
    "logdet": (lambda lib, a: lib.logdet(a @ a.mT), [(3, 3)]),
    "logdet_method": (lambda lib, a: (a @ a.mT).logdet(), [(2, 3, 3)]),
    "solve": (lambda lib, a, b: lib.linalg.solve(a, b), [(3, 3), (3, 2)]),
    "solve_vector": (lambda lib, a, b: lib.linalg.solve(a, b), [(3, 3), (3,)]),
    "solve_batch_of_vectors": (lambda lib, a, b: lib.linalg.solve(a, b), [(2, 3, 3), (2, 3)]),
    "solve_broadcast": (lambda lib, a, b: lib.linalg.solve(a, b), [(2, 1, 3, 3), (4, 3, 2)]),
    "solve_left_false": (lambda lib, a, b: lib.linalg.solve(a, b, left=False), [(3, 3), (2, 3)]),
    "qr_tall": (lambda lib, a: lib.linalg.qr(a).Q @ lib.linalg.qr(a).R.exp(), [(5, 3)]),
    "qr_wide": (lambda lib, a: lib.linalg.qr(a).Q.sin() + lib.linalg.qr(a).R.sum(-1, keepdim=True), [(2, 3, 5)]),
    "qr_complete_wide": (lambda lib, a: lib.linalg.qr(a, mode="complete").Q, [(3, 4)]),
    "svdvals": (lambda lib, a: lib.linalg.svdvals(a), [(2, 5, 3)]),
    "svd_reduced": (lambda lib, a: (lambda r: (r.U * r.U) @ (r.S.unsqueeze(-1) * r.Vh * r.Vh))(
        lib.linalg.svd(a, full_matrices=False)), [(2, 4, 3)]),
    "svd_wide": (lambda lib, a: (lambda r: (r.U * r.U) @ (r.S.unsqueeze(-1) ** 2 * r.Vh * r.Vh))(
        lib.linalg.svd(a, full_matrices=False)), [(3, 5)]),
    "svd_full": (lambda lib, a: (lambda r: (r.U[..., :3] ** 2).sum(-2) + r.S + (r.Vh ** 2).sum(-2))(
        lib.linalg.svd(a)), [(5, 3)]),
    "svd_only_vectors": (lambda lib, a: (lambda r: r.U[..., 0] * r.Vh[..., 0, :])(
        lib.linalg.svd(a, full_matrices=False)), [(4, 4)]),
    "eigh": (lambda lib, a: (lambda r: r.eigenvalues.unsqueeze(-1) * r.eigenvectors ** 2)(
        lib.linalg.eigh(a + a.mT)), [(2, 4, 4)]),
    "eigh_upper": (lambda lib, a: (lambda r: r[0] + (r[1] ** 2).sum(-1))(lib.linalg.eigh(a, UPLO="U")), [(3, 3)]),
    "eigvalsh_lower_reads_lower": (lambda lib, a: lib.linalg.eigvalsh(a), [(4, 4)]),
    "norm_flat": (lambda lib, a: lib.linalg.norm(a), [(2, 3, 4)]),
    "norm_keepdim": (lambda lib, a: lib.linalg.norm(a, keepdim=True), [(3, 4)]),
    "norm_vector_ord3": (lambda lib, a: lib.linalg.norm(a, 3), [(5,)]),
    "norm_vector_dim": (lambda lib, a: lib.linalg.norm(a, 1, dim=1), [(3, 4)]),
    "norm_vector_inf": (lambda lib, a: lib.linalg.norm(a, math.inf, dim=-1), [(3, 4)]),
    "norm_vector_neg_inf": (lambda lib, a: lib.linalg.vector_norm(a, -math.inf, dim=0), [(3, 4)]),
    "norm_vector_neg": (lambda lib, a: lib.linalg.vector_norm(a, -1.5, dim=(0, 2)), [(2, 3, 4)]),
    "norm_fro": (lambda lib, a: lib.linalg.norm(a, "fro"), [(3, 4)]),
    "norm_fro_dims": (lambda lib, a: lib.linalg.norm(a, dim=(0, 2), keepdim=True), [(2, 3, 4)]),
    "norm_nuc": (lambda lib, a: lib.linalg.norm(a, "nuc"), [(4, 3)]),
    "matrix_norm_nuc_dims": (lambda lib, a: lib.linalg.matrix_norm(a, "nuc", dim=(2, 0), keepdim=True), [(3, 2, 4)]),
    "matrix_norm_2": (lambda lib, a: lib.linalg.matrix_norm(a, 2), [(2, 3, 4)]),
    "matrix_norm_neg2": (lambda lib, a: lib.linalg.matrix_norm(a, -2), [(2, 4, 3)]),
    "matrix_norm_1": (lambda lib, a: lib.linalg.matrix_norm(a, 1), [(2, 3, 4)]),
    "matrix_norm_neg1_dims": (lambda lib, a: lib.linalg.matrix_norm(a, -1, dim=(0, 2)), [(3, 2, 4)]),
    "matrix_norm_inf_keepdim": (lambda lib, a: lib.linalg.matrix_norm(a, math.inf, keepdim=True), [(2, 3, 4)]),
    "matrix_norm_neg_inf": (lambda lib, a: lib.linalg.norm(a, -math.inf), [(3, 4)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_torch(name):
    fn, shapes = CASES[name]
    rng = _rng(zlib.crc32(name.encode()))
    _against_torch(fn, *[_well(rng, *s) if len(s) >= 2 else rng.normal(size=s) for s in shapes])


@pytest.mark.parametrize("name", ["logdet", "solve_left_false", "solve_broadcast", "qr_wide", "svd_wide",
                                  "svd_full", "eigh", "norm_nuc", "matrix_norm_neg1_dims", "norm_vector_neg"])
def test_finite_differences(name):
    fn, shapes = CASES[name]
    rng = _rng(zlib.crc32(name.encode()))
    _finite_differences(fn, *[_well(rng, *s) if len(s) >= 2 else rng.normal(size=s) for s in shapes])


def test_grad_fn_names_and_result_types_are_torchs():
    torch = pytest.importorskip("torch")
    a = _well(_rng(), 3, 3)
    for lib in (tj, torch):
        x = lib.tensor(a, requires_grad=True)
        s = lib.tensor(a + a.T, requires_grad=True)
        names = [type(t.grad_fn).__name__ for t in (
            lib.linalg.inv(x), lib.linalg.det(x), *lib.linalg.slogdet(x), lib.linalg.solve(x, x),
            *lib.linalg.qr(x), *lib.linalg.svd(x), lib.linalg.svdvals(x), *lib.linalg.eigh(s),
            lib.linalg.eigvalsh(s), lib.linalg.norm(x), lib.linalg.norm(x, "nuc"), lib.logdet(s))]
        kinds = [type(r).__name__ for r in (lib.linalg.slogdet(x), lib.slogdet(x), lib.linalg.qr(x),
                                            lib.linalg.svd(x), lib.linalg.eigh(s))]
        fields = [(r.sign is r[0], r.logabsdet is r[1], q.Q is q[0], q.R is q[1], u.U is u[0], u.S is u[1],
                   u.Vh is u[2], e.eigenvalues is e[0], e.eigenvectors is e[1], len(r), len(q), len(u), len(e))
                  for r, q, u, e in [(lib.linalg.slogdet(x), lib.linalg.qr(x), lib.linalg.svd(x), lib.linalg.eigh(s))]]
        if lib is tj:
            ours = (names, kinds, fields)
    assert ours == (names, kinds, fields)


def test_svd_reconstructs_and_factors_are_orthonormal():
    rng = _rng(3)
    for shape, full in (((4, 6), True), ((6, 4), True), ((2, 5, 3), False), ((3, 3), True)):
        a = rng.normal(size=shape)
        U, S, Vh = tj.linalg.svd(tj.tensor(a), full_matrices=full)
        U, S, Vh = U.numpy(), S.numpy(), Vh.numpy()
        k = min(shape[-2:])
        assert U.shape[-2:] == ((shape[-2], shape[-2]) if full else (shape[-2], k))
        assert Vh.shape[-2:] == ((shape[-1], shape[-1]) if full else (k, shape[-1]))
        np.testing.assert_allclose((U[..., :k] * S[..., None, :]) @ Vh[..., :k, :], a, atol=1e-12)
        np.testing.assert_allclose(np.swapaxes(U, -1, -2) @ U, np.broadcast_to(np.eye(U.shape[-1]), U.shape[:-2] +
                                   (U.shape[-1],) * 2), atol=1e-12)
        np.testing.assert_allclose(S, np.linalg.svd(a, compute_uv=False), rtol=1e-12)


def test_eigh_decomposes_the_triangle_it_reads():
    rng = _rng(4)
    a = rng.normal(size=(2, 4, 4))
    for uplo, tri in (("L", np.tril), ("U", np.triu)):
        sym = tri(a) + np.swapaxes(tri(a, -1 if uplo == "L" else 1), -1, -2)
        L, Q = tj.linalg.eigh(tj.tensor(a), UPLO=uplo)
        np.testing.assert_allclose(L.numpy(), np.linalg.eigvalsh(sym), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(Q.numpy() @ (L.numpy()[..., None] * np.swapaxes(Q.numpy(), -1, -2)), sym,
                                   atol=1e-12)
        np.testing.assert_allclose(tj.linalg.eigvalsh(tj.tensor(a), UPLO=uplo).numpy(), L.numpy())


def test_qr_values_are_torchs_and_complete_mode_extends_q():
    torch = pytest.importorskip("torch")
    a = _rng(5).normal(size=(2, 5, 3))
    for mode in ("reduced", "complete", "r"):
        Q, R = tj.linalg.qr(tj.tensor(a), mode=mode)
        Qt, Rt = torch.linalg.qr(torch.tensor(a), mode=mode)
        assert tuple(Q.shape) == tuple(Qt.shape) and tuple(R.shape) == tuple(Rt.shape), mode
        np.testing.assert_allclose(R.numpy(), Rt.numpy(), atol=1e-12)
        if mode != "r":
            # columns past min(m, n) of a complete Q are any orthonormal completion
            np.testing.assert_allclose(Q.numpy()[..., :3], Qt.numpy()[..., :3], atol=1e-12)
            np.testing.assert_allclose(np.swapaxes(Q.numpy(), -1, -2) @ Q.numpy(),
                                       np.broadcast_to(np.eye(Q.shape[-1]), (2,) + (Q.shape[-1],) * 2), atol=1e-12)


def test_values_without_grad_equal_values_with_grad():
    a = _well(_rng(6), 2, 4, 4)
    with_grad = tj.tensor(a, requires_grad=True)
    for fn in (lambda x: tj.linalg.inv(x), lambda x: tj.linalg.slogdet(x).logabsdet, lambda x: tj.linalg.svd(x).S,
               lambda x: tj.linalg.qr(x).R, lambda x: tj.linalg.eigh(x).eigenvectors, lambda x: tj.linalg.det(x)):
        np.testing.assert_array_equal(fn(tj.tensor(a)).numpy(), fn(with_grad).detach().numpy())


def test_float32_stays_float32_and_close_to_float64():
    a = _well(_rng(8), 2, 3, 3)
    for fn in (lambda x: tj.linalg.inv(x), lambda x: tj.linalg.det(x), lambda x: tj.linalg.slogdet(x).logabsdet,
               lambda x: tj.linalg.solve(x, x[..., 0]), lambda x: tj.linalg.qr(x).R, lambda x: tj.linalg.svdvals(x),
               lambda x: tj.linalg.eigvalsh(x + x.mT), lambda x: tj.linalg.matrix_norm(x, "nuc"),
               lambda x: tj.linalg.matrix_norm(x, 1)):
        results = []
        for dt in (tj.float32, tj.float64):
            x = tj.tensor(a, dtype=dt, requires_grad=True)
            y = fn(x)
            y.sum().backward()
            assert y.dtype is dt and x.grad.dtype is dt
            results.append((y.detach().numpy(), x.grad.numpy()))
        np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-3, atol=1e-4)


# ---- where torch's gradient depends on which results are used ----------------------------------

def test_svdvals_and_eigvalsh_have_gradients_at_repeated_values_as_torch():
    torch = pytest.importorskip("torch")
    eye = np.eye(3)
    _against_torch(lambda lib, a: lib.linalg.svdvals(a), eye)
    _against_torch(lambda lib, a: lib.linalg.eigvalsh(a), eye)
    _against_torch(lambda lib, a: lib.linalg.svd(a).S, 2 * eye)
    # the singular vectors' gradient divides by the gaps: not finite, in both
    x = tj.tensor(eye, requires_grad=True)
    (tj.linalg.svd(x).U ** 3).sum().backward()
    xt = torch.tensor(eye, requires_grad=True)
    (torch.linalg.svd(xt).U ** 3).sum().backward()
    assert not np.isfinite(x.grad.numpy()).all() and not np.isfinite(xt.grad.numpy()).all()


def test_det_of_a_singular_matrix_has_the_adjugate_gradient():
    """The gradient of det is the cofactor matrix, singular matrices included (torch's
    singular-case formula, from the SVD).  Where the adjugate is zero (rank <= n - 2) torch
    agrees; at an exactly singular matrix of rank n - 1 torch 2.13 gives 0 (det(A) A^-T with
    det = 0), though at A + 1e-7 it gives the cofactors: tapejit keeps the continuous, finite-
    difference-correct value there."""
    torch = pytest.importorskip("torch")
    _against_torch(lambda lib, a: lib.linalg.det(a), np.zeros((2, 3, 3)))
    _against_torch(lambda lib, a: lib.linalg.det(a), np.outer([1.0, 2.0, 3.0], [1.0, -1.0, 2.0]))
    rank2 = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]])
    _finite_differences(lambda lib, a: lib.linalg.det(a), rank2)
    x = tj.tensor(rank2, requires_grad=True)
    tj.linalg.det(x).backward()
    cofactors = np.array([[4.0, 4.0, -4.0], [-2.0, -2.0, 2.0], [0.0, 0.0, 0.0]])
    np.testing.assert_allclose(x.grad.numpy(), cofactors, atol=1e-12)
    nearby = torch.tensor(rank2 + np.eye(3) * 1e-9, requires_grad=True)
    torch.linalg.det(nearby).backward()
    np.testing.assert_allclose(nearby.grad.numpy(), cofactors, atol=1e-7)


def test_slogdet_of_a_singular_matrix_as_torch():
    torch = pytest.importorskip("torch")
    a = np.array([[1.0, 2.0], [2.0, 4.0]])
    sign, logabsdet = tj.linalg.slogdet(tj.tensor(a))
    assert sign.item() == 0.0 and logabsdet.item() == -math.inf
    x = tj.tensor(a, requires_grad=True)
    tj.linalg.slogdet(x).logabsdet.backward()
    xt = torch.tensor(a, requires_grad=True)
    torch.linalg.slogdet(xt).logabsdet.backward()
    assert not np.isfinite(x.grad.numpy()).any() and not np.isfinite(xt.grad.numpy()).any()
    # only the sign used: a zero gradient (torch: the sign is not differentiable)
    y = tj.tensor(_well(_rng(), 3, 3), requires_grad=True)
    tj.linalg.slogdet(y).sign.backward()
    np.testing.assert_array_equal(y.grad.numpy(), 0.0)


def test_logdet_of_negative_determinant_is_nan_as_torch():
    torch = pytest.importorskip("torch")
    a = np.diag([-1.0, 2.0, 3.0])
    assert np.isnan(tj.logdet(tj.tensor(a)).item()) and np.isnan(torch.logdet(torch.tensor(a)).item())
    assert tj.logdet(tj.zeros(2, 2)).item() == -math.inf == torch.logdet(torch.zeros(2, 2)).item()


def test_empty_matrices():
    torch = pytest.importorskip("torch")
    for fn in (lambda lib, x: lib.linalg.det(x), lambda lib, x: lib.linalg.inv(x),
               lambda lib, x: lib.linalg.slogdet(x).logabsdet, lambda lib, x: lib.linalg.svdvals(x),
               lambda lib, x: lib.linalg.eigvalsh(x)):
        for shape in ((0, 0), (2, 0, 0), (0, 3, 3)):
            ours = fn(tj, tj.zeros(*shape, dtype=tj.float64)).numpy()
            theirs = fn(torch, torch.zeros(*shape, dtype=torch.float64)).numpy()
            assert ours.shape == theirs.shape
            np.testing.assert_array_equal(ours, theirs)


# ---- errors ---------------------------------------------------------------------------------

def _same_error(fn, *arrays, dtype=None):
    """tapejit raises the exception class (or its tapejit counterpart) and text torch does."""
    torch = pytest.importorskip("torch")
    with pytest.raises(Exception) as theirs:
        fn(torch, *[torch.tensor(a) if dtype is None else torch.tensor(a, dtype=getattr(torch, dtype))
                    for a in arrays])
    with pytest.raises(Exception) as ours:
        fn(tj, *[tj.tensor(a) if dtype is None else tj.tensor(a, dtype=getattr(tj, dtype)) for a in arrays])
    if isinstance(theirs.value, torch.linalg.LinAlgError):
        assert isinstance(ours.value, tj.linalg.LinAlgError)
    else:
        assert type(ours.value) is type(theirs.value)
    assert str(ours.value) == str(theirs.value)


def test_linalg_error_is_a_runtime_error():
    assert issubclass(tj.linalg.LinAlgError, RuntimeError)


@pytest.mark.parametrize("fn", [
    lambda lib, a: lib.linalg.inv(a),
    lambda lib, a: lib.inverse(a),
    lambda lib, a: lib.linalg.solve(a, a[..., 0]),
], ids=["inv", "inverse", "solve"])
def test_singular_matrix_raises_torchs_linalg_error(fn):
    singular = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.0, 1.0, 1.0]])
    _same_error(fn, singular)
    _same_error(fn, np.stack([np.eye(3), singular]))     # "(Batch element 1): ..."
    _same_error(fn, np.zeros((2, 2)))


def test_singular_matrix_raises_when_the_input_requires_grad():
    x = tj.tensor([[1.0, 2.0], [2.0, 4.0]], requires_grad=True)
    with pytest.raises(tj.linalg.LinAlgError, match="singular"):
        tj.linalg.inv(x)


@pytest.mark.parametrize("fn,shape", [
    (lambda lib, a: lib.linalg.inv(a), (2, 3)),
    (lambda lib, a: lib.linalg.inv(a), (3,)),
    (lambda lib, a: lib.linalg.det(a), (2, 3)),
    (lambda lib, a: lib.linalg.slogdet(a), (4,)),
    (lambda lib, a: lib.linalg.eigh(a), (2, 3)),
    (lambda lib, a: lib.linalg.svd(a), (3,)),
    (lambda lib, a: lib.linalg.qr(a), (3,)),
    (lambda lib, a: lib.linalg.solve(a, a), (3, 2)),
    (lambda lib, a: lib.linalg.solve(a, a[:2, :1]), (3, 3)),
    (lambda lib, a: lib.linalg.solve(a, a[:, :2], left=False), (3, 3)),
    (lambda lib, a: lib.linalg.solve(a, a[0, :2], left=False), (3, 3)),
    (lambda lib, a: lib.linalg.solve(a, a[0], left=False), (3, 3)),
    (lambda lib, a: lib.linalg.solve(a, a[0].expand(3), left=False), (1, 1)),
    (lambda lib, a: lib.linalg.solve(a, a[0, :2]), (3, 3)),
    (lambda lib, a: lib.linalg.matrix_norm(a), (3,)),
    (lambda lib, a: lib.linalg.matrix_norm(a, dim=(0, 1, 2)), (3, 3, 3)),
    (lambda lib, a: lib.linalg.matrix_norm(a, dim=(0, 0)), (3, 3)),
    (lambda lib, a: lib.linalg.matrix_norm(a, 3), (3, 3)),
    (lambda lib, a: lib.linalg.norm(a, 2), (2, 3, 3)),
    (lambda lib, a: lib.linalg.norm(a, dim=(0, 1, 2)), (2, 3, 3)),
    (lambda lib, a: lib.linalg.norm(a, "fro"), (3,)),
    (lambda lib, a: lib.linalg.qr(a, mode="full"), (3, 3)),
    (lambda lib, a: lib.linalg.eigh(a, UPLO="X"), (3, 3)),
], ids=lambda v: str(v) if isinstance(v, tuple) else "")
def test_shape_and_argument_errors_are_torchs(fn, shape):
    _same_error(fn, np.ones(shape))


@pytest.mark.parametrize("fn", [lambda lib, a: lib.linalg.inv(a), lambda lib, a: lib.linalg.det(a),
                                lambda lib, a: lib.linalg.svd(a), lambda lib, a: lib.linalg.eigh(a),
                                lambda lib, a: lib.linalg.norm(a), lambda lib, a: lib.linalg.qr(a)],
                         ids=["inv", "det", "svd", "eigh", "norm", "qr"])
def test_integer_input_is_refused_as_torch(fn):
    _same_error(fn, np.ones((3, 3)), dtype="int64")


def test_mixed_dtypes_in_solve_are_refused_as_torch():
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError) as theirs:
        torch.linalg.solve(torch.eye(3, dtype=torch.float32), torch.ones(3, 1, dtype=torch.float64))
    with pytest.raises(RuntimeError) as ours:
        tj.linalg.solve(tj.eye(3, dtype=tj.float32), tj.ones(3, 1, dtype=tj.float64))
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("fn", [lambda lib, a: lib.linalg.svd(a), lambda lib, a: lib.linalg.svdvals(a)],
                         ids=["svd", "svdvals"])
def test_svd_of_non_finite_input_raises_torchs_error(fn):
    a = np.ones((2, 3, 3))
    a[1, 0, 0] = np.nan
    _same_error(fn, a)
    _same_error(fn, a[1])


def test_eigh_of_non_finite_input_raises_linalg_error_in_the_read_triangle_only():
    torch = pytest.importorskip("torch")
    a = np.eye(3)
    a[0, 2] = np.nan                    # upper triangle: eigh reads the lower one
    np.testing.assert_array_equal(tj.linalg.eigvalsh(tj.tensor(a)).numpy(), [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(torch.linalg.eigvalsh(torch.tensor(a)).numpy(), [1.0, 1.0, 1.0])
    with pytest.raises(torch.linalg.LinAlgError, match="linalg.eigh: The algorithm failed to converge"):
        torch.linalg.eigh(torch.tensor(a), UPLO="U")
    with pytest.raises(tj.linalg.LinAlgError, match="linalg.eigh: The algorithm failed to converge"):
        tj.linalg.eigh(tj.tensor(a), UPLO="U")


def test_non_finite_input_gives_nan_where_torch_does():
    torch = pytest.importorskip("torch")
    a = np.full((3, 3), np.nan)
    for fn in (lambda lib, x: lib.linalg.inv(x), lambda lib, x: lib.linalg.det(x),
               lambda lib, x: lib.linalg.slogdet(x).logabsdet, lambda lib, x: lib.linalg.slogdet(x).sign):
        np.testing.assert_array_equal(fn(tj, tj.tensor(a)).numpy(), fn(torch, torch.tensor(a)).numpy())


def test_r_mode_of_qr_differentiates_r_where_torch_refuses():
    """torch computes no Q in mode='r' and so refuses R's gradient at backward; tapejit has
    Q anyway and gives the gradient of the reduced mode's R."""
    torch = pytest.importorskip("torch")
    a = _well(_rng(10), 4, 3)
    x = tj.tensor(a, requires_grad=True)
    Q, R = tj.linalg.qr(x, mode="r")
    assert tuple(Q.shape) == (0,) == tuple(torch.linalg.qr(torch.tensor(a), mode="r").Q.shape)
    R.sum().backward()
    _, expected = _run(tj, lambda lib, m: lib.linalg.qr(m).R, [a])
    _, [via_torch] = _run(torch, lambda lib, m: lib.linalg.qr(m).R, [a])
    _, [ours] = _run(tj, lambda lib, m: lib.linalg.qr(m, mode="r").R, [a])
    np.testing.assert_allclose(ours, expected[0], rtol=1e-12)
    np.testing.assert_allclose(ours, via_torch, rtol=1e-10, atol=1e-12)


def test_complete_qr_of_a_tall_matrix_is_not_differentiable():
    with pytest.raises(RuntimeError, match="not differentiable when mode='complete' and nrows > ncols"):
        tj.linalg.qr(tj.ones(4, 2, requires_grad=True), mode="complete")
    Q, R = tj.linalg.qr(tj.tensor(_rng().normal(size=(4, 2))), mode="complete")
    assert tuple(Q.shape) == (4, 4) and tuple(R.shape) == (4, 2)


def test_matrix_norm_takes_a_tuple_of_dims():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="linalg_matrix_norm"):
        torch.linalg.matrix_norm(torch.ones(3, 3), dim=0)
    with pytest.raises(TypeError, match="linalg_matrix_norm"):
        tj.linalg.matrix_norm(tj.ones(3, 3), dim=0)


def test_vector_norm_takes_a_number_order():
    with pytest.raises(TypeError, match="must be Number, not str"):
        tj.linalg.vector_norm(tj.ones(3), "fro")


def test_out_is_refused():
    with pytest.raises(NotImplementedError, match="linalg.inv: out= is not supported"):
        tj.linalg.inv(tj.eye(2), out=tj.eye(2))


def test_compile_replays_decompositions_as_eager():
    """Inside tj.compile values cannot be read (no singularity check): a traced step of
    decompositions and their backward replays eager mode's loss and gradient."""
    w = tj.nn.Parameter(tj.tensor(_well(_rng(9), 3, 3)))

    def step(x):
        w.grad = None
        loss = (tj.linalg.slogdet(w).logabsdet + tj.linalg.svdvals(w @ x).sum() + tj.linalg.inv(w).sum()
                + (tj.linalg.eigh(w + w.mT).eigenvectors ** 2 * x).sum() + tj.linalg.qr(x).R.sum())
        loss.backward()
        return loss

    compiled = tj.compile(step)
    for seed in (1, 2):
        x = tj.tensor(_rng(seed).normal(size=(3, 3)))
        replayed = float(compiled(x))
        replay_grad = w.grad.numpy().copy()
        eager = float(step(x))
        assert abs(replayed - eager) <= 1e-12 * abs(eager)
        np.testing.assert_allclose(replay_grad, w.grad.numpy(), rtol=1e-10)
    assert compiled.stats()["traces"] == 1


def test_decompositions_are_an_op_group_of_their_own():
    """LAPACK calls are slow to compile: they are generated in a module of their own (and,
    as every op's, compiled only when a program first uses them)."""
    from tapejit import registry
    ours = [op for op in registry.OPS if op.module == "tapejit.ops.linalg_dense"]
    assert {op.name for op in ours} >= {"inv", "det", "slogdet", "solve", "qr", "svd", "eigh"}
    assert all(op.group == "decomp" for op in ours)
