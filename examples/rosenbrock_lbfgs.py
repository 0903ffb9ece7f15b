"""Minimise the 100-dimensional Rosenbrock function with SciPy's L-BFGS-B, gradients by tapejit.

``rosen`` is plain NumPy; ``tj.value_and_grad(rosen)`` records its NumPy calls on the tape
and returns ``(value, gradient)`` in the form ``scipy.optimize.minimize(..., jac=True)``
expects.  The gradient is checked once against SciPy's analytic ``rosen_der``.

Run: python examples/rosenbrock_lbfgs.py
"""
import time

import numpy as np
from scipy.optimize import minimize, rosen_der

import tapejit as tj


def rosen(x):
    """The extended Rosenbrock function sum(100 (x[i+1] - x[i]^2)^2 + (1 - x[i])^2); its
    minimum is 0 at x = (1, ..., 1)."""
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def starting_point(n):
    """The classical start (-1.2, 1, -1.2, 1, ...)."""
    x0 = np.ones(n)
    x0[::2] = -1.2
    return x0


def gradient_error(n=100, seed=0):
    """Largest relative difference between tapejit's gradient and SciPy's ``rosen_der`` at a
    random point."""
    x = np.random.default_rng(seed).uniform(-2.0, 2.0, n)
    _, gradient = tj.value_and_grad(rosen)(x)
    reference = rosen_der(x)
    return float(np.max(np.abs(gradient - reference)) / np.max(np.abs(reference)))


def minimise(n=100, max_iterations=15000):
    """Run L-BFGS-B from the classical start; returns SciPy's result and the number of
    ``value_and_grad`` calls with the seconds they took in total."""
    value_and_grad = tj.value_and_grad(rosen)
    calls = {"count": 0, "seconds": 0.0}

    def timed_value_and_grad(x):
        start = time.perf_counter()
        result = value_and_grad(x)
        calls["seconds"] += time.perf_counter() - start
        calls["count"] += 1
        return result

    result = minimize(timed_value_and_grad, starting_point(n), jac=True, method="L-BFGS-B",
                      options={"maxiter": max_iterations, "gtol": 1e-9, "ftol": 1e-15})
    return result, calls["count"], calls["seconds"]


if __name__ == "__main__":
    n = 100
    print(f"gradient vs scipy.optimize.rosen_der: max relative difference {gradient_error(n):.2e}")
    result, calls, seconds = minimise(n)
    print(f"L-BFGS-B: {result.message}")
    print(f"iterations {result.nit}, function+gradient evaluations {calls}")
    print(f"final value {result.fun:.3e}, distance to the optimum |x - 1| = {np.linalg.norm(result.x - 1.0):.3e}")
    print(f"time per value_and_grad call {1e6 * seconds / calls:.1f} us")
