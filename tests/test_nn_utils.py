"""tapejit.nn.utils: gradient clipping against torch.nn.utils on identical gradients (when
torch is importable), in-place semantics, and parameter/vector conversion."""
import math

import numpy as np
import pytest

import tapejit as tj
from tapejit.nn.utils import (
    clip_grad_norm_,
    clip_grad_value_,
    parameters_to_vector,
    vector_to_parameters,
)

SHAPES = [(4, 3), (3,), (2, 2, 2)]


def gradients(scale=1.0, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(shape) * scale).astype(dtype) for shape in SHAPES]


def ours_with(grads):
    params = [tj.nn.Parameter(tj.zeros(*g.shape, dtype=tj.tensor(g).dtype)) for g in grads]
    for p, g in zip(params, grads):
        p.grad = tj.tensor(g)
    return params


def torch_with(grads):
    torch = pytest.importorskip("torch")
    params = [torch.nn.Parameter(torch.zeros(g.shape, dtype=torch.from_numpy(g).dtype)) for g in grads]
    for p, g in zip(params, grads):
        p.grad = torch.tensor(g)
    return params


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("norm_type", [2.0, 1, math.inf, "inf", 3.0])
def test_clip_grad_norm_matches_torch(norm_type, dtype):
    torch = pytest.importorskip("torch")
    grads = gradients(scale=3.0, dtype=dtype)
    ours, theirs = ours_with(grads), torch_with(grads)
    norm = clip_grad_norm_(ours, max_norm=1.5, norm_type=norm_type)
    reference = torch.nn.utils.clip_grad_norm_(theirs, max_norm=1.5, norm_type=float(norm_type))
    assert isinstance(norm, tj.Tensor) and norm.shape == () and norm.dtype.np == dtype
    rtol = 1e-6 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(norm.item(), reference.item(), rtol=rtol)
    for p, q in zip(ours, theirs):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=rtol, atol=0)
    clipped = [np.linalg.norm(p.grad.numpy().ravel(), float(norm_type)) for p in ours]
    np.testing.assert_allclose(np.linalg.norm(clipped, float(norm_type)), 1.5, rtol=1e-5)


def test_returned_norm_and_in_place_scaling():
    grads = gradients(scale=2.0, dtype=np.float64)
    params = ours_with(grads)
    held = [p.grad for p in params]
    norm = clip_grad_norm_(params, 1.0)
    total = np.sqrt(sum((g ** 2).sum() for g in grads))
    assert norm.item() == pytest.approx(total, rel=1e-14)
    for p, g, before in zip(params, grads, held):
        assert p.grad is before   # scaled in place, as torch's mul_
        np.testing.assert_allclose(p.grad.numpy(), g * (1.0 / (total + 1e-6)), rtol=1e-14)


def test_nothing_changes_below_max_norm():
    grads = gradients(scale=0.01)
    params = ours_with(grads)
    norm = clip_grad_norm_(params, max_norm=10.0)
    assert norm.item() < 10.0
    for p, g in zip(params, grads):
        np.testing.assert_array_equal(p.grad.numpy(), g)


def test_accepts_a_generator_a_single_tensor_and_skips_missing_grads():
    model = tj.nn.Linear(3, 2)
    model(tj.ones(1, 3)).sum().backward()
    model.bias.grad = None
    weight_grad = model.weight.grad.numpy().copy()
    norm = clip_grad_norm_(model.parameters(), 0.5)
    assert norm.item() == pytest.approx(np.linalg.norm(weight_grad), rel=1e-6)
    assert model.bias.grad is None
    norm = clip_grad_norm_(model.weight, 0.5)
    assert norm.item() == pytest.approx(0.5, rel=1e-5)


def test_no_gradients_give_a_zero_norm():
    norm = clip_grad_norm_([tj.nn.Parameter(tj.ones(2))], 1.0)
    assert norm.item() == 0.0 and norm.dtype is tj.float32
    with pytest.warns(UserWarning, match="empty generator"):
        clip_grad_norm_((p for p in []), 1.0)


@pytest.mark.parametrize("bad", [math.inf, math.nan])
def test_error_if_nonfinite(bad):
    torch = pytest.importorskip("torch")
    grads = gradients()
    grads[1][0] = bad
    with pytest.raises(RuntimeError, match="non-finite, so it cannot be clipped"):
        clip_grad_norm_(ours_with(grads), 1.0, error_if_nonfinite=True)
    ours, theirs = ours_with(grads), torch_with(grads)
    norm = clip_grad_norm_(ours, 1.0)
    reference = torch.nn.utils.clip_grad_norm_(theirs, 1.0)
    np.testing.assert_array_equal(norm.numpy(), reference.numpy())
    for p, q in zip(ours, theirs):
        np.testing.assert_array_equal(p.grad.numpy(), q.grad.numpy())


def test_clip_grad_value_matches_torch():
    torch = pytest.importorskip("torch")
    grads = gradients(scale=2.0)
    ours, theirs = ours_with(grads), torch_with(grads)
    assert clip_grad_value_(ours, 0.7) is None
    torch.nn.utils.clip_grad_value_(theirs, 0.7)
    for p, q in zip(ours, theirs):
        np.testing.assert_array_equal(p.grad.numpy(), q.grad.numpy())
        assert np.abs(p.grad.numpy()).max() <= np.float32(0.7)


def test_parameters_vector_round_trip():
    model = tj.nn.Sequential(tj.nn.Linear(3, 4), tj.nn.Linear(4, 2))
    params = list(model.parameters())
    vector = parameters_to_vector(params)
    assert vector.shape == (sum(p.numel() for p in params),)
    np.testing.assert_array_equal(vector.detach().numpy(),
                                  np.concatenate([p.detach().numpy().ravel() for p in params]))
    new_values = tj.arange(vector.numel(), dtype=tj.float32)
    vector_to_parameters(new_values, params)
    np.testing.assert_array_equal(parameters_to_vector(params).detach().numpy(), new_values.numpy())
    assert [tuple(p.shape) for p in params] == [(4, 3), (4,), (2, 4), (2,)]
    assert all(p.requires_grad for p in params)
    with pytest.raises(TypeError, match="expected torch.Tensor, but got: list"):
        vector_to_parameters([1.0], params)


def test_parameters_to_vector_is_differentiable():
    params = [tj.nn.Parameter(tj.ones(2, 2)), tj.nn.Parameter(tj.ones(3))]
    (parameters_to_vector(params) * 2).sum().backward()
    for p in params:
        np.testing.assert_array_equal(p.grad.numpy(), np.full(p.shape, 2.0))


def test_registered_under_tapejit_nn():
    assert tj.nn.utils.clip_grad_norm_ is clip_grad_norm_
