"""``tj.grad`` and ``tj.value_and_grad``: gradients of functions written for NumPy.

``value_and_grad(f)(x)`` makes the differentiated arguments leaf tensors, hands ``f`` each
one as a NumPy-mode ``TracedArray`` (``tapejit/numpy_mode.py``: NumPy's semantics over the
tape), and returns the value as a Python float and the gradients as NumPy arrays of each
argument's shape and float dtype: what ``scipy.optimize.minimize(..., jac=True)`` wants.
The tape is recorded per call, so Python control flow on the arguments' shapes and on
non-differentiated arguments just works.

Each call records on a tape of its own, so a pending graph of the caller's is left alone.
A call inside another one's ``f`` (nested differentiation: ``tj.grad(tj.grad(f))``, or an
inner function closing over an outer traced value) records its gradient on the caller's
tape with ``create_graph`` (``_nested_call``) and returns traced arrays, so the outer
derivative differentiates through it, to any order.
"""
import functools
import numbers
import threading

import numpy as np

from tapejit import engine
from tapejit import numpy_mode as _np_mode
from tapejit.numpy_mode import TracedArray
from tapejit.tape import current, retire_current, state
from tapejit.tensor import Tensor, _concrete

_FLOAT_KINDS = (np.dtype(np.float64), np.dtype(np.float32))


class _Calls(threading.local):
    def __init__(self):
        self.active = []   # per running call: (its leaves, serial of its first tape)


_calls = _Calls()


def _argnums(argnums):
    if isinstance(argnums, int):
        return (argnums,), True
    nums = tuple(argnums)
    if not nums or not all(isinstance(i, int) for i in nums):
        raise TypeError(f"argnums must be an int or a non-empty tuple of ints, got {argnums!r}")
    return nums, False


def _nested(name, what):
    return NotImplementedError(
        f"{name}: {what}: that is nested differentiation (a derivative of a function that "
        f"itself takes a derivative), which tapejit does not support yet. The inner result "
        f"would be a constant to the outer derivative, so the gradient would be silently "
        f"wrong. Differentiate each level separately, or use finite differences of the inner "
        f"gradient for now.")


def _outer_value(x):
    """Whether ``x`` is (or holds) a value traced by a running tj.grad call."""
    if type(x) is TracedArray:
        return True
    if isinstance(x, Tensor):
        return x._rg and (x._tape is not None or id(x) in _outer_leaves(_calls.active))
    if isinstance(x, (list, tuple)):
        return any(_outer_value(e) for e in x)
    if isinstance(x, dict):
        return any(_outer_value(e) for e in x.values())
    if isinstance(x, np.ndarray) and x.dtype == object:
        return any(_outer_value(e) for e in x.flat)
    return False


def _leaf(value, name, i):
    """Argument ``i`` as a float leaf that requires grad; ints become float64 (as NumPy's
    true division would), float32 stays float32."""
    if _np_mode._scipy_waiting:   # every differentiation entry makes its leaves here
        _np_mode.intercept_scipy()
    if type(value) is np.ndarray and value.dtype in _FLOAT_KINDS:
        return _concrete(value if value.flags.c_contiguous else value.copy(), rg=True)
    if isinstance(value, Tensor):
        value = value._value()
    arr = np.asarray(value)
    if arr.dtype.kind in "biu":
        arr = arr.astype(np.float64)
    elif arr.dtype not in _FLOAT_KINDS:
        raise TypeError(f"{name}: argument {i} must be a real float array or scalar, got dtype {arr.dtype}")
    return _concrete(arr if arr.flags.c_contiguous else arr.copy(), rg=True)


def _not_real(kind, name):
    return TypeError(
        f"{name}: the function returned a {kind} value; a gradient needs a real (floating-point) "
        f"scalar output (a comparison, np.allclose or a count has no derivative)")


def _scalar_output(out, name):
    """The function's result as a one-element float tensor, or a constant (a Python or
    NumPy float that does not depend on the differentiated arguments)."""
    if type(out) is TracedArray:
        out = out._t
    elif isinstance(out, (list, tuple)) or isinstance(out, np.ndarray) and out.dtype == object:
        if _np_mode._contains_traced(out):
            out = _np_mode._tensor_of(out)
    if isinstance(out, Tensor):
        if out._numel != 1:
            raise TypeError(
                f"{name}: the function must return a scalar (one element) to take its gradient, "
                f"got an array of shape {tuple(out._shape)}")
        if not out._dtype.is_floating_point:
            raise _not_real("boolean" if out._dtype.np.kind == "b" else "integer", name)
        return out
    if isinstance(out, (bool, np.bool_)) or isinstance(out, np.ndarray) and out.dtype.kind == "b":
        raise _not_real("boolean", name)
    if isinstance(out, (numbers.Integral, np.integer)) or isinstance(out, np.ndarray) and out.dtype.kind in "iu":
        raise _not_real("integer", name)
    if isinstance(out, (numbers.Real, np.ndarray, np.generic)) and np.size(out) == 1:
        return out   # does not depend on the differentiated arguments
    raise TypeError(f"{name}: the function must return a scalar, got {type(out).__name__}")


def call_for_value(fun, args, kwargs, has_aux, name):
    """``(scalar output, aux)`` of ``fun(*args, **kwargs)`` with grad enabled: the output as
    a tensor (or a constant), ``aux`` as ``fun`` returned it."""
    prev = state.grad
    state.grad = True
    try:
        out = fun(*args, **kwargs)
    finally:
        state.grad = prev
    aux = None
    if has_aux:
        if not (isinstance(out, tuple) and len(out) == 2):
            raise TypeError(f"{name}: with has_aux=True the function must return (value, aux)")
        out, aux = out
    return _scalar_output(out, name), aux


def aux_values(aux):
    """``aux`` with traced arrays replaced by their values (NumPy arrays: no gradient)."""
    if type(aux) is TracedArray:
        return np.array(aux._t._value())
    if isinstance(aux, tuple):
        return tuple(aux_values(e) for e in aux)
    if isinstance(aux, list):
        return [aux_values(e) for e in aux]
    if isinstance(aux, dict):
        return {k: aux_values(v) for k, v in aux.items()}
    if isinstance(aux, np.ndarray) and aux.dtype == object and _np_mode._contains_traced(aux):
        return np.array(_np_mode._tensor_of(aux)._value())
    return aux


def aux_for_trace(aux):
    """``(aux with traced arrays as their tensors, the same tree marking them True)``: what
    ``tj.compile`` records, and where to turn the replayed tensors back into NumPy."""
    if type(aux) is TracedArray:
        return aux._t, True
    if isinstance(aux, (tuple, list)):
        pairs = [aux_for_trace(e) for e in aux]
        return type(aux)(p[0] for p in pairs), type(aux)(p[1] for p in pairs)
    if isinstance(aux, dict):
        pairs = {k: aux_for_trace(v) for k, v in aux.items()}
        return {k: p[0] for k, p in pairs.items()}, {k: p[1] for k, p in pairs.items()}
    return aux, False


def aux_from_trace(aux, marks):
    if marks is True:
        return np.array(aux._value())
    if isinstance(marks, (tuple, list)):
        return type(marks)(aux_from_trace(a, m) for a, m in zip(aux, marks))
    if isinstance(marks, dict):
        return {k: aux_from_trace(aux[k], m) for k, m in marks.items()}
    return aux


def _outer_leaves(calls):
    return {id(leaf) for leaves, _ in calls for leaf in leaves}


def _reads_outer(roots, own, serial, outer):
    """Whether the graph of ``roots`` reads a tensor traced by an enclosing call: one of the
    ``outer`` leaves, or a tensor with a graph on a tape older than this call's (``serial``)."""
    seen = set()
    stack = [r._tape for r in roots if isinstance(r, Tensor) and r._tape is not None]
    while stack:
        tape = stack.pop()
        if id(tape) in seen:
            continue
        seen.add(id(tape))
        for index, _, _ in tape.grad_loads:
            src = tape.sources[index]
            if not isinstance(src, Tensor) or id(src) in own:
                continue
            if src._tape is None:
                if id(src) in outer:
                    return True
            elif src._tape.serial >= serial:
                stack.append(src._tape)
            elif src._rg:
                return True
    return False


def check_not_nested(args, kwargs, name, roots=None, own=(), serial=None):
    """For ``tj.compile`` of ``tj.grad``: refuse arguments traced by a running eager call,
    and (``roots``: a finished trace's results) a graph that reads one."""
    if not _calls.active:
        return
    for i, a in enumerate(args):
        if _outer_value(a):
            raise _nested(name, f"argument {i} is a value traced by an enclosing tj.grad or tj.value_and_grad")
    for k, v in kwargs.items():
        if _outer_value(v):
            raise _nested(name, f"keyword argument {k!r} is a value traced by an enclosing tj.grad or "
                                f"tj.value_and_grad")
    if roots is not None and _reads_outer(roots, own, serial, _outer_leaves(_calls.active)):
        raise _nested(name, "the function's result depends on a value traced by an enclosing tj.grad "
                            "or tj.value_and_grad (read through a closure)")


def _tensors_in(x):
    if type(x) is TracedArray:
        yield x._t
    elif isinstance(x, Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for e in x:
            yield from _tensors_in(e)
    elif isinstance(x, dict):
        for e in x.values():
            yield from _tensors_in(e)


def _differentiate(fun, argnums, has_aux, name):
    nums, single = _argnums(argnums)
    highest, lowest = max(nums), min(nums)

    def value_and_gradients(args, kwargs):
        if _is_nested(args):
            return _nested_call(fun, args, kwargs, nums, single, has_aux, name)
        if state.trace is not None:
            state.trace.refuse(f"{name} called inside a function being compiled",
                               f"its NumPy results would be frozen into every replay. Compile the "
                               f"{name}(f) itself: tj.compile({name}(f)).")
        n = len(args)
        if highest >= n or lowest < -n:
            raise TypeError(f"{name}: argnums {argnums!r} is out of range for {n} positional arguments")
        args = list(args)
        if _calls.active:
            for i, a in enumerate(args):
                if _outer_value(a):
                    raise _nested(name, f"argument {i} is a value traced by an enclosing tj.grad "
                                        f"or tj.value_and_grad")
            for k, v in kwargs.items():
                if _outer_value(v):
                    raise _nested(name, f"keyword argument {k!r} is a value traced by an enclosing "
                                        f"tj.grad or tj.value_and_grad")
        if single:
            i = nums[0] % n
            leaf = _leaf(args[i], name, i)
            args[i] = _np_mode._wrap(leaf)
            leaves = [leaf]
        else:
            leaves = []
            leaf_at = {}
            for i in dict.fromkeys(i % n for i in nums):   # a repeated argnum: one leaf
                leaf = _leaf(args[i], name, i)
                args[i] = _np_mode._wrap(leaf)
                leaves.append(leaf)
                leaf_at[i] = leaf
        caller_tape = state.tape
        state.tape = None   # a tape of this call's own
        tape = current()
        active = _calls.active
        active.append((leaves, tape.serial))
        try:
            out, aux = call_for_value(fun, args, kwargs, has_aux, name)
            if len(active) > 1 and _reads_outer([out, *_tensors_in(aux)], {id(leaf) for leaf in leaves},
                                                tape.serial, _outer_leaves(active[:-1])):
                raise _nested(name, "the function's result depends on a value traced by an "
                                    "enclosing tj.grad or tj.value_and_grad (read through a closure)")
            if isinstance(out, Tensor) and out._rg:
                value = float(out._value().reshape(-1)[0])
                if engine._plain_scalar_root(out):   # the usual case, without autograd.grad's bookkeeping
                    found = engine._backward_scalar(out, leaves)
                else:
                    found = [None if g is None else g._value()
                             for g in engine.grad([out], leaves, allow_unused=True)]
            else:
                found = [None] * len(leaves)
                value = float(np.asarray(out._value() if isinstance(out, Tensor) else out).reshape(-1)[0])
        finally:
            active.pop()
            if state.tape is not None and state.tape is not caller_tape:
                retire_current()
            state.tape = caller_tape
        if single:
            g = found[0]
            leaf = leaves[0]
            return value, (np.zeros(leaf._shape, leaf._dtype.np) if g is None else g), aux
        by_leaf = {id(leaf): np.zeros(leaf._shape, leaf._dtype.np) if g is None else g
                   for leaf, g in zip(leaves, found)}
        grads = []
        for i in nums:
            g = by_leaf[id(leaf_at[i % n])]
            grads.append(g.copy() if any(g is h for h in grads) else g)
        return value, (grads[0] if single else tuple(grads)), aux

    return value_and_gradients


def _is_nested(args):
    """Whether a call runs inside another derivative's function (or a function
    ``tj.compile`` traces, with traced arguments): its results are then traced values,
    aux included, for the enclosing derivative to follow."""
    return bool(_calls.active) or state.trace is not None and any(type(a) is TracedArray for a in args)


def _nested_call(fun, args, kwargs, nums, single, has_aux, name):
    """A call inside another one's ``f`` (``tj.grad(tj.grad(f))``, or inside a function
    ``tj.compile`` traces): the gradient is itself recorded (``create_graph``,
    ``tapejit/autograd/higher.py``), on the caller's tape, and comes back as traced arrays,
    so the enclosing derivative differentiates through it.  A traced argument is
    differentiated through a copy of its own (a ``clone`` record): the inner derivative
    follows only the argument, not other uses of the same outer value in a closure."""
    n = len(args)
    if max(nums) >= n or min(nums) < -n:
        raise TypeError(f"{name}: argnums {nums if len(nums) > 1 else nums[0]!r} is out of range for "
                        f"{n} positional arguments")
    args = list(args)
    leaves = []
    leaf_at = {}
    for i in dict.fromkeys(i % n for i in nums):
        a = args[i]
        if type(a) is TracedArray and a._t._rg and a._t._dtype.is_floating_point:
            prev = state.grad
            state.grad = True
            try:
                leaf = a._t.clone()
            finally:
                state.grad = prev
        else:
            leaf = _leaf(a._t if type(a) is TracedArray else a, name, i)
        args[i] = _np_mode._wrap(leaf)
        leaves.append(leaf)
        leaf_at[i] = leaf
    out, aux = call_for_value(fun, args, kwargs, has_aux, name)
    if isinstance(out, Tensor) and out._rg:
        found = engine.recorded_grad([out], leaves, None, True, False)
        value = _np_mode._wrap(out.reshape(()))
    else:
        found = [None] * len(leaves)
        value = float(np.asarray(out._value() if isinstance(out, Tensor) else out).reshape(-1)[0])
    found_at = {id(leaf): g for leaf, g in zip(leaves, found)}
    grads = []
    for i in nums:
        leaf = leaf_at[i % n]
        g = found_at[id(leaf)]
        grads.append(np.zeros(leaf._shape, leaf._dtype.np) if g is None else _np_mode._wrap(g))
    return value, (grads[0] if single else tuple(grads)), aux


def value_and_grad(fun, argnums=0, has_aux=False):
    """``f -> (lambda *args: (f(*args) as float, gradient(s) as NumPy))``.

    ``argnums`` picks the differentiated positional arguments (an int gives one gradient,
    a tuple gives a tuple); with ``has_aux=True`` ``f`` returns ``(value, aux)`` and the
    result is ``((value, aux), gradient)``, as in JAX; traced arrays in ``aux`` come back
    as NumPy arrays (values, no gradient).  Inside ``f`` the differentiated arguments are
    NumPy-mode traced arrays (``tapejit.numpy_mode``).
    """
    run = _differentiate(fun, argnums, has_aux, "value_and_grad")

    @functools.wraps(fun)
    def value_and_grad_fun(*args, **kwargs):
        nested = _is_nested(args)
        value, grads, aux = run(args, kwargs)
        return ((value, aux if nested else aux_values(aux)) if has_aux else value), grads

    value_and_grad_fun._tapejit_functional = (fun,) + _argnums(argnums) + (has_aux, "value_and_grad")
    return value_and_grad_fun


def grad(fun, argnums=0, has_aux=False):
    """``f -> (lambda *args: gradient(s) of f as NumPy)``; see ``value_and_grad``."""
    run = _differentiate(fun, argnums, has_aux, "grad")

    @functools.wraps(fun)
    def grad_fun(*args, **kwargs):
        nested = _is_nested(args)
        _, grads, aux = run(args, kwargs)
        return (grads, aux if nested else aux_values(aux)) if has_aux else grads

    grad_fun._tapejit_functional = (fun,) + _argnums(argnums) + (has_aux, "grad")
    return grad_fun


# ---- higher order: jacobian, hessian, hvp --------------------------------------------------

def _as_output_tensor(out, name):
    if type(out) is TracedArray:
        return out._t
    if isinstance(out, Tensor):
        return out
    if isinstance(out, (list, tuple)) or isinstance(out, np.ndarray) and out.dtype == object:
        if _np_mode._contains_traced(out):
            return _np_mode._tensor_of(out)
    return _concrete(np.asarray(out, dtype=np.float64))


def jacobian(fun, argnums=0):
    """``f -> (lambda *args: the Jacobian of f as NumPy)``: of shape ``out.shape +
    arg.shape`` (reverse mode, one backward per output element); a tuple of them for a
    tuple ``argnums``, and per output for a function returning a tuple (JAX's layout)."""
    nums, single = _argnums(argnums)

    @functools.wraps(fun)
    def jacobian_fun(*args, **kwargs):
        if state.trace is not None or _calls.active:
            raise _nested("jacobian", "tj.jacobian called inside a function being differentiated "
                          "or compiled")
        n = len(args)
        if max(nums) >= n or min(nums) < -n:
            raise TypeError(f"jacobian: argnums {argnums!r} is out of range for {n} positional arguments")
        args = list(args)
        leaves = []
        leaf_at = {}
        for i in dict.fromkeys(i % n for i in nums):
            leaf = _leaf(args[i], "jacobian", i)
            args[i] = _np_mode._wrap(leaf)
            leaves.append(leaf)
            leaf_at[i] = leaf
        caller_tape = state.tape
        state.tape = None
        tape = current()
        _calls.active.append((leaves, tape.serial))
        prev = state.grad
        state.grad = True
        try:
            out = fun(*args, **kwargs)
            many = isinstance(out, tuple)
            outs = [_as_output_tensor(o, "jacobian") for o in (out if many else (out,))]
            per_output = []
            for o in outs:
                rows = {id(leaf): np.zeros((o._numel,) + tuple(leaf._shape), leaf._dtype.np) for leaf in leaves}
                if o._rg and o._numel:
                    for j in range(o._numel):
                        seed = np.zeros(o._numel, o._dtype.np)
                        seed[j] = 1.0
                        found = engine.grad([o], leaves, [_concrete(seed.reshape(o._shape))],
                                            retain_graph=True, allow_unused=True)
                        for leaf, g in zip(leaves, found):
                            if g is not None:
                                rows[id(leaf)][j] = g._value()
                blocks = tuple(rows[id(leaf_at[i % n])].reshape(tuple(o._shape) + tuple(leaf_at[i % n]._shape))
                               for i in nums)
                per_output.append(blocks[0] if single else blocks)
        finally:
            state.grad = prev
            _calls.active.pop()
            if state.tape is not None and state.tape is not caller_tape:
                retire_current()
            state.tape = caller_tape
        return tuple(per_output) if many else per_output[0]

    return jacobian_fun


def hessian(fun, argnums=0):
    """``f -> (lambda *args: the Hessian of scalar f as NumPy)``, of shape ``arg.shape +
    arg.shape``; ``H[i][j]`` for a tuple ``argnums`` (JAX's layout).  The Jacobian of the
    gradient, which is recorded (nested ``tj.grad``)."""
    return functools.wraps(fun)(jacobian(grad(fun, argnums), argnums))


def hvp(fun, argnums=0):
    """``f -> (lambda *args, v: the Hessian of scalar f times v, as NumPy)``: called as
    ``hvp(f)(x, v)`` (``v`` after the arguments; a tuple of vectors for a tuple
    ``argnums``).  The gradient of ``<grad f(x), v>``: one recorded backward and one
    compiled one, whatever the size, and ``tj.compile(tj.hvp(f))`` traces it once."""
    nums, single = _argnums(argnums)
    inner = grad(fun, argnums)

    def contracted(*args_and_v):
        *args, v = args_and_v
        g = inner(*args)
        gs, vs = ((g,), (v,)) if single else (tuple(g), tuple(v))
        if len(vs) != len(gs):
            raise TypeError(f"hvp: v must hold {len(gs)} vectors (one per argnum), got {len(vs)}")
        total = None
        for gi, vi in zip(gs, vs):
            if np.shape(vi) != np.shape(gi):
                raise ValueError(f"hvp: v of shape {np.shape(vi)} does not match the argument's "
                                 f"shape {np.shape(gi)}")
            term = np.sum(gi * vi)
            total = term if total is None else total + term
        return total

    contracted.__name__ = contracted.__qualname__ = f"hvp_of_{getattr(fun, '__name__', 'f')}"
    outer = grad(contracted, argnums)

    @functools.wraps(fun)
    def hvp_fun(*args_and_v):
        if len(args_and_v) < 2:
            raise TypeError("hvp: call as hvp(f)(*args, v)")
        if any(i < 0 for i in nums):   # argnums count from the end of f's arguments, not of (args, v)
            n = len(args_and_v) - 1
            return grad(contracted, tuple(i % n for i in nums) if not single else nums[0] % n)(*args_and_v)
        return outer(*args_and_v)

    if all(i >= 0 for i in nums):
        hvp_fun._tapejit_functional = (contracted,) + (nums, single) + (False, "grad")
    return hvp_fun
