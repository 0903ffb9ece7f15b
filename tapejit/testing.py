"""Test helpers for code built on tapejit, in the manner of ``numpy.testing``.

``check_grads(fn, inputs)`` asserts that the gradients tapejit records for ``fn`` match
central finite differences of ``fn`` itself, element by element, and raises
``AssertionError`` (``numpy.testing.assert_allclose``'s report: the input, how many
elements differ, the largest differences) when they do not::

    import numpy as np
    import tapejit as tj
    from tapejit.testing import check_grads

    check_grads(lambda x, w: (x @ w).tanh(), [np.random.rand(3, 4), np.random.rand(4, 2)])

It is not imported by ``import tapejit``; import ``tapejit.testing`` where you test.
"""
import numpy as np

from tapejit.creation import tensor as _tensor
from tapejit.grad_mode import no_grad
from tapejit.tensor import Tensor

__all__ = ["central_differences", "check_grads"]


def check_grads(fn, inputs, *, wrt=None, eps=1e-6, rtol=1e-6, atol=1e-7, seed=0):
    """Assert that ``fn``'s gradients match central finite differences, in float64.

    ``fn`` takes one tensor per entry of ``inputs`` (NumPy arrays, numbers or tensors; the
    floating ones become float64) and returns one floating tensor.  A non-scalar output is
    checked through ``(fn(...) * u).sum()`` with a fixed random ``u`` (drawn from ``seed``),
    so every output element counts.  ``wrt``: the positions of the inputs to differentiate
    (default: every floating input); the others do not require grad.  Each element ``x[j]``
    of those inputs is moved by ``+-eps`` and ``(f(x + eps) - f(x - eps)) / (2 eps)`` is
    compared with the recorded gradient by ``numpy.testing.assert_allclose(rtol, atol)``.
    An input the output does not depend on must get a zero finite difference (its ``.grad``
    stays ``None`` and counts as zeros).  Returns ``None``; raises ``AssertionError``.
    """
    arrays = [_as_float64(x) for x in inputs]
    if wrt is None:
        wrt = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"]
    else:
        wrt = [wrt] if isinstance(wrt, int) else list(wrt)
        for i in wrt:
            if not -len(arrays) <= i < len(arrays):
                raise IndexError(f"check_grads: wrt position {i} is out of range for {len(arrays)} inputs")
            if arrays[i].dtype.kind != "f":
                raise TypeError(f"check_grads: input {i} has dtype {arrays[i].dtype}; only floating "
                                f"inputs have gradients")
        wrt = [i % len(arrays) for i in wrt]
    leaves = [_tensor(a.copy(), requires_grad=i in wrt) for i, a in enumerate(arrays)]
    out = fn(*leaves)
    if not isinstance(out, Tensor) or not out.is_floating_point():
        raise TypeError(f"check_grads: fn must return one floating tensor, got "
                        f"{type(out).__name__ if not isinstance(out, Tensor) else out.dtype}")
    weights = None if out.ndim == 0 else np.random.default_rng(seed).standard_normal(tuple(out.shape))
    scalar = out if weights is None else (out * _tensor(weights, dtype=out.dtype)).sum()
    if wrt:
        scalar.backward()

    def value_at(shifted):
        with no_grad():
            result = np.asarray(fn(*[_tensor(a) for a in shifted]).detach(), dtype=np.float64)
        return float(result if weights is None else np.sum(result * weights))

    for i in wrt:
        grad = leaves[i].grad
        analytic = np.zeros_like(arrays[i]) if grad is None else np.asarray(grad, dtype=np.float64)
        numeric = np.zeros_like(arrays[i])
        for j in range(arrays[i].size):
            plus = list(arrays)
            minus = list(arrays)
            plus[i] = arrays[i].copy()
            minus[i] = arrays[i].copy()
            plus[i].reshape(-1)[j] += eps
            minus[i].reshape(-1)[j] -= eps
            numeric.reshape(-1)[j] = (value_at(plus) - value_at(minus)) / (2 * eps)
        np.testing.assert_allclose(
            analytic, numeric, rtol=rtol, atol=atol,
            err_msg=f"check_grads: the gradient of input {i} (shape {list(arrays[i].shape)}) differs "
                    f"from central finite differences (eps={eps})")


def _as_float64(x):
    """An input as a NumPy array: floating values in float64, integers and bools unchanged."""
    a = np.asarray(x.detach() if isinstance(x, Tensor) else x)
    return a.astype(np.float64) if a.dtype.kind == "f" else a


def central_differences(f, x, eps=1e-6):
    """The gradient of a scalar function ``f`` of one NumPy array, by central differences at
    float64, element by element: the reference that NumPy-mode gradients (``tj.grad``) are
    compared with."""
    x = np.asarray(x, np.float64)
    g = np.zeros_like(x)
    flat = x.reshape(-1)
    for i in range(flat.size):
        up, down = flat.copy(), flat.copy()
        up[i] += eps
        down[i] -= eps
        g.reshape(-1)[i] = (f(up.reshape(x.shape)) - f(down.reshape(x.shape))) / (2 * eps)
    return g
