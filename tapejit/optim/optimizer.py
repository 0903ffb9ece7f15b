"""The optimizer base class, with torch.optim.Optimizer's structure and errors.

``param_groups`` is a list of dicts holding the parameters and every hyper-parameter,
``state`` maps a parameter to its per-parameter state (tapejit tensors), and
``state_dict()`` / ``load_state_dict()`` use torch's layout (parameters replaced by their
index in group order).

Updates write the parameter's own NumPy array in place and bump its version counter once
through ``tapejit.inplace.note_leaf_write``, so a graph that saved the old value refuses
to backward with PyTorch's in-place error.  The compiled rules need 1-D arrays; the 1-D
views of long-lived arrays (parameters, state) are cached by array identity so that a step
on a small model costs little more than one kernel call per parameter.
"""
import copy
import warnings
from collections import defaultdict

import numpy as np

from tapejit import dtypes
from tapejit.creation import tensor as _new_tensor
from tapejit.creation import zeros as _new_zeros
from tapejit.grad_mode import enable_grad
from tapejit.inplace import note_leaf_write
from tapejit.tape import state as _state
from tapejit.tensor import Tensor

__all__ = ["Optimizer", "required"]


class _RequiredParameter:
    """Marks a hyper-parameter every group must give (no default), as torch's ``required``."""

    def __repr__(self):
        return "<required parameter>"


required = _RequiredParameter()

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


def with_grads(group):
    """``(parameter, gradient)`` for each parameter of ``group`` that has a gradient (the
    others are skipped, as torch's optimizers do)."""
    for p in group["params"]:
        grad = getattr(p, "_grad", None)
        if grad is not None:
            yield p, grad


def _grad_array(grad, like):
    """The gradient's value as a 1-D array of the parameter array's dtype (read only)."""
    array = grad._data if grad._tape is None else grad._value()
    if array.dtype is not like.dtype and array.dtype != like.dtype:
        array = array.astype(like.dtype)
    return array if array.ndim == 1 else array.reshape(-1)


def scalar_dtype():
    """dtype of the ``step`` counters: float64 when that is the default dtype, as in torch."""
    return dtypes.float64 if dtypes.get_default_dtype() is dtypes.float64 else dtypes.float32


class Optimizer:
    """Base class: subclasses define ``step`` and call the helpers below for arrays."""

    def __init__(self, params, defaults):
        self.defaults = defaults
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
            from tapejit.replay.trace import side_effect
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

    def _finish_step(self):
        """Copy updates made on copies of non-contiguous arrays back into them."""
        for array, flat in self._copies:
            array[...] = flat.reshape(array.shape)
        self._copies.clear()

    def _state_zeros(self, p):
        return _new_zeros(p._shape, dtype=p._dtype)

    @staticmethod
    def _step_counter():
        return _new_tensor(0.0, dtype=scalar_dtype())

    # ---- state dict ------------------------------------------------------------------------

    def state_dict(self):
        """``{"state": {index: {...}}, "param_groups": [{..., "params": [indices]}]}``.

        As in torch, the state tensors are the optimizer's own (not copies): deep-copy the
        result to keep a snapshot while training continues."""
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
        return {"state": packed_state, "param_groups": packed_groups}

    def load_state_dict(self, state_dict):
        """Load a state saved by ``state_dict()`` (this library's or the same layout's).

        State tensors are copied, floating-point ones cast to their parameter's dtype
        (``step`` counters keep theirs), so the loaded optimizer never writes into the dict."""
        groups = self.param_groups
        saved_groups = copy.deepcopy(state_dict["param_groups"])
        if len(groups) != len(saved_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(len(g["params"]) != len(s["params"]) for g, s in zip(groups, saved_groups)):
            raise ValueError("loaded state dict contains a parameter group that doesn't match "
                             "the size of optimizer's group")
        param_of = {}
        for group, saved in zip(groups, saved_groups):
            param_of.update(zip(saved["params"], group["params"]))

        state = defaultdict(dict)
        for key, value in state_dict["state"].items():
            if key in param_of:
                param = param_of[key]
                state[param] = {name: _loaded_value(param, name, v) for name, v in value.items()}
            else:
                state[key] = value
        for group, saved in zip(groups, saved_groups):
            saved["params"] = group["params"]
            if "param_names" in group and "param_names" not in saved:
                saved["param_names"] = group["param_names"]
        self.__setstate__({"state": state, "param_groups": saved_groups})

    def __getstate__(self):
        return {"defaults": self.defaults, "state": self.state, "param_groups": self.param_groups}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._views = {}
        self._copies = []
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


def _loaded_value(param, name, value):
    """A private copy of one loaded state entry, as tapejit tensors of the right dtype."""
    if isinstance(value, Tensor) or (hasattr(value, "__array__") and hasattr(value, "shape")):
        # a copy; torch tensors (``.numpy()``) and NumPy arrays are accepted too
        array = np.array(value._value() if isinstance(value, Tensor)
                         else value.numpy() if hasattr(value, "numpy") else value)
        if name == "step":
            return _new_tensor(array, dtype=_step_dtype(array.dtype))
        return _new_tensor(array, dtype=param._dtype)
    if name == "step" and isinstance(value, (int, float)):
        return _new_tensor(float(value), dtype=scalar_dtype())  # old checkpoints kept a number
    if isinstance(value, dict):
        return {k: _loaded_value(param, k, v) for k, v in value.items()}
    return copy.deepcopy(value)


def _step_dtype(np_dtype):
    """A step counter keeps its floating dtype; any other becomes the default scalar dtype."""
    if np_dtype == np.float64:
        return dtypes.float64
    if np_dtype == np.float32:
        return dtypes.float32
    return scalar_dtype()
