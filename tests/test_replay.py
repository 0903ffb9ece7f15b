"""``tj.compile``: replays equal eager mode, for every op and for whole programs; what a
replay cannot repeat is refused; batched replay equals a loop of single replays."""
import threading

import numpy as np
import pytest

import tapejit as tj
import tapejit.nn as nn
import tapejit.nn.functional as F
from tapejit import CompileError
from tapejit.numpy_mode import to_tensor

from test_gradients import CASES

# ---- both tiers ------------------------------------------------------------------------------
# Every test runs on tier 1 and on tier 2 compiled before the first replay (a trace tier 2
# does not fuse runs tier 1 both times); the every-op test runs tier 2 on one case per op.
# Tier 2 compiles a Numba function per trace, seconds apiece: its copies are marked slow,
# so the README's test command runs tier 1 and .ci/run's slow lane runs tier 2
# (tests/test_replay_tier2.py keeps tier 2's own tests in the README's command).
_TIER2 = pytest.param("tier2", marks=pytest.mark.slow)


@pytest.fixture(autouse=True)
def tier(request, monkeypatch):
    tier = getattr(request, "param", "tier1")
    monkeypatch.setenv("TAPEJIT_TIER2", "off" if tier == "tier1" else "sync")
    return tier


def pytest_generate_tests(metafunc):
    if "tier" in metafunc.fixturenames and metafunc.function.__name__ not in _OWN_TIERS:
        metafunc.parametrize("tier", ("tier1", _TIER2), indirect=True)


def _with_tiers(cases):
    """Every case on tier 1; on tier 2 too, the first case of each elementwise op (their
    rules are inlined into tier 2's loops) and of every fourth other op (tier 2 calls the
    same kernels as tier 1; each compiles into the trace's function, seconds apiece)."""
    seen = set()
    params = [pytest.param(*c.values, "tier1", marks=c.marks, id=c.id) for c in cases]
    kernels = 0
    for c in cases:
        op = c.values[0]
        if op.name in seen:
            continue
        seen.add(op.name)
        if op.kind == "kernel" and op.runs == "":
            kernels += 1
            if kernels % 4 != 1:
                continue
        params.append(pytest.param(*c.values, "tier2", marks=[*c.marks, pytest.mark.slow], id=f"{c.id}-tier2"))
    return params


_OWN_TIERS = {"test_replay_equals_eager_for_every_op"}


def _perturbed(inputs, seed):
    """New inputs in the same domain: a relative change of at most 2% keeps signs, order and
    distance from kinks of the ops' sample domains."""
    rng = np.random.default_rng(seed)
    return [x * (1.0 + 0.02 * rng.uniform(-1.0, 1.0, size=x.shape)) for x in inputs]


def _weighted(fn, u):
    """The scalar ``sum(fn(...) * u)``: its gradient is the VJP with cotangent ``u``.  The
    registry's samples are torch-style: inside tj.value_and_grad (NumPy mode) they take the
    tensors the traced arrays hold."""
    def loss(*xs):
        return (fn(tj, *[to_tensor(x) for x in xs]) * tj.from_numpy(u)).sum()
    return loss


def _torch_style(fn):
    """``fn`` (written with tapejit's torch-style API) on the tensors of traced arrays."""
    def on_tensors(*xs):
        return fn(*[to_tensor(x) for x in xs])
    return on_tensors


# ---- every op: replay on new inputs equals eager -------------------------------------------

# Samples that compute a mask from an input (``x > 0``): a comparison's result is a
# boolean computed in NumPy, so the trace would freeze it; tj.compile refuses instead.
# Likewise max/min along a dim, sort and topk: the elements they select are chosen from
# the values (argmax, argsort), which a replay would not choose again.
VALUE_DEPENDENT = {"where", "where_b", "max_dim", "min_dim", "sort", "topk"}


def _refused_as_value_dependent(label, run):
    if label not in VALUE_DEPENDENT:
        return False
    with pytest.raises(CompileError, match="reads a traced tensor's value"):
        run()
    return True


@pytest.mark.parametrize("op, label, fn, inputs, tier", _with_tiers(CASES), indirect=["tier"])
def test_replay_equals_eager_for_every_op(op, label, fn, inputs, tier):
    out = fn(tj, *[tj.from_numpy(x) for x in inputs])
    u = np.random.default_rng(len(label)).uniform(0.5, 1.5, size=tuple(out.shape))
    loss = _weighted(fn, u)
    argnums = tuple(range(len(inputs)))
    compiled = tj.compile(tj.value_and_grad(loss, argnums=argnums))
    if _refused_as_value_dependent(label, lambda: compiled(*inputs)):
        return
    eager = tj.value_and_grad(loss, argnums=argnums)
    first_value, first_grads = compiled(*inputs)
    value, grads = eager(*inputs)
    assert first_value == pytest.approx(value, rel=1e-12, abs=1e-12)
    for seed in (1, 2):
        new = _perturbed(inputs, seed)
        value, grads = eager(*new)
        replay_value, replay_grads = compiled(*new)
        assert replay_value == pytest.approx(value, rel=1e-12, abs=1e-12)
        for g, h in zip(replay_grads, grads):
            np.testing.assert_allclose(g, h, rtol=1e-12, atol=1e-12)
    assert compiled.stats()["traces"] == 1


@pytest.mark.parametrize("op, label, fn, inputs", CASES[::7])
def test_training_step_form_equals_eager_for_ops(op, label, fn, inputs):
    """The same cases as a step that calls backward(): gradients land in .grad."""
    out = fn(tj, *[tj.from_numpy(x) for x in inputs])
    u = tj.from_numpy(np.random.default_rng(3).uniform(0.5, 1.5, size=tuple(out.shape)))

    def step(*xs):
        loss = (fn(tj, *xs) * u).sum()
        loss.backward()
        return loss

    compiled = tj.compile(step)
    if _refused_as_value_dependent(label, lambda: compiled(*[tj.tensor(x, requires_grad=True) for x in inputs])):
        return
    for seed in (0, 1, 2):
        new = _perturbed(inputs, seed)
        eager_leaves = [tj.tensor(x, requires_grad=True) for x in new]
        replay_leaves = [tj.tensor(x, requires_grad=True) for x in new]
        expected = step(*eager_leaves)
        got = compiled(*replay_leaves)
        assert got.item() == pytest.approx(expected.item(), rel=1e-12, abs=1e-12)
        for a, b in zip(replay_leaves, eager_leaves):
            if b.grad is None:
                assert a.grad is None
            else:
                np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-12, atol=1e-12)


# ---- programs ------------------------------------------------------------------------------

def _random_program(rng, n_ops):
    """A random straight-line program over a 6-vector: (ops, fn)."""
    unary = [tj.tanh, tj.sin, lambda x: F.softplus(x), lambda x: x * x, tj.exp, lambda x: -x,
             lambda x: x.sum(0, keepdim=True) * 0.1 + x, lambda x: x.reshape(2, 3).t().reshape(6)]
    binary = [tj.add, tj.mul, tj.sub, lambda x, y: x * 0.5 + y.mean(),
              lambda x, y: tj.maximum(x, y), lambda x, y: tj.cat([x[:3], y[3:]])]
    plan = [(int(rng.integers(0, 2)), int(rng.integers(0, 8)), int(rng.integers(0, 100)),
             int(rng.integers(0, 100))) for _ in range(n_ops)]

    def fn(x, w):
        nodes = [x, w, x * w]
        for kind, which, i, j in plan:
            a = nodes[-1 - i % min(len(nodes), 6)]
            b = nodes[-1 - j % min(len(nodes), 6)]
            if kind == 0:
                nodes.append(tj.tanh(unary[which](a)))
            else:
                nodes.append(tj.tanh(binary[which % len(binary)](a, b)))
        return (nodes[-1] * nodes[-2]).sum() + nodes[-3].mean()
    return fn


@pytest.mark.parametrize("seed", range(12))
def test_random_programs_replay_like_eager(seed):
    rng = np.random.default_rng(seed)
    fn = _random_program(rng, 25)
    compiled = tj.compile(tj.value_and_grad(_torch_style(fn), argnums=(0, 1)))
    eager = tj.value_and_grad(_torch_style(fn), argnums=(0, 1))
    for _ in range(4):
        x, w = rng.uniform(-1, 1, 6), rng.uniform(-1, 1, 6)
        value, (gx, gw) = compiled(x, w)
        ref, (rx, rw) = eager(x, w)
        assert value == pytest.approx(ref, rel=1e-12)
        np.testing.assert_allclose(gx, rx, rtol=1e-11, atol=1e-14)
        np.testing.assert_allclose(gw, rw, rtol=1e-11, atol=1e-14)


def _mlp(seed, dtype=tj.float32):
    tj.manual_seed(seed)
    model = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)).to(dtype)
    return model


@pytest.mark.parametrize("optimizer, loss_name", [("SGD", "mse"), ("Adam", "cross_entropy")])
def test_training_step_trajectory_equals_eager_for_30_steps(optimizer, loss_name):
    rng = np.random.default_rng(0)
    x = tj.from_numpy(rng.standard_normal((16, 3)).astype(np.float32))
    if loss_name == "mse":
        y = tj.from_numpy(rng.standard_normal((16, 2)).astype(np.float32))
        loss_fn = nn.MSELoss()
    else:
        y = tj.from_numpy(rng.integers(0, 2, 16))
        loss_fn = nn.CrossEntropyLoss()
    trajectories = []
    for compiled in (False, True):
        model = _mlp(1)
        opt = getattr(tj.optim, optimizer)(model.parameters(), lr=0.01)

        def step(xb, yb):
            opt.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            return loss

        run = tj.compile(step) if compiled else step
        losses = []
        for _ in range(30):
            losses.append(run(x, y).item())
            opt.step()
        trajectories.append((losses, [p.detach().numpy().copy() for p in model.parameters()]))
        if compiled:
            assert run.stats()["traces"] == 1
    (eager_losses, eager_params), (replay_losses, replay_params) = trajectories
    np.testing.assert_allclose(replay_losses, eager_losses, rtol=1e-6)
    for a, b in zip(replay_params, eager_params):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert eager_losses[-1] < eager_losses[0]


def test_gradients_accumulate_without_zero_grad_as_in_eager():
    w = tj.tensor([1.0, 2.0], requires_grad=True)

    @tj.compile
    def step(x):
        loss = (w * x).sum() ** 2
        loss.backward()
        return loss

    x = tj.tensor([3.0, 4.0])
    step(x)
    step(x)
    step(x)
    np.testing.assert_allclose(w.grad.numpy(), 3 * 2 * 11.0 * np.array([3.0, 4.0]))
    w.grad = None
    step(tj.tensor([1.0, 1.0]))
    np.testing.assert_allclose(w.grad.numpy(), [6.0, 6.0])


def test_parameters_are_read_live_after_in_place_and_data_updates():
    w = tj.tensor([1.0, 2.0], requires_grad=True)
    f = tj.compile(lambda x: (w * x).sum().detach())
    x = tj.tensor([1.0, 1.0])
    assert f(x).item() == 3.0
    with tj.no_grad():
        w.mul_(2.0)
    assert f(x).item() == 6.0
    w.data = tj.tensor([5.0, 5.0])
    assert f(x).item() == 10.0


def test_a_new_signature_traces_again_and_both_are_kept():
    f = tj.compile(tj.value_and_grad(lambda x: (x ** 3).sum()))
    assert f(np.ones(3))[0] == 3.0
    assert f(np.ones(5))[0] == 5.0
    value, g = f(np.full(3, 2.0))
    assert value == 24.0
    np.testing.assert_allclose(g, [12.0, 12.0, 12.0])
    assert f(np.ones(2, np.float32))[1].dtype == np.float32
    stats = f.stats()
    assert stats["traces"] == 3
    assert all(r > 0 for r in stats["records"])
    assert stats["bytes"] > 0
    assert "traces" in repr(f)


def test_python_scalars_are_part_of_the_signature():
    f = tj.compile(lambda x, k: (x * k).sum())
    x = tj.ones(3)
    assert f(x, 2.0).item() == 6.0
    assert f(x, 3.0).item() == 9.0
    assert f.stats()["traces"] == 2


def test_dead_records_are_dropped():
    def fn(x):
        unused = np.exp(x) * 3.0   # noqa: F841  (dead: reaches no result)
        return (x * x).sum()
    f = tj.compile(tj.value_and_grad(fn))
    f(np.arange(4.0))
    stats = f.stats()
    assert stats["records"][0] < stats["records_traced"][0]
    value, g = f(np.arange(4.0) + 1)
    assert value == 30.0
    np.testing.assert_allclose(g, 2 * (np.arange(4.0) + 1))


def test_grad_and_has_aux_forms():
    def f(x, y):
        loss = (x * y).sum()
        return loss, x * 2
    g = tj.compile(tj.grad(f, argnums=1, has_aux=True))
    for k in (1.0, 2.0):
        grads, aux = g(np.full(3, k), np.ones(3))
        np.testing.assert_allclose(grads, np.full(3, k))
        assert type(aux) is np.ndarray   # a traced aux comes back as its value, as eagerly
        np.testing.assert_allclose(aux, np.full(3, 2 * k))


def test_unused_argument_gets_a_zero_gradient_like_eager():
    f = tj.compile(tj.value_and_grad(lambda x, y: (x * x).sum(), argnums=(0, 1)))
    for _ in range(2):
        _, (gx, gy) = f(np.ones(2), np.ones(3))
        np.testing.assert_allclose(gy, np.zeros(3))


def test_mixed_float32_and_float64_trace():
    w = tj.tensor([0.5, -1.0], dtype=tj.float32, requires_grad=True)

    @tj.compile
    def step(x):
        loss = (w.double() * x).sum() ** 2
        loss.backward()
        return loss

    for k in (1.0, 2.0):
        w.grad = None
        x = tj.tensor([k, 2 * k], dtype=tj.float64)
        loss = step(x)
        s = 0.5 * k - 2 * k
        assert loss.item() == pytest.approx(s * s)
        np.testing.assert_allclose(w.grad.numpy(), 2 * s * np.array([k, 2 * k]), rtol=1e-6)
        assert w.grad.dtype == tj.float32


def test_backward_with_a_gradient_argument():
    w = tj.tensor([1.0, 2.0, 3.0], requires_grad=True)

    @tj.compile
    def step(x, v):
        y = w * x
        y.backward(v)
        return y

    for k in (1.0, 2.0):
        w.grad = None
        y = step(tj.full((3,), k), tj.tensor([1.0, 0.0, 2.0]) * k)
        np.testing.assert_allclose(y.numpy(), [k, 2 * k, 3 * k])
        np.testing.assert_allclose(w.grad.numpy(), [k * k, 0.0, 2 * k * k])


def _grad_step(w):
    """A compiled step that clears ``w.grad``, backpropagates ``(w * x).sum()`` and returns it."""
    @tj.compile
    def step(x):
        w.grad = None
        (w * x).sum().backward()
        return w.grad
    return step


def test_returning_grad_of_a_leaf():
    w = tj.tensor([1.0, 2.0], requires_grad=True)
    step = _grad_step(w)
    for k in (1.0, 3.0):
        np.testing.assert_allclose(step(tj.full((2,), k)).numpy(), [k, k])


def test_compiled_inside_a_trace_is_inlined():
    inner = tj.compile(lambda x: x * 2)
    outer = tj.compile(tj.value_and_grad(lambda x: inner(x).sum()))
    for k in (1.0, 2.0):
        value, g = outer(np.full(3, k))
        assert value == 6 * k
        np.testing.assert_allclose(g, [2.0, 2.0, 2.0])


# ---- refusals ------------------------------------------------------------------------------

@pytest.mark.parametrize("read, words", [
    (lambda t: bool(t.sum() > 0), "comparison"),
    (lambda t: t.sum().item(), "item()"),
    (lambda t: float(t.sum()), "float(tensor)"),
    (lambda t: int(t.sum()), "int(tensor)"),
    (lambda t: t.tolist(), "tolist()"),
    (lambda t: bool(t.sum()), "bool(tensor)"),
    (lambda t: t.detach().numpy(), "numpy()"),
])
def test_reading_a_traced_value_is_refused(read, words):
    def fn(x):
        y = to_tensor(x) * 2   # torch-style tensors: NumPy mode's own refusal is a TypeError
        read(y)
        return y.sum()
    f = tj.compile(tj.value_and_grad(fn))
    with pytest.raises(CompileError) as info:
        f(np.ones(3))
    message = str(info.value)
    assert words in message
    assert "test_replay.py" in message          # where it happened
    assert "without tj.compile" in message      # the way out
    assert "value_and_grad(fn)" in message


def test_if_on_a_tensor_is_refused():
    @tj.compile
    def f(x):
        if x.sum() > 0:
            return x * 2
        return x

    with pytest.raises(CompileError, match="reads a traced tensor's value"):
        f(tj.ones(3))


@pytest.mark.parametrize("make", [
    lambda x: x * tj.randn(3),
    lambda x: x + tj.rand(3),
    lambda x: F.dropout(x, 0.5, training=True),
])
def test_random_ops_are_refused(make):
    f = tj.compile(lambda x: make(x).sum())
    with pytest.raises(CompileError, match="random"):
        f(tj.ones(3))


def test_dropout_in_eval_mode_is_not_random_and_replays():
    f = tj.compile(lambda x: F.dropout(x, 0.5, training=False).sum())
    assert f(tj.ones(3)).item() == 3.0
    assert f(tj.ones(3) * 2).item() == 6.0


def test_optimizer_step_inside_is_refused():
    w = tj.tensor([1.0], requires_grad=True)
    opt = tj.optim.SGD([w], lr=0.1)

    @tj.compile
    def step(x):
        loss = (w * x).sum()
        loss.backward()
        opt.step()
        return loss

    with pytest.raises(CompileError, match="in-place change"):
        step(tj.ones(1))


def test_in_place_on_a_tensor_made_inside_is_fine():
    @tj.compile
    def f(x):
        buf = tj.zeros(3)
        buf += 1.0
        buf[0] = 5.0
        return (x * buf).sum()

    assert f(tj.ones(3)).item() == 7.0
    assert f(tj.ones(3) * 2).item() == 14.0


def test_custom_function_and_hooks_are_refused():
    class Square(tj.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 2 * x * g

    with pytest.raises(CompileError, match="Function Square"):
        tj.compile(tj.value_and_grad(lambda x: Square.apply(x).sum()))(np.ones(2))

    w = tj.ones(2, requires_grad=True)

    def hooked(x):
        y = w * x
        y.register_hook(lambda g: g * 2)
        y.sum().backward()
        return y.detach()

    with pytest.raises(CompileError, match="register_hook"):
        tj.compile(hooked)(tj.ones(2))


def test_compiled_module_results_join_the_callers_graph():
    """``tj.compile(model)``, the torch.compile idiom: backward() runs outside."""
    model = _mlp(4, tj.float64)
    compiled = tj.compile(model)
    assert len(list(compiled.parameters())) == 6            # the module's own attributes
    rng = np.random.default_rng(0)
    for step in range(3):
        x1 = tj.from_numpy(rng.standard_normal((4, 3)))
        x2 = tj.from_numpy(rng.standard_normal((4, 3)))
        model.zero_grad()
        # two calls before one backward: each keeps its own saved values
        loss = compiled(x1).pow(2).sum() + compiled(x2).tanh().sum()
        assert type(loss.grad_fn).__name__ == "AddBackward0"
        loss.backward()
        replayed = [p.grad.numpy().copy() for p in model.parameters()]
        model.zero_grad()
        expected = model(x1).pow(2).sum() + model(x2).tanh().sum()
        expected.backward()
        assert loss.item() == pytest.approx(expected.item(), rel=1e-12)
        for a, p in zip(replayed, model.parameters()):
            np.testing.assert_allclose(a, p.grad.numpy(), rtol=1e-12, atol=1e-14)
    assert compiled.stats()["traces"] == 1


def test_compiled_function_passes_gradients_to_arguments_with_a_graph():
    w = tj.tensor([0.5, -1.0, 2.0], dtype=tj.float64, requires_grad=True)
    f = tj.compile(lambda h: tj.tanh(h * w).sum(0))
    for k in (1.0, 2.0):
        x = tj.full((2, 3), k, dtype=tj.float64, requires_grad=True)
        w.grad = None
        out = f(x * 3.0)
        assert type(out.grad_fn).__name__ == "CompiledFunctionBackward"
        (out * tj.tensor([1.0, 2.0, 3.0], dtype=tj.float64)).sum().backward()
        xe = x.detach().clone().requires_grad_()
        we = w.detach().clone().requires_grad_()
        (tj.tanh(xe * 3.0 * we).sum(0) * tj.tensor([1.0, 2.0, 3.0], dtype=tj.float64)).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), xe.grad.numpy(), rtol=1e-12)
        np.testing.assert_allclose(w.grad.numpy(), we.grad.numpy(), rtol=1e-12)


def test_compiled_function_under_no_grad_gives_plain_results():
    w = tj.ones(2, dtype=tj.float64, requires_grad=True)
    f = tj.compile(lambda x: w * x)
    f(tj.ones(2, dtype=tj.float64))
    with tj.no_grad():
        out = f(tj.full((2,), 3.0, dtype=tj.float64))
    assert out.grad_fn is None and not out.requires_grad
    np.testing.assert_allclose(out.numpy(), [3.0, 3.0])


def test_a_step_with_an_argument_that_has_a_graph_is_refused():
    w = tj.ones(2, dtype=tj.float64, requires_grad=True)

    def step(h):
        loss = (h * w).sum()
        loss.backward()
        return loss.detach()
    x = tj.ones(2, dtype=tj.float64, requires_grad=True)
    with pytest.raises(CompileError, match="with a graph"):
        tj.compile(step)(x * 2)


def test_autograd_grad_inside_is_refused():
    def fn(x):
        w = tj.ones(2, requires_grad=True)
        (g,) = tj.autograd.grad((w * x).sum(), [w])
        return g
    with pytest.raises(CompileError, match="autograd.grad"):
        tj.compile(fn)(tj.ones(2))


def test_a_parameter_changing_shape_dtype_or_requires_grad_traces_again():
    w = tj.ones(2, requires_grad=True)
    f = tj.compile(lambda x: (w * x).sum().detach())
    assert f(tj.ones(2)).item() == 2.0
    w.data = tj.ones(3)
    assert f(tj.ones(3)).item() == 3.0
    w.data = tj.ones(3, dtype=tj.float64)
    out = f(tj.ones(3))
    assert out.item() == 3.0 and out.dtype == tj.float64

    layer = tj.ones(2, dtype=tj.float64, requires_grad=True)

    @tj.compile
    def step(x):
        loss = (layer * x).sum()
        if loss.requires_grad:    # Python on a flag, not on a value: fine in a trace
            loss.backward()
        return loss.detach()

    step(tj.ones(2, dtype=tj.float64))
    assert layer.grad is not None
    layer.grad = None
    layer.requires_grad_(False)   # frozen: no more gradient
    step(tj.ones(2, dtype=tj.float64))
    assert layer.grad is None


def test_refusal_leaves_the_thread_usable():
    f = tj.compile(lambda x: (x * 2).sum().item())
    with pytest.raises(CompileError):
        f(tj.ones(2))
    x = tj.ones(2, requires_grad=True)
    (x * 3).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 3.0])


# ---- batched replay ------------------------------------------------------------------------

@pytest.fixture(params=["rows", "per-row"])
def batch_path(request, monkeypatch, tier):
    """Runs a batch test on both paths of ``compiled.batch``: rows as the vector axis
    (``tapejit/replay/rows.py``, compiled before the first batch if it is not cached; on
    tier 2 the trace's fused row loops, "tier2") and the per-row replay it falls back to;
    returns the path ``stats()["batch"]`` names."""
    from tapejit.replay import batch
    monkeypatch.setattr(batch, "ROWS", "sync" if request.param == "rows" else "off")
    return "tier2" if request.param == "rows" and tier == "tier2" else request.param


def _paths(f):
    """How each trace's last ``f.batch`` ran."""
    return [s and s["path"] for s in f.stats()["batch"]]


def _both_paths(f, *stacked):
    """``f.batch(*stacked)`` by rows as the vector axis and row by row (asserting which ran)."""
    from tapejit.replay import batch
    results = []
    before = batch.ROWS
    for mode, path in (("sync", "rows"), ("off", "per-row")):
        batch.ROWS = mode
        try:
            results.append(f.batch(*stacked))
        finally:
            batch.ROWS = before
        # on tier 2 (tier2="sync") the vector-rows path is the trace's fused row loops
        ready = (f.stats()["batch"][0]["tier2"] or {}).get("state") == "ready"
        assert _paths(f) == ["tier2" if mode != "off" and ready else path]
    return results


def _assert_same_bits(a, b):
    for x, y in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _rosen(x):
    return (100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()


def test_batch_equals_a_loop_of_single_replays(batch_path, tier):
    f = tj.compile(tj.value_and_grad(_rosen))
    xs = np.random.default_rng(0).uniform(-2, 2, (257, 6))
    values, grads = f.batch(xs)
    assert _paths(f) == [batch_path]
    assert values.shape == (257,) and grads.shape == (257, 6)
    for i in range(0, 257, 16):
        v, g = f(xs[i])
        if tier == "tier1" or batch_path == "tier2":   # the same loops, in the same order: the same bits
            assert values[i] == v
            np.testing.assert_array_equal(grads[i], g)
        else:                   # tier 2's fused loop adds the sum's terms in another order
            np.testing.assert_allclose(values[i], v, rtol=1e-15)
            np.testing.assert_allclose(grads[i], g, rtol=1e-15)


def test_batch_of_grad_with_several_arguments_and_forward_only_functions(batch_path):
    f = tj.compile(tj.grad(lambda x, y: (x * y * y).sum(), argnums=(0, 1)))
    xs = np.random.default_rng(1).uniform(-1, 1, (40, 3))
    ys = np.random.default_rng(2).uniform(-1, 1, (40, 3))
    gx, gy = f.batch(xs, ys)
    assert _paths(f) == [batch_path]
    np.testing.assert_allclose(gx, ys * ys)
    np.testing.assert_allclose(gy, 2 * xs * ys)
    h = tj.compile(lambda x: (tj.tanh(x) * 2, x.sum()))
    a, b = h.batch(xs)
    assert _paths(h) == [batch_path]
    np.testing.assert_allclose(a.numpy(), np.tanh(xs) * 2)
    np.testing.assert_allclose(b.numpy(), xs.sum(1))


def test_batch_by_rows_broadcasts_parameters_and_scalar_operands_as_torch():
    """Stride-0 operands on either side (a parameter, a mean), slices, select, a sum over a
    dim: rows as the vector axis give the per-row path's bits, and torch.func's values."""
    w = tj.tensor([0.5], dtype=tj.float64)

    def f(x, y):
        m = x.reshape(2, 3).sum(0)               # a sum over a dim (strided gradient)
        return ((x[1:] - x.mean()) * (y[0] / w) + (w - x[:-1]) ** 2).sum() + (m * m).mean()
    vg = tj.compile(tj.value_and_grad(f, argnums=(0, 1)))
    rng = np.random.default_rng(4)
    xs, ys = rng.uniform(-2, 2, (37, 6)), rng.uniform(0.5, 2, (37, 2))
    rows, per_row = _both_paths(vg, xs, ys)
    _assert_same_bits(rows[0], per_row[0])
    _assert_same_bits(rows[1], per_row[1])
    torch = pytest.importorskip("torch")

    def reference(x, y):
        m = x.reshape(2, 3).sum(0)
        return ((x[1:] - x.mean()) * (y[0] / 0.5) + (0.5 - x[:-1]) ** 2).sum() + (m * m).mean()
    grads = torch.func.vmap(torch.func.grad(reference, argnums=(0, 1)))(torch.tensor(xs), torch.tensor(ys))
    np.testing.assert_allclose(rows[0], torch.func.vmap(reference)(torch.tensor(xs), torch.tensor(ys)).numpy(),
                               rtol=1e-13)
    np.testing.assert_allclose(rows[1][0], grads[0].numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(rows[1][1], grads[1].numpy(), rtol=1e-12, atol=1e-12)


def test_batch_by_rows_in_float32_and_on_any_thread_count(tier):
    """float32 (a rule's float64 constants, a float32 sum): the per-row path's bits, on one
    thread and on three (a share each, the last block narrower).  On tier 2 the rows run
    its fused loops: the same bits on any thread count, and the per-row path's within
    float32 rounding (as single tier-2 replays differ from tier 1's: exp's last bit, a
    sum's order)."""
    f = tj.compile(tj.value_and_grad(lambda x: np.sum(np.exp(-x * x) * 3.0 + x[2] * x)))
    xs = np.random.default_rng(5).uniform(-2, 2, (1000, 5)).astype(np.float32)
    before = tj.get_num_threads()
    try:
        tj.set_num_threads(1)
        one = _both_paths(f, xs)
        tj.set_num_threads(3)
        three = f.batch(xs)
    finally:
        tj.set_num_threads(before)
    assert one[0][0].dtype == np.float32 and one[0][1].dtype == np.float32
    reference = one[1] if tier == "tier1" else one[0]
    for result in (one[0], three):
        _assert_same_bits(result[0], reference[0])
        _assert_same_bits(result[1], reference[1])
    for got, want in zip(one[0], one[1]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    if tier == "tier2":     # tier 2's rows have the bits of single tier-2 replays (exp included)
        for i in (0, 517, 999):
            value, grad = f(xs[i])
            assert one[0][0][i] == value
            np.testing.assert_array_equal(one[0][1][i], grad)


def test_batch_of_an_op_rows_do_not_cover_or_of_a_large_arena_runs_row_by_row(monkeypatch, tier):
    from tapejit.replay import rows
    f = tj.compile(tj.value_and_grad(lambda x: np.sum(np.cumsum(x) ** 2)))
    xs = np.random.default_rng(6).uniform(-1, 1, (9, 4))
    values, grads = f.batch(xs)
    assert _paths(f) == ["per-row"]
    stats = f.stats()["batch"][0]
    assert stats["rows"] == "ineligible" and stats["reason"].startswith("not covered: "), stats
    if tier == "tier2":     # a kernel between the fused loops: tier 2 of batch() says why it does not run
        assert stats["tier2"]["state"] == "ineligible"
        assert "calls kernels between its loops" in stats["tier2"]["reason"]
    # torch: d/dx sum(cumsum(x)^2) = reversed cumsum of 2 * cumsum(x)
    c = np.cumsum(xs, 1)
    np.testing.assert_allclose(values, (c * c).sum(1), rtol=1e-13)
    np.testing.assert_allclose(grads, np.cumsum((2 * c)[:, ::-1], 1)[:, ::-1], rtol=1e-13)
    monkeypatch.setattr(rows, "MAX_SLOTS", 8)       # the arena: 4 + 3 + 3 + ... slots
    g = tj.compile(tj.value_and_grad(_rosen), tier2=False)     # (rows.py's limit: tier 1)
    values, grads = g.batch(xs)
    assert _paths(g) == ["per-row"]
    assert "more than 8" in g.stats()["batch"][0]["reason"]
    assert values[3] == g(xs[3])[0]


def test_batch_of_rows_long_enough_for_chunked_runs():
    # Rows of 2^16 elements: single replays run run by run (no single compiled call); this
    # raised "cannot unpack non-iterable NoneType object".  torch: d/dx sum(x * x) = 2x.
    f = tj.compile(tj.value_and_grad(lambda x: np.sum(x * x)))
    xs = np.random.default_rng(7).uniform(-1, 1, (2, 1 << 16))
    values, grads = f.batch(xs)
    np.testing.assert_allclose(values, (xs * xs).sum(1), rtol=1e-12)
    np.testing.assert_array_equal(grads, 2 * xs)


def test_batch_refuses_a_training_step():
    w = tj.ones(3, dtype=tj.float64, requires_grad=True)

    def step(x):
        loss = (w * x).sum()
        loss.backward()
        return loss.detach()
    with pytest.raises(CompileError, match="per-sample"):
        tj.compile(step).batch(np.ones((4, 3)))


def test_batch_and_replays_from_several_threads(batch_path):
    f = tj.compile(tj.value_and_grad(_rosen))
    xs = np.random.default_rng(3).uniform(-2, 2, (64, 5))
    expected = f.batch(xs)
    errors = []

    def work(seed):
        try:
            rng = np.random.default_rng(seed)
            for _ in range(20):
                values, grads = f.batch(xs)
                np.testing.assert_array_equal(values, expected[0])
                np.testing.assert_array_equal(grads, expected[1])
                i = int(rng.integers(0, 64))
                v, g = f(xs[i])
                assert v == pytest.approx(expected[0][i], rel=1e-13)
        except BaseException as e:  # noqa: BLE001  (reported by the main thread)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_readme_replay_example_runs():
    from pathlib import Path
    text = (Path(__file__).parent.parent / "README.md").read_text()
    start = text.index("```python", text.index("**Replay: trace once")) + len("```python")
    code = text[start:text.index("```", start)]
    scope = {}
    exec(compile(code, "README.md", "exec"), scope)   # noqa: S102  (our own README)
    assert scope["train_step"].stats()["traces"] == 1
    first = scope["loss_fn"](scope["model"](scope["x"]), scope["y"]).item()
    assert first <= scope["loss"].item()     # the last opt.step() went downhill
    assert scope["values"].shape == (10000,) and scope["grads"].shape == (10000, 10)
    np.testing.assert_allclose(scope["grad"], tj.value_and_grad(scope["rosen"])(np.zeros(10))[1])


def test_traces_are_bounded_with_a_warning():
    w = tj.ones(3, dtype=tj.float64, requires_grad=True)

    @tj.compile(max_traces=2)
    def step(x, scale):
        w.grad = None
        loss = (w * x).sum() * scale
        loss.backward()
        return loss

    x = tj.ones(3, dtype=tj.float64)
    for scale in (1.0, 2.0, 3.0):
        if scale == 3.0:
            with pytest.warns(RuntimeWarning, match="signatures traced"):
                got = step(x, scale).item()
        else:
            got = step(x, scale).item()
        assert got == 3.0 * scale
        assert step(x, scale).item() == 3.0 * scale   # replayed
    assert step.stats()["traces"] == 2
    with pytest.raises(ValueError, match="max_traces"):
        tj.compile(step, max_traces=0)


def test_backward_inputs_restrict_the_leaves_that_receive_gradients():
    a = tj.ones(2, dtype=tj.float64, requires_grad=True)
    b = tj.ones(2, dtype=tj.float64, requires_grad=True)

    @tj.compile
    def step(x):
        loss = (a * b * x).sum()
        loss.backward(inputs=[a])
        return loss

    for k in (1.0, 2.0):
        a.grad = None
        step(tj.full((2,), k, dtype=tj.float64))
        np.testing.assert_allclose(a.grad.numpy(), [k, k])
        assert b.grad is None

    def non_leaf(x):
        h = a * x
        (h * b).sum().backward(inputs=[h])
        return h.detach()
    with pytest.raises(CompileError, match="non-leaf"):
        tj.compile(non_leaf)(tj.ones(2, dtype=tj.float64))


def test_compiled_method():
    class Trainer:
        def __init__(self):
            self.model = nn.Linear(3, 1).double()

        @tj.compile
        def step(self, x):
            self.model.zero_grad()
            loss = self.model(x).pow(2).mean()
            loss.backward()
            return loss

    trainer = Trainer()
    x = tj.randn(5, 3, dtype=tj.float64)
    first = trainer.step(x).item()
    assert trainer.step(x).item() == pytest.approx(first, rel=1e-12)
    expected = trainer.model.weight.grad.numpy().copy()
    trainer.model.zero_grad()
    trainer.model(x).pow(2).mean().backward()
    np.testing.assert_allclose(expected, trainer.model.weight.grad.numpy(), rtol=1e-12)
    assert Trainer.step.stats()["traces"] == 1


def _classifier_step(model, opt):
    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        return loss
    return step


def test_new_label_batches_replay_without_tracing_again():
    rng = np.random.default_rng(5)
    batches = [(tj.from_numpy(rng.standard_normal((8, 3))), tj.from_numpy(rng.integers(0, 2, 8)))
               for _ in range(6)]
    results = []
    for compiled in (False, True):
        model = _mlp(7, tj.float64)
        opt = tj.optim.SGD(model.parameters(), lr=0.1)
        step = _classifier_step(model, opt)
        run = tj.compile(step) if compiled else step
        losses = []
        for _ in range(3):
            for x, y in batches:
                losses.append(run(x, y).item())
                opt.step()
        results.append(losses)
        if compiled:
            assert run.stats()["traces"] == 1
    np.testing.assert_allclose(results[1], results[0], rtol=1e-12)


def test_labels_out_of_range_and_ignored_labels_on_replay():
    model = _mlp(8, tj.float64)
    opt = tj.optim.SGD(model.parameters(), lr=0.1)
    step = tj.compile(_classifier_step(model, opt))
    x = tj.randn(4, 3, dtype=tj.float64)
    step(x, tj.tensor([0, 1, 1, 0]))
    with pytest.raises(IndexError, match="out of bounds"):
        step(x, tj.tensor([0, 5, 1, 0]))
    # an ignored label changes what is recorded: a trace of its own, with eager's value
    y = tj.tensor([0, -100, 1, 0])
    with tj.no_grad():
        expected = F.cross_entropy(model(x), y).item()
    assert step(x, y).item() == pytest.approx(expected, rel=1e-12)
    assert step.stats()["traces"] == 2


def test_labels_read_another_way_stay_part_of_the_signature():
    w = tj.ones(3, 2, dtype=tj.float64, requires_grad=True)

    @tj.compile
    def step(x, y):
        w.grad = None
        loss = F.cross_entropy(x @ w, y, weight=tj.tensor([1.0, 2.0], dtype=tj.float64))
        loss.backward()
        return loss

    x = tj.randn(4, 3, dtype=tj.float64)
    for labels_ in ([0, 1, 1, 0], [1, 1, 0, 0]):
        y = tj.tensor(labels_)
        with tj.no_grad():
            expected = F.cross_entropy(x @ w, y, weight=tj.tensor([1.0, 2.0], dtype=tj.float64)).item()
        assert step(x, y).item() == pytest.approx(expected, rel=1e-12)
    assert step.stats()["traces"] == 2


def test_compiled_model_with_loss_and_labels_outside_backward():
    model = _mlp(9, tj.float64)
    loss_of = tj.compile(lambda x, y: F.cross_entropy(model(x), y))
    rng = np.random.default_rng(2)
    for _ in range(3):
        x = tj.from_numpy(rng.standard_normal((5, 3)))
        y = tj.from_numpy(rng.integers(0, 2, 5))
        model.zero_grad()
        loss_of(x, y).backward()
        got = [p.grad.numpy().copy() for p in model.parameters()]
        model.zero_grad()
        F.cross_entropy(model(x), y).backward()
        for a, p in zip(got, model.parameters()):
            np.testing.assert_allclose(a, p.grad.numpy(), rtol=1e-12, atol=1e-14)
    assert loss_of.stats()["traces"] == 1


def test_grad_mode_is_part_of_the_signature():
    w = tj.ones(2, dtype=tj.float64, requires_grad=True)
    f = tj.compile(lambda x: (w * x).sum())
    x = tj.ones(2, dtype=tj.float64)
    assert f(x).requires_grad
    with tj.no_grad():
        out = f(x)
    assert not out.requires_grad and out.item() == 2.0
    assert f.stats()["traces"] == 2


def test_one_array_shortcut_matches_the_general_path():
    f = tj.compile(tj.value_and_grad(_rosen))
    g = tj.compile(tj.grad(_rosen))
    h = tj.compile(tj.value_and_grad(_rosen, argnums=(0,)))
    rng = np.random.default_rng(11)
    for dtype in (np.float64, np.float32):
        for n in (5, 7, 5):
            x = rng.uniform(-2, 2, n).astype(dtype)
            value, grad = tj.value_and_grad(_rosen)(x)
            got_value, got_grad = f(x)
            assert got_value == pytest.approx(value, rel=1e-6 if dtype == np.float32 else 1e-13)
            assert got_grad.dtype == dtype and got_grad.shape == (n,)
            np.testing.assert_allclose(got_grad, grad, rtol=1e-5 if dtype == np.float32 else 1e-13)
            np.testing.assert_allclose(g(x), grad, rtol=1e-5 if dtype == np.float32 else 1e-13)
            (h_grad,) = h(x)[1]
            np.testing.assert_allclose(h_grad, grad, rtol=1e-5 if dtype == np.float32 else 1e-13)
            assert got_grad is not f(x)[1]     # a fresh array per call
    assert f.stats()["traces"] == 4


# ---- values from outside the function -------------------------------------------------------

def test_reading_an_argument_that_requires_grad_is_refused():
    def hinge(x):
        return np.sum(np.where(x > 0, x, 0))
    with pytest.raises(CompileError, match="comparison"):
        tj.compile(tj.value_and_grad(hinge))(np.array([1.0, -2.0, 3.0]))
    w = tj.ones(2, dtype=tj.float64, requires_grad=True)

    def step(x):
        loss = (x * float(x.sum())).sum()
        loss.backward()
        return loss
    with pytest.raises(CompileError, match="float"):
        tj.compile(step)(w)


@pytest.mark.parametrize("read", [
    lambda buf, x: x * buf.item(),
    lambda buf, x: tj.where(buf > 0, x, -x),
    lambda buf, x: x * float(buf.numpy()),
])
def test_reading_a_closed_over_tensor_is_refused(read):
    buf = tj.tensor(2.0, dtype=tj.float64)
    f = tj.compile(lambda x: read(buf, x).sum())
    with pytest.raises(CompileError, match="reads"):
        f(tj.ones(3, dtype=tj.float64))


@pytest.mark.parametrize("use", [
    lambda buf, x: tj.cat([buf, buf])[:2] * x,
    lambda buf, x: buf.clone() * x,
    lambda buf, x: buf.double() * x,
    lambda buf, x: buf[[1, 0]] * x,
    lambda buf, x: buf.reshape(2, 1).t().reshape(2) * x,
])
def test_closed_over_tensors_used_by_ops_are_read_live(use):
    buf = tj.tensor([1.0, 2.0], dtype=tj.float32)
    f = tj.compile(lambda x: use(buf, x).sum())
    x = tj.ones(2, dtype=tj.float64)
    first = f(x).item()
    with tj.no_grad():
        buf.mul_(10.0)
    assert f(x).item() == pytest.approx(first * 10)
    buf.data = tj.tensor([100.0, 200.0], dtype=tj.float32)
    assert f(x).item() == pytest.approx(first * 100)


def test_numpy_arrays_the_function_closes_over_are_read_live():
    arr = np.array([1.0, 2.0])
    f = tj.compile(tj.value_and_grad(lambda x: np.sum(x * arr)))
    g = tj.compile(tj.value_and_grad(lambda x: (x * tj.from_numpy(arr)).sum()))
    x = np.ones(2)
    assert f(x)[0] == 3.0 and g(x)[0] == 3.0
    arr[:] = [5.0, 10.0]
    assert f(x)[0] == 15.0 and g(x)[0] == 15.0
    np.testing.assert_allclose(f(x)[1], [5.0, 10.0])


def test_a_hook_on_a_parameter_runs_at_the_trace_and_at_replays():
    w = tj.ones(2, dtype=tj.float64, requires_grad=True)
    calls = []
    w.register_hook(lambda g: calls.append(g.numpy().copy()) or g * 2)
    step = _grad_step(w)
    for k in (1.0, 3.0):
        np.testing.assert_allclose(step(tj.full((2,), k, dtype=tj.float64)).numpy(), [2 * k, 2 * k])
    assert len(calls) == 2


def test_argument_grad_inside_the_function():
    @tj.compile
    def saliency(x):
        x.grad = None
        (x * x).sum().backward()
        return x.grad

    for k in (1.0, 2.0):
        x = tj.full((3,), k, dtype=tj.float64, requires_grad=True)
        np.testing.assert_allclose(saliency(x).numpy(), [2 * k] * 3)


def test_the_same_tensor_passed_twice_and_a_leaf_or_not_are_signatures():
    @tj.compile
    def step(a, b):
        loss = (a * b).sum()
        loss.backward()
        return loss

    x = tj.tensor([1.0, 2.0], dtype=tj.float64, requires_grad=True)
    step(x, x)
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0])
    a = tj.tensor([3.0, 4.0], dtype=tj.float64, requires_grad=True)
    b = tj.tensor([1.0, 1.0], dtype=tj.float64, requires_grad=True)
    assert step(a, b).item() == 7.0
    np.testing.assert_allclose(a.grad.numpy(), [1.0, 1.0])
    np.testing.assert_allclose(b.grad.numpy(), [3.0, 4.0])

    f = tj.compile(lambda h: (h * h).sum())
    leaf = tj.tensor([1.0, 2.0], dtype=tj.float64, requires_grad=True)
    f(leaf).backward()
    base = tj.tensor([1.0, 2.0], dtype=tj.float64, requires_grad=True)
    f(base * 3).backward()          # a non-leaf: its gradient goes on to base
    np.testing.assert_allclose(base.grad.numpy(), [18.0, 36.0])


def test_compiled_forward_repeats_zero_grad_and_marks_plain_outputs():
    w = tj.ones(1, 3, dtype=tj.float64, requires_grad=True)

    @tj.compile
    def forward(x):
        w.grad = None
        out = x @ w.t()
        return out, out.detach().sum()

    for _ in range(3):
        out, stat = forward(tj.ones(2, 3, dtype=tj.float64))
        assert not stat.requires_grad
        out.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [[2.0, 2.0, 2.0]])


def test_results_from_labels_grads_and_new_constants():
    w = tj.ones(2, dtype=tj.float64, requires_grad=True)

    @tj.compile
    def step(x, y):
        w.grad = None
        loss = F.cross_entropy((x * w).reshape(1, 2), y)
        loss.backward()
        return y, tj.zeros(2)

    y1, z1 = step(tj.ones(2, dtype=tj.float64), tj.tensor([0]))
    y2, z2 = step(tj.ones(2, dtype=tj.float64), tj.tensor([1]))
    assert y2.tolist() == [1]
    z1 += 1.0
    assert z2.tolist() == [0.0, 0.0] and z1 is not z2

    @tj.compile
    def two_reads(x):
        w.grad = None
        (w * x).sum().backward()
        first = w.grad
        w.grad = None
        (w * x * x).sum().backward()
        return first
    with pytest.raises(CompileError, match="later backward"):
        two_reads(tj.full((2,), 2.0, dtype=tj.float64))


def test_batch_gradient_of_an_argument_no_gradient_reaches_is_zero_as_torch(batch_path):
    """torch.func.vmap(grad(f, argnums=(0, 1))) gives zeros for ``y``, which ``f`` never reads."""
    f = tj.compile(tj.grad(lambda x, y: (x * x).sum(), argnums=(0, 1)))
    xs, ys = np.random.default_rng(3).uniform(-1, 1, (6, 3)), np.ones((6, 2))
    gx, gy = f.batch(xs, ys)
    np.testing.assert_allclose(gx, 2 * xs)
    assert gy.shape == (6, 2) and not gy.any()
    g = tj.compile(tj.value_and_grad(lambda x, y: (x * y[0]).sum(), argnums=(0, 1)))
    _, (gx, gy) = g.batch(xs, ys)           # y[1] is never read
    np.testing.assert_allclose(gx, np.ones((6, 3)))
    np.testing.assert_allclose(gy, np.stack([xs.sum(1), np.zeros(6)], 1))


def test_batch_of_zero_rows_says_it_needs_one_to_trace():
    f = tj.compile(tj.value_and_grad(lambda x: (x * x).sum()))
    with pytest.raises(CompileError, match="0 rows.*at least one"):
        f.batch(np.zeros((0, 3)))


def test_batch_refuses_integer_and_keyword_arrays():
    f = tj.compile(tj.value_and_grad(lambda x, k: (x * x).sum() * k.sum()))
    with pytest.raises(CompileError, match="integer"):
        f.batch(np.ones((4, 3)), np.ones((4, 2), np.int64))
    g = tj.compile(tj.value_and_grad(lambda x: (x * x).sum()))
    with pytest.raises(CompileError, match="positional"):
        g.batch(np.ones((4, 3)), scale=np.ones(4))


def test_float_arguments_are_keyed_exactly():
    f = tj.compile(lambda x, s: (x / s).sum())
    x = tj.ones(2, dtype=tj.float64)
    assert f(x, 0.0).item() == np.inf
    assert f(x, -0.0).item() == -np.inf
    nan = float("nan")
    f(x, nan)
    f(x, nan)
    assert f.stats()["traces"] == 3


def test_refusals_after_tracing_name_the_function():
    class Square(tj.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * x

        @staticmethod
        def backward(ctx, g):
            return g

    outside = Square.apply(tj.ones(2, dtype=tj.float64, requires_grad=True))

    def uses_outside_graph(x):
        return (x * outside).sum().detach()
    with pytest.raises(CompileError, match=r"tj.compile\(uses_outside_graph\)"):
        tj.compile(uses_outside_graph)(tj.ones(2, dtype=tj.float64))


def test_value_and_grad_refuses_float_arrays_it_would_freeze():
    f = tj.compile(tj.value_and_grad(lambda x, data=None: (x * data).sum()))
    with pytest.raises(CompileError, match="keyword"):
        f(np.ones(2), data=np.array([3.0, -1.0]))
    g = tj.compile(tj.value_and_grad(lambda x, pair: (x * pair[0] * pair[1]).sum()))
    with pytest.raises(CompileError, match="inside argument 1"):
        g(np.ones(2), (np.ones(2), np.ones(2)))
