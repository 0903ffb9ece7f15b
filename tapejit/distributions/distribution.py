"""The ``Distribution`` base class and the helpers the distributions share, as in
torch.distributions: shapes (``batch_shape``, ``event_shape``, ``sample_shape``), argument
validation (on by default; ``validate_args=False`` or
``Distribution.set_default_validate_args(False)`` turns it off) and lazily computed
parameterisations (``probs``/``logits``).

Validation reads parameter and sample values, which ``tj.compile`` refuses (a replay could
not repeat the check): pass ``validate_args=False`` to distributions made inside a compiled
function.  Sampling draws from tapejit's generator (``tj.manual_seed``); a sample is not
torch's for the same seed, only its distribution is.
"""
import numbers
import warnings

import numpy as np

from tapejit import autograd as _autograd, creation as _creation, dtypes as _dtypes, grad_mode as _grad_mode
from tapejit import linalg as _linalg, nn as _nn
from tapejit.api import Names, front_ends
from tapejit.distributions import constraints
from tapejit.recording import broadcast_shapes
from tapejit.tape import state
from tapejit.tensor import Size, Tensor

__all__ = ["Distribution"]


# ``tj.<name>``, the public API these user-level classes are written in, without importing
# the facade: its front ends, and the modules it takes its other names from
_TJ = Names(front_ends, _creation, _dtypes, _grad_mode, Tensor=Tensor, Size=Size, autograd=_autograd,
            creation=_creation, linalg=_linalg, nn=_nn)


def _tj():
    return _TJ


class lazy_property:
    """Computed on first access and then stored on the instance (torch's ``lazy_property``)."""

    def __init__(self, wrapped):
        self.wrapped = wrapped
        self.__doc__ = wrapped.__doc__

    def __get__(self, instance, obj_type=None):
        if instance is None:
            return self
        value = self.wrapped(instance)
        instance.__dict__[self.wrapped.__name__] = value
        return value


def _size(shape):
    return _tj().Size(tuple(int(s) for s in shape))


def broadcast_all(*values):
    """Tensors and numbers broadcast to one shape; numbers take the tensors' float dtype
    (or the default dtype when all are numbers)."""
    tj = _tj()
    tensors = [v for v in values if isinstance(v, tj.Tensor)]
    for v in values:
        if not isinstance(v, (tj.Tensor, numbers.Number)):
            raise ValueError("Input arguments must all be instances of numbers.Number, torch.Tensor or objects "
                             "implementing __torch_function__.")
    if not tensors:
        dt = tj.get_default_dtype()
        return tuple(tj.tensor(float(v), dtype=dt) for v in values)
    dt = tensors[0].dtype if tensors[0].is_floating_point() else tj.get_default_dtype()
    values = [v if isinstance(v, tj.Tensor) else tj.tensor(float(v), dtype=dt) for v in values]
    shape = ()
    for v in values:
        shape = broadcast_shapes("broadcast_tensors", shape, v.shape)
    # as torch.broadcast_tensors: a tensor of the full shape is returned itself (a leaf's
    # Normal(loc, scale).mean is loc, no ExpandBackward0 node)
    return tuple(v if v.shape == shape else v.expand(shape) for v in values)


def clamp_probs(probs):
    eps = float(np.finfo(probs.dtype.np if hasattr(probs.dtype, "np") else np.float32).eps)
    return probs.clamp(min=eps, max=1 - eps)


def probs_to_logits(probs, is_binary=False):
    ps_clamped = clamp_probs(probs)
    if is_binary:
        return ps_clamped.log() - (-ps_clamped).log1p()
    return ps_clamped.log()


def logits_to_probs(logits, is_binary=False):
    if is_binary:
        return logits.sigmoid()
    return logits.softmax(-1)


def standard_normal(shape, dtype):
    return _tj().randn(tuple(shape), dtype=dtype)


def uniform(shape, dtype, low=0.0, high=1.0):
    u = _tj().creation.rng().uniform(low, high, size=tuple(shape))
    return _tj().tensor(u, dtype=dtype)


def generator():
    """tapejit's random generator (tj.compile refuses random draws in a trace)."""
    return _tj().creation.rng()


def _all_valid(check, what):
    """``bool(check().all())``; inside ``tj.compile`` a replay could not repeat the check, so
    the trace is refused with a hint to turn validation off."""
    if state.trace is not None:
        state.trace.refuse(f"validating {what} reads a traced tensor's value into Python",
                           "a replay could not repeat the check. Pass validate_args=False to the "
                           "distribution (or call "
                           "tj.distributions.Distribution.set_default_validate_args(False)).")
    return bool(check().all())


class Distribution:
    has_rsample = False
    has_enumerate_support = False
    _validate_args = __debug__

    @staticmethod
    def set_default_validate_args(value):
        if value not in [True, False]:
            raise ValueError
        Distribution._validate_args = value

    def __init__(self, batch_shape=(), event_shape=(), validate_args=None):
        self._batch_shape = _size(batch_shape)
        self._event_shape = _size(event_shape)
        if validate_args is not None:
            self._validate_args = validate_args
        if self._validate_args:
            try:
                arg_constraints = self.arg_constraints
            except NotImplementedError:
                arg_constraints = {}
                warnings.warn(f"{self.__class__} does not define `arg_constraints`. Please set "
                              f"`arg_constraints = {{}}` or initialize the distribution with "
                              f"`validate_args=False` to turn off validation.")
            for param, constraint in arg_constraints.items():
                if constraints.is_dependent(constraint):
                    continue
                if param not in self.__dict__ and isinstance(getattr(type(self), param), lazy_property):
                    continue
                value = getattr(self, param)
                what = f"the parameter {param} of {type(self).__name__}"
                if not _all_valid(lambda: constraint.check(value), what):
                    raise ValueError(
                        f"Expected parameter {param} ({type(value).__name__} of shape {tuple(value.shape)}) "
                        f"of distribution {repr(self)} to satisfy the constraint {repr(constraint)}, "
                        f"but found invalid values:\n{value}")
        super().__init__()

    def expand(self, batch_shape, _instance=None):
        """A distribution of the same kind with its parameters expanded to ``batch_shape``."""
        batch_shape = _size(batch_shape)
        new = self._get_checked_instance(type(self), _instance)
        nb = len(self._batch_shape)
        for name, value in self.__dict__.items():
            if name in self._expandable() and isinstance(value, _tj().Tensor):
                value = value.expand(tuple(batch_shape) + tuple(value.shape[nb:]))
            new.__dict__[name] = value
        Distribution.__init__(new, batch_shape, self._event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def _expandable(self):
        return set(self.arg_constraints) | {"probs", "logits"}

    def _get_checked_instance(self, cls, _instance=None):
        if _instance is None and type(self).__init__ != cls.__init__:
            raise NotImplementedError(f"Subclass {self.__class__.__name__} of {cls.__name__} that defines a "
                                      f"custom __init__ method must also define a custom .expand() method.")
        return self.__new__(type(self)) if _instance is None else _instance

    @property
    def batch_shape(self):
        return self._batch_shape

    @property
    def event_shape(self):
        return self._event_shape

    @property
    def arg_constraints(self):
        raise NotImplementedError

    @property
    def support(self):
        raise NotImplementedError

    @property
    def mean(self):
        raise NotImplementedError(f"{self.__class__} does not implement mean")

    @property
    def mode(self):
        raise NotImplementedError(f"{self.__class__} does not implement mode")

    @property
    def variance(self):
        raise NotImplementedError(f"{self.__class__} does not implement variance")

    @property
    def stddev(self):
        return self.variance.sqrt()

    def sample(self, sample_shape=()):
        """A sample (or ``sample_shape`` samples) without gradient."""
        with _tj().no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=()):
        raise NotImplementedError

    def sample_n(self, n):
        warnings.warn("sample_n will be deprecated. Use .sample((n,)) instead", UserWarning)
        return self.sample(_size((n,)))

    def log_prob(self, value):
        raise NotImplementedError

    def cdf(self, value):
        raise NotImplementedError

    def icdf(self, value):
        raise NotImplementedError

    def enumerate_support(self, expand=True):
        raise NotImplementedError

    def entropy(self):
        raise NotImplementedError

    def perplexity(self):
        return self.entropy().exp()

    def _extended_shape(self, sample_shape=()):
        if not isinstance(sample_shape, (tuple, list)):
            sample_shape = (sample_shape,)
        return _size(tuple(sample_shape) + tuple(self._batch_shape) + tuple(self._event_shape))

    def _validate_sample(self, value):
        tj = _tj()
        if not isinstance(value, tj.Tensor):
            raise ValueError("The value argument to log_prob must be a Tensor")
        event_dim_start = len(value.size()) - len(self._event_shape)
        if tuple(value.size()[event_dim_start:]) != tuple(self._event_shape):
            raise ValueError(f"The right-most size of value must match event_shape: {value.size()} vs "
                             f"{self._event_shape}.")
        actual_shape = value.size()
        expected_shape = _size(tuple(self._batch_shape) + tuple(self._event_shape))
        for i, j in zip(reversed(actual_shape), reversed(expected_shape)):
            if i != 1 and j != 1 and i != j:
                raise ValueError(f"Value is not broadcastable with batch_shape+event_shape: {actual_shape} vs "
                                 f"{expected_shape}.")
        try:
            support = self.support
        except NotImplementedError:
            warnings.warn(f"{self.__class__} does not define `support` to enable sample validation. Please "
                          f"initialize the distribution with `validate_args=False` to turn off validation.")
            return
        if not _all_valid(lambda: support.check(value), f"a value of {type(self).__name__}"):
            raise ValueError(
                f"Expected value argument ({type(value).__name__} of shape {tuple(value.shape)}) to be within "
                f"the support ({repr(support)}) of the distribution {repr(self)}, but found invalid "
                f"values:\n{value}")

    def __repr__(self):
        param_names = [k for k, _ in self.arg_constraints.items() if k in self.__dict__]
        parts = []
        for p in param_names:
            v = self.__dict__[p]
            if v.numel() == 1:
                shown = f"{v.item()}" if v.dim() == 0 else f"{v}"
            else:
                shown = f"{v.size()}"
            parts.append(f"{p}: {shown}")
        return self.__class__.__name__ + "(" + ", ".join(parts) + ")"
