"""Higher-order derivatives (issue 18): a Hessian-vector product against a gradient, and a
double backward (gradient penalty) against torch.

* Rosenbrock n = 1,000 (workload C's function, NumPy mode): ``tj.compile(tj.hvp(f))``
  (traced once, replayed: the recorded first backward and the compiled second one in one
  replay) against ``tj.compile(tj.grad(f))``; the eager ``tj.hvp`` and torch's double
  backward (``autograd.grad(..., create_graph=True)`` then ``autograd.grad`` of ``<g, v>``)
  are shown beside them.  Every row is checked against ``scipy.optimize.rosen_hess_prod``
  (or ``rosen_der``) first.
* The 784-128-10 MLP of workload B, gradient-penalty style: the loss plus the squared norm
  of its gradient with respect to the input batch, differentiated with respect to the
  parameters (``create_graph=True`` then a plain backward), the same code for tapejit and
  torch (one thread); the gradients must agree first.
"""
import numpy as np
import pytest
import targets as T
import workloads as W

N = 1_000


def _rosen(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def _point():
    rng = np.random.default_rng(0)
    return rng.standard_normal(N), rng.standard_normal(N)


def _torch_hvp(torch):
    def hvp(x, v):
        xt = torch.tensor(x, requires_grad=True)
        y = (100.0 * (xt[1:] - xt[:-1] ** 2) ** 2 + (1 - xt[:-1]) ** 2).sum()
        (g,) = torch.autograd.grad(y, xt, create_graph=True)
        (h,) = torch.autograd.grad((g * torch.tensor(v)).sum(), xt)
        return h.numpy()
    return hvp


@pytest.mark.parametrize("peer", ("tapejit", "tapejit_gradient", "tapejit_eager", "torch"))
def test_rosenbrock_hvp(peer, benchmark):
    scipy_optimize = pytest.importorskip("scipy.optimize")
    import tapejit as tj
    x, v = _point()
    if peer == "torch":
        torch = pytest.importorskip("torch")
        fn, expected = _torch_hvp(torch), scipy_optimize.rosen_hess_prod(x, v)
    elif peer == "tapejit_gradient":
        compiled = tj.compile(tj.grad(_rosen))
        fn, expected = (lambda x, v: compiled(x)), scipy_optimize.rosen_der(x)
    else:
        fn = tj.compile(tj.hvp(_rosen)) if peer == "tapejit" else tj.hvp(_rosen)
        expected = scipy_optimize.rosen_hess_prod(x, v)
    np.testing.assert_allclose(fn(x, v), expected, rtol=0, atol=1e-10)
    benchmark.group = T.GROUP_HVP
    benchmark(fn, x, v)


def _penalty_step(lib, spec):
    """``grads of loss + |d loss / d x|^2`` with respect to the parameters."""
    tl, F = lib.tl, lib.F
    params = [tl.tensor(a, requires_grad=True) for a in W.flat_params(W.mlp_init(spec))]
    x_np, y_np = W.mlp_batch(spec)
    y = tl.tensor(y_np)

    def step():
        x = tl.tensor(x_np, requires_grad=True)
        h = F.relu(F.linear(x, params[0], params[1]))
        loss = F.cross_entropy(F.linear(h, params[2], params[3]), y)
        (gx,) = tl.autograd.grad(loss, x, create_graph=True)
        total = loss + (gx * gx).sum()
        return tl.autograd.grad(total, params)
    return step


@pytest.mark.parametrize("peer", ("tapejit", "torch"), indirect=True)
def test_gradient_penalty_mlp(peer, benchmark):
    step = _penalty_step(peer, W.MNIST_MLP)
    ours = [g.numpy() for g in step()]
    if peer.name == "tapejit":
        torch = pytest.importorskip("torch")
        theirs = [g.numpy() for g in _penalty_step(W.library("torch"), W.MNIST_MLP)()]
        for a, b in zip(ours, theirs):
            np.testing.assert_allclose(a, b, rtol=2e-3, atol=2e-5 * float(np.abs(b).max()))
    benchmark.group = T.GROUP_GRADIENT_PENALTY
    benchmark(step)
