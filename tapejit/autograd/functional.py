"""``tapejit.autograd.functional``: ``vjp``, ``jvp``, ``jacobian``, ``hessian``, ``hvp`` and
``vhp`` with ``torch.autograd.functional``'s signatures and results.

Each is a few ``autograd.grad`` calls, with ``create_graph=True`` where a derivative is
differentiated again (``autograd/higher.py``).  As in torch: ``inputs`` is a tensor or a
tuple of tensors and the results follow that form; results are detached unless
``create_graph=True``; with ``strict=True`` an output independent of an input raises,
otherwise its derivative is zeros.  ``jvp`` uses the double-vjp trick (torch's own: the
vjp is linear in its cotangent, so differentiating it with respect to that cotangent
gives the Jacobian times ``v``).  ``hvp`` is ``vhp``: the Hessian of a twice
differentiable scalar function is symmetric, so ``v^T H`` is ``H v`` (one backward
through the gradient instead of torch's two).  ``vectorize`` and the strategies are
accepted; tapejit always computes rows by reverse mode, with the same results.
"""
import numpy as np

from tapejit.api import front_ends
from tapejit.engine import grad as _grad
from tapejit.grad_mode import enable_grad
from tapejit.tensor import Tensor, _concrete


def _as_tuple(x, arg_name, fn_name):
    if isinstance(x, Tensor):
        return False, (x,)
    if not isinstance(x, (tuple, list)):
        raise TypeError(f"The {arg_name} given to {fn_name} must be either a Tensor or a tuple of "
                        f"Tensors but the given {arg_name} has type {type(x)}.")
    for i, el in enumerate(x):
        if not isinstance(el, Tensor):
            raise TypeError(f"The {arg_name} given to {fn_name} must be either a Tensor or a tuple "
                            f"of Tensors but the element {i} of the given {arg_name} has type "
                            f"{type(el)}.")
    return True, tuple(x)


def _tuple_back(is_tuple, values):
    return tuple(values) if is_tuple else values[0]


def _prepare(inputs, create_graph):
    """Inputs that require grad, so the function's graph starts at them: with
    ``create_graph`` an input that requires grad stays connected (a view), as torch's."""
    out = []
    for t in inputs:
        if create_graph and t.requires_grad:
            out.append(t.view_as(t))
        else:
            out.append(t.detach().requires_grad_(True))
    return tuple(out)


def _finish(values, create_graph):
    if create_graph:
        return values
    return tuple(None if v is None else v.detach() for v in values)


def _zeros_like(t):
    return _concrete(np.zeros(t._shape, t._dtype.np))


def _check_outputs(outputs, name):
    for i, o in enumerate(outputs):
        if not isinstance(o, Tensor):
            raise TypeError(f"The outputs of the user-provided function given to {name} must be "
                            f"either a Tensor or a tuple of Tensors but the element {i} of the given "
                            f"outputs has type {type(o)}.")


def _grads(outputs, inputs, grad_outputs, create_graph, strict, name, what="output"):
    """``autograd.grad`` of the differentiable ``outputs``; zeros (or, ``strict``, an error)
    for inputs they do not depend on."""
    pairs = [(o, g) for o, g in zip(outputs, grad_outputs) if o.requires_grad]
    if pairs:
        found = _grad([o for o, _ in pairs], list(inputs), [g for _, g in pairs],
                      retain_graph=True, create_graph=create_graph, allow_unused=True)
    else:
        found = (None,) * len(inputs)
    result = []
    for i, (t, g) in enumerate(zip(inputs, found)):
        if g is None:
            if strict:
                raise RuntimeError(f"The {what} of the user-provided function is independent of "
                                   f"input {i}. This is not allowed in strict mode.")
            g = _zeros_like(t)
        result.append(g)
    return tuple(result)


def _validate_v(v, others, is_tuple, name, what="outputs"):
    if len(v) != len(others):
        raise RuntimeError(f"v is a tuple of invalid length: should be {len(others)} but got {len(v)}.")
    for i, (a, b) in enumerate(zip(v, others)):
        if tuple(a._shape) != tuple(b._shape):
            prepend = f"Entry {i} in " if is_tuple else ""
            raise RuntimeError(f"{prepend}v has invalid size: should be {list(b._shape)} but got "
                               f"{list(a._shape)}.")


def vjp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(*inputs), v^T J)``."""
    with enable_grad():
        is_in_tuple, inputs = _as_tuple(inputs, "inputs", "vjp")
        inputs = _prepare(inputs, create_graph)
        is_out_tuple, outputs = _as_tuple(func(*inputs), "outputs of the user-provided function", "vjp")
        _check_outputs(outputs, "vjp")
        if v is not None:
            _, v = _as_tuple(v, "v", "vjp")
            _validate_v(v, outputs, is_out_tuple, "vjp")
        else:
            if len(outputs) != 1 or outputs[0].numel() != 1:
                raise RuntimeError("The vector v can only be None if the user-provided function "
                                   "returns a single Tensor with a single element.")
            v = (_concrete(np.ones(outputs[0]._shape, outputs[0]._dtype.np)),)
        grads = _grads(outputs, inputs, v, create_graph, strict, "vjp")
    return (_tuple_back(is_out_tuple, _finish(outputs, create_graph)),
            _tuple_back(is_in_tuple, _finish(grads, create_graph)))


def jvp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(*inputs), J v)`` by the double-vjp trick."""
    with enable_grad():
        is_in_tuple, inputs = _as_tuple(inputs, "inputs", "jvp")
        inputs = _prepare(inputs, create_graph)
        if v is not None:
            _, v = _as_tuple(v, "v", "jvp")
            _validate_v(v, inputs, is_in_tuple, "jvp")
        else:
            if len(inputs) != 1 or inputs[0].numel() != 1:
                raise RuntimeError("The vector v can only be None if the input to the user-provided "
                                   "function is a single Tensor with a single element.")
            v = (_concrete(np.ones(inputs[0]._shape, inputs[0]._dtype.np)),)
        is_out_tuple, outputs = _as_tuple(func(*inputs), "outputs of the user-provided function", "jvp")
        _check_outputs(outputs, "jvp")
        cotangents = tuple(_zeros_like(o).requires_grad_(True) for o in outputs)
        vjps = _grads(outputs, inputs, cotangents, True, strict, "jvp")
        jvps = _grads(vjps, cotangents, v, create_graph, strict, "jvp", what="output")
    return (_tuple_back(is_out_tuple, _finish(outputs, create_graph)),
            _tuple_back(is_out_tuple, _finish(jvps, create_graph)))


def jacobian(func, inputs, create_graph=False, strict=False, vectorize=False, strategy="reverse-mode"):
    """The Jacobian: ``J[i][j]`` of output ``i`` with respect to input ``j``, of shape
    ``output.shape + input.shape``; a tensor for one output and one input, as torch."""
    if strategy not in ("reverse-mode", "forward-mode"):
        raise ValueError('Expected strategy to be either "forward-mode" or "reverse-mode". Hint: '
                         'If your function has more outputs than inputs, "forward-mode" tends to be '
                         'more performant. Otherwise, prefer to use "reverse-mode".')
    with enable_grad():
        is_in_tuple, inputs = _as_tuple(inputs, "inputs", "jacobian")
        inputs = _prepare(inputs, create_graph)
        is_out_tuple, outputs = _as_tuple(func(*inputs), "outputs of the user-provided function",
                                          "jacobian")
        _check_outputs(outputs, "jacobian")
        jac = []
        for i, out in enumerate(outputs):
            rows = [[] for _ in inputs]
            flat = out.reshape(-1)
            for j in range(flat.numel()):
                seed = np.zeros(out._numel, out._dtype.np)
                seed[j] = 1.0
                if out.requires_grad:
                    found = _grad([out], list(inputs), [_concrete(seed.reshape(out._shape))],
                                  retain_graph=True, create_graph=create_graph, allow_unused=True)
                else:
                    found = (None,) * len(inputs)
                for k, (t, g) in enumerate(zip(inputs, found)):
                    if g is None:
                        if strict:
                            raise RuntimeError(f"Output {i} of the user-provided function is independent "
                                               f"of input {k}. This is not allowed in strict mode.")
                        g = _zeros_like(t)
                    rows[k].append(g if create_graph else g.detach())
            per_input = []
            for k, t in enumerate(inputs):
                if rows[k]:
                    block = front_ends.stack(rows[k]).reshape(tuple(out._shape) + tuple(t._shape))
                else:
                    block = _concrete(np.zeros(tuple(out._shape) + tuple(t._shape), t._dtype.np))
                per_input.append(block if create_graph else block.detach())
            jac.append(_tuple_back(is_in_tuple, per_input))
    return _tuple_back(is_out_tuple, jac)


def hessian(func, inputs, create_graph=False, strict=False, vectorize=False,
            outer_jacobian_strategy="reverse-mode"):
    """The Hessian of scalar ``func``: ``H[i][j]`` of shape ``inputs[i].shape + inputs[j].shape``."""
    is_in_tuple, inputs = _as_tuple(inputs, "inputs", "hessian")

    def gradient(*inp):
        out = func(*inp)
        is_out_tuple, t_out = _as_tuple(out, "outputs of the user-provided function", "hessian")
        _check_outputs(t_out, "hessian")
        if is_out_tuple or not isinstance(out, Tensor):
            raise RuntimeError("The function given to hessian should return a single Tensor")
        if out.numel() != 1:
            raise RuntimeError(f"The Tensor returned by the function given to hessian should contain a "
                               f"single element")
        return _grads((out.reshape(()),), inp, (_concrete(np.ones((), out._dtype.np)),), True, strict,
                      "hessian")

    res = jacobian(gradient, inputs, create_graph=create_graph, strict=strict, vectorize=vectorize,
                   strategy=outer_jacobian_strategy)
    if not is_in_tuple:
        return res[0][0]
    return res


def vhp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(*inputs), v^T H)`` for scalar ``func``."""
    return _second_order(func, inputs, v, create_graph, strict, "vhp")


def hvp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(*inputs), H v)`` for scalar ``func`` (``H`` symmetric: see the module doc)."""
    return _second_order(func, inputs, v, create_graph, strict, "hvp")


def _second_order(func, inputs, v, create_graph, strict, name):
    with enable_grad():
        is_in_tuple, inputs = _as_tuple(inputs, "inputs", name)
        inputs = _prepare(inputs, create_graph)
        if v is not None:
            _, v = _as_tuple(v, "v", name)
            _validate_v(v, inputs, is_in_tuple, name)
        else:
            if len(inputs) != 1 or inputs[0].numel() != 1:
                raise RuntimeError("The vector v can only be None if the input to the user-provided "
                                   "function is a single Tensor with a single element.")
            v = (_concrete(np.ones(inputs[0]._shape, inputs[0]._dtype.np)),)
        is_out_tuple, outputs = _as_tuple(func(*inputs), "outputs of the user-provided function", name)
        _check_outputs(outputs, name)
        if is_out_tuple or outputs[0].numel() != 1:
            raise RuntimeError(f"The function given to {name} should return a single Tensor "
                               f"containing a single element")
        out = outputs[0]
        if not out.requires_grad:
            if strict:
                raise RuntimeError("The output of the user-provided function is independent of input 0. "
                                   "This is not allowed in strict mode.")
            result = tuple(_zeros_like(t) for t in inputs)
        else:
            first = _grads((out,), inputs, (_concrete(np.ones(out._shape, out._dtype.np)),), True, strict,
                           name)
            result = _grads(first, inputs, v, create_graph, strict, name, what="jacobian")
    return (_finish((out,), create_graph)[0], _tuple_back(is_in_tuple, _finish(result, create_graph)))
