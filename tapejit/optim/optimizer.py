"""The optimizer base class, with torch.optim.Optimizer's structure, errors and hooks.

``param_groups`` is a list of dicts holding the parameters and every hyper-parameter,
``state`` maps a parameter to its per-parameter state (tapejit tensors), and
``state_dict()`` / ``load_state_dict()`` use torch's layout (parameters replaced by their
index in group order).  Step, state-dict and load-state-dict hooks run as torch's do (the
class's ``step`` is wrapped when its first instance is made).

Updates write the parameter's own NumPy array in place and bump its version counter once
through ``tapejit.inplace.note_leaf_write``, so a graph that saved the old value refuses
to backward with PyTorch's in-place error.  The compiled rules (SGD, Adam, RMSprop) need
1-D arrays; the 1-D views of long-lived arrays (parameters, state) are cached by array
identity so that a step on a small model costs little more than one kernel call per
parameter.  The NumPy rules of the rarer optimizers work on the arrays as they are.
"""
import copy
import functools
import itertools
import warnings
from collections import OrderedDict, defaultdict

import numpy as np

from tapejit import dtypes
from tapejit.autograd import profiler
from tapejit.creation import tensor as _new_tensor
from tapejit.creation import zeros as _new_zeros
from tapejit.grad_mode import enable_grad
from tapejit.inplace import note_leaf_write
from tapejit.tape import state as _state
from tapejit.tensor import Tensor

__all__ = ["Optimizer", "required", "register_optimizer_step_pre_hook",
           "register_optimizer_step_post_hook"]


class _RequiredParameter:
    """Marks a hyper-parameter every group must give (no default), as torch's ``required``."""

    def __repr__(self):
        return "<required parameter>"


required = _RequiredParameter()

_HOOK_DICTS = ("_optimizer_step_pre_hooks", "_optimizer_step_post_hooks",
               "_optimizer_state_dict_pre_hooks", "_optimizer_state_dict_post_hooks",
               "_optimizer_load_state_dict_pre_hooks", "_optimizer_load_state_dict_post_hooks")

_DUPLICATE_WARNING = (
    "optimizer contains a parameter group with duplicate parameters; in future, this will "
    "cause an error; see github.com/pytorch/pytorch/issues/40967 for more information")


def _typename(obj):
    """``torch.typename``'s wording for error messages."""
    if isinstance(obj, Tensor):
        return obj.type()
    cls = type(obj)
    module = cls.__module__
    if module in (None, "builtins"):
        return cls.__qualname__
    return f"{module}.{cls.__qualname__}"


class _RemovableHandle:
    """What ``register_*_hook`` returns: ``handle.remove()`` unregisters the hook (also as a
    context manager), as torch.utils.hooks.RemovableHandle."""

    _next_id = itertools.count()

    def __init__(self, hooks):
        self.hooks = hooks
        self.id = next(self._next_id)

    def remove(self):
        self.hooks.pop(self.id, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.remove()


_global_step_pre_hooks = OrderedDict()
_global_step_post_hooks = OrderedDict()


def register_optimizer_step_pre_hook(hook):
    """``hook(optimizer, args, kwargs) -> None or (new_args, new_kwargs)``, run before every
    optimizer's ``step``."""
    handle = _RemovableHandle(_global_step_pre_hooks)
    _global_step_pre_hooks[handle.id] = hook
    return handle


def register_optimizer_step_post_hook(hook):
    """``hook(optimizer, args, kwargs)``, run after every optimizer's ``step``."""
    handle = _RemovableHandle(_global_step_post_hooks)
    _global_step_post_hooks[handle.id] = hook
    return handle


def _add_hook(hooks, hook, prepend=False):
    handle = _RemovableHandle(hooks)
    hooks[handle.id] = hook
    if prepend:
        hooks.move_to_end(handle.id, last=False)
    return handle


def _hooked_step(step):
    """``step`` running the step pre- and post-hooks around it, as torch's
    ``Optimizer.profile_hook_step`` (whose hooks see the optimizer as ``args[0]`` too); with
    no hook registered, one test and a call."""
    @functools.wraps(step)
    def wrapper(*args, **kwargs):
        self = args[0]
        pre = getattr(self, "_optimizer_step_pre_hooks", None)
        post = getattr(self, "_optimizer_step_post_hooks", None)
        if not (pre or post or _global_step_pre_hooks or _global_step_post_hooks):
            return step(*args, **kwargs)
        for hook in itertools.chain(tuple(_global_step_pre_hooks.values()),
                                    tuple((pre or {}).values())):
            result = hook(self, args, kwargs)
            if result is not None:
                if not (isinstance(result, tuple) and len(result) == 2):
                    raise RuntimeError(f"{step} must return None or a tuple of "
                                       f"(new_args, new_kwargs), but got {result}.")
                args, kwargs = result
        out = step(*args, **kwargs)
        for hook in itertools.chain(tuple((post or {}).values()),
                                    tuple(_global_step_post_hooks.values())):
            hook(self, args, kwargs)
        return out

    wrapper.hooked = True
    return wrapper


def with_grads(group):
    """``(parameter, gradient)`` for each parameter of ``group`` that has a gradient (the
    others are skipped, as torch's optimizers do)."""
    for p in group["params"]:
        grad = getattr(p, "_grad", None)
        if grad is not None:
            yield p, grad


# torch's refusals of options that need a device or an autograd graph tapejit's optimizers
# do not have (capturable, differentiable), with torch's exception types and texts.
CAPTURABLE_DEVICES = "['cuda', 'xpu', 'hpu', 'privateuseone', 'xla']"
CAPTURABLE_MESSAGE = ("If capturable=True, params and state_steps must be on supported devices: "
                      + CAPTURABLE_DEVICES + ".")


def check_fused(fused, foreach, differentiable):
    """The constructor's checks of ``fused=True`` (torch's order and RuntimeErrors).  torch's
    fused kernels compute the same update, so an accepted ``fused=True`` changes nothing
    here but the step counter's dtype (float32, as torch's)."""
    if fused:
        if differentiable:
            raise RuntimeError("`fused` does not support `differentiable`")
        if foreach:
            raise RuntimeError("`fused` and `foreach` cannot be `True` together.")


def check_step_options(group, capturable_message=CAPTURABLE_MESSAGE, differentiable_rule=None):
    """Refuse a step torch refuses on the CPU, before anything is written.

    ``capturable=True`` (without ``fused``) needs an accelerator: torch asserts the devices.
    ``differentiable=True`` records the update on the autograd graph: torch's first in-place
    write to a parameter that requires grad fails with the leaf error.  tapejit does not
    record steps, so a gradient that itself requires grad is refused too (torch would record
    the update; tapejit would silently not), and so is the step of an optimizer whose
    differentiable update torch computes differently (``differentiable_rule`` names it)."""
    if group.get("capturable") and not group.get("fused"):
        for _ in with_grads(group):
            raise AssertionError(capturable_message)
    if group.get("differentiable"):
        for p, grad in with_grads(group):
            if p.requires_grad:
                raise RuntimeError("a leaf Variable that requires grad is being used in an "
                                   "in-place operation.")
            if grad.requires_grad:
                raise RuntimeError("differentiable=True with a gradient that requires grad: "
                                   "tapejit.optim does not record optimizer steps on the tape")
            if differentiable_rule is not None:
                raise RuntimeError(f"{differentiable_rule}(differentiable=True): torch's "
                                   "differentiable update computes the bias corrections in the "
                                   "step counter's dtype; tapejit implements only the usual "
                                   "update (differentiable=False)")


def _grad_array(grad, like):
    """The gradient's value as a 1-D array of the parameter array's dtype (read only)."""
    array = grad._data if grad._tape is None else grad._value()
    if array.dtype is not like.dtype and array.dtype != like.dtype:
        array = array.astype(like.dtype)
    return array if array.ndim == 1 else array.reshape(-1)


def grad_value(grad, like):
    """The gradient's value as an array of the parameter array's dtype, in the parameter's
    shape (read only: the NumPy rules never write into it)."""
    array = grad._data if grad._tape is None else grad._value()
    if array.dtype != like.dtype:
        array = array.astype(like.dtype)
    return array


def lerp_(start, end, weight):
    """``start.lerp_(end, weight)`` for a Python-float weight, with torch's two formulas
    (it switches at 0.5 for accuracy) in the array's dtype."""
    w = start.dtype.type(weight)
    if abs(w) < 0.5:
        start += w * (end - start)
    else:
        np.subtract(end, (end - start) * (start.dtype.type(1) - w), out=start)


def scalar_dtype():
    """dtype of the ``step`` counters: float64 when that is the default dtype, as in torch."""
    return dtypes.float64 if dtypes.get_default_dtype() is dtypes.float64 else dtypes.float32


class Optimizer:
    """Base class: subclasses define ``step`` and call the helpers below for arrays."""

    def __init__(self, params, defaults):
        self.defaults = defaults
        self._init_hooks()
        self._patch_step_function()
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of "
                            "Tensors or dicts, but got " + _typename(params))
        self.state = defaultdict(dict)
        self.param_groups = []
        self._views = {}
        self._copies = []
        param_groups = list(params)
        if not param_groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(param_groups[0], dict):
            param_groups = [{"params": param_groups}]
        for group in param_groups:
            self.add_param_group(group)

    # ---- hooks ------------------------------------------------------------------------------

    def _init_hooks(self):
        for name in _HOOK_DICTS:
            if name not in self.__dict__:
                setattr(self, name, OrderedDict())

    def _patch_step_function(self):
        # As torch: the class's step is wrapped once, when its first instance is made (so a
        # user-defined optimizer gets the hooks too).
        cls = type(self)
        if not getattr(cls.step, "hooked", False):
            cls.step = _hooked_step(cls.step)

    def register_step_pre_hook(self, hook):
        """``hook(optimizer, args, kwargs) -> None or (new_args, new_kwargs)`` before ``step``."""
        return _add_hook(self._optimizer_step_pre_hooks, hook)

    def register_step_post_hook(self, hook):
        """``hook(optimizer, args, kwargs)`` after ``step``."""
        return _add_hook(self._optimizer_step_post_hooks, hook)

    def register_state_dict_pre_hook(self, hook, prepend=False):
        """``hook(optimizer)`` before ``state_dict()`` builds the dict."""
        return _add_hook(self._optimizer_state_dict_pre_hooks, hook, prepend)

    def register_state_dict_post_hook(self, hook, prepend=False):
        """``hook(optimizer, state_dict) -> state_dict or None`` on the built dict."""
        return _add_hook(self._optimizer_state_dict_post_hooks, hook, prepend)

    def register_load_state_dict_pre_hook(self, hook, prepend=False):
        """``hook(optimizer, state_dict) -> state_dict or None`` before loading (it receives
        a shallow copy of the argument)."""
        return _add_hook(self._optimizer_load_state_dict_pre_hooks, hook, prepend)

    def register_load_state_dict_post_hook(self, hook, prepend=False):
        """``hook(optimizer)`` after ``load_state_dict`` loaded the state."""
        return _add_hook(self._optimizer_load_state_dict_post_hooks, hook, prepend)

    # ---- parameter groups ------------------------------------------------------------------

    def add_param_group(self, param_group):
        """Add a group of parameters (with its own hyper-parameters) to ``param_groups``."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group)}")
        params = param_group["params"]
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, set):
            raise TypeError(
                "optimizer parameters need to be organized in ordered collections, but the "
                "ordering of tensors in sets will change between runs. Please use a list instead.")
        else:
            params = list(params)
        tensors, names = [], []
        for item in params:
            if isinstance(item, tuple):  # (name, tensor) pairs from named_parameters()
                names.append(item[0])
                tensors.append(item[1])
            else:
                tensors.append(item)
        param_group["params"] = tensors
        if names:
            if len(names) != len(tensors):
                raise ValueError("all optimizer params should be with/without names. Some param "
                                 "names are missing")
            param_group["param_names"] = names

        for p in tensors:
            if not isinstance(p, Tensor):
                raise TypeError("optimizer can only optimize Tensors, but one of the params is "
                                + _typename(p))
            # Updates write the tensor's own array: a value on a tape cannot be optimized.
            if p._tape is not None:
                raise ValueError("can't optimize a non-leaf Tensor")

        for name, default in self.defaults.items():
            if default is required and name not in param_group:
                raise ValueError("parameter group didn't specify a value of required "
                                 f"optimization parameter {name}")
            param_group.setdefault(name, default)

        if len({id(p) for p in tensors}) != len(tensors):
            warnings.warn(_DUPLICATE_WARNING, UserWarning, stacklevel=3)

        seen = set()
        for group in self.param_groups:
            seen.update(id(p) for p in group["params"])
            if ("param_names" in param_group) != ("param_names" in group):
                which = "with names" if "param_names" in param_group else "without names"
                raise ValueError("all optimizer param groups should be with/without names. "
                                 f"cannot add param group {which} to the optimizer")
        if any(id(p) in seen for p in tensors):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(param_group)

    # ---- gradients ------------------------------------------------------------------------

    def zero_grad(self, set_to_none=True):
        """Reset the gradients: drop them (default) or zero them in place."""
        if _state.trace is not None:   # inside tj.compile: repeated by every replay
            from tapejit.replay.trace import side_effect   # only while tracing: eager needs no replay/
            return side_effect(type(self).zero_grad, self, set_to_none)
        for group in self.param_groups:
            for p, grad in with_grads(group):
                if set_to_none:
                    p._grad = None
                elif grad._tape is not None:
                    # A gradient with history (assigned by the user): torch detaches it and
                    # zeroes it in place; a taped value cannot be detached in place here.
                    p._grad = _new_zeros(grad._shape, dtype=grad._dtype)
                else:
                    grad.requires_grad_(False)
                    grad.zero_()

    def step(self, closure=None):
        """Perform one optimization step; ``closure`` re-evaluates the loss and returns it."""
        raise NotImplementedError

    @staticmethod
    def _evaluate(closure):
        with enable_grad():
            return closure()

    # ---- arrays for the compiled rules -----------------------------------------------------

    def _flat(self, array):
        """A 1-D view of a parameter's or state tensor's array, sharing its memory.

        Cached by identity: the entry keeps ``array`` alive, so its id cannot be reused by
        another array while the entry exists.  An array with no 1-D view (a non-contiguous
        parameter) gets a fresh copy, copied back by ``_finish_step``."""
        hit = self._views.get(id(array))
        if hit is not None and hit[0] is array:
            return hit[1]
        if array.ndim == 1:
            flat = array
        elif array.flags.c_contiguous:
            flat = array.reshape(-1)
        else:
            flat = array.ravel()
            self._copies.append((array, flat))
            return flat
        if len(self._views) > 4 * sum(len(g["params"]) for g in self.param_groups) + 64:
            self._views.clear()  # arrays replaced since (``p.data = ...``, loaded state)
        self._views[id(array)] = (array, flat)
        return flat

    def _param_flat(self, p):
        """The parameter's array as 1-D, after bumping its version once for this step's write."""
        if p._tape is not None:
            raise RuntimeError("can't optimize a non-leaf Tensor")
        note_leaf_write(p)
        return self._flat(p._data)

    def _param_array(self, p):
        """The parameter's own array (any shape and strides), for the NumPy rules, after
        bumping its version once for this step's write."""
        if p._tape is not None:
            raise RuntimeError("can't optimize a non-leaf Tensor")
        note_leaf_write(p)
        return p._data

    def _finish_step(self):
        """Copy updates made on copies of non-contiguous arrays back into them."""
        for array, flat in self._copies:
            array[...] = flat.reshape(array.shape)
        self._copies.clear()

    def _state_zeros(self, p):
        return _new_zeros(p._shape, dtype=p._dtype)

    @staticmethod
    def _step_counter(fused=False):
        # torch keeps a fused update's step in float32 whatever the default dtype
        return _new_tensor(0.0, dtype=dtypes.float32 if fused else scalar_dtype())

    # ---- state dict ------------------------------------------------------------------------

    def state_dict(self):
        """``{"state": {index: {...}}, "param_groups": [{..., "params": [indices]}]}``.

        As in torch, the state tensors are the optimizer's own (not copies): deep-copy the
        result to keep a snapshot while training continues."""
        for hook in tuple(self._optimizer_state_dict_pre_hooks.values()):
            hook(self)
        index_of = {}
        start = 0
        packed_groups = []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            for i, p in enumerate(group["params"], start):
                index_of.setdefault(id(p), i)
            packed["params"] = [index_of[id(p)] for p in group["params"]]
            start += len(packed["params"])
            packed_groups.append(packed)
        packed_state = {(index_of[id(k)] if isinstance(k, Tensor) else k): v
                        for k, v in self.state.items()}
        state_dict = {"state": packed_state, "param_groups": packed_groups}
        for hook in tuple(self._optimizer_state_dict_post_hooks.values()):
            result = hook(self, state_dict)
            if result is not None:
                state_dict = result
        return state_dict

    def load_state_dict(self, state_dict):
        """Load a state saved by ``state_dict()`` (this library's or torch's layout).

        State tensors are copied, floating-point ones cast to their parameter's dtype
        (``step`` counters keep theirs, or become float32 in a fused or capturable group, as
        in torch), so the loaded optimizer never writes into the dict."""
        state_dict = state_dict.copy()
        for hook in tuple(self._optimizer_load_state_dict_pre_hooks.values()):
            result = hook(self, state_dict)
            if result is not None:
                state_dict = result
        groups = self.param_groups
        saved_groups = copy.deepcopy(state_dict["param_groups"])
        if len(groups) != len(saved_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(len(g["params"]) != len(s["params"]) for g, s in zip(groups, saved_groups)):
            raise ValueError("loaded state dict contains a parameter group that doesn't match "
                             "the size of optimizer's group")
        param_of = {}
        float32_steps = {}
        for group, saved in zip(groups, saved_groups):
            param_of.update(zip(saved["params"], group["params"]))
            for key in saved["params"]:
                float32_steps.setdefault(key, bool(saved.get("fused") or saved.get("capturable")))

        state = defaultdict(dict)
        for key, value in state_dict["state"].items():
            if key in param_of:
                param = param_of[key]
                state[param] = _loaded_value(param, None, value, float32_steps[key])
            else:
                state[key] = value
        for group, saved in zip(groups, saved_groups):
            saved["params"] = group["params"]
            if "param_names" in group and "param_names" not in saved:
                saved["param_names"] = group["param_names"]
        self.__setstate__({"state": state, "param_groups": saved_groups})
        for hook in tuple(self._optimizer_load_state_dict_post_hooks.values()):
            hook(self)

    def __getstate__(self):
        return {"defaults": self.defaults, "state": self.state, "param_groups": self.param_groups}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._views = {}
        self._copies = []
        self._init_hooks()
        self._patch_step_function()
        # A state saved before an option existed gets its default, as torch's __setstate__.
        for group in self.param_groups:
            for name, default in self.defaults.items():
                if default is not required:
                    group.setdefault(name, default)

    def __repr__(self):
        text = self.__class__.__name__ + " ("
        for i, group in enumerate(self.param_groups):
            text += f"\nParameter Group {i}\n"
            for key in sorted(group.keys()):
                if key != "params":
                    text += f"    {key}: {group[key]}\n"
        return text + ")"


def _loaded_value(param, name, value, float32_step=False):
    """A private copy of one loaded state entry, as tapejit tensors of the right dtype
    (torch's ``_process_value_according_to_param_policy``; lists, tuples and dicts are
    copied entry by entry)."""
    if isinstance(value, Tensor) or (hasattr(value, "__array__") and hasattr(value, "shape")):
        # a copy; torch tensors (``.numpy()``) and NumPy arrays are accepted too
        array = np.array(value._value() if isinstance(value, Tensor)
                         else value.numpy() if hasattr(value, "numpy") else value)
        if name == "step":
            return _new_tensor(array, dtype=dtypes.float32 if float32_step
                               else _step_dtype(array.dtype))
        if not param._dtype.is_floating_point:
            return _new_tensor(array)
        return _new_tensor(array, dtype=param._dtype)
    if name == "step" and isinstance(value, (int, float)):
        return _new_tensor(float(value), dtype=scalar_dtype())  # old checkpoints kept a number
    if isinstance(value, dict):
        return {k: _loaded_value(param, k, v, float32_step) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_loaded_value(param, None, v, float32_step) for v in value)
    return copy.deepcopy(value)


def _step_dtype(np_dtype):
    """A step counter keeps its floating dtype; any other becomes the default scalar dtype."""
    if np_dtype == np.float64:
        return dtypes.float64
    if np_dtype == np.float32:
        return dtypes.float32
    return scalar_dtype()


profiler.time_methods_of(Optimizer, ("step", "zero_grad"))   # a profile times each step
