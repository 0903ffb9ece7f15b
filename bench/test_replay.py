"""``tj.compile``: workloads A, B and C replayed, side by side with the peers and the limits.

``tj.compile(fn)`` traces ``fn`` on its first call and then replays the recorded tape
(forward, seed and backward in one compiled Numba call) on later calls with the same
signature.  In these groups the row ``tapejit`` is the replay: its trace is made before
timing, and every timed call must replay (the test checks that the compiled function
still holds exactly one trace afterwards).  ``tapejit_eager`` is tapejit's eager API,
``interpreter`` the hand-written tape interpreter of ``interpreter.py`` run on the
replay's own arrays, ``tapejit_recorded`` the replay of the trace as recorded (without the
frozen-tape optimisation of ``tapejit/replay/optimize.py``), ``c_interpreter`` the C switch interpreter of ``c_interpreter.py`` over
one record per source-level op of workload A (skipped without a C compiler).  The other peers run as in ``test_core.py``/``test_mlp.py``.

Every row is checked before it is timed, and its timed result again after:

* A: at ``A_CHECK_OPS`` the replayed gradient equals the pure-Python reference; at the
  timed size the replay's value and gradient equal eager tapejit's, and the interpreter's
  value, gradient, every intermediate value and every record's adjoint equal the
  replay's.  The C interpreter's value and gradient equal the replay's at ``A_CHECK_OPS``
  and at the timed size.
* B: one replayed step from the shared initial parameters equals the hand-written NumPy
  step (loss and SGD update), and training lowers the loss.
* C: value and gradient equal ``math.fsum`` and ``scipy.optimize.rosen_der``; the batch
  equals single replays row by row, and ``rosen_der``.  The tanh-heavy trace's replays on
  both tiers equal eager ``tj.value_and_grad``.
"""
import os
import time

import numba
import numpy as np
import peers_functional as P
import pytest
import targets as T
import workloads as W
from interpreter import Interpreter, op_names

A_REPLAY_SIZES = (1_000, 10_000)
A_REPLAY_PEERS = ("tapejit", "tapejit_recorded", "interpreter", "c_interpreter", "torch", "jax")
#: JAX compiles a 10,000-op scalar graph in about 4 minutes (as in test_core.py)
JAX_A_10K = os.environ.get("TAPEJIT_BENCH_JAX_10K") == "1"
JAX_A_10K_REASON = ("JAX compiles the 10,000-op scalar graph in minutes; "
                    "set TAPEJIT_BENCH_JAX_10K=1 to include it")
FIRST_CALL_OPS = 10_000
FIRST_CALL_ROUNDS = 5

B_REPLAY_PEERS = ("tapejit", "tapejit_eager", "torch", "jax", "numpy")
B_SPECS = {"tiny": (W.TINY_MLP, T.GROUP_B_TINY_REPLAY), "mnist": (W.MNIST_MLP, T.GROUP_B_MNIST_REPLAY)}

C_REPLAY_SIZES = (10, 1_000_000)
#: ``tapejit`` is tier 1 (the registry's sweeps), ``tapejit_tier2`` the trace's own fused
#: function (compiled before timing), ``numba_fused`` a hand-written fused Numba loop
C_REPLAY_PEERS = ("tapejit", "tapejit_tier2", "tapejit_eager", "jax", "numpy", "numba_fused")
C_BIG = 100_000          # from this size on: pedantic, C_BIG_ROUNDS rounds
C_BIG_ROUNDS = 15

BATCH_N = 10
BATCH_ROWS = 20_000
#: rows of the batch compared with single replays (first, last and a spread between)
BATCH_CHECK_ROWS = tuple(range(0, BATCH_ROWS, 397)) + (BATCH_ROWS - 1,)

#: row (the ``peer`` parameter) -> the peer library it needs
ROW_LIBRARY = {"tapejit": "tapejit", "tapejit_eager": "tapejit", "interpreter": "tapejit",
               "c_interpreter": "tapejit", "tapejit_recorded": "tapejit",
               "tapejit_tier2": "tapejit", "tapejit_tier1": "tapejit", "tapejit_per_row": "tapejit",
               "torch": "torch", "jax": "jax", "numpy": "numpy", "numba_rows": "numpy", "numba_fused": "numpy"}


def load_row(row):
    """The ``workloads.Lib`` behind row ``row``; skips with the reason if it is missing."""
    name = ROW_LIBRARY[row]
    module, hint = W.PEERS[name]
    pytest.importorskip(module, reason=f"peer {name!r} is not installed ({hint})")
    return W.library(name)


def only_trace(compiled):
    """The compiled function's one trace (a second one would mean a call retraced)."""
    stats = compiled.stats()
    assert stats["traces"] == 1, f"expected one trace, found {stats}"
    return next(iter(compiled.traces.values()))


def _per_record(benchmark, records):
    benchmark.extra_info["records"] = records
    stats = getattr(benchmark, "stats", None)
    if stats is not None:
        benchmark.extra_info["ns_per_record"] = round(stats.stats.median * 1e9 / records, 2)


# ---------------------------------------------------------------------------------------
# A: the scalar graph as tj.compile(tj.value_and_grad(f)) of a 100-vector

def compile_scalar_graph(n_ops):
    """``(compiled, x)``: workload A at ``n_ops`` compiled and traced (first call) on the
    inputs ``x_i = i/100``; later calls replay."""
    import tapejit as tj
    import tapejit.nn.functional as F
    x = P.scalar_inputs_array()
    compiled = tj.compile(tj.value_and_grad(W.scalar_graph_fn(tj, F, n_ops)))
    compiled(x)
    return compiled, x


def eager_scalar_graph(n_ops):
    """Eager tapejit's value and input gradients (0 where unreached) of workload A."""
    lib = W.library("tapejit")
    inputs, out = W.scalar_graph(lib, n_ops)
    value = float(out.item())
    out.backward()
    return value, np.nan_to_num(W.input_grads(inputs), nan=0.0)


def assert_same_result(got, want, what, rtol=1e-12):
    """``(value, grads)`` pairs equal: value to ``rtol``, gradient entries to ``rtol``."""
    np.testing.assert_allclose(got[0], want[0], rtol=rtol, atol=0, err_msg=f"{what}: value")
    np.testing.assert_allclose(got[1], want[1], rtol=rtol, atol=0, err_msg=f"{what}: gradient")


def check_replay(n_ops):
    """The replay of workload A: at ``A_CHECK_OPS`` its gradient equals the Python
    reference (0 for unreached inputs, as tj.value_and_grad gives); at ``n_ops`` its value
    and gradient equal eager tapejit's (the gradient has underflowed to 0 there).
    Returns ``(compiled, x, replayed result)`` at ``n_ops``."""
    compiled, x = compile_scalar_graph(W.A_CHECK_OPS)
    value, grads = compiled(x)
    only_trace(compiled)
    W.assert_grads_close(grads, np.nan_to_num(W.scalar_graph_reference(W.A_CHECK_OPS), nan=0.0),
                         f"tj.compile replay vs Python reference, workload A at {W.A_CHECK_OPS} ops")
    assert_same_result((value, grads), eager_scalar_graph(W.A_CHECK_OPS),
                       f"replay vs eager tapejit at {W.A_CHECK_OPS} ops", rtol=1e-9)
    compiled, x = compile_scalar_graph(n_ops)
    result = compiled(x)
    only_trace(compiled)
    assert np.isfinite(result[0]) and np.isfinite(result[1]).all()
    assert_same_result(result, eager_scalar_graph(n_ops), f"replay vs eager tapejit at {n_ops:,} ops")
    return compiled, x, result


def check_interpreter(compiled, x, n_ops):
    """The interpreter on the replay's own arrays computes what the replay computed: the
    value, the input gradient, every value slot and the adjoint of every record's
    output.  Returns the interpreter."""
    entry = only_trace(compiled)
    tape = entry.frozen.tape
    want = compiled(x)
    values, adjoints = tape.vals[0].copy(), tape.adj[0].copy()
    interpreter = Interpreter(entry)
    got = interpreter.run(x)
    what = f"interpreter vs replay, workload A at {n_ops:,} ops ({op_names(entry.frozen.replay_rec)})"
    assert_same_result(got, want, what)
    np.testing.assert_allclose(tape.vals[0], values, rtol=1e-12, atol=0, err_msg=f"{what}: values")
    outs = entry.frozen.replay_rec[:, 1]
    np.testing.assert_allclose(tape.adj[0][outs], adjoints[outs], rtol=1e-12, atol=0,
                               err_msg=f"{what}: adjoints")
    assert np.count_nonzero(adjoints[outs]) > 1, f"{what}: only the root has an adjoint"
    return interpreter


def check_c_interpreter(compiled, x, n_ops):
    """The C interpreter at ``n_ops`` computes the replay's value and input gradient.
    Returns it; skips without a C compiler."""
    from c_interpreter import CInterpreter, Unavailable
    try:
        interpreter = CInterpreter(n_ops)
    except Unavailable as e:
        pytest.skip(f"c_interpreter: {e}")
    assert_same_result(interpreter.run(x), compiled(x),
                       f"C interpreter vs replay, workload A at {n_ops:,} ops ({len(interpreter.records)} records)")
    return interpreter


@pytest.mark.parametrize("n_ops", A_REPLAY_SIZES)
@pytest.mark.parametrize("peer", A_REPLAY_PEERS)
def test_scalar_graph_replay(peer, benchmark, n_ops, monkeypatch):
    """``x -> (value, input gradients)`` of workload A.  tapejit replays its trace;
    the interpreter runs the same frozen arrays, the C interpreter one record per
    source-level op; torch records and sweeps every call;
    JAX runs its compiled ``value_and_grad``."""
    lib = load_row(peer)
    benchmark.group = T.GROUP_A_REPLAY.format(n=n_ops)
    benchmark.extra_info["n_ops"] = n_ops
    if peer in ("torch", "jax"):
        if peer == "jax" and n_ops > 1_000 and not JAX_A_10K:
            pytest.skip(JAX_A_10K_REASON)
        W.check_scalar_graph(lib)
        step, grads_of = W.scalar_graph_timed(lib, n_ops)
        grads = grads_of(benchmark(step))
        assert grads.shape == (W.N_INPUTS,) and np.isfinite(grads[~np.isnan(grads)]).all()
        return
    if peer == "tapejit_recorded":   # the trace replayed as recorded: no frozen-tape optimisation
        from tapejit.replay import optimize
        monkeypatch.setattr(optimize, "enabled", False)
    compiled, x, want = check_replay(n_ops)
    records = compiled.stats()["records"][0]
    if peer == "interpreter":
        check_interpreter(*compile_scalar_graph(W.A_CHECK_OPS), W.A_CHECK_OPS)
        run = check_interpreter(compiled, x, n_ops).run
    elif peer == "c_interpreter":
        check_c_interpreter(*compile_scalar_graph(W.A_CHECK_OPS), W.A_CHECK_OPS)
        c_interpreter = check_c_interpreter(compiled, x, n_ops)
        run, records = c_interpreter.run, len(c_interpreter.records)
    else:
        run = compiled
    got = benchmark(run, x)
    assert_same_result(got, want, f"{peer} (timed call), workload A at {n_ops:,} ops")
    only_trace(compiled)
    _per_record(benchmark, records)


@pytest.mark.parametrize("peer", ("tapejit",))
def test_scalar_graph_first_call(peer, benchmark):
    """The first call of a fresh ``tj.compile(tj.value_and_grad(f))``: the eager trace of
    10,000 ops, then freezing it.  Each round compiles anew (untimed setup); one warm-up
    round first, so the sweeps are loaded (a warm Numba cache)."""
    import tapejit as tj
    import tapejit.nn.functional as F
    _, x, want = check_replay(FIRST_CALL_OPS)
    benchmark.group = T.GROUP_A_FIRST_CALL
    benchmark.extra_info["n_ops"] = FIRST_CALL_OPS
    last = []

    def setup():
        compiled = tj.compile(tj.value_and_grad(W.scalar_graph_fn(tj, F, FIRST_CALL_OPS)))
        last[:] = [compiled]
        return (compiled, x), {}

    def first_call(compiled, x):
        return compiled(x)

    got = benchmark.pedantic(first_call, setup=setup, rounds=FIRST_CALL_ROUNDS, warmup_rounds=1,
                             iterations=1)
    assert_same_result(got, want, "first call (trace) vs replay, workload A at 10,000 ops")
    only_trace(last[0])
    stats = last[0].stats()
    benchmark.extra_info["records_traced"] = stats["records_traced"][0]
    benchmark.extra_info["records"] = stats["records"][0]


# ---------------------------------------------------------------------------------------
# B: the training step replayed

def mlp_row_trainer(row, lib, spec):
    """The trainer of row ``row``: the replayed step for ``tapejit`` (traced on creation),
    the existing ones otherwise."""
    if row == "tapejit":
        return W.ReplayMLP(lib, spec, W.mlp_init(spec), *W.mlp_batch(spec))
    return W.mlp_trainer(lib, spec)


@pytest.mark.parametrize("model", tuple(B_SPECS))
@pytest.mark.parametrize("peer", B_REPLAY_PEERS)
def test_mlp_step_replayed(peer, benchmark, model):
    """One training step.  tapejit: ``step(x, y)`` compiled (zero_grad, forward, loss,
    backward), then ``optimizer.step()``; the others as in ``test_mlp.py``."""
    spec, group = B_SPECS[model]
    lib = load_row(peer)
    if lib.name in W.AUTOGRAD_PEERS:
        reason = W.missing_module_api(lib)
        if reason:
            pytest.skip(reason)
    what = f"{peer} {model} MLP step"
    trainer = mlp_row_trainer(peer, lib, spec)
    W.assert_mlp_step_ok(trainer, spec, what + (" (one replayed step)" if peer == "tapejit" else ""))
    if peer == "tapejit":
        assert trainer.traces == 1, f"{what}: the checked step traced again"
    trainer = mlp_row_trainer(peer, lib, spec)
    benchmark.group = group
    benchmark.extra_info["model"] = model
    benchmark(trainer.step)
    W.assert_mlp_trained(trainer, spec, what)
    if peer == "tapejit":
        assert trainer.traces == 1, f"{what}: a timed step traced again"
        benchmark.extra_info["records"] = trainer.compiled.stats()["records"][0]


# ---------------------------------------------------------------------------------------
# C: Rosenbrock value and gradient replayed, and batched over many points

@numba.njit(cache=True, nogil=True, error_model="numpy")
def rosen_value_and_grad_numba(x):
    """The hand-written fused Rosenbrock gradient: value and gradient in one pass over x."""
    n = x.shape[0]
    g = np.zeros(n)
    f = 0.0
    for i in range(n - 1):
        a = x[i]
        t1 = x[i + 1] - a * a
        t2 = 1.0 - a
        f += 100.0 * t1 * t1 + t2 * t2
        g[i] += -400.0 * t1 * a - 2.0 * t2
        g[i + 1] += 200.0 * t1
    return f, g


def rosen_row(row, lib, x):
    """``(value_and_grad, arg)`` of row ``row`` at ``x``; ``value_and_grad(arg)`` returns
    ``(value, gradient)``."""
    if row in ("tapejit", "tapejit_tier2"):
        compiled = lib.tl.compile(lib.tl.value_and_grad(W.rosen), tier2="sync" if row == "tapejit_tier2" else False)
        compiled(x)                          # the trace (and tier 2's compile or cache load)
        return compiled, x
    if row == "tapejit_eager":
        return lib.tl.value_and_grad(W.rosen), x
    if row == "numpy":
        return W.rosen_value_and_grad_numpy, x
    if row == "numba_fused":
        return rosen_value_and_grad_numba, x
    return P.rosen_value_and_grad_fn(row, x)


def check_rosen(out, x, what):
    value, grad = out
    W.assert_rosen_grad_ok(np.asarray(grad), x, what)
    np.testing.assert_allclose(float(value), W.rosen_value(x), rtol=1e-12, err_msg=f"{what}: value")


@pytest.mark.parametrize("n", C_REPLAY_SIZES)
@pytest.mark.parametrize("peer", C_REPLAY_PEERS)
def test_rosenbrock_replay(peer, benchmark, n):
    """``x -> (value, gradient)``: ``tj.compile(tj.value_and_grad(rosen))`` replayed,
    eager ``tj.value_and_grad``, ``jax.jit(jax.value_and_grad)``, and both by hand."""
    lib = load_row(peer)
    x = W.rosen_point(n)
    fn, arg = rosen_row(peer, lib, x)
    check_rosen(fn(arg), x, f"{peer} Rosenbrock value and gradient, n={n:,}")
    benchmark.group = T.GROUP_C_REPLAY.format(n=n)
    benchmark.extra_info["n"] = n
    if n >= C_BIG:
        out = benchmark.pedantic(fn, args=(arg,), rounds=C_BIG_ROUNDS, warmup_rounds=1, iterations=1)
    else:
        out = benchmark(fn, arg)
    check_rosen(out, x, f"{peer} Rosenbrock value and gradient (timed call), n={n:,}")
    if peer in ("tapejit", "tapejit_tier2"):
        only_trace(fn)
        benchmark.extra_info["records"] = fn.stats()["records"][0]
        assert fn.stats()["tier"] == [2 if peer == "tapejit_tier2" else 1], fn.stats()


#: the background-compile group: elements, and calls timed after the trace
BACKGROUND_N = 1_000_000
BACKGROUND_CALLS = 100
BACKGROUND_ROUNDS = 3


def _fresh_tier2(tj, n):
    """Remove tier 2's cached function for the Rosenbrock trace at size ``n``, so that a
    new trace compiles it (in the background) instead of loading it."""
    import glob
    from tapejit import _numba_load
    from tapejit.replay import fused, tier2
    probe = tj.compile(tj.value_and_grad(W.rosen), tier2=False)
    probe(W.rosen_point(n))
    _, source = fused.generate(next(iter(probe.traces.values())).frozen)
    key = fused.key(source)
    folder = os.path.join(_numba_load.cache_dir(), "tier2")
    for path in glob.glob(os.path.join(folder, f"t2_{key}*")) + glob.glob(os.path.join(folder, "__pycache__",
                                                                                        f"t2_{key}*")):
        os.unlink(path)
    tier2._jobs.pop(key, None)


@pytest.mark.parametrize("peer", ("tapejit", "tapejit_tier1"))
def test_background_compile_first_calls(peer, benchmark):
    """The first 100 replays after the trace, while tier 2 compiles in another process
    (``tapejit``, the default), against the same calls with tier 2 off (``tapejit_tier1``).
    Each round traces at a new size, so tier 2 compiles again; ``extra_info`` has the
    slowest call and the calls that ran tier 2."""
    lib = load_row(peer)
    tj = lib.tl
    sizes = iter(range(BACKGROUND_N, BACKGROUND_N + 10 * BACKGROUND_ROUNDS))
    slowest, on_tier2 = [], []

    def setup():
        n = next(sizes)
        if peer == "tapejit":
            _fresh_tier2(tj, n)
        compiled = tj.compile(tj.value_and_grad(W.rosen), tier2=peer == "tapejit")
        x = W.rosen_point(n)
        compiled(x)                          # the trace: tier 2's compile starts
        return (compiled, x), {}

    def first_calls(compiled, x):
        times = []
        tiers = 0
        for _ in range(BACKGROUND_CALLS):
            start = time.perf_counter()
            compiled(x)
            times.append(time.perf_counter() - start)
            tiers += compiled.stats()["tier"] == [2]
        slowest.append(max(times))
        on_tier2.append(tiers)
        return compiled(x), x

    benchmark.group = T.GROUP_C_BACKGROUND.format(n=BACKGROUND_N, calls=BACKGROUND_CALLS)
    out, x = benchmark.pedantic(first_calls, setup=setup, rounds=BACKGROUND_ROUNDS, iterations=1)
    check_rosen(out, x, f"{peer}: Rosenbrock value and gradient after the first calls")
    benchmark.extra_info["slowest_call_s"] = max(slowest)
    benchmark.extra_info["calls_on_tier2"] = on_tier2


#: the tanh-heavy trace's elements
TANH_N = 100_000


def tanh_heavy(x):
    """Transcendentals in a loop whose values later loops read through slices: tier 2 runs
    its backward in a loop of its own (fused.py's ``remembered`` values)."""
    y = np.tanh(0.5 * x + 0.1) / (1.0 + np.exp(-x))
    return np.sum((y[1:] - y[:-1]) ** 2) + np.sum(np.exp(-x * x)) + np.sum(y)


@pytest.mark.parametrize("peer", ("tapejit", "tapejit_tier2"))
def test_tanh_heavy_replay(peer, benchmark):
    """Tier 1 against tier 2 (compiled before timing) on a trace of several loops whose
    first one gets gradients from the later ones, one thread: tier 2 no slower."""
    tj = load_row(peer).tl
    x = np.linspace(-2.0, 2.0, TANH_N)
    want_value, want_grad = tj.value_and_grad(tanh_heavy)(x)       # eager
    fn = tj.compile(tj.value_and_grad(tanh_heavy), tier2="sync" if peer == "tapejit_tier2" else False)
    fn(x)
    before = tj.get_num_threads()
    tj.set_num_threads(1)
    try:
        benchmark.group = T.GROUP_C_TANH.format(n=TANH_N)
        value, grad = benchmark.pedantic(fn, args=(x,), rounds=C_BIG_ROUNDS, warmup_rounds=1, iterations=1)
    finally:
        tj.set_num_threads(before)
    np.testing.assert_allclose(float(value), float(want_value), rtol=1e-12)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-12, atol=1e-12 * np.abs(want_grad).max())
    only_trace(fn)
    assert fn.stats()["tier"] == [2 if peer == "tapejit_tier2" else 1], fn.stats()


@numba.njit(parallel=True, cache=True)
def _thread_ids(n):
    ids = np.empty(n, np.int64)
    for i in numba.prange(n):
        ids[i] = numba.get_thread_id()
    return ids


def check_threads_used(threads):
    """A ``prange`` loop now runs on exactly ``threads`` of Numba's threads."""
    assert numba.get_num_threads() == threads
    for _ in range(5):    # a thread may miss a short loop on a busy machine: try again
        seen = set(_thread_ids(1_000 * threads).tolist())
        assert seen <= set(range(threads)), seen
        if len(seen) == threads:
            return
    raise AssertionError(f"a prange loop ran on threads {sorted(seen)}, expected {threads} threads")


#: ``(peer, threads)`` of the batch group: JAX's CPU client has one thread in this process
#: (conftest.py's XLA_FLAGS, read once), so JAX runs on one only
BATCH_ROWS_PEERS = tuple((peer, threads) for peer in ("tapejit", "tapejit_tier2", "tapejit_per_row", "numba_rows",
                                                       "jax", "torch")
                         for threads in (1, 2) if not (peer == "jax" and threads == 2))
#: rows per block of the hand-written loop: its block stays in cache, rows fill vectors
NUMBA_ROWS_BLOCK = 256


@numba.njit(parallel=True, cache=True)
def rosen_rows_by_hand(X, values, grads):
    """Rosenbrock's value and gradient for every row of ``X``, by hand, the row index
    innermost (as XLA's vmap runs it): blocks of rows, each transposed to (n, rows) in
    cache, spread over Numba's threads."""
    rows, n = X.shape
    blocks = (rows + NUMBA_ROWS_BLOCK - 1) // NUMBA_ROWS_BLOCK
    for b in numba.prange(blocks):
        lo = b * NUMBA_ROWS_BLOCK
        w = min(NUMBA_ROWS_BLOCK, rows - lo)
        x = np.empty((n, NUMBA_ROWS_BLOCK))
        g = np.zeros((n, NUMBA_ROWS_BLOCK))
        value = np.zeros(NUMBA_ROWS_BLOCK)
        for j in range(w):
            for i in range(n):
                x[i, j] = X[lo + j, i]
        for i in range(n - 1):
            for j in range(w):
                a = x[i, j]
                t = x[i + 1, j] - a * a
                u = 1.0 - a
                value[j] += 100.0 * t * t + u * u
                g[i, j] += -400.0 * a * t - 2.0 * u
                g[i + 1, j] += 200.0 * t
        for j in range(w):
            values[lo + j] = value[j]
            for i in range(n):
                grads[lo + j, i] = g[i, j]


def rosen_batch_row(peer, tj, X, threads):
    """``fn`` with ``fn(X) -> (values, gradients)`` for every row of ``X``, for ``peer``
    on ``threads`` threads (set by the caller for tapejit, Numba and torch)."""
    if peer in ("tapejit", "tapejit_tier2", "tapejit_per_row"):
        from tapejit.replay import batch
        # tier 1 (rows.py) or the trace's tier-2 row loops, compiled (or loaded) before timing
        compiled = tj.compile(tj.value_and_grad(W.rosen), tier2="sync" if peer == "tapejit_tier2" else False)
        compiled(X[0])                       # the trace, also used by the single replays
        if peer in ("tapejit", "tapejit_tier2"):
            before = batch.ROWS
            batch.ROWS = "sync"              # the row module loaded (or compiled) before timing
            try:
                compiled.batch(X[:1])
            finally:
                batch.ROWS = before
            return compiled.batch

        def per_row(X):                      # the replay row by row that batch() falls back to
            before = batch.ROWS
            batch.ROWS = "off"
            try:
                return compiled.batch(X)
            finally:
                batch.ROWS = before
        per_row.__self__ = compiled
        return per_row
    if peer == "numba_rows":
        def by_hand(X):
            values, grads = np.empty(len(X)), np.empty_like(X)
            rosen_rows_by_hand(X, values, grads)
            return values, grads
        return by_hand
    if peer == "torch":
        import torch
        per_row = torch.func.vmap(torch.func.grad_and_value(W.rosen))

        def by_torch(X):
            grads, values = per_row(torch.from_numpy(X))
            return values.numpy(), grads.numpy()
        return by_torch
    import jax
    compiled = jax.jit(jax.vmap(jax.value_and_grad(W.rosen)))

    def by_jax(X):
        values, grads = jax.block_until_ready(compiled(X))
        return np.asarray(values), np.asarray(grads)
    return by_jax


@pytest.mark.parametrize(("peer", "threads"), BATCH_ROWS_PEERS)
def test_rosenbrock_batch(peer, benchmark, threads):
    """Value and gradient of every row of 20,000 points of n=10: ``compiled.batch(X)``
    (rows as the vector axis: tier 1's records, ``tapejit``, and tier 2's fused row loops,
    ``tapejit_tier2``; ``tapejit_per_row``: the fallback, a replay per row in a
    ``prange``), a hand-written Numba loop with the row index innermost,
    ``jax.jit(jax.vmap(jax.value_and_grad))`` and ``torch.func.vmap(grad_and_value)``, on 1
    and on 2 threads (``tj.set_num_threads``; Numba's and torch's for those peers)."""
    pool = numba.config.NUMBA_NUM_THREADS
    if threads > pool:
        pytest.skip(f"Numba's thread pool has {pool} thread(s) in this process (NUMBA_NUM_THREADS="
                    f"{os.environ.get('NUMBA_NUM_THREADS')} when numba was imported; bench/conftest.py "
                    f"makes it min(2, CPUs) = {min(2, os.cpu_count() or 1)} unless it is exported)")
    lib = load_row(peer)
    tj = W.library("tapejit").tl
    X = np.random.default_rng(2).uniform(-2.0, 2.0, (BATCH_ROWS, BATCH_N))
    fn = rosen_batch_row(peer, tj, X, threads)
    before = numba.get_num_threads(), tj.get_num_threads()
    torch_before = lib.tl.get_num_threads() if peer == "torch" else None
    numba.set_num_threads(threads)
    tj.set_num_threads(threads)
    if peer == "torch":
        lib.tl.set_num_threads(threads)
    try:
        if peer in ("numba_rows", "tapejit_per_row"):    # their threads are Numba's
            check_threads_used(threads)
        values, grads = fn(X)
        assert values.shape == (BATCH_ROWS,) and grads.shape == (BATCH_ROWS, BATCH_N)
        for i in BATCH_CHECK_ROWS:
            what = f"{peer}: batch row {i} ({threads} threads)"
            if peer.startswith("tapejit"):
                assert_same_result((values[i], grads[i]), fn.__self__(X[i]), what + " vs a single replay")
            check_rosen((values[i], grads[i]), X[i], what)
        benchmark.group = T.GROUP_C_BATCH
        benchmark.extra_info["threads"] = threads
        benchmark.extra_info["rows"] = BATCH_ROWS
        out = benchmark(fn, X)
        if peer.startswith("tapejit"):
            np.testing.assert_array_equal(out[0], values, err_msg="timed batch: values")
            np.testing.assert_array_equal(out[1], grads, err_msg="timed batch: gradients")
            assert [s["path"] for s in fn.__self__.stats()["batch"]] == [
                {"tapejit": "rows", "tapejit_tier2": "tier2"}.get(peer, "per-row")]
            only_trace(fn.__self__)
        assert numba.get_num_threads() == threads
    finally:
        numba.set_num_threads(before[0])
        tj.set_num_threads(before[1])
        if peer == "torch":
            lib.tl.set_num_threads(torch_before)
    stats = getattr(benchmark, "stats", None)
    if stats is not None:
        benchmark.extra_info["us_per_row"] = round(stats.stats.median * 1e6 / BATCH_ROWS, 3)
