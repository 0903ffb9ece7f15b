"""JAX's compile time, reported apart from its run times (SPEC.md section 5's groups time
the compiled functions only).

Each benchmark traces, lowers and XLA-compiles one problem anew, once
(``pedantic(rounds=1)``: compiles take seconds).  The compiled function is kept and the
run benchmarks reuse it.  Correctness is checked by the run benchmarks, which call the
same compiled functions; here the result is checked once on its example arguments.

The 10,000-op scalar graph takes about 4 minutes to compile on a 2-vCPU machine: it runs
only with ``TAPEJIT_BENCH_JAX_10K=1``.
"""
import os

import numpy as np
import peers_functional as P
import pytest
import targets as T
import workloads as W

PROBLEMS = {
    "A 1,000 ops": ("A", 1_000),
    "A 10,000 ops": ("A", 10_000),
    "B tiny MLP step": ("B", W.TINY_MLP),
    "B 784-128-10 MLP step": ("B", W.MNIST_MLP),
    "C n=10": ("C", 10),
    "C n=1,000,000": ("C", 1_000_000),
    "C value_and_grad n=10": ("C value_and_grad", 10),
    "C value_and_grad n=1,000,000": ("C value_and_grad", 1_000_000),
}


def _check(key, compiled, args):
    kind, size = key
    out = compiled(*args)
    if kind == "A":
        value, grads = out
        assert np.isfinite(float(value)) and np.isfinite(np.asarray(grads)).all()
    elif kind == "C":
        W.assert_rosen_grad_ok(np.asarray(out), W.rosen_point(size), f"jax compiled {key}")
    elif kind == "C value_and_grad":
        value, grad = out
        x = W.rosen_point(size)
        W.assert_rosen_grad_ok(np.asarray(grad), x, f"jax compiled {key}")
        np.testing.assert_allclose(float(value), W.rosen_value(x), rtol=1e-12)
    else:
        _layers, loss = out
        ref_loss, _ = W.mlp_numpy_loss_and_grads(size, W.mlp_init(size), *W.mlp_batch(size))
        np.testing.assert_allclose(float(loss), ref_loss, rtol=1e-5)


@pytest.mark.parametrize("problem", tuple(PROBLEMS))
@pytest.mark.parametrize("peer", ("jax",), indirect=True)
def test_jax_compile(peer, benchmark, problem):
    key = PROBLEMS[problem]
    if key == ("A", 10_000) and os.environ.get("TAPEJIT_BENCH_JAX_10K") != "1":
        pytest.skip("JAX compiles the 10,000-op scalar graph in minutes; "
                    "set TAPEJIT_BENCH_JAX_10K=1 to include it")
    benchmark.group = T.GROUP_JAX_COMPILE
    compiled = benchmark.pedantic(P.compile_jax, args=(key,), rounds=1, iterations=1)
    _check(key, compiled, P.jax_compiled(key)[1])
