"""Benchmark workloads, written once and run with every peer library.

The workload code below is the same for tapejit and PyTorch: it receives a ``Lib``
(the tensor module and its ``nn.functional``) and only uses names both libraries share.
The numbers in SPEC.md section 5 refer to these definitions.

* Workload A -- A. Rogozhnikov's scalar graph ("Fastest Autograd in the West", 2023):
  100 float64 0-d inputs, ``n_ops`` scalar ops (softplus, 4-term sums, products, 4-way
  softmax), gradient of the last node with respect to the inputs.
* Workload C -- the extended Rosenbrock function's gradient, via tensor ops and
  ``.backward()``, against hand-written NumPy and ``scipy.optimize.rosen_der``.
* Start-up -- a fresh interpreter that imports the library and takes one tiny gradient.

Nothing here imports a peer library at module import time, so this file loads without
torch installed; ``library(name)`` imports on demand.
"""
import importlib
import math
from typing import NamedTuple

import numpy as np

from tapejit import demo

# ---------------------------------------------------------------------------------------
# peers

#: peer name -> (module to import, pip hint shown when it is missing)
PEERS = {
    "tapejit": ("tapejit", "pip install -e ."),
    "torch": ("torch", "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"),
    "numpy": ("numpy", "pip install numpy"),
    "scipy": ("scipy.optimize", "pip install scipy"),
}

AUTOGRAD_PEERS = ("tapejit", "torch")


class Lib(NamedTuple):
    """A peer library: ``name``, its tensor module ``tl`` and its ``nn.functional`` ``F``."""
    name: str
    tl: object
    F: object


def library(name):
    """The ``Lib`` for peer ``name`` (imports it; raises ImportError if it is missing)."""
    if name == "tapejit":
        import tapejit
        import tapejit.nn.functional as F
        return Lib(name, tapejit, F)
    if name == "torch":
        import torch
        import torch.nn.functional as F
        return Lib(name, torch, F)
    return Lib(name, importlib.import_module(PEERS[name][0]), None)


# ---------------------------------------------------------------------------------------
# Workload A: the scalar graph

N_INPUTS = 100
#: size at which gradients are checked: the gradient underflows as the graph grows
#: (largest |grad| is about 2e-8 at 200 ops, 3e-35 at 1,000, exactly 0 at 10,000)
A_CHECK_OPS = 200


def scalar_inputs(lib):
    """x_i = i/100, float64 0-d tensors that require grad."""
    tl = lib.tl
    return [tl.tensor(i / 100, dtype=tl.float64, requires_grad=True) for i in range(N_INPUTS)]


def scalar_graph(lib, n_ops, inputs=None):
    """Record workload A; returns ``(inputs, output)`` without calling backward."""
    return demo.scalar_graph(lib.tl, lib.F, n_ops, inputs if inputs is not None else scalar_inputs(lib))


def scalar_graph_step(lib, n_ops):
    """One eager iteration of workload A: record, then backward. Returns the inputs."""
    inputs, out = scalar_graph(lib, n_ops)
    out.backward()
    return inputs


def input_grads(inputs):
    """Input gradients as float64 NumPy; NaN where ``.grad`` is None (input not reached)."""
    return np.array([np.nan if x.grad is None else float(x.grad.item()) for x in inputs])


def scalar_graph_grads(lib, n_ops=A_CHECK_OPS):
    return input_grads(scalar_graph_step(lib, n_ops))


def scalar_graph_reference(n_ops=A_CHECK_OPS):
    """Workload A in plain Python floats with a hand-written reverse sweep.

    An independent reference that needs no peer library.  Softplus follows PyTorch's
    definition (beta=1, threshold=20: identity above the threshold).  Unreached inputs
    get NaN, like ``input_grads`` for a ``.grad`` that is None.
    """
    vals = [i / 100 for i in range(N_INPUTS)]
    parents = [()] * N_INPUTS          # node -> ((parent, local derivative), ...)

    def new(value, deps):
        vals.append(value)
        parents.append(deps)
        return len(vals) - 1

    nodes = list(range(N_INPUTS))
    for k in range(n_ops):
        m = k % 4
        if m == 0:
            a = nodes[-10]
            x = vals[a]
            if x > 20.0:
                nodes.append(new(x, ((a, 1.0),)))
            else:
                nodes.append(new(math.log1p(math.exp(x)), ((a, 1.0 / (1.0 + math.exp(-x))),)))
        elif m == 1:
            terms = nodes[-30:-10:5]
            value = 0
            for t in terms:
                value = value + vals[t]
            nodes.append(new(value, tuple((t, 1.0) for t in terms)))
        elif m == 2:
            a, b = nodes[-20], nodes[-10]
            nodes.append(new(vals[a] * vals[b], ((a, vals[b]), (b, vals[a]))))
        else:
            xs = nodes[-4:]
            top = max(vals[t] for t in xs)
            e = [math.exp(vals[t] - top) for t in xs]
            s = sum(e)
            y = [ei / s for ei in e]
            nodes.extend(new(y[i], tuple((xs[j], y[i] * ((i == j) - y[j])) for j in range(4)))
                         for i in range(4))
    adj = [0.0] * len(vals)
    reached = [False] * len(vals)
    adj[nodes[-1]] = 1.0
    reached[nodes[-1]] = True
    for node in range(len(vals) - 1, -1, -1):
        if not reached[node]:
            continue
        g = adj[node]
        for p, d in parents[node]:
            adj[p] += d * g
            reached[p] = True
    return np.array([adj[i] if reached[i] else np.nan for i in range(N_INPUTS)])


def assert_grads_close(actual, expected, what, rtol=1e-9):
    """Same unreached inputs (NaN) and every reached gradient equal within ``rtol``."""
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    miss_a, miss_e = np.isnan(actual), np.isnan(expected)
    if not np.array_equal(miss_a, miss_e):
        raise AssertionError(f"{what}: inputs without a gradient differ: "
                             f"{np.flatnonzero(miss_a).tolist()} vs {np.flatnonzero(miss_e).tolist()}")
    reached = ~miss_e
    if not reached.any():
        raise AssertionError(f"{what}: no input received a gradient")
    np.testing.assert_allclose(actual[reached], expected[reached], rtol=rtol, atol=0, err_msg=what)


# ---------------------------------------------------------------------------------------
# Workload C: extended Rosenbrock

def rosen(x):
    """f(x) = sum(100 (x[1:] - x[:-1]**2)**2 + (1 - x[:-1])**2) on any tensor type."""
    return (100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()


def rosen_point(n, seed=0):
    """The evaluation point: float64, uniform in [-2, 2), fixed seed."""
    return np.random.default_rng(seed).uniform(-2.0, 2.0, n)


def rosen_grad_numpy(x):
    """Hand-written analytic gradient of ``rosen``.

    With t_i = x_{i+1} - x_i**2:  df/dx_i = -400 x_i t_i - 2 (1 - x_i)   (i < n-1)
                                          + 200 t_{i-1}                  (i > 0)
    """
    a = x[:-1]
    t = x[1:] - a * a
    g = np.empty_like(x)
    g[:-1] = -400.0 * a * t - 2.0 * (1.0 - a)
    g[-1] = 0.0
    g[1:] += 200.0 * t
    return g


def rosen_grad_autograd(lib):
    """``x_np -> gradient`` through ``lib``'s tensors and ``.backward()`` (NumPy result)."""
    tl = lib.tl

    def grad(x_np):
        x = tl.from_numpy(x_np).requires_grad_()
        rosen(x).backward()
        return x.grad.numpy()
    return grad


def rosen_grad_fn(lib):
    """The gradient function peer ``lib`` is timed on (all take and return NumPy)."""
    if lib.name in AUTOGRAD_PEERS:
        return rosen_grad_autograd(lib)
    if lib.name == "numpy":
        return rosen_grad_numpy
    if lib.name == "scipy":
        return lib.tl.rosen_der
    raise ValueError(lib.name)


def assert_rosen_grad_ok(grad, x, what):
    """``grad`` equals ``scipy.optimize.rosen_der(x)`` (tolerance relative to its scale)."""
    from scipy.optimize import rosen_der
    ref = rosen_der(x)
    grad = np.asarray(grad)
    assert grad.shape == ref.shape and grad.dtype == np.float64, (what, grad.shape, grad.dtype)
    np.testing.assert_allclose(grad, ref, rtol=1e-10, atol=1e-12 * np.abs(ref).max(), err_msg=what)


# ---------------------------------------------------------------------------------------
# Start-up: import + first gradient in a fresh interpreter

_STARTUP = """\
import time
t0 = time.perf_counter()
import {module} as tl
x = tl.tensor([0.5, -1.0, 2.0], dtype=tl.float64, requires_grad=True)
y = (x * x + x.exp()).sum()
y.backward()
g = [float(v) for v in x.grad.tolist()]
t1 = time.perf_counter()
import math
expected = [2 * v + math.exp(v) for v in (0.5, -1.0, 2.0)]
assert all(abs(a - b) <= 1e-12 * abs(b) for a, b in zip(g, expected)), (g, expected)
print("IN_PROCESS_S", t1 - t0)
"""


def startup_script(name):
    """Source of the start-up program for peer ``name`` (prints ``IN_PROCESS_S <s>``)."""
    return _STARTUP.format(module=PEERS[name][0])


# ---------------------------------------------------------------------------------------
# groups and SPEC section 5 targets (reported by conftest's summary, never asserted)

GROUP_A_EAGER = "A eager {n:,} ops (record + backward)"
GROUP_A_BACKWARD = "A backward only, 10,000 ops"
GROUP_A_RECORD = "A record only (forward), 10,000 ops"
GROUP_C = "C Rosenbrock gradient n={n:,}"
GROUP_STARTUP = "start-up: import + first gradient (warm cache)"
GROUP_STARTUP_COLD = "start-up: import + first gradient (cold cache)"

#: group -> (peer, kind, bound, text).  kind "speedup": peer_time / tapejit_time >= bound;
#: "slowdown": tapejit_time / peer_time <= bound; "seconds": tapejit mean <= bound.
TARGETS = {
    GROUP_A_EAGER.format(n=10_000): ("torch", "speedup", 10.0, "SPEC: >= 10x faster than torch eager"),
    GROUP_C.format(n=10): ("torch", "speedup", 10.0, "SPEC: >= 10x faster than torch eager"),
    GROUP_C.format(n=1_000_000): ("numpy", "slowdown", 1.5, "SPEC: within 1.5x of NumPy analytic"),
    GROUP_STARTUP: ("tapejit", "seconds", 1.0, "SPEC: < 1 s with a warm Numba cache"),
    GROUP_STARTUP_COLD: ("tapejit", "seconds", 20.0, "SPEC: < 20 s with an empty Numba cache"),
}
