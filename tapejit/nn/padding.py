"""``F.pad`` and the padding modules (``ZeroPad2d``, ``ConstantPad*``, ``ReflectionPad*``,
``ReplicationPad*``, ``CircularPad*``), with torch's argument order, modes and errors.

Padding only moves elements, so NumPy's own ``np.pad`` computes, on the grid of flat
positions, which input element each output element is (``reflect``, ``edge`` and ``wrap``
are torch's reflect, replicate and circular); one gather takes them and its gradient
scatters back, summing the elements a reflection or a replication repeats.  A constant
fill is one more element put in front of the flattened input.
"""
import numpy as np

from tapejit.recording import name_composite
from tapejit.nn.module import Module
from tapejit.ops.indexing import _gather
from tapejit.ops.movement import INDEX
from tapejit.tensor import Tensor, _concrete

_NUMPY_MODES = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def _check_pad(input, pad, mode, value):
    if not isinstance(input, Tensor):
        raise TypeError(f"pad(): argument 'input' (position 1) must be Tensor, not {type(input).__name__}")
    if not isinstance(mode, str):
        raise TypeError(f"pad(): argument 'mode' (position 3) must be str, not {type(mode).__name__}")
    if not isinstance(pad, (tuple, list)):
        raise TypeError(f"pad(): argument 'pad' (position 2) must be tuple of ints, not {type(pad).__name__}")
    pad = list(pad)
    for i, p in enumerate(pad):
        if isinstance(p, bool) or not isinstance(p, (int, np.integer)):
            raise TypeError(f"pad(): argument 'pad' (position 2) must be tuple of ints, but found element of "
                            f"type {type(p).__name__} at pos {i}")
    if len(pad) % 2:
        raise RuntimeError("Padding length must be divisible by 2")
    ndim = len(input._shape)
    if len(pad) // 2 > ndim:
        raise RuntimeError(f"Padding length should be less than or equal to two times the input dimension but "
                           f"got padding length {len(pad)} and input of dimension {ndim}")
    if mode == "constant":
        return [int(p) for p in pad]
    if mode not in _NUMPY_MODES:
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    if value:   # torch's test is truthiness: value=0 passes
        raise RuntimeError(f'Padding mode "{mode}" doesn\'t take in value argument')
    if len(pad) not in (2, 4, 6) or ndim not in (len(pad) // 2 + 1, len(pad) // 2 + 2):
        raise NotImplementedError(
            f"Padding size {len(pad)} is not supported for {ndim}D input tensor.\n"
            "Supported combinations for non-constant padding:\n"
            "  - 2D or 3D input: padding size = 2 (pads last dimension)\n"
            "  - 3D or 4D input: padding size = 4 (pads last 2 dimensions)\n"
            "  - 4D or 5D input: padding size = 6 (pads last 3 dimensions)")
    return [int(p) for p in pad]


def _padded_positions(shape, pad, mode):
    """Flat input position of each output element (``-1``: the constant fill), or raise
    torch's error for this mode."""
    grid = np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int64).reshape(shape)
    for k in range(len(pad) // 2):
        dim = len(shape) - 1 - k
        before, after = pad[2 * k], pad[2 * k + 1]
        size = shape[dim]
        if mode == "reflect" and (before >= size or after >= size):
            raise RuntimeError(f"Argument #4: Padding size should be less than the corresponding input "
                               f"dimension, but got: padding ({before}, {after}) at dimension {dim} of input "
                               f"{list(shape)}")
        if mode == "circular" and (before > size or after > size):
            raise RuntimeError("Padding value causes wrapping around more than once.")
        if mode != "constant" and size == 0:
            raise RuntimeError(f"pad ({mode}): cannot pad dimension {dim} of size 0 (input {list(shape)})")
        # negative padding crops (first, so that a reflection or a wrap uses what is left)
        start, stop = max(-before, 0), size - max(-after, 0)
        if stop - start < 0 or (mode != "constant" and stop - start <= 0):
            raise RuntimeError(f"narrow(): length must be non-negative. (pad: padding ({before}, {after}) at "
                               f"dimension {dim} of input {list(shape)})")
        grid = np.take(grid, np.arange(start, stop), axis=dim)
        widths = [(0, 0)] * len(shape)
        widths[dim] = (max(before, 0), max(after, 0))
        if mode == "constant":
            grid = np.pad(grid, widths, mode="constant", constant_values=-1)
        elif widths[dim] != (0, 0):
            if mode == "circular" and max(widths[dim]) > stop - start:
                raise RuntimeError("Padding value causes wrapping around more than once.")
            grid = np.pad(grid, widths, mode=_NUMPY_MODES[mode])
    return grid


_NODE_NAMES = {"reflect": "ReflectionPad{}DBackward0", "replicate": "ReplicationPad{}DBackward0"}


def pad(input, pad, mode="constant", value=None):
    """torch's ``F.pad``: ``pad`` lists (before, after) pairs from the last dimension
    backwards; negative values crop.  ``mode`` is ``'constant'`` (any number of dims,
    filled with ``value``, 0 by default), ``'reflect'``, ``'replicate'`` or ``'circular'``
    (the last 1, 2 or 3 dims of a batched or unbatched input)."""
    pad = _check_pad(input, pad, mode, value)
    positions = _padded_positions(input._shape, pad, mode)
    fill = value if value is not None else 0.0
    if not input._dtype.is_floating_point:   # integer and boolean tensors: no gradient to keep
        values = input._value().reshape(-1)
        taken = values[np.maximum(positions, 0)] if values.size else np.zeros(positions.shape, values.dtype)
        return _concrete(np.where(positions < 0, np.asarray(fill).astype(values.dtype), taken).astype(values.dtype))
    if positions.size and positions.min() < 0:
        filler = _concrete(np.full(1, fill, input._dtype.np))
        from tapejit.ops.join import cat
        source = cat([filler, input.reshape(-1)])
        out = _gather(INDEX, source, positions + 1)
    else:
        out = _gather(INDEX, input, positions)
    if mode == "constant":
        name = "ConstantPadNdBackward0"
    elif mode == "circular":
        name = "CopySlices"   # torch pads circularly by copies into slices of a new tensor
    else:
        name = _NODE_NAMES[mode].format(len(pad) // 2)
    return name_composite(out, name, input)


# ---- modules ------------------------------------------------------------------------------------

def _padding_tuple(padding, dims):
    if isinstance(padding, (tuple, list)):
        return tuple(padding)
    return (padding,) * (2 * dims)


class _PadNd(Module):
    _dims = 1
    _mode = "constant"

    def __init__(self, padding):
        super().__init__()
        self.padding = _padding_tuple(padding, self._dims)

    def forward(self, input):
        return pad(input, self.padding, self._mode)

    def extra_repr(self):
        return f"{self.padding}"


class _ConstantPadNd(_PadNd):
    def __init__(self, padding, value):
        super().__init__(padding)
        self.value = value

    def forward(self, input):
        return pad(input, self.padding, "constant", self.value)

    def extra_repr(self):
        return f"padding={self.padding}, value={self.value}"


class ConstantPad1d(_ConstantPadNd):
    _dims = 1


class ConstantPad2d(_ConstantPadNd):
    _dims = 2


class ConstantPad3d(_ConstantPadNd):
    _dims = 3


class _ZeroPadNd(_ConstantPadNd):
    def __init__(self, padding):
        super().__init__(padding, 0.0)

    def extra_repr(self):
        return f"{self.padding}"


class ZeroPad1d(_ZeroPadNd):
    _dims = 1


class ZeroPad2d(_ZeroPadNd):
    _dims = 2


class ZeroPad3d(_ZeroPadNd):
    _dims = 3


class ReflectionPad1d(_PadNd):
    _dims, _mode = 1, "reflect"


class ReflectionPad2d(_PadNd):
    _dims, _mode = 2, "reflect"


class ReflectionPad3d(_PadNd):
    _dims, _mode = 3, "reflect"


class ReplicationPad1d(_PadNd):
    _dims, _mode = 1, "replicate"


class ReplicationPad2d(_PadNd):
    _dims, _mode = 2, "replicate"


class ReplicationPad3d(_PadNd):
    _dims, _mode = 3, "replicate"


class _CircularPadNd(_PadNd):
    _mode = "circular"

    def forward(self, input):
        if len(input._shape) not in (self._dims + 1, self._dims + 2):
            raise ValueError(f"expected {self._dims + 1}D or {self._dims + 2}D input (got "
                             f"{len(input._shape)}D input)")
        return pad(input, self.padding, "circular")


class CircularPad1d(_CircularPadNd):
    _dims = 1


class CircularPad2d(_CircularPadNd):
    _dims = 2


class CircularPad3d(_CircularPadNd):
    _dims = 3


__all__ = ["pad", "ConstantPad1d", "ConstantPad2d", "ConstantPad3d", "ZeroPad1d", "ZeroPad2d", "ZeroPad3d",
           "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d", "ReplicationPad1d", "ReplicationPad2d",
           "ReplicationPad3d", "CircularPad1d", "CircularPad2d", "CircularPad3d"]
