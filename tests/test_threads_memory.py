"""Concurrency (one tape per thread) and memory (no growth over many steps).

SPEC: one tape per thread; grad mode is per thread as in PyTorch; a tape is released
when its graph is no longer reachable or after backward() without retain_graph; no
memory growth over many training steps.
"""
import gc
import threading
import tracemalloc

import numpy as np
import pytest

import tapejit as tj

N_THREADS = 4


def _run_threads(target, n=N_THREADS):
    barrier = threading.Barrier(n)
    errors = []
    results = [None] * n

    def wrapped(k):
        try:
            barrier.wait()
            results[k] = target(k)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append((k, e))

    threads = [threading.Thread(target=wrapped, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
        assert not t.is_alive(), "thread hung"
    if errors:
        k, e = errors[0]
        raise AssertionError(f"thread {k} failed: {type(e).__name__}: {e}") from e
    return results


# ---- threads ----------------------------------------------------------------------------

def _mlp_reference(x, w1, b1, w2, y):
    """Loss and gradients of mean((tanh(x@w1+b1)@w2 - y)**2) by hand, in float64."""
    h_pre = x @ w1 + b1
    h = np.tanh(h_pre)
    out = h @ w2
    r = out - y
    loss = np.mean(r ** 2)
    d_out = 2 * r / r.size
    d_w2 = h.T @ d_out
    d_h = d_out @ w2.T
    d_pre = d_h * (1 - h ** 2)
    return loss, x.T @ d_pre, d_pre.sum(0), d_w2


def test_threads_record_and_backpropagate_their_own_graphs():
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((16, 5))
    y_np = rng.standard_normal((16, 1))
    x = tj.tensor(x_np)            # shared, read-only (float64)
    y = tj.tensor(y_np)
    iters = 60

    def work(k):
        r = np.random.default_rng(100 + k)
        w1_np = r.standard_normal((5, 8)) * 0.5
        b1_np = r.standard_normal(8) * 0.1
        w2_np = r.standard_normal((8, 1)) * 0.5
        w1 = tj.tensor(w1_np, requires_grad=True)
        b1 = tj.tensor(b1_np, requires_grad=True)
        w2 = tj.tensor(w2_np, requires_grad=True)
        for it in range(iters):
            loss = ((tj.tanh(x @ w1 + b1) @ w2 - y) ** 2).mean()
            loss.backward()
            if it == 0:
                first = (loss.item(), np.array(w1.grad), np.array(b1.grad), np.array(w2.grad))
        ref = _mlp_reference(x_np, w1_np, b1_np, w2_np, y_np)
        assert abs(first[0] - ref[0]) < 1e-12
        for got, want in zip(first[1:], ref[1:]):
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
        # accumulated over all iterations into this thread's own leaves
        np.testing.assert_allclose(np.asarray(w1.grad), iters * ref[1], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(np.asarray(b1.grad), iters * ref[2], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(np.asarray(w2.grad), iters * ref[3], rtol=1e-9, atol=1e-12)
        return True

    assert all(_run_threads(work))


def test_threads_scalar_graphs_float32():
    iters = 200

    def work(k):
        a = tj.tensor(float(k + 1), requires_grad=True)
        b = tj.tensor(0.5, requires_grad=True)
        for _ in range(iters):
            z = a * b + a.sin() * b.exp() - (a / (b + 1.0))
            z.backward()
        av, bv = float(k + 1), 0.5
        da = bv + np.cos(av) * np.exp(bv) - 1 / (bv + 1)
        db = av + np.sin(av) * np.exp(bv) + av / (bv + 1) ** 2
        np.testing.assert_allclose(a.grad.item(), iters * da, rtol=1e-4)
        np.testing.assert_allclose(b.grad.item(), iters * db, rtol=1e-4)
        return True

    assert all(_run_threads(work))


def test_threads_sgd_training_independently():
    rng = np.random.default_rng(3)
    xs_np = rng.standard_normal((64, 3)).astype(np.float32)
    xs = tj.tensor(xs_np)

    def work(k):
        true_w = np.array([k + 1.0, -1.0, 0.5 * k], np.float32)
        ys = tj.tensor(xs_np @ true_w)
        w = tj.zeros(3, requires_grad=True)
        for _ in range(150):
            loss = ((xs @ w - ys) ** 2).mean()
            loss.backward()
            with tj.no_grad():
                w -= 0.1 * w.grad
            w.grad = None
        np.testing.assert_allclose(np.asarray(w.detach()), true_w, atol=1e-3)
        return True

    assert all(_run_threads(work))


def test_threads_accumulate_into_a_shared_leaf():
    # torch's AccumulateGrad is thread-safe: concurrent backward passes into one leaf add up.
    w = tj.tensor([1.0, 2.0, 3.0], dtype=tj.float64, requires_grad=True)
    iters = 100

    def work(k):
        for _ in range(iters):
            (w * w * (k + 1)).sum().backward()
        return True

    _run_threads(work)
    total = sum(k + 1 for k in range(N_THREADS)) * iters
    np.testing.assert_allclose(np.asarray(w.grad), total * 2 * np.array([1.0, 2.0, 3.0]))


def test_grad_mode_is_per_thread():
    x = tj.tensor([1.0], requires_grad=True)
    inside = threading.Event()
    done = threading.Event()
    seen = {}

    def other():
        inside.wait(10)
        seen["enabled"] = tj.is_grad_enabled()
        seen["rg"] = (x * 2).requires_grad
        done.set()

    t = threading.Thread(target=other)
    t.start()
    with tj.no_grad():
        inside.set()
        done.wait(10)
        assert not (x * 2).requires_grad
    t.join(10)
    assert seen == {"enabled": True, "rg": True}


def test_tensor_from_another_thread_graph_is_not_corrupted():
    # Each thread's graph lives on its own tape; reading values from the main thread after
    # the workers finish gives the right numbers.
    outs = {}

    def work(k):
        x = tj.tensor(np.arange(4.0) + k, requires_grad=True)
        y = (x * x).sum()
        outs[k] = (x, y)
        return True

    _run_threads(work)
    for k, (x, y) in outs.items():
        assert y.item() == float(np.sum((np.arange(4.0) + k) ** 2))


# ---- memory -------------------------------------------------------------------------------

def _mlp_step(params, x, y, lr=0.01):
    w1, b1, w2, b2 = params
    h = tj.relu(x @ w1 + b1)
    out = tj.tanh(h @ w2 + b2)
    loss = ((out - y) ** 2).mean()
    loss.backward()
    with tj.no_grad():
        for p in params:
            p -= lr * p.grad
            p.grad = None
    return loss


def _mlp_params(rng):
    return [tj.tensor(rng.standard_normal((8, 16)).astype(np.float32) * 0.3, requires_grad=True),
            tj.zeros(16, requires_grad=True),
            tj.tensor(rng.standard_normal((16, 1)).astype(np.float32) * 0.3, requires_grad=True),
            tj.zeros(1, requires_grad=True)]


def _traced_growth(step, warmup, iters):
    """Bytes of Python-visible allocations (incl. NumPy buffers) still live after ``iters``
    more calls of ``step`` than after ``warmup`` calls."""
    for _ in range(warmup):
        step()
    gc.collect()
    tracemalloc.start()
    try:
        gc.collect()
        before, _ = tracemalloc.get_traced_memory()
        for _ in range(iters):
            step()
        gc.collect()
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return after - before


def _rss_bytes():
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096
    except OSError:
        pytest.skip("no /proc/self/statm")


@pytest.mark.slow
def test_mlp_training_steps_do_not_grow_memory():
    rng = np.random.default_rng(0)
    params = _mlp_params(rng)
    x = tj.tensor(rng.standard_normal((32, 8)).astype(np.float32))
    y = tj.tensor(rng.standard_normal((32, 1)).astype(np.float32))
    growth = _traced_growth(lambda: _mlp_step(params, x, y), warmup=300, iters=3000)
    assert growth < 256 * 1024, f"memory grew by {growth} bytes over 3000 steps"


@pytest.mark.slow
def test_mlp_training_steps_rss_stable():
    rng = np.random.default_rng(1)
    params = _mlp_params(rng)
    x = tj.tensor(rng.standard_normal((32, 8)).astype(np.float32))
    y = tj.tensor(rng.standard_normal((32, 1)).astype(np.float32))
    for _ in range(300):
        _mlp_step(params, x, y)
    gc.collect()
    before = _rss_bytes()
    for _ in range(3000):
        _mlp_step(params, x, y)
    gc.collect()
    growth = _rss_bytes() - before
    assert growth < 16 * 2 ** 20, f"RSS grew by {growth / 2 ** 20:.1f} MiB over 3000 steps"


@pytest.mark.slow
def test_scalar_graph_iterations_do_not_grow_memory():
    def step():
        xs = [tj.tensor(i / 10, dtype=tj.float64, requires_grad=True) for i in range(10)]
        nodes = list(xs)
        for k in range(40):
            a, b = nodes[-3], nodes[-7]
            nodes.append(tj.nn.functional.softplus(a * b) + b.sin() if k % 2 else (a - b) ** 2 / (1 + a * a))
        nodes[-1].backward()
        return xs[0].grad

    growth = _traced_growth(step, warmup=100, iters=600)
    assert growth < 256 * 1024, f"memory grew by {growth} bytes over 600 scalar graphs"


@pytest.mark.slow
def test_forward_only_graphs_are_released():
    # Graphs that are never backpropagated (e.g. evaluating a loss) must not pile up.
    rng = np.random.default_rng(2)
    params = _mlp_params(rng)
    x = tj.tensor(rng.standard_normal((32, 8)).astype(np.float32))

    def step():
        w1, b1, w2, b2 = params
        return float((tj.relu(x @ w1 + b1) @ w2 + b2).sum())

    growth = _traced_growth(step, warmup=200, iters=1500)
    assert growth < 256 * 1024, f"memory grew by {growth} bytes over 1500 forward-only graphs"


@pytest.mark.slow
def test_retained_graphs_are_released_when_unreachable():
    w = tj.tensor(np.ones(50), requires_grad=True)

    def step():
        y = (w.exp() * w).sum()
        y.backward(retain_graph=True)
        y.backward(retain_graph=True)
        w.grad = None

    growth = _traced_growth(step, warmup=100, iters=800)
    assert growth < 256 * 1024, f"memory grew by {growth} bytes over 800 retained graphs"


@pytest.mark.slow
def test_no_grad_iterations_do_not_grow_memory():
    w = tj.tensor(np.ones((16, 16)), requires_grad=True)
    v = tj.tensor(np.ones(16))

    def step():
        with tj.no_grad():
            return float((tj.tanh(w @ v) * 2).sum())

    growth = _traced_growth(step, warmup=200, iters=1500)
    assert growth < 256 * 1024, f"memory grew by {growth} bytes over 1500 no_grad evaluations"


@pytest.mark.slow
def test_threads_do_not_leak_tapes():
    # Threads that record and exit must not leave their tapes behind.
    w = tj.tensor(np.ones(100), requires_grad=True)

    def one_round():
        def work(k):
            for _ in range(20):
                (w * w * (k + 1)).sum().backward()
            return True
        _run_threads(work)

    growth = _traced_growth(one_round, warmup=3, iters=25)
    assert growth < 512 * 1024, f"memory grew by {growth} bytes over 25 rounds of {N_THREADS} threads"
