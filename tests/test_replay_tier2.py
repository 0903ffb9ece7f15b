"""Replay tier 2 (tapejit/replay/fused.py, tier2.py): a trace's fused Numba function gives
tier 1's values and gradients, compiles in the background and is found in the disk cache
by a second process; traces it does not fuse say why and stay on tier 1."""
import glob
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import tapejit as tj
from tapejit import _numba_load
from tapejit.numpy_mode import to_tensor
from tapejit.replay import fused


def rosen(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def _both_tiers(f, *args, argnums=0):
    """``(tier 1's result, tier 2's result, tier 2's compiled function)`` of
    ``tj.compile(tj.value_and_grad(f))`` on ``args`` (second calls: replays)."""
    results = []
    for mode in (False, "sync"):
        compiled = tj.compile(tj.value_and_grad(f, argnums=argnums), tier2=mode)
        compiled(*args)
        results.append(compiled(*args))
    assert compiled.stats()["tier"] == [2], compiled.stats()
    return results[0], results[1], compiled


def _close(a, b, rtol):
    value_a, grads_a = a
    value_b, grads_b = b
    assert value_b == pytest.approx(value_a, rel=rtol)
    for ga, gb in zip(grads_a if isinstance(grads_a, tuple) else (grads_a,),
                      grads_b if isinstance(grads_b, tuple) else (grads_b,)):
        assert ga.dtype == gb.dtype
        np.testing.assert_allclose(gb, ga, rtol=rtol, atol=rtol * np.abs(ga).max())


def _plan(compiled):
    return next(iter(compiled.traces.values())).frozen.tier2.plan


@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-13), (np.float32, 1e-5)])
def test_rosenbrock_is_one_loop_and_equals_tier_1_and_torch(dtype, rtol):
    torch = pytest.importorskip("torch")
    x = np.linspace(-1.0, 1.5, 50).astype(dtype)
    tier1, tier2, compiled = _both_tiers(rosen, x)
    _close(tier1, tier2, rtol)
    assert len(_plan(compiled).groups) == 1     # slices, squares and the sum: one loop
    t = torch.tensor(x, requires_grad=True)
    value = torch.sum(100.0 * (t[1:] - t[:-1] ** 2) ** 2 + (1 - t[:-1]) ** 2)
    value.backward()
    _close((value.item(), t.grad.numpy()), tier2, 10 * rtol)


def _far_slices(x):
    # slices 40,000 apart: thread blocks shorter than that would add into the same elements
    return np.sum(x[:-40000] * np.sin(x[40000:]))


def test_long_loop_on_one_and_two_threads_equals_tier_1():
    x = np.linspace(-1.0, 1.5, fused.THREADED_ELEMENTS + 40001)
    before = tj.get_num_threads()
    try:
        for threads in (1, 2):
            tj.set_num_threads(threads)
            for f in (rosen, _far_slices):
                tier1, tier2, compiled = _both_tiers(f, x)
                assert _plan(compiled).threaded
                _close(tier1, tier2, 1e-12)
    finally:
        tj.set_num_threads(before)


def _three_loops(x):
    # y's loop gets its gradient from the two later loops: its backward loop runs on its own
    y = np.tanh(x) * x
    return np.sum((y[1:] - y[:-1]) ** 2) + np.sum(y)


def test_long_loops_of_a_trace_of_several_run_in_blocks_on_threads():
    """Several loops, long ones cut out of the trace's function and run in blocks on the
    threads (slices one apart: in two waves); torch: the same value and gradient as
    tier 1's, to the order of the sums' terms."""
    x = np.linspace(-1.0, 1.5, fused.THREADED_ELEMENTS + 3)
    before = tj.get_num_threads()
    try:
        for threads in (1, 2):
            tj.set_num_threads(threads)
            tier1, tier2, compiled = _both_tiers(_three_loops, x)
            assert _plan(compiled).split
            assert sum(g.m >= fused.THREADED_ELEMENTS for g in _plan(compiled).groups) == 3
            _close(tier1, tier2, 1e-12)
    finally:
        tj.set_num_threads(before)


def test_broadcast_operands_get_their_summed_gradients():
    # x * w + b with w of one element and b a 0-d array: stride-0 operands on both sides
    def f(x, w, b):
        return np.sum(np.tanh(x * w + b) * (b - x) / (1.5 + w * x * x))
    args = (np.linspace(-2.0, 2.0, 12).reshape(3, 4), np.array([0.7]), np.array(0.3))
    tier1, tier2, _ = _both_tiers(f, *args, argnums=(0, 1, 2))
    _close(tier1, tier2, 1e-13)


def test_slices_of_computed_values_and_a_sum_read_back_split_into_loops():
    # y[1:] of a computed y, and the sum s broadcast into a later record: three loops,
    # gradients flowing back from the later ones into the first
    def f(x):
        y = np.exp(x) * 0.5
        s = np.sum(y[2:] - y[:-2] ** 2)
        return np.mean(x * s + np.sin(y))
    x = np.linspace(-1.0, 1.0, 9)
    tier1, tier2, compiled = _both_tiers(f, x)
    _close(tier1, tier2, 1e-13)
    plan = _plan(compiled)
    assert len(plan.groups) >= 3 and not all(g.fused for g in plan.groups)
    # y's backward loop reads exp's values back (stored by its forward loop), recomputes the rest
    assert sorted(plan.ops[r].name for r, row in enumerate(plan.rows) if row[1] in plan.remembered) == ["exp"]


def test_training_step_delivers_gradients_to_parameters():
    w = tj.tensor(np.linspace(0.5, 1.5, 6), requires_grad=True)

    def step(x):
        loss = ((w * x - 1.0) ** 2).mean()
        loss.backward()
        return loss

    losses, grads = [], []
    for mode in (False, "sync"):
        compiled = tj.compile(step, tier2=mode)
        x = tj.tensor(np.linspace(-1.0, 1.0, 6))
        for _ in range(2):
            w.grad = None
            losses.append(compiled(x).item())
            grads.append(w.grad.numpy().copy())
    assert compiled.stats()["tier"] == [2]
    assert losses[3] == pytest.approx(losses[1], rel=1e-14)
    np.testing.assert_allclose(grads[3], grads[1], rtol=1e-14)


def test_kernels_run_between_the_loops():
    # matmul and a sum along a dim are calls of the registry's kernels between two loops
    def f(x, w):
        return np.sum(np.tanh(x @ w) ** 2 + x.sum(axis=0) @ w)
    args = (np.linspace(-1.0, 1.0, 12).reshape(3, 4), np.linspace(0.5, 1.5, 8).reshape(4, 2))
    tier1, tier2, compiled = _both_tiers(f, *args, argnums=(0, 1))
    _close(tier1, tier2, 1e-14)
    plan = _plan(compiled)
    assert [plan.ops[r].name for r in plan.kernels] == ["mm", "sum_dim", "mm", "expand"]


def test_ineligible_traces_say_why_and_tier2_false_turns_it_off():
    def f(x):
        return tj.linalg.slogdet(to_tensor(x) * 2.0)[1]
    compiled = tj.compile(tj.value_and_grad(f), tier2="sync")
    x = np.eye(3) + 0.1
    compiled(x)
    compiled(x)
    stats = compiled.stats()
    assert stats["tier"] == [1]
    assert stats["tier2"][0]["state"] == "ineligible"
    assert "slogdet (LinalgSlogdetBackward0): tier 2 does not run it yet" in stats["tier2"][0]["reason"]

    off = tj.compile(tj.value_and_grad(rosen), tier2=False)
    off(np.ones(5))
    off(np.ones(5))
    assert off.stats()["tier"] == [1] and off.stats()["tier2"][0]["state"] == "off"
    with pytest.raises(ValueError, match="tier2 must be True, False or 'sync'"):
        tj.compile(rosen, tier2="later")


def test_traces_too_long_stay_on_tier_1(monkeypatch):
    monkeypatch.setattr(fused, "MAX_RECORDS", 3)
    compiled = tj.compile(tj.value_and_grad(rosen), tier2="sync")
    compiled(np.ones(7))
    assert compiled.stats()["tier2"][0]["state"] == "ineligible"
    assert "more than 3" in compiled.stats()["tier2"][0]["reason"]


# A program that replays one trace until tier 2 runs and prints whether tier 2 came from
# the disk cache.  With "fresh" it first deletes that trace's cached tier 2 (so it compiles):
# two runs of it have the same history, so the same trace layout and the same cache key.
_CHILD = textwrap.dedent('''
    import glob, os, sys, time, numpy as np, tapejit as tj
    from tapejit import _numba_load
    from tapejit.replay import fused
    def f(x):
        return np.sum(np.cos(x[3:]) * x[:-3] + 0.25 * x[1:-2] ** 3)
    x = np.linspace(-1.0, 1.0, 37)
    if sys.argv[1] == "fresh":
        traced = tj.compile(tj.value_and_grad(f), tier2=False)
        traced(x)
        _, source = fused.generate(next(iter(traced.traces.values())).frozen)
        folder = os.path.join(_numba_load.cache_dir(), "tier2")
        for path in glob.glob(os.path.join(folder, "**", f"t2_{fused.key(source)}*"), recursive=True):
            os.unlink(path)
        del traced
    vg = tj.compile(tj.value_and_grad(f))
    vg(x)
    deadline = time.time() + 120
    while vg.stats()["tier"] != [2] and time.time() < deadline:
        vg(x)
        time.sleep(0.01)
    value, grad = vg(x)
    print(vg.stats()["tier2"][0]["from_cache"], repr(value), repr(float(grad.sum())))
''')


def _child_function(x):
    return np.sum(np.cos(x[3:]) * x[:-3] + 0.25 * x[1:-2] ** 3)


def test_background_compile_runs_tier_1_until_tier_2_is_ready():
    x = np.linspace(-1.0, 1.0, 37)
    tier1 = tj.compile(tj.value_and_grad(_child_function), tier2=False)
    expected = tier1(x)
    frozen = next(iter(tier1.traces.values())).frozen
    _, source = fused.generate(frozen)
    folder = os.path.join(_numba_load.cache_dir(), "tier2")
    for path in glob.glob(os.path.join(folder, f"t2_{fused.key(source)}*")) + glob.glob(
            os.path.join(folder, "__pycache__", f"t2_{fused.key(source)}*")):
        os.unlink(path)    # a compile, not a load, in this process

    compiled = tj.compile(tj.value_and_grad(_child_function), tier2=True)
    compiled(x)
    deadline = time.time() + 120
    while compiled.stats()["tier"] != [2] and time.time() < deadline:
        assert compiled(x)[0] == pytest.approx(expected[0], rel=1e-14)    # tier 1 meanwhile
        time.sleep(0.02)
    stats = compiled.stats()["tier2"][0]
    assert stats["state"] == "ready" and stats["from_cache"] is False, stats
    _close(expected, compiled(x), 1e-14)


@pytest.mark.slow
def test_a_second_process_loads_tier_2_from_the_disk_cache():
    """Two fresh processes with the same history trace the same function: the first compiles
    its tier 2 in the background, the second finds it in the disk cache at its first replay."""
    x = np.linspace(-1.0, 1.0, 37)
    expected = tj.compile(tj.value_and_grad(_child_function), tier2=False)(x)
    env = dict(os.environ, TAPEJIT_TIER2="on")
    for run, cached in (("fresh", "False"), ("again", "True")):
        out = subprocess.run([sys.executable, "-c", _CHILD, run], env=env, capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 0, out.stderr
        from_cache, value, grad_sum = out.stdout.split()
        assert from_cache == cached, (run, out.stdout)
        assert float(value) == pytest.approx(expected[0], rel=1e-14)
        assert float(grad_sum) == pytest.approx(expected[1].sum(), rel=1e-12)


def test_torch_style_step_equals_tier_1_in_float32():
    def f(x, y):
        a, b = to_tensor(x), to_tensor(y)
        return (tj.sigmoid(a * 2.0) * tj.log1p(b * b) - a.abs() / (1.0 + b)).sum()
    args = (np.linspace(-1.0, 1.0, 8).astype(np.float32), np.linspace(0.5, 2.0, 8).astype(np.float32))
    tier1, tier2, _ = _both_tiers(f, *args, argnums=(0, 1))
    _close(tier1, tier2, 1e-6)


class _FakeClock:
    """``tier2._clock`` for a trial: each replay of ``frozen`` takes ``cost[tier]`` seconds
    (the clock is read before a timed call, when the trial has reset ``last_tier``, and after)."""

    def __init__(self, cost):
        self.cost, self.now, self.frozen = cost, 0.0, None

    def __call__(self):
        tier = self.frozen.last_tier if self.frozen is not None else None
        if tier is not None:
            self.now += self.cost[tier]
        return self.now


@pytest.mark.parametrize("cost, kept", [({1: 1e-3, 2: 3e-3}, False), ({1: 3e-3, 2: 1e-3}, True)])
def test_background_tier_2_stays_only_if_its_first_calls_are_faster(monkeypatch, cost, kept):
    """After tier 2 loads, the first calls alternate tiers, timed; the faster stays and the
    trial ends (no timing on later calls).  Timings injected; results are tier 1's either way."""
    from tapejit.replay import tier2
    x = np.linspace(-1.0, 1.5, 50)
    expected = tj.compile(tj.value_and_grad(rosen), tier2=False)(x)
    tj.compile(tj.value_and_grad(rosen), tier2="sync")(x)   # loaded here: the next trace finds it ready
    clock = _FakeClock(cost)
    monkeypatch.setattr(tier2, "_clock", clock)
    compiled = tj.compile(tj.value_and_grad(rosen), tier2=True)
    compiled(x)
    clock.frozen = next(iter(compiled.traces.values())).frozen
    assert compiled.stats()["tier2"][0]["decision"] == "measuring"
    tiers = []
    for _ in range(2 * (tier2.TRIAL_CALLS + 1)):
        _close(expected, compiled(x), 1e-13)
        tiers.append(compiled.stats()["tier"][0])
    assert tiers == [2, 1] * (tier2.TRIAL_CALLS + 1)
    assert not compiled._trials
    decision = compiled.stats()["tier2"][0]["decision"]
    if kept:
        assert decision == "kept (1 ms vs 3 ms on tier 1)"
    else:
        assert decision == "dropped: slower (3 ms vs 1 ms on tier 1)"
    _close(expected, compiled(x), 1e-13)
    assert compiled.stats()["tier"] == [2 if kept else 1]
    # tier2="sync" (tests) runs tier 2 with no trial
    synced = tj.compile(tj.value_and_grad(rosen), tier2="sync")
    synced(x)
    assert synced.stats()["tier2"][0]["decision"].startswith("not measured") and not synced._trials


def test_a_trace_another_process_is_compiling_waits_and_loads_its_cache():
    """Two processes missing the cache for one trace at once compile it once: the second
    waits on ``t2_<key>.lock`` (held here, as the first process holds it while it compiles)
    and then loads what the first cached (from_cache True), running tier 1 meanwhile."""
    pytest.importorskip("fcntl")      # (without it each process compiles)
    from tapejit.replay import tier2
    x = np.linspace(-1.0, 1.0, 41)
    expected = tj.compile(tj.value_and_grad(_child_function), tier2=False)(x)
    traced = tj.compile(tj.value_and_grad(_child_function), tier2=False)
    traced(x)
    _, source = fused.generate(next(iter(traced.traces.values())).frozen)
    key = fused.key(source)
    folder = tier2._folder()
    for path in glob.glob(os.path.join(folder, "**", f"t2_{key}*"), recursive=True):
        os.unlink(path)
    with tier2.cache_lock(os.path.join(folder, f"t2_{key}.lock")):   # the first process
        compiled = tj.compile(tj.value_and_grad(_child_function), tier2=True)
        _close(expected, compiled(x), 1e-14)
        time.sleep(0.2)
        assert compiled.stats()["tier2"][0]["state"] == "compiling"
        _close(expected, compiled(x), 1e-14)
        assert compiled.stats()["tier"] == [1]
        tier2._write_and_load(folder, key, source, "float64", True)     # its compile
    deadline = time.time() + 60
    while compiled.stats()["tier2"][0]["state"] == "compiling" and time.time() < deadline:
        time.sleep(0.02)
    assert compiled.stats()["tier2"][0]["from_cache"] is True, compiled.stats()["tier2"]
    _close(expected, compiled(x), 1e-14)
