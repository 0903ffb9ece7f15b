"""Benchmark workloads, written once and run with every peer library.

The tensor-API peers (tapejit and PyTorch) share one definition of each workload: the
code receives a ``Lib`` (the tensor module and its ``nn.functional``) and only uses names
both libraries have.  The functional peers (JAX, HIPS autograd) need the same maths as a
pure function of arrays; those versions are in ``peers_functional.py``.  The hand-written
gradients here (plain Python for A, NumPy for B and C) are the "no autograd at all" limit
and the references the checks compare against.  SPEC.md section 5 refers to these
definitions.

* Workload A -- A. Rogozhnikov's scalar graph ("Fastest Autograd in the West", 2023):
  100 float64 0-d inputs, ``n_ops`` scalar ops (softplus, 4-term sums, products, 4-way
  softmax), gradient of the last node with respect to the inputs.
* Workload B -- one SGD training step of a small MLP written with ``nn.Sequential``,
  ``nn.Linear``, ``nn.MSELoss`` / ``nn.CrossEntropyLoss`` and ``optim.SGD``.
* Workload C -- the extended Rosenbrock function's gradient, via tensor ops and
  ``.backward()``, against hand-written NumPy and ``scipy.optimize.rosen_der``.
* Start-up -- a fresh interpreter that imports the library and takes one tiny gradient.
* Replay -- A, B and C again under ``tj.compile`` (traced once, then replayed in one
  compiled call): ``scalar_graph_fn``, ``ReplayMLP``, ``rosen`` with
  ``rosen_value_and_grad_numpy`` as the hand-written reference.

Nothing here imports a peer library at module import time, so this file loads without
torch, JAX or autograd installed; ``library(name)`` imports on demand.
"""
import functools
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
    "jax": ("jax", "pip install jax"),
    "autograd": ("autograd", "HIPS autograd: pip install autograd"),
    "numpy": ("numpy", "pip install numpy"),
    "scipy": ("scipy.optimize", "pip install scipy"),
    # the hand-written reverse sweep of workload A, in plain Python floats
    "python": ("math", "part of Python"),
}

#: peers with a PyTorch-style tensor API (``.backward()``, ``.grad``, ``nn``, ``optim``)
AUTOGRAD_PEERS = ("tapejit", "torch")
#: peers that differentiate a pure function of arrays (see ``peers_functional.py``)
FUNCTIONAL_PEERS = ("jax", "autograd")
#: the functional peers' workloads by name (scalar_graph_timed, mlp_trainer, rosen_grad_fn):
#: peers_functional.py adds them at its import (conftest.py and memory_probe.py import it), so
#: that this module, which it builds on, does not import it back
FUNCTIONAL = {}


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
    if name == "jax":
        import jax.numpy as jnp
        return Lib(name, jnp, None)
    if name == "autograd":
        import autograd.numpy as anp
        return Lib(name, anp, None)
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


def scalar_graph_timed(lib, n_ops):
    """``(step, grads_of)`` for peer ``lib``: ``step()`` is one timed iteration of workload
    A (inputs to input gradients), ``grads_of(step())`` its input gradients as float64
    NumPy, NaN for inputs the output does not reach (functional peers give 0 there)."""
    if lib.name in AUTOGRAD_PEERS:
        return (lambda: scalar_graph_step(lib, n_ops)), input_grads
    if lib.name == "python":
        return (lambda: scalar_graph_reference(n_ops)), np.asarray
    return FUNCTIONAL["scalar_graph_timed"](lib.name, n_ops)


def scalar_graph_fn(tl, F, n_ops):
    """Workload A as a numeric function of one 100-vector, for ``tj.compile(tj.value_and_grad(f))``:
    ``f(x)`` unbinds ``x``'s tensor into the 100 inputs, builds the same graph as ``scalar_graph``
    and returns the last node."""
    def scalar_graph(x):
        # Inside tj.value_and_grad x is a NumPy-mode traced array; the graph is written with
        # tapejit's torch-style API, which takes the tensor it holds.
        from tapejit.numpy_mode import to_tensor
        return demo.scalar_graph(tl, F, n_ops, list(to_tensor(x).unbind(0)))[1]
    return scalar_graph


@functools.cache
def _reference_grads(n_ops):
    return scalar_graph_reference(n_ops)


def check_scalar_graph(lib):
    """Input gradients at ``A_CHECK_OPS`` ops equal the pure-Python reference and, for
    tapejit, PyTorch's (when installed); relative tolerance, reached inputs only.

    Functional peers return 0, not "no gradient", for inputs the output does not reach.
    """
    step, grads_of = scalar_graph_timed(lib, A_CHECK_OPS)
    got = grads_of(step())
    expected = _reference_grads(A_CHECK_OPS)
    if lib.name in FUNCTIONAL_PEERS:
        expected = np.nan_to_num(expected, nan=0.0)
    assert_grads_close(got, expected, f"{lib.name} vs Python reference, workload A at {A_CHECK_OPS} ops")
    if lib.name == "tapejit":
        try:
            torch_lib = library("torch")
        except ImportError:
            return
        assert_grads_close(got, scalar_graph_grads(torch_lib, A_CHECK_OPS),
                           f"{lib.name} vs torch, workload A at {A_CHECK_OPS} ops")


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
# Workload B: one SGD step of a small MLP

class MLPSpec(NamedTuple):
    """An MLP and its training step: layer ``sizes``, hidden ``activation``, ``loss``."""
    sizes: tuple
    activation: str    # "tanh" or "relu", after every layer but the last
    loss: str          # "mse" or "cross_entropy" (mean over the batch)
    batch: int
    lr: float


TINY_MLP = MLPSpec((2, 16, 16, 1), "tanh", "mse", 32, 0.05)
MNIST_MLP = MLPSpec((784, 128, 10), "relu", "cross_entropy", 64, 0.01)


def mlp_init(spec, seed=0):
    """``[(W, b), ...]`` float32, PyTorch's layout (W is out x in) and default init range."""
    rng = np.random.default_rng(seed)
    params = []
    for fan_in, fan_out in zip(spec.sizes[:-1], spec.sizes[1:]):
        bound = 1.0 / math.sqrt(fan_in)
        params.append((rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32),
                       rng.uniform(-bound, bound, fan_out).astype(np.float32)))
    return params


def mlp_batch(spec, seed=1):
    """One fixed batch ``(x, y)``: float32 inputs; float32 targets (MSE) or int64 labels."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((spec.batch, spec.sizes[0])).astype(np.float32)
    if spec.loss == "mse":
        y = rng.standard_normal((spec.batch, spec.sizes[-1])).astype(np.float32)
    else:
        y = rng.integers(0, spec.sizes[-1], spec.batch).astype(np.int64)
    return x, y


def flat_params(params):
    """``[(W, b), ...]`` -> ``[W1, b1, W2, b2, ...]`` (``Module.parameters()`` order)."""
    return [array for layer in params for array in layer]


def missing_module_api(lib):
    """Why ``lib`` cannot run workload B yet (its ``nn``/``optim`` names), or None."""
    try:
        optim = importlib.import_module(f"{lib.tl.__name__}.optim")
        nn = importlib.import_module(f"{lib.tl.__name__}.nn")
    except ImportError:
        return f"{lib.tl.__name__}.optim not available yet"
    for module, names in ((nn, ("Sequential", "Linear", "Tanh", "ReLU", "MSELoss", "CrossEntropyLoss")),
                          (optim, ("SGD",))):
        for name in names:
            if not hasattr(module, name):
                return f"{module.__name__}.{name} not available yet"
    return None


class ModuleMLP:
    """Workload B written with the module API; the same code for tapejit and torch.

    ``step()`` is one training step as a user writes it: zero the gradients, forward,
    loss, backward, ``optimizer.step()``.  It returns the loss tensor (not ``.item()``:
    a training loop does not have to sync on the loss every step).
    """

    def __init__(self, lib, spec, params, x, y):
        tl = lib.tl
        nn = importlib.import_module(f"{tl.__name__}.nn")
        optim = importlib.import_module(f"{tl.__name__}.optim")
        layers = []
        for i, (weight, bias) in enumerate(params):
            linear = nn.Linear(weight.shape[1], weight.shape[0])
            with tl.no_grad():    # start from the shared initial values
                linear.weight.copy_(tl.from_numpy(weight.copy()))
                linear.bias.copy_(tl.from_numpy(bias.copy()))
            layers.append(linear)
            if i < len(params) - 1:
                layers.append(nn.Tanh() if spec.activation == "tanh" else nn.ReLU())
        self.model = nn.Sequential(*layers)
        self.loss_fn = nn.MSELoss() if spec.loss == "mse" else nn.CrossEntropyLoss()
        self.optimizer = optim.SGD(self.model.parameters(), lr=spec.lr)
        self.x = tl.from_numpy(x)
        self.y = tl.from_numpy(y)

    def step(self):
        self.optimizer.zero_grad()
        loss = self.loss_fn(self.model(self.x), self.y)
        loss.backward()
        self.optimizer.step()
        return loss

    def loss_value(self, loss):
        return float(loss.item())

    def params(self):
        return [p.detach().numpy().copy() for p in self.model.parameters()]


def mlp_numpy_loss_and_grads(spec, params, x, y):
    """Hand-written forward and backward of the MLP loss; ``(loss, [(gW, gb), ...])``.

    float32 throughout (NumPy 2 keeps float32 with Python scalars).
    """
    activations = [x]                  # input of each layer
    h = x
    for i, (weight, bias) in enumerate(params):
        h = h @ weight.T + bias
        if i < len(params) - 1:
            h = np.tanh(h) if spec.activation == "tanh" else np.maximum(h, 0)
            activations.append(h)
    if spec.loss == "mse":
        diff = h - y
        loss = np.mean(diff * diff)
        d_out = diff * (2.0 / diff.size)
    else:
        shifted = h - h.max(axis=1, keepdims=True)
        exp = np.exp(shifted)
        total = exp.sum(axis=1, keepdims=True)
        rows = np.arange(len(y))
        loss = np.mean(np.log(total[:, 0]) - shifted[rows, y])
        d_out = exp / total
        d_out[rows, y] -= 1.0
        d_out *= 1.0 / len(y)
    grads = [None] * len(params)
    for i in range(len(params) - 1, -1, -1):
        weight = params[i][0]
        grads[i] = (d_out.T @ activations[i], d_out.sum(axis=0))
        if i > 0:
            d_h = d_out @ weight
            a = activations[i]
            d_out = d_h * (1.0 - a * a) if spec.activation == "tanh" else d_h * (a > 0)
    return float(loss), grads


class NumpyMLP:
    """Workload B with the hand-written gradient: the limit with no autograd at all."""

    def __init__(self, spec, params, x, y):
        self.spec, self.x, self.y = spec, x, y
        self.layers = [(w.copy(), b.copy()) for w, b in params]

    def step(self):
        loss, grads = mlp_numpy_loss_and_grads(self.spec, self.layers, self.x, self.y)
        lr = self.spec.lr
        for (weight, bias), (g_weight, g_bias) in zip(self.layers, grads):
            weight -= lr * g_weight     # in place, as optim.SGD does
            bias -= lr * g_bias
        return loss

    def loss_value(self, loss):
        return loss

    def params(self):
        return [a.copy() for a in flat_params(self.layers)]


class ReplayMLP(ModuleMLP):
    """Workload B's step under ``tj.compile`` (tapejit only): the compiled function does
    ``zero_grad()``, forward, loss and ``backward()`` and returns the loss;
    ``optimizer.step()`` runs outside it, between calls, as ``tj.compile`` asks.

    The constructor makes the first call, which traces (it computes gradients but updates
    nothing), so every ``step()`` is a replay: ``traces`` stays 1.  The batch is passed
    as arguments, as a training loop would; the cross-entropy labels are replay inputs
    too (tapejit/replay/labels.py), so a new batch of the same shape would replay.
    """

    def __init__(self, lib, spec, params, x, y):
        if lib.name != "tapejit":
            raise ValueError(f"ReplayMLP runs tapejit's tj.compile, not {lib.name}")
        super().__init__(lib, spec, params, x, y)
        self.compiled = lib.tl.compile(self._forward_backward)
        self.compiled(self.x, self.y)

    def _forward_backward(self, x, y):
        self.optimizer.zero_grad()
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return loss

    def step(self):
        loss = self.compiled(self.x, self.y)
        self.optimizer.step()
        return loss

    @property
    def traces(self):
        return self.compiled.stats()["traces"]


def mlp_trainer(lib, spec, params=None, batch=None):
    """A trainer (``step()``, ``loss_value(loss)``, ``params()``) for peer ``lib``."""
    params = mlp_init(spec) if params is None else params
    x, y = mlp_batch(spec) if batch is None else batch
    if lib.name in AUTOGRAD_PEERS:
        return ModuleMLP(lib, spec, params, x, y)
    if lib.name == "numpy":
        return NumpyMLP(spec, params, x, y)
    return FUNCTIONAL["mlp_trainer"](lib.name, spec, params, x, y)


def assert_mlp_step_ok(trainer, spec, what):
    """One step from ``mlp_init``: the loss and the parameter update equal the NumPy
    analytic step's (float32: relative 1e-4, update entries near 0 within 1e-4 of the
    largest update).  Checking the update checks the gradient and SGD's rule together."""
    params = mlp_init(spec)
    x, y = mlp_batch(spec)
    ref_loss, ref_grads = mlp_numpy_loss_and_grads(spec, params, x, y)
    before = trainer.params()
    for got, want in zip(before, flat_params(params)):
        np.testing.assert_array_equal(got, want, err_msg=f"{what}: initial parameters")
    loss = trainer.loss_value(trainer.step())
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5, err_msg=f"{what}: loss")
    after = trainer.params()
    assert len(after) == len(before), (what, len(after), len(before))
    for k, (b, a, g) in enumerate(zip(before, after, flat_params(ref_grads))):
        assert a.dtype == np.float32 and a.shape == b.shape, (what, k, a.dtype, a.shape)
        want = -spec.lr * g
        np.testing.assert_allclose(a - b, want, rtol=1e-4, atol=1e-4 * np.abs(want).max(),
                                   err_msg=f"{what}: SGD update of parameter {k}")


def assert_mlp_trained(trainer, spec, what):
    """After some steps on the one batch: every parameter is finite and the loss
    (recomputed in NumPy from the trainer's parameters) is below the initial loss."""
    flat = trainer.params()
    assert all(np.isfinite(p).all() for p in flat), what
    layers = list(zip(flat[::2], flat[1::2]))
    x, y = mlp_batch(spec)
    first = mlp_numpy_loss_and_grads(spec, mlp_init(spec), x, y)[0]
    last = mlp_numpy_loss_and_grads(spec, layers, x, y)[0]
    assert last < first, (what, first, last)


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


def rosen_value_and_grad_numpy(x):
    """``(value, gradient)`` by hand, sharing ``t`` between them: the reference for
    ``tj.compile(tj.value_and_grad(rosen))``."""
    a = x[:-1]
    t = x[1:] - a * a
    u = 1.0 - a
    value = float(100.0 * np.dot(t, t) + np.dot(u, u))
    g = np.empty_like(x)
    g[:-1] = -400.0 * a * t - 2.0 * u
    g[-1] = 0.0
    g[1:] += 200.0 * t
    return value, g


def rosen_grad_autograd(lib):
    """``x_np -> gradient`` through ``lib``'s tensors and ``.backward()`` (NumPy result)."""
    tl = lib.tl

    def grad(x_np):
        x = tl.from_numpy(x_np).requires_grad_()
        rosen(x).backward()
        return x.grad.numpy()
    return grad


def rosen_grad_fn(lib, x):
    """``(grad, arg)``: the gradient function peer ``lib`` is timed on, and its argument
    for the point ``x`` (NumPy).  ``grad(arg)`` returns the gradient as an array.

    The tensor-API peers take NumPy and return NumPy (``from_numpy`` shares memory);
    JAX takes an array already on its device and returns one (no host copies timed).
    """
    if lib.name in AUTOGRAD_PEERS:
        return rosen_grad_autograd(lib), x
    if lib.name == "numpy":
        return rosen_grad_numpy, x
    if lib.name == "scipy":
        return lib.tl.rosen_der, x
    return FUNCTIONAL["rosen_grad_fn"](lib.name, x)


def rosen_forward_fn(lib):
    """``x_np -> (x, loss)``: the forward pass only, with the value computed.

    Tensor-API peers record the graph (``x`` requires grad) and read ``loss.item()``:
    tapejit computes forward values lazily, and ``item()`` forces them.  NumPy
    evaluates ``rosen`` on arrays.  With ``rosen_backward`` this gives the
    backward/forward cost ratio.
    """
    if lib.name == "numpy":
        return lambda x_np: (x_np, float(rosen(x_np)))
    tl = lib.tl

    def forward(x_np):
        x = tl.from_numpy(x_np).requires_grad_()
        loss = rosen(x)
        loss.item()
        return x, loss
    return forward


def rosen_backward(x, loss):
    """The backward pass of a recorded ``rosen_forward_fn``; returns the gradient."""
    loss.backward()
    return x.grad


def rosen_value(x):
    """The reference value of ``rosen`` at ``x``, in Python floats summed by ``math.fsum``."""
    a, b = x[:-1], x[1:]
    return math.fsum(100.0 * (b - a * a) ** 2 + (1.0 - a) ** 2)


def assert_rosen_grad_ok(grad, x, what):
    """``grad`` equals ``scipy.optimize.rosen_der(x)`` (tolerance relative to its scale)."""
    from scipy.optimize import rosen_der
    ref = rosen_der(x)
    grad = np.asarray(grad)
    assert grad.shape == ref.shape and grad.dtype == np.float64, (what, grad.shape, grad.dtype)
    np.testing.assert_allclose(grad, ref, rtol=1e-10, atol=1e-12 * np.abs(ref).max(), err_msg=what)


# ---------------------------------------------------------------------------------------
# Start-up: import + first gradient in a fresh interpreter

#: per library: the import and a tiny float64 gradient of sum(x*x + exp(x)), as ``g``
_STARTUP_BODY = {
    "tensor": """\
import {module} as tl
x = tl.tensor([0.5, -1.0, 2.0], dtype=tl.float64, requires_grad=True)
y = (x * x + x.exp()).sum()
y.backward()
g = [float(v) for v in x.grad.tolist()]
""",
    "jax": """\
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
g = jax.grad(lambda x: (x * x + jnp.exp(x)).sum())(jnp.array([0.5, -1.0, 2.0]))
g = [float(v) for v in g]
""",
    "autograd": """\
import autograd
import autograd.numpy as anp
g = autograd.grad(lambda x: (x * x + anp.exp(x)).sum())(anp.array([0.5, -1.0, 2.0]))
g = [float(v) for v in g]
""",
}

_STARTUP = """\
import time
t0 = time.perf_counter()
{body}t1 = time.perf_counter()
import math
expected = [2 * v + math.exp(v) for v in (0.5, -1.0, 2.0)]
assert all(abs(a - b) <= 1e-12 * abs(b) for a, b in zip(g, expected)), (g, expected)
print("IN_PROCESS_S", t1 - t0)
"""


def startup_script(name):
    """Source of the start-up program for peer ``name`` (prints ``IN_PROCESS_S <s>``)."""
    body = _STARTUP_BODY.get(name) or _STARTUP_BODY["tensor"].format(module=PEERS[name][0])
    return _STARTUP.format(body=body)
