"""Compiled update rules: one pass over a parameter and its state per step.

Each kernel takes 1-D arrays of the parameter's dtype and Python-float hyper-parameters.
The hyper-parameters are cast to the parameter's dtype inside the kernel and every
operation is rounded to that dtype in torch's order of operations, so a float32
parameter is updated in float32 as ``torch.optim``'s single-tensor path does (torch may
fuse a multiply-add where these kernels round twice: results agree to an ulp or so).
Quantities torch computes in Python doubles (bias corrections, ``1 - lr * weight_decay``)
are computed in float64 here too.

One fused loop instead of a chain of NumPy calls: for small parameters a NumPy call costs
more than the arithmetic, and for large ones one pass over memory beats seven.  Options
that store to an extra array or change which values are read (amsgrad, centered,
momentum, coupled weight decay) get a loop of their own, with the loop body inlined with
constant flags, so LLVM vectorizes each loop (a flag tested inside one shared loop cost
20-50% on a 1e6-element float32 Adam step).  Options that only pick between two values
are selects in the body.
"""
import numpy as np
from numba import njit

from tapejit._jit import sweep as _compiled

# Loop bodies: inlined into their kernel's loops, where their flag arguments are constants.
_body = njit(inline="always", error_model="numpy")


@_compiled
def sgd_plain(param, grad, lr, weight_decay, sign):
    """``p -= lr * (sign * g + weight_decay * p)`` (no momentum)."""
    cast = param.dtype.type
    neg_lr = cast(-lr)
    wd = cast(weight_decay)
    s = cast(sign)
    if weight_decay != 0.0:
        for i in range(param.size):
            d = s * grad[i] + wd * param[i]
            param[i] = param[i] + neg_lr * d
    else:
        for i in range(param.size):
            param[i] = param[i] + neg_lr * (s * grad[i])


@_body
def _sgd_momentum_element(i, args, decay):
    (param, grad, buf, first, neg_lr, wd, mom, keep, nesterov, s) = args
    d = s * grad[i]
    if decay:
        d = d + wd * param[i]
    b = d if first else buf[i] * mom + keep * d  # a new buffer takes the gradient
    buf[i] = b
    d = d + mom * b if nesterov else b
    param[i] = param[i] + neg_lr * d


@_compiled
def sgd_momentum(param, grad, buf, first, lr, momentum, dampening, weight_decay, nesterov, sign):
    """SGD with a momentum buffer; ``first`` means the buffer is new and takes the gradient."""
    cast = param.dtype.type
    args = (param, grad, buf, first, cast(-lr), cast(weight_decay), cast(momentum),
            cast(1.0 - dampening), nesterov, cast(sign))
    if weight_decay != 0.0:
        for i in range(param.size):
            _sgd_momentum_element(i, args, True)
    else:
        for i in range(param.size):
            _sgd_momentum_element(i, args, False)


@_body
def _adam_element(i, args, coupled_decay, amsgrad):
    (param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, s, shrink, wd, small_w1, w1, rest1, b2,
     w2, bc2_sqrt, eps_, neg_step_size) = args
    p = param[i] * shrink  # decoupled weight decay; shrink is exactly 1 without it
    g = s * grad[i]
    if coupled_decay:
        g = g + wd * p
    m = exp_avg[i]
    m = m + w1 * (g - m) if small_w1 else g - (g - m) * rest1  # torch's lerp
    exp_avg[i] = m
    v = exp_avg_sq[i] * b2 + w2 * g * g
    exp_avg_sq[i] = v
    if amsgrad:
        vmax = max_exp_avg_sq[i]
        if not (vmax >= v) and not np.isnan(vmax):  # torch.maximum propagates NaN
            vmax = v
        max_exp_avg_sq[i] = vmax
        v = vmax
    param[i] = p + neg_step_size * m / (np.sqrt(v) / bc2_sqrt + eps_)


@_compiled
def adam(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step, lr, beta1, beta2, eps,
         weight_decay, decoupled, amsgrad, sign):
    """Adam / AdamW.  ``step`` is the 0-d step counter (incremented here); ``max_exp_avg_sq``
    is read only when ``amsgrad``."""
    cast = param.dtype.type
    step[()] += 1
    t = np.float64(step[()])
    bias_correction1 = 1.0 - beta1 ** t
    bias_correction2_sqrt = (1.0 - beta2 ** t) ** 0.5
    neg_step_size = cast(-(lr / bias_correction1))
    bc2_sqrt = cast(bias_correction2_sqrt)
    eps_ = cast(eps)
    s = cast(sign)
    w1 = cast(1.0 - beta1)          # exp_avg.lerp_(grad, 1 - beta1)
    small_w1 = abs(w1) < cast(0.5)  # torch's lerp switches formula at 0.5
    rest1 = cast(1) - w1
    b2 = cast(beta2)
    w2 = cast(1.0 - beta2)
    wd = cast(weight_decay)
    decoupled_decay = weight_decay != 0.0 and decoupled
    shrink = cast(1.0 - lr * weight_decay) if decoupled_decay else cast(1)
    coupled_decay = weight_decay != 0.0 and not decoupled
    args = (param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, s, shrink, wd, small_w1, w1, rest1,
            b2, w2, bc2_sqrt, eps_, neg_step_size)
    n = param.size
    if amsgrad:
        if coupled_decay:
            for i in range(n):
                _adam_element(i, args, True, True)
        else:
            for i in range(n):
                _adam_element(i, args, False, True)
    elif coupled_decay:
        for i in range(n):
            _adam_element(i, args, True, False)
    else:
        for i in range(n):
            _adam_element(i, args, False, False)


@_body
def _rmsprop_element(i, args, decay, centered, use_momentum):
    (param, grad, square_avg, grad_avg, buf, s, neg_lr, a, w, small_w, rest, eps_, wd, mom,
     minus_one) = args
    p = param[i]
    g = s * grad[i]
    if decay:
        g = g + wd * p
    sq = square_avg[i] * a + w * g * g
    square_avg[i] = sq
    if centered:
        ga = grad_avg[i]
        ga = ga + w * (g - ga) if small_w else g - (g - ga) * rest  # torch's lerp
        grad_avg[i] = ga
        avg = np.sqrt(sq + minus_one * ga * ga) + eps_
    else:
        avg = np.sqrt(sq) + eps_
    if use_momentum:
        b = buf[i] * mom + g / avg
        buf[i] = b
        param[i] = p + neg_lr * b
    else:
        param[i] = p + neg_lr * g / avg


@_compiled
def rmsprop(param, grad, square_avg, grad_avg, buf, step, lr, alpha, eps, weight_decay,
            momentum, centered, sign):
    """RMSprop.  ``grad_avg`` is read only when ``centered``, ``buf`` only when ``momentum > 0``."""
    cast = param.dtype.type
    step[()] += 1
    w = cast(1.0 - alpha)  # square_avg.addcmul_(g, g, 1 - alpha); grad_avg.lerp_(g, 1 - alpha)
    args = (param, grad, square_avg, grad_avg, buf, cast(sign), cast(-lr), cast(alpha), w,
            abs(w) < cast(0.5), cast(1) - w, cast(eps), cast(weight_decay), cast(momentum),
            cast(-1))
    decay = weight_decay != 0.0
    use_momentum = momentum > 0.0
    n = param.size
    if decay:
        if centered:
            if use_momentum:
                for i in range(n):
                    _rmsprop_element(i, args, True, True, True)
            else:
                for i in range(n):
                    _rmsprop_element(i, args, True, True, False)
        elif use_momentum:
            for i in range(n):
                _rmsprop_element(i, args, True, False, True)
        else:
            for i in range(n):
                _rmsprop_element(i, args, True, False, False)
    elif centered:
        if use_momentum:
            for i in range(n):
                _rmsprop_element(i, args, False, True, True)
        else:
            for i in range(n):
                _rmsprop_element(i, args, False, True, False)
    elif use_momentum:
        for i in range(n):
            _rmsprop_element(i, args, False, False, True)
    else:
        for i in range(n):
            _rmsprop_element(i, args, False, False, False)
