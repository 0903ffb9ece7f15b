"""``compiled.batch``'s row module (``tapejit/replay/rows.py``) never makes a call wait: until
it is compiled, batches replay row by row with the same bits; a failed compile leaves them
there with the reason in ``stats()``.  No test here compiles the module itself: the module is
taken as cached (the suite's warm cache) and its first look in the cache is made to miss."""
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import tapejit as tj
from tapejit import _numba_load
from tapejit.replay import batch, rows, tier2

# (the suite runs with tier 2 off: tests/conftest.py)
TIER2_OFF = {"state": "off", "reason": "tier2=False", "compile_seconds": None, "from_cache": None}


def _rosen(x):
    return (100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()


@pytest.fixture
def uncached(monkeypatch):
    """A process that has not loaded the module and does not find it in the disk cache at its
    first batch(), as on a new install; batches compile it in the background (the default)."""
    monkeypatch.setattr(batch, "ROWS", "on")
    monkeypatch.setattr(rows, "_builds", {})
    real = rows._load_cached
    misses = [True]

    def load_cached(dispatcher, sig):
        if misses:
            misses.pop()
            return False
        return real(dispatcher, sig)
    monkeypatch.setattr(rows, "_load_cached", load_cached)
    warnings = []
    monkeypatch.setattr(_numba_load, "warn_once", lambda kind, message: warnings.append(message))
    return warnings


def _build_done(dtype="float64"):
    assert rows._builds[dtype].done.wait(120), "the row module's background compile did not finish"


def test_batches_run_row_by_row_until_the_background_compile_is_loaded(uncached, monkeypatch):
    release = threading.Event()
    children = []

    def compile_in_child(module, dtype):     # the compiling process, held until released
        children.append((module, dtype))
        assert release.wait(60)
        rows.warm(dtype)                     # what that process runs (a cache load here)
    monkeypatch.setattr(tier2, "compile_in_child", compile_in_child)
    f = tj.compile(tj.value_and_grad(_rosen))
    xs = np.random.default_rng(0).uniform(-2, 2, (300, 6))
    first = f.batch(xs)
    second = f.batch(xs)
    assert children == [("tapejit.replay.rows", "float64")]       # one compile, not one per batch
    assert f.stats()["batch"] == [{"path": "per-row", "rows": "compiling", "reason": None,
                                   "compile_seconds": None, "from_cache": None, "tier2": TIER2_OFF}]
    release.set()
    _build_done()
    third = f.batch(xs)
    stats = f.stats()["batch"][0]
    assert stats["path"] == "rows" and stats["rows"] == "ready" and stats["from_cache"] is False, stats
    for result in (second, third):     # the row module gives the per-row path's bits
        np.testing.assert_array_equal(result[0], first[0])
        np.testing.assert_array_equal(result[1], first[1])
    assert not uncached


def test_a_failed_compile_leaves_batches_row_by_row_and_says_why(uncached, monkeypatch):
    def compile_in_child(module, dtype):
        raise RuntimeError("the compiling process exited with 1: MemoryError")
    monkeypatch.setattr(tier2, "compile_in_child", compile_in_child)
    f = tj.compile(tj.value_and_grad(_rosen))
    xs = np.random.default_rng(1).uniform(-2, 2, (40, 4))
    values, grads = f.batch(xs)
    _build_done()
    again = f.batch(xs)
    stats = f.stats()["batch"][0]
    assert stats["path"] == "per-row" and stats["rows"] == "failed", stats
    assert stats["reason"] == "RuntimeError: the compiling process exited with 1: MemoryError"
    assert len(uncached) == 1 and stats["reason"] in uncached[0]        # warned once
    np.testing.assert_array_equal(again[0], values)
    # torch: rosenbrock's gradient, d/dx_i of 100 (x_{i+1} - x_i^2)^2 + (1 - x_i)^2 summed
    t = xs[:, 1:] - xs[:, :-1] ** 2
    expected = np.zeros_like(xs)
    expected[:, :-1] = -400 * xs[:, :-1] * t - 2 * (1 - xs[:, :-1])
    expected[:, 1:] += 200 * t
    np.testing.assert_allclose(grads, expected, rtol=1e-12, atol=1e-12)


def test_the_real_compiling_process_runs_then_batches_use_the_module(uncached):
    """The real child process (``python -m tapejit.replay.rows float64``, at the lowest
    priority) with this process's tapejit and cache folder.  The module is in the cache
    (``warm`` here: a load, or on a cold cache the compile a sync test makes), so the child
    only loads it, in a second or two."""
    rows.warm("float64")
    f = tj.compile(tj.value_and_grad(_rosen))
    xs = np.random.default_rng(2).uniform(-2, 2, (20, 3))
    expected = f.batch(xs)
    _build_done()
    stats = f.stats()["batch"][0]
    assert stats["rows"] == "ready" and stats["reason"] is None, stats
    result = f.batch(xs)
    assert f.stats()["batch"][0]["path"] == "rows"
    np.testing.assert_array_equal(result[1], expected[1])


def test_mode_off_and_a_second_batch_of_a_loaded_module():
    """Mode off replays row by row; once the module is loaded (here by mode sync), a batch
    in the default mode runs it at once."""
    f = tj.compile(tj.value_and_grad(_rosen))
    xs = np.random.default_rng(3).uniform(-2, 2, (20, 3))
    before = batch.ROWS
    try:
        batch.ROWS = "off"
        off = f.batch(xs)
        assert f.stats()["batch"][0] == {"path": "per-row", "rows": "off", "reason": "TAPEJIT_BATCH_ROWS=off",
                                         "compile_seconds": None, "from_cache": None, "tier2": None}
        batch.ROWS = "sync"
        f.batch(xs)
        batch.ROWS = "on"
        on = f.batch(xs)
    finally:
        batch.ROWS = before
    assert f.stats()["batch"][0]["path"] == "rows"
    np.testing.assert_array_equal(on[1], off[1])


def test_default_mode_reads_the_environment(monkeypatch):
    for value, mode in (("0", "off"), ("off", "off"), ("sync", "sync"), ("on", "on"), ("", "on")):
        monkeypatch.setenv("TAPEJIT_BATCH_ROWS", value)
        assert rows.default_mode() == mode


def test_compiling_processes_take_turns(monkeypatch):
    """The compiling process (``compile_alone``) waits while another holds the dtype's lock
    (a first run's compile still going on), then only loads what that one cached.  Run here
    in a thread (the module is loaded, so ``warm`` takes milliseconds once it may go on)."""
    fcntl = pytest.importorskip("fcntl")
    monkeypatch.setattr(tier2, "lowest_priority", lambda: None)     # not this test process
    rows.warm("float64")
    waiter = threading.Thread(target=rows.compile_alone, args=("float64",))
    with open(os.path.join(_numba_load.cache_dir(), "rows.float64.lock"), "ab") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        waiter.start()
        waiter.join(0.5)
        assert waiter.is_alive()
    waiter.join(30)
    assert not waiter.is_alive()


def test_a_new_process_loads_the_cached_module_at_its_first_batch():
    rows.warm("float64")          # in the disk cache (a load here, or a compile on a cold cache)
    script = ("import numpy as np, tapejit as tj\n"
              "f = tj.compile(tj.value_and_grad(lambda x: (x * x).sum()))\n"
              "g = f.batch(np.ones((3, 2)))[1]\n"
              "s = f.stats()['batch'][0]\n"
              "print(s['path'], s['rows'], s['from_cache'], g.tolist())\n")
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(tj.__file__)))
    env = dict(os.environ, TAPEJIT_BATCH_ROWS="on", TAPEJIT_CACHE_DIR=_numba_load.cache_dir(),
               PYTHONPATH=os.pathsep.join([package_parent, os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split(None, 3)[:3] == ["rows", "ready", "True"], out.stdout
    assert out.stdout.split(None, 3)[3].strip() == "[[2.0, 2.0], [2.0, 2.0], [2.0, 2.0]]"   # torch: d/dx sum(x*x) = 2x
