"""``tj.autograd.Function``: custom ops with a Python backward between compiled segments."""
import numpy as np
import pytest

import tapejit as tj


class Exp(tj.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        result = x.exp()
        ctx.save_for_backward(result)
        return result

    @staticmethod
    def backward(ctx, grad):
        (result,) = ctx.saved_tensors
        return grad * result


class ScaledProductAndSum(tj.autograd.Function):
    """Two outputs, a non-tensor argument in the middle, ``needs_input_grad`` honoured."""

    @staticmethod
    def forward(ctx, a, scale, b):
        ctx.scale = scale
        ctx.save_for_backward(a, b)
        return a * b * scale, a + b

    @staticmethod
    def backward(ctx, g_product, g_sum):
        a, b = ctx.saved_tensors
        ga = g_product * b * ctx.scale + g_sum if ctx.needs_input_grad[0] else None
        gb = g_product * a * ctx.scale + g_sum if ctx.needs_input_grad[2] else None
        return ga, None, gb


class CubeSetupContext(tj.autograd.Function):
    """The torch 2 style: ``forward`` without ctx, then ``setup_context``."""

    @staticmethod
    def forward(x):
        return x ** 3

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 3 * x ** 2 * grad


def f64(values, rg=True):
    return tj.tensor(np.asarray(values, np.float64), requires_grad=rg)


def test_custom_exp_inside_a_graph_matches_the_analytic_gradient():
    x = f64([0.5, 1.0, -0.25])
    y = Exp.apply(x * 3.0)
    (y * 2.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 6.0 * np.exp(3.0 * x.detach().numpy()), rtol=1e-14)


def test_grad_fn_is_named_after_the_function_and_links_to_inputs():
    x = f64([1.0, 2.0])
    y = Exp.apply(x * 2.0)
    assert type(y.grad_fn).__name__ == "ExpBackward" and y.grad_fn.name() == "ExpBackward"
    assert repr(y).endswith("grad_fn=<ExpBackward>)")
    (node, index), = y.grad_fn.next_functions
    assert node.name() == "MulBackward0" and index == 0
    z = Exp.apply(x)
    assert type(z.grad_fn.next_functions[0][0]).__name__ == "AccumulateGrad"


def test_two_outputs_non_tensor_argument_and_needs_input_grad():
    a, b = f64([1.0, 2.0]), f64([3.0, 4.0])
    p, q = ScaledProductAndSum.apply(a, 2.0, b)
    (p.sum() + (q * q).sum()).backward()
    np.testing.assert_array_equal(a.grad.numpy(), 2 * np.array([3.0, 4.0]) + 2 * np.array([4.0, 6.0]))
    np.testing.assert_array_equal(b.grad.numpy(), 2 * np.array([1.0, 2.0]) + 2 * np.array([4.0, 6.0]))
    c = f64([3.0, 4.0], rg=False)
    a.grad = None
    p, q = ScaledProductAndSum.apply(a, 2.0, c)
    assert p.grad_fn.needs_input_grad == (True, False, False)
    p.sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [6.0, 8.0])


def test_output_without_gradient_is_materialized_as_zeros_unless_disabled():
    seen = []

    class Spy(tj.autograd.Function):
        materialize = True

        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(Spy.materialize)
            return x * 2, x * 3

        @staticmethod
        def backward(ctx, g1, g2):
            seen.append((g1, g2))
            return g1 * 2

    x = f64([1.0])
    Spy.apply(x)[0].sum().backward()
    assert seen[-1][1].tolist() == [0.0]
    Spy.materialize = False
    Spy.apply(x)[0].sum().backward()
    assert seen[-1][1] is None


def test_setup_context_style():
    x = f64([1.0, -2.0])
    CubeSetupContext.apply(x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 12.0])


def test_function_output_as_the_root_and_autograd_grad():
    x = f64([0.0, 1.0])
    Exp.apply(x).backward(tj.ones(2, dtype=tj.float64))
    np.testing.assert_allclose(x.grad.numpy(), np.exp([0.0, 1.0]))
    (g,) = tj.autograd.grad(Exp.apply(x).sum(), [x])
    np.testing.assert_allclose(g.numpy(), np.exp([0.0, 1.0]))
    np.testing.assert_allclose(x.grad.numpy(), np.exp([0.0, 1.0]))   # untouched by autograd.grad


def test_hook_on_a_function_output_runs_before_its_backward():
    x = f64([1.0, 2.0])
    y = Exp.apply(x)
    y.register_hook(lambda g: g * 10.0)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 10.0 * np.exp([1.0, 2.0]))


def test_retain_graph_and_freed_context():
    x = f64([1.0])
    y = Exp.apply(x * 1.0)
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp([1.0]))
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        y.grad_fn.saved_tensors  # noqa: B018


def test_modified_saved_tensor_is_detected():
    class SaveInput(tj.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * 2

        @staticmethod
        def backward(ctx, g):
            ctx.saved_tensors  # noqa: B018  (checks the version)
            return g * 2

    x = f64([1.0, 2.0])
    y = SaveInput.apply(x)
    with tj.no_grad():
        x.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation.*saved tensor 0 of SaveInputBackward"):
        y.sum().backward()


def test_wrong_number_and_shape_of_gradients_are_errors():
    class TooFew(tj.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            return a + b

        @staticmethod
        def backward(ctx, g):
            return g

    class BadShape(tj.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 1.0

        @staticmethod
        def backward(ctx, g):
            return tj.ones(5, dtype=tj.float64)

    a, b = f64([1.0, 2.0]), f64([1.0, 2.0])
    with pytest.raises(RuntimeError, match=r"function TooFewBackward returned an incorrect number of gradients \(expected 2, got 1\)"):
        TooFew.apply(a, b).sum().backward()
    with pytest.raises(RuntimeError, match=r"BadShapeBackward returned an invalid gradient at index 0 - got \[5\] but expected shape compatible with \[2\]"):
        BadShape.apply(a).sum().backward()


def test_broadcast_gradient_is_summed_to_the_input_shape():
    class Broadcasting(tj.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 1.0

        @staticmethod
        def backward(ctx, g):
            return g.reshape(1, 2).expand(3, 2)

    a = f64([1.0, 2.0])
    Broadcasting.apply(a).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [3.0, 3.0])


def test_non_differentiable_outputs_and_no_grad_mode():
    class ValueAndIndex(tj.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            index = x.argmax()
            doubled = x * 2
            ctx.mark_non_differentiable(index)
            return doubled, index

        @staticmethod
        def backward(ctx, g, g_index):
            return g * 2

    x = f64([1.0, 5.0, 2.0])
    doubled, index = ValueAndIndex.apply(x)
    assert index.item() == 1 and not index.requires_grad and doubled.requires_grad
    with tj.no_grad():
        plain = Exp.apply(x)
    assert not plain.requires_grad and plain.grad_fn is None


def test_float32_and_legacy_call_error():
    x = tj.tensor([0.5, 1.5], requires_grad=True)
    y = Exp.apply(x)
    assert y.dtype == tj.float32
    y.sum().backward()
    assert x.grad.dtype == tj.float32
    np.testing.assert_allclose(x.grad.numpy(), np.exp([0.5, 1.5]), rtol=1e-6)
    with pytest.raises(RuntimeError, match="Legacy autograd function"):
        Exp()(x)


def test_gradcheck_passes_through_a_custom_function():
    x = f64([0.3, -0.7, 1.1])
    assert tj.autograd.gradcheck(lambda t: Exp.apply(t.sin()) * t, (x,))


def test_same_function_in_torch_gives_the_same_gradients():
    torch = pytest.importorskip("torch")

    class TorchScaledProductAndSum(torch.autograd.Function):
        forward = staticmethod(ScaledProductAndSum.forward)
        backward = staticmethod(ScaledProductAndSum.backward)

    rng = np.random.default_rng(0)
    a_np, b_np = rng.normal(size=(2, 3)), rng.normal(size=(2, 3))
    results = []
    for lib, cls in ((tj, ScaledProductAndSum), (torch, TorchScaledProductAndSum)):
        a = lib.tensor(a_np, requires_grad=True)
        b = lib.tensor(b_np, requires_grad=True)
        p, q = cls.apply(a.tanh(), 1.5, b)
        (p * q).sum().backward()
        assert type(p.grad_fn).__name__ == f"{cls.__name__}Backward"
        results.append((a.grad.numpy(), b.grad.numpy()))
    for mine, theirs in zip(*results):
        np.testing.assert_allclose(mine, theirs, rtol=1e-13)


# ---- one gradient per output, as torch ---------------------------------------------------------

def _received(lib, materialize, kinds):
    """What backward receives for forward's outputs of ``kinds`` when only the
    differentiable output "d" is used: per output None or (dtype name, values)."""
    got = []

    class Fn(lib.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.set_materialize_grads(materialize)
            outs = []
            for k in kinds:
                if k == "marked":
                    x = a * 1
                    ctx.mark_non_differentiable(x)
                    outs.append(x)
                elif k == "d":
                    outs.append(b * 2)
                elif k == "int":
                    outs.append(lib.tensor([1, 2]))
                elif k == "python":
                    outs.append(3)
                elif k == "unused":
                    outs.append(a * 3)
            return tuple(outs)

        @staticmethod
        def backward(ctx, *grads):
            got.extend(None if g is None else (str(g.dtype).split(".")[-1], g.tolist()) for g in grads)
            return None, lib.ones(2)

    a = lib.ones(2, requires_grad=True)
    b = lib.ones(2, requires_grad=True)
    outs = Fn.apply(a, b)
    outs[kinds.index("d")].sum().backward()
    return got


@pytest.mark.parametrize("materialize", [True, False])
@pytest.mark.parametrize("kinds", [("marked", "d"), ("d", "marked"), ("d", "int"), ("d", "python"),
                                   ("d", "unused"), ("marked", "d", "unused")])
def test_backward_receives_one_gradient_per_output(materialize, kinds):
    # torch 2.13: zeros (of the output's dtype) for a non-differentiable or unused tensor
    # output, None for them with set_materialize_grads(False), None for a non-tensor output
    zeros_or_none = {"float32": ("float32", [0.0, 0.0]), "int64": ("int64", [0, 0])}
    expected = {
        "d": ("float32", [1.0, 1.0]), "python": None,
        "marked": zeros_or_none["float32"] if materialize else None,
        "unused": zeros_or_none["float32"] if materialize else None,
        "int": zeros_or_none["int64"] if materialize else None,
    }
    assert _received(tj, materialize, kinds) == [expected[k] for k in kinds]
    torch = pytest.importorskip("torch")
    assert _received(torch, materialize, kinds) == [expected[k] for k in kinds]


# ---- autograd.grad runs only the backwards on a path to its inputs -----------------------------

def _called_backwards(lib):
    calls = []

    class Tag(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x, name):
            ctx.name = name
            return x * 1

        @staticmethod
        def backward(ctx, g):
            calls.append(ctx.name)
            return g, None

    w = lib.tensor([1.0, 2.0], requires_grad=True)
    v = lib.tensor([3.0, 4.0], requires_grad=True)
    a = Tag.apply(v * 2, "v")
    b = Tag.apply(w * 3, "w")
    c = Tag.apply(a * b, "both")
    out = (c + Tag.apply(v, "v only")).sum()
    results = []
    for inputs in ([w], [v], [w, v]):
        grads = lib.autograd.grad(out, inputs, retain_graph=True)
        results.append(([g.tolist() for g in grads], sorted(calls)))
        calls.clear()
    out.backward(inputs=[w], retain_graph=True)
    results.append(([w.grad.tolist()], sorted(calls)))
    calls.clear()
    out.backward()
    results.append(([], sorted(calls)))
    return results


def test_autograd_grad_runs_only_the_custom_backwards_its_inputs_need():
    # torch 2.13's engine runs only the nodes on a path from the outputs to the inputs
    expected = [
        ([[18.0, 24.0]], ["both", "w"]),
        ([[7.0, 13.0]], ["both", "v", "v only"]),
        ([[18.0, 24.0], [7.0, 13.0]], ["both", "v", "v only", "w"]),
        ([[18.0, 24.0]], ["both", "w"]),
        ([], ["both", "v", "v only", "w"]),
    ]
    assert _called_backwards(tj) == expected
    torch = pytest.importorskip("torch")
    assert _called_backwards(torch) == expected


def test_autograd_grad_of_a_parameter_does_not_fire_a_full_backward_hook_it_does_not_need():
    # torch 2.13: with an input requiring grad, grad(y, [weight]) does not run the module's
    # input-side hook Function, so the full backward hook does not fire; grad(y, [x]) does
    def fired(lib):
        lin = lib.nn.Linear(2, 2)
        seen = []
        lin.register_full_backward_hook(lambda m, gi, go: seen.append(len(gi)))
        x = lib.ones(1, 2, requires_grad=True)
        y = lin(x).sum()
        lib.autograd.grad(y, [lin.weight], retain_graph=True)
        before = list(seen)
        lib.autograd.grad(y, [x])
        return before, seen
    assert fired(tj) == ([], [1])
    torch = pytest.importorskip("torch")
    assert fired(torch) == ([], [1])
