"""masked_fill, the in-place unary methods (exp_, sigmoid_, ...), clamp_min/clamp_max and
the new_* constructors: torch's values, gradients and errors."""
import numpy as np
import pytest

import tapejit as tj

from tapejit import registry

# The in-place variants the registry declares for the elementary ops (tapejit/ops/unary.py),
# whose domains all hold the inputs below; tests/test_registry_names.py checks every op's.
UNARY_IN_PLACE = [op.names.in_place_names()[0] for op in registry.OPS
                  if op.module == "tapejit.ops.unary" and op.names and not op.names.written
                  and op.names.in_place]


def _masked(tl, a, mask, value_is_tensor):
    x = tl.tensor(a, requires_grad=True)
    value = tl.tensor(-5.0, requires_grad=True) if value_is_tensor else -5.0
    y = x * 2
    out = y.masked_fill(tl.tensor(mask), value)
    y.masked_fill_(tl.tensor(mask), 0.5)
    (out * out).sum().backward()
    result = {"out": out.detach().numpy().copy(), "y": y.detach().numpy().copy(),
              "grad": x.grad.numpy().copy()}
    if value_is_tensor:
        result["value_grad"] = value.grad.numpy().copy()
    return result


MASK = np.array([[True, False, False], [False, True, False]])


@pytest.mark.parametrize("mask", [MASK, MASK[0]], ids=["same shape", "broadcast"])
@pytest.mark.parametrize("value_is_tensor", [False, True])
def test_masked_fill_values_and_gradients(mask, value_is_tensor):
    a = np.array([[1.0, -2.0, 3.0], [4.0, 5.0, -6.0]])
    got = _masked(tj, a, mask, value_is_tensor)
    full = np.broadcast_to(mask, a.shape)
    np.testing.assert_array_equal(got["out"], np.where(full, -5.0, 2 * a))
    np.testing.assert_array_equal(got["y"], np.where(full, 0.5, 2 * a))
    np.testing.assert_array_equal(got["grad"], np.where(full, 0.0, 8 * a))   # d(4x^2)/dx
    if value_is_tensor:
        assert got["value_grad"] == 2 * -5.0 * full.sum()


@pytest.mark.parametrize("mask", [MASK, MASK[0]], ids=["same shape", "broadcast"])
@pytest.mark.parametrize("value_is_tensor", [False, True])
def test_masked_fill_matches_torch(mask, value_is_tensor):
    torch = pytest.importorskip("torch")
    a = np.array([[1.0, -2.0, 3.0], [4.0, 5.0, -6.0]])
    ours, theirs = _masked(tj, a, mask, value_is_tensor), _masked(torch, a, mask, value_is_tensor)
    assert ours.keys() == theirs.keys()
    for key in theirs:
        np.testing.assert_allclose(ours[key], theirs[key], err_msg=key)


def test_masked_fill_keeps_the_input_dtype_and_refuses_bad_masks():
    ints = tj.tensor([1, 2, 3])
    filled = ints.masked_fill(ints > 1, 0.7)
    assert filled.dtype == tj.int64 and filled.tolist() == [1, 0, 0]
    with pytest.raises(RuntimeError, match="masked_fill: only supports boolean masks, but got mask "
                                           "with dtype float32"):
        tj.ones(3).masked_fill(tj.ones(3), 0.0)
    with pytest.raises(RuntimeError, match=r"only supports a 0-dimensional value tensor, but got "
                                           r"tensor with 1 dimension\(s\)"):
        tj.ones(3).masked_fill(tj.ones(3) > 0, tj.ones(1))
    with pytest.raises(RuntimeError, match=r"masked_fill: the mask's shape \[2, 3\] does not broadcast "
                                           r"to the input's shape \[3\]"):
        tj.ones(3).masked_fill(tj.ones(2, 3) > 0, 0.0)
    leaf = tj.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        leaf.masked_fill_(leaf > 0, 0.0)


def _unary_in_place(tl, name, a):
    x = tl.tensor(a, requires_grad=True)
    y = x * 1.5
    returned = getattr(y, name)()
    (y * y).sum().backward()
    return returned is y, y.detach().numpy().copy(), x.grad.numpy().copy()


@pytest.mark.parametrize("name", UNARY_IN_PLACE)
def test_unary_in_place_methods(name):
    a = np.array([0.3, 0.7, 1.9])             # inside every op's domain
    same, value, grad = _unary_in_place(tj, name, a)
    assert same
    expected = getattr(tj.tensor(a * 1.5), name[:-1])().numpy()
    np.testing.assert_allclose(value, expected, rtol=1e-6)
    eps = 1e-6                                # d/dx f(1.5 x)^2, central differences
    fd = [(getattr(tj.tensor(a * 1.5 + 1.5 * eps * e), name[:-1])().numpy() ** 2).sum()
          - (getattr(tj.tensor(a * 1.5 - 1.5 * eps * e), name[:-1])().numpy() ** 2).sum()
          for e in np.eye(3)]
    np.testing.assert_allclose(grad, np.array(fd) / (2 * eps), rtol=1e-4, atol=1e-6)
    leaf = tj.tensor(a, requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        getattr(leaf, name)()


@pytest.mark.parametrize("name", UNARY_IN_PLACE)
def test_unary_in_place_methods_match_torch(name):
    torch = pytest.importorskip("torch")
    a = np.array([0.3, 0.7, 1.9])
    for got, want in zip(_unary_in_place(tj, name, a), _unary_in_place(torch, name, a)):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_clamp_min_and_max():
    x = tj.tensor([-1.0, 0.5, 2.0], requires_grad=True)
    low, high = x.clamp_min(0.0), tj.clamp_max(x, 1.0)
    assert low.tolist() == [0.0, 0.5, 2.0] and high.tolist() == [-1.0, 0.5, 1.0]
    (low + high).sum().backward()
    assert x.grad.tolist() == [1.0, 2.0, 1.0]
    y = x.detach().clone()
    y.clamp_min_(0.0).clamp_max_(1.0)
    assert y.tolist() == [0.0, 0.5, 1.0]


def test_new_constructors_take_the_tensors_dtype():
    x = tj.tensor([1.0, 2.0], dtype=tj.float64)
    assert x.new_zeros(2, 3).shape == (2, 3) and x.new_zeros((2, 3)).dtype == tj.float64
    assert x.new_ones(2).tolist() == [1.0, 1.0] and x.new_ones(2).dtype == tj.float64
    assert x.new_full((2,), 7).tolist() == [7.0, 7.0] and x.new_full((2,), 7).dtype == tj.float64
    assert x.new_empty(3).shape == (3,) and x.new_empty(3).dtype == tj.float64
    assert x.new_tensor([1, 2]).dtype == tj.float64
    assert x.new_zeros(2, dtype=tj.int64).dtype == tj.int64
    assert tj.tensor([1]).new_ones(2).dtype == tj.int64
    grads = x.new_zeros(2, requires_grad=True)
    assert grads.requires_grad and grads.is_leaf
