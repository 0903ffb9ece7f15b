"""Hook handles and module backward hooks, as ``torch.utils.hooks``.

A module's full backward hooks see the gradients with respect to its inputs and outputs
(``hook(module, grad_input, grad_output)``).  As in torch, ``Module.__call__`` passes the
tensors that require grad through an identity ``autograd.Function``
(``BackwardHookFunction``) on the way in and on the way out.  The engine stops the compiled
sweep at each such Function and calls its ``backward`` in Python: the output one receives
``grad_output`` (and runs the backward pre-hooks, which may replace it), the input one
receives ``grad_input`` and runs the hooks.  The module's outputs then have
``grad_fn=<BackwardHookFunctionBackward>``, as in torch.
"""
import os
import sys
import warnings
import weakref
from collections import OrderedDict

from tapejit.autograd.function import Function
from tapejit.creation import zeros
from tapejit.tape import state
from tapejit.tensor import Tensor

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class RemovableHandle:
    """``handle.remove()`` takes the hook out of ``hooks_dict`` (and of each ``extra_dict``);
    also a context manager that removes it on exit."""

    next_id = 0

    def __init__(self, hooks_dict, *, extra_dict=None):
        self.hooks_dict_ref = weakref.ref(hooks_dict)
        self.id = RemovableHandle.next_id
        RemovableHandle.next_id += 1
        self.extra_dict_ref = ()
        if isinstance(extra_dict, dict):
            self.extra_dict_ref = (weakref.ref(extra_dict),)
        elif isinstance(extra_dict, list):
            self.extra_dict_ref = tuple(weakref.ref(d) for d in extra_dict)

    def remove(self):
        hooks_dict = self.hooks_dict_ref()
        if hooks_dict is not None and self.id in hooks_dict:
            del hooks_dict[self.id]
        for ref in self.extra_dict_ref:
            extra_dict = ref()
            if extra_dict is not None and self.id in extra_dict:
                del extra_dict[self.id]

    def __getstate__(self):
        return (self.hooks_dict_ref(), self.id, tuple(ref() for ref in self.extra_dict_ref))

    def __setstate__(self, state):
        self.hooks_dict_ref = weakref.ref(OrderedDict() if state[0] is None else state[0])
        self.id = state[1]
        RemovableHandle.next_id = max(RemovableHandle.next_id, self.id + 1)
        extra = state[2] if len(state) > 2 else None
        self.extra_dict_ref = () if extra is None else tuple(weakref.ref(d) for d in extra)

    def __enter__(self):
        return self

    def __exit__(self, type, value, tb):
        self.remove()


def user_stacklevel():
    """The ``stacklevel`` that points a warning at the first frame outside tapejit."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE + os.sep):
        frame = frame.f_back
        level += 1
    return level


class BackwardHookFunction(Function):
    """The identity; its ``backward`` hands the gradients to a ``BackwardHook``."""

    @staticmethod
    def forward(ctx, on_backward, materialize, *tensors):
        ctx.on_backward = on_backward
        ctx.set_materialize_grads(materialize)
        return tensors

    @staticmethod
    def backward(ctx, *grads):
        return (None, None) + tuple(ctx.on_backward(grads))


def _check_sizes(values, grads, positions):
    """A hook's replacement gradients must keep the shapes (torch's check, and its text:
    the hook it names is its internal node hook, always called 'hook')."""
    for i, g in zip(positions, grads):
        value = values[i]
        if isinstance(value, Tensor) and g is not None and tuple(value.shape) != tuple(g.shape):
            raise RuntimeError("hook 'hook' has changed the size of value")


class BackwardHook:
    """One call's full backward hooks: wraps the call's inputs and outputs, collects
    ``grad_output`` at the outputs and calls the hooks when ``grad_input`` arrives."""

    def __init__(self, module, user_hooks, user_pre_hooks):
        self.user_hooks = user_hooks
        self.user_pre_hooks = user_pre_hooks
        self.module = module
        self.grad_outputs = None
        self.n_outputs = -1
        self.output_tensors_index = None
        self.n_inputs = -1
        self.input_tensors_index = None
        self.unwrapped_inputs = ()   # (position, shape, dtype) of tensor inputs needing no grad
        self.wrapped_inputs = ()
        self.wrapped_outputs = ()

    def _wrap(self, args, on_backward, materialize):
        """Pass ``args``' tensors that require grad through ``BackwardHookFunction``:
        ``(new args, indices of all tensor args, indices of the wrapped ones)``, or
        ``(args, None, ())`` when no tensor requires grad (or grad mode is off)."""
        tensors_idx = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        wrapped_idx = [i for i in tensors_idx if args[i].requires_grad]
        if not (wrapped_idx and state.grad):
            return args, None, ()
        if state.trace is not None:
            from tapejit.replay.trace import refuse
            refuse(f"a full backward hook on module {type(self.module).__name__} "
                   "(register_full_backward_hook / register_full_backward_pre_hook)",
                   "the hook runs Python in the middle of the backward sweep, which a replay does "
                   "not run.")
        new = BackwardHookFunction.apply(on_backward, materialize, *(args[i] for i in wrapped_idx))
        arg_list = list(args)
        for i, t in zip(wrapped_idx, new):
            arg_list[i] = t
        out = tuple(arg_list) if type(args) is tuple else type(args)(*arg_list)
        return out, tensors_idx, tuple(wrapped_idx)

    def setup_input_hook(self, args):
        res, self.input_tensors_index, self.wrapped_inputs = self._wrap(args, self._on_input_grads, True)
        if self.input_tensors_index is not None:
            self.unwrapped_inputs = tuple((i, args[i].shape, args[i].dtype) for i in self.input_tensors_index
                                          if i not in self.wrapped_inputs)
        self.n_inputs = len(args)
        return res

    def setup_output_hook(self, result):
        is_tuple = isinstance(result, tuple)
        args = result if is_tuple else (result,)
        res, self.output_tensors_index, self.wrapped_outputs = self._wrap(args, self._on_output_grads, False)
        self.n_outputs = len(args)
        return res if is_tuple else res[0]

    def _on_output_grads(self, grads):
        """The outputs' gradients (None where none arrived): the pre-hooks may replace them;
        when no input requires grad, the hooks run now, with ``grad_input`` all None."""
        packed = [None] * self.n_outputs
        for i, g in zip(self.wrapped_outputs, grads):
            packed[i] = g
        self.grad_outputs = tuple(packed)
        if self.user_pre_hooks:
            expected = len(self.grad_outputs)
            for hook in self.user_pre_hooks:
                result = hook(self.module, self.grad_outputs)
                if result is None:
                    continue
                if len(result) != expected:
                    raise RuntimeError("Backward pre hook returned an invalid number of grad_output, "
                                       f"got {len(result)}, but expected {expected}")
                self.grad_outputs = result
        local_grad_outputs = self.grad_outputs
        _check_sizes(local_grad_outputs, grads, self.wrapped_outputs)
        if self.input_tensors_index is None:
            warnings.warn(
                "Full backward hook is firing when gradients are computed with respect to module "
                "outputs since no inputs require gradients. See "
                "https://docs.pytorch.org/docs/main/generated/torch.nn.Module.html#torch.nn.Module.register_full_backward_hook "
                "for more details.", stacklevel=user_stacklevel())
            grad_inputs = (None,) * self.n_inputs
            for hook in self.user_hooks:
                res = hook(self.module, grad_inputs, self.grad_outputs)
                if res is not None and not (isinstance(res, tuple) and all(el is None for el in res)):
                    raise RuntimeError("Backward hook for Modules where no input requires gradient "
                                       "should always return None or None for all gradients.")
            self.grad_outputs = None
        return tuple(local_grad_outputs[i] for i in self.wrapped_outputs)

    def _on_input_grads(self, grads):
        """The gradients reaching the inputs through the module: ``grad_input`` (zeros for a
        tensor input that requires no grad, None for a non-tensor, as torch) for the hooks,
        which may replace it."""
        if self.grad_outputs is None:
            # The gradient reached the inputs without passing through the outputs (or the
            # hooks already ran for this backward): torch calls no hook then.
            return grads
        res = [None] * self.n_inputs
        for i, shape, dtype in self.unwrapped_inputs:
            res[i] = zeros(shape, dtype=dtype)
        for i, g in zip(self.wrapped_inputs, grads):
            res[i] = g
        res = tuple(res)
        for hook in self.user_hooks:
            out = hook(self.module, res, self.grad_outputs)
            if out is None:
                continue
            if len(out) != len(res):
                raise RuntimeError("Backward hook returned an invalid number of grad_input, "
                                   f"got {len(out)}, but expected {len(res)}")
            res = out
        self.grad_outputs = None
        _check_sizes(res, grads, self.wrapped_inputs)
        return tuple(res[i] for i in self.wrapped_inputs)
