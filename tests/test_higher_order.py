"""Higher-order derivatives: ``create_graph=True``, ``autograd.functional``, ``gradgradcheck``,
nested ``tj.grad``, ``tj.hessian``/``tj.jacobian``/``tj.hvp``.

Every registry sample (``tests/test_gradients.py``'s CASES) of an op with a derivative
formula gets a second-order check: with ``g(x) = autograd.grad(f(x), x, u,
create_graph=True)`` and ``s(x) = <g(x), w>``, the gradient of ``s`` (a backward through
the recorded first backward) along a direction ``v`` must equal the central finite
difference of ``s`` (computed with the plain first derivative), at float64; and it must
equal PyTorch's double backward on the same inputs.  A sample may refuse only by
``NotImplementedError`` naming the node of an op whose formula does not cover it.
"""

import numpy as np
import pytest

import tapejit as tj
from tapejit import registry
from tapejit.ops._formulas import formula_of

from test_gradients import CASES, FD_STEP, TORCH_UNSUPPORTED, _seed

FORMULATED = [p for p in CASES if formula_of(p.values[0])]
# Samples at a point a formula does not cover (it raises by name there, as the rule's
# value is a special case): {case id: the node named}.
REFUSED = {"det-det_singular": "LinalgDetBackward0"}


def _unformulated_node(fn, inputs):
    """The node of an op without a formula on the graph of ``fn`` (None if every op has
    one): a sample of a formulated op may still go through an op that has none."""
    from tapejit.tape import current
    before = current()
    first = before.n   # the thread's tape may hold other tests' pending records
    leaves = [tj.tensor(x, requires_grad=True) for x in inputs]
    out = fn(tj, *leaves)
    tape = out._tape
    tape.flush()
    start = first if tape is before else 0
    names = {registry.OPS[c >> 1].name for c in tape.rec[start:tape.nrec, 0].tolist()}
    missing = sorted(registry.BY_NAME[n].node for n in names
                     if not formula_of(registry.BY_NAME[n]) and registry.BY_NAME[n].kind not in ("load", "cast"))
    return missing[0] if missing else None


def _directions(case_id, out_shape, inputs):
    rng = np.random.default_rng(_seed("second:" + case_id))
    u = rng.standard_normal(out_shape)
    w = [rng.standard_normal(x.shape) for x in inputs]
    v = [rng.standard_normal(x.shape) for x in inputs]
    return u, w, v


def _contracted_gradient(fn, inputs, u, w, create_graph):
    """``(leaves, s)`` with ``s = sum_i <d<f, u>/dx_i, w_i>``."""
    leaves = [tj.tensor(x, requires_grad=True) for x in inputs]
    out = fn(tj, *leaves)
    grads = tj.autograd.grad(out, leaves, tj.tensor(u), create_graph=create_graph, allow_unused=True)
    s = None
    for g, wi in zip(grads, w):
        if g is None:
            continue
        term = (g * tj.tensor(wi)).sum()
        s = term if s is None else s + term
    return leaves, s


def _second(fn, inputs, u, w):
    """The gradient of ``s`` with respect to each input (zeros where ``s`` does not depend on it)."""
    leaves, s = _contracted_gradient(fn, inputs, u, w, True)
    if s is None or not s.requires_grad:
        return [np.zeros_like(x) for x in inputs]
    found = tj.autograd.grad(s, leaves, allow_unused=True)
    return [np.zeros_like(x) if g is None else np.array(g.numpy()) for g, x in zip(found, inputs)]


def _s_value(fn, inputs, u, w):
    _, s = _contracted_gradient(fn, inputs, u, w, False)
    return 0.0 if s is None else float(s.item())


@pytest.mark.parametrize("op, label, fn, inputs", FORMULATED)
def test_second_derivative_finite_differences(op, label, fn, inputs):
    out_shape = tuple(fn(tj, *[tj.tensor(x) for x in inputs]).shape)
    u, w, v = _directions(f"{op.name}-{label}", out_shape, inputs)
    refused = REFUSED.get(f"{op.name}-{label}")
    if refused is not None:
        with pytest.raises(NotImplementedError, match=refused):
            _second(fn, inputs, u, w)
        return
    try:
        second = _second(fn, inputs, u, w)
    except NotImplementedError as e:
        # only an op without a formula on the path to the inputs may refuse, by its name
        missing = _unformulated_node(fn, inputs)
        assert missing is not None and missing in str(e), str(e)
        return
    along = float(sum(np.sum(h * d) for h, d in zip(second, v)))
    h = FD_STEP * 10
    plus = _s_value(fn, [x + h * d for x, d in zip(inputs, v)], u, w)
    minus = _s_value(fn, [x - h * d for x, d in zip(inputs, v)], u, w)
    numeric = (plus - minus) / (2 * h)
    scale = max(1.0, abs(numeric), abs(along))
    assert abs(along - numeric) <= 1e-5 * scale, f"second derivative {along} vs finite differences {numeric}"


@pytest.mark.parametrize("op, label, fn, inputs", FORMULATED)
def test_second_derivative_matches_torch(op, label, fn, inputs):
    torch = pytest.importorskip("torch")
    if f"{op.name}-{label}" in TORCH_UNSUPPORTED:
        pytest.skip(TORCH_UNSUPPORTED[f"{op.name}-{label}"])
    if f"{op.name}-{label}" in REFUSED:
        pytest.skip("a formula refuses this sample (see the test above)")
    out_shape = tuple(fn(tj, *[tj.tensor(x) for x in inputs]).shape)
    u, w, _ = _directions(f"{op.name}-{label}", out_shape, inputs)
    try:
        ours = _second(fn, inputs, u, w)
    except NotImplementedError:
        pytest.skip("an op on this sample's graph has no formula (raises by name: see the test above)")
    leaves = [torch.tensor(x, requires_grad=True) for x in inputs]
    try:
        out = fn(torch, *leaves)
    except (TypeError, AttributeError, RuntimeError) as e:
        pytest.skip(f"torch cannot run this sample: {e}")
    grads = torch.autograd.grad(out, leaves, torch.tensor(u), create_graph=True, allow_unused=True)
    s = sum((g * torch.tensor(wi)).sum() for g, wi in zip(grads, w) if g is not None)
    if not isinstance(s, torch.Tensor) or not s.requires_grad:
        expected = [np.zeros_like(x) for x in inputs]
    else:
        found = torch.autograd.grad(s, leaves, allow_unused=True)
        # torch's double backward of abs/sign/relu gives a ZeroTensor: numpy() needs force
        expected = [np.zeros_like(x) if g is None else g.numpy(force=True) for g, x in zip(found, inputs)]
    for a, b in zip(ours, expected):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-10 * max(1.0, float(np.max(np.abs(b), initial=0))))


def test_every_differentiable_op_has_a_formula():
    """An op added without a ``@derivative`` formula (README, "How it works") fails here."""
    missing = [op.name for op in registry.OPS if op.kind not in ("load", "cast") and formula_of(op) is None]
    assert missing == []


def test_op_without_formula_raises_by_name(monkeypatch):
    # every op has a formula: one taken away shows the refusal that guards an op added
    # without one (never a wrong value)
    from tapejit.ops import linalg_small
    monkeypatch.delattr(linalg_small.CHOLESKY, "formula")
    a = tj.tensor([[2.0, 0.5], [0.5, 1.0]], dtype=tj.float64, requires_grad=True)
    with pytest.raises(NotImplementedError, match="LinalgCholeskyExBackward0.*create_graph=True"):
        tj.autograd.grad(tj.linalg.cholesky(a).sum(), a, create_graph=True)
    # an op without a formula off the path to the inputs does not raise (torch runs only
    # the nodes leading to them)
    z = tj.tensor([0.25, 0.75], dtype=tj.float64, requires_grad=True)
    (g,) = tj.autograd.grad((tj.linalg.cholesky(a)[0] * z.exp()).sum(), z, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), np.exp([0.25, 0.75]) * np.array([2.0 ** 0.5, 0.0]),
                               rtol=1e-14)


# ---- third order, backward(create_graph=True), semantics ----------------------------------

def test_third_order_matches_torch():
    torch = pytest.importorskip("torch")
    x0 = np.array([0.3, -0.8, 1.1])

    def third(mod, x):
        y = (mod.tanh(x) * x.exp()).sum() + (x ** 4).sum()
        (g1,) = mod.autograd.grad(y, x, create_graph=True)
        (g2,) = mod.autograd.grad(g1.sum(), x, create_graph=True)
        (g3,) = mod.autograd.grad((g2 * g2).sum(), x)
        return g2, g3

    a2, a3 = third(tj, tj.tensor(x0, requires_grad=True))
    b2, b3 = third(torch, torch.tensor(x0, requires_grad=True))
    np.testing.assert_allclose(a2.detach().numpy(), b2.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(a3.numpy(), b3.numpy(), rtol=1e-12)


def test_third_order_softmax_and_matmul_match_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    a0, b0 = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))

    def third(mod, a, b):
        y = mod.log_softmax(a @ b, dim=1).sum() + (mod.softmax(a @ b, dim=0) ** 2).sum()
        (ga,) = mod.autograd.grad(y, a, create_graph=True)
        (gb,) = mod.autograd.grad((ga ** 2).sum(), b, create_graph=True)
        return mod.autograd.grad(gb.sum(), (a, b))

    ours = third(tj, tj.tensor(a0, requires_grad=True), tj.tensor(b0, requires_grad=True))
    theirs = third(torch, torch.tensor(a0, requires_grad=True), torch.tensor(b0, requires_grad=True))
    for p, q in zip(ours, theirs):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.filterwarnings(r"ignore:Using backward\(\) with create_graph=True")
def test_backward_create_graph_gives_grad_with_grad_fn():
    torch = pytest.importorskip("torch")
    x0 = np.array([0.5, -1.5, 2.0])
    x = tj.tensor(x0, requires_grad=True)
    (x.sin() * x ** 2).sum().backward(create_graph=True)
    assert x.grad.grad_fn is not None and x.grad.requires_grad   # torch's: a non-leaf .grad
    first = x.grad
    x.grad = None
    first.sum().backward()
    xt = torch.tensor(x0, requires_grad=True)
    (xt.sin() * xt ** 2).sum().backward(create_graph=True)
    firstt = xt.grad
    xt.grad = None
    firstt.sum().backward()
    np.testing.assert_allclose(first.detach().numpy(), firstt.detach().numpy(), rtol=1e-13)
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-13)


def test_gradient_penalty_on_mlp_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    w1, b1 = rng.standard_normal((16, 8)) * 0.3, rng.standard_normal(16) * 0.1
    w2, b2 = rng.standard_normal((3, 16)) * 0.3, rng.standard_normal(3) * 0.1
    x0 = rng.standard_normal((5, 8))

    def penalty(mod, F):
        params = [mod.tensor(a, requires_grad=True) for a in (w1, b1, w2, b2)]
        x = mod.tensor(x0, requires_grad=True)
        h = F.relu(F.linear(x, params[0], params[1]))
        loss = F.cross_entropy(F.linear(h, params[2], params[3]), mod.tensor([0, 2, 1, 1, 0]))
        (gx,) = mod.autograd.grad(loss, x, create_graph=True)
        total = loss + (gx ** 2).sum()
        return [g.numpy() for g in mod.autograd.grad(total, params)]

    for a, b in zip(penalty(tj, tj.nn.functional), penalty(torch, torch.nn.functional)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-13)


def test_constant_incoming_gradients_of_sum_mean_and_log_softmax_match_torch():
    """A constant gradient into sum/mean (expanded by NumPy) and into log_softmax (its sum
    taken by NumPy, not by an eager record mid-walk), at float32, against torch's double
    backward."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x0 = rng.standard_normal((3, 4)).astype(np.float32)
    w0 = rng.standard_normal((3, 4)).astype(np.float32)
    r0 = rng.standard_normal(3).astype(np.float32)
    found = []
    for mod in (tj, torch):
        x = mod.tensor(x0, requires_grad=True)
        w, r = mod.tensor(w0), mod.tensor(r0)
        firsts = [mod.autograd.grad((x * x).sum(1), x, r, create_graph=True)[0],
                  mod.autograd.grad((x * x).mean(1), x, r, create_graph=True)[0],
                  mod.autograd.grad((x * x).mean(), x, create_graph=True)[0],
                  mod.autograd.grad(x.log_softmax(1), x, w, create_graph=True)[0]]
        (second,) = mod.autograd.grad(sum((g * g).sum() for g in firsts), x)
        found.append([g.detach().numpy() for g in firsts] + [second.numpy()])
    for a, b in zip(*found):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_piecewise_linear_second_derivative_is_zeros_with_a_grad_fn():
    """torch's double backward of relu/leaky_relu/hardtanh is a node over the saved tensor:
    with a constant incoming gradient the first derivative still has a grad_fn, and its
    own gradient is zeros (clamp, where and maximum give none: a constant result)."""
    torch = pytest.importorskip("torch")
    x0 = [0.5, -1.0, 2.0, float("inf")]
    for name in ("relu", "leaky_relu", "hardtanh", "clamp"):
        found = []
        for mod in (tj, torch):
            x = mod.tensor(x0, dtype=mod.float64, requires_grad=True)
            y = x.clamp(-0.5, 1.0) if name == "clamp" else getattr(mod.nn.functional, name)(x)
            (g,) = mod.autograd.grad(y.sum(), x, create_graph=True)
            if g.requires_grad:
                g.sum().backward()
            found.append((g.requires_grad, g.detach().numpy().tolist(),
                          None if x.grad is None else x.grad.numpy().tolist()))
        assert found[0] == found[1], name


def test_create_graph_on_a_freed_graph_raises_torchs_error():
    x = tj.tensor([1.0, 2.0], dtype=tj.float64, requires_grad=True)
    y = (x.exp() * x).sum()
    tj.autograd.grad(y, x)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        tj.autograd.grad(y, x, create_graph=True)


def test_create_graph_retains_the_graph_and_allow_unused():
    x = tj.tensor([1.0, 2.0], dtype=tj.float64, requires_grad=True)
    z = tj.tensor([3.0], dtype=tj.float64, requires_grad=True)
    y = (x ** 3).sum()
    (g,) = tj.autograd.grad(y, x, create_graph=True)
    (g_again,) = tj.autograd.grad(y, x, create_graph=True)   # create_graph implies retain_graph
    np.testing.assert_array_equal(g.detach().numpy(), g_again.detach().numpy())
    with pytest.raises(RuntimeError, match="allow_unused=True"):
        tj.autograd.grad(y, [x, z], create_graph=True)
    gx, gz = tj.autograd.grad(y, [x, z], create_graph=True, allow_unused=True)
    assert gz is None
    np.testing.assert_allclose(gx.detach().numpy(), [3.0, 12.0])


def test_grad_outputs_that_require_grad_are_differentiated():
    torch = pytest.importorskip("torch")

    def run(mod):
        x = mod.tensor([0.4, -0.7], dtype=mod.float64, requires_grad=True)
        v = mod.tensor([1.5, 2.5], dtype=mod.float64, requires_grad=True)
        (g,) = mod.autograd.grad(x.sin(), x, v, create_graph=True)
        return [t.numpy() for t in mod.autograd.grad((g * g).sum(), (x, v))]

    for a, b in zip(run(tj), run(torch)):
        np.testing.assert_allclose(a, b, rtol=1e-13)


def test_in_place_change_of_a_saved_value_raises():
    torch = pytest.importorskip("torch")
    for mod in (tj, torch):
        x = mod.tensor([0.5, 1.0], dtype=mod.float64, requires_grad=True)
        h = x * 2
        y = (h.exp()).sum()   # exp saves its result... and h is saved by nothing; mul saves x
        e = h.exp()
        e.add_(1.0)           # exp's saved output changed in place
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            mod.autograd.grad(e.sum() + y, x, create_graph=True)


# ---- autograd.functional and gradgradcheck, against torch ----------------------------------

def _f_scalar(mod):
    return lambda x, y: (mod.tanh(x) * y.sum() + x ** 3).sum() + (y ** 2).prod()


def test_functional_against_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    x0, y0, vx, vy = rng.standard_normal(3), rng.standard_normal(2), rng.standard_normal(3), rng.standard_normal(2)
    F, T = tj.autograd.functional, torch.autograd.functional
    a = lambda *arrs: tuple(tj.tensor(z) for z in arrs)
    b = lambda *arrs: tuple(torch.tensor(z) for z in arrs)

    def close(p, q):
        if isinstance(q, (tuple, list)):
            assert isinstance(p, tuple) and len(p) == len(q)
            for pi, qi in zip(p, q):
                close(pi, qi)
        else:
            np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-11, atol=1e-13)

    vec = lambda mod: (lambda x, y: mod.cat([x.sin() * y.sum(), y.exp()]))
    close(F.hessian(_f_scalar(tj), a(x0, y0)), T.hessian(_f_scalar(torch), b(x0, y0)))
    close(F.jacobian(vec(tj), a(x0, y0)), T.jacobian(vec(torch), b(x0, y0)))
    close(F.hessian(lambda x: (x.exp() * x).sum(), tj.tensor(x0)),
          T.hessian(lambda x: (x.exp() * x).sum(), torch.tensor(x0)))
    close(F.jacobian(lambda x: x.sin(), tj.tensor(x0)), T.jacobian(lambda x: x.sin(), torch.tensor(x0)))
    for name in ("hvp", "vhp"):
        close(getattr(F, name)(_f_scalar(tj), a(x0, y0), a(vx, vy)),
              getattr(T, name)(_f_scalar(torch), b(x0, y0), b(vx, vy)))
    w0 = rng.standard_normal(5)
    close(F.vjp(vec(tj), a(x0, y0), tj.tensor(w0)), T.vjp(vec(torch), b(x0, y0), torch.tensor(w0)))
    close(F.jvp(vec(tj), a(x0, y0), a(vx, vy)), T.jvp(vec(torch), b(x0, y0), b(vx, vy)))
    # create_graph=True: the result is differentiable again
    x = tj.tensor(x0, requires_grad=True)
    _, hv = F.hvp(lambda t: (t ** 4).sum(), x, tj.tensor(vx), create_graph=True)
    (g,) = tj.autograd.grad(hv.sum(), x)
    np.testing.assert_allclose(g.numpy(), 24 * x0 * vx, rtol=1e-13)   # d/dx sum(12 x^2 v)


def test_functional_strict_and_errors():
    torch = pytest.importorskip("torch")
    F, T = tj.autograd.functional, torch.autograd.functional
    for f, mod in ((F, tj), (T, torch)):
        x, y = mod.tensor([1.0, 2.0], dtype=mod.float64), mod.tensor([3.0], dtype=mod.float64)
        with pytest.raises(RuntimeError, match="independent of input 1"):
            f.jacobian(lambda a, b: a * 2, (x, y), strict=True)
        jac = f.jacobian(lambda a, b: a * 2, (x, y))
        np.testing.assert_array_equal(np.asarray(jac[1]), np.zeros((2, 1)))
        with pytest.raises(RuntimeError, match="v can only be None"):
            f.vjp(lambda a: a * 2, x)
        with pytest.raises(RuntimeError, match="v has invalid size"):
            f.hvp(lambda a: (a ** 3).sum(), x, mod.tensor([1.0, 2.0, 3.0], dtype=mod.float64))


def test_gradgradcheck():
    x = tj.tensor(np.array([0.3, -0.4, 0.9]), requires_grad=True)
    w = tj.tensor(np.array([[0.5, -1.0, 0.2], [0.1, 0.3, -0.7]]), requires_grad=True)
    assert tj.autograd.gradgradcheck(lambda a, b: (b @ a.tanh()).exp(), (x, w))
    assert tj.autograd.gradgradcheck(lambda a: tj.softmax(a * a, 0), (x,),
                                     (tj.tensor(np.array([1.0, -2.0, 0.5]), requires_grad=True),))


# ---- NumPy mode -------------------------------------------------------------------------

def _rosen(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def test_numpy_nested_grad_to_third_order():
    x = np.array([0.3, -1.1, 0.7])
    d2 = tj.grad(lambda t: np.sum(tj.grad(lambda s: np.sum(np.sin(s) * s ** 3))(t)))(x)
    np.testing.assert_allclose(d2, 6 * x * np.sin(x) + 6 * x ** 2 * np.cos(x) - x ** 3 * np.sin(x), rtol=1e-13)
    d3 = tj.grad(tj.grad(tj.grad(lambda t: np.sin(t) * t)))(0.7)
    np.testing.assert_allclose(d3, -3 * np.sin(0.7) - 0.7 * np.cos(0.7), rtol=1e-13)
    # the inner derivative follows its argument only, not the outer value it closes over
    # (JAX's semantics): d/da [a * d/db (a b^2) at b = a] = d/da 2a^3 = 6a^2 (following the
    # closure too would give d/da 3a^3 = 9a^2)
    out = tj.grad(lambda a: a * tj.grad(lambda b: a * b ** 2)(a))(1.5)
    np.testing.assert_allclose(out, 6 * 1.5 ** 2, rtol=1e-13)


def test_numpy_hessian_jacobian_hvp_against_scipy():
    from scipy.optimize import rosen_hess, rosen_hess_prod
    rng = np.random.default_rng(1)
    x5 = rng.standard_normal(5)
    np.testing.assert_allclose(tj.hessian(_rosen)(x5), rosen_hess(x5), rtol=1e-12, atol=1e-10)
    jac = tj.jacobian(lambda x: np.sin(x) * x[0])(x5)
    np.testing.assert_allclose(jac, np.diag(np.cos(x5) * x5[0]) + np.outer(np.sin(x5), np.eye(5)[0]), rtol=1e-13)
    x, v = rng.standard_normal(1000), rng.standard_normal(1000)
    hv = tj.hvp(_rosen)(x, v)
    assert hv.shape == (1000,) and hv.dtype == np.float64
    np.testing.assert_allclose(hv, rosen_hess_prod(x, v), rtol=0, atol=1e-10)
    compiled = tj.compile(tj.hvp(_rosen))
    for shift in (0.0, 0.5):   # traced once, replayed with new values
        np.testing.assert_allclose(compiled(x + shift, v), rosen_hess_prod(x + shift, v), rtol=0, atol=1e-10)


def test_compiled_hvp_refuses_a_formula_that_reads_values():
    # maximum's derivative masks by the values: frozen into a replay it would be wrong for
    # other inputs, so tj.compile refuses (eager hvp is fine)
    f = lambda x: np.sum(np.maximum(x, 0.0) ** 3)
    x, v = np.array([1.0, -2.0, 3.0]), np.ones(3)
    np.testing.assert_allclose(tj.hvp(f)(x, v), [6.0, 0.0, 18.0], rtol=1e-15)
    with pytest.raises(tj.CompileError, match="reads a traced tensor's value"):
        tj.compile(tj.hvp(f))(x, v)


def test_numpy_argnums():
    f = lambda a, b: np.sum(a ** 2 * b) + np.sum(b ** 3)
    a, b = np.array([1.0, 2.0]), np.array([0.5, -1.0])
    va, vb = np.array([1.0, -1.0]), np.array([2.0, 0.5])
    ha, hb = tj.hvp(f, argnums=(0, 1))(a, b, (va, vb))
    # H = [[2 diag(b), 2 diag(a)], [2 diag(a), 6 diag(b)]]
    np.testing.assert_allclose(ha, 2 * b * va + 2 * a * vb, rtol=1e-14)
    np.testing.assert_allclose(hb, 2 * a * va + 6 * b * vb, rtol=1e-14)
    np.testing.assert_allclose(tj.hvp(f, argnums=1)(a, b, vb), 6 * b * vb, rtol=1e-14)
    H = tj.hessian(f, argnums=(0, 1))(a, b)
    np.testing.assert_allclose(H[0][1], 2 * np.diag(a), rtol=1e-14)
    np.testing.assert_allclose(H[1][1], 6 * np.diag(b), rtol=1e-14)


def test_trust_krylov_converges_on_100d_rosenbrock():
    from scipy.optimize import minimize
    x0 = np.full(100, -1.0)
    x0[::2] = 1.2
    res = minimize(_rosen, x0, jac=tj.grad(_rosen), hessp=tj.hvp(_rosen), method="trust-krylov")
    assert res.success
    np.testing.assert_allclose(res.x, np.ones(100), atol=1e-5)


def test_formulas_refuse_the_cases_they_do_not_cover():
    # where the rule's value is a special case (torch: NaN/inf gradients of a variance over
    # too few elements), the formula raises by name instead of guessing
    x = tj.tensor([1.0], dtype=tj.float64, requires_grad=True)
    with pytest.warns(UserWarning, match="degrees of freedom"):
        v = x.var()
    with pytest.raises(NotImplementedError, match="VarBackward0.*n - correction"):
        tj.autograd.grad(v, x, create_graph=True)
    # binary_cross_entropy at an input of exactly 0: the rule clamps its denominator
    p = tj.tensor([0.0, 0.5], dtype=tj.float64, requires_grad=True)
    loss = tj.nn.functional.binary_cross_entropy(p, tj.tensor([0.0, 1.0], dtype=tj.float64))
    with pytest.raises(NotImplementedError, match="BinaryCrossEntropyBackward0.*1e-12"):
        tj.autograd.grad(loss, p, create_graph=True)


def test_cumulative_ops_match_torch_to_third_order():
    torch = pytest.importorskip("torch")
    x0 = np.array([[0.5, -1.0, 2.0], [1.5, 0.0, -0.75]])   # a zero: cumprod's exact branch

    def third(mod, op):
        x = mod.tensor(x0, requires_grad=True)
        (g,) = mod.autograd.grad((op(mod)(x, 1) ** 3).sum(), x, create_graph=True)
        (h,) = mod.autograd.grad((g * g).sum(), x, create_graph=True)
        return [t.detach().numpy() for t in (g, h, mod.autograd.grad(h.sum(), x)[0])]

    for op in (lambda m: m.cumsum, lambda m: m.cumprod):
        for a, b in zip(third(tj, op), third(torch, op)):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_compiled_function_refuses_backward_with_create_graph_and_names_the_way():
    """A replay runs no Python, so a backward(create_graph=True) inside tj.compile is refused,
    pointing at tj.compile(tj.hvp(f)), which traces the recorded backward itself."""
    def step(w):
        loss = (w ** 3).sum()
        loss.backward(create_graph=True)
        return loss

    w = tj.tensor([1.0, 2.0], dtype=tj.float64, requires_grad=True)
    with pytest.raises(tj.CompileError, match=r"backward\(create_graph=True\).*tj\.compile\(tj\.hvp\(f\)\)"):
        tj.compile(step)(w)
