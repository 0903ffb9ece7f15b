"""Tensor math of issue 17 (tapejit/tensor_math.py, tapejit/ops/indexed.py) against PyTorch:
values, gradients (also by central finite differences in float64), dtypes, grad_fn names,
in-place forms and errors.  The ops with a registry entry (scatter family, tril/triu,
flip, roll, rot90, diagonal, diag_embed, take, unfold, trace, cumsum, cumprod) also run
through tests/test_gradients.py by their samples; here are the compositions and the rest.
"""
import warnings

import numpy as np
import pytest

import tapejit as tj

RNG_SEED = 17


def _rng(label):
    return np.random.default_rng(sum(map(ord, label)) + RNG_SEED)


def _torch():
    return pytest.importorskip("torch")


def _leaves(mod, arrays):
    return [mod.tensor(a, requires_grad=True) for a in arrays]


def _values_and_grads(mod, fn, arrays, u):
    xs = _leaves(mod, arrays)
    out = fn(mod, *xs)
    grads = mod.autograd.grad(out, xs, grad_outputs=mod.tensor(u), allow_unused=True)
    return (np.array(out.detach().numpy()),
            [np.zeros_like(a) if g is None else np.array(g.numpy()) for g, a in zip(grads, arrays)])


def _fd_grads(fn, arrays, u, h=1e-6):
    """Central differences of <u, fn(x)> in float64."""
    grads = []
    with tj.no_grad():
        for i, a in enumerate(arrays):
            g = np.zeros_like(a)
            for k in range(a.size):
                plus = [b.copy() for b in arrays]
                minus = [b.copy() for b in arrays]
                plus[i].reshape(-1)[k] += h
                minus[i].reshape(-1)[k] -= h
                fp = fn(tj, *[tj.tensor(b) for b in plus]).numpy()
                fm = fn(tj, *[tj.tensor(b) for b in minus]).numpy()
                g.reshape(-1)[k] = np.sum(u * (fp - fm)) / (2 * h)
            grads.append(g)
    return grads


def _distinct(rng, shape):
    n = int(np.prod(shape))
    return rng.permutation(n).reshape(shape) * 0.37 - n * 0.15 + rng.uniform(-0.05, 0.05, size=shape)


# (label, fn(mod, *tensors), input shapes): compositions of existing ops
COMPOSED = [
    ("einsum_mm", lambda m, x, y: m.einsum("ij,jk->ik", x, y), [(3, 4), (4, 2)]),
    ("einsum_implicit", lambda m, x, y: m.einsum("ij,jk", x, y), [(3, 4), (4, 2)]),
    ("einsum_bmm", lambda m, x, y: m.einsum("bij,bjk->bik", x, y), [(2, 3, 4), (2, 4, 5)]),
    ("einsum_trace", lambda m, x: m.einsum("ii", x), [(3, 3)]),
    ("einsum_diag", lambda m, x: m.einsum("ii->i", x), [(3, 3)]),
    ("einsum_batch_diag", lambda m, x: m.einsum("bii->bi", x), [(2, 3, 3)]),
    ("einsum_outer", lambda m, x, y: m.einsum("i,j->ij", x, y), [(3,), (4,)]),
    ("einsum_dot", lambda m, x, y: m.einsum("i,i->", x, y), [(5,), (5,)]),
    ("einsum_transpose", lambda m, x: m.einsum("ij->ji", x), [(3, 4)]),
    ("einsum_sum", lambda m, x, y: m.einsum("ijk,ik->j", x, y), [(2, 3, 4), (2, 4)]),
    ("einsum_three", lambda m, x, y, z: m.einsum("ij,jk,kl->il", x, y, z), [(2, 3), (3, 4), (4, 2)]),
    ("einsum_list", lambda m, x, y: m.einsum("ij,ij->i", [x, y]), [(3, 4), (3, 4)]),
    ("einsum_broadcast", lambda m, x, y: m.einsum("ij,ij->ij", x, y), [(3, 4), (1, 4)]),
    ("einsum_ellipsis", lambda m, x, y: m.einsum("...ij,...jk->...ik", x, y), [(2, 1, 3, 4), (5, 4, 2)]),
    ("einsum_ellipsis_implicit", lambda m, x: m.einsum("...ii", x), [(2, 3, 3)]),
    ("einsum_upper", lambda m, x, y: m.einsum("iJ,Jk->ik", x, y), [(2, 3), (3, 2)]),
    ("einsum_bilinear", lambda m, x, w, y: m.einsum("bn,anm,bm->ba", x, w, y), [(2, 3), (4, 3, 5), (2, 5)]),
    ("tensordot2", lambda m, x, y: m.tensordot(x, y), [(2, 3, 4), (3, 4, 5)]),
    ("tensordot_lists", lambda m, x, y: m.tensordot(x, y, dims=([1, 0], [0, 2])), [(3, 4, 2), (4, 5, 3)]),
    ("tensordot0", lambda m, x, y: m.tensordot(x, y, 0), [(2,), (3,)]),
    ("kron", lambda m, x, y: m.kron(x, y), [(2, 3), (3, 2)]),
    ("kron_ndim", lambda m, x, y: x.kron(y), [(3,), (2, 2)]),
    ("cross", lambda m, x, y: m.cross(x, y, dim=1), [(4, 3), (4, 3)]),
    ("cross_neg_bcast", lambda m, x, y: m.cross(x, y, dim=-1),
     [(2, 1, 3), (1, 4, 3)]),
    ("addmm", lambda m, b, x, y: m.addmm(b, x, y), [(2,), (3, 4), (4, 2)]),
    ("addmm_scaled", lambda m, b, x, y: b.addmm(x, y, beta=0.5, alpha=-2.0), [(3, 2), (3, 4), (4, 2)]),
    ("addmm_beta0", lambda m, b, x, y: m.addmm(b, x, y, beta=0), [(3, 2), (3, 4), (4, 2)]),
    ("addmv", lambda m, b, x, v: m.addmv(b, x, v, alpha=3.0), [(3,), (3, 4), (4,)]),
    ("baddbmm", lambda m, b, x, y: m.baddbmm(b, x, y), [(2, 3, 2), (2, 3, 4), (2, 4, 2)]),
    ("baddbmm_scaled", lambda m, b, x, y: b.baddbmm(x, y, beta=2.0, alpha=0.5), [(3, 1), (2, 3, 4), (2, 4, 2)]),
    ("narrow", lambda m, x: m.narrow(x, 1, 1, 2), [(3, 4)]),
    ("narrow_neg", lambda m, x: x.narrow(-1, -3, 2), [(2, 3, 4)]),
    ("narrow_dim0", lambda m, x: x.narrow(0, 1, 2), [(3, 4)]),
    ("meshgrid_ij", lambda m, x, y: m.stack(m.meshgrid(x, y, indexing="ij")) * 1.5, [(3,), (4,)]),
    ("meshgrid_xy", lambda m, x, y, z: m.stack(m.meshgrid([x, y, z], indexing="xy")), [(2,), (3,), (4,)]),
    ("cdist", lambda m, x, y: m.cdist(x, y), [(4, 3), (5, 3)]),
    ("cdist_p1", lambda m, x, y: m.cdist(x, y, p=1.0), [(2, 4, 3), (2, 5, 3)]),
    ("cdist_p3", lambda m, x, y: m.cdist(x, y, p=3.0), [(4, 2), (3, 2)]),
    ("cdist_inf", lambda m, x, y: m.cdist(x, y, p=float("inf")), [(4, 2), (3, 2)]),
    ("repeat_interleave", lambda m, x: x.repeat_interleave(2, dim=0), [(3, 2)]),
    ("repeat_interleave_flat", lambda m, x: m.repeat_interleave(x, 3), [(2, 2)]),
    ("repeat_interleave_tensor", lambda m, x: x.repeat_interleave(m.tensor([1, 0, 3]), dim=-1), [(2, 3)]),
    ("index_fill_tensor_value", lambda m, x, v: x.index_fill(1, m.tensor([0, 2]), v), [(2, 3), ()]),
    ("flip_int_dims", lambda m, x: x.flip(0, 1), [(2, 3)]),
    ("fliplr", lambda m, x: m.fliplr(x), [(2, 3)]),
    ("diag_matrix", lambda m, x: m.diag(x, -1), [(3, 4)]),
    ("tril_then_mm", lambda m, x: x.tril() @ x.triu(), [(3, 3)]),
    ("cumprod_cumsum", lambda m, x: x.cumprod(0).cumsum(1), [(3, 4)]),
    ("cumsum_dtype", lambda m, x: x.cumsum(0, dtype=m.float64), [(4,)]),
    ("take_0d_index", lambda m, x: m.take(x, m.tensor(4)), [(2, 3)]),
    ("flip_0d", lambda m, x: m.flip(x, ()), [()]),
    ("einsum_outer_4d", lambda m, x, y: m.einsum("ij,kl->ljik", x, y), [(2, 3), (2, 1)]),
    ("einsum_sum_all", lambda m, x: m.einsum("ij->", x), [(2, 3)]),
    ("roll_big_shifts", lambda m, x: m.roll(x, (5, -7), (0, 1)), [(3, 4)]),
    ("diag_embed_offset_2", lambda m, x: m.diag_embed(x, 2), [(2, 2)]),
    ("diagflat", lambda m, x: m.diagflat(x, -1), [(2, 2)]),
    ("scatter_then_gather", lambda m, x, s: x.scatter(0, m.tensor([[1, 0]]), s).gather(0, m.tensor([[1, 1]])),
     [(2, 2), (1, 2)]),
    ("addcmul", lambda m, x, a, b: m.addcmul(x, a, b, value=-1.5), [(2, 3), (1, 3), (2, 1)]),
    ("addcdiv", lambda m, x, a, b: x.addcdiv(a, b * b + 1.0, value=0.5), [(2, 3), (2, 3), (3,)]),
]


def _domain(label, rng, shape):
    if label.startswith("cdist") or label.startswith("cumprod"):
        return _distinct(rng, shape) if shape else rng.uniform(-2, 2, size=shape)
    return rng.uniform(-2.0, 2.0, size=shape)


@pytest.mark.parametrize("label, fn, shapes", COMPOSED, ids=[c[0] for c in COMPOSED])
def test_composed_matches_torch_and_finite_differences(label, fn, shapes):
    torch = _torch()
    rng = _rng(label)
    arrays = [np.asarray(_domain(label, rng, s), dtype=np.float64) for s in shapes]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = fn(torch, *[torch.tensor(a) for a in arrays])
    u = rng.standard_normal(tuple(ref.shape))
    t_val, t_grads = _values_and_grads(torch, fn, arrays, u)
    j_val, j_grads = _values_and_grads(tj, fn, arrays, u)
    assert j_val.shape == t_val.shape
    np.testing.assert_allclose(j_val, t_val, rtol=1e-10, atol=1e-12)
    for j, t in zip(j_grads, t_grads):
        np.testing.assert_allclose(j, t, rtol=1e-9, atol=1e-10)
    for j, f in zip(j_grads, _fd_grads(fn, arrays, u)):
        np.testing.assert_allclose(j, f, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("label, fn, shapes", COMPOSED[:6], ids=[c[0] for c in COMPOSED[:6]])
def test_composed_float32_keeps_dtype(label, fn, shapes):
    rng = _rng(label)
    xs = [tj.tensor(rng.uniform(-2, 2, size=s).astype(np.float32), requires_grad=True) for s in shapes]
    out = fn(tj, *xs)
    assert out.dtype == tj.float32
    out.sum().backward()
    assert all(x.grad.dtype == tj.float32 for x in xs)


# ---- grad_fn names of the ops with their own records ------------------------------------------

GRAD_FN = [
    ("tril", lambda m, x: x.tril()), ("triu", lambda m, x: m.triu(x, -1)), ("flip", lambda m, x: x.flip(0)),
    ("roll", lambda m, x: x.roll(1, 1)), ("rot90", lambda m, x: x.rot90(2)),
    ("diagonal", lambda m, x: x.diagonal(1)), ("diag_embed", lambda m, x: m.diag_embed(x)),
    ("trace", lambda m, x: x.trace()), ("cumsum", lambda m, x: x.cumsum(0)), ("cumprod", lambda m, x: x.cumprod(1)),
    ("take", lambda m, x: x.take(m.tensor([0, 3]))), ("unfold", lambda m, x: x.unfold(1, 2, 1)),
    ("narrow", lambda m, x: x.narrow(0, 1, 1)),
    ("select", lambda m, x: x.select(1, -1)), ("select_function", lambda m, x: m.select(x, 0, 2)),
    ("scatter", lambda m, x: x.scatter(0, m.tensor([[1, 0, 2]]), x[:1] * 2)),
    ("scatter_value", lambda m, x: x.scatter(0, m.tensor([[1, 0, 2]]), 1.0)),
    ("scatter_add", lambda m, x: x.scatter_add(1, m.tensor([[0], [2], [1]]), x)),
    ("index_add", lambda m, x: x.index_add(0, m.tensor([0, 0]), x[1:])),
    ("index_copy", lambda m, x: x.index_copy(1, m.tensor([1]), x[:, :1])),
    ("index_fill", lambda m, x: x.index_fill(1, m.tensor([1]), 0.5)),
    # compositions named as torch's nodes
    ("addcmul", lambda m, x: m.addcmul(x, x, x)), ("addcdiv", lambda m, x: x.addcdiv(x, x + 1.0, value=2)),
    ("addmm", lambda m, x: m.addmm(x, x, x, beta=0.5)), ("addmv", lambda m, x: m.addmv(x[0], x, x[1])),
    ("baddbmm", lambda m, x: m.baddbmm(x, x[None], x[None])), ("outer", lambda m, x: m.outer(x[0], x[1])),
    ("cross", lambda m, x: m.cross(x, x * x + 1.0, dim=1)), ("cdist", lambda m, x: m.cdist(x, x[:2] * 2)),
    ("clamp_min", lambda m, x: m.clamp_min(x, 0.3)), ("clamp_max", lambda m, x: x.clamp_max(0.3)),
]


@pytest.mark.parametrize("name, fn", GRAD_FN, ids=[c[0] for c in GRAD_FN])
def test_grad_fn_names_are_torchs(name, fn):
    torch = _torch()
    a = np.arange(9.0).reshape(3, 3) / 10 + 0.1
    ours = fn(tj, tj.tensor(a, requires_grad=True))
    theirs = fn(torch, torch.tensor(a, requires_grad=True))
    assert ours.grad_fn.name() == theirs.grad_fn.name()
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-12)


# ---- integer and bool tensors (no gradient): values and dtypes as torch -------------------------

INTEGER = [
    ("cumsum_int", lambda m, x: x.cumsum(1)), ("cumsum_bool", lambda m, x: (x > 2).cumsum(0)),
    ("cumprod_bool", lambda m, x: m.cumprod(x > 2, 1)), ("cumprod_int", lambda m, x: (x + 1).cumprod(0)),
    ("trace_int", lambda m, x: x.trace()), ("flip_int", lambda m, x: x.flip(1)),
    ("roll_int", lambda m, x: m.roll(x, 2)), ("tril_int", lambda m, x: x.tril(-1)),
    ("triu_bool", lambda m, x: (x > 3).triu()), ("diag_int", lambda m, x: m.diag(x[0], 1)),
    ("diagonal_int", lambda m, x: x.diagonal()), ("take_int", lambda m, x: x.take(m.tensor([[0, -1]]))),
    ("unfold_int", lambda m, x: x.unfold(0, 2, 1)), ("take_int_0d", lambda m, x: x.take(m.tensor(4))),
    ("flip_int_0d", lambda m, x: x[0, 0].flip(0)), ("rot90_int", lambda m, x: x.rot90(-1)),
    ("scatter_int", lambda m, x: x.scatter(1, m.tensor([[0], [1], [2]]), 7)),
    ("scatter_add_int", lambda m, x: x.scatter_add(0, m.tensor([[2, 2, 2]]), x[:1])),
    ("index_add_int", lambda m, x: x.index_add(0, m.tensor([2, 2]), x[:2])),
    ("index_fill_bool", lambda m, x: (x > 3).index_fill(0, m.tensor([0]), True)),
    ("repeat_interleave_int", lambda m, x: x.repeat_interleave(2)),
    ("repeat_interleave_counts", lambda m, x: m.repeat_interleave(m.tensor([2, 0, 1]))),
    ("einsum_int", lambda m, x: m.einsum("ij,jk->ik", x, x)),
    ("einsum_int_ellipsis", lambda m, x: m.einsum("...A,Ab->...b", x, x)),
    ("kron_int", lambda m, x: m.kron(x[:2, :2], x[:1])),
    ("count_nonzero", lambda m, x: m.count_nonzero(x - 4)),
    ("count_nonzero_dims", lambda m, x: (x % 2).count_nonzero(dim=(0, 1))),
    ("count_nonzero_dim", lambda m, x: m.count_nonzero(x % 2, 1)),
    ("nonzero", lambda m, x: (x % 3).nonzero()),
    ("argwhere", lambda m, x: m.argwhere(x > 5)),
    ("nonzero_0d", lambda m, x: m.nonzero(m.tensor(2.0))),
    ("unique", lambda m, x: m.unique(x % 4)),
    ("bincount", lambda m, x: m.bincount(x.reshape(-1) % 4)),
    ("bincount_minlength", lambda m, x: m.bincount(x.reshape(-1) % 3, minlength=6)),
    ("bincount_float32_weights", lambda m, x: m.bincount(x[0], m.tensor([0.5, 1.0, 2.0]))),
    ("bincount_float64_weights", lambda m, x: x[0].bincount(m.tensor([0.5, 1.0, 2.0], dtype=m.float64))),
    ("bincount_long_weights", lambda m, x: m.bincount(x[0], x[1])),
    ("histc", lambda m, x: m.histc(x.float(), bins=4)),
    ("histc_range", lambda m, x: x.double().histc(bins=3, min=1, max=6)),
    ("histc_outside", lambda m, x: m.histc(x.float() - 2.5, bins=5, min=-1, max=1)),
    ("isclose", lambda m, x: m.isclose(x.double(), x.double() + 1e-9)),
    ("isclose_tol", lambda m, x: x.float().isclose(x.float() * 1.05, rtol=0.01, atol=0.1)),
    ("isclose_nan", lambda m, x: m.isclose(x.double() / 0.0 * 0.0, x.double() / 0.0 * 0.0, equal_nan=True)),
    ("isclose_int", lambda m, x: m.isclose(x, x + x % 2)),
    ("bitwise_and", lambda m, x: m.bitwise_and(x, 6)), ("bitwise_or", lambda m, x: x.bitwise_or(x * 3)),
    ("bitwise_xor", lambda m, x: m.bitwise_xor(x, x.flip(0))), ("bitwise_not", lambda m, x: m.bitwise_not(x)),
    ("bitwise_bool", lambda m, x: m.bitwise_and(x > 2, x < 6)),
    ("bitwise_not_bool", lambda m, x: (x > 2).bitwise_not()),
    ("bitwise_bool_int", lambda m, x: m.bitwise_or(x > 2, x)),
]


@pytest.mark.parametrize("label, fn", INTEGER, ids=[c[0] for c in INTEGER])
def test_integer_and_bool_results_match_torch(label, fn):
    torch = _torch()
    a = np.array([[3, 1, 4], [1, 5, 9], [2, 6, 5]], dtype=np.int64)
    ours, theirs = fn(tj, tj.tensor(a)), fn(torch, torch.tensor(a))
    assert str(ours.dtype).replace("tapejit", "torch") == str(theirs.dtype)
    assert tuple(ours.shape) == tuple(theirs.shape)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_triangle_indices_match_torch():
    torch = _torch()
    for args in ((3, 4), (3, 4, 1), (4, 3, -1), (0, 0), (1, 5, -2), (5, 2, 7)):
        for name in ("tril_indices", "triu_indices"):
            ours, theirs = getattr(tj, name)(*args), getattr(torch, name)(*args)
            assert ours.dtype == tj.int64
            np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_unique_options_match_torch():
    torch = _torch()
    a = np.array([[2, 1, 2], [3, 1, 1], [2, 1, 2]])
    for kwargs in ({"return_inverse": True}, {"return_counts": True},
                   {"return_inverse": True, "return_counts": True}, {"dim": 0, "return_inverse": True},
                   {"dim": 1, "return_counts": True}):
        ours, theirs = tj.unique(tj.tensor(a), **kwargs), torch.unique(torch.tensor(a), **kwargs)
        assert len(ours) == len(theirs)
        for o, t in zip(ours, theirs):
            assert str(o.dtype).replace("tapejit", "torch") == str(t.dtype)
            np.testing.assert_array_equal(o.numpy(), t.numpy())
    values = tj.tensor([2.5, -1.0, 2.5]).unique()
    assert values.dtype == tj.float32
    np.testing.assert_array_equal(values.numpy(), [-1.0, 2.5])


def test_nonzero_as_tuple_matches_torch():
    torch = _torch()
    a = np.array([[0.0, 1.5], [2.0, 0.0], [0.0, 3.0]])
    ours, theirs = tj.nonzero(tj.tensor(a), as_tuple=True), torch.nonzero(torch.tensor(a), as_tuple=True)
    assert len(ours) == len(theirs) == 2
    for o, t in zip(ours, theirs):
        assert o.dtype == tj.int64
        np.testing.assert_array_equal(o.numpy(), t.numpy())
    (o,), (t,) = tj.tensor(5.0).nonzero(as_tuple=True), torch.tensor(5.0).nonzero(as_tuple=True)
    np.testing.assert_array_equal(o.numpy(), t.numpy())


def test_histc_of_constant_values_and_edges_match_torch():
    torch = _torch()
    for values, kwargs in (([2.0, 2.0, 2.0], {"bins": 4}), ([0.0, 0.25, 0.5, 1.0], {"bins": 4, "max": 1}),
                           ([0.1, 0.3, 0.7, 0.9999, 1.0], {"bins": 10, "min": 0, "max": 1}),
                           (np.random.default_rng(3).standard_normal(500).tolist(), {"bins": 7}),
                           (np.random.default_rng(4).uniform(0, 1, 300).round(2).tolist(),
                            {"bins": 10, "min": 0.1, "max": 0.9})):
        ours = tj.histc(tj.tensor(values), **kwargs)
        theirs = torch.histc(torch.tensor(values), **kwargs)
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_cumsum_dtype_casts_first_as_torch():
    torch = _torch()
    a = np.random.default_rng(5).uniform(-1, 1, 6).astype(np.float32)
    ours, theirs = tj.tensor(a).cumsum(0, dtype=tj.float64), torch.tensor(a).cumsum(0, dtype=torch.float64)
    assert ours.dtype == tj.float64
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_meshgrid_without_indexing_warns_as_torch_and_uses_ij():
    with pytest.warns(UserWarning, match="indexing argument"):
        a, b = tj.meshgrid(tj.tensor([1.0, 2.0]), tj.tensor([3.0, 4.0, 5.0]))
    assert a.shape == (2, 3) and b.shape == (2, 3)
    np.testing.assert_array_equal(a.numpy()[:, 0], [1.0, 2.0])


def test_cross_without_dim_warns_and_takes_the_first_dim_of_size_3():
    torch = _torch()
    a, b = np.random.default_rng(0).standard_normal((2, 3, 3))
    with pytest.warns(UserWarning, match="without specifying the dim"):
        ours = tj.cross(tj.tensor(a), tj.tensor(b))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = torch.cross(torch.tensor(a), torch.tensor(b))
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12)


def test_cdist_of_identical_points_has_torchs_zero_gradient():
    torch = _torch()
    a = np.array([[0.0, 1.0], [2.0, 3.0]])
    ours = tj.tensor(a, requires_grad=True)
    tj.cdist(ours, ours).sum().backward()
    theirs = torch.tensor(a, requires_grad=True)
    torch.cdist(theirs, theirs).sum().backward()
    assert np.isfinite(ours.grad.numpy()).all()
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), atol=1e-12)


def test_cumprod_gradient_with_zeros_matches_torch():
    torch = _torch()
    for values in ([2.0, 0.0, 3.0, 4.0], [0.0, 0.0, 2.0], [1.5, -2.0, 0.0], [0.0]):
        ours = tj.tensor(values, requires_grad=True)
        ours.cumprod(0).sum().backward()
        theirs = torch.tensor(values, dtype=torch.float64, requires_grad=True)
        theirs.cumprod(0).sum().backward()
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-6)


# ---- in-place forms --------------------------------------------------------------------------

IN_PLACE = [
    ("scatter_", lambda m, x, s: x.scatter_(1, m.tensor([[2], [0]]), s)),
    ("scatter_value_", lambda m, x, s: x.scatter_(1, m.tensor([[2], [0]]), -3.0)),
    ("scatter_add_", lambda m, x, s: x.scatter_add_(0, m.tensor([[1], [1]]), s)),
    ("index_add_", lambda m, x, s: x.index_add_(1, m.tensor([2]), s, alpha=2)),
    ("index_copy_", lambda m, x, s: x.index_copy_(1, m.tensor([0]), s)),
    ("index_fill_", lambda m, x, s: x.index_fill_(0, m.tensor([1]), 4.0)),
    ("tril_", lambda m, x, s: x.tril_()),
    ("triu_", lambda m, x, s: x.triu_(1)),
    ("cumsum_", lambda m, x, s: x.cumsum_(1)),
    ("cumprod_", lambda m, x, s: x.cumprod_(0)),
    ("square_", lambda m, x, s: x.square_()),
    ("torch.square_", lambda m, x, s: m.square_(x)),
    ("addcmul_", lambda m, x, s: x.addcmul_(s, s + 1.0, value=0.5)),
    ("addcdiv_", lambda m, x, s: x.addcdiv_(s, s * s + 1.0, value=2)),
    ("fmod_", lambda m, x, s: x.fmod_(0.75)),
    ("remainder_", lambda m, x, s: x.remainder_(0.75)),
    ("addmm_", lambda m, x, s: x.addmm_(s, s.t()[:, :1] + m.ones(1, 3, dtype=x.dtype), beta=0.5, alpha=2)),
    ("baddbmm_", lambda m, x, s: x.unsqueeze_(0).baddbmm_(s[None], m.ones(1, 1, 3, dtype=x.dtype), alpha=3).squeeze_(0)),
]


@pytest.mark.parametrize("label, fn", IN_PLACE, ids=[c[0] for c in IN_PLACE])
def test_in_place_forms_match_torch_with_gradients(label, fn):
    torch = _torch()
    rng = _rng(label)
    a, s = rng.uniform(-2, 2, size=(2, 3)), rng.uniform(-2, 2, size=(2, 1))
    u = rng.standard_normal((2, 3))
    results = []
    for m in (tj, torch):
        x0, s0 = m.tensor(a, requires_grad=True), m.tensor(s, requires_grad=True)
        x = x0 * 1.0   # a non-leaf, as in-place ops on leaves that require grad are refused
        out = fn(m, x, s0)
        assert out is x
        (x * m.tensor(u)).sum().backward()
        results.append((x.detach().numpy().copy(), x0.grad.numpy().copy(),
                        None if s0.grad is None else s0.grad.numpy().copy()))
    (xv, xg, sg), (tv, tg, tsg) = results
    np.testing.assert_allclose(xv, tv, rtol=1e-12)
    np.testing.assert_allclose(xg, tg, rtol=1e-12)
    assert (sg is None) == (tsg is None) or np.all(tsg == 0) or np.all(sg == 0)
    if sg is not None and tsg is not None:
        np.testing.assert_allclose(sg, tsg, rtol=1e-12)


def test_in_place_on_a_leaf_that_requires_grad_is_refused():
    x = tj.zeros(2, 3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        x.index_fill_(0, tj.tensor([0]), 1.0)


def test_functions_and_methods_exist_where_torch_has_them():
    torch = _torch()
    names = ("tril triu flip roll rot90 diag diagonal diag_embed trace cumprod cumsum einsum tensordot kron cross "
             "baddbmm addmm addmv narrow meshgrid cdist take repeat_interleave isclose count_nonzero nonzero "
             "argwhere unique bincount histc scatter scatter_add index_add index_copy index_fill bitwise_and "
             "bitwise_or bitwise_xor bitwise_not fliplr flipud diagflat tril_indices triu_indices").split()
    methods = names + ("unfold scatter_ scatter_add_ index_add_ index_copy_ index_fill_ tril_ triu_ cumsum_ "
                       "cumprod_").split()
    for n in names:
        assert hasattr(tj, n) == hasattr(torch, n), n
    for n in methods:
        assert hasattr(tj.Tensor, n) == hasattr(torch.Tensor, n), n


# ---- errors: torch's exception types (and wording where it names the fault) --------------------

ERRORS = [
    ("select_oob", lambda m, x: x.select(1, -5), "select(): index -5 out of range for tensor of size [3, 4] at dimension 1"),
    ("scatter_oob", lambda m, x: x.scatter(1, m.tensor([[0], [1], [5]]), 1.0), "index 5 is out of bounds"),
    ("scatter_neg", lambda m, x: x.scatter(1, m.tensor([[-1], [1], [1]]), 1.0), "index -1 is out of bounds"),
    ("scatter_float_index", lambda m, x: x.scatter(1, m.tensor([[0.0], [1.0], [1.0]]), 1.0), "index"),
    ("scatter_dtype", lambda m, x: x.scatter(1, m.tensor([[0], [1], [1]]), x.double()), "dtype"),
    ("scatter_ndim", lambda m, x: x.scatter(1, m.tensor([0, 1, 1]), x), "same number of dimensions"),
    ("scatter_src_small", lambda m, x: x.scatter(1, m.zeros(3, 2, dtype=m.long), m.zeros(3, 1)), "no larger"),
    ("index_add_oob", lambda m, x: x.index_add(0, m.tensor([3]), x[:1]), "out of bounds"),
    ("index_add_count", lambda m, x: x.index_add(0, m.tensor([0, 1]), x[:1]), "Number of indices (2)"),
    ("index_add_float_index", lambda m, x: x.index_add(0, m.tensor([0.0]), x[:1]), "index"),
    ("index_copy_oob", lambda m, x: x.index_copy(0, m.tensor([3]), x[:1]), "out of bounds"),
    ("index_fill_oob", lambda m, x: x.index_fill(0, m.tensor([3]), 1.0), "out of bounds"),
    ("take_oob", lambda m, x: x.take(m.tensor([12])), "out of range"),
    ("narrow_too_long", lambda m, x: x.narrow(1, 3, 2), "exceeds dimension size"),
    ("narrow_0d", lambda m, x: m.tensor(1.0).narrow(0, 0, 1), "0-dim"),
    ("unfold_too_big", lambda m, x: x.unfold(1, 5, 1), "maximum size"),
    ("unfold_step", lambda m, x: x.unfold(1, 2, 0), "step is 0"),
    ("tril_1d", lambda m, x: m.ones(3).tril(), "at least 2 dimensions"),
    ("flip_repeated", lambda m, x: x.flip(0, 0), "appears multiple times"),
    ("flip_dim", lambda m, x: x.flip(2), "out of range"),
    ("roll_align", lambda m, x: x.roll((1, 2), (0,)), "must align"),
    ("roll_no_dims", lambda m, x: x.roll((1, 2)), "must align"),
    ("rot90_same", lambda m, x: x.rot90(1, (0, 0)), "different"),
    ("rot90_1d", lambda m, x: m.ones(3).rot90(), "total dims >= 2"),
    ("rot90_three", lambda m, x: x.rot90(1, (0, 1, 2)), "== 2"),
    ("diag_3d", lambda m, x: m.ones(2, 2, 2).diag(), "1D or 2D"),
    ("diagonal_same", lambda m, x: x.diagonal(0, 1, 1), "cannot be identical"),
    ("diag_embed_same", lambda m, x: m.diag_embed(x, 0, 1, 1), "cannot be identical"),
    ("trace_3d", lambda m, x: m.ones(2, 2, 2).trace(), "expected a matrix"),
    ("trace_bool", lambda m, x: (x > 0).trace(), "Bool"),
    ("cumprod_dim", lambda m, x: x.cumprod(2), "out of range"),
    ("einsum_few", lambda m, x: m.einsum("ij,jk", x), "fewer operands"),
    ("einsum_many", lambda m, x: m.einsum("ij", x, x), "more operands"),
    ("einsum_ndim", lambda m, x: m.einsum("ijk", x), "number of subscripts"),
    ("einsum_size", lambda m, x: m.einsum("ij,ij->", x, m.ones(3, 5)), "subscript j has size 5"),
    ("einsum_dtypes", lambda m, x: m.einsum("ij,jk->ik", x, m.ones(4, 2, dtype=m.float64)), "expected scalar type"),
    ("tensordot_sizes", lambda m, x: m.tensordot(x, x, ([1], [0])), "contracted dimensions need to match"),
    ("cross_length", lambda m, x: m.cross(m.ones(3, 4), m.ones(3, 4), dim=1), "must have length 3"),
    ("cross_ndim", lambda m, x: m.cross(m.ones(2, 1, 3), m.ones(4, 3), dim=-1), "same number of dimensions"),
    ("baddbmm_sizes", lambda m, x: m.baddbmm(m.ones(2, 3, 3), m.ones(2, 3, 4), m.ones(2, 5, 3)), "batch2"),
    ("addmm_sizes", lambda m, x: m.addmm(m.ones(3, 3), m.ones(3, 4), m.ones(5, 3)), "cannot be multiplied"),
    ("addmm_input", lambda m, x: m.addmm(m.ones(2, 3), m.ones(3, 4), m.ones(4, 3)), "size"),
    ("meshgrid_2d", lambda m, x: m.meshgrid(m.ones(2, 2), m.ones(3), indexing="ij"), "0D or 1D"),
    ("meshgrid_indexing", lambda m, x: m.meshgrid(m.ones(2), indexing="foo"), "indexing must be"),
    ("cdist_1d", lambda m, x: m.cdist(m.ones(3), m.ones(3)), "at least 2D"),
    ("cdist_columns", lambda m, x: m.cdist(m.ones(3, 2), m.ones(3, 3)), "same number of columns"),
    ("cdist_negative_p", lambda m, x: m.cdist(m.ones(3, 2), m.ones(3, 2), p=-1), "non-negative"),
    ("cdist_int", lambda m, x: m.cdist(m.ones(3, 2, dtype=m.long), m.ones(3, 2, dtype=m.long)), "floating-point"),
    ("repeat_interleave_sizes", lambda m, x: x.repeat_interleave(m.tensor([1, 2]), dim=0), "same size"),
    ("repeat_interleave_negative", lambda m, x: x.repeat_interleave(-1), "non-negative"),
    ("bincount_negative", lambda m, x: m.bincount(m.tensor([-1, 2])), "non-negative"),
    ("bincount_float", lambda m, x: m.bincount(m.tensor([1.0, 2.0])), "not implemented for 'Float'"),
    ("bincount_2d", lambda m, x: m.bincount(m.tensor([[1, 2]])), "1-d"),
    ("histc_int", lambda m, x: m.histc(m.tensor([1, 2])), "not implemented for 'Long'"),
    ("histc_bins", lambda m, x: m.histc(x, bins=0), "bins must be > 0"),
    ("histc_min_max", lambda m, x: m.histc(x, min=2, max=1), "max must be larger than min"),
    ("bitwise_float", lambda m, x: m.bitwise_and(x, x), "not implemented for 'Float'"),
    ("bitwise_not_float", lambda m, x: m.bitwise_not(x), "not implemented for 'Float'"),
    ("isclose_dtypes", lambda m, x: m.isclose(x, x.double()), "did not match"),
    ("tril_indices_negative", lambda m, x: m.tril_indices(-1, 2), "row must be non-negative"),
]


@pytest.mark.parametrize("label, fn, fragment", ERRORS, ids=[c[0] for c in ERRORS])
def test_errors_are_torchs(label, fn, fragment):
    torch = _torch()
    a = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Exception) as theirs:
            fn(torch, torch.tensor(a))
        with pytest.raises(type(theirs.value)) as ours:
            fn(tj, tj.tensor(a))
    assert fragment in str(ours.value)


def test_integer_and_vector_in_place_forms_match_torch():
    results = []
    for m in (tj, pytest.importorskip("torch")):
        i = m.tensor([5, 3, -4])
        i.bitwise_and_(m.tensor([7, 2, -1])).bitwise_or_(8).bitwise_xor_(1)
        j = m.tensor([5, -3]).bitwise_not_()
        k = m.tensor([7.0, -3.0]).floor_divide_(2)
        v = m.tensor([1.0, 2.0]).addmv_(m.tensor([[1.0, 2.0], [3.0, 4.0]]), m.tensor([0.5, -1.0]), beta=2)
        results.append((i.tolist(), j.tolist(), k.tolist(), v.tolist(), str(i.dtype).split(".")[-1]))
    assert results[0] == results[1]
