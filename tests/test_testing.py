"""tapejit.testing.check_grads: gradients against central finite differences, as an assertion."""
import numpy as np
import pytest

import tapejit as tj
from tapejit.testing import check_grads


def _arrays(*shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in shapes]


def test_correct_gradients_pass():
    check_grads(lambda x, w: (x @ w).tanh(), _arrays((3, 4), (4, 2)))
    check_grads(lambda x: (x * x).sum(), _arrays((5,)))        # a scalar output


class _ExpOffByOnePercent(tj.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.exp()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.exp() * 1.01


def test_a_wrong_gradient_raises_naming_the_input():
    with pytest.raises(AssertionError, match="gradient of input 1 .*central finite differences"):
        check_grads(lambda w, x: w * _ExpOffByOnePercent.apply(x), _arrays((4,), (4,)))
    check_grads(lambda w, x: w * _ExpOffByOnePercent.apply(x), _arrays((4,), (4,)), wrt=0)


def test_integer_inputs_are_passed_through_and_not_differentiated():
    index = np.array([2, 0, 2])
    check_grads(lambda x, i: (x[i] ** 3).sum(), [*_arrays((4,)), index])
    with pytest.raises(TypeError, match="input 1 has dtype int64"):
        check_grads(lambda x, i: x[i].sum(), [*_arrays((4,)), index], wrt=[1])


def test_an_unused_input_must_have_zero_finite_differences():
    check_grads(lambda x, y: x.sin().sum(), _arrays((3,), (2,)))   # y's .grad stays None: zeros
