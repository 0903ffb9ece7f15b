"""Pooling and upsampling: max/avg pools, their adaptive forms, and ``interpolate``.

Every pool reads its input as planes of ``H x W`` (the leading dims flattened; 1-d pools
are the 2-d ones on height 1, as torch's are) and gives each output element a window of
input rows and columns.  The front end writes the windows as tables, one row per output
row and one per output column: ``(start, taps, step, count)``, the ``taps`` positions
``start, start + step, ...`` and the count the average divides by.  So one kernel
pair serves ``max_pool2d`` (dilated, padded, ``ceil_mode``), ``avg_pool2d``
(``count_include_pad``, ``divisor_override``), ``adaptive_max_pool2d``,
``adaptive_avg_pool2d`` and nearest upsampling (a window of one element, torch's source
index).  ``mode`` picks what a window gives: the max (0), the average (1) or its first
element (2, nearest).  Layout at ``ints[p]``:
``[planes, H, W, ho, wo, mode, divisor_override or 0, row table (4 * ho), column table
(4 * wo)]``.

The max follows torch's rule ``x > best or isnan(x)``: the first maximum of a window, or
its last NaN, gets the gradient.  The backward finds it again from the input (saved)
rather than keeping indices.  (The ``return_indices`` tensors are computed by NumPy from
the input's value, with the same rule.)

Linear and bilinear upsampling interpolate between two source rows and two source
columns: tables ``(i0, i1)`` at ``ints[p + 6:]`` and their weights ``(l0, l1)`` at
``floats[q:]``, computed by the front end with torch's formulas in the tensor's dtype.
"""
import math

import numpy as np

from tapejit._jit import kernel
from tapejit.ops._kernel_helpers import at, zero_if_first
from tapejit.registry import define_kernel, same_kernels
from tapejit.samples import anywhere, cases, distinct

_MAX, _AVERAGE, _NEAREST = 0, 1, 2


# The three modes are three loops: a branch on ``mode`` per window, or a helper called per
# window, made max_pool2d 2x2 on LeNet's first feature maps 4x slower; counting taps
# (``range(taps)``) rather than ``range(start, end, step)`` saved another 25%.

@kernel
def pool_forward(v, out, a, b, p, q, ints, floats):
    planes = ints[p]
    height = ints[p + 1]
    width = ints[p + 2]
    ho = ints[p + 3]
    wo = ints[p + 4]
    mode = ints[p + 5]
    override = ints[p + 6]
    rows = p + 7
    cols = rows + 4 * ho
    zero = floats[0] * 0.0
    for c in range(planes):
        plane = a + c * height * width
        dst = out + c * ho * wo
        for i in range(ho):
            first_row = plane + ints[rows + 4 * i] * width
            nh = ints[rows + 4 * i + 1]
            hs = ints[rows + 4 * i + 2] * width
            line = dst + i * wo
            if mode == 0:
                for j in range(wo):
                    k = first_row + ints[cols + 4 * j]
                    nw = ints[cols + 4 * j + 1]
                    ws = ints[cols + 4 * j + 2]
                    best = v[at(k)]
                    for _ in range(nh):
                        for u in range(nw):
                            x = v[at(k + u * ws)]
                            if x > best or np.isnan(x):
                                best = x
                        k += hs
                    v[at(line + j)] = best
            elif mode == 1:
                for j in range(wo):
                    k = first_row + ints[cols + 4 * j]
                    nw = ints[cols + 4 * j + 1]
                    s = zero
                    for _ in range(nh):
                        for u in range(nw):
                            s += v[at(k + u)]
                        k += width
                    # the count goes through the arena to divide in the tensor's dtype, as torch
                    v[at(line + j)] = override if override != 0 else ints[rows + 4 * i + 3] * ints[cols + 4 * j + 3]
                    v[at(line + j)] = s / v[at(line + j)]
            else:
                for j in range(wo):
                    v[at(line + j)] = v[at(first_row + ints[cols + 4 * j])]


@kernel
def pool_backward(v, g, flags, out, a, b, ma, mb, p, q, ints, floats):
    if ma == 0:
        return
    planes = ints[p]
    height = ints[p + 1]
    width = ints[p + 2]
    ho = ints[p + 3]
    wo = ints[p + 4]
    mode = ints[p + 5]
    override = ints[p + 6]
    rows = p + 7
    cols = rows + 4 * ho
    zero_if_first(g, a, planes * height * width, ma)
    count = np.empty(1, g.dtype)   # a window's count in the tensor's dtype
    for c in range(planes):
        plane = a + c * height * width
        src = out + c * ho * wo
        for i in range(ho):
            first_row = plane + ints[rows + 4 * i] * width
            nh = ints[rows + 4 * i + 1]
            hs = ints[rows + 4 * i + 2] * width
            line = src + i * wo
            if mode == 0:   # to the first maximum (or the last NaN), found again as forward did
                row = ints[rows + 4 * i] * width
                for j in range(wo):
                    # positions relative to the plane: the loop ran 2x faster so
                    k = row + ints[cols + 4 * j]
                    nw = ints[cols + 4 * j + 1]
                    ws = ints[cols + 4 * j + 2]
                    best_at = k
                    best = v[at(plane + k)]
                    for _ in range(nh):
                        for u in range(nw):
                            x = v[at(plane + k + u * ws)]
                            if x > best or np.isnan(x):
                                best = x
                                best_at = k + u * ws
                        k += hs
                    g[at(plane + best_at)] += g[at(line + j)]
            elif mode == 1:
                for j in range(wo):
                    k = first_row + ints[cols + 4 * j]
                    nw = ints[cols + 4 * j + 1]
                    count[0] = override if override != 0 else ints[rows + 4 * i + 3] * ints[cols + 4 * j + 3]
                    share = g[at(line + j)] / count[0]
                    for _ in range(nh):
                        for u in range(nw):
                            g[at(k + u)] += share
                        k += width
            else:
                for j in range(wo):
                    g[at(first_row + ints[cols + 4 * j])] += g[at(line + j)]


@kernel
def linear_upsample_forward(v, out, a, b, p, q, ints, floats):
    planes = ints[p]
    height = ints[p + 1]
    width = ints[p + 2]
    ho = ints[p + 3]
    wo = ints[p + 4]
    rows = p + 6
    cols = rows + 2 * ho
    frows = q
    fcols = q + 2 * ho
    one_dim = ints[p + 5] != 0
    for c in range(planes):
        plane = a + c * height * width
        dst = out + c * ho * wo
        for i in range(ho):
            r0 = plane + ints[rows + 2 * i] * width
            r1 = plane + ints[rows + 2 * i + 1] * width
            l0 = floats[frows + 2 * i]
            l1 = floats[frows + 2 * i + 1]
            for j in range(wo):
                c0 = ints[cols + 2 * j]
                c1 = ints[cols + 2 * j + 1]
                k0 = floats[fcols + 2 * j]
                k1 = floats[fcols + 2 * j + 1]
                top = v[at(r0 + c0)] * k0 + v[at(r0 + c1)] * k1
                if one_dim:
                    v[at(dst + i * wo + j)] = top
                else:
                    v[at(dst + i * wo + j)] = top * l0 + (v[at(r1 + c0)] * k0 + v[at(r1 + c1)] * k1) * l1


@kernel
def linear_upsample_backward(v, g, flags, out, a, b, ma, mb, p, q, ints, floats):
    if ma == 0:
        return
    planes = ints[p]
    height = ints[p + 1]
    width = ints[p + 2]
    ho = ints[p + 3]
    wo = ints[p + 4]
    rows = p + 6
    cols = rows + 2 * ho
    frows = q
    fcols = q + 2 * ho
    one_dim = ints[p + 5] != 0
    zero_if_first(g, a, planes * height * width, ma)
    for c in range(planes):
        plane = a + c * height * width
        src = out + c * ho * wo
        for i in range(ho):
            r0 = plane + ints[rows + 2 * i] * width
            r1 = plane + ints[rows + 2 * i + 1] * width
            l0 = floats[frows + 2 * i]
            l1 = floats[frows + 2 * i + 1]
            for j in range(wo):
                c0 = ints[cols + 2 * j]
                c1 = ints[cols + 2 * j + 1]
                k0 = floats[fcols + 2 * j]
                k1 = floats[fcols + 2 * j + 1]
                go = g[at(src + i * wo + j)]
                if one_dim:
                    g[at(r0 + c0)] += k0 * go
                    g[at(r0 + c1)] += k1 * go
                else:
                    g[at(r0 + c0)] += l0 * k0 * go
                    g[at(r0 + c1)] += l0 * k1 * go
                    g[at(r1 + c0)] += l1 * k0 * go
                    g[at(r1 + c1)] += l1 * k1 * go


def _fn(name, **kw):
    def call(tj, x):
        return getattr(tj.nn.functional, name)(x, **kw)
    return call


MAX_POOL = define_kernel(
    "max_pool2d", "MaxPool2DWithIndicesBackward0", pool_forward, pool_backward, saves=True, saved="a",
    operands=1, group="conv",
    samples=cases(("max_pool2d", _fn("max_pool2d", kernel_size=2), [(2, 3, 4, 5)], distinct),
                  ("max_pool2d_pad_dil", _fn("max_pool2d", kernel_size=(3, 2), stride=(2, 1), padding=1,
                                             dilation=(1, 2)), [(2, 2, 7, 6)], distinct),
                  ("max_pool2d_ceil", _fn("max_pool2d", kernel_size=3, stride=2, ceil_mode=True),
                   [(1, 2, 6, 8)], distinct),
                  ("max_pool2d_unbatched", _fn("max_pool2d", kernel_size=2, stride=1), [(2, 3, 4)], distinct)))
ADAPTIVE_MAX_POOL = same_kernels(
    "adaptive_max_pool2d", "AdaptiveMaxPool2DBackward0", MAX_POOL,
    samples=cases(("adaptive_max_pool2d", _fn("adaptive_max_pool2d", output_size=(3, 2)), [(2, 2, 7, 5)], distinct),
                  ("adaptive_max_pool2d_none", _fn("adaptive_max_pool2d", output_size=(None, 4)),
                   [(1, 3, 3, 9)], distinct)))
AVG_POOL = same_kernels(
    "avg_pool2d", "AvgPool2DBackward0", MAX_POOL, saves=False,
    samples=cases(("avg_pool2d", _fn("avg_pool2d", kernel_size=2), [(2, 3, 4, 5)], anywhere),
                  ("avg_pool2d_pad", _fn("avg_pool2d", kernel_size=3, stride=2, padding=1, ceil_mode=True),
                   [(1, 2, 6, 7)], anywhere),
                  ("avg_pool2d_exclude_pad", _fn("avg_pool2d", kernel_size=(2, 3), padding=1,
                                                 count_include_pad=False), [(2, 1, 5, 4)], anywhere),
                  ("avg_pool2d_divisor", _fn("avg_pool2d", kernel_size=2, divisor_override=3), [(1, 2, 4, 4)],
                   anywhere)))
ADAPTIVE_AVG_POOL = same_kernels(
    "adaptive_avg_pool2d", "AdaptiveAvgPool2DBackward0", MAX_POOL, saves=False,
    samples=cases(("adaptive_avg_pool2d", _fn("adaptive_avg_pool2d", output_size=(3, 4)), [(2, 2, 7, 5)], anywhere),
                  ("adaptive_avg_pool2d_up", _fn("adaptive_avg_pool2d", output_size=5), [(1, 2, 3, 4)], anywhere)))
NEAREST = same_kernels(
    "upsample_nearest2d", "UpsampleNearest2DBackward0", MAX_POOL, saves=False,
    samples=cases(("nearest2d", _fn("interpolate", scale_factor=2), [(2, 2, 3, 4)], anywhere),
                  ("nearest2d_size", _fn("interpolate", size=(5, 3)), [(1, 2, 3, 4)], anywhere),
                  ("nearest2d_scale", _fn("interpolate", scale_factor=(1.7, 0.6)), [(1, 1, 4, 5)], anywhere)))
NEAREST_1D = same_kernels(
    "upsample_nearest1d", "UpsampleNearest1DBackward0", MAX_POOL, saves=False,
    samples=cases(("nearest1d", _fn("interpolate", size=7), [(2, 3, 4)], anywhere)))

LINEAR_UPSAMPLE = define_kernel(
    "upsample_bilinear2d", "UpsampleBilinear2DBackward0", linear_upsample_forward, linear_upsample_backward,
    saves=False, operands=1, group="conv",
    samples=cases(("bilinear", _fn("interpolate", scale_factor=2, mode="bilinear"), [(2, 2, 3, 4)], anywhere),
                  ("bilinear_corners", _fn("interpolate", size=(5, 2), mode="bilinear", align_corners=True),
                   [(1, 2, 3, 4)], anywhere),
                  ("bilinear_down", _fn("interpolate", scale_factor=(0.6, 1.5), mode="bilinear"),
                   [(1, 1, 5, 4)], anywhere)))
LINEAR_UPSAMPLE_1D = same_kernels(
    "upsample_linear1d", "UpsampleLinear1DBackward0", LINEAR_UPSAMPLE,
    samples=cases(("linear1d", _fn("interpolate", size=7, mode="linear"), [(2, 3, 4)], anywhere),
                  ("linear1d_corners", _fn("interpolate", scale_factor=2.5, mode="linear", align_corners=True),
                   [(1, 2, 3)], anywhere)))
NEAREST_EXACT = same_kernels(
    "upsample_nearest_exact2d", "UpsampleNearestExact2DBackward0", MAX_POOL, saves=False,
    samples=cases(("nearest_exact2d", _fn("interpolate", scale_factor=(1.5, 0.7), mode="nearest-exact"),
                   [(1, 2, 4, 5)], anywhere)))
NEAREST_EXACT_1D = same_kernels(
    "upsample_nearest_exact1d", "UpsampleNearestExact1DBackward0", MAX_POOL, saves=False,
    samples=cases(("nearest_exact1d", _fn("interpolate", size=5, mode="nearest-exact"), [(2, 1, 3)], anywhere)))


# ---- front ends ---------------------------------------------------------------------------
# ``tj.max_pool2d`` and the others torch has at its top level are exported there too;
# ``avg_pool2d``, ``adaptive_*_pool2d`` and ``interpolate`` are ``nn.functional``'s only, as
# in torch (whose ``torch.adaptive_max_pool1d`` returns indices too: not exported either).
from tapejit import dtypes as _dtypes  # noqa: E402
from tapejit.api import export, type_name as _type_name  # noqa: E402
from tapejit.ops.conv import int_tuple  # noqa: E402
from tapejit.recording import record, on_tape, eager  # noqa: E402
from tapejit.shapes import numel as _numel  # noqa: E402
from tapejit.tape import state as _state, current as _current  # noqa: E402
from tapejit.tensor import Tensor, _concrete  # noqa: E402


def _check_input(x, fn):
    if not isinstance(x, Tensor):
        raise TypeError(f"{fn}(): argument 'input' (position 1) must be Tensor, not {_type_name(x)}")


def _ints(value, fn, what, message):
    """``value`` as a pair of ints: an int, or a sequence of one or two ints."""
    values = int_tuple(value, fn, what)
    if len(values) == 1:
        return values * 2
    if len(values) != 2:
        raise RuntimeError(f"{fn}: {message}")
    return values


def _single(value, fn, what):
    """``value`` as one int (1-d pools): an int or a sequence of one, as torch's ``check1d``."""
    values = int_tuple(value, fn, what)
    if len(values) != 1:
        raise RuntimeError(f"{fn}() argument '{what}' should contain one int (got {len(values)})")
    return values[0]


def _output_size(size, kernel, pad, stride, dilation, ceil_mode):
    """torch's ``pooling_output_shape``, with its checks."""
    if stride == 0:
        raise RuntimeError("stride should not be zero")
    if pad < 0:
        raise RuntimeError(f"pad must be non-negative, but got pad: {pad}")
    if pad > ((kernel - 1) * dilation + 1) // 2:
        raise RuntimeError(f"pad should be at most half of effective kernel size, but got pad={pad}, "
                           f"kernel_size={kernel} and dilation={dilation}")
    out = (size + 2 * pad - dilation * (kernel - 1) - 1 + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1   # the last window must start inside the input or its left padding
    return out


def _shape_check(shape, kernel, stride, pad, dilation, out):
    """torch's ``pool2d_shape_check``."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw), (ho, wo) = kernel, stride, pad, dilation, out
    if kh <= 0 or kw <= 0:
        raise RuntimeError(f"kernel size should be greater than zero, but got kH: {kh} kW: {kw}")
    if sh <= 0 or sw <= 0:
        raise RuntimeError(f"stride should be greater than zero, but got dH: {sh} dW: {sw}")
    if dh <= 0 or dw <= 0:
        raise RuntimeError(f"dilation should be greater than zero, but got dilationH: {dh} dilationW: {dw}")
    if not ((len(shape) == 3 and shape[0] != 0 and shape[1] != 0 and shape[2] != 0)
            or (len(shape) == 4 and shape[1] != 0 and shape[2] != 0 and shape[3] != 0)):
        raise RuntimeError(f"Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for input, "
                           f"but got:{list(shape)}")
    if kw // 2 < pw or kh // 2 < ph:
        raise RuntimeError(f"pad should be smaller than or equal to half of kernel size, but got padW = {pw}, "
                           f"padH = {ph}, kW = {kw}, kH = {kh}")
    if ho < 1 or wo < 1:
        c, h, w = shape[-3:]
        raise RuntimeError(f"Given input size: ({c}x{h}x{w}). Calculated output size: ({c}x{ho}x{wo}). "
                           f"Output size is too small")


# ---- window tables: (start, end, step, count) per output row or column --------------------

def _max_windows(size, kernel, stride, pad, dilation, out):
    table = []
    for i in range(out):
        start = i * stride - pad
        end = min(start + (kernel - 1) * dilation + 1, size)
        while start < 0:
            start += dilation
        table += (start, -(-(end - start) // dilation), dilation, 1)
    return table


def _avg_windows(size, kernel, stride, pad, out, count_include_pad):
    table = []
    for i in range(out):
        start = i * stride - pad
        end = min(start + kernel, size + pad)
        padded = end - start
        start, end = max(start, 0), min(end, size)
        table += (start, end - start, 1, padded if count_include_pad else end - start)
    return table


def _adaptive_windows(size, out):
    table = []
    for i in range(out):
        start = i * size // out
        end = -(-(i + 1) * size // out)
        table += (start, end - start, 1, end - start)
    return table


def _point_windows(sources):
    table = []
    for s in sources:
        table += (int(s), 1, 1, 1)
    return table


def _record_pool(op, input, rows, cols, mode, override, out_shape, one_dim=False):
    """A pool record over ``input``'s planes: its last two dims, or its last one (height 1)."""
    if not on_tape(input):
        return eager(_record_pool, op, input, rows, cols, mode, override, out_shape, one_dim)
    xs = input._shape
    height = 1 if one_dim else xs[-2]
    tape = _state.tape or _current()
    p = tape.add_ints([_numel(xs[:-1]) // height, height, xs[-1], len(rows) // 4, len(cols) // 4, mode, override]
                      + rows + cols)
    return record(op, (input,), out_shape, input._dtype, p, 0)


def _windows(values, rows, cols, fill):
    """The windows of ``values`` (``(..., H, W)``) as ``(..., ho, wo, k)``, row-major inside
    each window (torch's loop order), positions beyond a window's end given ``fill``; and
    the positions in the plane, ``(ho, wo, k)``."""
    width = values.shape[-1]

    def positions(table):
        spans = [range(table[i], table[i] + table[i + 1] * table[i + 2], table[i + 2])
                 for i in range(0, len(table), 4)]
        longest = max([len(s) for s in spans] + [1])
        pos = np.zeros((len(spans), longest), np.int64)
        valid = np.zeros((len(spans), longest), bool)
        for i, s in enumerate(spans):
            pos[i, :len(s)] = s
            valid[i, :len(s)] = True
        return pos, valid
    pr, vr = positions(rows)
    pc, vc = positions(cols)
    flat = (pr[:, None, :, None] * width + pc[None, :, None, :]).reshape(len(pr), len(pc), -1)
    valid = (vr[:, None, :, None] & vc[None, :, None, :]).reshape(flat.shape)
    taken = values.reshape(values.shape[:-2] + (-1,))[..., flat]
    return np.where(valid, taken, fill), flat


def _window_argmax(values, rows, cols):
    """Index in the plane of each window's first maximum, or last NaN: torch's indices."""
    if values.dtype.kind == "f":
        windows, flat = _windows(values, rows, cols, -np.inf)
        nan = np.isnan(windows)
        first = np.argmax(windows, axis=-1)
        if nan.any():
            last_nan = nan.shape[-1] - 1 - np.argmax(nan[..., ::-1], axis=-1)
            first = np.where(nan.any(axis=-1), last_nan, first)
    else:
        windows, flat = _windows(values, rows, cols, np.iinfo(np.int64).min)
        first = np.argmax(windows, axis=-1)
    ho, wo = flat.shape[:2]
    return flat[np.arange(ho)[:, None], np.arange(wo)[None, :], first]


def _max_pool(op, input, rows, cols, out_shape, return_indices, kernel_name):
    dt = input._dtype
    if dt is _dtypes.bool_:
        raise _dtypes.not_implemented(kernel_name, dt)
    if not dt.is_floating_point:   # int64: no gradient, computed in NumPy
        values = input._value()
        idx = _window_argmax(values, rows, cols)
        flat = values.reshape(values.shape[:-2] + (-1,))
        out = _concrete(np.take_along_axis(flat, idx.reshape(idx.shape[:-2] + (-1,)), -1).reshape(out_shape))
        return (out, _concrete(idx)) if return_indices else out
    out = _record_pool(op, input, rows, cols, _MAX, 0, out_shape)
    if not return_indices:
        return out
    # The indices come from the values (NumPy); the record recomputes its own in backward.
    return out, _concrete(_window_argmax(input._value(), rows, cols))


def _integer_average(input, rows, cols, override, out_shape):
    """avg_pool2d of int64, as torch: the window's sum divided by the count, truncated."""
    windows, _ = _windows(input._value(), rows, cols, 0)
    sums = windows.sum(axis=-1)
    counts = np.array(rows[3::4])[:, None] * np.array(cols[3::4])[None, :] if not override else override
    quotient = np.abs(sums) // np.abs(counts) * np.sign(sums) * np.sign(counts)
    return _concrete(quotient.astype(np.int64).reshape(out_shape))


def _pool_kernel_and_stride(fn, kernel_size, stride):
    kernel = _ints(kernel_size, fn, "kernel_size", "kernel_size must either be a single int, or a tuple of two ints")
    if stride is None or (isinstance(stride, (tuple, list)) and len(stride) == 0):
        return kernel, kernel
    return kernel, _ints(stride, fn, "stride", "stride must either be omitted, a single int, or a tuple of two ints")


@export
def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    _check_input(input, "max_pool2d")
    kernel, stride = _pool_kernel_and_stride("max_pool2d", kernel_size, stride)
    pad = _ints(padding, "max_pool2d", "padding", "padding must either be a single int, or a tuple of two ints")
    dilation = _ints(dilation, "max_pool2d", "dilation", "dilation must be either a single int, or a tuple of two ints")
    xs = input._shape
    if len(xs) not in (3, 4):
        raise RuntimeError("non-empty 3D or 4D (batch mode) tensor expected for input")
    out = tuple(_output_size(xs[d - 2], kernel[d], pad[d], stride[d], dilation[d], ceil_mode) for d in (0, 1))
    _shape_check(xs, kernel, stride, pad, dilation, out)
    rows = _max_windows(xs[-2], kernel[0], stride[0], pad[0], dilation[0], out[0])
    cols = _max_windows(xs[-1], kernel[1], stride[1], pad[1], dilation[1], out[1])
    return _max_pool(MAX_POOL, input, rows, cols, xs[:-2] + out, return_indices, "max_pool2d")


@export
def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    _check_input(input, "max_pool1d")
    xs = input._shape
    if return_indices:   # torch's max_pool1d_with_indices: the 2-d pool's checks
        _dims_2_to_3(xs, "max_pool1d")
        k = _single(kernel_size, "max_pool1d", "kernel_size")
        s = k if stride is None or stride == () or stride == [] else _single(stride, "max_pool1d", "stride")
        pad = _single(padding, "max_pool1d", "padding")
        dil = _single(dilation, "max_pool1d", "dilation")
    else:
        k, s, pad, dil = _check_max_pool1d(xs, kernel_size, stride, padding, dilation, ceil_mode)
    # torch's: the 2-d pool on height 1 (grad_fn SqueezeBackward1)
    result = max_pool2d(input.unsqueeze(-2), (1, k), (1, s), (0, pad), (1, dil), ceil_mode, return_indices)
    if return_indices:
        return result[0].squeeze(-2), result[1].squeeze(-2)
    return result.squeeze(-2)


def _check_max_pool1d(xs, kernel_size, stride, padding, dilation, ceil_mode):
    """torch's ``check_max_pool1d`` (the path without indices)."""
    if len(xs) not in (2, 3):
        raise RuntimeError(f"max_pool1d: Expected 2D or 3D (batch mode) tensor with optional 0 dim batch size for "
                           f"input, but got:{list(xs)}")

    def one(value, what, allow_none=False):
        if allow_none and (value is None or (isinstance(value, (tuple, list)) and len(value) == 0)):
            return None
        values = int_tuple(value, "max_pool1d", what)
        if len(values) != 1:
            kinds = {"kernel_size": "an int, list of ints or tuple of ints",
                     "stride": "None, an int, list of ints, or tuple of ints",
                     "padding": "an int, list of ints, or tuple of ints",
                     "dilation": "an int, list of ints or tuple of ints"}
            raise RuntimeError(f"max_pool1d() {what} must be {kinds[what]} of size 1 but got size {len(values)}")
        return values[0]
    k = one(kernel_size, "kernel_size")
    s = one(stride, "stride", allow_none=True)
    pad = one(padding, "padding")
    dil = one(dilation, "dilation")
    s = k if s is None else s
    if k <= 0:
        raise RuntimeError(f"max_pool1d() kernel_size must be greater than zero, but got {k}")
    if s <= 0:
        raise RuntimeError(f"max_pool1d() stride must be greater than zero, but got {s}")
    if pad < 0:
        raise RuntimeError(f"max_pool1d() padding must be non-negative, but got {pad}")
    if pad > k // 2:
        raise RuntimeError(f"max_pool1d() padding should be at most half of kernel size, but got padding={pad} "
                           f"and kernel_size={k}")
    if dil <= 0:
        raise RuntimeError(f"max_pool1d() dilation must be greater than zero, but got {dil}")
    out = _output_size(xs[-1], k, pad, s, dil, ceil_mode)
    if out <= 0:
        raise RuntimeError(f"max_pool1d() Invalid computed output size: {out}")
    return k, s, pad, dil


def _dims_2_to_3(xs, fn):
    if len(xs) not in (2, 3):
        raise RuntimeError(f"Expected 2 to 3 dimensions, but got {len(xs)}-dimensional tensor for argument #1 "
                           f"'self' (while checking arguments for {fn})")


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    _check_input(input, "avg_pool2d")
    kernel, stride = _pool_kernel_and_stride("avg_pool2d", kernel_size, stride)
    pad = _ints(padding, "avg_pool2d", "padding", "padding must either be a single int, or a tuple of two ints")
    if divisor_override is not None and divisor_override == 0:
        raise RuntimeError("divisor must be not zero")
    xs = input._shape
    if len(xs) < 3:
        n = max(len(xs), 1)
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got -3)")
    out = tuple(_output_size(xs[d - 2], kernel[d], pad[d], stride[d], 1, ceil_mode) for d in (0, 1))
    _shape_check(xs, kernel, stride, pad, (1, 1), out)
    rows = _avg_windows(xs[-2], kernel[0], stride[0], pad[0], out[0], count_include_pad)
    cols = _avg_windows(xs[-1], kernel[1], stride[1], pad[1], out[1], count_include_pad)
    override = int(divisor_override) if divisor_override is not None else 0
    dt = input._dtype
    if dt is _dtypes.bool_:
        raise _dtypes.not_implemented("avg_pool2d", dt)
    if not dt.is_floating_point:
        return _integer_average(input, rows, cols, override, xs[:-2] + out)
    return _record_pool(AVG_POOL, input, rows, cols, _AVERAGE, override, xs[:-2] + out)


@export
def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    _check_input(input, "avg_pool1d")
    _dims_2_to_3(input._shape, "avg_pool1d")
    k = _single(kernel_size, "avg_pool1d", "kernel_size")
    s = k if stride is None or stride == () or stride == [] else _single(stride, "avg_pool1d", "stride")
    pad = _single(padding, "avg_pool1d", "padding")
    out = avg_pool2d(input.unsqueeze(-2), (1, k), (1, s), (0, pad), ceil_mode, count_include_pad)
    return out.squeeze(-2)


def _with_defaults(output_size, shape, fn):
    """``output_size`` as a pair, ``None`` entries taking the input's size (torch's
    ``_list_with_default``)."""
    if isinstance(output_size, (tuple, list)):
        size = tuple(output_size)
        if len(shape) <= len(size):
            raise ValueError(f"Input dimension should be at least {len(size) + 1}")
        given = int_tuple([0 if v is None else v for v in size], fn, "output_size")
        return tuple(shape[-len(size) + i] if v is None else given[i] for i, v in enumerate(size))
    return int_tuple(output_size, fn, "output_size") * 2


def adaptive_avg_pool2d(input, output_size):
    _check_input(input, "adaptive_avg_pool2d")
    size = _with_defaults(output_size, input._shape, "adaptive_avg_pool2d")
    if len(size) != 2:
        raise RuntimeError("adaptive_avg_pool2d: output_size must be 2")
    if size[0] < 0 or size[1] < 0:
        raise RuntimeError(f"adaptive_avg_pool2d: elements of output_size must be greater than or equal to 0 but "
                           f"received {{{size[0]}, {size[1]}}}")
    if size == (1, 1):   # torch takes the mean (MeanBackward1)
        return input.mean((-1, -2), keepdim=True)
    xs = input._shape
    if len(xs) not in (3, 4):
        raise RuntimeError(f"adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got {list(xs)}")
    for d in (-2, -1):
        if xs[d] <= 0:
            raise RuntimeError(f"adaptive_avg_pool2d(): Expected input to have non-zero size for non-batch "
                               f"dimensions, but input has sizes {list(xs)} with dimension {d + len(xs)} being empty")
    if not input._dtype.is_floating_point:
        raise _dtypes.not_implemented("adaptive_avg_pool2d", input._dtype)
    rows = _adaptive_windows(xs[-2], size[0])
    cols = _adaptive_windows(xs[-1], size[1])
    return _record_pool(ADAPTIVE_AVG_POOL, input, rows, cols, _AVERAGE, 0, xs[:-2] + size)


@export
def adaptive_avg_pool1d(input, output_size):
    _check_input(input, "adaptive_avg_pool1d")
    _dims_2_to_3(input._shape, "adaptive_avg_pool1d")
    size = _single(output_size, "adaptive_avg_pool1d", "output_size")
    return adaptive_avg_pool2d(input.unsqueeze(-2), (1, size)).squeeze(-2)


def adaptive_max_pool2d(input, output_size, return_indices=False):
    _check_input(input, "adaptive_max_pool2d")
    size = _with_defaults(output_size, input._shape, "adaptive_max_pool2d")
    xs = input._shape
    if len(xs) not in (3, 4):
        raise RuntimeError(f"adaptive_max_pool2d(): Expected 3D or 4D tensor, but got: {list(xs)}")
    for d in range(1, len(xs)):
        if xs[d] <= 0:
            raise RuntimeError(f"adaptive_max_pool2d(): Expected input to have non-zero size for non-batch "
                               f"dimensions, but input has sizes {list(xs)} with dimension {d} being empty")
    if len(size) != 2:
        raise RuntimeError("adaptive_max_pool2d(): internal error: output_size.size() must be 2")
    if size[0] < 0 or size[1] < 0:
        bad = size[0] if size[0] < 0 else size[1]
        raise RuntimeError(f"Trying to create tensor with negative dimension {bad}: {list(xs[:-2] + size)}")
    if not input._dtype.is_floating_point:
        raise _dtypes.not_implemented("adaptive_max_pool2d", input._dtype)
    rows = _adaptive_windows(xs[-2], size[0])
    cols = _adaptive_windows(xs[-1], size[1])
    return _max_pool(ADAPTIVE_MAX_POOL, input, rows, cols, xs[:-2] + size, return_indices, "adaptive_max_pool2d")


def adaptive_max_pool1d(input, output_size, return_indices=False):
    _check_input(input, "adaptive_max_pool1d")
    _dims_2_to_3(input._shape, "adaptive_max_pool1d")
    size = _single(output_size, "adaptive_max_pool1d", "output_size")
    result = adaptive_max_pool2d(input.unsqueeze(-2), (1, size), return_indices)
    if return_indices:
        return result[0].squeeze(-2), result[1].squeeze(-2)
    return result.squeeze(-2)


# ---- interpolate ------------------------------------------------------------------------------

def _nearest_sources(in_size, out_size, scale, exact):
    """torch's source index per output index (``nearest_idx``/``nearest_exact_idx``): the
    scale is a float32, ``1/scale_factor`` when given, else ``in/out``."""
    s = np.float32(1.0 / scale) if scale is not None and scale > 0 else np.float32(in_size) / np.float32(out_size)
    dst = np.arange(out_size)
    if exact:   # floorf((dst + 0.5) * scale): the product in double, rounded to float by floorf
        src = np.floor(((dst + 0.5) * np.float64(s)).astype(np.float32))
    else:       # floorf(dst * scale) in float
        src = np.floor(dst.astype(np.float32) * s)
    return np.minimum(src.astype(np.int64), in_size - 1)


def _linear_sources(in_size, out_size, scale, align_corners, dtype):
    """torch's ``compute_source_index_and_lambda`` in the tensor's dtype: per output index
    the two source indices and their weights."""
    t = dtype.type
    if out_size == in_size:
        i0 = np.arange(out_size)
        return i0, i0, np.ones(out_size, dtype), np.zeros(out_size, dtype)
    if align_corners:
        ratio = t(in_size - 1) / t(out_size - 1) if out_size > 1 else t(0)
    elif scale is not None and scale > 0:
        ratio = t(1.0 / scale)
    else:
        ratio = t(in_size) / t(out_size)
    dst = np.arange(out_size).astype(dtype)
    if align_corners:
        real = ratio * dst
    else:
        real = np.maximum(ratio * (dst + t(0.5)) - t(0.5), t(0))
    i0 = np.minimum(np.floor(real.astype(np.float32)).astype(np.int64), in_size - 1)   # floorf
    l1 = np.minimum(np.maximum(real - i0.astype(dtype), t(0)), t(1)).astype(dtype)
    i1 = i0 + (i0 < in_size - 1)
    return i0, i1, (t(1) - l1).astype(dtype), l1


_UPSAMPLE_MODES = "nearest | linear | bilinear | bicubic | trilinear | lanczos | area | nearest-exact"


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """``nn.functional.interpolate`` for 3-d and 4-d inputs: modes ``nearest``,
    ``nearest-exact``, ``linear``, ``bilinear`` (``align_corners``) and ``area``, with
    torch's output sizes and source indices."""
    _check_input(input, "interpolate")
    if mode in ("nearest", "area", "nearest-exact"):
        if align_corners is not None:
            raise ValueError("align_corners option can only be set with the interpolating modes: "
                             "linear | bilinear | bicubic | trilinear")
    elif align_corners is None:
        align_corners = False
    xs = input._shape
    dim = len(xs) - 2
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    if size is not None:
        scales = None
        if isinstance(size, (list, tuple)):
            if len(size) != dim:
                raise ValueError(
                    "Input and output must have the same number of spatial dimensions, but got input with spatial "
                    f"dimensions of {list(xs[2:])} and output size of {size}. Please provide input tensor in "
                    "(N, C, d1, d2, ...,dK) format and output size in (o1, o2, ...,oK) format.")
            if not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in size):
                raise TypeError("expected size to be one of int or Tuple[int] or Tuple[int, int] or Tuple[int, int, "
                                f"int], but got size with types {[type(s) for s in size]}")
            out_size = [int(s) for s in size]
        else:
            out_size = [int(size)] * dim
    elif scale_factor is not None:
        out_size = None
        if isinstance(scale_factor, (list, tuple)):
            if len(scale_factor) != dim:
                raise ValueError(
                    "Input and scale_factor must have the same number of spatial dimensions, but got input with "
                    f"spatial dimensions of {list(xs[2:])} and scale_factor of shape {scale_factor}. Please provide "
                    "input tensor in (N, C, d1, d2, ...,dK) format and scale_factor in (s1, s2, ...,sK) format.")
            scales = [float(s) for s in scale_factor]
        else:
            scales = [float(scale_factor)] * dim
    else:
        raise ValueError("either size or scale_factor should be defined")
    if recompute_scale_factor and size is not None:
        raise ValueError("recompute_scale_factor is not meaningful with an explicit size.")
    if mode == "area" and out_size is None:
        recompute_scale_factor = True
    if recompute_scale_factor:
        out_size = [math.floor(xs[i + 2] * scales[i]) for i in range(dim)]
        scales = None
    if antialias and not (mode in ("bilinear", "bicubic", "lanczos") and len(xs) == 4):
        raise ValueError("Anti-alias option is restricted to bilinear, bicubic, and lanczos modes and requires a 4-D "
                         "tensor as input")
    supported = {(3, "nearest"), (4, "nearest"), (3, "nearest-exact"), (4, "nearest-exact"), (3, "area"),
                 (4, "area"), (3, "linear"), (4, "bilinear")}
    if (len(xs), mode) not in supported:
        needs = {"linear": 3, "bilinear": 4, "trilinear": 5}
        if mode in needs and len(xs) in (3, 4, 5) and needs[mode] != len(xs):
            raise NotImplementedError(f"Got {len(xs)}D input, but {mode} mode needs {needs[mode]}D input")
        if len(xs) in (3, 4, 5) and mode in _UPSAMPLE_MODES.split(" | "):
            raise NotImplementedError(f"interpolate: mode '{mode}' on a {len(xs)}-D input is not supported by "
                                      f"tapejit (it has nearest, nearest-exact and area on 3-D and 4-D inputs, "
                                      f"linear on 3-D and bilinear on 4-D)")
        raise NotImplementedError(f"Input Error: Only 3D, 4D and 5D input Tensors supported (got {len(xs)}D) for the "
                                  f"modes: {_UPSAMPLE_MODES} (got {mode})")
    if antialias:
        raise NotImplementedError("interpolate: antialias=True is not supported by tapejit")
    if mode == "area":
        return adaptive_avg_pool1d(input, out_size) if dim == 1 else adaptive_avg_pool2d(input, out_size)
    if out_size is None:   # torch's upsample ops: floor(input size * scale factor)
        out_size = [int(xs[i + 2] * scales[i]) for i in range(dim)]
    if scales is None:
        scales = [None] * dim
    in_size = list(xs[2:])
    if any(s <= 0 for s in in_size) or any(s <= 0 for s in out_size):
        if dim == 1:
            raise RuntimeError(f"Input and output sizes should be greater than 0, but got input (W: {in_size[0]}) "
                               f"and output (W: {out_size[0]})")
        raise RuntimeError(f"Input and output sizes should be greater than 0, but got input (H: {in_size[0]}, W: "
                           f"{in_size[1]}) output (H: {out_size[0]}, W: {out_size[1]})")
    dt = input._dtype
    if not dt.is_floating_point:
        raise _dtypes.not_implemented(f"upsample_{mode.replace('-', '_')}{dim}d", dt)
    out_shape = xs[:2] + tuple(out_size)
    if mode in ("nearest", "nearest-exact"):
        exact = mode == "nearest-exact"
        op = {(1, False): NEAREST_1D, (2, False): NEAREST, (1, True): NEAREST_EXACT_1D,
              (2, True): NEAREST_EXACT}[dim, exact]
        rows = _point_windows([0]) if dim == 1 else _point_windows(
            _nearest_sources(in_size[0], out_size[0], scales[0], exact))
        cols = _point_windows(_nearest_sources(in_size[-1], out_size[-1], scales[-1], exact))
        return _record_pool(op, input, rows, cols, _NEAREST, 0, out_shape, one_dim=dim == 1)
    if dim == 1:
        rows = (np.zeros(1, np.int64), np.zeros(1, np.int64), np.ones(1, dt.np), np.zeros(1, dt.np))
    else:
        rows = _linear_sources(in_size[0], out_size[0], scales[0], align_corners, dt.np)
    cols = _linear_sources(in_size[-1], out_size[-1], scales[-1], align_corners, dt.np)
    return _record_linear(LINEAR_UPSAMPLE_1D if dim == 1 else LINEAR_UPSAMPLE, input, rows, cols, dim == 1,
                          out_shape)


def _record_linear(op, input, rows, cols, one_dim, out_shape):
    if not on_tape(input):
        return eager(_record_linear, op, input, rows, cols, one_dim, out_shape)
    xs = input._shape
    tape = _state.tape or _current()

    def pairs(a, b):
        return np.stack([a, b], axis=1).reshape(-1).tolist()
    height = 1 if one_dim else xs[-2]
    p = tape.add_ints([_numel(xs[:-1]) // height, height, xs[-1], len(rows[0]), len(cols[0]), int(one_dim)]
                      + pairs(rows[0], rows[1]) + pairs(cols[0], cols[1]))
    q = tape.nfloats + len(tape.pfloats)
    tape.pfloats += pairs(rows[2].astype(np.float64), rows[3].astype(np.float64))
    tape.pfloats += pairs(cols[2].astype(np.float64), cols[3].astype(np.float64))
    return record(op, (input,), out_shape, input._dtype, p, q)



# ---- derivative formulas (create_graph) ----------------------------------------------------
# One per kernel, applied by create_graph passes (tapejit/autograd/higher.py); plain Python,
# not compiled: see tapejit/ops/_formulas.py.  Kept last so define_ edits merge cleanly.
# Every pool and upsampling is linear in its input once the windows (and, for max, the
# argmax: a constant, as torch's saved indices) are fixed: the gradient is the incoming one
# gathered, scaled by constant weights and scatter-added to the input positions it came from.

from tapejit.ops import _formulas as _f  # noqa: E402
from tapejit.ops._formulas import derivative  # noqa: E402


def _spread(c, planes, plane_in, plane_out, out_at, in_at, weights=None):
    """``dx``: per plane, ``g[out_at[i]] * weights[i]`` added at ``in_at[i]`` (positions
    within a plane of the output and the input)."""
    base = np.arange(planes, dtype=np.int64)[:, None]
    in_all = (base * plane_in + np.asarray(in_at, np.int64)[None, :]).reshape(-1)
    g = c.g
    if out_at is not None:
        g = _f.gather(g, (base * plane_out + np.asarray(out_at, np.int64)[None, :]).reshape(-1))
    if weights is not None:
        g = g / _concrete(np.tile(weights, planes).astype(c.dt.np))
    return _f.scatter_add(g, in_all, planes * plane_in)


@derivative(pool_forward)
def _d_pool(c):
    ints = c.tape.ints
    p = c.p
    planes, height, width, ho, wo, mode, override = (int(ints[p + i]) for i in range(7))
    rows = ints[p + 7:p + 7 + 4 * ho].tolist()
    cols = ints[p + 7 + 4 * ho:p + 7 + 4 * ho + 4 * wo].tolist()
    if mode == _MAX:   # to each window's first maximum (or last NaN), as the rule
        x = c.x(planes * height * width)
        argmax = _window_argmax(_f.value(x).reshape(planes, height, width), rows, cols)
        base = np.arange(planes, dtype=np.int64)[:, None, None] * (height * width)
        return (_f.scatter_add(c.g, (base + argmax).reshape(-1), planes * height * width), None)
    if mode == _NEAREST:
        sources = (np.array(rows[0::4])[:, None] * width + np.array(cols[0::4])[None, :]).reshape(-1)
        return (_spread(c, planes, height * width, ho * wo, None, sources), None)
    # average: each output position's share (g / count) to every input of its window
    _, flat = _windows(np.zeros((height, width)), rows, cols, 0.0)
    sizes = np.array(rows[1::4])[:, None] * np.array(cols[1::4])[None, :]   # (ho, wo) taps
    counts = override if override != 0 else np.array(rows[3::4])[:, None] * np.array(cols[3::4])[None, :]
    counts = np.broadcast_to(counts, (ho, wo)).astype(np.float64)
    taps = np.arange(flat.shape[-1])[None, None, :] < sizes[:, :, None]
    out_at = np.broadcast_to(np.arange(ho * wo).reshape(ho, wo, 1), flat.shape)[taps]
    return (_spread(c, planes, height * width, ho * wo, out_at, flat[taps],
                    np.broadcast_to(counts[:, :, None], flat.shape)[taps]), None)


@derivative(linear_upsample_forward)
def _d_linear_upsample(c):
    """Each output mixes 2 (1-d) or 4 input positions with the record's constant weights."""
    ints = c.tape.ints
    p = c.p
    planes, height, width, ho, wo, one_dim = (int(ints[p + i]) for i in range(6))
    rows = ints[p + 6:p + 6 + 2 * ho].reshape(ho, 2)
    cols = ints[p + 6 + 2 * ho:p + 6 + 2 * ho + 2 * wo].reshape(wo, 2)
    floats = c.tape.floats[c.arena]
    row_w = np.asarray(floats[c.q:c.q + 2 * ho], np.float64).reshape(ho, 2)
    col_w = np.asarray(floats[c.q + 2 * ho:c.q + 2 * ho + 2 * wo], np.float64).reshape(wo, 2)
    taps = [(0, 0), (0, 1)] if one_dim else [(0, 0), (0, 1), (1, 0), (1, 1)]
    dx = None
    for r, k in taps:
        at_in = (rows[:, r][:, None] * width + cols[:, k][None, :]).reshape(-1)
        weight = col_w[:, k][None, :] if one_dim else row_w[:, r][:, None] * col_w[:, k][None, :]
        share = _spread_scaled(c, planes, height * width, at_in, np.broadcast_to(weight, (ho, wo)).reshape(-1))
        dx = share if dx is None else dx + share
    return (dx, None)


def _spread_scaled(c, planes, plane_in, in_at, weights):
    """``dx``: per plane, ``g * weights`` added at ``in_at`` (one input position per output)."""
    base = np.arange(planes, dtype=np.int64)[:, None]
    in_all = (base * plane_in + np.asarray(in_at, np.int64)[None, :]).reshape(-1)
    g = c.g * _concrete(np.tile(weights, planes).astype(c.dt.np))
    return _f.scatter_add(g, in_all, planes * plane_in)
