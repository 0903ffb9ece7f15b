"""Workloads A, B and C for the functional peers: JAX and HIPS autograd.

Both differentiate a pure function of arrays, so each workload is written once more,
here, as such a function of an array module ``xp`` (``jax.numpy`` or
``autograd.numpy``); the maths is exactly ``workloads.py``'s.

JAX is timed as users run it for speed: ``jax.jit`` of ``jax.value_and_grad`` (or of a
whole training step), compiled ahead of time, called on arrays already on the device,
with ``block_until_ready``.  Its compile time (trace + lower + XLA compile) is measured
separately by ``compile_jax``, so the run times exclude it.  HIPS autograd has no
compiler: it traces in Python on every call, like an eager tape.

Imports of jax and autograd happen inside the functions: this module loads without them.
"""
import workloads as W

# ---------------------------------------------------------------------------------------
# the workloads as pure functions of arrays


def softplus(xp, x):
    """PyTorch's softplus (beta=1, threshold=20: the identity above 20).

    ``minimum`` keeps the unselected branch finite, so its derivative is 0 and not NaN.
    """
    return xp.where(x > 20.0, x, xp.log1p(xp.exp(xp.minimum(x, 20.0))))


def scalar_graph_fn(xp, n_ops):
    """Workload A as ``f(x) -> last node`` for ``x`` the 100 inputs as one float64 array."""
    def scalar_graph(x):
        nodes = [x[i] for i in range(W.N_INPUTS)]
        for k in range(n_ops):
            m = k % 4
            if m == 0:
                nodes.append(softplus(xp, nodes[-10]))
            elif m == 1:
                nodes.append(sum(nodes[-30:-10:5]))
            elif m == 2:
                nodes.append(nodes[-20] * nodes[-10])
            else:
                v = xp.stack(nodes[-4:])
                e = xp.exp(v - xp.max(v))
                y = e / xp.sum(e)
                nodes.extend(y[i] for i in range(4))
        return nodes[-1]
    return scalar_graph


def scalar_inputs_array():
    import numpy as np
    return np.arange(W.N_INPUTS, dtype=np.float64) / 100


def mlp_loss(xp, spec, params, x, y):
    """Workload B's loss for parameters ``[(W, b), ...]`` (PyTorch's layout)."""
    h = x
    for i, (weight, bias) in enumerate(params):
        h = h @ weight.T + bias
        if i < len(params) - 1:
            h = xp.tanh(h) if spec.activation == "tanh" else xp.maximum(h, 0.0)
    if spec.loss == "mse":
        return xp.mean((h - y) ** 2)
    shifted = h - xp.max(h, axis=1, keepdims=True)
    log_probs = shifted - xp.log(xp.sum(xp.exp(shifted), axis=1, keepdims=True))
    return -xp.mean(log_probs[xp.arange(y.shape[0]), y])


def sgd_update(spec, params, grads):
    return [(w - spec.lr * gw, b - spec.lr * gb) for (w, b), (gw, gb) in zip(params, grads)]


# ---------------------------------------------------------------------------------------
# JAX: ahead-of-time compiled functions, one per problem

#: problem key -> (compiled function, example arguments on the device)
_jax_compiled = {}


def _jax_problem(key):
    """``(function, example args)`` for a problem key: ``("A", n_ops)``, ``("B", spec)``
    (a ``workloads.MLPSpec``), ``("C", n)`` (the gradient) or ``("C value_and_grad", n)``."""
    import jax
    import jax.numpy as jnp
    kind, size = key
    if kind == "A":
        return jax.value_and_grad(scalar_graph_fn(jnp, size)), (jax.device_put(scalar_inputs_array()),)
    if kind == "C":
        return jax.grad(W.rosen), (jax.device_put(W.rosen_point(size)),)
    if kind == "C value_and_grad":
        return jax.value_and_grad(W.rosen), (jax.device_put(W.rosen_point(size)),)
    if kind == "B":
        spec = size

        def train_step(params, x, y):
            loss, grads = jax.value_and_grad(lambda p: mlp_loss(jnp, spec, p, x, y))(params)
            return sgd_update(spec, params, grads), loss
        return train_step, jax.device_put((W.mlp_init(spec), *W.mlp_batch(spec)))
    raise ValueError(key)


def compile_jax(key):
    """Trace, lower and XLA-compile problem ``key`` anew (what the compile benchmark
    times); the result is kept for the run benchmarks.  Returns the compiled function."""
    import jax
    function, args = _jax_problem(key)
    compiled = jax.jit(function).lower(*args).compile()
    _jax_compiled[key] = (compiled, args)
    return compiled


def jax_compiled(key):
    """``(compiled function, example args)`` for ``key``, compiling it on first use."""
    if key not in _jax_compiled:
        compile_jax(key)
    return _jax_compiled[key]


# ---------------------------------------------------------------------------------------
# the timed callables ``workloads.py`` dispatches to

def scalar_graph_timed(name, n_ops):
    """``(step, grads_of)`` as ``workloads.scalar_graph_timed``."""
    import numpy as np
    if name == "jax":
        import jax
        compiled, (x,) = jax_compiled(("A", n_ops))
        return (lambda: jax.block_until_ready(compiled(x))), (lambda out: np.asarray(out[1], np.float64))
    if name == "autograd":
        import autograd
        import autograd.numpy as anp
        value_and_grad = autograd.value_and_grad(scalar_graph_fn(anp, n_ops))
        x = scalar_inputs_array()
        return (lambda: value_and_grad(x)), (lambda out: np.asarray(out[1], np.float64))
    raise ValueError(name)


def rosen_grad_fn(name, x):
    """``(grad, arg)`` as ``workloads.rosen_grad_fn``."""
    if name == "jax":
        import jax
        compiled, _ = jax_compiled(("C", len(x)))
        return (lambda arg: compiled(arg).block_until_ready()), jax.device_put(x)
    if name == "autograd":
        import autograd
        return autograd.grad(W.rosen), x
    raise ValueError(name)


def rosen_value_and_grad_fn(name, x):
    """``(value_and_grad, arg)`` for JAX: ``jax.jit(jax.value_and_grad(rosen))`` compiled
    ahead of time, on an array already on the device; returns ``(value, gradient)``."""
    if name != "jax":
        raise ValueError(name)
    import jax
    compiled, _ = jax_compiled(("C value_and_grad", len(x)))
    return (lambda arg: jax.block_until_ready(compiled(arg))), jax.device_put(x)


class JaxMLP:
    """Workload B in JAX: the whole step (forward, gradient, SGD update) is one compiled
    function; ``step()`` waits for the new parameters."""

    def __init__(self, spec, params, x, y):
        import jax
        self._jax = jax
        self.compiled, _ = jax_compiled(("B", spec))
        self.layers = jax.device_put([(w, b) for w, b in params])
        self.x, self.y = jax.device_put(x), jax.device_put(y)

    def step(self):
        self.layers, loss = self.compiled(self.layers, self.x, self.y)
        self._jax.block_until_ready(self.layers)
        return loss

    def loss_value(self, loss):
        return float(loss)

    def params(self):
        import numpy as np
        return [np.array(a) for a in W.flat_params(self.layers)]


class AutogradMLP:
    """Workload B in HIPS autograd: ``value_and_grad`` of the loss, then the SGD update
    in NumPy, in place as ``optim.SGD`` does."""

    def __init__(self, spec, params, x, y):
        import autograd
        import autograd.numpy as anp
        self.spec = spec
        self.layers = [(w.copy(), b.copy()) for w, b in params]
        self.value_and_grad = autograd.value_and_grad(lambda p: mlp_loss(anp, spec, p, x, y))

    def step(self):
        loss, grads = self.value_and_grad(self.layers)
        for (weight, bias), (g_weight, g_bias) in zip(self.layers, grads):
            weight -= self.spec.lr * g_weight
            bias -= self.spec.lr * g_bias
        return loss

    def loss_value(self, loss):
        return float(loss)

    def params(self):
        return [a.copy() for a in W.flat_params(self.layers)]


def mlp_trainer(name, spec, params, x, y):
    if name == "jax":
        return JaxMLP(spec, params, x, y)
    if name == "autograd":
        return AutogradMLP(spec, params, x, y)
    raise ValueError(name)


W.FUNCTIONAL.update(scalar_graph_timed=scalar_graph_timed, mlp_trainer=mlp_trainer, rosen_grad_fn=rosen_grad_fn)
