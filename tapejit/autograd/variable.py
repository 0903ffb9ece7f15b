"""``torch.autograd.Variable``, as modern torch keeps it for old scripts: calling it gives a
tensor (``data.detach()``, sharing its memory, with ``requires_grad`` as asked), and every
tensor is an instance of it."""
import warnings

from tapejit.creation import tensor
from tapejit.tensor import Tensor


class _VariableMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor)

    def __call__(cls, data=None, requires_grad=False, volatile=False):
        if volatile:
            warnings.warn("volatile was removed and now has no effect. Use `with torch.no_grad():` "
                          "instead.", UserWarning, stacklevel=2)
        if data is None:
            data = tensor([])
        elif not isinstance(data, Tensor):
            raise TypeError(f"Variable data has to be a tensor, but got {type(data).__name__}")
        result = data.detach()
        if requires_grad:
            result.requires_grad_(True)
        return result


class Variable(metaclass=_VariableMeta):
    """``Variable(tensor, requires_grad=False)``: ``tensor.detach()`` with ``requires_grad``
    set (a new leaf sharing the tensor's memory), as torch."""
