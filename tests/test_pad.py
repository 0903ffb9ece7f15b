"""``F.pad`` and the padding modules against torch: values, gradients (reflection and
replication repeat elements, whose gradients sum), negative padding, errors."""
import numpy as np
import pytest

import tapejit as tj

torch = pytest.importorskip("torch")

_CASES = [
    ((2, 3, 5), (1, 2), "constant", None),
    ((2, 3, 5), (1, 2), "constant", 2.5),
    ((2, 3, 5), (-1, 2, 1, 1), "constant", None),
    ((2, 3, 4, 5), (1, 1, 1, 1, 1, 0), "constant", -1.0),
    ((4,), (3, 0), "constant", None),
    ((2, 3, 5), (2, 3), "reflect", None),
    ((3, 5), (4, 4), "reflect", None),
    ((2, 3, 5), (-1, 2), "reflect", None),
    ((2, 3, 4, 5), (1, 2, 3, 0), "reflect", None),
    ((1, 2, 3, 4, 5), (1, 1, 2, 1, 1, 2), "reflect", None),
    ((2, 3, 5), (3, 1), "replicate", None),
    ((2, 3, 5), (9, 9), "replicate", None),
    ((2, 3, 5), (-2, -1), "replicate", None),
    ((3, 4, 5), (2, 1, 1, 3), "replicate", None),
    ((2, 3, 4, 5), (1, 1, 2, 0, 1, 1), "replicate", None),
    ((2, 3, 5), (2, 4), "circular", None),
    ((2, 3, 5), (5, 5), "circular", None),
    ((2, 3, 5), (-1, 2), "circular", None),
    ((1, 2, 3, 5), (2, 2, 1, 1), "circular", None),
]


@pytest.mark.parametrize("shape, pad, mode, value", _CASES)
def test_pad_matches_torch(shape, pad, mode, value):
    rng = np.random.default_rng(1)
    data = rng.standard_normal(shape)
    a = torch.tensor(data, requires_grad=True)
    b = tj.tensor(data, requires_grad=True)
    expected = torch.nn.functional.pad(a, pad, mode=mode, value=value)
    got = tj.nn.functional.pad(b, pad, mode=mode, value=value)
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got.detach().numpy(), expected.detach().numpy())
    weights = rng.standard_normal(tuple(expected.shape))
    (expected * torch.tensor(weights)).sum().backward()
    (got * tj.tensor(weights)).sum().backward()
    np.testing.assert_allclose(b.grad.numpy(), a.grad.numpy(), rtol=1e-12, atol=1e-12)
    assert got.grad_fn.name() == expected.grad_fn.name()


def test_pad_float32_and_integer_tensors():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(tj.nn.functional.pad(tj.tensor(x), (1, 1), value=2.0).numpy(),
                                  torch.nn.functional.pad(torch.tensor(x), (1, 1), value=2.0).numpy())
    ints = [[1, 2, 3]]
    for mode, value in [("constant", 2.5), ("reflect", None), ("replicate", None), ("circular", None)]:
        expected = torch.nn.functional.pad(torch.tensor(ints), (1, 1), mode=mode, value=value)
        got = tj.nn.functional.pad(tj.tensor(ints), (1, 1), mode=mode, value=value)
        assert got.dtype == tj.int64
        assert got.tolist() == expected.tolist()   # torch: [[2, 1, 2, 3, 2]] for the constant 2.5


@pytest.mark.parametrize("call", [
    lambda F, x: F.pad(x, (1,)),
    lambda F, x: F.pad(x, (1, 1) * 4),
    lambda F, x: F.pad(x, (1, 1), mode="foo"),
    lambda F, x: F.pad(x, (1, 1), mode="reflect", value=2.0),
    lambda F, x: F.pad(x, (1, 1), 2.0),
    lambda F, x: F.pad(x, (1.5, 1)),
    lambda F, x: F.pad(x, (5, 5), mode="reflect"),
    lambda F, x: F.pad(x, (6, 5), mode="circular"),
    lambda F, x: F.pad(x[0], (1, 1, 1, 1), mode="reflect"),
    lambda F, x: F.pad(x[0, 0], (1, 1), mode="replicate"),
    lambda F, x: F.pad(x, (-3, -3)),
])
def test_pad_errors_are_torchs(call):
    data = np.zeros((2, 3, 5))
    with pytest.raises(Exception) as expected:
        call(torch.nn.functional, torch.tensor(data))
    with pytest.raises(type(expected.value)) as got:
        call(tj.nn.functional, tj.tensor(data))
    first_line = str(expected.value).split("\n")[0].split(" (")[0]
    assert str(got.value).startswith(first_line)


@pytest.mark.parametrize("name, args, shape", [
    ("ZeroPad1d", (2,), (2, 3, 4)), ("ZeroPad2d", ((1, 0, 2, 0),), (1, 2, 2)), ("ZeroPad3d", (1,), (1, 2, 2, 2)),
    ("ConstantPad1d", (2, 3.5), (1, 2, 2)), ("ConstantPad2d", (1, -1.0), (2, 2, 3)),
    ("ConstantPad3d", ((1, 0, 0, 1, 1, 0), 2.0), (1, 2, 2, 2)),
    ("ReflectionPad1d", ((1, 2),), (2, 3, 4)), ("ReflectionPad2d", (1,), (1, 2, 3, 3)),
    ("ReflectionPad3d", (1,), (1, 1, 2, 3, 3)),
    ("ReplicationPad1d", (3,), (2, 4)), ("ReplicationPad2d", ((1, 2, 0, 1),), (2, 2, 3)),
    ("ReplicationPad3d", (1,), (1, 1, 2, 2, 2)),
    ("CircularPad1d", (2,), (2, 3, 4)), ("CircularPad2d", (1,), (1, 2, 3, 3)), ("CircularPad3d", (1,), (1, 1, 2, 2, 2)),
])
def test_padding_modules(name, args, shape):
    data = np.random.default_rng(2).standard_normal(shape)
    expected_module, module = getattr(torch.nn, name)(*args), getattr(tj.nn, name)(*args)
    assert repr(module) == repr(expected_module)
    assert module.padding == expected_module.padding
    a, b = torch.tensor(data, requires_grad=True), tj.tensor(data, requires_grad=True)
    expected, got = expected_module(a), module(b)
    np.testing.assert_array_equal(got.detach().numpy(), expected.detach().numpy())
    expected.pow(2).sum().backward()
    got.pow(2).sum().backward()
    np.testing.assert_allclose(b.grad.numpy(), a.grad.numpy(), rtol=1e-12)


def test_circular_pad_module_checks_dims():
    with pytest.raises(ValueError, match=r"expected 2D or 3D input \(got 4D input\)"):
        tj.nn.CircularPad1d(1)(tj.zeros(1, 2, 3, 4))


def test_pad_replays_under_compile():
    weight = tj.randn(3, 3, dtype=tj.float64, requires_grad=True)

    @tj.compile
    def step(x):
        loss = (tj.nn.functional.pad(x @ weight, (1, 2), mode="reflect") ** 2).sum()
        loss.backward()
        return loss

    x = tj.randn(4, 3, dtype=tj.float64)
    first = step(x).item()
    grad_first = weight.grad.clone()
    weight.grad = None
    again = step(x).item()
    assert again == pytest.approx(first, rel=1e-12)
    np.testing.assert_allclose(weight.grad.numpy(), grad_first.numpy(), rtol=1e-12)
