"""Normalisation: batch, instance, group and layer norm as one kernel pair.

Each of them normalises groups of elements by their mean and variance (biased), then
scales and shifts by per-channel (or per-element) weights.  The input is read as
``(P, Q, S)``: statistics for each ``q``, over ``p`` and ``s``.

==============  ===  ======  ==========  ====================================
norm            P    Q       S           weight index ``(q % mq) * ma + s // ds``
==============  ===  ======  ==========  ====================================
batch (N,C,L)   N    C       L           q              (mq=C, ma=1, ds=L)
instance        1    N*C     L           q % C          (mq=C, ma=1, ds=L)
group (G)       1    N*G     C/G*L       (q % G) * C/G + s // L
layer (.., K)   1    rows    K           s              (mq=1, ma=0, ds=1)
==============  ===  ======  ==========  ====================================

With ``given`` statistics (batch norm in eval mode, instance norm with running stats)
the mean and variance are operands (``(q % mq)``-th entries), not computed.  Statistics
are accumulated in float64 for float32 inputs too.  The mean and inverse standard
deviation are computed again in backward (one pass over the input, where saving them
would need a second result per record).

Layout at ``ints[p]``: [P, Q, S, mq, ma, ds, number of weights, given, has_weight,
has_bias, bias, mean, var] (operands encoded like a and b), ``floats[q]`` = eps.
Operand a is the input, b the weight (if any).
"""
import numpy as np

from tapejit._jit import kernel
from tapejit.ops._kernel_helpers import acc, at, claim, decode
from tapejit.registry import define_kernel, same_kernels
from tapejit.samples import anywhere, cases


@kernel
def normalize_forward(v, out, a, b, p, q, ints, floats):
    P = ints[p]
    Q = ints[p + 1]
    S = ints[p + 2]
    mq = ints[p + 3]
    ma = ints[p + 4]
    ds = ints[p + 5]
    given = ints[p + 7] != 0
    has_w = ints[p + 8] != 0
    has_b = ints[p + 9] != 0
    bias = decode(ints[p + 10])
    mean_at = decode(ints[p + 11])
    var_at = decode(ints[p + 12])
    eps = np.float64(floats[q])
    n = P * S
    blocks = S // ds if ds > 0 else 0
    for g in range(Q):
        if given:
            mean = np.float64(v[at(mean_at + g % mq)])
            rstd = 1.0 / np.sqrt(np.float64(v[at(var_at + g % mq)]) + eps)
        else:
            total = 0.0
            for pp in range(P):
                base = a + (pp * Q + g) * S
                for k in range(S):
                    total += v[at(base + k)]
            mean = total / n
            squares = 0.0
            for pp in range(P):
                base = a + (pp * Q + g) * S
                for k in range(S):
                    d = v[at(base + k)] - mean
                    squares += d * d
            rstd = 1.0 / np.sqrt(squares / n + eps)
        w0 = (g % mq) * ma
        for pp in range(P):
            base = (pp * Q + g) * S
            for j in range(blocks):
                scale = rstd * v[at(b + w0 + j)] if has_w else rstd
                shift = np.float64(v[at(bias + w0 + j)]) if has_b else 0.0
                start = base + j * ds
                for k in range(ds):
                    v[at(out + start + k)] = (v[at(a + start + k)] - mean) * scale + shift


@kernel
def normalize_backward(v, g, flags, out, a, b, ma, mb, p, q, ints, floats):
    P = ints[p]
    Q = ints[p + 1]
    S = ints[p + 2]
    mq = ints[p + 3]
    mul = ints[p + 4]
    ds = ints[p + 5]
    nw = ints[p + 6]
    given = ints[p + 7] != 0
    has_w = ints[p + 8] != 0
    mode_b = claim(flags, ints[p + 10]) if ints[p + 9] != 0 else 0
    mean_at = decode(ints[p + 11])
    var_at = decode(ints[p + 12])
    eps = np.float64(floats[q])
    n = P * S
    blocks = S // ds if ds > 0 else 0
    want_w = has_w and mb != 0
    dw = np.zeros(nw if (want_w or mode_b != 0) else 0, np.float64)
    db = np.zeros(nw if mode_b != 0 else 0, np.float64)
    for grp in range(Q):
        if given:
            mean = np.float64(v[at(mean_at + grp % mq)])
            rstd = 1.0 / np.sqrt(np.float64(v[at(var_at + grp % mq)]) + eps)
        else:
            total = 0.0
            for pp in range(P):
                base = a + (pp * Q + grp) * S
                for k in range(S):
                    total += v[at(base + k)]
            mean = total / n
            squares = 0.0
            for pp in range(P):
                base = a + (pp * Q + grp) * S
                for k in range(S):
                    d = v[at(base + k)] - mean
                    squares += d * d
            rstd = 1.0 / np.sqrt(squares / n + eps)
        w0 = (grp % mq) * mul
        # sums over the group of dxhat = dy * w and of dxhat * xhat (batch statistics only)
        sum_d = 0.0
        sum_dx = 0.0
        for pp in range(P):
            base = (pp * Q + grp) * S
            for j in range(blocks):
                w = np.float64(v[at(b + w0 + j)]) if has_w else 1.0
                start = base + j * ds
                part_d = 0.0
                part_dx = 0.0
                for k in range(ds):
                    dy = np.float64(g[at(out + start + k)])
                    xhat = (v[at(a + start + k)] - mean) * rstd
                    part_d += dy
                    part_dx += dy * xhat
                if want_w:
                    dw[w0 + j] += part_dx
                if mode_b != 0:
                    db[w0 + j] += part_d
                sum_d += w * part_d
                sum_dx += w * part_dx
        if ma != 0:
            mean_d = 0.0 if given else sum_d / n
            mean_dx = 0.0 if given else sum_dx / n
            for pp in range(P):
                base = (pp * Q + grp) * S
                for j in range(blocks):
                    scale = rstd * v[at(b + w0 + j)] if has_w else rstd
                    start = base + j * ds
                    for k in range(ds):
                        xhat = (v[at(a + start + k)] - mean) * rstd
                        dx = scale * g[at(out + start + k)] - rstd * (mean_d + xhat * mean_dx)
                        acc(g, a + start + k, dx, ma)
    if want_w:
        for i in range(nw):
            acc(g, b + i, dw[i], mb)
    if mode_b != 0:
        dst = decode(ints[p + 10])
        for i in range(nw):
            acc(g, dst + i, db[i], mode_b)


def _bias_operand(ints, p):
    return [int(ints[p + 10])] if ints[p + 9] else []


def _constant_stats(tj, x, values):
    return tj.tensor(np.asarray(values)).to(x.dtype)


_RM, _RV = [0.3, -0.2, 0.1], [0.5, 1.5, 0.8]


def _eval_bn(tj, x, w, b):
    F = tj.nn.functional
    return F.batch_norm(x, _constant_stats(tj, x, _RM), _constant_stats(tj, x, _RV), w, b, training=False)


BATCH_NORM = define_kernel(
    "batch_norm", "NativeBatchNormBackward0", normalize_forward, normalize_backward, listed=_bias_operand, group="norm",
    samples=cases(("batch_norm_2d", lambda tj, x, w, b: tj.nn.functional.batch_norm(x, None, None, w, b, True),
                   [(4, 3), (3,), (3,)], anywhere),
                  ("batch_norm_4d", lambda tj, x, w, b: tj.nn.functional.batch_norm(x, None, None, w, b, True),
                   [(2, 3, 2, 2), (3,), (3,)], anywhere),
                  ("batch_norm_no_affine", lambda tj, x: tj.nn.functional.batch_norm(x, None, None, training=True),
                   [(3, 2, 4)], anywhere),
                  ("batch_norm_eval", _eval_bn, [(4, 3, 2), (3,), (3,)], anywhere)))
INSTANCE_NORM = same_kernels(
    # torch runs instance norm as batch norm of a (1, N*C, ...) view, viewed back (ViewBackward0)
    "instance_norm", "ViewBackward0", BATCH_NORM,
    samples=cases(("instance_norm", lambda tj, x, w, b: tj.nn.functional.instance_norm(x, weight=w, bias=b),
                   [(2, 3, 4), (3,), (3,)], anywhere),
                  ("instance_norm_2d", lambda tj, x: tj.nn.functional.instance_norm(x), [(2, 2, 3, 2)], anywhere)))
GROUP_NORM = same_kernels(
    "group_norm", "NativeGroupNormBackward0", BATCH_NORM,
    samples=cases(("group_norm", lambda tj, x, w, b: tj.nn.functional.group_norm(x, 2, w, b),
                   [(2, 4, 3), (4,), (4,)], anywhere),
                  ("group_norm_4d", lambda tj, x, w: tj.nn.functional.group_norm(x, 3, w),
                   [(2, 6, 2, 2), (6,)], anywhere),
                  ("group_norm_2d_no_affine", lambda tj, x: tj.nn.functional.group_norm(x, 1), [(3, 4)], anywhere)))
LAYER_NORM = same_kernels(
    "layer_norm", "NativeLayerNormBackward0", BATCH_NORM,
    samples=cases(("layer_norm", lambda tj, x, w, b: tj.nn.functional.layer_norm(x, (4,), w, b),
                   [(3, 4), (4,), (4,)], anywhere),
                  ("layer_norm_2_dims", lambda tj, x, w, b: tj.nn.functional.layer_norm(x, (3, 2), w, b),
                   [(2, 3, 2), (3, 2), (3, 2)], anywhere),
                  ("layer_norm_no_bias", lambda tj, x, w: tj.nn.functional.layer_norm(x, [5], w),
                   [(2, 5), (5,)], anywhere),
                  ("layer_norm_plain", lambda tj, x: tj.nn.functional.layer_norm(x, (3,)), [(2, 2, 3)], anywhere)))


# ---- recording ------------------------------------------------------------------------------
from tapejit.recording import encode_operand, record, on_tape, eager  # noqa: E402
from tapejit.tape import state as _state, current as _current  # noqa: E402


def normalize(op, input, weight, bias, mean, var, eps, layout):
    """Record ``op`` (one of the ops above) on ``input``: ``layout`` is ``(P, Q, S, mq, ma,
    ds, number of weights)`` (see the module docstring); ``mean``/``var`` given statistics
    or None.  Every tensor has ``input``'s float dtype (the caller checks)."""
    tensors = [t for t in (input, weight, bias) if t is not None]
    if not on_tape(*tensors):
        return eager(normalize, op, input, weight, bias, mean, var, eps, layout)
    dt = input._dtype
    tape = _state.tape or _current()
    given = mean is not None
    fields = list(layout) + [1 if given else 0, 1 if weight is not None else 0]
    fields += [1, encode_operand(tape, bias, dt)] if bias is not None else [0, -1]
    fields += [encode_operand(tape, mean, dt), encode_operand(tape, var, dt)] if given else [-1, -1]
    p = tape.add_ints(fields)
    q = tape.add_floats(float(eps))
    inputs = (input,) if weight is None else (input, weight)
    return record(op, inputs, input._shape, dt, p, q,
                  listed_rg=bias is not None and bias._rg and _state.grad)


# ---- derivative formulas (create_graph) ----------------------------------------------------
# One per op, applied by create_graph passes (tapejit/autograd/higher.py); plain Python,
# not compiled: see tapejit/ops/_formulas.py.  Kept last so define_ edits merge cleanly.

from tapejit.api import front_ends as tj  # noqa: E402  (tj's functions, read at call time)
from tapejit.ops import _formulas as _f  # noqa: E402
from tapejit.ops._formulas import derivative  # noqa: E402


@derivative(normalize_forward)
def _d_normalize(c):
    """Batch, instance, group and layer norm: the record's forward written again with
    formulated ops (mean, variance, rsqrt, gathers of the weights), and the vjp of that,
    itself recorded (a nested create_graph pass over those few records)."""
    P, Q, S, mq, ma, ds, nw, given, has_w, has_b, bias, mean_at, var_at = (c.int(c.p + i) for i in range(13))
    eps = c.float(c.q)
    x = c.x(P * Q * S, (P, Q, S))
    w = c.y(nw) if has_w else None
    b = _f.slot(c.tape, c.arena, bias, nw) if has_b else None
    stats = []
    if given:
        per_q = np.arange(Q) % mq
        stats = [_f.slot(c.tape, c.arena, mean_at, mq), _f.slot(c.tape, c.arena, var_at, mq)]
        mean = _f.shaped(_f.gather(stats[0], per_q), (1, Q, 1))
        var = _f.shaped(_f.gather(stats[1], per_q), (1, Q, 1))
    else:
        mean = x.mean((0, 2), keepdim=True)
        centered = x - mean
        var = (centered * centered).mean((0, 2), keepdim=True)
    y = (x - mean) * tj.rsqrt(var + eps)
    index = (((np.arange(Q) % mq) * ma)[:, None] + (np.arange(S) // max(ds, 1))[None, :]).reshape(-1)
    if w is not None:
        y = y * _f.shaped(_f.gather(w, index), (1, Q, S))
    if b is not None:
        y = y + _f.shaped(_f.gather(b, index), (1, Q, S))
    operands = [(c.a, x), (c.b, w), (bias, b)] + list(zip((mean_at, var_at), stats))
    wanted = [(enc, t) for enc, t in operands if t is not None and c.wants(enc)]
    if not wanted or not y.requires_grad:
        return []
    found = c.vjp([(y, _f.shaped(c.g, (P, Q, S)))], [t for _, t in wanted])
    return [(enc, g) for (enc, _), g in zip(wanted, found) if g is not None]
