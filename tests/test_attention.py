"""Attention and transformer layers against torch: values and gradients (float64 tight,
float32 loose), masks, causal, padding masks, batch_first both ways, need_weights."""
import numpy as np
import pytest

import tapejit as tj
import tapejit.nn.functional as F
from tapejit.testing import check_grads


def _pair(rng, torch, *shapes, dtype=np.float64):
    arrays = [rng.standard_normal(s).astype(dtype) for s in shapes]
    return ([tj.tensor(a, requires_grad=True) for a in arrays],
            [torch.tensor(a, requires_grad=True) for a in arrays])


def _close(ours, theirs, dtype=np.float64):
    tol = dict(rtol=1e-10, atol=1e-12) if dtype == np.float64 else dict(rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(ours.detach()), theirs.detach().numpy(), **tol)


MASKS = ["none", "causal", "bool", "float", "bool_empty_row", "float_empty_row", "scale", "bool_batched"]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("mask", MASKS)
def test_sdpa_matches_torch(mask, dtype):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(MASKS.index(mask))
    (q, k, v), (tq, tk, tv) = _pair(rng, torch, (2, 3, 4, 5), (2, 3, 6, 5), (2, 3, 6, 7), dtype=dtype)
    keep = rng.random((4, 6)) > 0.4
    keep[:, 0] = True
    if mask.endswith("empty_row"):
        keep[1] = False   # torch 2.5+ gives zeros (and zero gradients) for a row with nothing to attend
    kwargs, tkwargs = {}, {}
    if mask == "causal":
        kwargs = tkwargs = {"is_causal": True}
    elif mask.startswith("bool"):
        if mask == "bool_batched":   # (N, 1, L, S): broadcast over the heads
            keep = rng.random((2, 1, 4, 6)) > 0.4
        kwargs, tkwargs = {"attn_mask": tj.tensor(keep)}, {"attn_mask": torch.tensor(keep)}
    elif mask.startswith("float"):
        bias = np.where(keep, rng.standard_normal(keep.shape), -np.inf).astype(dtype)
        kwargs, tkwargs = {"attn_mask": tj.tensor(bias)}, {"attn_mask": torch.tensor(bias)}
    elif mask == "scale":
        kwargs = tkwargs = {"scale": 0.3}
    out = F.scaled_dot_product_attention(q, k, v, **kwargs)
    expected = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, **tkwargs)
    _close(out, expected, dtype)
    weights = rng.standard_normal(tuple(out.shape)).astype(dtype)
    (out * tj.tensor(weights)).sum().backward()
    (expected * torch.tensor(weights)).sum().backward()
    for ours, theirs in zip((q, k, v), (tq, tk, tv)):
        _close(ours.grad, theirs.grad, dtype)


def test_sdpa_broadcasts_batch_dims_and_gqa():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    (q, k, v), (tq, tk, tv) = _pair(rng, torch, (2, 4, 3, 5), (1, 4, 6, 5), (4, 6, 5))
    _close(F.scaled_dot_product_attention(q, k, v), torch.nn.functional.scaled_dot_product_attention(tq, tk, tv))
    (q, k, v), (tq, tk, tv) = _pair(rng, torch, (2, 4, 3, 5), (2, 2, 6, 5), (2, 2, 6, 5))
    out = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    expected = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, enable_gqa=True)
    _close(out, expected)
    out.sum().backward()
    expected.sum().backward()
    _close(k.grad, tk.grad)


def test_sdpa_dropout_is_reproducible_and_scaled():
    q = tj.randn(2, 3, 4)
    tj.manual_seed(3)
    a = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    tj.manual_seed(3)
    b = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # dropout_p=1 drops every weight: torch gives zeros
    np.testing.assert_array_equal(np.asarray(F.scaled_dot_product_attention(q, q, q, dropout_p=1.0)), 0.0)


def test_sdpa_errors_as_torch():
    torch = pytest.importorskip("torch")
    q = np.random.default_rng(0).standard_normal((2, 3, 4))
    k = np.random.default_rng(1).standard_normal((2, 5, 4))
    cases = [
        ((q, k, k), {"attn_mask": np.ones((3, 5), bool), "is_causal": True}, "Explicit attn_mask should not be set"),
        ((q[0, 0], k[0, 0], k[0, 0]), {}, "at least 2 dimensional"),
        ((q, k, k), {"attn_mask": np.zeros((3, 5), np.int64)}, "Expected attn_mask dtype to be bool or float"),
        ((q, k, k.astype(np.float32)), {}, "to have the same dtype"),
        ((q, k, k), {"dropout_p": 1.5}, "dropout probability has to be between 0 and 1"),
        ((q[0], k[0], k[0]), {"attn_mask": np.ones((2, 3, 5), bool)}, None),
    ]
    for args, kwargs, message in cases:
        mask = kwargs.pop("attn_mask", None)
        with pytest.raises(RuntimeError):
            torch.nn.functional.scaled_dot_product_attention(
                *map(torch.tensor, args), attn_mask=None if mask is None else torch.tensor(mask), **kwargs)
        with pytest.raises(RuntimeError, match=message):
            F.scaled_dot_product_attention(*map(tj.tensor, args), attn_mask=None if mask is None else tj.tensor(mask),
                                           **kwargs)


@pytest.mark.parametrize("mask", ["none", "causal", "bool", "float"])
def test_sdpa_finite_differences(mask):
    rng = np.random.default_rng(5)
    keep = rng.random((3, 4)) > 0.4
    keep[:, 0] = True
    kwargs = {"none": {}, "causal": {"is_causal": True}, "bool": {"attn_mask": tj.tensor(keep)}}.get(mask)
    if mask == "float":   # a float mask is differentiable too
        check_grads(lambda q, k, v, b: F.scaled_dot_product_attention(q, k, v, attn_mask=b),
                    [rng.standard_normal((2, 3, 2)), rng.standard_normal((2, 4, 2)), rng.standard_normal((2, 4, 3)),
                     rng.standard_normal((3, 4))])
        return
    check_grads(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kwargs),
                [rng.standard_normal((2, 3, 2)), rng.standard_normal((2, 4, 2)), rng.standard_normal((2, 4, 3))])
