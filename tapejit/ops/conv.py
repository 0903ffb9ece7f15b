"""Convolution: ``conv1d``, ``conv2d`` and their transposes, as one record each
(grad_fn ``ConvolutionBackward0``, torch's name for all of them).

One kernel pair serves every form.  A 1-d convolution is a 2-d one with a kernel of height
1 (the same memory), and a transposed convolution is the adjoint of a plain one, so both
directions are one ``im2col``/``col2im`` and a BLAS ``gemm`` (``_blas.matmul_into``) per
sample and group:

* plain, per sample ``n`` and group: ``out = W (og x K) @ cols (K x L)``, where
  ``cols = im2col(x)`` holds the ``K = cg*kh*kw`` inputs under each of the ``L = ho*wo``
  output positions.  Backward: ``dW^T += cols @ G^T`` and ``dx += col2im(W^T @ G)``.
  A 1x1 kernel with stride 1 and no padding reads ``x`` itself as ``cols``.
* transposed: the output is the image and the input the grid of window positions:
  ``out = col2im(W^T @ x)``; backward ``dx = W @ im2col(G)`` and ``dW^T += im2col(G) @ x^T``.

Padding can differ on both sides (``padding="same"`` with an even kernel pads one more
on the bottom/right, as torch does): the kernel takes the top/left padding and the output
size, and everything outside the image reads as zero.  Layout at ``ints[p]``:
``[N, C, H, W, O, kh, kw, sh, sw, ph, pw, dh, dw, groups, ho, wo, transposed, has_bias,
bias operand]``; ``C``/``H``/``W`` are the input's, ``O``/``ho``/``wo`` the output's.  The
weight is ``(O, C/groups, kh, kw)``, or ``(C, O/groups, kh, kw)`` when transposed.
"""
import numpy as np

from tapejit._jit import helper, kernel
from tapejit.ops._blas import matmul_into
from tapejit.ops._kernel_helpers import acc, at, claim, decode, row_sum, zero_if_first
from tapejit.registry import define_kernel
from tapejit.samples import anywhere, cases


@helper
def _valid_columns(offset, stride, width, count):
    """``(x0, x1)``: the window positions ``x`` in ``[0, count)`` whose input column
    ``x * stride + offset`` lies inside ``[0, width)``."""
    x0 = 0 if offset >= 0 else (stride - 1 - offset) // stride
    x1 = (width - offset + stride - 1) // stride
    if x1 > count:
        x1 = count
    if x1 < 0:
        x1 = 0
    if x0 > x1:
        x0 = x1
    return x0, x1


@helper
def im2col(src, base, channels, height, width, kh, kw, sh, sw, ph, pw, dh, dw, ho, wo, cols):
    """``cols[(c*kh + i)*kw + j, y*wo + x] = image[c, y*sh - ph + i*dh, x*sw - pw + j*dw]``,
    zero outside the image, where ``image`` is ``src[base:]`` as ``(channels, height, width)``."""
    positions = ho * wo
    r = 0
    for c in range(channels):
        plane = base + c * height * width
        for i in range(kh):
            for j in range(kw):
                off_x = j * dw - pw
                x0, x1 = _valid_columns(off_x, sw, width, wo)
                for y in range(ho):
                    iy = y * sh - ph + i * dh
                    dst = r * positions + y * wo
                    if iy < 0 or iy >= height:
                        for x in range(wo):
                            cols[at(dst + x)] = 0.0
                        continue
                    for x in range(x0):
                        cols[at(dst + x)] = 0.0
                    row = plane + iy * width + off_x
                    if sw == 1:
                        for x in range(x0, x1):
                            cols[at(dst + x)] = src[at(row + x)]
                    else:
                        for x in range(x0, x1):
                            cols[at(dst + x)] = src[at(row + x * sw)]
                    for x in range(x1, wo):
                        cols[at(dst + x)] = 0.0
                r += 1


@helper
def col2im_add(cols, dst, base, channels, height, width, kh, kw, sh, sw, ph, pw, dh, dw, ho, wo):
    """The adjoint of ``im2col``: adds each column entry into the image element it was read
    from (entries that fell outside the image are dropped)."""
    positions = ho * wo
    r = 0
    for c in range(channels):
        plane = base + c * height * width
        for i in range(kh):
            for j in range(kw):
                off_x = j * dw - pw
                x0, x1 = _valid_columns(off_x, sw, width, wo)
                for y in range(ho):
                    iy = y * sh - ph + i * dh
                    if iy < 0 or iy >= height:
                        continue
                    src = r * positions + y * wo
                    row = plane + iy * width + off_x
                    if sw == 1:
                        for x in range(x0, x1):
                            dst[at(row + x)] += cols[at(src + x)]
                    else:
                        for x in range(x0, x1):
                            dst[at(row + x * sw)] += cols[at(src + x)]
                r += 1


@kernel
def conv_forward(v, out, a, b, p, q, ints, floats):
    batch = ints[p]
    chans = ints[p + 1]
    height = ints[p + 2]
    width = ints[p + 3]
    outs = ints[p + 4]
    kh = ints[p + 5]
    kw = ints[p + 6]
    sh = ints[p + 7]
    sw = ints[p + 8]
    ph = ints[p + 9]
    pw = ints[p + 10]
    dh = ints[p + 11]
    dw = ints[p + 12]
    groups = ints[p + 13]
    ho = ints[p + 14]
    wo = ints[p + 15]
    cg = chans // groups
    og = outs // groups
    positions = ho * wo
    if ints[p + 16] == 0:
        k = cg * kh * kw
        direct = kh == 1 and kw == 1 and sh == 1 and sw == 1 and ph == 0 and pw == 0
        cols = np.empty(0 if direct else k * positions, v.dtype)
        for n in range(batch):
            for gi in range(groups):
                src = a + (n * chans + gi * cg) * height * width
                dst = out + (n * outs + gi * og) * positions
                if direct:
                    matmul_into(v, dst, v, b + gi * og * k, v, src, og, k, positions, False, False, False)
                else:
                    im2col(v, src, cg, height, width, kh, kw, sh, sw, ph, pw, dh, dw, ho, wo, cols)
                    matmul_into(v, dst, v, b + gi * og * k, cols, 0, og, k, positions, False, False, False)
    else:
        # The output is the image, the input the grid of window positions.
        k = og * kh * kw
        grid = height * width
        cols = np.empty(k * grid, v.dtype)
        for i in range(batch * outs * positions):
            v[at(out + i)] = 0.0
        for n in range(batch):
            for gi in range(groups):
                matmul_into(cols, 0, v, b + gi * cg * k, v, a + (n * chans + gi * cg) * grid,
                            k, cg, grid, True, False, False)
                col2im_add(cols, v, out + (n * outs + gi * og) * positions, og, ho, wo, kh, kw,
                           sh, sw, ph, pw, dh, dw, height, width)
    if ints[p + 17] != 0:
        bias = decode(ints[p + 18])
        for n in range(batch):
            for o in range(outs):
                shift = v[bias + o]
                row = out + (n * outs + o) * positions
                for i in range(positions):
                    v[at(row + i)] += shift


@kernel
def conv_backward(v, g, flags, out, a, b, ma, mb, p, q, ints, floats):
    batch = ints[p]
    chans = ints[p + 1]
    height = ints[p + 2]
    width = ints[p + 3]
    outs = ints[p + 4]
    kh = ints[p + 5]
    kw = ints[p + 6]
    sh = ints[p + 7]
    sw = ints[p + 8]
    ph = ints[p + 9]
    pw = ints[p + 10]
    dh = ints[p + 11]
    dw = ints[p + 12]
    groups = ints[p + 13]
    ho = ints[p + 14]
    wo = ints[p + 15]
    cg = chans // groups
    og = outs // groups
    positions = ho * wo
    grid = height * width
    if ints[p + 17] != 0:
        enc = ints[p + 18]
        mode = claim(flags, enc)
        if mode != 0:
            bias = decode(enc)
            zero = floats[0] * 0.0
            for o in range(outs):
                s = zero
                for n in range(batch):
                    s += row_sum(g, out + (n * outs + o) * positions, positions, zero)
                acc(g, bias + o, s, mode)
    if ma == 0 and mb == 0:
        return
    # dx is added into by every group and (transposed) every window position: a first
    # contribution zeroes it.  dW is summed over the samples transposed, ``dW^T (k x og)
    # += cols @ G^T``: OpenBLAS ran that orientation up to 2x faster on small layers (and
    # never slower on the shapes measured), and the sum is then written with ``acc``.
    zero_if_first(g, a, batch * chans * grid, ma)
    transposed = ints[p + 16] != 0
    k = (og if transposed else cg) * kh * kw
    rows = cg if transposed else og   # the weight's rows per group
    dwt = np.zeros(groups * k * rows if mb != 0 else 0, v.dtype)
    if not transposed:
        direct = kh == 1 and kw == 1 and sh == 1 and sw == 1 and ph == 0 and pw == 0
        cols = np.empty(0 if direct else k * positions, v.dtype)
        for n in range(batch):
            for gi in range(groups):
                src = a + (n * chans + gi * cg) * grid
                go = out + (n * outs + gi * og) * positions
                w = b + gi * og * k
                if direct:
                    if mb != 0:
                        matmul_into(dwt, gi * k * og, v, src, g, go, k, positions, og, False, True, True)
                    if ma != 0:   # dx += W^T @ G
                        matmul_into(g, src, v, w, g, go, k, og, positions, True, False, True)
                    continue
                if mb != 0:
                    im2col(v, src, cg, height, width, kh, kw, sh, sw, ph, pw, dh, dw, ho, wo, cols)
                    matmul_into(dwt, gi * k * og, cols, 0, g, go, k, positions, og, False, True, True)
                if ma != 0:   # the columns' gradient W^T @ G, added back where they were read
                    matmul_into(cols, 0, v, w, g, go, k, og, positions, True, False, False)
                    col2im_add(cols, g, src, cg, height, width, kh, kw, sh, sw, ph, pw, dh, dw, ho, wo)
    else:
        cols = np.empty(k * grid, v.dtype)
        for n in range(batch):
            for gi in range(groups):
                src = a + (n * chans + gi * cg) * grid
                w = b + gi * cg * k
                im2col(g, out + (n * outs + gi * og) * positions, og, ho, wo, kh, kw, sh, sw, ph, pw,
                       dh, dw, height, width, cols)
                if ma != 0:   # dx = W @ im2col(G)
                    matmul_into(g, src, v, w, cols, 0, cg, k, grid, False, False, True)
                if mb != 0:   # dW^T += im2col(G) @ x^T
                    matmul_into(dwt, gi * k * cg, cols, 0, v, src, k, grid, cg, False, True, True)
    if mb != 0:
        for gi in range(groups):
            for r in range(rows):
                w = b + (gi * rows + r) * k
                t = gi * k * rows + r
                for i in range(k):
                    acc(g, w + i, dwt[t + i * rows], mb)


def _bias_operand(ints, p):
    return [int(ints[p + 18])] if ints[p + 17] else []


def _conv_samples():
    def fn(name, **kw):
        def call(tj, x, w, *bias):
            f = getattr(tj.nn.functional, name)
            return f(x, w, *bias, **kw)
        return call
    return cases(
        ("conv2d", fn("conv2d"), [(2, 3, 6, 5), (4, 3, 3, 2), (4,)], anywhere),
        ("conv2d_nobias", fn("conv2d"), [(1, 2, 5, 5), (3, 2, 2, 2)], anywhere),
        ("conv2d_stride_pad", fn("conv2d", stride=(2, 1), padding=(1, 2)), [(2, 2, 6, 5), (3, 2, 3, 3), (3,)], anywhere),
        ("conv2d_dilation", fn("conv2d", dilation=(2, 1), padding=1, stride=2), [(1, 2, 7, 6), (2, 2, 2, 3), (2,)], anywhere),
        ("conv2d_groups", fn("conv2d", groups=2, padding=1), [(2, 4, 5, 4), (6, 2, 3, 3), (6,)], anywhere),
        ("conv2d_same_even", fn("conv2d", padding="same", dilation=(1, 2)), [(1, 2, 5, 6), (2, 2, 2, 4), (2,)], anywhere),
        ("conv2d_1x1", fn("conv2d"), [(2, 3, 3, 4), (5, 3, 1, 1), (5,)], anywhere),
        ("conv2d_depthwise", fn("conv2d", groups=3, stride=2), [(2, 3, 5, 5), (3, 1, 3, 3)], anywhere),
        ("conv1d", fn("conv1d", padding=2, stride=2, dilation=2), [(2, 3, 9), (4, 3, 3), (4,)], anywhere),
        ("conv1d_same", fn("conv1d", padding="same"), [(2, 2, 7), (3, 2, 4)], anywhere),
        ("conv_transpose2d", fn("conv_transpose2d", stride=2, padding=1, output_padding=1),
         [(2, 3, 3, 4), (3, 2, 3, 3), (2,)], anywhere),
        ("conv_transpose2d_groups", fn("conv_transpose2d", groups=2, dilation=2, stride=(1, 2)),
         [(1, 4, 3, 3), (4, 3, 2, 2), (6,)], anywhere),
        ("conv_transpose1d", fn("conv_transpose1d", stride=3, padding=1), [(2, 2, 4), (2, 3, 3), (3,)], anywhere),
    )


CONV = define_kernel("convolution", "ConvolutionBackward0", conv_forward, conv_backward,
                     listed=_bias_operand, group="conv", samples=_conv_samples())


# ---- front ends ---------------------------------------------------------------------------
from tapejit import dtypes as _dtypes  # noqa: E402
from tapejit.api import export, type_name as _type_name  # noqa: E402
from tapejit.recording import record, on_tape, eager, encode_operand  # noqa: E402
from tapejit.tape import state as _state, current as _current  # noqa: E402
from tapejit.tensor import Tensor, _concrete  # noqa: E402

# C names of the dtypes, as torch's "Input type (float) and bias type (double)" message spells them
_C_TYPE = {"float32": "float", "float64": "double", "int64": "long int", "bool": "bool"}


def int_tuple(value, fn, what):
    """``value`` (an int or a sequence of ints) as a tuple of ints; anything else (a float, a
    bool) raises torch's ``TypeError`` rather than being truncated."""
    def is_int(x):
        return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))
    if is_int(value):
        return (int(value),)
    if not isinstance(value, (tuple, list)):
        raise TypeError(f"{fn}(): argument '{what}' must be tuple of ints, not {_type_name(value)}")
    for i, x in enumerate(value):
        if not is_int(x):
            raise TypeError(f"{fn}(): argument '{what}' must be tuple of ints, but found element of type "
                            f"{_type_name(x)} at pos {i}")
    return tuple(int(x) for x in value)


def expand_param(value, dims, what, fn=None):
    """``stride=2`` -> ``(2, 2)``: an int or a sequence of 1 or ``dims`` ints, as torch's
    convolutions take them."""
    values = int_tuple(value, fn or "convolution", what)
    if len(values) == 1:
        return values * dims
    if len(values) != dims:
        raise RuntimeError(f"expected {what} to be a single integer value or a list of {dims} values to "
                           f"match the convolution dimensions, but got {what}={list(values)}")
    return values


def _check_tensor(x, fn, name, position):
    if not isinstance(x, Tensor):
        raise TypeError(f"{fn}(): argument '{name}' (position {position}) must be Tensor, not {_type_name(x)}")


def _same_padding(dims, kernel, dilation, stride, fn):
    if any(s != 1 for s in stride):
        raise RuntimeError("padding='same' is not supported for strided convolutions")
    # torch pads dilation*(k-1) in total, the odd one out at the end (bottom/right)
    before = tuple(d * (k - 1) // 2 for k, d in zip(kernel, dilation))
    after = tuple(d * (k - 1) - lo for k, d, lo in zip(kernel, dilation, before))
    return before, after


def _convolution(fn, input, weight, bias, stride, padding, dilation, groups, dims,
                 transposed=False, output_padding=0):
    _check_tensor(input, fn, "input", 1)
    _check_tensor(weight, fn, "weight", 2)
    if bias is not None:
        _check_tensor(bias, fn, "bias", 3)
    xs, ws = input._shape, weight._shape
    if len(xs) not in (dims + 1, dims + 2):
        raise RuntimeError(f"Expected {dims + 1}D (unbatched) or {dims + 2}D (batched) input to {fn}, but got "
                           f"input of size: {list(xs)}")
    if len(ws) != dims + 2:
        raise RuntimeError(f"{fn}: expected weight to be a {dims + 2}-D tensor ({'in' if transposed else 'out'}_channels, "
                           f"{'out' if transposed else 'in'}_channels/groups, kernel size...), but got weight of "
                           f"size {list(ws)}")
    if len(xs) == dims + 1:   # unbatched: torch adds the batch dim and squeezes it away after
        out = _convolution(fn, input.unsqueeze(0), weight, bias, stride, padding, dilation, groups, dims,
                           transposed, output_padding)
        return out.squeeze(0)
    stride = expand_param(stride, dims, "stride", fn)
    dilation = expand_param(dilation, dims, "dilation", fn)
    kernel = tuple(ws[2:])
    if isinstance(padding, str):
        if transposed:
            raise TypeError(f"{fn}(): argument 'padding' must be tuple of ints, not str")
        if padding == "valid":
            before = after = (0,) * dims
        elif padding == "same":
            if any(s <= 0 for s in stride):
                raise RuntimeError("non-positive stride is not supported")
            before, after = _same_padding(dims, kernel, dilation, stride, fn)
        else:
            raise RuntimeError(f"Invalid padding string: '{padding}'")
    else:
        before = after = expand_param(padding, dims, "padding", fn)
    out_pad = expand_param(output_padding, dims, "output_padding", fn) if transposed else (0,) * dims
    if any(s <= 0 for s in stride):
        raise RuntimeError("non-positive stride is not supported")
    if any(p < 0 for p in before):
        raise RuntimeError("negative padding is not supported")
    if any(p < 0 for p in out_pad):
        raise RuntimeError("negative output_padding is not supported")
    if any(d <= 0 for d in dilation):
        raise RuntimeError(f"dilation should be greater than zero, but got {list(dilation)}")
    if not isinstance(groups, (int, np.integer)) or isinstance(groups, bool):
        raise TypeError(f"{fn}(): argument 'groups' must be int, not {_type_name(groups)}")
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    if transposed and any(op >= s and op >= d for op, s, d in zip(out_pad, stride, dilation)):
        names = ("height", "width") if dims == 2 else ("width",)
        raise RuntimeError(
            "output padding must be smaller than either stride or dilation, but got "
            + " ".join(f"output_padding_{n}: {v}" for n, v in zip(names, out_pad)) + " "
            + " ".join(f"stride_{n}: {v}" for n, v in zip(names, stride)) + " "
            + " ".join(f"dilation_{n}: {v}" for n, v in zip(names, dilation)))
    _check_shapes(fn, xs, ws, bias, groups, transposed, before, after, dilation)
    spatial = xs[2:]
    if transposed:
        out_size = tuple((n - 1) * s - 2 * p + d * (k - 1) + op + 1
                         for n, s, p, d, k, op in zip(spatial, stride, before, dilation, kernel, out_pad))
        if any(o <= 0 for o in out_size):
            sep = " x "
            raise RuntimeError(f"Given input size per channel: ({sep.join(map(str, spatial))}). Calculated output "
                               f"size per channel: ({sep.join(map(str, out_size))}). Output size is too small")
        out_channels = ws[1] * groups
    else:
        out_size = tuple((n + lo + hi - d * (k - 1) - 1) // s + 1
                         for n, lo, hi, d, k, s in zip(spatial, before, after, dilation, kernel, stride))
        out_channels = ws[0]
    dt = _dtype_of(fn, input, weight, bias)
    if not dt.is_floating_point:
        return _integer_convolution(fn, input, weight, bias, stride, padding, dilation, groups, dims,
                                    transposed, output_padding)
    out_shape = (xs[0], out_channels) + out_size
    if dims == 1:   # a 2-d convolution of height 1: the same memory
        geometry = (xs[0], xs[1], 1, xs[2], out_channels, 1, kernel[0], 1, stride[0], 0, before[0],
                    1, dilation[0], groups, 1, out_size[0])
    else:
        geometry = (xs[0], xs[1], xs[2], xs[3], out_channels, kernel[0], kernel[1], stride[0], stride[1],
                    before[0], before[1], dilation[0], dilation[1], groups, out_size[0], out_size[1])
    return _record_convolution(input, weight, bias, geometry, int(transposed), out_shape, dt)


def _record_convolution(input, weight, bias, geometry, transposed, out_shape, dt):
    inputs = (input, weight) if bias is None else (input, weight, bias)
    if not on_tape(*inputs):
        return eager(_record_convolution, input, weight, bias, geometry, transposed, out_shape, dt)
    tape = _state.tape or _current()
    if bias is None:
        p = tape.add_ints(geometry + (transposed, 0, -1))
        return record(CONV, (input, weight), out_shape, dt, p, 0)
    p = tape.add_ints(geometry + (transposed, 1, encode_operand(tape, bias, dt)))
    return record(CONV, (input, weight), out_shape, dt, p, 0, listed_rg=bias._rg and _state.grad)


def _check_shapes(fn, xs, ws, bias, groups, transposed, before, after, dilation):
    """torch's checks and messages (``check_shape_forward``), in its order."""
    if not transposed:
        if ws[0] < groups:
            raise RuntimeError(f"Given groups={groups}, expected weight to be at least {groups} at dimension 0, "
                               f"but got weight of size {list(ws)} instead")
        if ws[0] % groups:
            raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, "
                               f"but got weight of size [{list(ws)}] instead")
        if xs[1] != ws[1] * groups:
            raise RuntimeError(f"Given groups={groups}, weight of size {list(ws)}, expected input{list(xs)} to have "
                               f"{ws[1] * groups} channels, but got {xs[1]} channels instead")
        out_channels = ws[0]
    else:
        if xs[1] != ws[0]:
            raise RuntimeError(f"Given transposed=1, weight of size {list(ws)}, expected input{list(xs)} to have "
                               f"{ws[0]} channels, but got {xs[1]} channels instead")
        if ws[0] % groups:
            raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, "
                               f"but got weight of size [{list(ws)}] instead")
        out_channels = ws[1] * groups
    if bias is not None and (len(bias._shape) != 1 or bias._shape[0] != out_channels):
        raise RuntimeError(f"Given weight of size {list(ws)}, expected bias to be 1-dimensional with "
                           f"{out_channels} elements, but got bias of size {list(bias._shape)} instead")
    if not transposed:
        padded = [n + lo + hi for n, lo, hi in zip(xs[2:], before, after)]
        kernel = [d * (k - 1) + 1 for k, d in zip(ws[2:], dilation)]
        if any(n < k for n, k in zip(padded, kernel)):
            raise RuntimeError(f"Calculated padded input size per channel: ({' x '.join(map(str, padded))}). "
                               f"Kernel size: ({' x '.join(map(str, kernel))}). Kernel size can't be greater than "
                               f"actual input size")


def _dtype_of(fn, input, weight, bias):
    dt = input._dtype
    if weight._dtype is not dt:
        raise RuntimeError(f"expected scalar type {_dtypes.SCALAR_TYPE_NAMES[dt.name]} but found "
                           f"{_dtypes.SCALAR_TYPE_NAMES[weight._dtype.name]}")
    if bias is not None and bias._dtype is not dt:
        raise RuntimeError(f"Input type ({_C_TYPE[dt.name]}) and bias type ({_C_TYPE[bias._dtype.name]}) "
                           f"should be the same")
    if dt is _dtypes.bool_:
        raise _dtypes.not_implemented("slow_conv2d_cpu", dt)
    return dt


#: float64 adds integers exactly while every partial sum stays below this
_EXACT = 2.0 ** 53


def _integer_convolution(fn, input, weight, bias, stride, padding, dilation, groups, dims,
                         transposed, output_padding):
    """int64 tensors (torch convolves them too; no gradient): computed in float64, which is
    exact while every sum stays below 2**53; beyond that it raises instead of rounding."""
    x = input._value()
    w = weight._value()
    # the products each output element sums: (input channels per group) x kernel
    terms = (w.shape[0] // groups if transposed else w.shape[1]) * int(np.prod(w.shape[2:]))
    largest = (float(np.abs(x).max(initial=0)) * float(np.abs(w).max(initial=0)) * terms
               + (float(np.abs(bias._value()).max(initial=0)) if bias is not None else 0.0))
    if not largest < _EXACT:
        raise RuntimeError(f"{fn}: int64 convolution whose sums can reach {largest:.3g} (2**53 or more) is not "
                           f"supported by tapejit (it computes integer convolutions exactly in float64); convert "
                           f"the tensors to float64 to accept rounding")
    as_float = [None if t is None else _concrete(t._value().astype(np.float64)) for t in (input, weight, bias)]
    args = (stride, padding, dilation, groups, dims, transposed, output_padding)
    result = _convolution(fn, *as_float, *args)
    return _concrete(np.rint(result._value()).astype(np.int64))


@export
def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return _convolution("conv1d", input, weight, bias, stride, padding, dilation, groups, 1)


@export
def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return _convolution("conv2d", input, weight, bias, stride, padding, dilation, groups, 2)


@export
def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    return _convolution("conv_transpose1d", input, weight, bias, stride, padding, dilation, groups, 1,
                        True, output_padding)


@export
def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    return _convolution("conv_transpose2d", input, weight, bias, stride, padding, dilation, groups, 2,
                        True, output_padding)



# ---- derivative formulas (create_graph) ----------------------------------------------------
# One per op, applied by create_graph passes (tapejit/autograd/higher.py); plain Python,
# not compiled: see tapejit/ops/_formulas.py.  Kept last so define_ edits merge cleanly.

from tapejit.api import front_ends as tj  # noqa: E402  (tj's functions, read at call time)
from tapejit.ops import _formulas as _f  # noqa: E402
from tapejit.ops._formulas import derivative  # noqa: E402


def _im2col_positions(channels, height, width, kh, kw, sh, sw, ph, pw, dh, dw, gh, gw):
    """``(channels*kh*kw, gh*gw)``: the image position (in a block of ``channels`` planes of
    ``height x width``) under each tap of each window of a ``gh x gw`` grid; -1 outside."""
    ch = np.arange(channels)[:, None, None, None, None]
    ki = np.arange(kh)[None, :, None, None, None]
    kj = np.arange(kw)[None, None, :, None, None]
    row = np.arange(gh)[None, None, None, :, None] * sh - ph + ki * dh
    col = np.arange(gw)[None, None, None, None, :] * sw - pw + kj * dw
    inside = (row >= 0) & (row < height) & (col >= 0) & (col < width)
    return np.where(inside, ch * (height * width) + row * width + col, -1).reshape(channels * kh * kw, gh * gw)


def _grouped_positions(batch, groups, block, positions):
    """``positions`` of one group's image block repeated for every sample and group, in the
    flat image of ``batch * groups`` blocks; outside positions read/write one past its end."""
    size = batch * groups * block
    base = np.arange(batch * groups, dtype=np.int64).reshape(batch, groups, 1, 1) * block
    full = base + positions[None, None]
    return np.where(positions[None, None] < 0, size, full), size


@derivative(CONV)
def _d_convolution(c):
    """The rule's products, recorded: ``cols = im2col`` is a gather (zero outside the image),
    ``col2im`` its transpose, a scatter_add; the products are batched matmuls per group."""
    (N, C, H, W, O, kh, kw, sh, sw, ph, pw, dh, dw, groups, ho, wo, transposed, has_bias,
     bias) = (c.int(c.p + i) for i in range(19))
    g = c.g
    x = c.x(N * C * H * W)
    result = []
    if not transposed:
        cg, og, taps, grid = C // groups, O // groups, C // groups * kh * kw, ho * wo
        where, size = _grouped_positions(N, groups, cg * H * W,
                                         _im2col_positions(cg, H, W, kh, kw, sh, sw, ph, pw, dh, dw, ho, wo))
        g4 = _f.shaped(g, (N, groups, og, grid))
        if c.wants_b:
            cols = _f.gather(tj.cat([x, _f.zeros(1, c.dt)]), where)   # (N, groups, taps, grid)
            result.append((c.b, tj.matmul(g4, cols.transpose(2, 3)).sum(0)))
        if c.wants_a:
            w = c.y(O * taps, (1, groups, og, taps))
            dcols = tj.matmul(w.transpose(2, 3), g4)
            result.append((c.a, _f.scatter_add(dcols, where, size + 1)[:size]))
    else:
        cg, og, grid = C // groups, O // groups, H * W
        taps = og * kh * kw
        where, size = _grouped_positions(N, groups, og * ho * wo,
                                         _im2col_positions(og, ho, wo, kh, kw, sh, sw, ph, pw, dh, dw, H, W))
        dcols = _f.gather(tj.cat([g, _f.zeros(1, c.dt)]), where)   # (N, groups, taps, grid)
        if c.wants_b:
            result.append((c.b, tj.matmul(_f.shaped(x, (N, groups, cg, grid)), dcols.transpose(2, 3)).sum(0)))
        if c.wants_a:
            result.append((c.a, tj.matmul(c.y(C * taps, (1, groups, cg, taps)), dcols)))
    if has_bias and c.wants(bias):
        result.append((bias, _f.shaped(g, (N, O, ho * wo)).sum((0, 2))))
    return result
