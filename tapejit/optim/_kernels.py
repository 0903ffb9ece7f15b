"""Compiled update rules: one pass over a parameter and its state per step.

Each kernel takes 1-D arrays of the parameter's dtype and Python-float hyper-parameters.
The hyper-parameters are cast to the parameter's dtype inside the kernel and every
operation is rounded to that dtype in torch's order of operations, so a float32
parameter is updated in float32 as ``torch.optim``'s single-tensor path does (torch may
fuse a multiply-add where these kernels round twice: results agree to an ulp or so).
Quantities torch computes in Python doubles (bias corrections, ``1 - lr * weight_decay``)
are computed in float64 here too.

One fused loop instead of a chain of NumPy calls: for small parameters a NumPy call costs
more than the arithmetic, and for large ones one pass over memory beats seven.
"""
import numpy as np

from tapejit._jit import sweep as _compiled


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


@_compiled
def sgd_momentum(param, grad, buf, first, lr, momentum, dampening, weight_decay, nesterov, sign):
    """SGD with a momentum buffer; ``first`` means the buffer is new and takes the gradient."""
    cast = param.dtype.type
    neg_lr = cast(-lr)
    wd = cast(weight_decay)
    mom = cast(momentum)
    keep = cast(1.0 - dampening)
    s = cast(sign)
    decay = weight_decay != 0.0
    for i in range(param.size):
        d = s * grad[i]
        if decay:
            d = d + wd * param[i]
        if first:
            b = d
        else:
            b = buf[i] * mom + keep * d
        buf[i] = b
        if nesterov:
            d = d + mom * b
        else:
            d = b
        param[i] = param[i] + neg_lr * d


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
    shrink = cast(1.0 - lr * weight_decay)  # decoupled: param.mul_(1 - lr * weight_decay)
    coupled_decay = weight_decay != 0.0 and not decoupled
    decoupled_decay = weight_decay != 0.0 and decoupled
    for i in range(param.size):
        p = param[i]
        g = s * grad[i]
        if decoupled_decay:
            p = p * shrink
        elif coupled_decay:
            g = g + wd * p
        m = exp_avg[i]
        if small_w1:
            m = m + w1 * (g - m)
        else:
            m = g - (g - m) * rest1
        exp_avg[i] = m
        v = exp_avg_sq[i] * b2 + w2 * g * g
        exp_avg_sq[i] = v
        if amsgrad:
            vmax = max_exp_avg_sq[i]
            # torch.maximum propagates NaN from either side
            if not (vmax >= v) and not np.isnan(vmax):
                vmax = v
            max_exp_avg_sq[i] = vmax
            v = vmax
        denom = np.sqrt(v) / bc2_sqrt + eps_
        param[i] = p + neg_step_size * m / denom


@_compiled
def rmsprop(param, grad, square_avg, grad_avg, buf, step, lr, alpha, eps, weight_decay,
            momentum, centered, sign):
    """RMSprop.  ``grad_avg`` is read only when ``centered``, ``buf`` only when ``momentum > 0``."""
    cast = param.dtype.type
    step[()] += 1
    neg_lr = cast(-lr)
    a = cast(alpha)
    w = cast(1.0 - alpha)           # square_avg.addcmul_(g, g, 1 - alpha); grad_avg.lerp_(g, 1 - alpha)
    small_w = abs(w) < cast(0.5)
    rest = cast(1) - w
    eps_ = cast(eps)
    wd = cast(weight_decay)
    mom = cast(momentum)
    minus_one = cast(-1)
    s = cast(sign)
    decay = weight_decay != 0.0
    use_momentum = momentum > 0.0
    for i in range(param.size):
        p = param[i]
        g = s * grad[i]
        if decay:
            g = g + wd * p
        sq = square_avg[i] * a + w * g * g
        square_avg[i] = sq
        if centered:
            ga = grad_avg[i]
            if small_w:
                ga = ga + w * (g - ga)
            else:
                ga = g - (g - ga) * rest
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
