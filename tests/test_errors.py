"""Errors of SPEC section 4: clear messages with PyTorch's wording, nothing silently wrong.

Messages are matched against torch 2.x's text; tests that compare with torch directly
import it with ``pytest.importorskip`` inside the test.
"""
import re
import warnings

import numpy as np
import pytest

import tapejit as tj


def _names_shape(msg, shape):
    """Does ``msg`` name ``shape`` (as [2, 3], (2, 3), torch.Size([2, 3]) or 2x3)?"""
    shape = list(shape)
    forms = [str(shape), str(tuple(shape)), "x".join(map(str, shape))]
    return any(f in msg for f in forms)


def _assert_names(msg, op, *shapes):
    """``op`` is the op's name, or a tuple of acceptable names (``@`` may say matmul or mm)."""
    ops = (op,) if isinstance(op, str) else op
    assert any(o.lower() in msg.lower() for o in ops), f"none of {ops!r} named in: {msg}"
    for s in shapes:
        assert _names_shape(msg, s), f"shape {s} not named in: {msg}"


# ---- backward on something that does not require grad ----------------------------------------

NO_GRAD_FN = "element 0 of tensors does not require grad and does not have a grad_fn"


def test_backward_on_tensor_not_requiring_grad():
    with pytest.raises(RuntimeError, match=NO_GRAD_FN):
        tj.tensor(1.0).backward()


def test_backward_on_result_of_constants():
    a = tj.tensor([1.0, 2.0])
    with pytest.raises(RuntimeError, match=NO_GRAD_FN):
        (a * 2).sum().backward()


def test_backward_on_result_computed_under_no_grad():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    with tj.no_grad():
        y = (x * 2).sum()
    with pytest.raises(RuntimeError, match=NO_GRAD_FN):
        y.backward()


def test_backward_on_detached():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match=NO_GRAD_FN):
        (x * 2).sum().detach().backward()


def test_autograd_grad_on_input_not_requiring_grad():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    c = tj.tensor([1.0, 2.0])
    with pytest.raises(RuntimeError, match="does not require grad"):
        tj.autograd.grad((x * c).sum(), [c])


# ---- implicit gradient for non-scalar outputs ----------------------------------------------------

def test_implicit_gradient_non_scalar():
    x = tj.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
        (x * 2).backward()


def test_implicit_gradient_non_scalar_autograd_grad():
    x = tj.ones(2, 2, requires_grad=True)
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
        tj.autograd.grad(x * 2, x)


def test_gradient_of_wrong_shape():
    x = tj.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        (x * 2).backward(tj.ones(2))


# ---- freed graph ------------------------------------------------------------------------------------

FREED = re.escape("Trying to backward through the graph a second time")


def test_backward_through_freed_graph():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    y = (x.exp() * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match=FREED):
        y.backward()


def test_freed_graph_message_mentions_retain_graph():
    x = tj.tensor(2.0, requires_grad=True)
    y = x * x
    y.backward()
    with pytest.raises(RuntimeError, match="Specify retain_graph=True"):
        y.backward()


def test_freed_graph_shared_subgraph():
    # Two outputs share h; the first backward frees h's saved values.
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    h = x * x
    a = h.sum()
    b = (h * 3).sum()
    a.backward()
    with pytest.raises(RuntimeError, match=FREED):
        b.backward()


def test_freed_graph_autograd_grad_twice():
    x = tj.tensor(2.0, requires_grad=True)
    y = x.sin() * x
    tj.autograd.grad(y, x)
    with pytest.raises(RuntimeError, match=FREED):
        tj.autograd.grad(y, x)


# ---- in-place modification of a saved value --------------------------------------------------------

INPLACE_SAVED = ("one of the variables needed for gradient computation has been modified by an "
                 "inplace operation")


def test_inplace_modification_of_saved_output():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    y = x.exp()                # ExpBackward0 saves its output
    z = y.sum()
    y.add_(1)
    with pytest.raises(RuntimeError, match=INPLACE_SAVED):
        z.backward()


def test_inplace_modification_of_saved_input():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    a = x * 2
    b = a * a                  # MulBackward0 saves a
    a.mul_(3)
    with pytest.raises(RuntimeError, match=INPLACE_SAVED):
        b.sum().backward()


def test_inplace_modification_of_saved_constant_leaf():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    c = tj.tensor([3.0, 4.0])
    y = (x * c).sum()          # MulBackward0 saves c to compute x's gradient
    c.add_(1)
    with pytest.raises(RuntimeError, match=INPLACE_SAVED):
        y.backward()


def test_inplace_modification_of_saved_leaf_under_no_grad():
    w = tj.tensor([1.0, 2.0], requires_grad=True)
    y = (w * w).sum()
    with tj.no_grad():
        w.mul_(2)              # an optimizer step before backward
    with pytest.raises(RuntimeError, match=INPLACE_SAVED):
        y.backward()


def test_inplace_saved_message_names_version():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    y = x.tanh()
    z = y.sum()
    y.mul_(2)
    with pytest.raises(RuntimeError, match=r"is at version 1; expected version 0 instead"):
        z.backward()


# ---- in-place on a leaf requiring grad ----------------------------------------------------------------

LEAF_INPLACE = re.escape("a leaf Variable that requires grad is being used in an in-place operation.")


@pytest.mark.parametrize("op", [
    "iadd", "isub", "imul", "itruediv", "add_", "sub_", "mul_", "div_", "clamp_", "zero_", "fill_",
    "copy_",
])
def test_inplace_on_leaf_requiring_grad(op):
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match=LEAF_INPLACE):
        if op == "iadd":
            x += 1
        elif op == "isub":
            x -= 1
        elif op == "imul":
            x *= 2
        elif op == "itruediv":
            x /= 2
        elif op == "clamp_":
            x.clamp_(0.0, 1.0)
        elif op == "zero_":
            x.zero_()
        elif op == "fill_":
            x.fill_(3.0)
        elif op == "copy_":
            x.copy_(tj.tensor([5.0, 6.0]))
        else:
            getattr(x, op)(2.0)
    np.testing.assert_array_equal(np.asarray(x.detach()), [1.0, 2.0])     # unchanged


def test_setitem_on_leaf_requiring_grad():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match=LEAF_INPLACE):
        x[0] = 5.0


# ---- requires_grad on integer tensors -------------------------------------------------------------------

def test_requires_grad_true_on_integer_tensor_creation():
    with pytest.raises(RuntimeError, match="^Only Tensors of floating point and complex dtype can require gradients"):
        tj.tensor([1, 2], requires_grad=True)


def test_requires_grad_true_on_integer_creation_functions():
    for make in (lambda: tj.zeros(3, dtype=tj.int64, requires_grad=True),
                 lambda: tj.arange(3, requires_grad=True),
                 lambda: tj.tensor([True, False], requires_grad=True)):
        with pytest.raises(RuntimeError, match="(?i)only Tensors of floating point"):
            make()


def test_requires_grad_setter_on_integer_tensor():
    t = tj.arange(3)
    with pytest.raises(RuntimeError, match="^only Tensors of floating point and complex dtype can require gradients"):
        t.requires_grad = True
    assert not t.requires_grad


def test_requires_grad_method_on_integer_tensor():
    t = tj.arange(3)
    with pytest.raises(RuntimeError, match="^only Tensors of floating point dtype can require gradients"):
        t.requires_grad_()
    assert not t.requires_grad


def test_requires_grad_messages_match_torch():
    torch = pytest.importorskip("torch")

    def message(fn):
        with pytest.raises(RuntimeError) as info:
            fn()
        return str(info.value)

    assert message(lambda: tj.tensor([1, 2], requires_grad=True)) == \
        message(lambda: torch.tensor([1, 2], requires_grad=True))

    def set_attr(m):
        t = m.arange(3)
        t.requires_grad = True

    assert message(lambda: set_attr(tj)) == message(lambda: set_attr(torch))
    assert message(lambda: tj.arange(3).requires_grad_()) == message(lambda: torch.arange(3).requires_grad_())


# ---- NaN in backward under detect_anomaly --------------------------------------------------------------

def test_detect_anomaly_names_node_returning_nan():
    x = tj.tensor([-1.0, 4.0], requires_grad=True)
    with pytest.warns(UserWarning, match="Anomaly Detection has been enabled"):
        with tj.autograd.detect_anomaly():
            y = tj.sqrt(x).sum()
            with pytest.raises(RuntimeError, match=re.escape("Function 'SqrtBackward0' returned nan values")):
                y.backward()


def test_detect_anomaly_names_first_nan_node_in_a_chain():
    # Finite forward; sqrt'(0) * 0 = 0/0 is the first NaN of the backward sweep (as torch).
    x = tj.tensor([0.0, 4.0], dtype=tj.float64, requires_grad=True)
    c = tj.tensor([0.0, 1.0], dtype=tj.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with tj.autograd.detect_anomaly():
            y = ((x * 2).sqrt() * c + 1).sum()
            with pytest.raises(RuntimeError, match=r"Function 'SqrtBackward0' returned nan values in its 0th output"):
                y.backward()


def test_detect_anomaly_nan_forward_names_last_node():
    # The forward is NaN from sqrt on; torch names the first node in the backward order.
    x = tj.tensor([-1.0, 4.0], dtype=tj.float64, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with tj.autograd.detect_anomaly():
            y = ((x * 2).sqrt() * 3 + 1).exp().sum()
            with pytest.raises(RuntimeError, match=r"Function 'ExpBackward0' returned nan values in its 0th output"):
                y.backward()


def test_detect_anomaly_other_nodes():
    a = tj.tensor([0.0, 1.0], requires_grad=True)
    b = tj.tensor([0.0, 1.0], requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with tj.autograd.detect_anomaly():
            y = (a / b).sum()           # d/db = -a/b**2 = 0/0: nan in DivBackward0's output 1
            with pytest.raises(RuntimeError, match=r"Function 'DivBackward0' returned nan values in its 1th output"):
                y.backward()


def test_set_detect_anomaly_and_no_error_without_it():
    x = tj.tensor([-1.0, 4.0], requires_grad=True)
    tj.sqrt(x).sum().backward()            # no anomaly mode: NaN gradient, no error
    g = np.asarray(x.grad)
    assert np.isnan(g[0]) and g[1] == 0.25

    z = tj.tensor([-1.0, 4.0], requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tj.autograd.set_detect_anomaly(True)
        try:
            with pytest.raises(RuntimeError, match="SqrtBackward0"):
                tj.sqrt(z).sum().backward()
        finally:
            tj.autograd.set_detect_anomaly(False)
    w = tj.tensor([-1.0], requires_grad=True)
    tj.sqrt(w).sum().backward()            # anomaly mode is off again
    assert np.isnan(np.asarray(w.grad)[0])


def test_detect_anomaly_message_matches_torch():
    torch = pytest.importorskip("torch")

    def message(m):
        x = m.tensor([-1.0, 4.0], requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with m.autograd.detect_anomaly():
                y = m.sqrt(x).sum()
                with pytest.raises(RuntimeError) as info:
                    y.backward()
        return str(info.value)

    assert message(tj) == message(torch)


def test_failed_backward_leaves_state_usable():
    x = tj.tensor([-1.0, 4.0], requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with tj.autograd.detect_anomaly():
            with pytest.raises(RuntimeError):
                tj.sqrt(x).sum().backward()
    w = tj.tensor([1.0, 2.0], requires_grad=True)
    (w * w).sum().backward()
    np.testing.assert_array_equal(np.asarray(w.grad), [2.0, 4.0])


# ---- shape errors: name the op and both shapes -----------------------------------------------------------

TORCH_BROADCAST = re.escape("size of tensor a (2) must match the size of tensor b (4) at non-singleton dimension 0")


def test_add_broadcast_mismatch():
    a, b = tj.ones(2, 3), tj.ones(4, 3)
    with pytest.raises(RuntimeError, match=TORCH_BROADCAST) as info:
        a + b
    _assert_names(str(info.value), "add", (2, 3), (4, 3))


def test_mul_broadcast_mismatch():
    a, b = tj.ones(2, 3, requires_grad=True), tj.ones(2, 4)
    with pytest.raises(RuntimeError, match=r"must match the size of tensor b \(4\) at non-singleton dimension 1") as info:
        a * b
    _assert_names(str(info.value), "mul", (2, 3), (2, 4))


def test_sub_div_broadcast_mismatch():
    a, b = tj.ones(3), tj.ones(2)
    with pytest.raises(RuntimeError) as info:
        tj.sub(a, b)
    _assert_names(str(info.value), "sub", (3,), (2,))
    with pytest.raises(RuntimeError) as info:
        a / b
    _assert_names(str(info.value), "div", (3,), (2,))


def test_matmul_mismatch():
    a, b = tj.ones(2, 3), tj.ones(4, 3)
    with pytest.raises(RuntimeError, match=re.escape("mat1 and mat2 shapes cannot be multiplied (2x3 and 4x3)")) as info:
        a @ b
    _assert_names(str(info.value), ("matmul", "mm"), (2, 3), (4, 3))
    with pytest.raises(RuntimeError) as info:
        tj.matmul(a, b)
    _assert_names(str(info.value), ("matmul", "mm"), (2, 3), (4, 3))
    with pytest.raises(RuntimeError) as info:
        tj.mm(a, b)
    _assert_names(str(info.value), "mm", (2, 3), (4, 3))


def test_matmul_vector_and_batch_mismatch():
    with pytest.raises(RuntimeError) as info:
        tj.ones(3) @ tj.ones(4)
    _assert_names(str(info.value), ("matmul", "dot"), (3,), (4,))
    with pytest.raises(RuntimeError) as info:
        tj.ones(2, 2, 3) @ tj.ones(2, 4, 5)
    _assert_names(str(info.value), ("matmul", "bmm"), (2, 2, 3), (2, 4, 5))
    with pytest.raises(RuntimeError) as info:
        tj.ones(2, 2, 3) @ tj.ones(3, 3, 5)        # batch dims 2 vs 3 do not broadcast
    _assert_names(str(info.value), ("matmul", "bmm"), (2, 2, 3), (3, 3, 5))
    with pytest.raises(RuntimeError) as info:
        tj.bmm(tj.ones(2, 2, 3), tj.ones(2, 4, 3))
    _assert_names(str(info.value), "bmm", (2, 2, 3), (2, 4, 3))
    with pytest.raises(RuntimeError) as info:
        tj.dot(tj.ones(3), tj.ones(4))
    _assert_names(str(info.value), "dot", (3,), (4,))


def test_cat_mismatch():
    a, b = tj.ones(2, 3), tj.ones(2, 4)
    with pytest.raises(RuntimeError, match="Sizes of tensors must match except in dimension 0") as info:
        tj.cat([a, b])
    _assert_names(str(info.value), "cat", (2, 3), (2, 4))


def test_cat_mismatch_with_grad():
    a, b = tj.ones(2, 3, requires_grad=True), tj.ones(3, 2, requires_grad=True)
    with pytest.raises(RuntimeError) as info:
        tj.cat([a, b], dim=1)
    _assert_names(str(info.value), "cat", (2, 3), (3, 2))


def test_stack_mismatch():
    with pytest.raises(RuntimeError, match="stack expects each tensor to be equal size") as info:
        tj.stack([tj.ones(2), tj.ones(3)])
    _assert_names(str(info.value), "stack", (2,), (3,))


def test_reshape_invalid():
    x = tj.ones(2, 3)
    with pytest.raises(RuntimeError, match=re.escape("shape '[4, 2]' is invalid for input of size 6")) as info:
        x.reshape(4, 2)
    assert "reshape" in str(info.value)
    with pytest.raises(RuntimeError, match=re.escape("shape '[4, -1]' is invalid for input of size 6")) as info:
        x.view(4, -1)
    assert "view" in str(info.value) or "reshape" in str(info.value)
    with pytest.raises(RuntimeError, match="only one dimension can be inferred"):
        x.reshape(-1, -1)


def test_reshape_invalid_with_grad():
    x = tj.ones(2, 3, requires_grad=True)
    with pytest.raises(RuntimeError, match=re.escape("shape '[5]' is invalid for input of size 6")):
        (x * 2).reshape(5)


def test_expand_invalid():
    with pytest.raises(RuntimeError, match=r"expanded size of the tensor \(4\) must match the existing size \(2\)") as info:
        tj.ones(2, 3).expand(4, 3)
    _assert_names(str(info.value), "expand", (4, 3), (2, 3))


def test_inplace_broadcast_to_smaller_output():
    a = tj.ones(3)
    with pytest.raises(RuntimeError, match=re.escape("output with shape [3] doesn't match the broadcast shape [2, 3]")):
        a += tj.ones(2, 3)
    np.testing.assert_array_equal(np.asarray(a), [1.0, 1.0, 1.0])


def test_shape_error_leaves_tape_usable():
    x = tj.ones(2, 3, requires_grad=True)
    y = x * 2
    with pytest.raises(RuntimeError):
        y + tj.ones(4, 3)
    y.sum().backward()
    np.testing.assert_array_equal(np.asarray(x.grad), np.full((2, 3), 2.0))


def test_dimension_out_of_range():
    with pytest.raises(IndexError, match=re.escape("Dimension out of range (expected to be in range of [-2, 1], but got 2)")):
        tj.ones(2, 3).sum(dim=2)


def test_index_out_of_range():
    with pytest.raises(IndexError, match="index 5 is out of bounds for dimension 0 with size 3"):
        tj.ones(3)[5]


# ---- other torch errors on the autograd surface -------------------------------------------------------------

def test_numpy_on_tensor_requiring_grad():
    with pytest.raises(RuntimeError, match=re.escape("Can't call numpy() on Tensor that requires grad")):
        tj.ones(3, requires_grad=True).numpy()


def test_item_on_multi_element_tensor():
    with pytest.raises(RuntimeError, match="a Tensor with 3 elements cannot be converted to Scalar"):
        tj.ones(3).item()


def test_bool_of_multi_element_tensor():
    with pytest.raises(RuntimeError, match="Boolean value of Tensor with more than one value is ambiguous"):
        bool(tj.ones(3))


def test_requires_grad_false_on_nonleaf():
    x = tj.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="you can only change requires_grad flags of leaf variables"):
        (x * 2).requires_grad_(False)


def test_retain_grad_and_hook_need_requires_grad():
    with pytest.raises(RuntimeError, match="can't retain_grad on Tensor that has requires_grad=False"):
        tj.ones(3).retain_grad()
    with pytest.raises(RuntimeError, match="cannot register a hook on a tensor that doesn't require gradient"):
        tj.ones(3).register_hook(lambda g: g)


def test_autograd_grad_unused_input():
    x = tj.ones(3, requires_grad=True)
    u = tj.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="appears to not have been used in the graph. Set allow_unused=True"):
        tj.autograd.grad((x * 2).sum(), [x, u])


def test_reductions_over_nothing():
    """As torch: the mean of no elements is nan (with and without a gradient), and max/min
    along an empty dim is an IndexError naming the dim and the shape."""
    assert np.isnan(tj.zeros(0).mean().item())
    x = tj.tensor([1.0, 200.0], requires_grad=True)
    picked = x[x > 1000]
    m = picked.mean()
    assert np.isnan(m.item())
    m.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0])
    np.testing.assert_array_equal(tj.zeros(0, 3).mean(0).numpy(), [np.nan] * 3)
    for name in ("max", "min"):
        with pytest.raises(IndexError, match=rf"{name}\(\): Expected reduction dim 0 to have non-zero "
                                             rf"size \(input of shape \[0, 3\]\)"):
            getattr(tj.zeros(0, 3), name)(dim=0)
