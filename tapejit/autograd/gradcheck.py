"""``gradcheck``: compare the tape's gradients with central finite differences.

Like ``torch.autograd.gradcheck`` it wants float64 inputs and checks every input that
requires grad, column by column of the Jacobian: the analytic column comes from a
backward pass with a one-hot output gradient, the numerical one from ``(f(x+h) - f(x-h)) / 2h``.
"""
import numpy as np

from tapejit.engine import grad as _grad
from tapejit.tensor import Tensor, _concrete


class GradcheckError(RuntimeError):
    pass


def _outputs(fn, inputs):
    out = fn(*inputs)
    return [out] if isinstance(out, Tensor) else [o for o in out if isinstance(o, Tensor)]


def gradcheck(fn, inputs, *, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True, **_ignored):
    inputs = (inputs,) if isinstance(inputs, Tensor) else tuple(inputs)
    wrt = [i for i, t in enumerate(inputs) if isinstance(t, Tensor) and t.requires_grad]
    outs = _outputs(fn, inputs)
    for k, out in enumerate(outs):
        flat_out = out._value().reshape(-1)
        for i in wrt:
            x = inputs[i]
            analytic = np.zeros((x.numel(), flat_out.size))
            for j in range(flat_out.size):
                seed = np.zeros(flat_out.size, out._value().dtype)
                seed[j] = 1.0
                o = _outputs(fn, inputs)[k]
                (g,) = _grad([o], [x], grad_outputs=[_concrete(seed.reshape(out._shape))],
                             allow_unused=True, materialize_grads=True)
                analytic[:, j] = g._value().reshape(-1)
            numeric = np.zeros_like(analytic)
            base = x._value()
            for e in range(x.numel()):
                values = []
                for step in (eps, -eps):
                    moved = base.copy()
                    moved.reshape(-1)[e] += step
                    shifted = list(inputs)
                    shifted[i] = _concrete(moved, rg=True)  # a fresh leaf: no shared array
                    values.append(_outputs(fn, shifted)[k]._value().reshape(-1).astype(np.float64))
                numeric[e] = (values[0] - values[1]) / (2 * eps)
            if not np.allclose(analytic, numeric, atol=atol, rtol=rtol):
                if raise_exception:
                    raise GradcheckError(
                        f"Jacobian mismatch for output {k} with respect to input {i},\n"
                        f"numerical:{numeric}\nanalytical:{analytic}\n")
                return False
    return True


def gradgradcheck(fn, inputs, grad_outputs=None, *, eps=1e-6, atol=1e-5, rtol=1e-3,
                  gen_non_contig_grad_outputs=False, raise_exception=True, **_ignored):
    """``torch.autograd.gradgradcheck``: ``gradcheck`` of the function ``(inputs, grad_outputs)
    -> autograd.grad(fn(inputs), inputs, grad_outputs, create_graph=True)``, so second
    derivatives are compared with finite differences of first ones.  Without
    ``grad_outputs``, random ones (requiring grad, so they are checked too), as torch's."""
    from tapejit.engine import grad as grad_
    inputs = (inputs,) if isinstance(inputs, Tensor) else tuple(inputs)
    outs = _outputs(fn, inputs)
    if grad_outputs is None:
        rng = np.random.default_rng(0)
        grad_outputs = tuple(_concrete(rng.standard_normal(o._shape).astype(o._value().dtype), rg=True)
                             for o in outs)
    else:
        grad_outputs = (grad_outputs,) if isinstance(grad_outputs, Tensor) else tuple(grad_outputs)
    n = len(inputs)
    wrt = [t for t in inputs if isinstance(t, Tensor) and t.requires_grad]

    def first_derivatives(*args):
        values, seeds = args[:n], args[n:]
        out = _outputs(fn, values)
        wanted = [v for v in values if isinstance(v, Tensor) and v.requires_grad]
        found = grad_(out, wanted, seeds, create_graph=True, allow_unused=True)
        return tuple(g for g in found if g is not None and g.requires_grad)

    if not wrt:
        return True
    return gradcheck(first_derivatives, inputs + grad_outputs, eps=eps, atol=atol, rtol=rtol,
                     raise_exception=raise_exception)
