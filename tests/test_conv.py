"""Convolution, pooling, upsampling and channel dropout against torch: values, gradients of
every input, float64 and float32, many parameter combinations, torch's error messages,
the nn layers (constructors, ``repr``, initialisation, padding modes), integer tensors,
and a LeNet training step eagerly, replayed by ``tj.compile``, and against torch."""
import math
import re
import warnings

import numpy as np
import pytest

import tapejit as tj
import tapejit.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def _run(lib, fn, arrays, dtype, grads):
    """``fn(F, *tensors)`` in ``lib`` and the gradients of every tensor for a fixed cotangent."""
    to = {np.float64: (tj.float64, torch.float64), np.float32: (tj.float32, torch.float32)}[dtype]
    dt = to[0] if lib is tj else to[1]
    leaves = [lib.tensor(np.asarray(a, dtype), dtype=dt, requires_grad=g) for a, g in zip(arrays, grads)]
    out = fn(F if lib is tj else TF, *leaves)
    u = np.random.default_rng(7).standard_normal(tuple(out.shape)).astype(dtype)
    wanted = [x for x in leaves if x.requires_grad]
    got = lib.autograd.grad(out, wanted, grad_outputs=lib.tensor(u)) if wanted else []
    return out, [np.array(g.detach().numpy() if lib is torch else g.numpy()) for g in got]


def assert_like_torch(fn, shapes, dtype=np.float64, grads=None, seed=0, node=None):
    """Same value, output dtype and gradients as torch (1e-10 in float64, 1e-4 in float32)."""
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s) for s in shapes]
    grads = grads or [True] * len(arrays)
    out, g_tj = _run(tj, fn, arrays, dtype, grads)
    ref, g_pt = _run(torch, fn, arrays, dtype, grads)
    assert tuple(out.shape) == tuple(ref.shape)
    assert out.dtype is (tj.float64 if dtype == np.float64 else tj.float32)
    tol = dict(rtol=1e-10, atol=1e-10) if dtype == np.float64 else dict(rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), **tol)
    for i, (a, b) in enumerate(zip(g_tj, g_pt)):
        np.testing.assert_allclose(a, b, err_msg=f"gradient {i}", **tol)
    assert type(out.grad_fn).__name__ == type(ref.grad_fn).__name__
    if node is not None:
        assert type(out.grad_fn).__name__ == node


# ---- convolution ------------------------------------------------------------------------------

CONV2D = [
    # (input shape, weight shape, keyword arguments)
    ((2, 3, 7, 6), (4, 3, 3, 3), {}),
    ((2, 3, 7, 6), (4, 3, 3, 2), dict(stride=2)),
    ((2, 3, 7, 6), (4, 3, 3, 2), dict(stride=(2, 3), padding=(1, 2))),
    ((1, 2, 9, 8), (3, 2, 3, 3), dict(dilation=2, padding=2)),
    ((1, 2, 9, 8), (3, 2, 2, 3), dict(dilation=(3, 1), stride=(1, 2), padding=(0, 1))),
    ((2, 4, 6, 6), (6, 2, 3, 3), dict(groups=2, padding=1)),
    ((2, 6, 5, 5), (6, 1, 3, 3), dict(groups=6, stride=2, padding=1)),      # depthwise
    ((2, 6, 5, 5), (12, 1, 2, 2), dict(groups=6)),                          # channel multiplier 2
    ((1, 2, 5, 6), (3, 2, 2, 4), dict(padding="same")),                     # even kernels: one more after
    ((1, 2, 6, 5), (3, 2, 3, 2), dict(padding="same", dilation=(2, 3))),
    ((1, 2, 5, 5), (3, 2, 3, 3), dict(padding="valid")),
    ((2, 3, 4, 5), (5, 3, 1, 1), {}),                                       # 1x1: read in place
    ((2, 3, 4, 5), (5, 3, 1, 1), dict(stride=2)),
    ((1, 1, 4, 4), (2, 1, 4, 4), {}),                                       # kernel = input
    ((3, 2, 1, 7), (2, 2, 1, 3), dict(padding=(0, 1))),
]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("xs, ws, kw", CONV2D)
def test_conv2d_matches_torch(xs, ws, kw, bias):
    out_channels = ws[0]
    shapes = [xs, ws] + ([(out_channels,)] if bias else [])
    assert_like_torch(lambda F, *t: F.conv2d(*t, **kw), shapes, node="ConvolutionBackward0")


@pytest.mark.parametrize("xs, ws, kw", CONV2D[::3])
def test_conv2d_float32_matches_torch(xs, ws, kw):
    assert_like_torch(lambda F, x, w, b: F.conv2d(x, w, b, **kw), [xs, ws, (ws[0],)], dtype=np.float32)


@pytest.mark.parametrize("grads", [[True, False, False], [False, True, False], [False, False, True],
                                   [False, True, True]])
def test_conv2d_gradient_of_each_input_alone(grads):
    assert_like_torch(lambda F, x, w, b: F.conv2d(x, w, b, padding=1, groups=2), [(2, 4, 5, 5), (4, 2, 3, 3), (4,)],
                      grads=grads)


CONV1D = [
    ((2, 3, 9), (4, 3, 3), {}),
    ((2, 3, 9), (4, 3, 3), dict(stride=2, padding=2, dilation=2)),
    ((2, 4, 8), (6, 2, 3), dict(groups=2, padding=1)),
    ((1, 2, 7), (3, 2, 4), dict(padding="same")),
    ((1, 2, 7), (3, 2, 3), dict(padding="same", dilation=3)),
    ((2, 3, 5), (2, 3, 1), {}),
]


@pytest.mark.parametrize("xs, ws, kw", CONV1D)
def test_conv1d_matches_torch(xs, ws, kw):
    assert_like_torch(lambda F, x, w, b: F.conv1d(x, w, b, **kw), [xs, ws, (ws[0],)], node="ConvolutionBackward0")
    assert_like_torch(lambda F, x, w, b: F.conv1d(x, w, b, **kw), [xs, ws, (ws[0],)], dtype=np.float32)


CONV_TRANSPOSE2D = [
    ((2, 3, 4, 5), (3, 2, 3, 3), {}),
    ((2, 3, 4, 5), (3, 2, 3, 3), dict(stride=2)),
    ((2, 3, 4, 5), (3, 2, 3, 3), dict(stride=2, padding=1, output_padding=1)),
    ((1, 2, 3, 4), (2, 3, 2, 3), dict(stride=(3, 2), padding=(1, 0), output_padding=(2, 1))),
    ((1, 4, 3, 3), (4, 3, 2, 2), dict(groups=2, dilation=2, stride=(1, 2))),
    ((1, 2, 3, 3), (2, 2, 3, 3), dict(dilation=2, output_padding=1)),       # output_padding < dilation
    ((2, 3, 3, 3), (3, 4, 1, 1), {}),
]


@pytest.mark.parametrize("xs, ws, kw", CONV_TRANSPOSE2D)
def test_conv_transpose2d_matches_torch(xs, ws, kw):
    shapes = [xs, ws, (ws[1] * kw.get("groups", 1),)]
    assert_like_torch(lambda F, x, w, b: F.conv_transpose2d(x, w, b, **kw), shapes, node="ConvolutionBackward0")
    assert_like_torch(lambda F, x, w: F.conv_transpose2d(x, w, **kw), shapes[:2], dtype=np.float32)


def test_conv_transpose1d_matches_torch():
    assert_like_torch(lambda F, x, w, b: F.conv_transpose1d(x, w, b, stride=3, padding=1, output_padding=2),
                      [(2, 2, 4), (2, 3, 3), (3,)])


def test_unbatched_convolutions_match_torch():
    # torch adds the batch dim and squeezes it away: grad_fn SqueezeBackward1
    assert_like_torch(lambda F, x, w, b: F.conv2d(x, w, b, padding=1), [(3, 5, 4), (2, 3, 3, 3), (2,)],
                      node="SqueezeBackward1")
    assert_like_torch(lambda F, x, w: F.conv1d(x, w), [(3, 6), (2, 3, 2)])
    assert_like_torch(lambda F, x, w: F.conv_transpose2d(x, w, stride=2), [(3, 2, 2), (3, 2, 2, 2)])


def test_empty_batch_convolution():
    w = tj.randn(4, 3, 3, 3, requires_grad=True)
    out = F.conv2d(tj.zeros(0, 3, 5, 5), w)
    assert tuple(out.shape) == (0, 4, 3, 3)
    out.sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), np.zeros((4, 3, 3, 3), np.float32))


def test_int64_convolution_is_exact_like_torch():
    rng = np.random.default_rng(0)
    x = rng.integers(-50, 50, (2, 2, 5, 5))
    w = rng.integers(-9, 9, (3, 2, 3, 3))
    b = rng.integers(-9, 9, 3)
    out = F.conv2d(tj.tensor(x), tj.tensor(w), tj.tensor(b), padding=1, stride=2)
    ref = TF.conv2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), padding=1, stride=2)
    assert out.dtype is tj.int64
    np.testing.assert_array_equal(out.numpy(), ref.numpy())
    big = tj.tensor(np.full((1, 1, 2, 2), 2 ** 40))
    with pytest.raises(RuntimeError, match="2\\*\\*53"):
        F.conv2d(big, tj.tensor(np.full((1, 1, 2, 2), 2 ** 20)))


def _normalized(message):
    """A message with its printed sets of strings sorted: torch prints Python sets, whose
    order varies between processes."""
    def sort_set(match):
        return "{" + ", ".join(sorted(match.group(1).split(", "))) + "}"
    return re.sub(r"\{('[^{}]*')\}", sort_set, message)


def _raises_like_torch(call_tj, call_torch):
    """Both raise the same exception type with the same message."""
    with pytest.raises(Exception) as expected:
        call_torch()
    with pytest.raises(type(expected.value)) as got:
        call_tj()
    assert _normalized(str(got.value)) == _normalized(str(expected.value).replace("torch.Size", "tapejit.Size"))


def _pair(shape_x, shape_w, seed=0):
    rng = np.random.default_rng(seed)
    x, w = rng.standard_normal(shape_x).astype(np.float32), rng.standard_normal(shape_w).astype(np.float32)
    return (tj.tensor(x, requires_grad=True), tj.tensor(w, requires_grad=True)), \
        (torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True))


CONV_ERRORS = [
    # torch's own examples: the channel count names both shapes
    ("conv2d", (64, 1, 28, 28), (6, 2, 5, 5), {}),
    ("conv2d", (3, 4), (2, 1, 3, 3), {}),
    ("conv2d", (1, 1, 1, 3, 4), (2, 1, 3, 3), {}),
    ("conv2d", (1, 1, 2, 2), (2, 1, 3, 3), {}),
    ("conv2d", (1, 1, 5, 5), (2, 1, 3, 3), dict(padding=1, dilation=4)),
    ("conv1d", (1, 1, 2), (2, 1, 3), {}),
    ("conv2d", (1, 4, 5, 5), (3, 2, 3, 3), dict(groups=2)),
    ("conv2d", (1, 3, 5, 5), (4, 1, 3, 3), dict(groups=2)),
    ("conv2d", (1, 3, 5, 5), (2, 1, 3, 3), dict(groups=3)),
    ("conv2d", (1, 3, 5, 5), (4, 3, 3, 3), dict(stride=2, padding="same")),
    ("conv2d", (1, 3, 5, 5), (4, 3, 3, 3), dict(padding="foo")),
    ("conv2d", (1, 3, 5, 5), (4, 3, 3, 3), dict(stride=0)),
    ("conv2d", (1, 3, 5, 5), (4, 3, 3, 3), dict(padding=-1)),
    ("conv2d", (1, 3, 5, 5), (4, 3, 3, 3), dict(dilation=0)),
    ("conv2d", (1, 3, 5, 5), (4, 3, 3, 3), dict(groups=0)),
    ("conv2d", (1, 3, 5, 5), (4, 3, 3, 3), dict(stride=(1, 2, 3))),
    ("conv_transpose2d", (1, 3, 5, 5), (4, 2, 3, 3), {}),
    ("conv_transpose2d", (1, 3, 5, 5), (3, 2, 3, 3), dict(output_padding=1)),
    ("conv_transpose2d", (1, 3, 5, 5), (3, 2, 3, 3), dict(stride=2, output_padding=2)),
    ("conv_transpose2d", (1, 3, 1, 1), (3, 2, 1, 1), dict(padding=1)),
    ("conv_transpose2d", (1, 3, 5, 5), (3, 2, 3, 3), dict(padding="same")),
]


@pytest.mark.parametrize("name, xs, ws, kw", CONV_ERRORS)
def test_convolution_errors_are_torchs(name, xs, ws, kw):
    (x, w), (tx, tw) = _pair(xs, ws)
    _raises_like_torch(lambda: getattr(F, name)(x, w, **kw), lambda: getattr(TF, name)(tx, tw, **kw))


def test_convolution_dtype_and_bias_errors_are_torchs():
    x64 = np.zeros((1, 3, 5, 5))
    w32 = np.zeros((4, 3, 3, 3), np.float32)
    _raises_like_torch(lambda: F.conv2d(tj.tensor(x64), tj.tensor(w32)),
                       lambda: TF.conv2d(torch.tensor(x64), torch.tensor(w32)))
    _raises_like_torch(lambda: F.conv2d(tj.tensor(w32[:1]), tj.tensor(w32), tj.zeros(4, dtype=tj.float64)),
                       lambda: TF.conv2d(torch.tensor(w32[:1]), torch.tensor(w32), torch.zeros(4, dtype=torch.float64)))
    _raises_like_torch(lambda: F.conv2d(tj.tensor(w32[:1]), tj.tensor(w32), tj.zeros(3)),
                       lambda: TF.conv2d(torch.tensor(w32[:1]), torch.tensor(w32), torch.zeros(3)))
    _raises_like_torch(lambda: F.conv2d(tj.tensor(w32[:1]), tj.tensor(w32), tj.zeros(2, 2)),
                       lambda: TF.conv2d(torch.tensor(w32[:1]), torch.tensor(w32), torch.zeros(2, 2)))
    with pytest.raises(TypeError, match="conv2d\\(\\): argument 'input' \\(position 1\\) must be Tensor, not list"):
        F.conv2d([[1.0]], tj.tensor(w32))


# ---- max pooling ------------------------------------------------------------------------------

MAX_POOL2D = [
    ((2, 3, 6, 7), dict(kernel_size=2)),
    ((2, 3, 6, 7), dict(kernel_size=3, stride=2)),
    ((1, 2, 7, 7), dict(kernel_size=3, stride=2, padding=1)),
    ((1, 2, 8, 9), dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 1), dilation=(1, 2))),
    ((1, 2, 9, 9), dict(kernel_size=3, dilation=2, padding=1)),
    ((1, 2, 9, 9), dict(kernel_size=2, dilation=3, padding=1)),
    # ceil_mode: an extra window over the end, but never one starting in the right padding
    ((1, 2, 6, 6), dict(kernel_size=3, stride=2, ceil_mode=True)),
    ((1, 2, 5, 5), dict(kernel_size=2, stride=2, ceil_mode=True)),
    ((1, 2, 5, 5), dict(kernel_size=2, stride=2, padding=1, ceil_mode=True)),
    ((1, 1, 6, 6), dict(kernel_size=3, stride=3, padding=1, ceil_mode=True)),
    ((1, 1, 7, 4), dict(kernel_size=(4, 2), stride=(3, 3), padding=(2, 1), ceil_mode=True)),
    ((3, 5, 4), dict(kernel_size=2, stride=1)),                                 # unbatched
]


def _distinct(shape, seed=0):
    n = int(np.prod(shape))
    return (np.random.default_rng(seed).permutation(n).reshape(shape) - n / 2) * 0.25


@pytest.mark.parametrize("shape, kw", MAX_POOL2D)
def test_max_pool2d_matches_torch(shape, kw):
    x = _distinct(shape)
    for dtype in (np.float64, np.float32):
        out, g = _run(tj, lambda F, x: F.max_pool2d(x, **kw), [x], dtype, [True])
        ref, h = _run(torch, lambda F, x: F.max_pool2d(x, **kw), [x], dtype, [True])
        np.testing.assert_array_equal(out.detach().numpy(), ref.detach().numpy())
        np.testing.assert_allclose(g[0], h[0], rtol=1e-6)
    assert type(out.grad_fn).__name__ == "MaxPool2DWithIndicesBackward0"
    values, indices = F.max_pool2d(tj.tensor(x), return_indices=True, **kw)
    ref_values, ref_indices = TF.max_pool2d(torch.tensor(x), return_indices=True, **kw)
    assert indices.dtype is tj.int64
    np.testing.assert_array_equal(values.numpy(), ref_values.numpy())
    np.testing.assert_array_equal(indices.numpy(), ref_indices.numpy())


@pytest.mark.parametrize("kw", [dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=2, dilation=2),
                                dict(kernel_size=3, stride=2, ceil_mode=True), dict(kernel_size=[2])])
def test_max_pool1d_matches_torch(kw):
    x = _distinct((2, 3, 9))
    out, g = _run(tj, lambda F, x: F.max_pool1d(x, **kw), [x], np.float64, [True])
    ref, h = _run(torch, lambda F, x: F.max_pool1d(x, **kw), [x], np.float64, [True])
    np.testing.assert_array_equal(out.detach().numpy(), ref.detach().numpy())
    np.testing.assert_array_equal(g[0], h[0])
    assert type(out.grad_fn).__name__ == type(ref.grad_fn).__name__ == "SqueezeBackward1"
    values, indices = F.max_pool1d(tj.tensor(x), return_indices=True, **kw)
    ref_values, ref_indices = TF.max_pool1d(torch.tensor(x), return_indices=True, **kw)
    np.testing.assert_array_equal(values.numpy(), ref_values.numpy())
    np.testing.assert_array_equal(indices.numpy(), ref_indices.numpy())


def test_max_pool_ties_send_the_gradient_to_the_first_maximum_as_torch():
    x = np.array([[[[1.0, 1.0, 2.0, 2.0, 0.5],
                    [1.0, 0.0, 2.0, 1.0, 0.5],
                    [3.0, 3.0, -1.0, -1.0, 0.5],
                    [3.0, 3.0, -1.0, -1.0, 0.5]]]])
    for kw in (dict(kernel_size=2), dict(kernel_size=2, stride=1), dict(kernel_size=3, padding=1, ceil_mode=True)):
        out, g = _run(tj, lambda F, x: F.max_pool2d(x, **kw), [x], np.float64, [True])
        ref, h = _run(torch, lambda F, x: F.max_pool2d(x, **kw), [x], np.float64, [True])
        np.testing.assert_array_equal(g[0], h[0])
        _, indices = F.max_pool2d(tj.tensor(x), return_indices=True, **kw)
        _, ref_indices = TF.max_pool2d(torch.tensor(x), return_indices=True, **kw)
        np.testing.assert_array_equal(indices.numpy(), ref_indices.numpy())
    # a window of -inf only: torch's index is the window's first element
    minus = np.full((1, 1, 2, 4), -np.inf)
    _, indices = F.max_pool2d(tj.tensor(minus), 2, return_indices=True)
    assert indices.numpy().tolist() == [[[[0, 2]]]]


def test_max_pool_nan_wins_and_its_last_occurrence_gets_the_gradient_as_torch():
    nan = float("nan")
    x = np.array([[[[1.0, nan, 0.0, 2.0],
                    [nan, 2.0, 5.0, -np.inf],
                    [nan, nan, -np.inf, -np.inf],
                    [0.0, 1.0, -np.inf, -np.inf]]]])
    out, g = _run(tj, lambda F, x: F.max_pool2d(x, 2), [x], np.float64, [True])
    ref, h = _run(torch, lambda F, x: F.max_pool2d(x, 2), [x], np.float64, [True])
    np.testing.assert_array_equal(out.detach().numpy(), ref.detach().numpy())
    np.testing.assert_array_equal(g[0], h[0])
    _, indices = F.max_pool2d(tj.tensor(x), 2, return_indices=True)
    _, ref_indices = TF.max_pool2d(torch.tensor(x), 2, return_indices=True)
    np.testing.assert_array_equal(indices.numpy(), ref_indices.numpy())


def test_int64_max_and_avg_pools_match_torch():
    x = np.arange(-20, 16).reshape(1, 1, 6, 6) * 3 % 17 - 8
    for fn in (lambda F, t: F.max_pool2d(t, 3, stride=2, padding=1),
               lambda F, t: F.avg_pool2d(t, 3, stride=2, padding=1),
               lambda F, t: F.avg_pool2d(t, 2, count_include_pad=False, padding=1, ceil_mode=True),
               lambda F, t: F.avg_pool2d(t, 2, divisor_override=3),
               lambda F, t: F.avg_pool1d(t[0], 3, padding=1)):
        out = fn(F, tj.tensor(x))
        ref = fn(TF, torch.tensor(x))
        assert out.dtype is tj.int64
        np.testing.assert_array_equal(out.numpy(), ref.numpy())
    values, indices = F.max_pool2d(tj.tensor(x), 2, return_indices=True)
    ref_values, ref_indices = TF.max_pool2d(torch.tensor(x), 2, return_indices=True)
    np.testing.assert_array_equal(values.numpy(), ref_values.numpy())
    np.testing.assert_array_equal(indices.numpy(), ref_indices.numpy())


# ---- average and adaptive pooling ---------------------------------------------------------------

AVG_POOL2D = [
    ((2, 3, 6, 7), dict(kernel_size=2)),
    ((1, 2, 7, 7), dict(kernel_size=3, stride=2, padding=1)),
    ((1, 2, 7, 7), dict(kernel_size=3, stride=2, padding=1, count_include_pad=False)),
    ((1, 2, 6, 6), dict(kernel_size=3, stride=2, ceil_mode=True)),
    ((1, 2, 6, 6), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    ((1, 2, 6, 6), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)),
    ((1, 2, 5, 4), dict(kernel_size=(2, 3), stride=(1, 2), padding=(1, 1))),
    ((1, 2, 4, 4), dict(kernel_size=2, divisor_override=3)),
    ((1, 2, 5, 5), dict(kernel_size=3, padding=1, divisor_override=2, ceil_mode=True, stride=2)),
    ((3, 4, 5), dict(kernel_size=2)),
]


@pytest.mark.parametrize("shape, kw", AVG_POOL2D)
def test_avg_pool2d_matches_torch(shape, kw):
    assert_like_torch(lambda F, x: F.avg_pool2d(x, **kw), [shape], node="AvgPool2DBackward0")
    assert_like_torch(lambda F, x: F.avg_pool2d(x, **kw), [shape], dtype=np.float32)


@pytest.mark.parametrize("kw", [dict(kernel_size=3), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
                                dict(kernel_size=2, padding=1, count_include_pad=False)])
def test_avg_pool1d_matches_torch(kw):
    assert_like_torch(lambda F, x: F.avg_pool1d(x, **kw), [(2, 3, 8)], node="SqueezeBackward1")


@pytest.mark.parametrize("size", [(3, 4), 5, (1, 1), 1, (None, 2), (7, None), (2, 1), (9, 6)])
def test_adaptive_avg_pool2d_matches_torch(size):
    assert_like_torch(lambda F, x: F.adaptive_avg_pool2d(x, size), [(2, 3, 7, 5)])
    assert_like_torch(lambda F, x: F.adaptive_avg_pool2d(x, size), [(3, 7, 5)], dtype=np.float32)


def test_adaptive_avg_pool_of_one_output_is_torchs_mean():
    assert_like_torch(lambda F, x: F.adaptive_avg_pool2d(x, 1), [(2, 3, 4, 5)], node="MeanBackward1")


@pytest.mark.parametrize("size", [(3, 2), 4, (None, 3), (8, 8)])
def test_adaptive_max_pool2d_matches_torch(size):
    x = _distinct((2, 2, 7, 5))
    out, g = _run(tj, lambda F, x: F.adaptive_max_pool2d(x, size), [x], np.float64, [True])
    ref, h = _run(torch, lambda F, x: F.adaptive_max_pool2d(x, size), [x], np.float64, [True])
    np.testing.assert_array_equal(out.detach().numpy(), ref.detach().numpy())
    np.testing.assert_array_equal(g[0], h[0])
    assert type(out.grad_fn).__name__ == "AdaptiveMaxPool2DBackward0"
    values, indices = F.adaptive_max_pool2d(tj.tensor(x), size, return_indices=True)
    ref_values, ref_indices = TF.adaptive_max_pool2d(torch.tensor(x), size, return_indices=True)
    np.testing.assert_array_equal(values.numpy(), ref_values.numpy())
    np.testing.assert_array_equal(indices.numpy(), ref_indices.numpy())


def test_adaptive_1d_pools_match_torch():
    assert_like_torch(lambda F, x: F.adaptive_avg_pool1d(x, 4), [(2, 3, 9)], node="SqueezeBackward1")
    assert_like_torch(lambda F, x: F.adaptive_avg_pool1d(x, [12]), [(2, 3, 9)])
    x = _distinct((2, 3, 9))
    out, g = _run(tj, lambda F, x: F.adaptive_max_pool1d(x, 4), [x], np.float64, [True])
    ref, h = _run(torch, lambda F, x: F.adaptive_max_pool1d(x, 4), [x], np.float64, [True])
    np.testing.assert_array_equal(out.detach().numpy(), ref.detach().numpy())
    np.testing.assert_array_equal(g[0], h[0])
    _, indices = F.adaptive_max_pool1d(tj.tensor(x), 4, return_indices=True)
    _, ref_indices = TF.adaptive_max_pool1d(torch.tensor(x), 4, return_indices=True)
    np.testing.assert_array_equal(indices.numpy(), ref_indices.numpy())


POOL_ERRORS = [
    ("max_pool2d", (1, 3, 5, 5), (3,), dict(padding=2)),
    ("max_pool2d", (1, 3, 2, 2), (3,), {}),
    ("max_pool2d", (3, 4), (2,), {}),
    ("max_pool2d", (1, 1, 3, 4, 4), (2,), {}),
    ("max_pool2d", (1, 1, 4, 4), ((2, 2, 2),), {}),
    ("max_pool2d", (1, 1, 4, 4), (2,), dict(stride=0)),
    ("max_pool2d", (1, 1, 4, 4), (2,), dict(dilation=0)),
    ("max_pool2d", (1, 1, 4, 4), (0,), dict(stride=1)),
    ("max_pool2d", (1, 1, 9, 9), (2,), dict(padding=2, dilation=3)),
    ("max_pool2d", (2, 0, 5, 5), (2,), {}),
    ("max_pool2d", (1, 3, 5, 5), (2,), dict(padding=-1)),
    ("max_pool1d", (3,), (2,), {}),
    ("max_pool1d", (1, 2, 3, 4), (2,), {}),
    ("max_pool1d", (1, 3, 5), (0,), {}),
    ("max_pool1d", (1, 3, 5), (2, 0), {}),
    ("max_pool1d", (1, 3, 5), (2,), dict(dilation=0)),
    ("max_pool1d", (1, 3, 5), ((2, 2),), {}),
    ("max_pool1d", (1, 3, 5), (2,), dict(padding=2)),
    ("max_pool1d", (1, 3, 5), (2,), dict(padding=-1)),
    ("max_pool1d", (1, 3, 5), (7,), {}),
    ("max_pool1d", (1, 3, 5), (7,), dict(return_indices=True)),
    ("max_pool1d", (3,), (2,), dict(return_indices=True)),
    ("avg_pool2d", (1, 3, 5, 5), (3,), dict(padding=2)),
    ("avg_pool2d", (1, 3, 2, 2), (3,), {}),
    ("avg_pool2d", (3, 4), (2,), {}),
    ("avg_pool2d", (1, 3, 4, 4), (2,), dict(divisor_override=0)),
    ("avg_pool2d", (1, 3, 5, 5), ((2, 2, 2),), {}),
    ("avg_pool1d", (3,), (2,), {}),
    ("avg_pool1d", (1, 3, 5), (0,), {}),
    ("avg_pool1d", (1, 3, 5), ((2, 2),), {}),
    ("avg_pool1d", (1, 3, 2), (3,), {}),
    ("adaptive_avg_pool2d", (1, 3, 5, 5), (-1,), {}),
    ("adaptive_avg_pool2d", (3, 5), (2,), {}),
    ("adaptive_avg_pool2d", (1, 3, 0, 5), (2,), {}),
    ("adaptive_avg_pool2d", (2, 3, 5, 5), ((2, 2, 2),), {}),
    ("adaptive_avg_pool1d", (1, 3, 6), ((2, 3),), {}),
    ("adaptive_avg_pool1d", (3,), (2,), {}),
    ("adaptive_max_pool2d", (6, 5), (2,), {}),
    ("adaptive_max_pool2d", (2, 0, 5, 5), (2,), {}),
    ("adaptive_max_pool2d", (2, 3, 5, 5), ((2, 2, 2),), {}),
    ("adaptive_max_pool2d", (2, 3, 5, 5), (-1,), {}),
    ("adaptive_max_pool1d", (1, 3, 5), ((2, 2),), {}),
    ("adaptive_max_pool1d", (5,), (2,), {}),
]


@pytest.mark.parametrize("name, shape, args, kw", POOL_ERRORS)
def test_pool_errors_are_torchs(name, shape, args, kw):
    x = np.zeros(shape, np.float32)
    _raises_like_torch(lambda: getattr(F, name)(tj.tensor(x, requires_grad=True), *args, **kw),
                       lambda: getattr(TF, name)(torch.tensor(x, requires_grad=True), *args, **kw))


# ---- interpolate --------------------------------------------------------------------------------

INTERPOLATE = [
    ((2, 2, 3, 4), dict(scale_factor=2)),
    ((1, 2, 3, 4), dict(size=(5, 3))),
    ((1, 2, 3, 4), dict(size=7)),
    ((1, 1, 4, 5), dict(scale_factor=(1.7, 0.6))),
    ((1, 1, 5, 7), dict(scale_factor=1.3)),
    ((1, 1, 5, 7), dict(scale_factor=1.3, recompute_scale_factor=True)),
    ((1, 1, 6, 6), dict(scale_factor=0.5)),
    ((1, 1, 3, 4), dict(scale_factor=3)),
    ((1, 1, 4, 5), dict(scale_factor=(1.5, 0.7), mode="nearest-exact")),
    ((1, 1, 4, 5), dict(size=(7, 3), mode="nearest-exact")),
    ((2, 2, 3, 4), dict(scale_factor=2, mode="bilinear")),
    ((2, 2, 3, 4), dict(scale_factor=2, mode="bilinear", align_corners=True)),
    ((1, 2, 3, 4), dict(size=(5, 2), mode="bilinear", align_corners=True)),
    ((1, 2, 3, 4), dict(size=(5, 2), mode="bilinear")),
    ((1, 1, 5, 4), dict(scale_factor=(0.6, 1.5), mode="bilinear")),
    ((1, 1, 5, 4), dict(size=(1, 4), mode="bilinear", align_corners=True)),
    ((1, 1, 4, 4), dict(size=(4, 4), mode="bilinear")),
    ((1, 1, 5, 7), dict(scale_factor=1.3, mode="bilinear", recompute_scale_factor=True)),
    ((1, 2, 7, 5), dict(size=(3, 2), mode="area")),
    ((1, 2, 7, 5), dict(scale_factor=0.5, mode="area")),
    ((2, 3, 4), dict(size=7)),
    ((2, 3, 4), dict(scale_factor=2.5)),
    ((2, 3, 4), dict(size=7, mode="nearest-exact")),
    ((2, 3, 4), dict(size=7, mode="linear")),
    ((1, 2, 3), dict(scale_factor=2.5, mode="linear", align_corners=True)),
    ((1, 2, 9), dict(size=4, mode="area")),
]


@pytest.mark.parametrize("shape, kw", INTERPOLATE)
def test_interpolate_matches_torch(shape, kw):
    assert_like_torch(lambda F, x: F.interpolate(x, **kw), [shape])
    assert_like_torch(lambda F, x: F.interpolate(x, **kw), [shape], dtype=np.float32)


def test_nearest_uses_torchs_float32_index_rule():
    # floor(dst * float32(in / out)): 1/3 rounds down in float32, so index 3 * (1/3) floors to 0
    for in_size, out_size in [(10, 30), (7, 21), (5, 15), (13, 39), (100, 300), (9, 4), (3, 7)]:
        x = np.arange(in_size, dtype=np.float64).reshape(1, 1, in_size)
        out = F.interpolate(tj.tensor(x), size=out_size)
        ref = TF.interpolate(torch.tensor(x), size=out_size)
        np.testing.assert_array_equal(out.numpy(), ref.numpy())


INTERPOLATE_ERRORS = [
    ((1, 3, 4, 4), dict(size=8, scale_factor=2)),
    ((1, 3, 4, 4), {}),
    ((1, 3, 4, 4), dict(scale_factor=2, mode="foo")),
    ((1, 3, 4), dict(scale_factor=2, mode="bilinear")),
    ((1, 3, 4, 4), dict(scale_factor=2, mode="linear")),
    ((1, 3, 4, 4), dict(scale_factor=2, align_corners=True)),
    ((1, 3, 4, 4), dict(size=(2, 3, 4))),
    ((1, 3, 4, 4), dict(scale_factor=(2, 3, 4))),
    ((4, 4), dict(size=2)),
    ((1, 1, 4, 4), dict(size=(0, 3))),
    ((1, 1, 4), dict(size=0)),
    ((1, 1, 0, 4), dict(size=(2, 3))),
    ((1, 1, 4, 4), dict(size=(2.0, 3))),
    ((1, 1, 4, 4), dict(scale_factor=-1)),
    ((1, 1, 4, 4), dict(size=3, recompute_scale_factor=True)),
    ((1, 1, 4, 4), dict(scale_factor=2, antialias=True)),
]


@pytest.mark.parametrize("shape, kw", INTERPOLATE_ERRORS)
def test_interpolate_errors_are_torchs(shape, kw):
    x = np.zeros(shape, np.float32)
    _raises_like_torch(lambda: F.interpolate(tj.tensor(x), **kw), lambda: TF.interpolate(torch.tensor(x), **kw))


def test_interpolate_modes_tapejit_lacks_raise_naming_the_mode():
    with pytest.raises(NotImplementedError, match="'bicubic'"):
        F.interpolate(tj.zeros(1, 1, 4, 4), scale_factor=2, mode="bicubic")
    with pytest.raises(NotImplementedError, match="'nearest' on a 5-D input"):
        F.interpolate(tj.zeros(1, 1, 2, 2, 2), scale_factor=2)
    with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
        F.interpolate(tj.zeros(1, 1, 2, 2, dtype=tj.int64), scale_factor=2)


# ---- dropout2d ----------------------------------------------------------------------------------

def test_dropout2d_zeroes_whole_channels_and_scales_the_rest():
    tj.manual_seed(0)
    x = tj.ones(8, 16, 3, 3, requires_grad=True)
    out = F.dropout2d(x, 0.25)
    assert type(out.grad_fn).__name__ == "MulBackward0"
    values = out.detach().numpy()
    per_channel = values.reshape(8, 16, 9)
    assert np.all((per_channel == 0).all(-1) | (per_channel == np.float32(1 / 0.75)).all(-1))
    dropped = (per_channel == 0).all(-1).mean()
    assert 0.05 < dropped < 0.5
    out.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), values)
    assert F.dropout2d(x, 0.5, training=False) is x
    np.testing.assert_array_equal(F.dropout2d(x, 1.0).detach().numpy(), np.zeros((8, 16, 3, 3), np.float32))
    with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1, but got 1.5"):
        F.dropout2d(x, 1.5)


def test_dropout2d_warns_as_torch_for_3d_input():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = F.dropout2d(tj.ones(4, 5, 6), 0.5)
    assert any("assuming that channel-wise 1D dropout" in str(w.message) for w in seen)
    per_channel = out.numpy()
    assert np.all((per_channel == 0).all(-1) | (per_channel == 2).all(-1))


def test_dropout2d_module():
    m = tj.nn.Dropout2d(0.3)
    assert repr(m) == repr(torch.nn.Dropout2d(0.3)) == "Dropout2d(p=0.3, inplace=False)"
    m.eval()
    x = tj.ones(2, 3, 4, 4)
    assert m(x) is x
    with pytest.raises(ValueError):
        tj.nn.Dropout2d(-0.1)


# ---- nn layers ----------------------------------------------------------------------------------

MODULES = [
    ("Conv1d", (3, 4, 3), {}),
    ("Conv1d", (4, 6, 2), dict(stride=2, padding=1, dilation=2, groups=2, bias=False)),
    ("Conv2d", (1, 6, 5), {}),
    ("Conv2d", (4, 8, (3, 2)), dict(stride=(2, 1), padding=(1, 0), groups=4)),
    ("Conv2d", (2, 3, 4), dict(padding="same", dilation=2)),
    ("Conv2d", (2, 3, 3), dict(padding="valid", bias=False)),
    ("Conv2d", (2, 3, 3), dict(padding=1, padding_mode="reflect")),
    ("Conv2d", (2, 3, 3), dict(padding=(2, 1), padding_mode="replicate")),
    ("Conv2d", (2, 3, 3), dict(padding=2, padding_mode="circular")),
    ("Conv2d", (2, 3, 4), dict(padding="same", padding_mode="reflect")),
    ("Conv1d", (2, 3, 3), dict(padding=2, padding_mode="circular")),
    ("ConvTranspose2d", (4, 2, 3), dict(stride=2, padding=1, output_padding=1)),
    ("ConvTranspose2d", (4, 6, 2), dict(groups=2, dilation=2, bias=False)),
    ("ConvTranspose1d", (3, 2, 3), dict(stride=3)),
]


def _module_pair(name, args, kw):
    tj.manual_seed(0)
    m = getattr(tj.nn, name)(*args, **kw)
    ref = getattr(torch.nn, name)(*args, **kw).double()
    m = m.double()
    with torch.no_grad():
        for p, q in zip(m.parameters(), ref.parameters()):
            q.copy_(torch.tensor(p.detach().numpy()))
    return m, ref


@pytest.mark.parametrize("name, args, kw", MODULES)
def test_conv_modules_match_torch(name, args, kw):
    m, ref = _module_pair(name, args, kw)
    assert repr(m) == repr(ref)
    assert [tuple(p.shape) for p in m.parameters()] == [tuple(p.shape) for p in ref.parameters()]
    dims = 1 if name.endswith("1d") else 2
    shape = (2, args[0]) + (7,) * dims
    x = np.random.default_rng(1).standard_normal(shape)
    xt, xr = tj.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out, ref_out = m(xt), ref(xr)
    np.testing.assert_allclose(out.detach().numpy(), ref_out.detach().numpy(), rtol=1e-10, atol=1e-10)
    u = np.random.default_rng(2).standard_normal(tuple(ref_out.shape))
    out.backward(tj.tensor(u))
    ref_out.backward(torch.tensor(u))
    np.testing.assert_allclose(xt.grad.numpy(), xr.grad.numpy(), rtol=1e-10, atol=1e-10)
    for p, q in zip(m.parameters(), ref.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-10, atol=1e-10)


def test_conv_default_init_is_torchs_kaiming_uniform():
    # kaiming_uniform_(a=sqrt(5)) gives bound 1/sqrt(fan_in) for the weight, as for the bias
    tj.manual_seed(0)
    m = tj.nn.Conv2d(8, 64, 3)
    bound = 1 / math.sqrt(8 * 9)
    w, b = m.weight.detach().numpy(), m.bias.detach().numpy()
    assert w.dtype == np.float32 and m.weight.requires_grad
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.05 * bound
    assert np.abs(b).max() <= bound
    # transposed weights are (in, out/groups, k, k): torch's fan_in is out/groups * k * k
    t = tj.nn.ConvTranspose2d(4, 6, 3, groups=2)
    assert tuple(t.weight.shape) == (4, 3, 3, 3)
    assert np.abs(t.bias.detach().numpy()).max() <= 1 / math.sqrt(3 * 9)
    assert tj.nn.Conv1d(2, 3, 3, dtype=tj.float64).weight.dtype is tj.float64


@pytest.mark.parametrize("args, kw", [((3, 2, 3), dict(padding_mode="foo")), ((3, 2, 3), dict(groups=2)),
                                      ((4, 3, 3), dict(groups=2)), ((4, 2, 3), dict(padding="same", stride=2)),
                                      ((4, 2, 3), dict(padding="foo")), ((4, 2, 3), dict(groups=0))])
def test_conv_module_errors_are_torchs(args, kw):
    _raises_like_torch(lambda: tj.nn.Conv2d(*args, **kw), lambda: torch.nn.Conv2d(*args, **kw))


def test_conv_transpose_module_checks_and_output_size():
    _raises_like_torch(lambda: tj.nn.ConvTranspose2d(4, 3, 3, padding_mode="reflect"),
                       lambda: torch.nn.ConvTranspose2d(4, 3, 3, padding_mode="reflect"))
    m, ref = _module_pair("ConvTranspose2d", (3, 2, 3), dict(stride=2, padding=1))
    x = np.random.default_rng(0).standard_normal((1, 3, 4, 5))
    for size in [(8, 10), (7, 9), [1, 2, 8, 9]]:
        out = m(tj.tensor(x), output_size=size)
        np.testing.assert_allclose(out.detach().numpy(), ref(torch.tensor(x), output_size=size).detach().numpy(),
                                   rtol=1e-10, atol=1e-10)
    _raises_like_torch(lambda: m(tj.tensor(x), output_size=(10, 10)), lambda: ref(torch.tensor(x), output_size=(10, 10)))


def test_padding_mode_limits_are_torchs():
    m, ref = _module_pair("Conv2d", (1, 1, 3), dict(padding=3, padding_mode="reflect"))
    x = np.zeros((1, 1, 3, 3))
    _raises_like_torch(lambda: m(tj.tensor(x)), lambda: ref(torch.tensor(x)))


POOL_MODULES = [
    ("MaxPool2d", (2,), {}),
    ("MaxPool2d", (3,), dict(stride=2, padding=1, dilation=1, ceil_mode=True)),
    ("MaxPool1d", (3,), dict(stride=2, padding=1)),
    ("AvgPool2d", (3,), dict(stride=2, padding=1, count_include_pad=False)),
    ("AvgPool2d", ((2, 3),), dict(divisor_override=2)),
    ("AvgPool1d", (3,), dict(stride=2, ceil_mode=True)),
    ("AdaptiveAvgPool2d", ((3, None),), {}),
    ("AdaptiveAvgPool2d", (1,), {}),
    ("AdaptiveAvgPool1d", (4,), {}),
    ("AdaptiveMaxPool2d", ((3, 2),), {}),
    ("AdaptiveMaxPool1d", (3,), {}),
    ("Upsample", (), dict(scale_factor=2)),
    ("Upsample", (), dict(size=(9, 5), mode="bilinear")),
    ("Upsample", (), dict(scale_factor=(1.5, 2), mode="bilinear", align_corners=True)),
    ("Upsample", (), dict(size=9, mode="linear")),
    ("UpsamplingNearest2d", (), dict(scale_factor=3)),
    ("UpsamplingBilinear2d", (), dict(size=(4, 11))),
]


@pytest.mark.parametrize("name, args, kw", POOL_MODULES)
def test_pool_and_upsample_modules_match_torch(name, args, kw):
    m, ref = getattr(tj.nn, name)(*args, **kw), getattr(torch.nn, name)(*args, **kw)
    assert repr(m) == repr(ref)
    one_d = name.endswith("1d") or kw.get("mode") == "linear"
    x = _distinct((2, 3, 7) if one_d else (2, 3, 7, 6))
    xt, xr = tj.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out, ref_out = m(xt), ref(xr)
    np.testing.assert_allclose(out.detach().numpy(), ref_out.detach().numpy(), rtol=1e-12, atol=1e-12)
    out.sum().backward()
    ref_out.sum().backward()
    np.testing.assert_allclose(xt.grad.numpy(), xr.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_pool_modules_return_indices():
    x = _distinct((2, 3, 7, 6))
    for name, args in (("MaxPool2d", (2,)), ("AdaptiveMaxPool2d", ((3, 4),))):
        values, indices = getattr(tj.nn, name)(*args, return_indices=True)(tj.tensor(x))
        ref_values, ref_indices = getattr(torch.nn, name)(*args, return_indices=True)(torch.tensor(x))
        np.testing.assert_array_equal(indices.numpy(), ref_indices.numpy())
        np.testing.assert_array_equal(values.numpy(), ref_values.numpy())


# ---- LeNet: eager, replayed, and against torch ----------------------------------------------------

def _lenet(lib):
    nn = lib.nn
    return nn.Sequential(nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(256, 120), nn.ReLU(), nn.Linear(120, 84),
                         nn.ReLU(), nn.Linear(84, 10))


def _lenet_run(lib, params, x, y, steps, compiled=False):
    model = _lenet(lib)
    with lib.no_grad():
        for p, v in zip(model.parameters(), params):
            p.copy_(lib.tensor(v))
    opt = lib.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = lib.nn.CrossEntropyLoss()

    def step(xb, yb):
        opt.zero_grad()
        loss = loss_fn(model(xb), yb)
        loss.backward()
        return loss
    run = tj.compile(step) if compiled else step
    xb, yb = lib.tensor(x), lib.tensor(y)
    losses = []
    for _ in range(steps):
        losses.append(run(xb, yb).item())
        opt.step()
    if compiled:
        assert run.stats()["traces"] == 1
    return losses, [p.detach().numpy().copy() for p in model.parameters()]


def test_lenet_training_matches_torch_and_replays_like_eager():
    tj.manual_seed(0)
    params = [p.detach().numpy().copy() for p in _lenet(tj).parameters()]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, 16)
    eager_losses, eager_params = _lenet_run(tj, params, x, y, 6)
    replay_losses, replay_params = _lenet_run(tj, params, x, y, 6, compiled=True)
    torch_losses, torch_params = _lenet_run(torch, params, x, y, 6)
    np.testing.assert_allclose(replay_losses, eager_losses, rtol=1e-6)
    for a, b in zip(replay_params, eager_params):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(eager_losses, torch_losses, rtol=2e-4)
    for a, b in zip(eager_params, torch_params):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=2e-5)
    assert eager_losses[-1] < eager_losses[0]


def test_compile_refuses_return_indices_read_from_a_traced_value():
    @tj.compile
    def f(x):
        values, indices = F.max_pool2d(x * 2, 2, return_indices=True)
        return values.sum()
    with pytest.raises(tj.CompileError, match="reads a traced tensor's value"):
        f(tj.randn(1, 1, 4, 4, requires_grad=True))


@pytest.mark.parametrize("call", [lambda: F.conv2d(tj.zeros(1, 1, 5, 5), tj.zeros(1, 1, 3, 3), stride=1.5),
                                  lambda: F.conv2d(tj.zeros(1, 1, 5, 5), tj.zeros(1, 1, 3, 3), padding=(1.0, 1)),
                                  lambda: F.conv2d(tj.zeros(1, 1, 5, 5), tj.zeros(1, 1, 3, 3), stride=True),
                                  lambda: F.max_pool2d(tj.zeros(1, 1, 5, 5), 2.5),
                                  lambda: F.max_pool2d(tj.zeros(1, 1, 5, 5), 2, stride=1.5),
                                  lambda: F.avg_pool2d(tj.zeros(1, 1, 5, 5), 2.0),
                                  lambda: F.max_pool1d(tj.zeros(1, 5), 2.0),
                                  lambda: F.adaptive_avg_pool2d(tj.zeros(1, 1, 5, 5), 2.5)])
def test_non_integer_sizes_raise_type_error_as_torch(call):
    # torch refuses them (TypeError) rather than truncating 1.5 to 1
    with pytest.raises(TypeError):
        call()


def test_int64_transposed_convolution_matches_torch():
    rng = np.random.default_rng(1)
    x = rng.integers(-20, 20, (2, 4, 3, 3))
    w = rng.integers(-5, 5, (4, 3, 2, 2))
    out = F.conv_transpose2d(tj.tensor(x), tj.tensor(w), stride=2, groups=2)
    ref = TF.conv_transpose2d(torch.tensor(x), torch.tensor(w), stride=2, groups=2)
    np.testing.assert_array_equal(out.numpy(), ref.numpy())
