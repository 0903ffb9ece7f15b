"""Batched matrix product, the one primitive behind ``matmul``/``mm``/``bmm``/``dot``/``outer``,
and ``linear`` (``x @ W.T + b``).

The front end broadcasts batch dims and turns vectors into matrices before recording,
so the kernel sees contiguous ``(B, m, k) @ (B, k, n)`` with ``[B, m, k, n]`` at
``ints[p]``.  Products go to BLAS ``gemm`` through ``_blas.matmul_into``, with operands
read in place in the arena (transposes are BLAS flags).
"""
import numpy as np

from tapejit._jit import kernel
from tapejit.ops._blas import matmul_into
from tapejit.ops._kernel_helpers import acc, claim, decode
from tapejit.registry import define_kernel, same_kernels
from tapejit.samples import cases, anywhere


@kernel
def bmm_forward(v, out, a, b, p, q, ints, floats):
    batch = ints[p]
    m = ints[p + 1]
    k = ints[p + 2]
    n = ints[p + 3]
    for i in range(batch):
        matmul_into(v, out + i * m * n, v, a + i * m * k, v, b + i * k * n, m, k, n, False, False, False)


@kernel
def bmm_backward(v, g, flags, out, a, b, ma, mb, p, q, ints, floats):
    # dA = G @ B^T and dB = A^T @ G, the transposes read in place by BLAS.
    batch = ints[p]
    m = ints[p + 1]
    k = ints[p + 2]
    n = ints[p + 3]
    for i in range(batch):
        go = out + i * m * n
        if ma != 0:
            matmul_into(g, a + i * m * k, g, go, v, b + i * k * n, m, n, k, False, True, ma == 2)
        if mb != 0:
            matmul_into(g, b + i * k * n, v, a + i * m * k, g, go, k, m, n, True, False, mb == 2)


MM = define_kernel("mm", "MmBackward0", bmm_forward, bmm_backward,
                   samples=cases(("mm", lambda tj, x, y: x @ y, [(3, 4), (4, 2)], anywhere),
                                 ("mm_self", lambda tj, x: x @ x.t(), [(3, 4)], anywhere),
                                 ("vm", lambda tj, x, y: tj.matmul(x, y), [(4,), (4, 2)], anywhere),
                                 ("outer", lambda tj, x, y: tj.outer(x, y), [(3,), (2,)], anywhere),
                                 ("mm_fn", lambda tj, x, y: tj.mm(x, y), [(2, 3), (3, 3)], anywhere)))
BMM = same_kernels("bmm", "BmmBackward0", MM,
                   samples=cases(("bmm", lambda tj, x, y: tj.bmm(x, y), [(2, 3, 4), (2, 4, 2)], anywhere),
                                 ("matmul_bcast", lambda tj, x, y: x @ y, [(2, 1, 3, 4), (3, 4, 2)], anywhere),
                                 ("matmul_3d2d", lambda tj, x, y: x @ y, [(2, 3, 4), (4, 5)], anywhere),
                                 ("matmul_2d3d", lambda tj, x, y: x @ y, [(3, 4), (2, 4, 5)], anywhere)))


# ---- linear: x @ W.T + b in one record -------------------------------------------------
# ``nn.Linear``'s weight is (out, in): reading it transposed inside the kernel (a BLAS
# flag) saves the transposed copy, its record and its backward; the bias row is added in
# the same pass and its gradient is the column sums.  Layout at ints[p]:
# [m, k, n, has_bias, bias operand (encoded like a and b)].

@kernel
def linear_forward(v, out, a, b, p, q, ints, floats):
    m = ints[p]
    k = ints[p + 1]
    n = ints[p + 2]
    matmul_into(v, out, v, a, v, b, m, k, n, False, True, False)
    if ints[p + 3] != 0:
        bias = decode(ints[p + 4])
        for i in range(m):
            row = out + i * n
            for j in range(n):
                v[row + j] += v[bias + j]


@kernel
def linear_backward(v, g, flags, out, a, b, ma, mb, p, q, ints, floats):
    m = ints[p]
    k = ints[p + 1]
    n = ints[p + 2]
    if ma != 0:   # dX = G @ W
        matmul_into(g, a, g, out, v, b, m, n, k, False, False, ma == 2)
    if mb != 0:   # dW = G^T @ X
        matmul_into(g, b, g, out, v, a, n, m, k, True, False, mb == 2)
    if ints[p + 3] != 0:
        enc = ints[p + 4]
        mode = claim(flags, enc)
        if mode != 0:
            bias = decode(enc)
            for j in range(n):
                s = floats[0] * 0.0   # floats[0] is 0: a zero of the accumulator type (x * 0.0 is NaN for x = inf)
                for i in range(m):
                    s += g[out + i * n + j]
                acc(g, bias + j, s, mode)


def _linear_sample(tj, x, w, b):
    return tj.nn.functional.linear(x, w, b)


def _bias_operand(ints, p):
    return [int(ints[p + 4])] if ints[p + 3] else []


LINEAR = define_kernel("linear", "AddmmBackward0", linear_forward, linear_backward, listed=_bias_operand,
                       samples=cases(("linear", _linear_sample, [(4, 3), (2, 3), (2,)], anywhere),
                                     ("linear_3d", _linear_sample, [(2, 4, 3), (5, 3), (5,)], anywhere),
                                     ("linear_vec", _linear_sample, [(3,), (2, 3), (2,)], anywhere)))
LINEAR_NO_BIAS = same_kernels(
    "linear_no_bias", "MmBackward0", LINEAR,
    samples=cases(("linear_no_bias", lambda tj, x, w: tj.nn.functional.linear(x, w), [(4, 3), (2, 3)], anywhere)))


# ---- front ends ---------------------------------------------------------------------------
from tapejit.api import export  # noqa: E402
from tapejit.recording import record, result_dtype, cast as _cast, float_input, broadcast_shapes  # noqa: E402
from tapejit.recording import on_tape, eager, encode_operand, name_composite, narrowed, wide  # noqa: E402
from tapejit.recording import expand as _expand  # noqa: E402
from tapejit.shapes import numel as _numel  # noqa: E402
from tapejit.tape import state as _state, current as _current  # noqa: E402
from tapejit.tensor import Tensor, _concrete  # noqa: E402

MV = same_kernels("mv", "MvBackward0", MM,
                  samples=cases(("mv", lambda tj, x, y: tj.matmul(x, y), [(3, 4), (4,)], anywhere),
                                ("mv_fn", lambda tj, x, y: tj.mv(x, y), [(2, 3), (3,)], anywhere)))
DOT = same_kernels("dot", "DotBackward0", MM,
                   samples=cases(("dot", lambda tj, x, y: tj.dot(x, y), [(4,), (4,)], anywhere),
                                 ("vecvec", lambda tj, x, y: x @ y, [(3,), (3,)], anywhere)))


def _shape_error(op, a, b):
    raise RuntimeError(
        f"{op}: mat1 and mat2 shapes cannot be multiplied ({'x'.join(map(str, a))} and {'x'.join(map(str, b))})")


def _bmm(op, x, y, batch, m, k, n, out_shape):
    if not on_tape(x, y):
        return eager(_bmm, op, x, y, batch, m, k, n, out_shape)
    tape = _state.tape or _current()
    p = tape.add_ints((batch, m, k, n))
    return record(op, (x, y), out_shape, x._dtype, p, 0)


def _prepare(x, y):
    if not isinstance(y, Tensor):
        y = _concrete(np.asarray(y, dtype=x._dtype.np))
    dt = result_dtype(x, y)
    if not dt.is_floating_point:
        return x, y, dt
    if x._dtype is not dt:
        x = _cast(float_input(x), dt)
    if y._dtype is not dt:
        y = _cast(float_input(y), dt)
    return x, y, dt


@export(method=True, dunders=("__matmul__",))
def matmul(input, other):
    return _matmul(input, other, "matmul")


def _matmul(input, other, name):
    x, y, dt = _prepare(input, other)
    xs, ys = x._shape, y._shape
    if not xs or not ys:
        raise RuntimeError(f"matmul: both arguments to matmul need to be at least 1D, but they are "
                           f"{len(xs)}D and {len(ys)}D")
    if not dt.is_floating_point:
        return _concrete(np.asarray(np.matmul(x._value(), y._value())))
    if len(xs) == 1 and len(ys) == 1:
        if xs[0] != ys[0]:
            raise RuntimeError(
                f"{name}: inconsistent tensor size, expected tensor [{xs[0]}] and src [{ys[0]}] to have "
                f"the same number of elements, but got {xs[0]} and {ys[0]} elements respectively "
                f"(shapes {list(xs)} and {list(ys)})")
        return _bmm(DOT, x, y, 1, 1, xs[0], 1, ())
    if len(ys) == 1:
        if xs[-1] != ys[0]:
            _shape_error(name, xs, ys)
        m = _numel(xs[:-1])
        return _bmm(MV, x, y, 1, m, ys[0], 1, xs[:-1])
    if len(xs) == 1:
        if xs[0] != ys[-2]:
            _shape_error(name, xs, ys)
        if len(ys) == 2:
            return _bmm(MM, x, y, 1, 1, xs[0], ys[1], (ys[1],))
        x = x.reshape(1, xs[0])
        out = matmul(x, y)
        return out.squeeze(-2)
    m, k = xs[-2], xs[-1]
    k2, n = ys[-2], ys[-1]
    if k != k2:
        _shape_error(name, xs, ys)
    if len(ys) == 2:
        # (..., m, k) @ (k, n): fold the batch into the rows, one BLAS call.
        return _bmm(MM, x, y, 1, _numel(xs[:-1]), k, n, xs[:-1] + (n,))
    try:
        batch = broadcast_shapes(name, xs[:-2], ys[:-2])
    except RuntimeError as e:
        raise RuntimeError(f"{name}: batch dimensions of {list(xs)} and {list(ys)} do not broadcast: "
                           f"{e}") from None
    if xs[:-2] != batch:
        x = _expand(x, batch + (m, k))
    if ys[:-2] != batch:
        y = _expand(y, batch + (k, n))
    return _bmm(BMM, x, y, _numel(batch), m, k, n, batch + (m, n))


@export(function=False, dunders=("__rmatmul__",))
def rmatmul(input, other):
    return matmul(_concrete(np.asarray(other, dtype=input._dtype.np)) if not isinstance(other, Tensor) else other,
                  input)


@export(method=True)
def mm(input, mat2):
    if len(input._shape) != 2 or len(mat2._shape) != 2:
        raise RuntimeError(f"mm: expected 2D tensors, got {len(input._shape)}D and {len(mat2._shape)}D")
    return _matmul(input, mat2, "mm")


@export(method=True)
def bmm(input, mat2):
    if len(input._shape) != 3 or len(mat2._shape) != 3:
        raise RuntimeError(f"bmm: expected 3D tensors, got {len(input._shape)}D and {len(mat2._shape)}D")
    if input._shape[0] != mat2._shape[0]:
        raise RuntimeError(f"bmm: batch sizes differ: {list(input._shape)} and {list(mat2._shape)}")
    return _matmul(input, mat2, "bmm")


@export(method=True)
def mv(input, vec):
    return matmul(input, vec)


@export(method=True)
def dot(input, other):
    if len(input._shape) != 1 or len(other._shape) != 1:
        raise RuntimeError(f"1D tensors expected, but got {len(input._shape)}D and {len(other._shape)}D tensors")
    return _matmul(input, other, "dot")


export(dot, name="inner", method=True)


@export(method=True)
def outer(input, vec2):
    x, y, dt = _prepare(input, vec2)
    if len(x._shape) != 1 or len(y._shape) != 1:
        raise RuntimeError("outer: expected 1D tensors")
    # torch's outer is a broadcast product (node MulBackward0)
    return name_composite(_bmm(MM, x, y, 1, x._shape[0], 1, y._shape[0], (x._shape[0], y._shape[0])),
                          "MulBackward0", input, vec2)


export(outer, name="ger", method=True)


def linear(input, weight, bias=None):
    """``input @ weight.T + bias`` as one record (``nn.functional.linear``): grad_fn
    ``AddmmBackward0`` with a bias, ``MmBackward0`` without, as torch for 2-D input."""
    xs, ws = input._shape, weight._shape
    if len(ws) != 2 or not xs:
        raise RuntimeError(
            f"linear: expected a 2-D weight and an input of at least 1-D, got weight "
            f"{list(ws)} and input {list(xs)}")
    n, k = ws
    m = _numel(xs[:-1])
    if xs[-1] != k:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({m}x{xs[-1]} and {k}x{n})")
    dt = input._dtype
    plain = (dt.is_floating_point and weight._dtype is dt
             and (bias is None or (bias._dtype is dt and bias._shape == (n,))))
    if not plain:   # mixed dtypes or a broadcast bias: the general ops promote and broadcast
        out = matmul(input, weight.t())
        return out if bias is None else out + bias
    if dt.narrow:   # computed in float32 and rounded once, as torch's addmm on half
        return narrowed(linear(wide(input), wide(weight), None if bias is None else wide(bias)), dt)
    inputs = (input, weight) if bias is None else (input, weight, bias)
    if not on_tape(*inputs):
        return eager(linear, input, weight, bias)
    tape = _state.tape or _current()
    if bias is None:
        p = tape.add_ints((m, k, n, 0, -1))
        out = record(LINEAR_NO_BIAS, (input, weight), (m, n), dt, p, 0)
    else:
        p = tape.add_ints((m, k, n, 1, encode_operand(tape, bias, dt)))
        out = record(LINEAR, (input, weight), (m, n), dt, p, 0, listed_rg=bias._rg and _state.grad)
    # Other input ranks: torch views the 2-D product back to the batch shape (ViewBackward0).
    return out if len(xs) == 2 else out.reshape(xs[:-1] + (n,))


# ---- derivative formulas (create_graph) ----------------------------------------------------
# One per op, applied by create_graph passes (tapejit/autograd/higher.py); plain Python,
# not compiled: see tapejit/ops/_formulas.py.  Kept last so define_ edits merge cleanly.

from tapejit.api import front_ends as tj  # noqa: E402  (tj's functions, read at call time)
from tapejit.ops import _formulas as _f  # noqa: E402
from tapejit.ops._formulas import derivative  # noqa: E402


@derivative(bmm_forward)
def _d_bmm(c):
    batch, m, k, n = (c.int(c.p + i) for i in range(4))
    g = _f.shaped(c.g, (batch, m, n))
    ga = gb = None
    if c.wants_a:
        ga = tj.matmul(g, c.y(batch * k * n, (batch, k, n)).transpose(1, 2))
    if c.wants_b:
        gb = tj.matmul(c.x(batch * m * k, (batch, m, k)).transpose(1, 2), g)
    return (ga, gb)


@derivative(linear_forward)
def _d_linear(c):
    m, k, n, has_bias, bias = (c.int(c.p + i) for i in range(5))
    g = _f.shaped(c.g, (m, n))
    result = []
    if c.wants_a:
        result.append((c.a, tj.matmul(g, c.y(n * k, (n, k)))))
    if c.wants_b:
        result.append((c.b, tj.matmul(g.t(), c.x(m * k, (m, k)))))
    if has_bias and c.wants(bias):
        result.append((bias, g.sum(0)))
    return result
