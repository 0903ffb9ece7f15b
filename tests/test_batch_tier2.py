"""Tier 2 of ``compiled.batch`` (``fused.generate_rows``, ``tier2.run_rows``): a trace's fused
loops with the rows of a block innermost give tier 1's values and gradients, with
parameters and constants shared by every row and broadcast operands of each row's own."""
import time

import numpy as np
import pytest

import tapejit as tj

_W = tj.tensor([0.5, -1.5, 2.0], dtype=tj.float64)     # a parameter: the same for every row
_C = tj.tensor(3.0, dtype=tj.float64)                   # a stride-0 operand shared by every row


def _broadcasting(x, y):
    """Stride-0 operands of each row (its mean, ``y[0]``) and of every row (``_C``), a
    parameter of the rows' length, slices, a mean closing a loop."""
    centred = (x - x.mean()) * _W * y[0]
    return (centred ** 2).sum() + ((x[1:] - _C * x[:-1]) ** 2).mean()


def test_broadcast_operands_and_parameters_equal_tier_1_rows_and_torch():
    rng = np.random.default_rng(11)
    xs, ys = rng.uniform(-2, 2, (300, 3)), rng.uniform(0.5, 2, (300, 2))
    fused = tj.compile(tj.value_and_grad(_broadcasting, argnums=(0, 1)), tier2="sync")
    tier1 = tj.compile(tj.value_and_grad(_broadcasting, argnums=(0, 1)), tier2=False)
    values, (gx, gy) = fused.batch(xs, ys)
    assert fused.stats()["batch"][0]["path"] == "tier2"
    assert tier1.batch(xs, ys) is not None and tier1.stats()["batch"][0]["path"] == "rows"
    assert tier1.stats()["batch"][0]["tier2"] == {"state": "off", "reason": "tier2=False", "compile_seconds": None,
                                                  "from_cache": None}
    want_values, (want_gx, want_gy) = tier1.batch(xs, ys)
    # a sum's terms and a broadcast operand's gradient terms are added in another order
    np.testing.assert_allclose(values, want_values, rtol=1e-14)
    np.testing.assert_allclose(gx, want_gx, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(gy, want_gy, rtol=1e-13, atol=1e-14)
    torch = pytest.importorskip("torch")
    w, c = torch.tensor([0.5, -1.5, 2.0], dtype=torch.float64), 3.0

    def reference(x, y):
        return (((x - x.mean()) * w * y[0]) ** 2).sum() + ((x[1:] - c * x[:-1]) ** 2).mean()
    grads, torch_values = torch.func.vmap(torch.func.grad_and_value(reference, argnums=(0, 1)))(
        torch.tensor(xs), torch.tensor(ys))
    np.testing.assert_allclose(values, torch_values.numpy(), rtol=1e-13)
    np.testing.assert_allclose(gx, grads[0].numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gy, grads[1].numpy(), rtol=1e-12, atol=1e-12)


def test_compiled_in_the_background_while_tier_1_rows_run():
    """``tier2=True``: the first batch starts the compile (or the cache load) and runs
    tier 1's rows; once ready, batches run tier 2, with the same values."""
    f = tj.compile(tj.value_and_grad(lambda x: np.sum(np.tanh(x[1:] * x[:-1])) + np.sum(x * x)), tier2=True)
    xs = np.random.default_rng(12).uniform(-1, 1, (70, 4))
    first = f.batch(xs)
    state = f.stats()["batch"][0]["tier2"]
    assert f.stats()["batch"][0]["path"] == ("tier2" if state["state"] == "ready" else "rows")
    deadline = time.monotonic() + 300
    while f.stats()["batch"][0]["tier2"]["state"] == "compiling" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert f.stats()["batch"][0]["tier2"]["state"] == "ready", f.stats()
    second = f.batch(xs)
    assert f.stats()["batch"][0]["path"] == "tier2"
    np.testing.assert_allclose(second[0], first[0], rtol=1e-14)
    np.testing.assert_allclose(second[1], first[1], rtol=1e-14)
    # torch: d/dx of sum(tanh(x[1:] x[:-1])) + sum(x^2)
    t = 1 - np.tanh(xs[:, 1:] * xs[:, :-1]) ** 2
    grad = 2 * xs
    grad[:, 1:] += t * xs[:, :-1]
    grad[:, :-1] += t * xs[:, 1:]
    np.testing.assert_allclose(second[1], grad, rtol=1e-13)
