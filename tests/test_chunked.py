"""Large elementwise runs executed chunk by chunk across cores (tapejit/executor.py).

Chunking changes where elements are computed, never what: every registry sample, with
the thresholds lowered so that its tiny tapes are chunked, gives the values and
gradients it gives unchunked, bit for bit.  Then the semantics that touch the sweeps'
bookkeeping (flags, freed records): accumulation, retain_graph, the freed-graph error,
two roots sharing a run; and one workload at full size.
"""
import numpy as np
import pytest

import tapejit as tj
from tapejit import executor, registry

from test_gradients import CASES


@pytest.fixture(params=[1, 2], ids=["1-thread", "2-threads"])
def tiny_chunks(request, monkeypatch):
    """Chunk every elementwise record of two or more elements, three elements a chunk, on
    one thread (slices join backward runs) and on two (they do not)."""
    monkeypatch.setattr(executor, "MIN_ELEMENTS", 2)
    monkeypatch.setattr(executor, "CHUNK", 3)
    monkeypatch.setattr(executor, "THREADS", request.param)


def _run(fn, inputs, weights):
    leaves = [tj.tensor(x, requires_grad=True) for x in inputs]
    out = fn(tj, *leaves)
    value = np.array(out.detach().numpy(), copy=True)
    (out * tj.tensor(weights)).sum().backward()
    return value, [None if x.grad is None else x.grad.numpy().copy() for x in leaves]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("op, label, fn, inputs", CASES)
def test_sample_unchanged_by_chunking(op, label, fn, inputs, threads, monkeypatch):
    out_shape = fn(tj, *[tj.tensor(x) for x in inputs]).shape
    weights = np.random.default_rng(7).standard_normal(tuple(out_shape))
    expected = _run(fn, inputs, weights)
    monkeypatch.setattr(executor, "MIN_ELEMENTS", 2)
    monkeypatch.setattr(executor, "CHUNK", 3)
    monkeypatch.setattr(executor, "THREADS", threads)
    got = _run(fn, inputs, weights)
    np.testing.assert_array_equal(got[0], expected[0])
    for g, e in zip(got[1], expected[1]):
        assert (g is None) == (e is None)
        if g is not None:
            np.testing.assert_array_equal(g, e)


def _graph(x, w):
    """Slices, same-shape and broadcast arithmetic, activations: runs of every kind."""
    a = x[1:] * w - x[:-1] ** 2
    b = tj.tanh(a) + 0.5 * tj.exp(-x[:-1]) / (1.0 + a * a)
    return b, (b * b).sum() + (3.0 - b).sum()


def _row(name, out, a, b, n, q=0):
    return [registry.BY_NAME[name].opcode * 2, out, a, b, n, q]


@pytest.mark.parametrize("backward", [False, True])
def test_slot_read_whole_and_by_chunk_splits_the_run(backward, monkeypatch):
    """Slot 0 is a copy's source (read whole) and a product's operand (read chunk by
    chunk), so one run may not hold both; a copy of a slot computed in the run ends it."""
    monkeypatch.setattr(executor, "MIN_ELEMENTS", 4)
    monkeypatch.setattr(executor, "THREADS", 1)
    n = 10
    rec = np.array([_row("reshape", 100, 0, ~0, n, n),
                    _row("mul", 200, 0, 100, n),
                    _row("neg", 300, 200, -1, n),
                    _row("reshape", 400, 300, ~0, n, n)], np.int64)
    assert executor._runs(rec, 0, len(rec), backward) == [(0, 1), (1, 3), (3, 4)]
    # a record of another length starts a run of its own, with its own operands
    lengths = np.array([_row("exp", 100, 0, -1, n), _row("exp", 200, 1000, -1, 2 * n),
                        _row("reshape", 300, 1000, ~0, 2 * n, 2 * n)], np.int64)
    assert executor._runs(lengths, 0, 3, backward) == [(0, 1), (1, 2), (2, 3)]
    # On two threads a copy joins a backward run only if it starts within a chunk of its
    # source's start (it then adds into the next chunk's elements only).
    monkeypatch.setattr(executor, "THREADS", 2)
    monkeypatch.setattr(executor, "CHUNK", 4)
    assert executor._runs(rec, 0, len(rec), backward) == [(0, 1), (1, 3), (3, 4)]
    far = rec.copy()
    far[3, 3] = ~4                                  # copies elements 4 .. of slot 300
    assert executor._runs(far, 0, len(far), backward) == ([(0, 1), (1, 3)] if backward else
                                                         [(0, 1), (1, 3), (3, 4)])


@pytest.mark.parametrize("threads", [1, 2])
def test_graph_runs_are_chunked_and_exact(threads, monkeypatch):
    rng = np.random.default_rng(0)
    x0, w0 = rng.standard_normal(40), rng.standard_normal(())
    expected = []
    for forced in (False, True):
        if forced:
            monkeypatch.setattr(executor, "MIN_ELEMENTS", 8)
            monkeypatch.setattr(executor, "CHUNK", 5)
            monkeypatch.setattr(executor, "THREADS", threads)
            tape_runs = []
            real = executor._runs
            monkeypatch.setattr(executor, "_runs", lambda *a, **k: tape_runs.append(real(*a, **k)) or tape_runs[-1])
        x, w = tj.tensor(x0, requires_grad=True), tj.tensor(w0, requires_grad=True)
        b, loss = _graph(x, w)
        loss.backward()
        got = (b.detach().numpy().copy(), loss.item(), x.grad.numpy().copy(), w.grad.item())
        if not forced:
            expected = got
    assert any(tape_runs[0]) and any(tape_runs[1]), "forward and backward both had runs to chunk"
    np.testing.assert_array_equal(got[0], expected[0])
    assert got[1] == expected[1] and got[3] == expected[3]
    np.testing.assert_array_equal(got[2], expected[2])


def test_accumulation_and_retain_graph(tiny_chunks):
    x = tj.tensor(np.linspace(-1, 1, 30), requires_grad=True)
    y = (x * x * 3.0).sum()
    y.backward(retain_graph=True)
    y.backward(retain_graph=True)
    np.testing.assert_allclose(x.grad.numpy(), 2 * 6 * np.linspace(-1, 1, 30))
    x.grad.zero_()
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 6 * np.linspace(-1, 1, 30))
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()


def test_two_roots_share_a_run(tiny_chunks):
    x = tj.tensor(np.linspace(0.1, 2, 30), requires_grad=True)
    h = tj.sin(x) * x
    first, second = (h * 2.0).sum(), (h * h).sum()
    first.backward(retain_graph=True)
    g1 = x.grad.numpy().copy()
    second.backward()
    xv = np.linspace(0.1, 2, 30)
    dh = np.cos(xv) * xv + np.sin(xv)
    np.testing.assert_allclose(g1, 2 * dh, rtol=1e-13)
    np.testing.assert_allclose(x.grad.numpy(), 2 * dh + 2 * np.sin(xv) * xv * dh, rtol=1e-13)


def test_unreached_records_stay_usable(tiny_chunks):
    """A backward frees only the records it went through: another root's records stay."""
    x = tj.tensor(np.linspace(0.1, 2, 30), requires_grad=True)
    y = tj.tensor(np.linspace(-2, 2, 30), requires_grad=True)
    a, b = (x * x).sum(), (tj.exp(y) * 2.0).sum()
    a.backward()
    b.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.linspace(0.1, 2, 30))
    np.testing.assert_allclose(y.grad.numpy(), 2 * np.exp(np.linspace(-2, 2, 30)))


def test_rosenbrock_at_full_size():
    """Above the real threshold: the gradient of a 300,000-element Rosenbrock function."""
    from scipy.optimize import rosen, rosen_der
    x0 = np.random.default_rng(1).uniform(-2, 2, 300_000)
    assert x0.size > executor.MIN_ELEMENTS
    x = tj.from_numpy(x0).requires_grad_()
    loss = (100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()
    loss.backward()
    np.testing.assert_allclose(loss.item(), rosen(x0), rtol=1e-12)
    ref = rosen_der(x0)
    np.testing.assert_allclose(x.grad.numpy(), ref, rtol=1e-10, atol=1e-12 * np.abs(ref).max())


# ---- values and gradients kept in cache only ---------------------------------------------

def _rosen(x):
    return (100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()


def test_dead_intermediates_stay_in_cache(tiny_chunks):
    """What no record outside the run reads and no backward rule needs is computed in each
    thread's scratch area, not in its slot; the saved values (the squares' inputs) and the
    run's result (the sum's operand) are written to their slots."""
    x0 = np.linspace(-1.5, 1.5, 31)
    x = tj.tensor(x0, requires_grad=True)
    loss = _rosen(x)
    loss.backward()
    tape = loss._tape
    runs, slots = tape.unkept
    names = {int(r[1]): registry.OPS[int(r[0]) >> 1].name for r in tape.rec[:tape.nrec]}
    assert sorted(names[s] for _, s in slots) == ["mul_scalar", "slice", "slice", "square", "square", "square"]
    from scipy.optimize import rosen_der
    np.testing.assert_allclose(x.grad.numpy(), rosen_der(x0), rtol=1e-13)


def test_slices_kept_in_cache_are_read_in_place(tiny_chunks):
    """A slice whose result stays in cache is not made in the forward chunks: its readers
    read the source's elements.  The saved slice (the square's input) is still made."""
    x0 = np.linspace(-1.5, 1.5, 31)
    x = tj.tensor(x0, requires_grad=True)
    loss = _rosen(x)
    loss.item()
    tape = loss._tape
    *_, (start, end, chunks, cached, _) = executor._planned(tape, 0, tape.nrec, 0, False)   # this loss's run
    rows = tape.rec[start:end]
    names = [registry.OPS[int(r[0]) >> 1].name for r in rows]
    first = executor.CHUNK * np.arange(len(chunks))
    slices = [i for i, name in enumerate(names) if name == "slice"]
    assert len(slices) == 3
    for i in slices:
        start_in_x = int(executor._decoded(rows[i, 2])) + ~int(rows[i, 3])   # x's slot, then the start
        readers = [j for j, r in enumerate(rows) if names[j] != "slice" and int(rows[i, 1]) in (int(r[2]), int(r[3]))]
        if int(rows[i, 1]) in cached:
            assert (chunks[:, i, 4] == 0).all()
            for j in readers:
                field = 2 if int(rows[j, 2]) == int(rows[i, 1]) else 3
                np.testing.assert_array_equal(chunks[:, j, field], start_in_x + first)
        else:
            assert names[readers[0]] == "square" and (chunks[:, i, 4] > 0).all()
    assert sum(int(rows[i, 1]) in cached for i in slices) == 2
    from scipy.optimize import rosen
    assert loss.item() == pytest.approx(rosen(x0), rel=1e-14)


def _chunked_gradient(fn, x0, threads, monkeypatch):
    monkeypatch.setattr(executor, "MIN_ELEMENTS", 2)
    monkeypatch.setattr(executor, "CHUNK", 3)
    monkeypatch.setattr(executor, "THREADS", threads)
    monkeypatch.setattr(executor, "_plans", {})     # plan afresh, with _add_in_place as patched
    x = tj.tensor(x0, requires_grad=True)
    loss = fn(x)
    loss.backward()
    return x.grad.numpy().copy(), loss._tape


@pytest.mark.parametrize("threads", [1, 2])
def test_slices_add_in_place_in_the_order_of_the_sweep(threads, monkeypatch):
    """In the backward chunks a slice's one reader adds straight into the source's
    gradient, where that keeps the order of the terms: in Rosenbrock's function the two
    ``x[:-1]`` do (their readers come in the slices' order), ``x[1:]`` does not (its reader,
    the subtraction, runs between the square's and the other slice's).  A slice read twice
    is left as it is.  The gradients are bit for bit those of the chunks without it.  (Both
    differ from the unchunked sweep's in the last bit at a few chunk boundaries: there a
    slice starting at 1 adds its term to the next chunk's first element before that chunk's
    own terms.)"""
    x0 = np.random.default_rng(3).uniform(-2, 2, 31)

    def twice(x):
        y = x[1:]
        return (y * y + x[:-1] * 2.0).sum()

    plans = []
    real = executor._add_in_place
    for fn, in_place in ((_rosen, [("slice", 0), ("slice", 0)]), (twice, [("slice", 0)])):
        monkeypatch.setattr(executor, "_add_in_place", lambda *a: plans.append(real(*a)) or plans[-1])
        got, tape = _chunked_gradient(fn, x0, threads, monkeypatch)
        names = {int(r[1]): (registry.OPS[int(r[0]) >> 1].name, ~int(r[3])) for r in tape.rec[:tape.nrec]}
        assert sorted(names[o] for o in plans[-1][0]) == in_place
        monkeypatch.setattr(executor, "_add_in_place", lambda *a: ([], np.empty(0, np.int64)))
        without, _ = _chunked_gradient(fn, x0, threads, monkeypatch)
        np.testing.assert_array_equal(got, without)
        monkeypatch.setattr(executor, "MIN_ELEMENTS", 1 << 16)
        x = tj.tensor(x0, requires_grad=True)
        fn(x).backward()
        np.testing.assert_allclose(got, x.grad.numpy(), rtol=1e-15, atol=1e-15 * np.abs(got).max())


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype, reduce", [("float64", "sum"), ("float32", "mean")])
def test_a_full_sum_joins_its_run_bit_for_bit(threads, dtype, reduce, monkeypatch):
    """A loss's ``.sum()``/``.mean()`` of a value the run computes joins the run: each
    chunk sums its elements (never written, nor their gradients), and the chunks' sums add
    up to the bits of the sum kernel, which adds the same blocks in the same order.  The
    value and gradient are those of the chunks without the sum joining, bit for bit, and in
    float64 those of the unchunked sweeps.  (In float32 chunked and unchunked gradients
    already differed in the last bit here and there, with or without the sum.)"""
    n = 3 * executor.CHUNK + 17
    x0 = np.random.default_rng(5).uniform(-2, 2, n).astype(dtype)
    joining = executor._joining_sum
    results = {}
    for how in ("unchunked", "apart", "joined"):
        monkeypatch.setattr(executor, "MIN_ELEMENTS", 1 << 20 if how == "unchunked" else 1 << 10)
        monkeypatch.setattr(executor, "THREADS", threads)
        monkeypatch.setattr(executor, "_plans", {})
        monkeypatch.setattr(executor, "_joining_sum", (lambda *a: None) if how == "apart" else joining)
        x = tj.tensor(x0, requires_grad=True)
        loss = getattr(_rosen_terms(x), reduce)()
        value = loss.item()
        loss.backward()
        results[how] = (value, x.grad.numpy().copy())
    tape = loss._tape
    d = int(dtype == "float32")
    plans = [executor._planned(tape, 0, tape.nrec, d, backward) for backward in (False, True)]
    assert plans[0][-1][-1] is not None and plans[1][-1][-1] is not None, "the sum joined both runs"
    assert registry.OPS[int(tape.rec[plans[0][-1][1] - 1, 0]) >> 1].name == reduce
    for other in ("apart", "unchunked") if dtype == "float64" else ("apart",):
        assert results["joined"][0] == results[other][0]
        np.testing.assert_array_equal(results["joined"][1], results[other][1])
    from scipy.optimize import rosen
    assert results["joined"][0] == pytest.approx(rosen(x0.astype(np.float64)) / (1 if reduce == "sum" else n - 1),
                                                 rel=1e-5 if dtype == "float32" else 1e-13)


def _rosen_terms(x):
    return 100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2


def test_a_sum_whose_operand_is_read_again_stays_apart(monkeypatch):
    """``h`` is summed and also read by a later record: it must be written, so its sum does
    not join (the chunks' sums would need its slot); ``h * h``, summed only, does."""
    monkeypatch.setattr(executor, "MIN_ELEMENTS", 1 << 10)
    n = 2 * executor.CHUNK + 5
    x = tj.tensor(np.linspace(-1, 1, n), requires_grad=True)
    h = tj.sin(x) * 3.0
    loss = h.sum() + (h * h).sum()
    loss.backward()
    tape = loss._tape
    for backward in (False, True):
        plans = sorted(executor._planned(tape, 0, tape.nrec, 0, backward))
        assert [plan[-1] is None for plan in plans] == [True, False]
    np.testing.assert_allclose(x.grad.numpy(), 3 * np.cos(x.detach().numpy()) * (1 + 6 * np.sin(x.detach().numpy())),
                               rtol=1e-13)
    assert h.detach().numpy()[7] == 3.0 * np.sin(x.detach().numpy()[7])


def test_reading_a_value_kept_in_cache_computes_it(tiny_chunks):
    x0 = np.linspace(-1.5, 1.5, 31)
    x = tj.tensor(x0, requires_grad=True)
    a = x[:-1] ** 2                  # read by the run only, saved by nothing: not written
    loss = (100 * (x[1:] - a) ** 2 + (1 - x[:-1]) ** 2).sum()
    loss.backward()
    assert (0, a._off) in loss._tape.unkept[1]
    np.testing.assert_array_equal(a.detach().numpy(), x0[:-1] ** 2)
    assert loss._tape.unkept is None


def test_a_new_op_on_a_value_kept_in_cache(tiny_chunks):
    """A record added after the run reads the value from its slot: it is written first."""
    x0 = np.linspace(-1.5, 1.5, 31)
    x = tj.tensor(x0, requires_grad=True)
    a = x[:-1] ** 2
    (100 * (x[1:] - a) ** 2).sum().backward(retain_graph=True)
    assert (0, a._off) in a._tape.unkept[1]
    y = (a * 3.0).sum()
    assert y.item() == pytest.approx(3 * (x0[:-1] ** 2).sum(), rel=1e-14)
    y.backward()
    t = x0[1:] - x0[:-1] ** 2
    expected = np.zeros_like(x0)
    expected[:-1] += -400 * t * x0[:-1] + 6 * x0[:-1]
    expected[1:] += 200 * t
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-12, atol=1e-12)


def test_results_nothing_reads_are_written(tiny_chunks):
    """A run's last value with no reader is the caller's result: it is written, not
    computed again when read."""
    x = tj.tensor(np.linspace(-1, 1, 30), requires_grad=True)
    h = tj.sin(x) * 2.0 + 1.0
    np.testing.assert_allclose(h.detach().numpy(), np.sin(np.linspace(-1, 1, 30)) * 2 + 1, rtol=1e-15)
    unkept = h._tape.unkept
    assert unkept is None or (0, h._off) not in unkept[1]


def test_tape_table_shows_values_kept_in_cache(tiny_chunks):
    x = tj.tensor(np.linspace(-1.5, 1.5, 31), requires_grad=True)
    loss = _rosen(x)
    loss.backward(retain_graph=True)
    table = loss._tape.summary()
    assert loss._tape.unkept is None
    assert "square" in table and "nan" not in table.lower()


def test_compiled_function_keeps_the_values_its_replays_read(tiny_chunks, monkeypatch):
    """A frozen trace's calls read their results from the slots (here an intermediate that
    the run also reads, which eager mode would keep in cache only): those are kept
    (``Tape.kept``), the rest stay in cache, and no replay leaves a note to compute them."""
    x0 = np.linspace(-1.5, 1.5, 31)
    plans = []
    real = executor._forward_plan
    monkeypatch.setattr(executor, "_forward_plan", lambda tape, *a: plans.append((tape, real(tape, *a))) or plans[-1][1])
    monkeypatch.setattr(executor, "_plans", {})

    def loss_and_square(x):
        square = x[:-1] ** 2
        return (100 * (x[1:] - square) ** 2 + (1 - x[:-1]) ** 2).sum(), square

    f = tj.compile(loss_and_square)
    from scipy.optimize import rosen
    for scale in (1.0, 0.5, 0.25, 2.0):
        value, square = f(tj.tensor(x0 * scale))
        assert float(value) == pytest.approx(rosen(x0 * scale), rel=1e-13)
        np.testing.assert_array_equal(square.numpy(), (x0[:-1] * scale) ** 2)
    tape, plan = plans[-1]
    assert tape.kept and any(run[3] for run in plan)
    assert not {(0, slot) for run in plan for slot in run[3]} & tape.kept
    assert tape.unkept is None


@pytest.mark.parametrize("threads", [1, 2])
def test_replay_runs_large_arrays_by_chunk_and_exactly(threads, monkeypatch):
    """A compiled function over large arrays replays run by run (no single fused call),
    with the values and gradients of the one fused call.  (To the last bit but for the
    order of additions: on one thread a chunk's ``x[1:]`` adds into the next chunk's first
    element before that chunk's ``x[:-1]`` does.)"""
    x0 = np.linspace(-1.5, 1.5, 31)
    plain = tj.compile(tj.value_and_grad(_rosen))
    expected = [plain(x0 * s) for s in (1.0, 0.5, 0.5)]
    monkeypatch.setattr(executor, "MIN_ELEMENTS", 2)
    monkeypatch.setattr(executor, "CHUNK", 3)
    monkeypatch.setattr(executor, "THREADS", threads)
    runs = []
    real = executor._backward_run
    monkeypatch.setattr(executor, "_backward_run", lambda *a: runs.append(a[2][:2]) or real(*a))
    chunked_f = tj.compile(tj.value_and_grad(_rosen))
    for (value, grad), scale in zip(expected, (1.0, 0.5, 0.5)):
        got_value, got_grad = chunked_f(x0 * scale)
        assert got_value == value
        np.testing.assert_allclose(got_grad, grad, rtol=1e-15, atol=1e-15 * np.abs(grad).max())
    assert runs, "the replays' backward sweeps went run by run"


def test_backward_after_reading_the_loss_still_goes_run_by_run(tiny_chunks, monkeypatch):
    """``loss.item()`` retires a tape over large arrays (later ops start a new one); the
    backward sweep through it is still the one that goes run by run."""
    from tapejit import tape as tape_module
    monkeypatch.setattr(tape_module, "_LARGE_ARENA", 8)
    runs = []
    real = executor._backward_run
    monkeypatch.setattr(executor, "_backward_run", lambda *a: runs.append(a[2][:2]) or real(*a))
    x0 = np.linspace(-1.5, 1.5, 31)
    x = tj.tensor(x0, requires_grad=True)
    loss = _rosen(x)
    from scipy.optimize import rosen, rosen_der
    assert loss.item() == pytest.approx(rosen(x0), rel=1e-14)
    assert loss._tape is not tape_module.state.tape, "reading the loss retired its tape"
    loss.backward()
    assert runs
    np.testing.assert_allclose(x.grad.numpy(), rosen_der(x0), rtol=1e-13)


def test_slices_near_and_far_on_threads(tiny_chunks):
    """Slices starting within a chunk join backward runs (on two threads their chunks at
    the shares' edges run apart); one starting further away runs whole.  Either way the
    gradient is the analytic one."""
    x0 = np.linspace(-1.0, 2.0, 40)
    x = tj.tensor(x0, requires_grad=True)
    loss = (x[5:] * x[:-5]).sum() + (x[1:] ** 2).sum() + (x[:-1] * 3.0).sum()
    loss.backward()
    expected = np.zeros_like(x0)
    expected[5:] += x0[:-5]
    expected[:-5] += x0[5:]
    expected[1:] += 2 * x0[1:]
    expected[:-1] += 3.0
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-14)


def test_a_repeated_step_reuses_its_plans(tiny_chunks, monkeypatch):
    """The runs and chunk records of a step recorded again are looked up, not worked out
    again; another tape layout gets plans of its own."""
    made = []
    for name in ("_forward_plan", "_backward_plan"):
        real = getattr(executor, name)
        monkeypatch.setattr(executor, name, lambda *a, real=real, name=name: made.append(name) or real(*a))
    monkeypatch.setattr(executor, "_plans", {})
    from scipy.optimize import rosen_der
    for step, n in enumerate((31, 31, 31, 40, 31)):
        if step == 2:
            made.clear()    # step 0 may share a tape with an earlier test; step 1 starts one
        x = tj.tensor(np.linspace(-1.5, 1.5, n), requires_grad=True)
        _rosen(x).backward()
        np.testing.assert_allclose(x.grad.numpy(), rosen_der(np.linspace(-1.5, 1.5, n)), rtol=1e-13)
    assert made == ["_forward_plan", "_backward_plan"]


def _gradient_in_child(queue):
    x = tj.tensor(np.linspace(-1, 1, 30), requires_grad=True)
    (tj.sin(x) * x).sum().backward()
    queue.put(x.grad.numpy().tolist())


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")
def test_forked_child_makes_its_own_threads(tiny_chunks):
    """After a run has started worker threads, a forked child (which has none) still
    completes chunked runs."""
    import multiprocessing
    x = tj.tensor(np.linspace(-1, 1, 30), requires_grad=True)
    (tj.sin(x) * x).sum().backward()            # the parent's pool exists now
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_gradient_in_child, args=(queue,))
    child.start()
    got = queue.get(timeout=60)
    child.join(timeout=60)
    assert child.exitcode == 0
    np.testing.assert_allclose(got, x.grad.numpy(), rtol=1e-15)
