"""``Module``: the base class of layers, with torch's registration, traversal,
``state_dict`` and ``repr``.

Parameters, buffers and submodules are kept in the ordered registries ``_parameters``,
``_buffers`` and ``_modules`` (which fix the order of traversal and of ``state_dict``
keys) and also in the instance ``__dict__``: reading ``self.weight`` in ``forward`` is then
a plain attribute lookup rather than torch's ``__getattr__`` fallback, which matters for
small models where Python overhead is most of a step.  ``__setattr__``/``__delattr__``
keep the two in step; change registrations through them (or ``register_*``), not by
editing the registries directly.
"""
from collections import OrderedDict, namedtuple

import numpy as np

from tapejit import dtypes
from tapejit.creation import as_tensor as _as_tensor
from tapejit.grad_mode import no_grad
from tapejit.nn.parameter import Parameter, set_leaf_value
from tapejit.printing import type_name
from tapejit.tape import state as _state
from tapejit.tensor import Tensor

class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """``load_state_dict``'s result, printed as torch prints it."""
    __slots__ = ()

    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


def _typename(value):
    return type_name(value) if isinstance(value, Tensor) else type(value).__name__


def _addindent(text, spaces):
    lines = text.split("\n")
    if len(lines) == 1:
        return text
    return lines[0] + "\n" + "\n".join(" " * spaces + line for line in lines[1:])


class Module:
    """Base class for layers: assign ``Parameter``s, ``Module``s and (via
    ``register_buffer``) tensors as attributes in ``__init__`` and define ``forward``."""

    def __init__(self):
        set_ = object.__setattr__
        set_(self, "training", True)
        set_(self, "_parameters", OrderedDict())
        set_(self, "_buffers", OrderedDict())
        set_(self, "_non_persistent_buffers_set", set())
        set_(self, "_modules", OrderedDict())

    def forward(self, *args, **kwargs):
        raise NotImplementedError(
            f'Module [{type(self).__name__}] is missing the required "forward" function')

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    # ---- registration ----------------------------------------------------------------------

    def __setattr__(self, name, value):
        d = self.__dict__
        params = d.get("_parameters")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            self._forget(name, keep="_parameters")
            params[name] = value
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{_typename(value)}' as parameter '{name}' "
                                "(torch.nn.Parameter or None expected)")
            params[name] = None
        else:
            modules = d.get("_modules")
            if isinstance(value, Module):
                if modules is None:
                    raise AttributeError("cannot assign module before Module.__init__() call")
                self._forget(name, keep="_modules")
                modules[name] = value
            elif modules is not None and name in modules:
                if value is not None:
                    raise TypeError(f"cannot assign '{_typename(value)}' as child module '{name}' "
                                    "(torch.nn.Module or None expected)")
                modules[name] = None
            else:
                buffers = d.get("_buffers")
                if buffers is not None and name in buffers:
                    if value is not None and not isinstance(value, Tensor):
                        raise TypeError(f"cannot assign '{_typename(value)}' as buffer '{name}' "
                                        "(torch.Tensor or None expected)")
                    buffers[name] = value
        d[name] = value

    def __delattr__(self, name):
        self._forget(name)
        object.__delattr__(self, name)

    def _forget(self, name, keep=None):
        """Drop ``name`` from the registries (but ``keep``, where re-assigning a name keeps
        its place in the order, as in torch)."""
        d = self.__dict__
        for registry in ("_parameters", "_buffers", "_modules"):
            if registry != keep:
                d[registry].pop(name, None)
        d["_non_persistent_buffers_set"].discard(name)

    def _check_new_name(self, name, kind, registry):
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"cannot assign {kind} before Module.__init__() call")
        if not isinstance(name, str):
            raise TypeError(f"{kind} name should be a string. Got {type(name).__name__}")
        if "." in name:
            raise KeyError(f"{kind} name can't contain \".\"")
        if name == "":
            raise KeyError(f"{kind} name can't be empty string \"\"")
        if hasattr(self, name) and name not in registry:
            raise KeyError(f"attribute '{name}' already exists")

    def register_parameter(self, name, param):
        self._check_new_name(name, "parameter", self.__dict__.get("_parameters", ()))
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{_typename(param)}' object to parameter '{name}' "
                            "(torch.nn.Parameter or None required)")
        self._forget(name, keep="_parameters")
        self._parameters[name] = param
        self.__dict__[name] = param

    def register_buffer(self, name, tensor, persistent=True):
        self._check_new_name(name, "buffer", self.__dict__.get("_buffers", ()))
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{_typename(tensor)}' object to buffer '{name}' "
                            "(torch Tensor or None required)")
        self._forget(name, keep="_buffers")
        self._buffers[name] = tensor
        if not persistent:
            self._non_persistent_buffers_set.add(name)
        self.__dict__[name] = tensor

    def add_module(self, name, module):
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{_typename(module)} is not a Module subclass")
        self._check_new_name(name, "module", self.__dict__.get("_modules", ()))
        self._forget(name, keep="_modules")
        self._modules[name] = module
        self.__dict__[name] = module

    register_module = add_module

    def get_submodule(self, target):
        module = self
        for part in target.split(".") if target else ():
            if part not in module._modules:
                raise AttributeError(f"{type(module).__name__} has no attribute `{part}`")
            module = module._modules[part]
        return module

    # ---- traversal -------------------------------------------------------------------------

    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        if memo is None:
            memo = set()
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, module in self._modules.items():
            if module is None:
                continue
            yield from module.named_modules(memo, prefix + ("." if prefix else "") + name, remove_duplicate)

    def modules(self):
        for _, module in self.named_modules():
            yield module

    def named_children(self):
        seen = set()
        for name, module in self._modules.items():
            if module is not None and id(module) not in seen:
                seen.add(id(module))
                yield name, module

    def children(self):
        for _, module in self.named_children():
            yield module

    def _named_members(self, registry, prefix, recurse, remove_duplicate):
        seen = set()
        owners = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse \
            else [(prefix, self)]
        for owner_prefix, owner in owners:
            for name, value in getattr(owner, registry).items():
                if value is None or (remove_duplicate and id(value) in seen):
                    continue
                if remove_duplicate:
                    seen.add(id(value))
                yield owner_prefix + ("." if owner_prefix else "") + name, value

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        return self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse=True):
        for _, param in self.named_parameters(recurse=recurse):
            yield param

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        return self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse=True):
        for _, buf in self.named_buffers(recurse=recurse):
            yield buf

    def apply(self, fn):
        for module in self.children():
            module.apply(fn)
        fn(self)
        return self

    # ---- modes and gradients ---------------------------------------------------------------

    def train(self, mode=True):
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")  # noqa: TRY004 (torch raises ValueError)
        for module in self.modules():
            object.__setattr__(module, "training", mode)
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
            else:
                grad.zero_()

    # ---- dtype conversion ------------------------------------------------------------------

    def to(self, *args, **kwargs):
        """``to(dtype)``: converts floating-point parameters (in place, keeping each
        ``Parameter`` object, as torch does), their gradients and floating-point buffers.
        Device arguments are accepted and ignored (tapejit runs on the CPU)."""
        target = kwargs.get("dtype")
        for arg in args:
            if isinstance(arg, (dtypes.dtype, type, np.dtype)):
                target = arg
            elif isinstance(arg, Tensor):
                target = arg.dtype
        if target is None:
            return self
        target = dtypes.as_dtype(target)
        if not target.is_floating_point:
            raise TypeError(f"nn.Module.to only accepts floating point dtypes, but got desired dtype={target}")
        return self._cast_floats(target)

    def double(self):
        return self._cast_floats(dtypes.float64)

    def float(self):
        return self._cast_floats(dtypes.float32)

    def cpu(self):
        return self

    def _cast_floats(self, target):
        for module in self.modules():
            for param in module._parameters.values():
                if param is None or not param.dtype.is_floating_point or param.dtype is target:
                    continue
                set_leaf_value(param, np.asarray(param.detach()).astype(target.np))
                grad = param.grad
                if grad is not None:
                    param.grad = grad.to(target).detach()
            for name, buf in module._buffers.items():
                if buf is not None and buf.dtype.is_floating_point and buf.dtype is not target:
                    module.__setattr__(name, buf.detach().to(target))
        return self

    # ---- state dict ------------------------------------------------------------------------

    def state_dict(self, *, destination=None, prefix="", keep_vars=False):
        if destination is None:
            destination = OrderedDict()
        for name, param in self._parameters.items():
            if param is not None:
                destination[prefix + name] = param if keep_vars else param.detach()
        for name, buf in self._buffers.items():
            if buf is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = buf if keep_vars else buf.detach()
        for name, module in self._modules.items():
            if module is not None:
                module.state_dict(destination=destination, prefix=prefix + name + ".", keep_vars=keep_vars)
        return destination

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """Copy values from ``state_dict`` into this module's parameters and persistent
        buffers (in place, converting dtype).  Size mismatches always raise; missing and
        unexpected keys raise when ``strict``.  Returns ``(missing_keys, unexpected_keys)``."""
        if not hasattr(state_dict, "keys") or not hasattr(state_dict, "__getitem__"):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        errors, missing, expected = [], [], set()
        for prefix, module in self.named_modules(remove_duplicate=False):
            prefix = prefix + "." if prefix else ""
            module._load_own_state(state_dict, prefix, assign, missing, expected, errors)
        unexpected = [key for key in state_dict if key not in expected]
        if strict:
            if unexpected:
                errors.insert(0, "Unexpected key(s) in state_dict: {}. ".format(
                    ", ".join(f'"{k}"' for k in unexpected)))
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: {}. ".format(
                    ", ".join(f'"{k}"' for k in missing)))
        if errors:
            raise RuntimeError("Error(s) in loading state_dict for {}:\n\t{}".format(
                type(self).__name__, "\n\t".join(errors)))
        return _IncompatibleKeys(missing, unexpected)

    def _load_own_state(self, state_dict, prefix, assign, missing, expected, errors):
        persistent = [(n, b) for n, b in self._buffers.items() if n not in self._non_persistent_buffers_set]
        for name, current in list(self._parameters.items()) + persistent:
            if current is None:
                continue
            key = prefix + name
            expected.add(key)
            if key not in state_dict:
                missing.append(key)
                continue
            value = state_dict[key]
            if isinstance(value, np.ndarray):
                value = _as_tensor(value)
            if not isinstance(value, Tensor):
                errors.append(f'While copying the parameter named "{key}", expected torch.Tensor or '
                              f"Tensor-like object from checkpoint but received {type(value)}")
                continue
            if value.shape != current.shape:
                errors.append(f"size mismatch for {key}: copying a param with shape {value.shape} from "
                              f"checkpoint, the shape in current model is {current.shape}.")
                continue
            if assign and name in self._parameters:
                self.__setattr__(name, Parameter(value.detach(), current.requires_grad))
            elif assign:
                self.__setattr__(name, value.detach())
            else:
                with no_grad():
                    current.copy_(value.detach())

    # ---- printing --------------------------------------------------------------------------

    def extra_repr(self):
        return ""

    def _get_name(self):
        return type(self).__name__

    def __repr__(self):
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = [f"({name}): {_addindent(repr(module), 2)}" for name, module in self._modules.items()]
        lines = extra_lines + child_lines
        body = ""
        if lines:
            if len(extra_lines) == 1 and not child_lines:
                body = extra_lines[0]
            else:
                body = "\n  " + "\n  ".join(lines) + "\n"
        return f"{self._get_name()}({body})"
