"""LeakyReLU, SiLU, ELU, Softmax, LogSoftmax, ``normalize`` and BCELoss beyond the
table-driven checks of test_nn_functional.py (torch away from kinks, NumPy formulas and
finite differences): torch's subgradients at the kinks, large inputs, in-place forms,
BCE's reductions, weights and errors."""
import numpy as np
import pytest

import tapejit as tj
import tapejit.nn.functional as F
from test_nn_functional import (ACTIVATIONS, DTYPES, REDUCTIONS, _silu_np, _softmax_np, check_gradients_fd,
                                compare_with_torch, rng, value)

LEAF_ERROR = "a leaf Variable that requires grad is being used in an in-place operation"


#: the activations added with this file (their table is test_nn_functional.ACTIVATIONS)
NEW_ACTIVATIONS = ["leaky_relu", "leaky_relu_slope", "LeakyReLU", "elu", "elu_alpha", "ELU", "silu", "SiLU",
                   "Softmax", "Softmax_dim0", "LogSoftmax", "normalize", "normalize_p1_dim0"]


def _input_with_zeros(seed=31):
    x = rng(seed).uniform(-3, 3, (3, 5))
    x[0, 1] = x[2, 3] = x[1, 0] = 0.0       # the kinks: torch's subgradients there
    return x


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", NEW_ACTIVATIONS)
def test_new_activations_match_torch_at_their_kinks(name, dtype):
    """test_nn_functional.py checks them away from kinks and by finite differences; here
    torch's subgradients at 0 are checked too."""
    compare_with_torch(ACTIVATIONS[name][0], [_input_with_zeros()], dtype)


def test_subgradients_at_zero():
    cases = [(lambda t: F.leaky_relu(t), [0.01, 0.01, 1.0]),
             (lambda t: F.leaky_relu(t, 0.2), [0.2, 0.2, 1.0]),
             (lambda t: F.elu(t), [np.exp(-1.0), 1.0, 1.0]),
             (lambda t: F.elu(t, alpha=2.0), [2 * np.exp(-1.0), 2.0, 1.0]),
             (lambda t: F.silu(t), [_silu_np(-1.0) + (1 - _silu_np(-1.0)) / (1 + np.e), 0.5,
                                    1 / (1 + np.exp(-2.0)) * (1 + 2 * (1 - 1 / (1 + np.exp(-2.0))))])]
    for fn, expected in cases:
        x = tj.tensor([-1.0, 0.0, 2.0], dtype=tj.float64, requires_grad=True)
        fn(x).sum().backward()
        np.testing.assert_allclose(value(x.grad), expected, rtol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
def test_activations_stay_finite_far_out(dtype):
    x = tj.tensor([-1e4, -100.0, 100.0, 1e4], dtype=getattr(tj, dtype), requires_grad=True)
    for fn in (F.elu, F.silu, F.leaky_relu):
        x.grad = None
        out = fn(x)
        out.sum().backward()
        assert np.isfinite(value(out)).all() and np.isfinite(value(x.grad)).all()
    np.testing.assert_allclose(value(F.elu(x, alpha=2.0)), [-2.0, -2.0, 100.0, 1e4])


def test_normalize_by_hand():
    x = tj.tensor([[3.0, 4.0], [0.0, 0.0]], dtype=tj.float64, requires_grad=True)
    out = F.normalize(x)
    np.testing.assert_allclose(value(out), [[0.6, 0.8], [0.0, 0.0]])
    out.sum().backward()
    # d/dx (x / |x|) summed: (1 - x (x . 1) / |x|^2) / |x|; a zero row is divided by eps.
    np.testing.assert_allclose(value(x.grad), [[(1 - 0.6 * 1.4) / 5, (1 - 0.8 * 1.4) / 5], [1e12, 1e12]])
    np.testing.assert_allclose(value(F.normalize(tj.tensor([3.0, -4.0]), dim=0)), [0.6, -0.8], rtol=1e-6)


def test_softmax_modules_default_dim_is_torchs_legacy_choice():
    x = rng(33).standard_normal((2, 3, 4))
    t = tj.tensor(x)
    np.testing.assert_allclose(value(tj.nn.Softmax()(t)), _softmax_np(x, 0), rtol=1e-12)
    np.testing.assert_allclose(value(tj.nn.LogSoftmax()(t[0])), np.log(_softmax_np(x[0], 1)), rtol=1e-12)


# ---- in place -------------------------------------------------------------------------------

INPLACE = {
    "leaky_relu": (lambda lib, x: lib.nn.functional.leaky_relu(x, 0.2, inplace=True),
                   lambda lib, x: lib.nn.functional.leaky_relu(x, 0.2)),
    "elu": (lambda lib, x: lib.nn.functional.elu(x, 1.5, inplace=True), lambda lib, x: lib.nn.functional.elu(x, 1.5)),
    "silu": (lambda lib, x: lib.nn.functional.silu(x, inplace=True), lambda lib, x: lib.nn.functional.silu(x)),
    "LeakyReLU": (lambda lib, x: lib.nn.LeakyReLU(inplace=True)(x), lambda lib, x: lib.nn.LeakyReLU()(x)),
    "ELU": (lambda lib, x: lib.nn.ELU(inplace=True)(x), lambda lib, x: lib.nn.ELU()(x)),
    "SiLU": (lambda lib, x: lib.nn.SiLU(inplace=True)(x), lambda lib, x: lib.nn.SiLU()(x)),
}


@pytest.mark.parametrize("name", sorted(INPLACE))
def test_inplace_modifies_input_and_keeps_gradients(name):
    inplace, plain = INPLACE[name]
    x = _input_with_zeros()
    a = tj.tensor(x)
    version = a._version
    assert inplace(tj, a) is a
    assert a._version == version + 1
    np.testing.assert_allclose(value(a), value(plain(tj, tj.tensor(x))), rtol=1e-12)

    leaf = tj.tensor(x, requires_grad=True)
    hidden = leaf * 2.0
    out = inplace(tj, hidden)
    assert out is hidden
    out.sum().backward()
    expected = tj.tensor(x, requires_grad=True)
    plain(tj, expected * 2.0).sum().backward()
    np.testing.assert_allclose(value(leaf.grad), value(expected.grad), rtol=1e-12)


@pytest.mark.parametrize("name", sorted(INPLACE))
def test_inplace_refuses_a_leaf_that_requires_grad(name):
    with pytest.raises(RuntimeError, match=LEAF_ERROR):
        INPLACE[name][0](tj, tj.tensor([-1.0, 2.0], requires_grad=True))


@pytest.mark.parametrize("name", sorted(INPLACE))
def test_inplace_matches_torch(name):
    torch = pytest.importorskip("torch")
    x = _input_with_zeros()
    results = []
    for lib in (tj, torch):
        leaf = lib.tensor(x, requires_grad=True)
        out = INPLACE[name][0](lib, leaf * 2.0)
        (out * lib.tensor(x)).sum().backward()
        results.append((out.detach().numpy(), leaf.grad.numpy()))
        with pytest.raises(RuntimeError, match=LEAF_ERROR):
            INPLACE[name][0](lib, lib.tensor(x, requires_grad=True))
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-15)


# ---- reprs ----------------------------------------------------------------------------------

REPRS = [
    (lambda lib: lib.nn.LeakyReLU(), "LeakyReLU(negative_slope=0.01)"),
    (lambda lib: lib.nn.LeakyReLU(0.2, inplace=True), "LeakyReLU(negative_slope=0.2, inplace=True)"),
    (lambda lib: lib.nn.ELU(), "ELU(alpha=1.0)"),
    (lambda lib: lib.nn.ELU(alpha=2.0, inplace=True), "ELU(alpha=2.0, inplace=True)"),
    (lambda lib: lib.nn.SiLU(), "SiLU()"),
    (lambda lib: lib.nn.SiLU(inplace=True), "SiLU(inplace=True)"),
    (lambda lib: lib.nn.Softmax(), "Softmax(dim=None)"),
    (lambda lib: lib.nn.Softmax(dim=-1), "Softmax(dim=-1)"),
    (lambda lib: lib.nn.LogSoftmax(1), "LogSoftmax(dim=1)"),
    (lambda lib: lib.nn.BCELoss(), "BCELoss()"),
    (lambda lib: lib.nn.BCELoss(weight=lib.ones(2), reduction="sum"), "BCELoss()"),
    (lambda lib: lib.nn.Sequential(lib.nn.Linear(2, 3), lib.nn.SiLU(), lib.nn.Softmax(dim=1)),
     "Sequential(\n  (0): Linear(in_features=2, out_features=3, bias=True)\n  (1): SiLU()\n"
     "  (2): Softmax(dim=1)\n)"),
]


@pytest.mark.parametrize("index", range(len(REPRS)))
def test_repr(index):
    make, expected = REPRS[index]
    assert repr(make(tj)) == expected


@pytest.mark.parametrize("index", range(len(REPRS)))
def test_repr_matches_torch(index):
    torch = pytest.importorskip("torch")
    make, _ = REPRS[index]
    assert repr(make(tj)) == repr(make(torch))


def test_defaults_and_attributes():
    m = tj.nn.LeakyReLU()
    assert (m.negative_slope, m.inplace) == (0.01, False)
    m = tj.nn.ELU()
    assert (m.alpha, m.inplace) == (1.0, False)
    assert tj.nn.SiLU().inplace is False
    assert tj.nn.Softmax().dim is None and tj.nn.LogSoftmax().dim is None
    assert tj.nn.BCELoss().reduction == "mean" and tj.nn.BCELoss().weight is None
    for name in ("LeakyReLU", "SiLU", "ELU", "Softmax", "LogSoftmax", "BCELoss"):
        assert name in tj.nn.__all__
    for name in ("leaky_relu", "silu", "elu", "binary_cross_entropy", "normalize"):
        assert name in F.__all__


# ---- binary cross-entropy -------------------------------------------------------------------

def np_bce(x, t, w, reduction):
    loss = -(t * np.maximum(np.log(x), -100) + (1 - t) * np.maximum(np.log1p(-x), -100))
    loss = loss * (1.0 if w is None else w)
    return {"mean": np.mean, "sum": np.sum, "none": lambda a: a}[reduction](loss)


def _bce_case(seed=34):
    r = rng(seed)
    return r.uniform(0.02, 0.98, (5, 3)), r.uniform(0, 1, (5, 3))


WEIGHTS = {"none": None, "full": lambda r: r.uniform(0.5, 2.0, (5, 3)), "row": lambda r: r.uniform(0.5, 2.0, 3)}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", sorted(WEIGHTS))
@pytest.mark.parametrize("target_grad", [False, True])
def test_bce_matches_torch(target_grad, weighted, reduction, dtype):
    weight = WEIGHTS[weighted] and WEIGHTS[weighted](rng(35))

    def fn(lib, probs, target):
        w = None if weight is None else lib.tensor(weight.astype(dtype))
        return lib.nn.BCELoss(weight=w, reduction=reduction)(probs, target)
    compare_with_torch(fn, list(_bce_case()), dtype, differentiable=[True, target_grad])


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", sorted(WEIGHTS))
def test_bce_numpy_and_finite_differences(weighted, reduction):
    x, t = _bce_case(36)
    weight = WEIGHTS[weighted] and WEIGHTS[weighted](rng(37))

    def fn(a, b):
        return F.binary_cross_entropy(a, b, None if weight is None else tj.tensor(weight), reduction=reduction)
    out = check_gradients_fd(fn, [x, t])
    np.testing.assert_allclose(value(out), np_bce(x, t, weight, reduction), rtol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
def test_bce_clamps_logs_at_minus_100(dtype):
    x = np.array([0.0, 1.0, 0.0, 1.0, 1e-30, 0.5])
    t = np.array([0.3, 0.3, 0.0, 1.0, 1.0, 0.5])
    probs = tj.tensor(x.astype(dtype), requires_grad=True)
    out = F.binary_cross_entropy(probs, tj.tensor(t.astype(dtype)), reduction="none")
    expected = [30.0, 70.0, 0.0, 0.0, -np.log(1e-30), np.log(2)]
    np.testing.assert_allclose(value(out), expected, rtol=1e-6, atol=1e-6)
    out.sum().backward()
    assert np.isfinite(value(probs.grad)).all()


def test_bce_values_match_torch_at_the_edges():
    torch = pytest.importorskip("torch")
    x = np.array([0.0, 1.0, 0.0, 1.0, 1e-30, 1 - 1e-12, 0.5])
    t = np.array([0.3, 0.3, 0.0, 1.0, 1.0, 0.0, 0.5])
    for dtype in DTYPES:
        ours = F.binary_cross_entropy(tj.tensor(x.astype(dtype)), tj.tensor(t.astype(dtype)), reduction="none")
        theirs = torch.nn.functional.binary_cross_entropy(torch.tensor(x.astype(dtype)),
                                                          torch.tensor(t.astype(dtype)), reduction="none")
        np.testing.assert_allclose(value(ours), theirs.numpy(), rtol=1e-6, atol=1e-6)


def test_bce_by_hand():
    probs = tj.tensor([0.5, 0.25], dtype=tj.float64, requires_grad=True)
    loss = tj.nn.BCELoss(weight=tj.tensor([1.0, 2.0], dtype=tj.float64))(probs, tj.tensor([1.0, 0.0], dtype=tj.float64))
    np.testing.assert_allclose(value(loss), (np.log(2) - 2 * np.log(0.75)) / 2, rtol=1e-14)
    loss.backward()
    np.testing.assert_allclose(value(probs.grad), [-1 / 0.5 / 2, 2 / 0.75 / 2], rtol=1e-14)


def test_bce_weight_is_a_buffer():
    w = tj.tensor([1.0, 2.0])
    loss = tj.nn.BCELoss(weight=w)
    assert loss.weight is w
    assert list(loss.state_dict()) == ["weight"]


def test_bce_size_mismatch_is_a_value_error():
    message = (r"Using a target size \(.*\[3, 1\]\)\) that is different to the input size \(.*\[3\]\)\) is "
               r"deprecated\. Please ensure they have the same size\.")
    with pytest.raises(ValueError, match=message):
        F.binary_cross_entropy(tj.rand(3), tj.rand(3, 1))
    with pytest.raises(ValueError, match="Using a target size"):
        tj.nn.BCELoss()(tj.rand(2, 3), tj.rand(3))


def test_bce_bad_reduction_raises_value_error():
    with pytest.raises(ValueError, match="bad is not a valid value for reduction"):
        tj.nn.BCELoss(reduction="bad")
    with pytest.raises(ValueError, match="bad is not a valid value for reduction"):
        F.binary_cross_entropy(tj.rand(2), tj.rand(2), reduction="bad")


def test_small_classifier_step_matches_torch():
    torch = pytest.importorskip("torch")
    r = rng(38)
    x, y = r.standard_normal((8, 4)), (r.uniform(size=(8, 1)) > 0.5).astype(np.float64)
    w1, w2 = r.standard_normal((6, 4)), r.standard_normal((1, 6))
    grads = []
    for lib in (tj, torch):
        weights = [lib.tensor(w1, requires_grad=True), lib.tensor(w2, requires_grad=True)]
        h = lib.nn.ELU()(lib.nn.LeakyReLU(0.1)(lib.tensor(x) @ weights[0].T))
        h = lib.nn.functional.normalize(lib.nn.SiLU()(h))
        loss = lib.nn.BCELoss()(lib.sigmoid(h @ weights[1].T), lib.tensor(y))
        loss.backward()
        grads.append([loss.detach().numpy()] + [w.grad.numpy() for w in weights])
    for ours, theirs in zip(*grads):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)
