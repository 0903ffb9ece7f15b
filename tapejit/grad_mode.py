"""Grad modes, per thread as in PyTorch: usable as context managers and as decorators."""
import functools

from tapejit.tape import state


class _Mode:
    enabled = True

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with type(self)(*self._args):
                return fn(*args, **kwargs)
        return wrapper

    def __enter__(self):
        self._prev = state.grad
        state.grad = self.enabled

    def __exit__(self, *exc):
        state.grad = self._prev
        return False

    _args = ()


class no_grad(_Mode):
    enabled = False


class enable_grad(_Mode):
    enabled = True


class inference_mode(_Mode):
    def __init__(self, mode=True):
        self.enabled = not mode
        self._args = (mode,)


class set_grad_enabled(_Mode):
    def __init__(self, mode):
        self.enabled = bool(mode)
        self._args = (mode,)
        self._prev = state.grad
        state.grad = self.enabled  # also acts as a plain function call, as in torch

    def __enter__(self):
        pass

    def __exit__(self, *exc):
        state.grad = self._prev
        return False


def is_grad_enabled():
    return state.grad


def is_inference_mode_enabled():
    return False
