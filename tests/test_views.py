"""In-place ops on views: the base sees them, as in PyTorch.

A view of a recorded tensor is a record of its own (tapejit/ops/views.py), so an
in-place op on it is written back into its base (tapejit/inplace.py); views of a leaf under
``no_grad`` are NumPy views of its array.  Each case gives the values and gradients PyTorch
gives (checked against torch itself where it is installed).
"""
import numpy as np
import pytest

import tapejit as tj


def _through_views(tl):
    """Cases: name -> fn(tl) returning a dict of NumPy results."""
    def grads_after(modify, shape=(2,)):
        def case():
            x = tl.tensor(np.arange(1.0, 1.0 + np.prod(shape)).reshape(shape), requires_grad=True)
            y = x ** 2
            modify(y)
            y.sum().backward()
            return {"y": y.detach().numpy().copy(), "grad": x.grad.numpy().copy()}
        return case

    def two_views_of_one_base():
        x = tl.tensor([1.0, 2.0], requires_grad=True)
        y = x * 1
        a, b = y[0:1], y[1:2]
        a.mul_(3)
        b.mul_(2)
        y.sum().backward()
        return {"y": y.detach().numpy().copy(), "a": a.detach().numpy().copy(),
                "grad": x.grad.numpy().copy()}

    def base_changed_after_the_view():
        x = tl.tensor([1.0, 2.0], requires_grad=True)
        y = x * 1
        v = y[0:1]
        y.add_(1)
        v.mul_(3)
        y.sum().backward()
        return {"y": y.detach().numpy().copy(), "v": v.detach().numpy().copy(),
                "grad": x.grad.numpy().copy()}

    def view_of_a_view():
        x = tl.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
        y = x * 2
        y[1][0:1].mul_(10)
        (y * y).sum().backward()
        return {"y": y.detach().numpy().copy(), "grad": x.grad.numpy().copy()}

    def transposed_setitem():
        x = tl.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
        m = x * 1
        m.t()[0, 1] = -1.0
        (m * m).sum().backward()
        return {"m": m.detach().numpy().copy(), "grad": x.grad.numpy().copy()}

    def parameter_views_under_no_grad():
        p = tl.nn.Parameter(tl.ones(4))
        lin = tl.nn.Linear(2, 2)
        with tl.no_grad():
            p[0:2].mul_(5)
            p.view(2, 2)[1].sub_(0.5)
            lin.weight[0].zero_()
            lin.weight[1, :].fill_(2.0)
        return {"p": p.detach().numpy().copy(), "w": lin.weight.detach().numpy().copy()}

    return {
        "view.mul_": grads_after(lambda y: y.view(2, 1).mul_(3)),
        "slice.mul_": grads_after(lambda y: y[0:1].mul_(3)),
        "whole slice.mul_": grads_after(lambda y: y[:].mul_(3)),
        "unsqueeze.add_": grads_after(lambda y: y.unsqueeze(0).add_(10)),
        "select.fill_": grads_after(lambda y: y[1].fill_(7.0)),
        "view.copy_": grads_after(lambda y: y.view(1, 2).copy_(tl.tensor([[7.0, 8.0]]))),
        "flat view.div_": grads_after(lambda y: y.view(-1).div_(2), shape=(2, 2)),
        "column.clamp_": grads_after(lambda y: y[:, 0].clamp_(max=2.0), shape=(2, 2)),
        "row setitem": grads_after(lambda y: y[0].__setitem__(1, 0.0), shape=(2, 2)),
        "two views of one base": two_views_of_one_base,
        "base changed after the view": base_changed_after_the_view,
        "view of a view": view_of_a_view,
        "transposed setitem": transposed_setitem,
        "parameter views under no_grad": parameter_views_under_no_grad,
    }


EXPECTED = {
    "view.mul_": {"y": [3.0, 12.0], "grad": [6.0, 12.0]},
    "slice.mul_": {"y": [3.0, 4.0], "grad": [6.0, 4.0]},
    "whole slice.mul_": {"y": [3.0, 12.0], "grad": [6.0, 12.0]},
    "unsqueeze.add_": {"y": [11.0, 14.0], "grad": [2.0, 4.0]},
    "select.fill_": {"y": [1.0, 7.0], "grad": [2.0, 0.0]},
    "view.copy_": {"y": [7.0, 8.0], "grad": [0.0, 0.0]},
    "flat view.div_": {"y": [[0.5, 2.0], [4.5, 8.0]], "grad": [[1.0, 2.0], [3.0, 4.0]]},
    "column.clamp_": {"y": [[1.0, 4.0], [2.0, 16.0]], "grad": [[2.0, 4.0], [0.0, 8.0]]},
    "row setitem": {"y": [[1.0, 0.0], [9.0, 16.0]], "grad": [[2.0, 0.0], [6.0, 8.0]]},
    "two views of one base": {"y": [3.0, 4.0], "a": [3.0], "grad": [3.0, 2.0]},
    "base changed after the view": {"y": [6.0, 3.0], "v": [6.0], "grad": [3.0, 1.0]},
    "view of a view": {"y": [[2.0, 4.0], [60.0, 8.0]], "grad": [[8.0, 16.0], [2400.0, 32.0]]},
    "transposed setitem": {"m": [[1.0, 2.0], [-1.0, 4.0]], "grad": [[2.0, 4.0], [0.0, 8.0]]},
    "parameter views under no_grad": {"p": [5.0, 5.0, 0.5, 0.5], "w": [[0.0, 0.0], [2.0, 2.0]]},
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_in_place_op_on_a_view_changes_its_base(name):
    got = _through_views(tj)[name]()
    for key, want in EXPECTED[name].items():
        np.testing.assert_allclose(got[key], want, err_msg=f"{name}: {key}")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_in_place_op_on_a_view_matches_torch(name):
    torch = pytest.importorskip("torch")
    got = _through_views(tj)[name]()
    want = _through_views(torch)[name]()
    assert got.keys() == want.keys()
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-6, err_msg=f"{name}: {key}")


def test_in_place_op_on_a_view_of_a_leaf_that_requires_grad_is_refused():
    p = tj.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        p[0:1].mul_(2)
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        p.view(2, 1)[0] = 5.0
    assert p.detach().numpy().tolist() == [1.0, 2.0]


def test_in_place_op_on_a_row_of_an_iterated_tensor_is_refused():
    """As torch: iterating (``unbind``) returns several views, which may not be modified."""
    y = tj.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True) * 1
    for row in y:
        with pytest.raises(RuntimeError, match="mul_: an output of UnbindBackward0 is a view and is "
                                               "being modified inplace"):
            row.mul_(2)
    first, _ = y.unbind(0)
    with pytest.raises(RuntimeError, match="add_: an output of UnbindBackward0"):
        first += 1
    np.testing.assert_array_equal(y.detach().numpy(), [[1.0, 2.0], [3.0, 4.0]])


def test_in_place_op_on_an_expanded_view_is_refused():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    e = (x * 1).expand(3, 2)
    with pytest.raises(RuntimeError, match=r"mul_: unsupported operation: more than one element .* "
                                           r"shape \[3, 2\] of a tensor of shape \[2\]"):
        e.mul_(2)


def test_a_saved_base_changed_through_a_view_fails_backward_as_in_torch():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    y = x * 1
    z = y.exp()          # saves its output, not y
    w = y * y            # saves y
    y[0:1].mul_(3)
    z.sum().backward(retain_graph=True)
    np.testing.assert_allclose(x.grad.numpy(), np.exp([1.0, 2.0]))
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        w.sum().backward()


def test_views_of_a_leaf_under_no_grad_share_its_memory():
    p = tj.nn.Parameter(tj.zeros(2, 3))
    with tj.no_grad():
        row = p[1]
        assert not row.requires_grad
        row.add_(1.0)
        p.add_(10.0)        # and the other way: the view sees its base change
    assert p.detach().numpy().tolist() == [[10.0] * 3, [11.0] * 3]
    assert row.numpy().tolist() == [11.0] * 3
