"""The frozen-tape optimisation of tj.compile (tapejit/replay/optimize.py): each rewrite gives
the values and gradients of the trace as recorded (``optimize.enabled = False``), and torch's;
records that only look alike are not merged."""
import numpy as np
import pytest

import tapejit as tj
import tapejit.nn.functional as F
from tapejit import demo, registry
from tapejit.numpy_mode import to_tensor
from tapejit.replay import optimize


def _names(compiled):
    """{op name: records} of the compiled function's one trace."""
    (entry,) = compiled.traces.values()
    tape = entry.frozen.tape
    codes, counts = np.unique(tape.rec[:tape.nrec, 0] >> 1, return_counts=True)
    return {registry.OPS[int(c)].name: int(n) for c, n in zip(codes, counts)}


def _replay_step(fn, inputs, **options):
    """``tj.compile(step, **options)`` of ``fn``'s training-style step (``backward`` of
    ``(fn(*xs) * u).sum()``, returning ``fn``'s detached result): traced on the first call and
    replayed on the second, each on fresh leaves.  Returns the compiled step, the replay's
    value, the leaves' gradients and ``u``."""
    shape = tuple(fn(tj, *[tj.tensor(x) for x in inputs]).shape)
    u = np.linspace(-1.0, 2.0, int(np.prod(shape))).reshape(shape).astype(inputs[0].dtype)

    def step(*xs):
        out = fn(tj, *xs)
        (out * tj.tensor(u)).sum().backward()
        return out.detach()

    compiled = tj.compile(step, **options)
    for _ in range(2):   # trace, then replay
        leaves = [tj.tensor(x, requires_grad=True) for x in inputs]
        value = compiled(*leaves).numpy()
    return compiled, value, [x.grad.numpy() for x in leaves], u


def _replayed(fn, inputs, monkeypatch, optimized=True):
    """``_replay_step`` with the frozen-tape optimiser on or off.  Returns the replay's value,
    the leaves' gradients, the trace's ``{op name: records}`` and ``u``."""
    monkeypatch.setattr(optimize, "enabled", optimized)
    compiled, value, grads, u = _replay_step(fn, inputs)
    assert compiled.stats()["traces"] == 1
    return value, grads, _names(compiled), u


def _torch_result(fn, inputs, u):
    torch = pytest.importorskip("torch")
    leaves = [torch.tensor(x, requires_grad=True) for x in inputs]
    out = fn(torch, *leaves)
    (out * torch.tensor(u)).sum().backward()
    return out.detach().numpy(), [x.grad.numpy() for x in leaves]


@pytest.mark.parametrize("op", optimize.FUSED_OPS, ids=lambda op: op.name)
def test_fused_op_samples_match_the_recorded_trace_and_torch(op, monkeypatch):
    """Each fused op's samples, replayed: the trace holds the fused op, and the value and the
    gradients are the unoptimised replay's (bit for bit, float64 and float32) and torch's."""
    for label, fn, inputs in op.samples(np.random.default_rng(0)):
        for dtype in (np.float64, np.float32):
            cast = [np.asarray(x, dtype) for x in inputs]
            value, grads, names, u = _replayed(fn, cast, monkeypatch)
            assert names.get(op.name, 0) >= 1, f"{label}: {op.name} not in the trace {names}"
            plain_value, plain_grads, plain_names, _ = _replayed(fn, cast, monkeypatch, optimized=False)
            assert op.name not in plain_names and sum(names.values()) < sum(plain_names.values())
            assert value.dtype == dtype and all(g.dtype == dtype for g in grads)
            np.testing.assert_array_equal(value, plain_value, err_msg=label)
            for g, h in zip(grads, plain_grads):
                np.testing.assert_array_equal(g, h, err_msg=label)
            if dtype == np.float64:
                torch_value, torch_grads = _torch_result(fn, cast, u)
                np.testing.assert_allclose(value, torch_value, rtol=1e-12, atol=0, err_msg=label)
                for g, h in zip(grads, torch_grads):
                    np.testing.assert_allclose(g, h, rtol=1e-12, atol=1e-15, err_msg=label)


def _scalar_graph(n_ops):
    def f(x):
        return demo.scalar_graph(tj, F, n_ops, list(to_tensor(x).unbind(0)))[1]
    return tj.compile(tj.value_and_grad(f))


def test_scalar_graph_has_about_one_record_per_op(monkeypatch):
    """Workload A (tapejit/demo.py): each sum is one add_n record, each softmax of four
    stacked scalars one stack_softmax, the unbinds go; values and gradients as recorded, bit
    for bit."""
    x = np.arange(100) / 100
    n_ops = 200
    compiled = _scalar_graph(n_ops)
    compiled(x)
    got = compiled(x)
    names = _names(compiled)
    assert names["add_n"] == names["stack_softmax"] == names["mul"] == names["softplus"] == n_ops // 4
    assert "add" not in names and "add_scalar" not in names and "stack" not in names and "softmax" not in names
    monkeypatch.setattr(optimize, "enabled", False)
    plain = _scalar_graph(n_ops)
    plain(x)
    want = plain(x)
    assert sum(names.values()) == sum(_names(plain).values()) - n_ops   # per 4 ops: 3 adds, a stack
    # the single compiled replay reads the unbinds' elements in place: the load, one record per
    # op, and x[0]'s unbind (a range at offset 0 stays)
    assert compiled.stats()["records"] == [n_ops + 2]
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert np.count_nonzero(got[1]) == 17   # the inputs the output depends on at 200 ops
    torch = pytest.importorskip("torch")
    inputs = [torch.tensor(v, requires_grad=True) for v in x]
    out = demo.scalar_graph(torch, torch.nn.functional, n_ops, inputs)[1]
    out.backward()
    np.testing.assert_allclose(got[0], out.item(), rtol=1e-13)
    np.testing.assert_allclose(got[1], [0.0 if t.grad is None else t.grad.item() for t in inputs], rtol=1e-9)


def _sum_with_constant(tl, x, y):
    return sum([x, y.detach(), x * y, y])


def _shared_exp(tl, x):
    return x.exp() * 2.0 + x.exp().sin()


def _look_alike(tl, x, y):
    # x * 2.0 and x * 3.0 differ in the constant only; the in-place add_ rebinds a to a new
    # record, after which x * 2.0 again equals a's old value, not its new one
    a = x * 2.0
    a.add_(1.0)
    b = x * 2.0
    return a * b + x * 3.0 + (x + y) * (x + y.detach())


@pytest.mark.parametrize("fn, fused", [(_sum_with_constant, "add_n"), (_shared_exp, None), (_look_alike, None)],
                         ids=["sum_with_constant", "shared_exp", "look_alike"])
def test_rewrites_keep_values_and_gradients(fn, fused, monkeypatch):
    """A sum whose terms do not all take a gradient; equal records merged (two x.exp());
    records alike but for a constant, an in-place change or a detached operand, kept apart."""
    inputs = [np.array([0.5, -1.25, 2.0]), np.array([1.5, 0.25, -0.75])][:fn.__code__.co_argcount - 1]
    value, grads, names, u = _replayed(fn, inputs, monkeypatch)
    plain_value, plain_grads, plain_names, _ = _replayed(fn, inputs, monkeypatch, optimized=False)
    if fused:
        assert names.get(fused, 0) == 1, names
    if fn is _shared_exp:
        assert names["exp"] == 1 and plain_names["exp"] == 2
    if fn is _look_alike:
        assert names["mul_scalar"] == plain_names["mul_scalar"] - 1   # the second x * 2.0 only
    torch_value, torch_grads = _torch_result(fn, inputs, u)
    for got in (value, plain_value):
        np.testing.assert_allclose(got, torch_value, rtol=1e-13, atol=0)
    for g, h, t in zip(grads, plain_grads, torch_grads):
        np.testing.assert_allclose(g, h, rtol=1e-15, atol=0)   # merged readers: another summation order
        np.testing.assert_allclose(g, t, rtol=1e-13, atol=1e-15)


def test_a_sum_read_midway_is_not_fused(monkeypatch):
    """A partial sum that is also a result (or read by another record) stays its own record."""
    monkeypatch.setattr(optimize, "enabled", True)

    @tj.compile
    def partial_sums(x, y):
        s1 = x + y
        s2 = s1 + y
        return s2 + x, s1

    x = tj.tensor([1.0, 2.0], requires_grad=True)
    y = tj.tensor([0.5, -3.0], requires_grad=True)
    partial_sums(x, y)
    total, s1 = partial_sums(x, y)
    assert _names(partial_sums).get("add_n", 0) == 1 and _names(partial_sums)["add"] == 1
    (total.sum() * 2.0 + s1.sum()).backward()
    np.testing.assert_array_equal(total.detach().numpy(), [3.0, -2.0])
    np.testing.assert_array_equal(s1.detach().numpy(), [1.5, -1.0])
    np.testing.assert_array_equal(x.grad.numpy(), [5.0, 5.0])    # torch: 2 * 2 + 1
    np.testing.assert_array_equal(y.grad.numpy(), [5.0, 5.0])    # torch: 2 * 2 + 1


def test_noise_arguments_with_equal_values_stay_apart():
    """Random numbers reach a trace as arguments (random ops are refused): two noise tensors
    equal at the trace are different slots, so ``x + n1`` and ``x + n2`` are not merged and
    a replay with new noise gives torch's value."""
    torch = pytest.importorskip("torch")

    @tj.compile
    def noisy(x, n1, n2):
        loss = ((x + n1) * (x + n2)).sum()
        loss.backward()
        return loss

    x = tj.tensor([0.5, -1.0], requires_grad=True)
    same = np.array([0.25, 0.25])
    noisy(x, tj.tensor(same), tj.tensor(same))
    n1, n2 = np.array([0.1, -0.2]), np.array([1.5, 0.3])
    x.grad = None
    loss = noisy(x, tj.tensor(n1), tj.tensor(n2))
    assert _names(noisy)["add"] == 2
    xt = torch.tensor([0.5, -1.0], requires_grad=True)
    want = ((xt + torch.tensor(n1)) * (xt + torch.tensor(n2))).sum()
    want.backward()
    np.testing.assert_allclose(loss.item(), want.item(), rtol=1e-15)
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-15)


# ---- copies read in place (optimize.alias_copies) --------------------------------------------

def _step_replays(fn, inputs, aliasing, monkeypatch):
    """``_replay_step`` on tier 1 with copies aliased or kept.  Returns the replay's value, the
    leaves' gradients, the records replayed, the frozen trace and ``u``."""
    monkeypatch.setattr(optimize, "aliasing", aliasing)
    compiled, value, grads, u = _replay_step(fn, inputs, tier2=False)
    (entry,) = compiled.traces.values()
    assert entry.frozen.last_tier == 1
    return value, grads, compiled.stats()["records"][0], entry.frozen, u


def _rows_and_scalars(tl, x):
    # unbind (iteration) and select; a chain (a reshape of a slice); a slice whose elements
    # another record reads whole (kept, and an aliased slice inside it); a select no gradient
    # reaches; a result read twice
    a, b, c = x[1:4].reshape(3)
    head = x[0:3]
    inner = head[1:3]
    d = x.detach()[5]
    return tl.stack([a * b + c, head.sum() * inner[0], (a + d) * inner[1], a.exp()])


def _written_in_place(tl, x):
    # y[0] read, then y changed in place (torch: the view y[0] changes with it), then read again
    y = x * 1.5
    first = y[0]
    early = first * 2.0
    y.add_(1.0)
    late = first * 3.0
    z = y[1]
    z.mul_(2.0)          # an in-place change of a view: y changes too
    return tl.stack([early, late, y[1], y.sum()])


@pytest.mark.parametrize("fn", [_rows_and_scalars, _written_in_place], ids=["rows_and_scalars", "written_in_place"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_aliased_copies_keep_values_and_gradients(fn, dtype, monkeypatch):
    """Copies read in place give the values and gradients of the replay that keeps them, bit
    for bit, and torch's; fewer records replay."""
    x = np.array([0.5, -1.25, 2.0, 0.75, -0.5, 1.5, 0.25], dtype)
    value, grads, records, trace, u = _step_replays(fn, [x], True, monkeypatch)
    kept_value, kept_grads, kept_records, _, _ = _step_replays(fn, [x], False, monkeypatch)
    assert records < kept_records == trace.tape.nrec
    assert value.dtype == dtype and grads[0].dtype == dtype
    np.testing.assert_array_equal(value, kept_value)
    np.testing.assert_array_equal(grads[0], kept_grads[0])
    torch_value, torch_grads = _torch_result(fn, [x], u)
    tol = 1e-13 if dtype == np.float64 else 1e-6
    np.testing.assert_allclose(value, torch_value, rtol=tol, atol=0)
    np.testing.assert_allclose(grads[0], torch_grads[0], rtol=tol, atol=tol)


def test_a_copy_that_is_a_result_keeps_its_record(monkeypatch):
    """A copy returned by the function (its slot is read after the replay) is not aliased;
    the others are.  Gradients are torch's."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(optimize, "aliasing", True)

    def step(x):
        _, first, second, third = x
        loss = first * second + third.exp()
        loss.backward()
        return second, loss

    compiled = tj.compile(step, tier2=False)
    x = np.array([4.0, 0.5, -1.25, 2.0])
    for _ in range(2):
        leaf = tj.tensor(x, requires_grad=True)
        second, loss = compiled(leaf)
    (entry,) = compiled.traces.values()
    assert compiled.stats()["records"][0] == entry.frozen.tape.nrec - 2   # first's and third's copies
    xt = torch.tensor(x, requires_grad=True)
    want = xt[1] * xt[2] + xt[3].exp()
    want.backward()
    assert second.item() == -1.25
    np.testing.assert_allclose(loss.item(), want.item(), rtol=1e-15)
    np.testing.assert_allclose(leaf.grad.numpy(), xt.grad.numpy(), rtol=1e-15)


def _scalar_ops(tl, x):
    # every op of codegen.FAST_OPS on one-element records (a * a: one slot read twice; a
    # detached operand; x * c: a broadcast, run by the op's sweep), and a vector record
    a, b, c = x
    d = (a * b) / (a - b.detach()) + (c + 2.0) * 3.0
    e = tl.nn.functional.softplus(d * a) + (b * c).exp() + a * a
    return tl.stack([d, e, (x * c).sum()]) + x * 0.5


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_inline_replay_of_scalars_equals_the_sweeps(dtype, monkeypatch):
    """A replay running one-element records of the common elementwise ops inline
    (``replay_inline``, for long traces of scalars) gives the bits of the replay calling each
    op's sweep, and torch's values and gradients."""
    from tapejit.replay import frozen
    x = np.array([0.75, -1.5, 0.25], dtype)
    results = []
    for inline_min in (0, 10 ** 9):
        monkeypatch.setattr(frozen, "INLINE_MIN", inline_min)
        value, grads, _, trace, u = _step_replays(_scalar_ops, [x], True, monkeypatch)
        assert (trace.replay_sweep is trace.sweeps.replay_inline) == (inline_min == 0)
        results.append((value, grads[0]))
    (value, grad), (want_value, want_grad) = results
    assert value.dtype == grad.dtype == dtype
    np.testing.assert_array_equal(value, want_value)
    np.testing.assert_array_equal(grad, want_grad)
    torch_value, torch_grads = _torch_result(_scalar_ops, [x], u)
    tol = 1e-14 if dtype == np.float64 else 1e-6
    np.testing.assert_allclose(value, torch_value, rtol=tol, atol=0)
    np.testing.assert_allclose(grad, torch_grads[0], rtol=tol, atol=0)
