"""``tj.grad`` and ``tj.value_and_grad``: gradients of functions written for NumPy.

``value_and_grad(f)(x)`` makes the differentiated arguments leaf tensors, calls ``f``
(NumPy calls inside it record on the tape through the protocols in ``numpy_interop``),
and returns the value as a Python float and the gradients as NumPy arrays of each
argument's shape and float dtype: what ``scipy.optimize.minimize(..., jac=True)`` wants.
The tape is recorded per call, so Python control flow inside ``f`` just works.
"""
import functools
import numbers

import numpy as np

from tapejit import engine
from tapejit.grad_mode import enable_grad
from tapejit.tensor import Tensor, _concrete


def _argnums(argnums):
    if isinstance(argnums, int):
        return (argnums,), True
    nums = tuple(argnums)
    if not nums or not all(isinstance(i, int) for i in nums):
        raise TypeError(f"argnums must be an int or a non-empty tuple of ints, got {argnums!r}")
    return nums, False


def _leaf(value, name, i):
    """Argument ``i`` as a float leaf that requires grad; ints become float64 (as NumPy's
    true division would), float32 stays float32."""
    if isinstance(value, Tensor):
        value = value.detach()._value()
    arr = np.asarray(value)
    if arr.dtype.kind in "biu":
        arr = arr.astype(np.float64)
    elif arr.dtype not in (np.float64, np.float32):
        raise TypeError(f"{name}: argument {i} must be a real float array or scalar, got dtype {arr.dtype}")
    return _concrete(arr if arr.flags.c_contiguous else arr.copy(), rg=True)


def _scalar_output(out, name):
    if isinstance(out, Tensor):
        if out._numel != 1:
            raise TypeError(
                f"{name}: the function must return a scalar (one element) to take its gradient, "
                f"got a tensor of shape {list(out._shape)}")
        return out
    if isinstance(out, (numbers.Real, np.ndarray, np.generic)) and np.size(out) == 1:
        return out   # does not depend on the differentiated arguments
    raise TypeError(f"{name}: the function must return a scalar, got {type(out).__name__}")


def call_for_value(fun, args, kwargs, has_aux, name):
    """``(scalar output, aux)`` of ``fun(*args, **kwargs)`` with grad enabled."""
    with enable_grad():
        out = fun(*args, **kwargs)
    aux = None
    if has_aux:
        if not (isinstance(out, tuple) and len(out) == 2):
            raise TypeError(f"{name}: with has_aux=True the function must return (value, aux)")
        out, aux = out
    return _scalar_output(out, name), aux


def _differentiate(fun, argnums, has_aux, name):
    nums, single = _argnums(argnums)

    def value_and_gradients(args, kwargs):
        if max(nums) >= len(args) or min(nums) < -len(args):
            raise TypeError(f"{name}: argnums {argnums!r} is out of range for {len(args)} positional arguments")
        args = list(args)
        leaves = []
        for i in dict.fromkeys(i % len(args) for i in nums):   # a repeated argnum: one leaf
            args[i] = _leaf(args[i], name, i)
            leaves.append(args[i])
        out, aux = call_for_value(fun, args, kwargs, has_aux, name)
        if isinstance(out, Tensor) and out._rg:
            value = out.item()
            if engine._plain_scalar_root(out):   # the usual case, without autograd.grad's bookkeeping
                found = [None if g is None else _concrete(g) for g in engine._backward_scalar(out, leaves)]
            else:
                found = engine.grad([out], leaves, allow_unused=True)
        else:
            found = [None] * len(leaves)
            value = float(np.asarray(out._value() if isinstance(out, Tensor) else out).reshape(-1)[0])
        by_leaf = {id(leaf): np.zeros(leaf._shape, leaf._dtype.np) if g is None else g._value()
                   for leaf, g in zip(leaves, found)}
        grads = []
        for i in nums:
            g = by_leaf[id(args[i % len(args)])]
            grads.append(g.copy() if any(g is h for h in grads) else g)
        return value, (grads[0] if single else tuple(grads)), aux

    return value_and_gradients


def value_and_grad(fun, argnums=0, has_aux=False):
    """``f -> (lambda *args: (f(*args) as float, gradient(s) as NumPy))``.

    ``argnums`` picks the differentiated positional arguments (an int gives one gradient,
    a tuple gives a tuple); with ``has_aux=True`` ``f`` returns ``(value, aux)`` and the
    result is ``((value, aux), gradient)``, as in JAX.
    """
    run = _differentiate(fun, argnums, has_aux, "value_and_grad")

    @functools.wraps(fun)
    def value_and_grad_fun(*args, **kwargs):
        value, grads, aux = run(args, kwargs)
        return ((value, aux) if has_aux else value), grads

    value_and_grad_fun._tapejit_functional = (fun,) + _argnums(argnums) + (has_aux, "value_and_grad")
    return value_and_grad_fun


def grad(fun, argnums=0, has_aux=False):
    """``f -> (lambda *args: gradient(s) of f as NumPy)``; see ``value_and_grad``."""
    run = _differentiate(fun, argnums, has_aux, "grad")

    @functools.wraps(fun)
    def grad_fun(*args, **kwargs):
        _, grads, aux = run(args, kwargs)
        return (grads, aux) if has_aux else grads

    grad_fun._tapejit_functional = (fun,) + _argnums(argnums) + (has_aux, "grad")
    return grad_fun
