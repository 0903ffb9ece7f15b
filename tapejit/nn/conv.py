"""Convolution layers: ``Conv1d``, ``Conv2d``, ``ConvTranspose1d``, ``ConvTranspose2d``, with
torch's constructors, checks, ``repr`` and default initialisation (``kaiming_uniform_``
with ``a=sqrt(5)``, the bias uniform in ``1/sqrt(fan_in)``)."""
import math

import numpy as np

from tapejit import dtypes
from tapejit.creation import empty
from tapejit.nn import init
from tapejit.nn.module import Module
from tapejit.nn.parameter import Parameter
from tapejit.ops.conv import conv1d, conv2d, conv_transpose1d, conv_transpose2d
from tapejit.tensor import Size, _concrete


def _ntuple(value, n):
    if isinstance(value, (tuple, list)):
        return tuple(value)
    return (value,) * n


class _ConvNd(Module):
    _dims = 2

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, dilation, transposed,
                 output_padding, groups, bias, padding_mode, device=None, dtype=None):
        super().__init__()
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups != 0:
            raise ValueError("out_channels must be divisible by groups")
        # torch prints these sets as Python orders them (so the message may vary between runs)
        valid_padding_strings = {"same", "valid"}
        if isinstance(padding, str):
            if padding not in valid_padding_strings:
                raise ValueError(f"Invalid padding string {padding!r}, should be one of {valid_padding_strings}")
            if padding == "same" and any(s != 1 for s in stride):
                raise ValueError("padding='same' is not supported for strided convolutions")
        valid_padding_modes = {"zeros", "reflect", "replicate", "circular"}
        if padding_mode not in valid_padding_modes:
            raise ValueError(f"padding_mode must be one of {valid_padding_modes}, but got padding_mode='{padding_mode}'")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding
        self.dilation = dilation
        self.transposed = transposed
        self.output_padding = output_padding
        self.groups = groups
        self.padding_mode = padding_mode
        dt = dtypes.as_dtype(dtype) if dtype is not None else dtypes.get_default_dtype()
        shape = ((in_channels, out_channels // groups) if transposed else (out_channels, in_channels // groups))
        self.weight = Parameter(empty(shape + tuple(kernel_size), dtype=dt))
        if bias:
            self.bias = Parameter(empty(out_channels, dtype=dt))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def _padding_pairs(self):
        """``(before, after)`` padding per spatial dim, for the non-zero padding modes."""
        if self.padding == "valid":
            return [(0, 0)] * len(self.kernel_size)
        if self.padding == "same":
            return [(d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2)
                    for k, d in zip(self.kernel_size, self.dilation)]
        return [(p, p) for p in self.padding]

    def _padded(self, input):
        """``input`` padded by ``padding_mode`` (``reflect``/``replicate``/``circular``), as
        ``F.pad`` would, by gathering rows and columns (the gradient scatters back)."""
        spatial = len(self.kernel_size)
        shape = input.shape
        if input.dim() not in (spatial + 1, spatial + 2):
            return input   # the convolution itself raises torch's error about the input's rank
        # F.pad's order: the last dim first (its errors name the first dim at fault)
        indices = []
        for i, (before, after) in reversed(list(enumerate(self._padding_pairs()))):
            dim = input.dim() - spatial + i
            indices.append((dim, _pad_index(shape[dim], before, after, self.padding_mode, dim, tuple(shape))))
        out = input
        for dim, index in reversed(indices):
            if index is not None:
                out = out.index_select(dim, _concrete(index))
        return out

    def extra_repr(self):
        s = "{in_channels}, {out_channels}, kernel_size={kernel_size}, stride={stride}"
        if self.padding != (0,) * len(self.padding):
            s += ", padding={padding}"
        if self.dilation != (1,) * len(self.dilation):
            s += ", dilation={dilation}"
        if self.output_padding != (0,) * len(self.output_padding):
            s += ", output_padding={output_padding}"
        if self.groups != 1:
            s += ", groups={groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += ", padding_mode={padding_mode}"
        return s.format(**self.__dict__)


def _pad_index(size, before, after, mode, dim, shape):
    """Source positions of a dim padded by ``mode``, or None without padding; torch's limits."""
    if before == 0 and after == 0:
        return None
    if mode == "reflect" and (before >= size or after >= size):
        raise RuntimeError(f"Argument #4: Padding size should be less than the corresponding input dimension, but "
                           f"got: padding ({before}, {after}) at dimension {dim} of input {list(shape)}")
    if mode == "circular" and (before > size or after > size):
        raise RuntimeError("Padding value causes wrapping around more than once.")
    if size == 0:
        raise RuntimeError(f"{mode} padding: the input has size 0 at dimension {dim} (input {list(shape)})")
    index = np.arange(-before, size + after)
    if mode == "reflect":
        index = np.abs(index)
        index = np.where(index >= size, 2 * (size - 1) - index, index)
    elif mode == "replicate":
        index = np.clip(index, 0, size - 1)
    else:
        index = index % size
    return index.astype(np.int64)


class Conv1d(_ConvNd):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__(in_channels, out_channels, _ntuple(kernel_size, 1), _ntuple(stride, 1),
                         padding if isinstance(padding, str) else _ntuple(padding, 1), _ntuple(dilation, 1),
                         False, (0,), groups, bias, padding_mode, device, dtype)

    def forward(self, input):
        if self.padding_mode != "zeros":
            return conv1d(self._padded(input), self.weight, self.bias, self.stride, 0, self.dilation, self.groups)
        return conv1d(input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class Conv2d(_ConvNd):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__(in_channels, out_channels, _ntuple(kernel_size, 2), _ntuple(stride, 2),
                         padding if isinstance(padding, str) else _ntuple(padding, 2), _ntuple(dilation, 2),
                         False, (0, 0), groups, bias, padding_mode, device, dtype)

    def forward(self, input):
        if self.padding_mode != "zeros":
            return conv2d(self._padded(input), self.weight, self.bias, self.stride, 0, self.dilation, self.groups)
        return conv2d(input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class _ConvTransposeNd(_ConvNd):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, dilation, output_padding, groups,
                 bias, padding_mode, device, dtype, dims):
        if padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for {type(self).__name__}')
        super().__init__(in_channels, out_channels, _ntuple(kernel_size, dims), _ntuple(stride, dims),
                         _ntuple(padding, dims), _ntuple(dilation, dims), True, _ntuple(output_padding, dims),
                         groups, bias, padding_mode, device, dtype)

    def _output_padding(self, input, output_size):
        """torch's: the output padding that gives ``output_size``, which must be reachable."""
        if output_size is None:
            return self.output_padding
        dims = len(self.kernel_size)
        batched = input.dim() == dims + 2
        leading = 2 if batched else 1
        if len(output_size) == leading + dims:
            output_size = output_size[leading:]
        if len(output_size) != dims:
            raise ValueError(f"ConvTranspose{dims}D: for {input.dim()}D input, output_size must have {dims} or "
                             f"{leading + dims} elements (got {len(output_size)})")
        low = [(input.shape[d + leading] - 1) * self.stride[d] - 2 * self.padding[d]
               + self.dilation[d] * (self.kernel_size[d] - 1) + 1 for d in range(dims)]
        high = [lo + self.stride[d] - 1 for d, lo in enumerate(low)]
        for size, lo, hi in zip(output_size, low, high):
            if size < lo or size > hi:
                raise ValueError(f"requested an output size of {output_size}, but valid sizes range from {low} to "
                                 f"{high} (for an input of {Size(input.shape[leading:])})")
        return tuple(s - lo for s, lo in zip(output_size, low))


class ConvTranspose1d(_ConvTransposeNd):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1,
                 bias=True, dilation=1, padding_mode="zeros", device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, output_padding, groups,
                         bias, padding_mode, device, dtype, 1)

    def forward(self, input, output_size=None):
        return conv_transpose1d(input, self.weight, self.bias, self.stride, self.padding,
                                self._output_padding(input, output_size), self.groups, self.dilation)


class ConvTranspose2d(_ConvTransposeNd):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1,
                 bias=True, dilation=1, padding_mode="zeros", device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, output_padding, groups,
                         bias, padding_mode, device, dtype, 2)

    def forward(self, input, output_size=None):
        return conv_transpose2d(input, self.weight, self.bias, self.stride, self.padding,
                                self._output_padding(input, output_size), self.groups, self.dilation)
