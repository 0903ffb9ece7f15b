"""Core benchmarks: tapejit side by side with its peers (SPEC.md section 5).

Every benchmark first checks that the peer computes the right gradient, then times it.
``pytest bench --benchmark-disable`` runs only the checks (each timed body once);
``pytest bench --benchmark-only`` times.  Groups put peers next to each other; the
conftest prints the ratios per group after pytest-benchmark's table.
"""
import functools
import gc
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import workloads as W

A_SIZES = (1_000, 10_000)
A_BIG = 10_000
C_SIZES = (10, 1_000_000)
ROSEN_PEERS = ("tapejit", "torch", "numpy", "scipy")
#: rounds for the pedantic benchmarks (each round records a fresh 10,000-op graph)
PHASE_ROUNDS = {"tapejit": 30, "torch": 8}
STARTUP_ROUNDS = 5


@functools.lru_cache(maxsize=None)
def _reference_grads():
    return W.scalar_graph_reference(W.A_CHECK_OPS)


def check_scalar_graph(lib):
    """Input gradients at ``A_CHECK_OPS`` ops equal the pure-Python reference and, for
    tapejit, PyTorch's (when installed); relative tolerance, reached inputs only."""
    got = W.scalar_graph_grads(lib, W.A_CHECK_OPS)
    W.assert_grads_close(got, _reference_grads(), f"{lib.name} vs Python reference, "
                                                  f"workload A at {W.A_CHECK_OPS} ops")
    if lib.name != "torch":
        try:
            torch_lib = W.library("torch")
        except ImportError:
            return
        W.assert_grads_close(got, W.scalar_graph_grads(torch_lib, W.A_CHECK_OPS),
                             f"{lib.name} vs torch, workload A at {W.A_CHECK_OPS} ops")


# ---------------------------------------------------------------------------------------
# A: eager, record + backward every iteration, garbage collector on

@pytest.mark.parametrize("n_ops", A_SIZES)
@pytest.mark.parametrize("peer", W.AUTOGRAD_PEERS, indirect=True)
def test_scalar_graph_eager(peer, benchmark, n_ops):
    check_scalar_graph(peer)
    assert gc.isenabled(), "workload A is timed with Python's garbage collector on"
    benchmark.group = W.GROUP_A_EAGER.format(n=n_ops)
    benchmark.extra_info["n_ops"] = n_ops
    inputs = benchmark(W.scalar_graph_step, peer, n_ops)
    grads = W.input_grads(inputs)      # the gradient underflows: only sanity-check it
    assert np.isfinite(grads[~np.isnan(grads)]).all()


# ---------------------------------------------------------------------------------------
# A: the phases of one 10,000-op graph, timed separately

def _record_flushed(lib, n_ops):
    """Record workload A; for tapejit also run the lazy forward (``tape.flush()``)."""
    inputs, out = W.scalar_graph(lib, n_ops)
    if lib.name == "tapejit":
        out._tape.flush()
    return inputs, out


def _tape_records(out):
    tape = out._tape
    tape.flush()
    return tape.nrec


def _per_record(benchmark, n_records):
    benchmark.extra_info["records"] = n_records
    stats = getattr(benchmark, "stats", None)
    if stats is not None and n_records:
        benchmark.extra_info["ns_per_record"] = round(stats.stats.mean * 1e9 / n_records, 2)
        benchmark.extra_info["ns_per_record_median"] = round(stats.stats.median * 1e9 / n_records, 2)


@pytest.mark.parametrize("peer", W.AUTOGRAD_PEERS, indirect=True)
def test_scalar_graph_backward_only(peer, benchmark):
    """``out.backward()`` alone on a recorded (and, for tapejit, flushed) graph."""
    check_scalar_graph(peer)
    benchmark.group = W.GROUP_A_BACKWARD
    n_records = []

    def setup():
        inputs, out = _record_flushed(peer, A_BIG)
        if peer.name == "tapejit":
            n_records.append(_tape_records(out))
        return (out,), {}

    def backward(out):
        out.backward()
        return out

    out = benchmark.pedantic(backward, setup=setup, rounds=PHASE_ROUNDS[peer.name],
                             warmup_rounds=1, iterations=1)
    assert out is not None
    if peer.name == "tapejit":
        assert len(set(n_records)) == 1, n_records
        _per_record(benchmark, n_records[0])


@pytest.mark.parametrize("peer", W.AUTOGRAD_PEERS, indirect=True)
def test_scalar_graph_record_only(peer, benchmark):
    """Recording alone (tapejit: record + flush, i.e. the forward values are computed)."""
    check_scalar_graph(peer)
    benchmark.group = W.GROUP_A_RECORD
    found = []

    def record():
        inputs, out = _record_flushed(peer, A_BIG)
        if peer.name == "tapejit" and not found:
            found.append(out._tape.nrec)
        return out

    out = benchmark.pedantic(record, rounds=PHASE_ROUNDS[peer.name], warmup_rounds=1, iterations=1)
    out.backward()                     # the recorded graph is usable
    if peer.name == "tapejit":
        _per_record(benchmark, found[0])


# ---------------------------------------------------------------------------------------
# C: extended Rosenbrock gradient, float64

@pytest.mark.parametrize("n", C_SIZES)
@pytest.mark.parametrize("peer", ROSEN_PEERS, indirect=True)
def test_rosenbrock_grad(peer, benchmark, n):
    x = W.rosen_point(n)
    grad = W.rosen_grad_fn(peer)
    W.assert_rosen_grad_ok(grad(x), x, f"{peer.name} Rosenbrock gradient, n={n}")
    benchmark.group = W.GROUP_C.format(n=n)
    benchmark.extra_info["n"] = n
    if n >= 100_000:
        g = benchmark.pedantic(grad, args=(x,), rounds=15, warmup_rounds=1, iterations=1)
    else:
        g = benchmark(grad, x)
    W.assert_rosen_grad_ok(g, x, f"{peer.name} Rosenbrock gradient (timed call), n={n}")


# ---------------------------------------------------------------------------------------
# start-up: a fresh interpreter imports the library and takes its first gradient

def _run_startup(name, env=None):
    proc = subprocess.run([sys.executable, "-c", W.startup_script(name)],
                          capture_output=True, text=True, timeout=900, env=env)
    if proc.returncode != 0:
        raise AssertionError(f"{name} start-up script failed ({proc.returncode}):\n{proc.stderr}")
    match = re.search(r"IN_PROCESS_S (\S+)", proc.stdout)
    assert match, proc.stdout
    return float(match.group(1))


@pytest.mark.parametrize("peer", ("tapejit", "torch"), indirect=True)
def test_startup(peer, benchmark):
    """Wall time of ``python -c 'import X; <tiny float64 gradient>'`` with warm caches.

    The first (untimed) run fills Numba's on-disk cache if needed, and the OS file cache.
    ``extra_info["in_process_s"]`` is the import + gradient time measured inside the child.
    """
    benchmark.group = W.GROUP_STARTUP
    if not benchmark.disabled:
        _run_startup(peer.name)        # warm: Numba cache, OS page cache
    inner = []
    benchmark.pedantic(lambda: inner.append(_run_startup(peer.name)),
                       rounds=STARTUP_ROUNDS, iterations=1)
    benchmark.extra_info["in_process_s"] = round(sum(inner) / len(inner), 4)


@pytest.mark.skipif(os.environ.get("TAPEJIT_BENCH_COLD") != "1",
                    reason="cold start compiles every sweep (minutes of CPU); "
                           "set TAPEJIT_BENCH_COLD=1 to run it")
@pytest.mark.parametrize("peer", ("tapejit",), indirect=True)
def test_startup_cold(peer, benchmark, tmp_path):
    """As ``test_startup`` but with an empty Numba cache (``NUMBA_CACHE_DIR`` = a new
    directory per round), so the child compiles the sweeps it uses.  One round."""
    benchmark.group = W.GROUP_STARTUP_COLD
    rounds = []

    def setup():
        cache = tmp_path / f"numba-cache-{len(rounds)}"
        cache.mkdir()
        rounds.append(cache)
        return (peer.name, dict(os.environ, NUMBA_CACHE_DIR=str(cache))), {}

    inner = benchmark.pedantic(_run_startup, setup=setup, rounds=1, iterations=1)
    if inner is not None:
        benchmark.extra_info["in_process_s"] = round(inner, 3)
