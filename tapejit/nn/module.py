"""``Module``: the base class of layers, with torch's registration, traversal, hooks,
``state_dict`` and ``repr``.

Parameters, buffers and submodules are kept in the registries ``_parameters``,
``_buffers`` and ``_modules`` (which fix the order of traversal and of ``state_dict``
keys) and also in the instance ``__dict__``: reading ``self.weight`` in ``forward`` is then
a plain attribute lookup rather than torch's ``__getattr__`` fallback, which matters for
small models where Python overhead is most of a step.  The registries are ``_Registry``
dicts that copy every change into the owner's ``__dict__``, so code that edits them
directly (``model._modules["fc"] = ...``, ``del model._parameters["weight"]``, as torch's
own containers and many scripts do) stays in step.  A registry entry whose name is also a
class attribute is not copied: in torch the class attribute wins there too.
"""
import inspect
import itertools
import warnings
import weakref
from collections import OrderedDict, namedtuple
from collections.abc import Mapping

import numpy as np

from tapejit import dtypes
from tapejit.creation import as_tensor as _as_tensor
from tapejit.creation import zeros_like as _zeros_like
from tapejit.device import unavailable
from tapejit.grad_mode import no_grad
from tapejit.nn.hooks import BackwardHook, RemovableHandle, user_stacklevel
from tapejit.nn.parameter import Parameter, set_leaf_value
from tapejit.printing import type_name
from tapejit.tape import state as _state
from tapejit.tensor import Tensor, narrow_grad_error

__all__ = [
    "Module",
    "register_module_forward_hook",
    "register_module_forward_pre_hook",
    "register_module_full_backward_hook",
    "register_module_full_backward_pre_hook",
]


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """``load_state_dict``'s result, printed as torch prints it."""
    __slots__ = ()

    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


def _typename(value):
    """``torch.typename``: a tensor's legacy type name, else the class's qualified name
    (without ``builtins.``)."""
    if isinstance(value, Tensor):
        return type_name(value)
    cls = type(value)
    module = cls.__module__ or ""
    return cls.__qualname__ if module in ("", "builtins") else f"{module}.{cls.__qualname__}"


def _addindent(text, spaces):
    """Indent every line of ``text`` but the first (blank lines stay empty), as torch's
    ``nn.modules.module._addindent``."""
    lines = text.split("\n")
    if len(lines) == 1:
        return text
    return lines[0] + "\n" + "\n".join(" " * spaces + line if line.strip() else "" for line in lines[1:])


# ---- registries ------------------------------------------------------------------------------

_MISSING = object()
_REGISTRIES = ("_parameters", "_buffers", "_modules")


class _Registry(dict):
    """A module's ``_parameters``, ``_buffers`` or ``_modules``: a dict whose changes are
    copied into the owner's instance ``__dict__``.  Pickles and copies as a plain dict;
    ``Module.__setstate__`` binds it to its new owner."""
    __slots__ = ("_owner",)

    def __init__(self, owner=None):
        dict.__init__(self)
        self._owner = None if owner is None else weakref.ref(owner)

    def _mirror(self, name):
        """The owner's ``__dict__`` if entry ``name`` is to be mirrored there, else None."""
        ref = self._owner
        owner = None if ref is None else ref()
        if owner is None or not isinstance(name, str) or getattr(type(owner), name, _MISSING) is not _MISSING:
            return None
        return owner.__dict__

    def __setitem__(self, name, value):
        dict.__setitem__(self, name, value)
        mirror = self._mirror(name)
        if mirror is not None:
            mirror[name] = value

    def __delitem__(self, name):
        dict.__delitem__(self, name)
        mirror = self._mirror(name)
        if mirror is not None:
            mirror.pop(name, None)

    def pop(self, name, *default):
        if name in self:
            value = self[name]
            del self[name]
            return value
        return dict.pop(self, name, *default)

    def popitem(self):
        name, value = dict.popitem(self)
        mirror = self._mirror(name)
        if mirror is not None:
            mirror.pop(name, None)
        return name, value

    def setdefault(self, name, default=None):
        if name not in self:
            self[name] = default
        return self[name]

    def update(self, *args, **kwargs):
        for name, value in dict(*args, **kwargs).items():
            self[name] = value

    def __ior__(self, other):
        self.update(other)
        return self

    def clear(self):
        for name in list(self):
            del self[name]

    def copy(self):
        return dict(self)

    def __reduce__(self):
        return (dict, (dict(self),))


def _new_registry(module, items=()):
    registry = _Registry(module)
    for name, value in items:
        registry[name] = value
    return registry


# ---- global hooks ----------------------------------------------------------------------------

# False until a forward or backward hook is registered on any module (or a module holding
# hooks is unpickled or copied): until then ``Module.__call__`` skips its eight hook-dict
# checks, a measurable share of a small module's call.  Hooks put into the dicts directly,
# bypassing the ``register_*`` methods, are seen once this is True.
_hooks_in_use = False


def _note_hooks():
    global _hooks_in_use
    _hooks_in_use = True


_global_backward_pre_hooks = OrderedDict()
_global_backward_hooks = OrderedDict()
_global_is_full_backward_hook = None
_global_forward_pre_hooks = OrderedDict()
_global_forward_hooks = OrderedDict()
_global_forward_hooks_always_called = OrderedDict()
_global_forward_hooks_with_kwargs = OrderedDict()


def register_module_forward_pre_hook(hook):
    """A forward pre-hook for every module (runs before the module's own)."""
    _note_hooks()
    handle = RemovableHandle(_global_forward_pre_hooks)
    _global_forward_pre_hooks[handle.id] = hook
    return handle


def register_module_forward_hook(hook, *, with_kwargs=False, always_call=False):
    """A forward hook for every module (runs before the module's own)."""
    _note_hooks()
    handle = RemovableHandle(_global_forward_hooks, extra_dict=[
        _global_forward_hooks_always_called, _global_forward_hooks_with_kwargs])
    _global_forward_hooks[handle.id] = hook
    if with_kwargs:
        _global_forward_hooks_with_kwargs[handle.id] = True
    if always_call:
        _global_forward_hooks_always_called[handle.id] = True
    return handle


def register_module_full_backward_pre_hook(hook):
    _note_hooks()
    handle = RemovableHandle(_global_backward_pre_hooks)
    _global_backward_pre_hooks[handle.id] = hook
    return handle


def register_module_full_backward_hook(hook):
    _note_hooks()
    global _global_is_full_backward_hook
    _global_is_full_backward_hook = True
    handle = RemovableHandle(_global_backward_hooks)
    _global_backward_hooks[handle.id] = hook
    return handle


def _legacy_backward_hook_error():
    return NotImplementedError(
        "register_backward_hook (the deprecated non-full module backward hook) is not supported: "
        "its grad_input is the gradient of the inputs of the last autograd node of the module's "
        "forward, which depends on how torch splits that forward into nodes. Use "
        "register_full_backward_hook, whose grad_input and grad_output are the gradients with "
        "respect to the module's inputs and outputs.")


# ---- devices ---------------------------------------------------------------------------------

def _not_compiled_with(backend, device):
    """What a CPU-only torch build raises on moving a tensor to ``backend``."""
    if isinstance(device, int) and not isinstance(device, bool):
        return RuntimeError("Cannot access accelerator device when none is available.")
    return AssertionError(f"Torch not compiled with {backend} enabled")


def _raise(error):
    raise error


def _float16_dtype(name):
    dt = getattr(dtypes, name, None)
    if dt is None:
        raise TypeError(f"tapejit has no {name} dtype: parameters stay in float32 or float64")
    return dt


class Module:
    """Base class for layers: assign ``Parameter``s, ``Module``s and (via
    ``register_buffer``) tensors as attributes in ``__init__`` and define ``forward``."""

    dump_patches = False
    _version = 1
    call_super_init = False

    def __init__(self, *args, **kwargs):
        if self.call_super_init is False and kwargs:
            raise TypeError(f"{type(self).__name__}.__init__() got an unexpected keyword argument "
                            f"'{next(iter(kwargs))}'")
        if self.call_super_init is False and args:
            raise TypeError(f"{type(self).__name__}.__init__() takes 1 positional argument but "
                            f"{len(args) + 1} were given")
        set_ = object.__setattr__
        set_(self, "training", True)
        set_(self, "_parameters", _Registry(self))
        set_(self, "_buffers", _Registry(self))
        set_(self, "_non_persistent_buffers_set", set())
        set_(self, "_backward_pre_hooks", OrderedDict())
        set_(self, "_backward_hooks", OrderedDict())
        set_(self, "_is_full_backward_hook", None)
        set_(self, "_forward_hooks", OrderedDict())
        set_(self, "_forward_hooks_with_kwargs", OrderedDict())
        set_(self, "_forward_hooks_always_called", OrderedDict())
        set_(self, "_forward_pre_hooks", OrderedDict())
        set_(self, "_forward_pre_hooks_with_kwargs", OrderedDict())
        set_(self, "_state_dict_hooks", OrderedDict())
        set_(self, "_state_dict_pre_hooks", OrderedDict())
        set_(self, "_load_state_dict_pre_hooks", OrderedDict())
        set_(self, "_load_state_dict_post_hooks", OrderedDict())
        set_(self, "_modules", _Registry(self))
        if self.call_super_init:
            super().__init__(*args, **kwargs)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(
            f'Module [{type(self).__name__}] is missing the required "forward" function')

    def __call__(self, *args, **kwargs):
        if _hooks_in_use and (self._forward_hooks or self._forward_pre_hooks or self._backward_hooks
                              or self._backward_pre_hooks or _global_forward_hooks or _global_forward_pre_hooks
                              or _global_backward_hooks or _global_backward_pre_hooks):
            return self._call_with_hooks(args, kwargs)
        return self.forward(*args, **kwargs)

    def _call_with_hooks(self, args, kwargs):
        """torch's ``Module._call_impl``: pre-hooks, backward-hook wrapping of the inputs,
        ``forward``, forward hooks, wrapping of the outputs; ``always_call`` hooks also run
        when ``forward`` raises."""
        result = None
        called_always_called_hooks = set()

        def inner():
            nonlocal result, args, kwargs
            full_backward_hooks = []
            backward_pre_hooks = []
            if self._backward_pre_hooks or _global_backward_pre_hooks:
                backward_pre_hooks = [*_global_backward_pre_hooks.values(), *self._backward_pre_hooks.values()]
            if self._backward_hooks or _global_backward_hooks:
                full_backward_hooks = self._get_backward_hooks()
            if _global_forward_pre_hooks or self._forward_pre_hooks:
                for hook_id, hook in (*_global_forward_pre_hooks.items(), *self._forward_pre_hooks.items()):
                    if hook_id in self._forward_pre_hooks_with_kwargs:
                        args_kwargs_result = hook(self, args, kwargs)
                        if args_kwargs_result is not None:
                            if isinstance(args_kwargs_result, tuple) and len(args_kwargs_result) == 2:
                                args, kwargs = args_kwargs_result
                            else:
                                raise RuntimeError("forward pre-hook must return None or a tuple of "
                                                   f"(new_args, new_kwargs), but got {args_kwargs_result}.")
                    else:
                        args_result = hook(self, args)
                        if args_result is not None:
                            if not isinstance(args_result, tuple):
                                args_result = (args_result,)
                            args = args_result
            bw_hook = None
            if full_backward_hooks or backward_pre_hooks:
                bw_hook = BackwardHook(self, full_backward_hooks, backward_pre_hooks)
                args = bw_hook.setup_input_hook(args)
            result = self.forward(*args, **kwargs)
            if _global_forward_hooks or self._forward_hooks:
                for hook_id, hook in (*_global_forward_hooks.items(), *self._forward_hooks.items()):
                    if hook_id in self._forward_hooks_always_called or hook_id in _global_forward_hooks_always_called:
                        called_always_called_hooks.add(hook_id)
                    if hook_id in self._forward_hooks_with_kwargs or hook_id in _global_forward_hooks_with_kwargs:
                        hook_result = hook(self, args, kwargs, result)
                    else:
                        hook_result = hook(self, args, result)
                    if hook_result is not None:
                        result = hook_result
            if bw_hook:
                if not isinstance(result, (Tensor, tuple)):
                    warnings.warn("For backward hooks to be called, module output should be a Tensor or "
                                  f"a tuple of Tensors but received {type(result)}", stacklevel=user_stacklevel())
                result = bw_hook.setup_output_hook(result)
            return result

        try:
            return inner()
        except Exception:
            for hook_id, hook in _global_forward_hooks.items():
                if hook_id in _global_forward_hooks_always_called and hook_id not in called_always_called_hooks:
                    try:
                        hook_result = hook(self, args, result)
                        if hook_result is not None:
                            result = hook_result
                    except Exception as e:
                        warnings.warn("global module forward hook with ``always_call=True`` raised an exception "
                                      f"that was silenced as another error was raised in forward: {e}",
                                      stacklevel=user_stacklevel())
                        continue
            for hook_id, hook in self._forward_hooks.items():
                if hook_id in self._forward_hooks_always_called and hook_id not in called_always_called_hooks:
                    try:
                        if hook_id in self._forward_hooks_with_kwargs:
                            hook_result = hook(self, args, kwargs, result)
                        else:
                            hook_result = hook(self, args, result)
                        if hook_result is not None:
                            result = hook_result
                    except Exception as e:
                        warnings.warn("module forward hook with ``always_call=True`` raised an exception "
                                      f"that was silenced as another error was raised in forward: {e}",
                                      stacklevel=user_stacklevel())
                        continue
            raise

    # ---- hooks -----------------------------------------------------------------------------

    def register_forward_pre_hook(self, hook, *, prepend=False, with_kwargs=False):
        """``hook(module, args)`` (or ``hook(module, args, kwargs)`` ``with_kwargs``) before
        ``forward``; a returned value replaces the arguments."""
        _note_hooks()
        handle = RemovableHandle(self._forward_pre_hooks, extra_dict=self._forward_pre_hooks_with_kwargs)
        self._forward_pre_hooks[handle.id] = hook
        if with_kwargs:
            self._forward_pre_hooks_with_kwargs[handle.id] = True
        if prepend:
            self._forward_pre_hooks.move_to_end(handle.id, last=False)
        return handle

    def register_forward_hook(self, hook, *, prepend=False, with_kwargs=False, always_call=False):
        """``hook(module, args, output)`` (or ``hook(module, args, kwargs, output)``) after
        ``forward``; a returned value replaces the output."""
        _note_hooks()
        handle = RemovableHandle(self._forward_hooks, extra_dict=[
            self._forward_hooks_with_kwargs, self._forward_hooks_always_called])
        self._forward_hooks[handle.id] = hook
        if with_kwargs:
            self._forward_hooks_with_kwargs[handle.id] = True
        if always_call:
            self._forward_hooks_always_called[handle.id] = True
        if prepend:
            self._forward_hooks.move_to_end(handle.id, last=False)
        return handle

    def register_full_backward_pre_hook(self, hook, prepend=False):
        """``hook(module, grad_output)`` when the gradients of the outputs are known; a
        returned tuple replaces ``grad_output``."""
        _note_hooks()
        handle = RemovableHandle(self._backward_pre_hooks)
        self._backward_pre_hooks[handle.id] = hook
        if prepend:
            self._backward_pre_hooks.move_to_end(handle.id, last=False)
        return handle

    def register_full_backward_hook(self, hook, prepend=False):
        """``hook(module, grad_input, grad_output)`` when the gradients of the inputs are
        known; a returned tuple replaces ``grad_input``."""
        _note_hooks()
        if self._is_full_backward_hook is False:
            raise RuntimeError("Cannot use both regular backward hooks and full backward hooks on a "
                               "single Module. Please use only one of them.")
        self._is_full_backward_hook = True
        handle = RemovableHandle(self._backward_hooks)
        self._backward_hooks[handle.id] = hook
        if prepend:
            self._backward_hooks.move_to_end(handle.id, last=False)
        return handle

    def register_backward_hook(self, hook):
        if self._is_full_backward_hook is True:
            raise RuntimeError("Cannot use both regular backward hooks and full backward hooks on a "
                               "single Module. Please use only one of them.")
        raise _legacy_backward_hook_error()

    def _get_backward_hooks(self):
        hooks = []
        if _global_is_full_backward_hook is True:
            hooks += _global_backward_hooks.values()
        if self._is_full_backward_hook is True:
            hooks += self._backward_hooks.values()
        return hooks

    # ---- registration ----------------------------------------------------------------------

    def __setattr__(self, name, value):
        d = self.__dict__
        params = d.get("_parameters")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            self._remove_everywhere(name, keep=params)
            self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{_typename(value)}' as parameter '{name}' "
                                "(torch.nn.Parameter or None expected)")
            self.register_parameter(name, value)
        else:
            modules = d.get("_modules")
            if isinstance(value, Module):
                if modules is None:
                    raise AttributeError("cannot assign module before Module.__init__() call")
                self._remove_everywhere(name, keep=modules)
                modules[name] = value
            elif modules is not None and name in modules:
                if value is not None:
                    raise TypeError(f"cannot assign '{_typename(value)}' as child module '{name}' "
                                    "(torch.nn.Module or None expected)")
                modules[name] = value
            else:
                buffers = d.get("_buffers")
                if buffers is not None and name in buffers:
                    if value is not None and not isinstance(value, Tensor):
                        raise TypeError(f"cannot assign '{_typename(value)}' as buffer '{name}' "
                                        "(torch.nn.Buffer, torch.Tensor or None expected)")
                    persistent = name not in self._non_persistent_buffers_set
                    if getattr(self.register_buffer, "__func__", None) is Module.register_buffer:
                        self.register_buffer(name, value, persistent)
                    elif "persistent" in inspect.signature(self.register_buffer).parameters:
                        self.register_buffer(name, value, persistent)
                    else:
                        if not persistent:
                            raise RuntimeError("Registering a non-persistent buffer on a Module subclass "
                                               "that implements register_buffer() without the persistent "
                                               "argument is not allowed.")
                        self.register_buffer(name, value)
                elif name in _REGISTRIES and isinstance(value, dict) and params is not None:
                    self._bind_registry(name, value)
                else:
                    object.__setattr__(self, name, value)   # (a property's setter, if any)

    def _remove_everywhere(self, name, keep):
        """Before ``name`` is registered in ``keep``: drop it from the other registries and
        from the plain attributes, as torch's ``__setattr__`` does."""
        d = self.__dict__
        for registry in _REGISTRIES:
            entries = d[registry]
            if entries is not keep and name in entries:
                del entries[name]
        d.pop(name, None)
        d["_non_persistent_buffers_set"].discard(name)

    def _bind_registry(self, name, entries):
        """Make ``entries`` (a dict) registry ``name`` of this module, mirrored in
        ``__dict__`` (``self._modules = OrderedDict(...)`` as torch's containers write)."""
        d = self.__dict__
        old = d.get(name)
        if isinstance(old, dict):
            for key, value in old.items():
                if key in d and d[key] is value and key not in entries:
                    del d[key]
        d[name] = _new_registry(self, list(entries.items()))

    def __delattr__(self, name):
        if name in self._parameters:
            del self._parameters[name]
        elif name in self._buffers:
            del self._buffers[name]
            self._non_persistent_buffers_set.discard(name)
        elif name in self._modules:
            del self._modules[name]
        else:
            object.__delattr__(self, name)

    def __setstate__(self, state):
        self.__dict__.update(state)
        for name in ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_hooks",
                     "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_state_dict_hooks",
                     "_state_dict_pre_hooks", "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks",
                     "_backward_pre_hooks", "_backward_hooks"):
            if name not in self.__dict__:
                object.__setattr__(self, name, OrderedDict())
        if "_non_persistent_buffers_set" not in self.__dict__:
            object.__setattr__(self, "_non_persistent_buffers_set", set())
        if "_is_full_backward_hook" not in self.__dict__:
            object.__setattr__(self, "_is_full_backward_hook", None)
        if any(self.__dict__[name] for name in ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks",
                                                "_backward_hooks")):
            _note_hooks()
        for name in _REGISTRIES:
            entries = self.__dict__.get(name)
            if isinstance(entries, dict):   # unpickled as a plain dict, or shared with the original by copy.copy
                self._bind_registry(name, entries)

    def _check_name(self, name, kind, registry):
        if not isinstance(name, str):
            raise TypeError(f"{kind} name should be a string. Got {_typename(name)}")
        if "." in name:
            raise KeyError(f"{kind} name can't contain \".\"")
        if name == "":
            raise KeyError(f"{kind} name can't be empty string \"\"")
        if hasattr(self, name) and name not in registry:
            raise KeyError(f"attribute '{name}' already exists")

    def register_parameter(self, name, param):
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        self._check_name(name, "parameter", self._parameters)
        if param is None:
            self._parameters[name] = None
        elif not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{_typename(param)}' object to parameter '{name}' "
                            "(torch.nn.Parameter or None required)")
        elif param.grad_fn:
            raise ValueError(f"Cannot assign non-leaf Tensor to parameter '{name}'. Model parameters must "
                             f"be created explicitly. To express '{name}' as a function of another Tensor, "
                             "compute the value in the forward() method.")
        else:
            self._parameters[name] = param

    def register_buffer(self, name, tensor, persistent=True):
        """A tensor the module keeps (in ``state_dict`` unless ``persistent=False``) that is
        not a parameter, such as running statistics."""
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        self._check_name(name, "buffer", self._buffers)
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{_typename(tensor)}' object to buffer '{name}' "
                            "(torch Tensor or None required)")
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def add_module(self, name, module):
        if not isinstance(module, Module) and module is not None:
            raise TypeError(f"{_typename(module)} is not a Module subclass")
        if not isinstance(name, str):
            raise TypeError(f"module name should be a string. Got {_typename(name)}")
        if hasattr(self, name) and name not in self._modules:
            raise KeyError(f"attribute '{name}' already exists")
        if "." in name:
            raise KeyError(f"module name can't contain \".\", got: {name}")
        if name == "":
            raise KeyError("module name can't be empty string \"\"")
        self._modules[name] = module

    def register_module(self, name, module):
        self.add_module(name, module)

    def get_submodule(self, target):
        if target == "":
            return self
        module = self
        for item in target.split("."):
            if not hasattr(module, item):
                raise AttributeError(module._get_name() + " has no attribute `" + item + "`")
            module = getattr(module, item)
            if not isinstance(module, Module):
                raise AttributeError("`" + item + "` is not an nn.Module")
        return module

    def set_submodule(self, target, module, strict=False):
        if target == "":
            raise ValueError("Cannot set the submodule without a target name!")
        atoms = target.split(".")
        if not isinstance(module, Module):
            raise ValueError(f"`module` is not an nn.Module, found {type(module)}")
        parent = self if len(atoms) == 1 else self.get_submodule(".".join(atoms[:-1]))
        if strict and not hasattr(parent, atoms[-1]):
            raise AttributeError(parent._get_name() + " has no attribute `" + atoms[-1] + "`")
        if hasattr(parent, atoms[-1]) and not isinstance(getattr(parent, atoms[-1]), Module):
            raise AttributeError("`" + atoms[-1] + "` is not an nn.Module")
        setattr(parent, atoms[-1], module)

    def get_parameter(self, target):
        module_path, _, name = target.rpartition(".")
        module = self.get_submodule(module_path)
        if not hasattr(module, name):
            raise AttributeError(module._get_name() + " has no attribute `" + name + "`")
        param = getattr(module, name)
        if not isinstance(param, Parameter):
            raise AttributeError("`" + name + "` is not an nn.Parameter")
        return param

    def get_buffer(self, target):
        module_path, _, name = target.rpartition(".")
        module = self.get_submodule(module_path)
        if not hasattr(module, name):
            raise AttributeError(module._get_name() + " has no attribute `" + name + "`")
        buf = getattr(module, name)
        if name not in module._buffers:
            raise AttributeError("`" + name + "` is not a buffer")
        return buf

    def get_extra_state(self):
        raise RuntimeError(
            "Reached a code path in Module.get_extra_state() that should never be called. Please file "
            "an issue at https://github.com/pytorch/pytorch/issues/new?template=bug-report.yml to "
            "report this bug.")

    def set_extra_state(self, state):
        raise RuntimeError(
            "Reached a code path in Module.set_extra_state() that should never be called. Please file "
            "an issue at https://github.com/pytorch/pytorch/issues/new?template=bug-report.yml to "
            "report this bug.")

    # ---- traversal -------------------------------------------------------------------------

    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        if memo is None:
            memo = set()
        if self not in memo:
            if remove_duplicate:
                memo.add(self)
            yield prefix, self
            for name, module in self._modules.items():
                if module is None:
                    continue
                yield from module.named_modules(memo, prefix + ("." if prefix else "") + name, remove_duplicate)

    def modules(self, remove_duplicate=True):
        for _, module in self.named_modules(remove_duplicate=remove_duplicate):
            yield module

    def named_children(self):
        memo = set()
        for name, module in self._modules.items():
            if module is not None and module not in memo:
                memo.add(module)
                yield name, module

    def children(self):
        for _, module in self.named_children():
            yield module

    def _named_members(self, get_members, prefix="", recurse=True, remove_duplicate=True):
        seen = set()   # ids: a tensor's == compares values
        owners = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse \
            else [(prefix, self)]
        for owner_prefix, owner in owners:
            for name, value in get_members(owner):
                if value is None or id(value) in seen:
                    continue
                if remove_duplicate:
                    seen.add(id(value))
                yield owner_prefix + ("." if owner_prefix else "") + name, value

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        yield from self._named_members(lambda m: m._parameters.items(), prefix, recurse, remove_duplicate)

    def parameters(self, recurse=True):
        for _, param in self.named_parameters(recurse=recurse):
            yield param

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        yield from self._named_members(lambda m: m._buffers.items(), prefix, recurse, remove_duplicate)

    def buffers(self, recurse=True):
        for _, buf in self.named_buffers(recurse=recurse):
            yield buf

    def apply(self, fn):
        """``fn(module)`` on every submodule (children first) and then on this one."""
        for module in self.children():
            module.apply(fn)
        fn(self)
        return self

    # ---- modes and gradients ---------------------------------------------------------------

    def train(self, mode=True):
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")  # noqa: TRY004 (torch raises ValueError)
        self.training = mode
        for module in self.children():
            module.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        for param in self.parameters():
            param.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none=True):
        if _state.trace is not None:   # inside tj.compile: repeated by every replay
            from tapejit.replay.trace import side_effect
            return side_effect(type(self).zero_grad, self, set_to_none)
        for param in self.parameters():
            grad = param.grad
            if grad is None:
                continue
            if set_to_none:
                param.grad = None
            elif grad.grad_fn is not None:
                # torch detaches the gradient in place; a recorded tensor cannot be, so it
                # gets a fresh zero leaf instead.
                param.grad = _zeros_like(grad)
            else:
                grad.requires_grad_(False)
                grad.zero_()

    # ---- conversion ------------------------------------------------------------------------

    def _apply(self, fn, recurse=True):
        """Apply ``fn`` to every parameter, gradient and buffer.  A parameter (and a leaf
        gradient) keeps its object and takes the new value, as torch's ``param.data = ...``,
        so an optimizer built earlier still holds it; buffers are replaced."""
        if recurse:
            for module in self.children():
                module._apply(fn)
        for param in self._parameters.values():
            if param is None:
                continue
            with no_grad():
                applied = fn(param)
            if applied is not param:
                if param.requires_grad and not applied.dtype.is_floating_point:
                    raise RuntimeError("Only Tensors of floating point and complex dtype can require gradients")
                if param.requires_grad and applied.dtype.narrow:
                    raise RuntimeError(narrow_grad_error(applied.dtype) + " (for inference: "
                                       "module.requires_grad_(False) first)")
                set_leaf_value(param, applied.detach()._value())
            grad = param.grad
            if grad is not None:
                with no_grad():
                    grad_applied = fn(grad)
                if grad_applied is not grad:
                    if grad.grad_fn is None:
                        set_leaf_value(grad, np.asarray(grad_applied.detach()))
                    else:
                        param.grad = grad_applied
        for key, buf in self._buffers.items():
            if buf is not None:
                self._buffers[key] = fn(buf)
        return self

    def to(self, *args, **kwargs):
        """``to(dtype)``, ``to(device)``, ``to(device, dtype)``, ``to(tensor)``: converts
        floating-point parameters (in place), their gradients and floating-point buffers.
        The CPU is the only device; ``"cuda"`` raises torch's CPU-build error."""
        device, dtype = self._parse_to(args, kwargs)
        if dtype is not None and not dtype.is_floating_point:
            raise TypeError("nn.Module.to only accepts floating point or complex dtypes, but got "
                            f"desired dtype={dtype}")

        # A malformed device raises now, as torch's argument parsing; an unavailable one
        # when there is a tensor to move, as torch.
        error = None if device is None else unavailable(device)

        def convert(t):
            if error is not None:
                raise error
            if dtype is not None and t.is_floating_point() and t.dtype is not dtype:
                return t.to(dtype)
            return t

        return self._apply(convert)

    @staticmethod
    def _parse_to(args, kwargs):
        unknown = set(kwargs) - {"device", "dtype", "non_blocking", "copy", "memory_format"}
        if unknown:
            raise TypeError(f"to() received an invalid combination of arguments - got an unexpected "
                            f"keyword argument '{sorted(unknown)[0]}'")
        device = kwargs.get("device")
        dtype = kwargs.get("dtype")
        for arg in args:
            if isinstance(arg, bool):
                continue   # non_blocking / copy
            if isinstance(arg, Tensor):
                dtype = arg.dtype
            elif isinstance(arg, (dtypes.dtype, type, np.dtype)):
                dtype = arg
            elif arg is not None:
                device = arg
        return device, None if dtype is None else dtypes.as_dtype(dtype)

    def cuda(self, device=None):
        """Raises torch's CPU-build error (when there is a tensor to move, as torch)."""
        return self._apply(lambda t: _raise(_not_compiled_with("CUDA", device)))

    def xpu(self, device=None):
        return self._apply(lambda t: _raise(_not_compiled_with("XPU", device)))

    def cpu(self):
        return self._apply(lambda t: t)

    def type(self, dst_type):
        return self._apply(lambda t: t.type(dst_type))

    def float(self):
        return self._apply(lambda t: t.float() if t.is_floating_point() else t)

    def double(self):
        return self._apply(lambda t: t.double() if t.is_floating_point() else t)

    def half(self):
        return self._apply(lambda t: t.to(_float16_dtype("float16")) if t.is_floating_point() else t)

    def bfloat16(self):
        return self._apply(lambda t: t.to(_float16_dtype("bfloat16")) if t.is_floating_point() else t)

    # ---- state dict ------------------------------------------------------------------------

    def _register_state_dict_hook(self, hook):
        if getattr(hook, "_from_public_api", False):
            raise RuntimeError("Cannot register the same function as the state dict post hook that was "
                               "previously registered via register_state_dict_post_hook")
        handle = RemovableHandle(self._state_dict_hooks)
        self._state_dict_hooks[handle.id] = hook
        return handle

    def register_state_dict_post_hook(self, hook):
        hook._from_public_api = True
        handle = RemovableHandle(self._state_dict_hooks)
        self._state_dict_hooks[handle.id] = hook
        return handle

    def register_state_dict_pre_hook(self, hook):
        handle = RemovableHandle(self._state_dict_pre_hooks)
        self._state_dict_pre_hooks[handle.id] = hook
        return handle

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        for name, param in self._parameters.items():
            if param is not None:
                destination[prefix + name] = param if keep_vars else param.detach()
        for name, buf in self._buffers.items():
            if buf is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = buf if keep_vars else buf.detach()
        if getattr(type(self), "get_extra_state", Module.get_extra_state) is not Module.get_extra_state:
            destination[prefix + "_extra_state"] = self.get_extra_state()

    def state_dict(self, *args, destination=None, prefix="", keep_vars=False):
        """An ``OrderedDict`` of parameters and persistent buffers by dotted name (detached
        unless ``keep_vars``), each module's own entries before its children's."""
        if args:
            warnings.warn("Positional args are being deprecated, use kwargs instead. Refer to "
                          "https://pytorch.org/docs/main/generated/torch.nn.Module.html#torch.nn.Module.state_dict"
                          " for details.", FutureWarning, stacklevel=2)
            if destination is None:
                destination = args[0]
            if len(args) > 1 and prefix == "":
                prefix = args[1]
            if len(args) > 2 and keep_vars is False:
                keep_vars = args[2]
        if destination is None:
            destination = OrderedDict()
            destination._metadata = OrderedDict()
        local_metadata = dict(version=self._version)
        if hasattr(destination, "_metadata"):
            destination._metadata[prefix[:-1]] = local_metadata
        for hook in self._state_dict_pre_hooks.values():
            hook(self, prefix, keep_vars)
        self._save_to_state_dict(destination, prefix, keep_vars)
        for name, module in self._modules.items():
            if module is not None:
                module.state_dict(destination=destination, prefix=prefix + name + ".", keep_vars=keep_vars)
        for hook in self._state_dict_hooks.values():
            hook_result = hook(self, destination, prefix, local_metadata)
            if not getattr(hook, "_from_public_api", False):
                if hook_result is not None:
                    destination = hook_result
            elif hook_result is not None:
                raise RuntimeError("state_dict post-hook must return None")
        return destination

    def register_load_state_dict_pre_hook(self, hook):
        return self._register_load_state_dict_pre_hook(hook, with_module=True)

    def _register_load_state_dict_pre_hook(self, hook, with_module=False):
        handle = RemovableHandle(self._load_state_dict_pre_hooks)
        self._load_state_dict_pre_hooks[handle.id] = (
            (lambda *args: hook(self, *args)) if with_module else hook)
        return handle

    def register_load_state_dict_post_hook(self, hook):
        handle = RemovableHandle(self._load_state_dict_post_hooks)
        self._load_state_dict_post_hooks[handle.id] = hook
        return handle

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        """Copy this module's own parameters and persistent buffers from ``state_dict``
        (in place, converting dtype; NumPy arrays accepted), noting missing and unexpected
        keys and errors, as torch's."""
        for hook in self._load_state_dict_pre_hooks.values():
            hook(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs)
        persistent_buffers = {k: v for k, v in self._buffers.items() if k not in self._non_persistent_buffers_set}
        local_state = {k: v for k, v in itertools.chain(self._parameters.items(), persistent_buffers.items())
                       if v is not None}
        assign = local_metadata.get("assign_to_params_buffers", False)
        for name, param in local_state.items():
            key = prefix + name
            if key not in state_dict:
                if strict:
                    missing_keys.append(key)
                continue
            input_param = state_dict[key]
            if isinstance(input_param, np.ndarray):
                input_param = _as_tensor(input_param)
            if not isinstance(input_param, Tensor):
                error_msgs.append(f'While copying the parameter named "{key}", expected torch.Tensor or '
                                  f"Tensor-like object from checkpoint but received {type(input_param)}")
                continue
            if len(param.shape) == 0 and len(input_param.shape) == 1 and input_param.shape[0] == 1:
                input_param = input_param[0]
            if input_param.shape != param.shape:
                error_msgs.append(f"size mismatch for {key}: copying a param with shape {input_param.shape} "
                                  f"from checkpoint, the shape in current model is {param.shape}.")
                continue
            try:
                with no_grad():
                    if assign:
                        if isinstance(param, Parameter):
                            if not isinstance(input_param, Parameter):
                                input_param = Parameter(input_param, requires_grad=param.requires_grad)
                            else:
                                input_param.requires_grad_(param.requires_grad)
                        setattr(self, name, input_param)
                    else:
                        param.copy_(input_param.detach())
            except Exception as ex:
                error_msgs.append(f'While copying the parameter named "{key}", whose dimensions in the model '
                                  f"are {param.size()} and whose dimensions in the checkpoint are "
                                  f"{input_param.size()}, an exception occurred : {ex.args}.")
        extra_state_key = prefix + "_extra_state"
        if getattr(type(self), "set_extra_state", Module.set_extra_state) is not Module.set_extra_state:
            if extra_state_key in state_dict:
                self.set_extra_state(state_dict[extra_state_key])
            elif strict:
                missing_keys.append(extra_state_key)
        elif strict and extra_state_key in state_dict:
            unexpected_keys.append(extra_state_key)
        if strict:
            for key in state_dict:
                if key.startswith(prefix) and key != extra_state_key:
                    input_name = key[len(prefix):].split(".", 1)
                    if len(input_name) > 1:
                        if input_name[0] not in self._modules:
                            unexpected_keys.append(key)
                    elif input_name[0] not in local_state:
                        unexpected_keys.append(key)

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """Copy values from ``state_dict`` into this module's parameters and persistent
        buffers.  Size mismatches always raise; missing and unexpected keys raise when
        ``strict``.  Returns ``_IncompatibleKeys(missing_keys, unexpected_keys)``."""
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        missing_keys, unexpected_keys, error_msgs = [], [], []
        metadata = getattr(state_dict, "_metadata", None)
        state_dict = OrderedDict(state_dict)
        if metadata is not None:
            state_dict._metadata = metadata

        def load(module, local_state_dict, prefix=""):
            local_metadata = {} if metadata is None else metadata.get(prefix[:-1], {})
            if assign:
                local_metadata["assign_to_params_buffers"] = assign
            module._load_from_state_dict(local_state_dict, prefix, local_metadata, True, missing_keys,
                                         unexpected_keys, error_msgs)
            for name, child in module._modules.items():
                if child is not None:
                    child_prefix = prefix + name + "."
                    load(child, {k: v for k, v in local_state_dict.items() if k.startswith(child_prefix)},
                         child_prefix)
            incompatible_keys = _IncompatibleKeys(missing_keys, unexpected_keys)
            for hook in module._load_state_dict_post_hooks.values():
                if hook(module, incompatible_keys) is not None:
                    raise AssertionError(
                        "Hooks registered with ``register_load_state_dict_post_hook`` are not expected to "
                        "return new values, if incompatible_keys need to be modified, it should be done inplace.")

        load(self, state_dict)
        if strict:
            if unexpected_keys:
                error_msgs.insert(0, "Unexpected key(s) in state_dict: {}. ".format(
                    ", ".join(f'"{k}"' for k in unexpected_keys)))
            if missing_keys:
                error_msgs.insert(0, "Missing key(s) in state_dict: {}. ".format(
                    ", ".join(f'"{k}"' for k in missing_keys)))
        if error_msgs:
            raise RuntimeError("Error(s) in loading state_dict for {}:\n\t{}".format(
                type(self).__name__, "\n\t".join(error_msgs)))
        return _IncompatibleKeys(missing_keys, unexpected_keys)

    # ---- printing --------------------------------------------------------------------------

    def extra_repr(self):
        return ""

    def _get_name(self):
        return type(self).__name__

    def __repr__(self):
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = ["(" + name + "): " + _addindent(repr(module), 2) for name, module in self._modules.items()]
        lines = extra_lines + child_lines
        body = ""
        if lines:
            if len(extra_lines) == 1 and not child_lines:
                body = extra_lines[0]
            else:
                body = "\n  " + "\n  ".join(lines) + "\n"
        return self._get_name() + "(" + body + ")"

    def __dir__(self):
        keys = (dir(type(self)) + list(self.__dict__) + list(self._parameters) + list(self._modules)
                + list(self._buffers))
        return sorted({key for key in keys if not key[0].isdigit()})
