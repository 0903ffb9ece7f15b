"""Recurrent layers: one record runs a whole layer (one direction) of an LSTM, GRU or
Elman RNN over its sequence, forward and backward, and the cells are the same kernels
over one step.

Why one record per layer, not per step: a layer's step is a handful of small ops (the
recurrent product, gate activations, the cell update), and recorded one by one an
LSTM step of 20 x 64 paid more in recording, dispatch and passes over memory than in
arithmetic (35 steps: ~600 records, 8.7 ms a training step, torch 5.8 ms).  Here the
input projection of every step is one ``linear`` record before the layer (as torch's
CPU path does), and the layer record computes the recurrence with one ``gemm`` per
step and fused element loops; backward is back-propagation through time in the same
kernel, accumulating the weight gradients in one ``gemm`` over all steps.

The record's result is the output sequence, ``(T, B, P)`` (``P`` the projection size,
else the hidden size), followed in the arena by the values the backward pass reads:
the initial state, the activated gates and the cell states.  Only the output is a
tensor; its adjoint is written by its consumers as any tensor's, and the kernel uses the
adjoint area of the rest as scratch.  The final cell state of an LSTM is taken out by
``lstm_c`` (``AddBackward0``, torch's node for ``c``), whose backward marks the flag
byte at the cell state's position, so the layer knows whether a gradient arrived there.

Layout at ``ints[p]``: [mode (0 LSTM, 1 GRU, 2 tanh, 3 relu), T, B, H, P, reverse,
has_h0, h0, has_c0, c0, has_b_hh, b_hh, has_w_hr, w_hr, has_b_ih, b_ih (operands encoded
like a and b), the offsets from ``out`` of: h0 copy, gates, cell states (LSTM) or the
recurrent products ``W_hh h + b_hh`` (GRU), c0 copy, projection inputs; packed, and for
packed sequences the T batch sizes].  Operand a is
the input projection ``x W_ih^T`` (``T*B`` rows of ``G*H`` gates; its bias is added here,
where its gradient is the same row sums as ``b_hh``'s), b is ``W_hh``.
Gate order as torch: LSTM i, f, g, o; GRU r, z, n with ``n = tanh(x_n + r * (W_hn h + b_hn))``.
"""
import numpy as np
from numba import types

from tapejit._jit import helper, kernel, overloaded
from tapejit.ops._blas import matmul_into
from tapejit.ops._kernel_helpers import acc, at, claim, decode
from tapejit.ops._kernel_helpers import tanh as fast_tanh
from tapejit.registry import define_kernel, same_kernels
from tapejit.samples import bounded, cases

LSTM_MODE, GRU_MODE, TANH_MODE, RELU_MODE = 0, 1, 2, 3
GATES = (4, 3, 1, 1)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


@overloaded(sigmoid)
def _sigmoid_compiled(x):
    if x == types.float32:
        # 1/2 + tanh(x/2)/2 with the vectorizable float32 tanh: within ~1e-7 of the exact
        # value, where a scalar expf per gate element was a third of a layer's time.
        def by_tanh(x):
            return np.float32(0.5) + np.float32(0.5) * fast_tanh(np.float32(0.5) * x)
        return by_tanh

    def exact(x):
        # exp of a non-positive argument only: no overflow on either side
        e = np.exp(-abs(x))
        s = 1.0 / (1.0 + e)
        return s if x >= 0 else e * s
    return exact


@helper
def step_rows(ints, p, T, B):
    """First projection row of each step and its number of rows: ``B`` rows a step, or
    with packed sequences (ints[p + 21]) the step's batch size, its rows after the
    previous steps' (sequences sorted by decreasing length: a step's rows are a prefix)."""
    first = np.empty(T, np.int64)
    count = np.empty(T, np.int64)
    k = 0
    for t in range(T):
        n = ints[p + 22 + t] if ints[p + 21] != 0 else B
        first[t] = k
        count[t] = n
        k += n
    return first, count


@kernel
def rnn_layer_forward(v, out, a, b, p, q, ints, floats):
    mode = ints[p]
    T = ints[p + 1]
    B = ints[p + 2]
    H = ints[p + 3]
    P = ints[p + 4]
    rev = ints[p + 5] != 0
    G = 4 if mode == 0 else (3 if mode == 1 else 1)
    GH = G * H
    one = np.ones(1, v.dtype)[0]
    zero = one - one
    h0 = out + ints[p + 16]
    gates = out + ints[p + 17]
    extra = out + ints[p + 18]     # LSTM: cell states; GRU: W_hh h + b_hh
    c0 = out + ints[p + 19]
    hraw = out + ints[p + 20]
    proj = ints[p + 12] != 0
    whr = decode(ints[p + 13])
    first, count = step_rows(ints, p, T, B)
    # both biases in one row (GRU: b_ih only, its b_hh goes with the recurrent product)
    bias = np.zeros(GH, v.dtype)
    if ints[p + 14] != 0:
        src = decode(ints[p + 15])
        for j in range(GH):
            bias[j] += v[at(src + j)]
    rbias = np.zeros(GH, v.dtype)
    if ints[p + 10] != 0:
        src = decode(ints[p + 11])
        for j in range(GH):
            rbias[j] = v[at(src + j)]
    if mode != 1:
        for j in range(GH):
            bias[j] += rbias[j]
    # W_hh^T (and W_hr^T) laid out once per call: BLAS multiplies by a transposed operand
    # ~3x slower than by a plain one at these sizes (20 x 64 x 256: 24 against 76 GFlop/s)
    wt = np.empty(P * GH, v.dtype)
    tc = np.empty(B * H if mode == 0 else 0, v.dtype)
    for r in range(GH):
        for c in range(P):
            wt[c * GH + r] = v[at(b + r * P + c)]
    wrt = np.empty(H * P if proj else 0, v.dtype)
    if proj:
        for r in range(P):
            for c in range(H):
                wrt[c * P + r] = v[at(whr + r * H + c)]
    if ints[p + 6] != 0:
        src = decode(ints[p + 7])
        for k in range(B * P):
            v[at(h0 + k)] = v[at(src + k)]
    else:
        for k in range(B * P):
            v[at(h0 + k)] = zero
    if mode == 0:
        if ints[p + 8] != 0:
            src = decode(ints[p + 9])
            for k in range(B * H):
                v[at(c0 + k)] = v[at(src + k)]
        else:
            for k in range(B * H):
                v[at(c0 + k)] = zero
    # Element loops have one store each and few loads: LLVM vectorizes a loop only when it
    # can check at run time that its stores and loads do not overlap, and gives up past a
    # handful of pointers.  Rows past a step's batch size (packed sequences that ended)
    # carry their state over unchanged.
    for s in range(T):
        t = T - 1 - s if rev else s
        tp = t + 1 if rev else t - 1
        hp = h0 if s == 0 else out + tp * B * P
        ot = out + t * B * P
        xt = a + first[t] * GH
        gt = gates + t * B * GH
        bs = count[t]
        if mode == 1:
            ght = extra + t * B * GH
            for i in range(bs):
                row = ght + i * GH
                for j in range(GH):
                    v[at(row + j)] = rbias[j]
            matmul_into(v, ght, v, hp, wt, 0, bs, P, GH, False, False, True)
            for i in range(bs):
                gi = gt + i * GH
                hi = ght + i * GH
                xi = xt + i * GH
                for j in range(2 * H):
                    v[at(gi + j)] = sigmoid(v[at(xi + j)] + bias[j] + v[at(hi + j)])
                for j in range(H):
                    v[at(gi + 2 * H + j)] = fast_tanh(v[at(xi + 2 * H + j)] + bias[2 * H + j]
                                                      + v[at(gi + j)] * v[at(hi + 2 * H + j)])
                e0 = i * P
                for j in range(H):
                    z = v[at(gi + H + j)]
                    v[at(ot + e0 + j)] = (one - z) * v[at(gi + 2 * H + j)] + z * v[at(hp + e0 + j)]
        else:
            for i in range(bs):
                row = gt + i * GH
                xi = xt + i * GH
                for j in range(GH):
                    v[at(row + j)] = v[at(xi + j)] + bias[j]
            matmul_into(v, gt, v, hp, wt, 0, bs, P, GH, False, False, True)
        if mode == 0:
            ct = extra + t * B * H
            cp = c0 if s == 0 else extra + tp * B * H
            dst = hraw + t * B * H if proj else ot
            for i in range(bs):
                gi = gt + i * GH
                e0 = i * H
                for j in range(2 * H):
                    v[at(gi + j)] = sigmoid(v[at(gi + j)])
                for j in range(H):
                    v[at(gi + 2 * H + j)] = fast_tanh(v[at(gi + 2 * H + j)])
                for j in range(H):
                    v[at(gi + 3 * H + j)] = sigmoid(v[at(gi + 3 * H + j)])
                for j in range(H):
                    v[at(ct + e0 + j)] = (v[at(gi + H + j)] * v[at(cp + e0 + j)]
                                          + v[at(gi + j)] * v[at(gi + 2 * H + j)])
            # tanh(c) over the whole step first: inside the rows' loop (64 elements) this loop
            # ran scalar, 5x slower than the whole layer's other element loops
            for k in range(bs * H):
                tc[k] = fast_tanh(v[at(ct + k)])
            for i in range(bs):
                gi = gt + i * GH
                e0 = i * H
                for j in range(H):
                    v[at(dst + e0 + j)] = v[at(gi + 3 * H + j)] * tc[e0 + j]
            for k in range(bs * H, B * H):
                v[at(ct + k)] = v[at(cp + k)]
                if proj:
                    v[at(dst + k)] = zero   # keeps a carried row out of W_hr's gradient
            if proj:
                matmul_into(v, ot, v, dst, wrt, 0, bs, H, P, False, False, False)
        elif mode == 2:
            for k in range(bs * H):
                v[at(ot + k)] = fast_tanh(v[at(gt + k)])
        elif mode == 3:
            for k in range(bs * H):
                x = v[at(gt + k)]
                v[at(ot + k)] = zero if x <= zero else x   # NaN stays NaN, as torch's relu
        for k in range(bs * P, B * P):
            v[at(ot + k)] = v[at(hp + k)]


@kernel
def rnn_layer_backward(v, g, flags, out, a, b, ma, mb, p, q, ints, floats):
    # g[out ...] holds the output's gradient (the final hidden state's included: it is a
    # row of the output); the rest of the region's adjoint is scratch for this kernel.
    mode = ints[p]
    T = ints[p + 1]
    B = ints[p + 2]
    H = ints[p + 3]
    P = ints[p + 4]
    rev = ints[p + 5] != 0
    G = 4 if mode == 0 else (3 if mode == 1 else 1)
    GH = G * H
    one = np.ones(1, v.dtype)[0]
    zero = one - one
    h0 = out + ints[p + 16]
    gates = out + ints[p + 17]
    extra = out + ints[p + 18]
    c0 = out + ints[p + 19]
    hraw = out + ints[p + 20]
    proj = ints[p + 12] != 0
    whr = decode(ints[p + 13])
    packed = ints[p + 21] != 0
    first, count = step_rows(ints, p, T, B)
    dh = h0          # the recurrent gradient dL/dh_{t-1}, in h0's adjoint
    dc = c0          # and dL/dc_{t-1} (LSTM), in c0's
    # the input projection's gradient goes straight to its adjoint when this is its first
    # (its rows are the gates' rows unless the sequences are packed)
    dx = a if (ma == 1 and not packed) else gates
    for k in range(B * P):
        g[at(dh + k)] = zero
    has_dcn = False
    cn = extra + (0 if rev else T - 1) * B * H
    if mode == 0:
        for k in range(B * H):
            g[at(dc + k)] = zero
        if T > 0 and B * H > 0 and flags[cn] != 0:   # lstm_c's mark: the final cell state has a gradient
            flags[cn] = 0
            has_dcn = True
    tc = np.empty(H, v.dtype)
    for s in range(T - 1, -1, -1):
        t = T - 1 - s if rev else s
        tp = t + 1 if rev else t - 1
        hp = h0 if s == 0 else out + tp * B * P
        ot = out + t * B * P
        bs = count[t]
        for k in range(B * P):    # the total gradient of h_t, kept for the projection's
            g[at(ot + k)] += g[at(dh + k)]
        gt = gates + t * B * GH
        dt = dx + t * B * GH
        for k in range(bs * GH, B * GH):   # rows carried over: no gate gradients
            g[at(dt + k)] = zero
        if mode == 1:
            ght = extra + t * B * GH
            for k in range(bs * GH, B * GH):
                g[at(ght + k)] = zero
            for i in range(bs):
                gi = gt + i * GH
                hi = ght + i * GH
                di = dt + i * GH
                e0 = i * P
                for j in range(H):   # dn (pre-activation)
                    n = v[at(gi + 2 * H + j)]
                    g[at(di + 2 * H + j)] = g[at(ot + e0 + j)] * (one - v[at(gi + H + j)]) * (one - n * n)
                for j in range(H):   # dz
                    z = v[at(gi + H + j)]
                    g[at(di + H + j)] = g[at(ot + e0 + j)] * (v[at(hp + e0 + j)] - v[at(gi + 2 * H + j)]) * z * (one - z)
                for j in range(H):   # dr
                    r = v[at(gi + j)]
                    g[at(di + j)] = g[at(di + 2 * H + j)] * v[at(hi + 2 * H + j)] * r * (one - r)
                for j in range(2 * H):
                    g[at(hi + j)] = g[at(di + j)]
                for j in range(H):
                    g[at(hi + 2 * H + j)] = g[at(di + 2 * H + j)] * v[at(gi + j)]
                for j in range(H):
                    g[at(dh + e0 + j)] = g[at(ot + e0 + j)] * v[at(gi + H + j)]
            for k in range(bs * P, B * P):
                g[at(dh + k)] = g[at(ot + k)]
            matmul_into(g, dh, g, ght, v, b, bs, GH, P, False, False, True)
            continue
        if mode == 0:
            ct = extra + t * B * H
            cp = c0 if s == 0 else extra + tp * B * H
            src = ot
            if proj:
                src = hraw + t * B * H
                matmul_into(g, src, g, ot, v, whr, bs, P, H, False, False, False)
            if has_dcn and s == T - 1:
                for k in range(B * H):
                    g[at(dc + k)] += g[at(cn + k)]
            for i in range(bs):
                gi = gt + i * GH
                di = dt + i * GH
                e0 = i * H
                for j in range(H):
                    tc[j] = fast_tanh(v[at(ct + e0 + j)])
                for j in range(H):   # do
                    o = v[at(gi + 3 * H + j)]
                    g[at(di + 3 * H + j)] = g[at(src + e0 + j)] * tc[j] * o * (one - o)
                for j in range(H):   # dc_t
                    g[at(dc + e0 + j)] += g[at(src + e0 + j)] * v[at(gi + 3 * H + j)] * (one - tc[j] * tc[j])
                for j in range(H):   # di
                    ig = v[at(gi + j)]
                    g[at(di + j)] = g[at(dc + e0 + j)] * v[at(gi + 2 * H + j)] * ig * (one - ig)
                for j in range(H):   # df
                    fg = v[at(gi + H + j)]
                    g[at(di + H + j)] = g[at(dc + e0 + j)] * v[at(cp + e0 + j)] * fg * (one - fg)
                for j in range(H):   # dg
                    gg = v[at(gi + 2 * H + j)]
                    g[at(di + 2 * H + j)] = g[at(dc + e0 + j)] * v[at(gi + j)] * (one - gg * gg)
                for j in range(H):   # dc_{t-1}
                    g[at(dc + e0 + j)] = g[at(dc + e0 + j)] * v[at(gi + H + j)]
        elif mode == 2:
            for k in range(bs * H):
                y = v[at(ot + k)]
                g[at(dt + k)] = g[at(ot + k)] * (one - y * y)
        else:
            for k in range(bs * H):
                g[at(dt + k)] = g[at(ot + k)] if v[at(ot + k)] > zero else zero
        matmul_into(g, dh, g, dt, v, b, bs, GH, P, False, False, False)
        for k in range(bs * P, B * P):
            g[at(dh + k)] = g[at(ot + k)]
    # the initial states' gradients
    if ints[p + 6] != 0:
        enc = ints[p + 7]
        mode_h = claim(flags, enc)
        if mode_h != 0:
            dst = decode(enc)
            for k in range(B * P):
                acc(g, dst + k, g[at(dh + k)], mode_h)
    if mode == 0 and ints[p + 8] != 0:
        enc = ints[p + 9]
        mode_c = claim(flags, enc)
        if mode_c != 0:
            dst = decode(enc)
            for k in range(B * H):
                acc(g, dst + k, g[at(dc + k)], mode_c)
    if packed and ma != 0:
        for t in range(T):
            for k in range(count[t] * GH):
                acc(g, a + first[t] * GH + k, g[at(gates + t * B * GH + k)], ma)
    elif ma == 2:
        for k in range(T * B * GH):
            g[at(a + k)] += g[at(gates + k)]
    # gradients of the recurrent pre-activations, one row of G*H per step and batch entry:
    # for a GRU the n part differs between the input's (dn) and the recurrent one's (dn * r)
    drec = extra if mode == 1 else dx
    for which in (10, 14):   # b_hh (the recurrent rows), b_ih (the input's)
        if ints[p + which] != 0:
            enc = ints[p + which + 1]
            mode_b = claim(flags, enc)
            if mode_b != 0:
                rows_at = drec if which == 10 else dx
                sums = np.zeros(GH, np.float64)   # by rows: a column walk missed the cache on every element
                for row in range(T * B):
                    start = rows_at + row * GH
                    for j in range(GH):
                        sums[j] += g[at(start + j)]
                dst = decode(enc)
                for j in range(GH):
                    acc(g, dst + j, sums[j], mode_b)
    if mb != 0 and T > 0:
        # dW_hh = sum over steps of dG_t^T h_{t-1}: the steps whose h_{t-1} is an output row
        # in one product, the first step (h0) in another
        rows = (T - 1) * B
        if rev:
            matmul_into(g, b, g, drec, v, out + B * P, GH, rows, P, True, False, mb == 2)
            matmul_into(g, b, g, drec + rows * GH, v, h0, GH, B, P, True, False, True)
        else:
            matmul_into(g, b, g, drec + B * GH, v, out, GH, rows, P, True, False, mb == 2)
            matmul_into(g, b, g, drec, v, h0, GH, B, P, True, False, True)
    if proj:
        mode_r = claim(flags, ints[p + 13])
        if mode_r != 0:   # dW_hr = sum over steps of dh_t^T (o * tanh(c))_t
            matmul_into(g, whr, g, out, v, hraw, P, T * B, H, True, False, mode_r == 2)


@kernel
def cell_state_forward(v, out, a, b, p, q, ints, floats):
    src = a + ints[p]
    for i in range(ints[p + 1]):
        v[at(out + i)] = v[at(src + i)]


@kernel
def cell_state_backward(v, g, flags, out, a, b, ma, mb, p, q, ints, floats):
    # [offset of the cell state in the layer's region, its size, the layer output's size]
    if ma == 0:
        return
    if ma == 1:   # the first gradient to reach the layer: its output's adjoint starts at zero
        for i in range(ints[p + 2]):
            g[at(a + i)] = 0.0
    m = a + ints[p]
    n = ints[p + 1]
    if n == 0:
        return
    if flags[m] == 0:
        flags[m] = 1
        for i in range(n):
            g[at(m + i)] = g[at(out + i)]
    else:
        for i in range(n):
            g[at(m + i)] += g[at(out + i)]


def _listed(ints, p):
    fields = []
    for k in (6, 8, 10, 12, 14):
        if ints[p + k]:
            fields.append(int(ints[p + k + 1]))
    return fields


def _lstm(tj, x, h0, c0, *params):
    return tj.lstm(x, (h0, c0), params, len(params) % 4 == 0, 1 if len(params) <= 4 else 2, 0.0,
                   False, False, False)[0]


def _lstm_no_bias_2(tj, x, h0, c0, *params):
    return tj.lstm(x, (h0, c0), params, False, 2, 0.0, False, False, False)[0]


def _lstm_proj(tj, x, h0, c0, *params):
    return tj.lstm(x, (h0, c0), params, True, 1, 0.0, False, False, False)[0]


def _gru(tj, x, h0, *params):
    return tj.gru(x, h0, params, len(params) == 4, 1, 0.0, False, False, False)[0]


def _rnn_tanh(tj, x, h0, *params):
    return tj.rnn_tanh(x, h0, params, True, 1, 0.0, False, False, False)[0]


def _rnn_relu(tj, x, h0, *params):
    return tj.rnn_relu(x, h0, params, True, 1, 0.0, False, False, False)[0]


# sequence 3, batch 2, input 3, hidden 2
_X, _H = (3, 2, 3), (1, 2, 2)
RNN_LAYER = define_kernel(
    "rnn_layer", "StackBackward0", rnn_layer_forward, rnn_layer_backward, saved="bo", listed=_listed,
    group="rnn",
    samples=cases(("lstm", _lstm, [_X, _H, _H, (8, 3), (8, 2), (8,), (8,)], bounded),
                  ("lstm_2_layers_no_bias", _lstm_no_bias_2, [_X, (2, 2, 2), (2, 2, 2), (8, 3), (8, 2), (8, 2),
                                                               (8, 2)], bounded),
                  ("lstm_proj", _lstm_proj, [_X, (1, 2, 1), _H, (8, 3), (8, 1), (8,), (8,), (1, 2)], bounded),
                  ("gru", _gru, [_X, _H, (6, 3), (6, 2), (6,), (6,)], bounded),
                  ("gru_no_bias", _gru, [_X, _H, (6, 3), (6, 2)], bounded),
                  ("rnn_tanh", _rnn_tanh, [_X, _H, (2, 3), (2, 2), (2,), (2,)], bounded),
                  ("rnn_relu", _rnn_relu, [_X, _H, (2, 3), (2, 2), (2,), (2,)], bounded)))
LSTM_CELL = same_kernels(
    "lstm_cell", "MulBackward0", RNN_LAYER,
    samples=cases(("lstm_cell", lambda tj, x, h, c, *w: tj.lstm_cell(x, (h, c), *w)[0],
                   [(2, 3), (2, 2), (2, 2), (8, 3), (8, 2), (8,), (8,)], bounded),
                  ("lstm_cell_no_bias", lambda tj, x, h, c, *w: tj.lstm_cell(x, (h, c), *w)[0],
                   [(2, 3), (2, 2), (2, 2), (8, 3), (8, 2)], bounded)))
GRU_CELL = same_kernels(
    "gru_cell", "AddBackward0", RNN_LAYER,
    samples=cases(("gru_cell", lambda tj, x, h, *w: tj.gru_cell(x, h, *w),
                   [(2, 3), (2, 2), (6, 3), (6, 2), (6,), (6,)], bounded)))
RNN_TANH_CELL = same_kernels(
    "rnn_tanh_cell", "TanhBackward0", RNN_LAYER,
    samples=cases(("rnn_tanh_cell", lambda tj, x, h, *w: tj.rnn_tanh_cell(x, h, *w),
                   [(2, 3), (2, 2), (2, 3), (2, 2), (2,), (2,)], bounded)))
RNN_RELU_CELL = same_kernels(
    "rnn_relu_cell", "ReluBackward0", RNN_LAYER,
    samples=cases(("rnn_relu_cell", lambda tj, x, h, *w: tj.rnn_relu_cell(x, h, *w),
                   [(2, 3), (2, 2), (2, 3), (2, 2), (2,), (2,)], bounded)))
LSTM_C = define_kernel(
    "lstm_c", "AddBackward0", cell_state_forward, cell_state_backward, saves=False, operands=1, group="rnn",
    samples=cases(("lstm_cell_c", lambda tj, x, h, c, *w: tj.lstm_cell(x, (h, c), *w)[1],
                   [(2, 3), (2, 2), (2, 2), (8, 3), (8, 2), (8,), (8,)], bounded)))


# ---- recording ------------------------------------------------------------------------------
from tapejit.recording import operand as _operand, encode_operand, record  # noqa: E402
from tapejit.shapes import numel as _numel  # noqa: E402
from tapejit.tape import state as _state, current as _current  # noqa: E402
from tapejit.tensor import _taped  # noqa: E402


def layer_region(mode, T, B, H, P, proj):
    """Offsets from the layer record's result of the values its backward reads, and the
    region's total size: [output, h0, gates, cell states / recurrent products, c0, projection
    inputs]."""
    G = GATES[mode]
    h0 = T * B * P
    gates = h0 + B * P
    extra = gates + T * B * G * H
    if mode == LSTM_MODE:
        c0 = extra + T * B * H
        hraw = c0 + B * H
        end = hraw + (T * B * H if proj else 0)
    elif mode == GRU_MODE:
        c0 = hraw = end = extra + T * B * G * H
    else:
        c0 = hraw = end = extra
    return (h0, gates, extra, c0, hraw), end


def record_layer(op, mode, xw, w_hh, h0, c0, b_ih, b_hh, w_hr, T, B, H, P, reverse, shape, batch_sizes=None):
    """Record one layer (one direction) over ``T`` steps: ``xw`` the input projection
    without bias (``T*B`` rows of gates, or with packed sequences ``sum(batch_sizes)``),
    ``w_hh`` (G*H, P); ``h0``, ``c0``, ``b_ih``, ``b_hh``, ``w_hr`` may be None.  Returns
    the output, of ``shape`` (``(T, B, P)``, or ``(B, P)`` for a cell); with
    ``batch_sizes`` a sequence's rows past its end hold its last state."""
    dt = xw._dtype
    tape = _state.tape or _current()
    grad = _state.grad
    listed = []
    listed_rg = False
    for t in (h0, c0, b_hh, w_hr, b_ih):
        if t is None:
            listed += [0, -1]
        else:
            listed += [1, encode_operand(tape, t, dt)]
            listed_rg = listed_rg or (grad and t._rg)
    offsets, total = layer_region(mode, T, B, H, P, w_hr is not None)
    sizes = [0] if batch_sizes is None else [1] + [int(n) for n in batch_sizes]
    p = tape.add_ints([mode, T, B, H, P, 1 if reverse else 0] + listed + list(offsets) + sizes)
    fields = []
    rg = listed_rg
    for t in (xw, w_hh):
        off = t._off if (t._tape is tape and t._dtype is dt) else _operand(tape, t, dt)
        want = grad and t._rg
        rg = rg or want
        fields.append(off if want else ~off)
    off = tape.alloc(dt.arena, total)
    tape.append(op.opcode * 2 + dt.arena, off, fields[0], fields[1], p, 0)
    return _taped(tape, off, tuple(shape), _numel(shape), dt, rg)


def final_cell_state(layer, mode_region, T, B, H, reverse):
    """An LSTM layer's (or cell's) final cell state, ``(B, H)``: ``lstm_c`` of its record."""
    offsets, _ = mode_region
    tape = _state.tape or _current()
    start = offsets[2] + (0 if reverse else T - 1) * B * H
    p = tape.add_ints((start, B * H, layer._numel))
    return record(LSTM_C, (layer,), (B, H), layer._dtype, p, 0)


# ---- derivative formulas (create_graph) ----------------------------------------------------
# One per kernel, applied by create_graph passes (tapejit/autograd/higher.py); plain Python,
# not compiled: see tapejit/ops/_formulas.py.  Kept last so define_ edits merge cleanly.

from tapejit.api import front_ends as tj  # noqa: E402  (tj's functions, read at call time)
from tapejit.ops import _formulas as _f  # noqa: E402
from tapejit.ops._formulas import derivative  # noqa: E402


def _recurrence(c, a, b, p):
    """The layer record (operands ``a``, ``b``, ints at ``p``) written again step by step with
    formulated ops (products, gate activations, the state update; a packed sequence's ended
    rows carried over): its output sequence, an LSTM's final cell state, and its operands
    as ``[(encoded operand, tensor)]``."""
    ints = c.tape.ints
    mode, T, B, H, P, reverse = (int(ints[p + i]) for i in range(6))
    listed = [int(ints[p + 7 + 2 * i]) if ints[p + 6 + 2 * i] else None for i in range(5)]
    counts = [int(n) for n in ints[p + 22:p + 22 + T]] if ints[p + 21] else [B] * T
    GH = GATES[mode] * H

    def operand(enc, shape):
        return None if enc is None else _f.slot(c.tape, c.arena, enc, int(np.prod(shape)), shape)
    xw = operand(a, (sum(counts), GH))
    w_hh = operand(b, (GH, P))
    h0, c0, b_hh, w_hr, b_ih = (operand(enc, shape) for enc, shape in
                                zip(listed, [(B, P), (B, H), (GH,), (P, H), (GH,)]))
    h = h0 if h0 is not None else _f.zeros(B * P, c.dt).reshape(B, P)
    cell = (c0 if c0 is not None else _f.zeros(B * H, c.dt).reshape(B, H)) if mode == LSTM_MODE else None
    bias = b_ih
    if mode != GRU_MODE and b_hh is not None:
        bias = b_hh if bias is None else bias + b_hh
    starts = np.cumsum([0] + counts)
    outputs = [None] * T
    for s in range(T):
        t = T - 1 - s if reverse else s
        n = counts[t]
        x_t = xw[int(starts[t]):int(starts[t]) + n]
        if bias is not None:
            x_t = x_t + bias
        hp = h[:n] if n < B else h
        recurrent = tj.matmul(hp, w_hh.t())
        if mode == GRU_MODE:
            if b_hh is not None:
                recurrent = recurrent + b_hh
            rz = tj.sigmoid(x_t[:, :2 * H] + recurrent[:, :2 * H])
            new = tj.tanh(x_t[:, 2 * H:] + rz[:, :H] * recurrent[:, 2 * H:])
            z = rz[:, H:]
            step = (1.0 - z) * new + z * hp
        elif mode == LSTM_MODE:
            gates = x_t + recurrent
            i, f, o = tj.sigmoid(gates[:, :H]), tj.sigmoid(gates[:, H:2 * H]), tj.sigmoid(gates[:, 3 * H:])
            cp = cell[:n] if n < B else cell
            cn = f * cp + i * tj.tanh(gates[:, 2 * H:3 * H])
            cell = tj.cat([cn, cell[n:]]) if n < B else cn
            step = o * tj.tanh(cn)
            if w_hr is not None:
                step = tj.matmul(step, w_hr.t())
        else:
            step = (tj.tanh if mode == TANH_MODE else tj.relu)(x_t + recurrent)
        h = tj.cat([step, h[n:]]) if n < B else step
        outputs[t] = h
    operands = [(a, xw), (b, w_hh)] + list(zip(listed, (h0, c0, b_hh, w_hr, b_ih)))
    return tj.stack(outputs), cell, operands


def _vjp_through(c, result, operands):
    """The gradients of ``operands`` (``[(encoded operand, tensor)]``) from ``c.g`` at
    ``result``, recorded: a nested create_graph pass over the records just written."""
    wanted = [(enc, t) for enc, t in operands if t is not None and c.wants(enc)]
    if not wanted or not result.requires_grad:
        return []
    found = c.vjp([(result, _f.shaped(c.g, result.shape))], [t for _, t in wanted])
    return [(enc, g) for (enc, _), g in zip(wanted, found) if g is not None]


@derivative(rnn_layer_forward)
def _d_rnn_layer(c):
    """The vjp of the recurrence written again (``_recurrence``)."""
    y, _, operands = _recurrence(c, c.a, c.b, c.p)
    return _vjp_through(c, y, operands)


@derivative(LSTM_C)
def _d_lstm_c(c):
    """An LSTM's final cell state: the vjp of the recurrence of the layer record it is
    taken from, at its last cell state."""
    _, a, b, p, _ = _f.producer(c)
    _, cell, operands = _recurrence(c, a, b, p)
    return _vjp_through(c, cell, operands)
