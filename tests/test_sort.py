"""sort, argsort and topk: torch's values, indices and order of ties and NaN; the gradient
goes to the elements picked (a gather)."""
import numpy as np
import pytest

import tapejit as tj

CASES = [((5,), -1), ((3, 4), 0), ((3, 4), 1), ((2, 3, 4), 1), ((2, 3, 4), -1)]


def _sorted_and_picked(tl, a, dim, descending, k, weights):
    """Values, indices and input gradients of ``sort`` and of ``topk(k)`` on ``a``."""
    x = tl.tensor(a, requires_grad=True)
    values, indices = tl.sort(x, dim=dim, descending=descending)
    top, top_at = x.topk(k, dim=dim, largest=descending)
    ((values * tl.tensor(weights[0])).sum() + (top * tl.tensor(weights[1])).sum()).backward()
    return [values.detach().numpy(), indices.numpy(), top.detach().numpy(), top_at.numpy(),
            x.grad.numpy()]


def _weights(a, dim, k, rng):
    top_shape = list(a.shape)
    top_shape[dim] = k
    return rng.standard_normal(a.shape), rng.standard_normal(top_shape)


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("shape,dim", CASES)
def test_sort_and_topk_values_indices_and_gradients(shape, dim, descending):
    rng = np.random.default_rng(len(shape) * 10 + dim)
    a = rng.standard_normal(shape)
    k = min(2, shape[dim])
    weights = _weights(a, dim, k, rng)
    values, indices, top, top_at, grad = _sorted_and_picked(tj, a, dim, descending, k, weights)
    order = np.argsort(-a if descending else a, axis=dim)
    np.testing.assert_array_equal(indices, order)
    np.testing.assert_array_equal(values, np.take_along_axis(a, order, axis=dim))
    np.testing.assert_array_equal(top_at, np.take(order, np.arange(k), axis=dim))
    np.testing.assert_array_equal(top, np.take_along_axis(a, top_at, axis=dim))
    expected = np.zeros_like(a)   # each picked element receives its weight
    np.put_along_axis(expected, order, weights[0], axis=dim)
    picked = np.zeros_like(a)
    np.put_along_axis(picked, top_at, weights[1], axis=dim)
    np.testing.assert_allclose(grad, expected + picked)


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("shape,dim", CASES)
def test_sort_and_topk_match_torch(shape, dim, descending):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    a = rng.standard_normal(shape).astype(np.float32)
    k = min(3, shape[dim])
    weights = _weights(a, dim, k, rng)
    ours = _sorted_and_picked(tj, a, dim, descending, k, weights)
    theirs = _sorted_and_picked(torch, a, dim, descending, k, weights)
    for got, want in zip(ours, theirs):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_ties_keep_their_order_and_nan_is_largest():
    """As torch with ``stable=True``."""
    t = tj.tensor([3.0, float("nan"), 1.0, 3.0, 2.0])
    assert t.sort(stable=True).indices.tolist() == [2, 4, 0, 3, 1]
    assert t.sort(descending=True, stable=True).indices.tolist() == [1, 0, 3, 4, 2]
    assert tj.argsort(tj.tensor([3, 1, 2, 1]), descending=True).tolist() == [0, 2, 1, 3]
    assert tj.tensor([3, 1, 2, 1]).sort().values.tolist() == [1, 1, 2, 3]


def test_zero_dim_and_integer_inputs():
    values, indices = tj.sort(tj.tensor(2.0))
    assert values.item() == 2.0 and indices.shape == () and indices.item() == 0
    values, indices = tj.tensor([[2, 9, 4]]).topk(2)
    assert values.tolist() == [[9, 4]] and values.dtype == tj.int64 and indices.tolist() == [[1, 2]]
    assert tj.tensor([True, False]).argsort().tolist() == [1, 0]


def test_topk_with_k_out_of_range_is_refused():
    with pytest.raises(RuntimeError, match=r"topk\(\): selected index k out of range \(k=4, size 3 "
                                           r"along dim -1 of a tensor of shape \[3\]\)"):
        tj.ones(3).topk(4)
    with pytest.raises(IndexError, match="sort"):
        tj.ones(3).sort(dim=1)
