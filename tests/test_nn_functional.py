"""Layers, losses and ``nn.functional`` checked for values and gradients.

Each function is compared with torch on the same inputs and copied parameters (float32
and float64) where torch is importable, and, so that the file asserts something without
torch too, with an independent NumPy formula for values and central finite differences
(float64) for gradients.
"""
import math

import numpy as np
import pytest

import tapejit as tj
import tapejit.nn.functional as F
from tapejit.testing import check_grads

DTYPES = ["float32", "float64"]
TOL = {"float32": {"rtol": 3e-5, "atol": 3e-6}, "float64": {"rtol": 1e-10, "atol": 1e-12}}


def rng(seed=0):
    return np.random.default_rng(seed)


def value(t):
    return np.asarray(t.detach())


# ---- harnesses ------------------------------------------------------------------------------

def _scalar(out, upstream, lib):
    """A scalar whose gradient is the vector-Jacobian product of ``out`` with ``upstream``."""
    if upstream is None:
        return out
    return (out * lib.tensor(upstream)).sum()


def compare_with_torch(fn, arrays, dtype, differentiable=None, seed=1):
    """Run ``fn(lib, *tensors)`` in tapejit and torch on copies of ``arrays`` (float arrays
    converted to ``dtype``); compare the outputs and the gradients of every float input."""
    torch = pytest.importorskip("torch")
    arrays = [a.astype(dtype) if a.dtype.kind == "f" else a for a in arrays]
    differentiable = differentiable or [a.dtype.kind == "f" for a in arrays]
    tj_in = [tj.tensor(a, requires_grad=g) for a, g in zip(arrays, differentiable)]
    th_in = [torch.tensor(a, requires_grad=g) for a, g in zip(arrays, differentiable)]
    out_tj = fn(tj, *tj_in)
    out_th = fn(torch, *th_in)
    assert tuple(out_tj.shape) == tuple(out_th.shape)
    assert out_tj.dtype.name == str(out_th.dtype).replace("torch.", "")
    np.testing.assert_allclose(value(out_tj), out_th.detach().numpy(), **TOL[dtype])
    upstream = None if out_tj.ndim == 0 else rng(seed).standard_normal(out_tj.shape).astype(dtype)
    _scalar(out_tj, upstream, tj).backward()
    _scalar(out_th, upstream, torch).backward()
    for i, (a, b) in enumerate(zip(tj_in, th_in)):
        if b.requires_grad:
            assert a.grad is not None, f"input {i} got no gradient"
            np.testing.assert_allclose(value(a.grad), b.grad.numpy(), **TOL[dtype], err_msg=f"gradient of input {i}")
    return out_tj


def check_gradients_fd(fn, arrays, differentiable=None, eps=1e-6, seed=1):
    """Gradients of ``fn(*tensors)`` (float64) against central finite differences; returns
    ``fn``'s output (float64, inputs that require grad)."""
    arrays = [a.astype(np.float64) if a.dtype.kind == "f" else a for a in arrays]
    differentiable = differentiable or [a.dtype.kind == "f" for a in arrays]
    wrt = [i for i, g in enumerate(differentiable) if g]
    check_grads(fn, arrays, wrt=wrt, eps=eps, rtol=1e-6, atol=1e-7, seed=seed)
    return fn(*[tj.tensor(a, requires_grad=g) for a, g in zip(arrays, differentiable)])


# ---- linear ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("x_shape", [(5, 3), (3,), (2, 4, 3)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_matches_torch(dtype, x_shape, bias):
    r = rng(2)
    arrays = [r.standard_normal(x_shape), r.standard_normal((4, 3))] + ([r.standard_normal(4)] if bias else [])
    compare_with_torch(lambda lib, x, w, *b: lib.nn.functional.linear(x, w, *b), arrays, dtype)


def test_linear_numpy_and_finite_differences():
    r = rng(3)
    x, w, b = r.standard_normal((5, 3)), r.standard_normal((4, 3)), r.standard_normal(4)
    out = check_gradients_fd(F.linear, [x, w, b])
    np.testing.assert_allclose(value(out), x @ w.T + b, rtol=1e-12)
    assert out.grad_fn.name() == "AddmmBackward0"   # one fused record, as torch


def test_linear_shape_error_names_both_shapes():
    with pytest.raises(RuntimeError, match=r"mat1 and mat2 shapes cannot be multiplied \(32x3 and 2x16\)"):
        tj.nn.Linear(2, 16)(tj.randn(32, 3))
    with pytest.raises(RuntimeError, match=r"\(32x3 and 2x16\)"):
        tj.nn.Linear(2, 16)(tj.randn(4, 8, 3))


# ---- activations ----------------------------------------------------------------------------

def _gelu_np(x, approximate):
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def _silu_np(x):
    return x / (1 + np.exp(-x))


def _softmax_np(x, dim):
    e = np.exp(x - x.max(dim, keepdims=True))
    return e / e.sum(dim, keepdims=True)


ACTIVATIONS = {
    "relu": (lambda lib, x: lib.nn.ReLU()(x), lambda x: np.maximum(x, 0)),
    "tanh": (lambda lib, x: lib.nn.Tanh()(x), np.tanh),
    "sigmoid": (lambda lib, x: lib.nn.Sigmoid()(x), lambda x: 1 / (1 + np.exp(-x))),
    "softplus": (lambda lib, x: lib.nn.Softplus()(x), lambda x: np.log1p(np.exp(x))),
    "softplus_beta": (lambda lib, x: lib.nn.Softplus(beta=2.0, threshold=3.0)(x),
                      lambda x: np.where(2 * x > 3, x, np.log1p(np.exp(2 * x)) / 2)),
    "gelu": (lambda lib, x: lib.nn.GELU()(x), lambda x: _gelu_np(x, "none")),
    "gelu_tanh": (lambda lib, x: lib.nn.GELU(approximate="tanh")(x), lambda x: _gelu_np(x, "tanh")),
    "identity": (lambda lib, x: lib.nn.Identity()(x), lambda x: x),
    "f_softplus": (lambda lib, x: lib.nn.functional.softplus(x, beta=0.5, threshold=1.0),
                   lambda x: np.where(0.5 * x > 1, x, np.log1p(np.exp(0.5 * x)) / 0.5)),
    "f_gelu": (lambda lib, x: lib.nn.functional.gelu(x, approximate="tanh"), lambda x: _gelu_np(x, "tanh")),
    "leaky_relu": (lambda lib, x: lib.nn.functional.leaky_relu(x), lambda x: np.where(x > 0, x, 0.01 * x)),
    "leaky_relu_slope": (lambda lib, x: lib.nn.functional.leaky_relu(x, negative_slope=0.2),
                         lambda x: np.where(x > 0, x, 0.2 * x)),
    "LeakyReLU": (lambda lib, x: lib.nn.LeakyReLU(0.3)(x), lambda x: np.where(x > 0, x, 0.3 * x)),
    "elu": (lambda lib, x: lib.nn.functional.elu(x), lambda x: np.where(x > 0, x, np.expm1(x))),
    "elu_alpha": (lambda lib, x: lib.nn.functional.elu(x, alpha=2.5), lambda x: np.where(x > 0, x, 2.5 * np.expm1(x))),
    "ELU": (lambda lib, x: lib.nn.ELU(alpha=0.5)(x), lambda x: np.where(x > 0, x, 0.5 * np.expm1(x))),
    "silu": (lambda lib, x: lib.nn.functional.silu(x), _silu_np),
    "SiLU": (lambda lib, x: lib.nn.SiLU()(x), _silu_np),
    "Softmax": (lambda lib, x: lib.nn.Softmax(dim=1)(x), lambda x: _softmax_np(x, 1)),
    "Softmax_dim0": (lambda lib, x: lib.nn.Softmax(0)(x), lambda x: _softmax_np(x, 0)),
    "LogSoftmax": (lambda lib, x: lib.nn.LogSoftmax(dim=-1)(x), lambda x: np.log(_softmax_np(x, -1))),
    "normalize": (lambda lib, x: lib.nn.functional.normalize(x),
                  lambda x: x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)),
    "normalize_p1_dim0": (lambda lib, x: lib.nn.functional.normalize(x, p=1.0, dim=0, eps=0.5),
                          lambda x: x / np.maximum(np.abs(x).sum(0, keepdims=True), 0.5)),
}


def _activation_input(seed=4):
    x = rng(seed).uniform(-4, 4, (3, 5))
    # Keep away from relu's kink and the softplus thresholds above (x = 1.5, x = 2), where
    # central differences straddle two branches.
    for kink in (0.0, 1.5, 2.0):
        x[np.abs(x - kink) < 0.05] += 0.1
    return x


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_matches_torch(name, dtype):
    compare_with_torch(ACTIVATIONS[name][0], [_activation_input()], dtype)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_numpy_and_finite_differences(name):
    module_fn, reference = ACTIVATIONS[name]
    x = _activation_input()
    out = check_gradients_fd(lambda t: module_fn(tj, t), [x])
    np.testing.assert_allclose(value(out), reference(x), rtol=1e-7, atol=1e-10)


def test_gelu_rejects_unknown_approximation():
    with pytest.raises(RuntimeError, match="approximate argument must be either none or tanh"):
        tj.nn.GELU(approximate="fast")


# ---- flatten, dropout -----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dims", [(1, -1), (0, -1), (1, 2), (-2, -1)])
def test_flatten_matches_torch(dtype, dims):
    out = compare_with_torch(lambda lib, x: lib.nn.Flatten(*dims)(x), [rng(5).standard_normal((2, 3, 4, 2))], dtype)
    expected = {(1, -1): (2, 24), (0, -1): (48,), (1, 2): (2, 12, 2), (-2, -1): (2, 3, 8)}[dims]
    assert tuple(out.shape) == expected


def test_dropout_eval_is_identity_and_train_scales_kept_values():
    x = tj.tensor(rng(6).uniform(1, 2, (200, 50)), requires_grad=True)
    layer = tj.nn.Dropout(0.3)
    layer.eval()
    assert layer(x) is x
    layer.train()
    out = layer(x)
    kept = value(out) != 0
    np.testing.assert_allclose(value(out)[kept], value(x)[kept] / 0.7, rtol=1e-12)
    assert abs(kept.mean() - 0.7) < 0.02          # 10,000 draws: 4 standard deviations is 0.018
    out.sum().backward()
    np.testing.assert_allclose(value(x.grad), kept / 0.7, rtol=1e-12)


def test_dropout_is_reproducible_under_manual_seed():
    x = tj.ones(8, 16)
    tj.manual_seed(123)
    a = value(F.dropout(x, 0.5))
    b = value(F.dropout(x, 0.5))
    tj.manual_seed(123)
    np.testing.assert_array_equal(value(F.dropout(x, 0.5)), a)
    assert not np.array_equal(a, b)


def test_dropout_extremes_and_errors():
    x = tj.randn(4, 5)
    assert F.dropout(x, 0.0) is x
    assert F.dropout(x, 0.5, training=False) is x
    np.testing.assert_array_equal(value(F.dropout(x, 1.0)), np.zeros((4, 5)))
    for p in (-0.1, 1.5):
        with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1"):
            F.dropout(x, p)
        with pytest.raises(ValueError, match="dropout probability"):
            tj.nn.Dropout(p)


# ---- embedding ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("padding_idx", [None, 2, -1])
def test_embedding_matches_torch(dtype, padding_idx):
    index = np.array([[0, 2, 2], [4, 1, 2]], np.int64)      # repeats: gradients must sum
    weight = rng(7).standard_normal((5, 3))

    def fn(lib, w):
        return lib.nn.functional.embedding(lib.tensor(index), w, padding_idx=padding_idx)
    compare_with_torch(fn, [weight], dtype)


def test_embedding_numpy_and_gradient_scatter():
    index = np.array([[0, 2, 2], [4, 1, 2]], np.int64)
    layer = tj.nn.Embedding(5, 3, padding_idx=1)
    weight = value(layer.weight).copy()
    np.testing.assert_array_equal(weight[1], 0.0)           # the padding row starts at zero
    with tj.no_grad():
        layer.weight[1] = 7.0                              # ... but its value is still returned
    out = layer(tj.tensor(index))
    expected = weight.copy()
    expected[1] = 7.0
    np.testing.assert_array_equal(value(out), expected[index])
    upstream = rng(8).standard_normal(out.shape).astype(np.float32)
    (out * tj.tensor(upstream)).sum().backward()
    grad = np.zeros((5, 3), np.float32)
    np.add.at(grad, index, upstream)
    grad[1] = 0.0                                           # no gradient into the padding row
    np.testing.assert_allclose(value(layer.weight.grad), grad, rtol=1e-6)


def test_embedding_init_statistics_and_errors():
    tj.manual_seed(0)
    weight = value(tj.nn.Embedding(1000, 20).weight)
    assert abs(weight.mean()) < 0.01 and abs(weight.std() - 1.0) < 0.01   # N(0, 1)
    layer = tj.nn.Embedding(5, 3)
    with pytest.raises(IndexError, match="index out of range in self"):
        layer(tj.tensor([0, 5]))
    with pytest.raises(RuntimeError, match="Expected tensor for argument #1 'indices'"):
        layer(tj.tensor([0.0, 1.0]))


# ---- layer norm -----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, normalized", [((4, 5), (5,)), ((2, 3, 4), (3, 4)), ((6,), 6)])
def test_layer_norm_matches_torch(dtype, shape, normalized):
    r = rng(9)
    norm = (normalized,) if isinstance(normalized, int) else normalized
    arrays = [r.standard_normal(shape) * 3 + 1, r.standard_normal(norm), r.standard_normal(norm)]
    compare_with_torch(lambda lib, x, w, b: lib.nn.functional.layer_norm(x, norm, w, b, eps=1e-5), arrays, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_module_matches_torch(dtype):
    torch = pytest.importorskip("torch")
    ours = tj.nn.LayerNorm(4, dtype=getattr(tj, dtype))
    theirs = torch.nn.LayerNorm(4, dtype=getattr(torch, dtype))
    with tj.no_grad():
        ours.weight.copy_(tj.tensor(rng(10).standard_normal(4)))
    with torch.no_grad():
        theirs.weight.copy_(torch.tensor(value(ours.weight)))
    x = rng(11).standard_normal((3, 4)).astype(dtype)
    a, b = ours(tj.tensor(x)), theirs(torch.tensor(x))
    np.testing.assert_allclose(value(a), b.detach().numpy(), **TOL[dtype])
    a.sum().backward()
    b.sum().backward()
    np.testing.assert_allclose(value(ours.bias.grad), theirs.bias.grad.numpy(), **TOL[dtype])
    np.testing.assert_allclose(value(ours.weight.grad), theirs.weight.grad.numpy(), **TOL[dtype])


def test_layer_norm_numpy_and_finite_differences():
    r = rng(12)
    x, w, b = r.standard_normal((3, 4)), r.standard_normal(4), r.standard_normal(4)
    out = check_gradients_fd(lambda x, w, b: F.layer_norm(x, (4,), w, b), [x, w, b])
    mu = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    np.testing.assert_allclose(value(out), (x - mu) / np.sqrt(var + 1e-5) * w + b, rtol=1e-10)
    plain = tj.nn.LayerNorm(4, elementwise_affine=False)
    assert plain.weight is None and list(plain.parameters()) == []
    with pytest.raises(RuntimeError, match=r"Given normalized_shape=\[4\], expected input with shape \[\*, 4\]"):
        F.layer_norm(tj.randn(2, 3), (4,))


# ---- one_hot --------------------------------------------------------------------------------

def test_one_hot():
    out = F.one_hot(tj.tensor([[0, 2], [1, 2]]))
    assert out.dtype == tj.int64 and tuple(out.shape) == (2, 2, 3)
    np.testing.assert_array_equal(value(out), np.eye(3, dtype=np.int64)[[[0, 2], [1, 2]]])
    assert tuple(F.one_hot(tj.tensor([1]), num_classes=5).shape) == (1, 5)
    with pytest.raises(RuntimeError, match="Class values must be smaller than num_classes"):
        F.one_hot(tj.tensor([0, 5]), 3)
    with pytest.raises(RuntimeError, match="Class values must be non-negative"):
        F.one_hot(tj.tensor([0, -1]), 3)
    with pytest.raises(RuntimeError, match="one_hot is only applicable to index tensor"):
        F.one_hot(tj.tensor([0.0, 1.0]))


def test_one_hot_matches_torch():
    torch = pytest.importorskip("torch")
    labels = np.array([[3, 0], [1, 1]], np.int64)
    for n in (-1, 6):
        np.testing.assert_array_equal(value(F.one_hot(tj.tensor(labels), n)),
                                      torch.nn.functional.one_hot(torch.tensor(labels), n).numpy())


# ---- losses: MSE, L1 ------------------------------------------------------------------------

REDUCTIONS = ["mean", "sum", "none"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name", ["MSELoss", "L1Loss"])
def test_regression_losses_match_torch(name, reduction, dtype):
    r = rng(13)
    arrays = [r.standard_normal((6, 3)), r.standard_normal((6, 3))]
    compare_with_torch(lambda lib, x, y: getattr(lib.nn, name)(reduction=reduction)(x, y), arrays, dtype)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_regression_losses_numpy_and_finite_differences(reduction):
    r = rng(14)
    x, y = r.standard_normal((4, 3)), r.standard_normal((4, 3))
    reduce = {"mean": np.mean, "sum": np.sum, "none": lambda a: a}[reduction]
    out = check_gradients_fd(lambda a, b: F.mse_loss(a, b, reduction=reduction), [x, y])
    np.testing.assert_allclose(value(out), reduce((x - y) ** 2), rtol=1e-12)
    out = check_gradients_fd(lambda a, b: F.l1_loss(a, b, reduction=reduction), [x, y])
    np.testing.assert_allclose(value(out), reduce(np.abs(x - y)), rtol=1e-12)


def test_regression_loss_shape_mismatch_warns_or_raises():
    with pytest.warns(UserWarning, match=r"Using a target size .*\[3\].* different to the input size .*\[3, 1\]"):
        F.mse_loss(tj.randn(3, 1), tj.randn(3))
    with pytest.raises(RuntimeError, match=r"mse_loss .*input \[3, 2\], target \[4, 2\]"):
        F.mse_loss(tj.randn(3, 2), tj.randn(4, 2))


@pytest.mark.parametrize("loss", ["MSELoss", "L1Loss", "CrossEntropyLoss", "NLLLoss", "BCEWithLogitsLoss"])
def test_bad_reduction_raises_value_error(loss):
    with pytest.raises(ValueError, match="bad is not a valid value for reduction"):
        getattr(tj.nn, loss)(reduction="bad")
    functional = {"MSELoss": F.mse_loss, "L1Loss": F.l1_loss}.get(loss)
    if functional:
        with pytest.raises(ValueError, match="bad is not a valid value for reduction"):
            functional(tj.randn(2), tj.randn(2), reduction="bad")


# ---- losses: cross-entropy and NLL ----------------------------------------------------------

def np_cross_entropy(x, target, weight, ignore_index, reduction, smoothing):
    """torch's documented formula, written out per element in NumPy (class dim 1)."""
    x = x if x.ndim > 1 else x[None]
    target = np.asarray(target).reshape((x.shape[0],) + x.shape[2:])
    logp = x - x.max(1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(1, keepdims=True))
    logp = np.moveaxis(logp, 1, -1).reshape(-1, x.shape[1])
    classes = x.shape[1]
    w = np.ones(classes) if weight is None else weight
    losses, denom = [], 0.0
    for row, t in zip(logp, target.reshape(-1)):
        if t == ignore_index:
            losses.append(0.0)
            continue
        nll = -w[t] * row[t]
        smooth = -(w * row).sum()
        losses.append((1 - smoothing) * nll + smoothing / classes * smooth)
        denom += w[t]
    losses = np.array(losses)
    if reduction == "mean":
        return losses.sum() / denom
    if reduction == "sum":
        return losses.sum()
    return losses.reshape(target.shape) if np.ndim(target) else losses.reshape(())


CE_SHAPES = {"batch": ((6, 4), (6,)), "unbatched": ((4,), ()), "spatial": ((2, 4, 3, 2), (2, 3, 2))}


def _ce_case(shape_name, ignore, seed=15):
    r = rng(seed)
    x_shape, t_shape = CE_SHAPES[shape_name]
    x = r.standard_normal(x_shape) * 2
    t = r.integers(0, 4, t_shape).astype(np.int64)
    if ignore is not None and t.ndim:
        t.reshape(-1)[::3] = ignore                          # some targets are ignored
    return x, t


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore", [None, -100, 1])
@pytest.mark.parametrize("shape_name", sorted(CE_SHAPES))
def test_cross_entropy_matches_torch(shape_name, ignore, weighted, smoothing, reduction, dtype):
    x, t = _ce_case(shape_name, ignore)
    weight = rng(16).uniform(0.5, 2.0, 4) if weighted else None
    kwargs = {"reduction": reduction, "label_smoothing": smoothing}
    if ignore is not None:
        kwargs["ignore_index"] = ignore

    def fn(lib, logits):
        w = None if weight is None else lib.tensor(weight.astype(dtype))
        return lib.nn.CrossEntropyLoss(weight=w, **kwargs)(logits, lib.tensor(t))
    compare_with_torch(fn, [x], dtype)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("smoothing", [0.0, 0.3])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("shape_name", sorted(CE_SHAPES))
def test_cross_entropy_numpy_and_finite_differences(shape_name, weighted, smoothing, reduction):
    x, t = _ce_case(shape_name, ignore=-100)
    weight = rng(17).uniform(0.5, 2.0, 4) if weighted else None

    def fn(logits):
        w = None if weight is None else tj.tensor(weight)
        return F.cross_entropy(logits, tj.tensor(t), w, reduction=reduction, label_smoothing=smoothing)
    out = check_gradients_fd(fn, [x])
    np.testing.assert_allclose(value(out), np_cross_entropy(x, t, weight, -100, reduction, smoothing), rtol=1e-10)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore", [None, 2])
@pytest.mark.parametrize("shape_name", ["batch", "spatial"])
def test_nll_loss_matches_torch(shape_name, ignore, weighted, reduction, dtype):
    x, t = _ce_case(shape_name, ignore, seed=18)
    weight = rng(19).uniform(0.5, 2.0, 4) if weighted else None
    kwargs = {"reduction": reduction} if ignore is None else {"reduction": reduction, "ignore_index": ignore}

    def fn(lib, logp):
        w = None if weight is None else lib.tensor(weight.astype(dtype))
        return lib.nn.NLLLoss(weight=w, **kwargs)(logp, lib.tensor(t))
    compare_with_torch(fn, [x], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("smoothing", [0.0, 0.25])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("target_grad", [False, True])
def test_cross_entropy_probability_targets_match_torch(target_grad, weighted, smoothing, reduction, dtype):
    r = rng(20)
    x = r.standard_normal((5, 3, 2))
    probs = r.uniform(0.1, 1.0, (5, 3, 2))
    probs /= probs.sum(1, keepdims=True)
    weight = r.uniform(0.5, 2.0, 3) if weighted else None

    def fn(lib, logits, target):
        w = None if weight is None else lib.tensor(weight.astype(dtype))
        return lib.nn.functional.cross_entropy(logits, target, w, reduction=reduction, label_smoothing=smoothing)
    compare_with_torch(fn, [x, probs], dtype, differentiable=[True, target_grad])


def test_cross_entropy_probability_targets_finite_differences():
    r = rng(21)
    x, probs = r.standard_normal((4, 3)), r.dirichlet(np.ones(3), 4)
    out = check_gradients_fd(lambda a, p: F.cross_entropy(a, p, label_smoothing=0.1), [x, probs])
    logp = x - np.log(np.exp(x).sum(1, keepdims=True))
    smoothed = probs * 0.9 + 0.1 / 3
    np.testing.assert_allclose(value(out), -(smoothed * logp).sum(1).mean(), rtol=1e-12)


def test_cross_entropy_ignored_rows_with_infinite_logits_stay_finite():
    logits = tj.tensor([[0.0, 1.0, float("-inf")], [2.0, 0.5, 0.1]], requires_grad=True)
    loss = F.cross_entropy(logits, tj.tensor([-100, 0]))
    loss.backward()
    assert np.isfinite(loss.item())
    assert np.isfinite(value(logits.grad)).all()
    np.testing.assert_array_equal(value(logits.grad)[0], 0.0)


def test_cross_entropy_all_targets_ignored():
    logits = tj.randn(3, 4, requires_grad=True)
    targets = tj.tensor([-100, -100, -100])
    assert math.isnan(F.cross_entropy(logits, targets).item())
    assert F.cross_entropy(logits, targets, reduction="sum").item() == 0.0
    np.testing.assert_array_equal(value(F.cross_entropy(logits, targets, reduction="none")), 0.0)


def test_cross_entropy_record_count_is_small():
    from tapejit.tape import current
    logits = tj.randn(64, 10, requires_grad=True)
    targets = tj.tensor(rng(22).integers(0, 10, 64))
    tape = current()
    before = tape.n
    loss = F.cross_entropy(logits, targets)
    assert loss._tape is tape
    # load logits, log_softmax, index, load coefficients, dot
    assert tape.n - before <= 5, tape.n - before


def test_cross_entropy_errors():
    logits = tj.randn(3, 4)
    with pytest.raises(IndexError, match="Target 7 is out of bounds"):
        F.cross_entropy(logits, tj.tensor([0, 1, 7]))
    with pytest.raises(IndexError, match="Target -3 is out of bounds"):
        F.nll_loss(logits, tj.tensor([0, 1, -3]))
    with pytest.raises(ValueError, match=r"Expected input batch_size \(3\) to match target batch_size \(2\)"):
        F.cross_entropy(logits, tj.tensor([0, 1]))
    with pytest.raises(RuntimeError, match="expected target dtype to be Long"):
        F.cross_entropy(logits, tj.tensor([0.0, 1.0, 2.0]))
    with pytest.raises(RuntimeError, match="weight tensor should be defined either for all 4 classes"):
        F.cross_entropy(logits, tj.tensor([0, 1, 2]), weight=tj.ones(3))
    with pytest.raises(RuntimeError, match="label_smoothing must be between 0.0 and 1.0"):
        F.cross_entropy(logits, tj.tensor([0, 1, 2]), label_smoothing=1.5)
    with pytest.raises(RuntimeError, match=r"expected target size \[2, 5\], got \[2, 4\]"):
        F.cross_entropy(tj.randn(2, 3, 5), tj.tensor(np.zeros((2, 4), np.int64)))


# ---- losses: binary cross-entropy with logits -----------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("pos_weighted", [False, True])
@pytest.mark.parametrize("target_grad", [False, True])
def test_bce_with_logits_matches_torch(target_grad, pos_weighted, weighted, reduction, dtype):
    r = rng(23)
    x = r.standard_normal((5, 3)) * 4
    x[0, 0], x[1, 1] = 60.0, -60.0                          # far in both tails: must stay finite
    arrays = [x, r.uniform(0, 1, (5, 3))]
    weight = r.uniform(0.5, 2.0, (5, 3)) if weighted else None
    pos_weight = r.uniform(0.5, 3.0, 3) if pos_weighted else None

    def fn(lib, logits, target):
        w = None if weight is None else lib.tensor(weight.astype(dtype))
        pw = None if pos_weight is None else lib.tensor(pos_weight.astype(dtype))
        return lib.nn.BCEWithLogitsLoss(weight=w, reduction=reduction, pos_weight=pw)(logits, target)
    out = compare_with_torch(fn, arrays, dtype, differentiable=[True, target_grad])
    assert np.isfinite(value(out)).all()


@pytest.mark.parametrize("pos_weighted", [False, True])
def test_bce_with_logits_numpy_and_finite_differences(pos_weighted):
    r = rng(24)
    x, t = r.standard_normal((4, 3)) * 3, r.uniform(0, 1, (4, 3))
    p = r.uniform(0.5, 3.0, 3) if pos_weighted else np.ones(3)

    def fn(a, b):
        return F.binary_cross_entropy_with_logits(a, b, pos_weight=tj.tensor(p) if pos_weighted else None)
    out = check_gradients_fd(fn, [x, t])
    s = 1 / (1 + np.exp(-x))
    np.testing.assert_allclose(value(out), np.mean(-(p * t * np.log(s) + (1 - t) * np.log(1 - s))), rtol=1e-10)


def test_bce_with_logits_shape_error():
    with pytest.raises(ValueError, match=r"Target size \(.*\[3, 1\]\)\) must be the same as input size"):
        F.binary_cross_entropy_with_logits(tj.randn(3), tj.randn(3, 1))


# ---- a whole model --------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_mlp_step_matches_torch(dtype):
    torch = pytest.importorskip("torch")
    tj_dt, th_dt = getattr(tj, dtype), getattr(torch, dtype)

    def build(lib, dt):
        return lib.nn.Sequential(lib.nn.Linear(2, 16, dtype=dt), lib.nn.Tanh(), lib.nn.Linear(16, 16, dtype=dt),
                                 lib.nn.Tanh(), lib.nn.Linear(16, 1, dtype=dt))
    ours, theirs = build(tj, tj_dt), build(torch, th_dt)
    theirs.load_state_dict({k: torch.tensor(np.asarray(v)) for k, v in ours.state_dict().items()})
    r = rng(25)
    x, y = r.standard_normal((32, 2)).astype(dtype), r.standard_normal((32, 1)).astype(dtype)
    a = tj.nn.MSELoss()(ours(tj.tensor(x)), tj.tensor(y))
    b = torch.nn.MSELoss()(theirs(torch.tensor(x)), torch.tensor(y))
    np.testing.assert_allclose(a.item(), b.item(), **TOL[dtype])
    a.backward()
    b.backward()
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
        np.testing.assert_allclose(value(p.grad), q.grad.numpy(), **TOL[dtype], err_msg=name)
