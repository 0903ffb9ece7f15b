"""Issue 17: the activations and small layers added as compositions of existing ops
(hardtanh ... alpha_dropout, pixel/channel shuffles, Bilinear): torch's values, gradients
(at the kinks too), node names, in-place forms, module reprs and errors; finite differences
through ``tapejit.testing.check_grads``."""
import numpy as np
import pytest

import tapejit as tj
import tapejit.nn.functional as F
from tapejit.testing import check_grads

DTYPES = [np.float32, np.float64]

#: name -> (tapejit's call, torch's call, the points where torch's subgradient is a choice)
ELEMENTWISE = {
    "hardtanh": (lambda f, x: f.hardtanh(x), [-1.0, 1.0]),
    "hardtanh_bounds": (lambda f, x: f.hardtanh(x, -2.0, 0.5), [-2.0, 0.5]),
    "relu6": (lambda f, x: f.relu6(x), [0.0, 6.0]),
    "hardsigmoid": (lambda f, x: f.hardsigmoid(x), [-3.0, 3.0]),
    "hardswish": (lambda f, x: f.hardswish(x), [-3.0, 3.0]),
    "logsigmoid": (lambda f, x: f.logsigmoid(x), [0.0]),
    "softsign": (lambda f, x: f.softsign(x), [0.0]),
    "mish": (lambda f, x: f.mish(x), [0.0]),
    "selu": (lambda f, x: f.selu(x), [0.0]),
    "celu": (lambda f, x: f.celu(x), [0.0]),
    "celu_alpha": (lambda f, x: f.celu(x, 2.0), [0.0]),
    "softshrink": (lambda f, x: f.softshrink(x), [-0.5, 0.5, 0.0]),
    "softshrink_lambd": (lambda f, x: f.softshrink(x, 1.5), [-1.5, 1.5]),
    "hardshrink": (lambda f, x: f.hardshrink(x), [-0.5, 0.5, 0.0]),
    "hardshrink_lambd": (lambda f, x: f.hardshrink(x, 1.0), [-1.0, 1.0]),
    "tanhshrink": (lambda f, x: f.tanhshrink(x), [0.0]),
    "threshold": (lambda f, x: f.threshold(x, 1.0, 20.0), [1.0]),
    "rrelu_eval": (lambda f, x: f.rrelu(x), [0.0]),
    "rrelu_eval_bounds": (lambda f, x: f.rrelu(x, 0.1, 0.5, training=False), [0.0]),
    "softmin": (lambda f, x: f.softmin(x, 1), []),
    "softmin_dim0": (lambda f, x: f.softmin(x, dim=0), []),
}


def _input(kinks, dtype, seed=3):
    x = np.random.default_rng(seed).uniform(-7, 7, (4, 6))
    flat = x.reshape(-1)
    flat[:len(kinks)] = kinks                    # torch's subgradients there
    flat[len(kinks):len(kinks) + 4] = [-40.0, 40.0, 1e-3, -1e-3]
    return x.astype(dtype)


def _torch_and_tapejit(call, x, weights):
    torch = pytest.importorskip("torch")
    tf = torch.nn.functional
    tx = torch.tensor(x, requires_grad=True)
    ty = call(tf, tx)
    (ty * torch.tensor(weights, dtype=ty.dtype)).sum().backward()
    jx = tj.tensor(x, requires_grad=True)
    jy = call(F, jx)
    (jy * tj.tensor(weights, dtype=jy.dtype)).sum().backward()
    return (ty, tx.grad), (jy, jx.grad)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ELEMENTWISE)
def test_values_gradients_and_nodes_match_torch_including_kinks(name, dtype):
    call, kinks = ELEMENTWISE[name]
    x = _input(kinks, dtype)
    weights = np.random.default_rng(1).standard_normal(x.shape)
    (ty, tg), (jy, jg) = _torch_and_tapejit(call, x, weights)
    rtol = 1e-6 if dtype == np.float32 else 1e-12
    assert jy.dtype == getattr(tj, np.dtype(dtype).name)
    # float32 tanhshrink near 0 is x - tanh(x): a ulp of tanh apart, as in torch's two calls
    np.testing.assert_allclose(jy.detach().numpy(), ty.detach().numpy(), rtol=rtol,
                               atol=1e-9 if dtype == np.float32 else 1e-30)
    # hardsigmoid: torch's float64 gradient is the float32 1/6 (0.16666667163...), a ulp
    # of float32 away from 1/6 here
    grad_rtol = 1e-7 if name == "hardsigmoid" and dtype == np.float64 else rtol
    # float32: hardswish's x/3 + 1/2 (torch) and the product rule's round differently near -3/2
    # float64 selu/celu at -40: exp(-40) ~ 4e-18, which tapejit's elu composition (expm1's
    # gradient from its result) rounds to 0
    grad_atol = 1e-6 if dtype == np.float32 else 1e-16
    np.testing.assert_allclose(jg.numpy(), tg.numpy(), rtol=grad_rtol, atol=grad_atol)
    assert jy.grad_fn.name() == ty.grad_fn.name()


@pytest.mark.parametrize("name", ELEMENTWISE)
def test_finite_differences_away_from_kinks(name):
    call, _ = ELEMENTWISE[name]
    x = np.random.default_rng(5).uniform(-5, 5, (3, 4))
    x[np.abs(x[..., None] - np.array([-3.0, -2.0, -1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 3.0, 6.0])).min(-1) < 0.05] = 0.25
    check_grads(lambda t: call(F, t), [x], rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("name, op", [("hardtanh", lambda f, x, i: f.hardtanh(x, -0.5, 2.0, inplace=i)),
                                      ("relu6", lambda f, x, i: f.relu6(x, inplace=i)),
                                      ("hardsigmoid", lambda f, x, i: f.hardsigmoid(x, inplace=i)),
                                      ("hardswish", lambda f, x, i: f.hardswish(x, inplace=i)),
                                      ("mish", lambda f, x, i: f.mish(x, inplace=i)),
                                      ("selu", lambda f, x, i: f.selu(x, inplace=i)),
                                      ("celu", lambda f, x, i: f.celu(x, 0.5, inplace=i)),
                                      ("threshold", lambda f, x, i: f.threshold(x, 0.3, -2.0, inplace=i)),
                                      ("rrelu", lambda f, x, i: f.rrelu(x, inplace=i))])
def test_inplace_forms_write_the_input_and_keep_the_gradient(name, op):
    """As relu(inplace=True): the non-leaf is overwritten and returned, the gradient flows
    through the op to the leaf; a leaf that requires grad is refused."""
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(7).uniform(-4, 7, (3, 5))
    x[0, :3] = [0.0, 6.0, -3.0]
    tx = torch.tensor(x, requires_grad=True)
    tmid = tx * 1.0
    tout = op(torch.nn.functional, tmid, True)
    (tout * tout).sum().backward()
    jx = tj.tensor(x, requires_grad=True)
    jmid = jx * 1.0
    jout = op(F, jmid, True)
    assert jout is jmid
    (jout * jout).sum().backward()
    np.testing.assert_allclose(jmid.detach().numpy(), tmid.detach().numpy(), rtol=1e-12)
    # hardsigmoid: torch's float64 gradient is float32's 1/6
    np.testing.assert_allclose(jx.grad.numpy(), tx.grad.numpy(), rtol=1e-7 if name == "hardsigmoid" else 1e-12)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        op(F, tj.tensor(x, requires_grad=True), True)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, slopes", [((4, 3, 2), [0.25]), ((4, 3, 2), [0.1, -0.2, 0.3]), ((5,), [0.4]),
                                           ((2, 3), [0.1, 0.2, 0.3])])
def test_prelu_matches_torch_with_one_or_per_channel_slopes(shape, slopes, dtype):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(2).uniform(-2, 2, shape).astype(dtype)
    x.reshape(-1)[:2] = 0.0
    w = np.array(slopes, dtype)
    up = np.random.default_rng(4).standard_normal(shape)
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    ty = torch.nn.functional.prelu(tx, tw)
    (ty * torch.tensor(up, dtype=ty.dtype)).sum().backward()
    jx, jw = tj.tensor(x, requires_grad=True), tj.tensor(w, requires_grad=True)
    jy = F.prelu(jx, jw)
    (jy * tj.tensor(up, dtype=jy.dtype)).sum().backward()
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(jy.detach().numpy(), ty.detach().numpy(), rtol=rtol)
    np.testing.assert_allclose(jx.grad.numpy(), tx.grad.numpy(), rtol=rtol)
    np.testing.assert_allclose(jw.grad.numpy(), tw.grad.numpy(), rtol=rtol, atol=1e-6)
    assert jy.grad_fn.name() == ty.grad_fn.name() == "PreluKernelBackward0"


def test_prelu_finite_differences_and_errors():
    x = np.random.default_rng(8).uniform(-2, 2, (2, 3, 2))
    x[np.abs(x) < 0.05] = 0.5
    check_grads(lambda t, w: F.prelu(t, w), [x, np.array([0.1, 0.2, 0.3])])
    # torch's messages
    with pytest.raises(RuntimeError, match="Mismatch of parameter numbers and input channel size. Found parameter "
                                           "numbers = 2 and channel size = 3."):
        F.prelu(tj.tensor(x), tj.tensor([0.1, 0.2]))
    with pytest.raises(RuntimeError, match="Not allow zero-dim input tensor."):
        F.prelu(tj.tensor(1.0), tj.tensor([0.1]))


@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_glu_matches_torch(dim):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(9).standard_normal((4, 6, 2))
    up = np.random.default_rng(10).standard_normal(torch.nn.functional.glu(torch.tensor(x), dim).shape)
    tx = torch.tensor(x, requires_grad=True)
    ty = torch.nn.functional.glu(tx, dim)
    (ty * torch.tensor(up)).sum().backward()
    jx = tj.tensor(x, requires_grad=True)
    jy = F.glu(jx, dim)
    (jy * tj.tensor(up)).sum().backward()
    np.testing.assert_allclose(jy.detach().numpy(), ty.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(jx.grad.numpy(), tx.grad.numpy(), rtol=1e-12)
    assert jy.grad_fn.name() == ty.grad_fn.name() == "GluBackward0"
    check_grads(lambda t: F.glu(t, dim), [x])


def test_glu_softshrink_hardtanh_errors_are_torchs():
    torch = pytest.importorskip("torch")
    for call in (lambda f, t: f.glu(t, 1), lambda f, t: f.softshrink(t, -1.0), lambda f, t: f.hardtanh(t, 2.0, 1.0),
                 lambda f, t: f.celu(t, 0.0)):
        with pytest.raises(Exception) as expected:
            call(torch.nn.functional, torch.zeros(2, 3))
        with pytest.raises(type(expected.value)) as got:
            call(F, tj.zeros(2, 3))
        assert str(got.value) == str(expected.value)
    with pytest.raises(AssertionError, match=r"max_val \(1.0\) must be greater than min_val \(2.0\)"):
        tj.nn.Hardtanh(2.0, 1.0)


def test_rrelu_training_draws_slopes_from_tapejits_generator():
    """torch: each x <= 0 times a slope uniform in [lower, upper), x > 0 unchanged, the slope
    also the gradient (RreluWithNoiseBackward0); the eval slope is the mean."""
    x = np.random.default_rng(11).uniform(-3, 3, (50, 40))
    x[0, :2] = 0.0
    tj.manual_seed(0)
    jx = tj.tensor(x, requires_grad=True)
    y = F.rrelu(jx, 0.1, 0.3, training=True)
    y.sum().backward()
    out, grad = y.detach().numpy(), jx.grad.numpy()
    assert y.grad_fn.name() == "RreluWithNoiseBackward0"
    positive = x > 0
    np.testing.assert_array_equal(out[positive], x[positive])
    np.testing.assert_array_equal(grad[positive], 1.0)
    slopes = grad[~positive]
    assert slopes.min() >= 0.1 and slopes.max() < 0.3 and abs(slopes.mean() - 0.2) < 0.01
    np.testing.assert_allclose(out[~positive], x[~positive] * slopes, rtol=1e-15)
    tj.manual_seed(0)
    np.testing.assert_array_equal(F.rrelu(tj.tensor(x), 0.1, 0.3, training=True).numpy(), out)
    m = tj.nn.RReLU(0.1, 0.3)
    m.eval()
    np.testing.assert_allclose(m(tj.tensor(x)).numpy(), np.where(x > 0, x, 0.2 * x), rtol=1e-15)


def test_alpha_dropout_is_torchs_affine_map_of_the_kept_mask():
    """torch: a = (alpha'^2 p + 1)^-1/2 (1 - p)^-1/2 with alpha' = 1.7580993408473766;
    kept x -> a x + alpha' a p, dropped -> -alpha' a + alpha' a p; the gradient is a on kept
    elements and 0 on dropped; the mean and variance of a standard normal input are kept."""
    alpha, p = 1.7580993408473766, 0.2
    a = 1.0 / np.sqrt((alpha * alpha * p + 1) * (1 - p))
    x = np.random.default_rng(12).standard_normal((400, 250))
    tj.manual_seed(3)
    jx = tj.tensor(x, requires_grad=True)
    y = F.alpha_dropout(jx, p, training=True)
    y.sum().backward()
    assert y.grad_fn.name() == "AddBackward0"
    kept = jx.grad.numpy() != 0
    assert abs(kept.mean() - (1 - p)) < 0.01
    np.testing.assert_allclose(jx.grad.numpy()[kept], a, rtol=1e-15)
    out = y.detach().numpy()
    np.testing.assert_allclose(out[kept], a * x[kept] + alpha * a * p, rtol=1e-12)
    np.testing.assert_allclose(out[~kept], -alpha * a + alpha * a * p, rtol=1e-12)
    assert abs(out.mean()) < 0.02 and abs(out.std() - 1.0) < 0.02
    xt = tj.tensor(x)
    assert F.alpha_dropout(xt, p) is xt and F.alpha_dropout(xt, p, training=True, inplace=False) is not xt
    np.testing.assert_array_equal(F.alpha_dropout(tj.tensor(x), 1.0, training=True).numpy(), 0.0)
    with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1, but got 1.5"):
        F.alpha_dropout(xt, 1.5)
    m = tj.nn.AlphaDropout(p)
    m.eval()
    assert m(xt) is xt


@pytest.mark.parametrize("dtype", DTYPES)
def test_pixel_and_channel_shuffles_match_torch(dtype):
    torch = pytest.importorskip("torch")
    tf = torch.nn.functional
    cases = [(lambda f, t: f.pixel_shuffle(t, 2), (2, 8, 3, 4)), (lambda f, t: f.pixel_shuffle(t, 3), (9, 2, 2)),
             (lambda f, t: f.pixel_unshuffle(t, 2), (2, 3, 4, 6)), (lambda f, t: f.pixel_unshuffle(t, 3), (1, 2, 1, 6, 3)),
             (lambda f, t: f.channel_shuffle(t, 3), (2, 6, 2, 2)), (lambda f, t: f.channel_shuffle(t, 2), (2, 4, 3))]
    for call, shape in cases:
        x = np.random.default_rng(13).standard_normal(shape).astype(dtype)
        tx = torch.tensor(x, requires_grad=True)
        ty = call(tf, tx)
        up = np.random.default_rng(14).standard_normal(ty.shape).astype(dtype)
        (ty * torch.tensor(up)).sum().backward()
        jx = tj.tensor(x, requires_grad=True)
        jy = call(F, jx)
        (jy * tj.tensor(up)).sum().backward()
        assert tuple(jy.shape) == tuple(ty.shape)
        np.testing.assert_array_equal(jy.detach().numpy(), ty.detach().numpy())
        np.testing.assert_array_equal(jx.grad.numpy(), tx.grad.numpy())
        assert jy.grad_fn.name() == ty.grad_fn.name()


def test_shuffle_errors_are_torchs():
    torch = pytest.importorskip("torch")
    for call, shape in [(lambda f, t: f.pixel_shuffle(t, 2), (2, 7, 3, 3)), (lambda f, t: f.pixel_shuffle(t, 2), (3, 3)),
                        (lambda f, t: f.pixel_unshuffle(t, 2), (1, 1, 3, 4)),
                        (lambda f, t: f.pixel_unshuffle(t, 2), (1, 1, 4, 3)),
                        (lambda f, t: f.channel_shuffle(t, 4), (1, 6, 2))]:
        with pytest.raises(RuntimeError) as expected:
            call(torch.nn.functional, torch.zeros(shape))
        with pytest.raises(RuntimeError) as got:
            call(F, tj.zeros(shape))
        assert str(got.value) == str(expected.value)


@pytest.mark.parametrize("bias", [True, False])
def test_bilinear_matches_torch(bias):
    torch = pytest.importorskip("torch")
    tj.manual_seed(0)
    m = tj.nn.Bilinear(3, 4, 5, bias=bias, dtype=tj.float64)
    tm = torch.nn.Bilinear(3, 4, 5, bias=bias, dtype=torch.float64)
    with torch.no_grad():
        tm.weight.copy_(torch.tensor(m.weight.detach().numpy()))
        if bias:
            tm.bias.copy_(torch.tensor(m.bias.detach().numpy()))
    assert repr(m) == repr(tm)
    bound = 1 / np.sqrt(3)
    assert np.abs(m.weight.detach().numpy()).max() <= bound and tuple(m.weight.shape) == (5, 3, 4)
    x1 = np.random.default_rng(15).standard_normal((2, 6, 3))
    x2 = np.random.default_rng(16).standard_normal((2, 6, 4))
    t1, t2 = torch.tensor(x1, requires_grad=True), torch.tensor(x2, requires_grad=True)
    ty = tm(t1, t2)
    ty.pow(2).sum().backward()
    j1, j2 = tj.tensor(x1, requires_grad=True), tj.tensor(x2, requires_grad=True)
    jy = m(j1, j2)
    jy.pow(2).sum().backward()
    np.testing.assert_allclose(jy.detach().numpy(), ty.detach().numpy(), rtol=1e-12)
    for j, t in [(j1, t1), (j2, t2), (m.weight, tm.weight)] + ([(m.bias, tm.bias)] if bias else []):
        np.testing.assert_allclose(j.grad.numpy(), t.grad.numpy(), rtol=1e-11)
    assert jy.grad_fn.name() == ty.grad_fn.name()
    check_grads(lambda a, b, w: F.bilinear(a, b, w), [x1[0, :2], x2[0, :2], m.weight.detach().numpy()])
    with pytest.raises(RuntimeError, match="bilinear\\(\\): input batch dimensions do not match at dim 0: got 5 and 4"):
        F.bilinear(tj.zeros(5, 3), tj.zeros(4, 4), m.weight)


def test_module_reprs_and_forwards_are_torchs():
    torch = pytest.importorskip("torch")
    tn = torch.nn
    pairs = [("Hardtanh", ()), ("Hardtanh", (-2, 3, True)), ("ReLU6", ()), ("ReLU6", (True,)), ("Hardsigmoid", ()),
             ("Hardswish", (True,)), ("LogSigmoid", ()), ("Softsign", ()), ("Mish", ()), ("Mish", (True,)),
             ("SELU", ()), ("SELU", (True,)), ("CELU", ()), ("CELU", (2.0, True)), ("PReLU", ()), ("PReLU", (6, 0.1)),
             ("GLU", ()), ("GLU", (1,)), ("Softshrink", ()), ("Hardshrink", (0.3,)), ("Tanhshrink", ()),
             ("Threshold", (0.1, 20)), ("Threshold", (0.1, 20, True)), ("RReLU", ()), ("RReLU", (0.1, 0.3, True)),
             ("Softmin", ()), ("Softmin", (1,)), ("Softmax2d", ()), ("AlphaDropout", ()), ("AlphaDropout", (0.2, True)),
             ("PixelShuffle", (2,)), ("PixelUnshuffle", (3,)), ("ChannelShuffle", (2,))]
    x = np.random.default_rng(17).uniform(-4, 4, (2, 6, 6, 6)).astype(np.float32)   # PReLU's weight is float32
    x.reshape(-1)[:4] = [0.0, -3.0, 3.0, 6.0]
    for name, args in pairs:
        mine, theirs = getattr(tj.nn, name)(*args), getattr(tn, name)(*args)
        assert repr(mine) == repr(theirs)
        if name in ("RReLU", "AlphaDropout"):
            mine.eval()
            theirs.eval()
        if name in ("PixelShuffle", "PixelUnshuffle"):
            continue                           # their shapes: test_pixel_and_channel_shuffles_match_torch
        kwargs = {"dim": 1} if name == "Softmin" and not args else {}
        if kwargs:
            mine.dim = theirs.dim = 1
        got = mine(tj.tensor(x.copy())).detach().numpy()
        want = theirs(torch.tensor(x.copy())).detach().numpy()
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7, err_msg=name)
    prelu = tj.nn.PReLU(6, 0.3)
    assert [p.shape for p in prelu.parameters()] == [(6,)] and np.all(prelu.weight.detach().numpy() == 0.3)
    with pytest.raises(ValueError, match="Softmax2d: expected input to be 3D or 4D, got 2D instead"):
        tj.nn.Softmax2d()(tj.zeros(2, 3))


def test_softmin_without_dim_warns_like_torch():
    with pytest.warns(UserWarning, match="Implicit dimension choice for softmin has been deprecated"):
        y = F.softmin(tj.tensor([[1.0, 2.0], [3.0, 5.0]]))
    np.testing.assert_allclose(y.numpy().sum(1), 1.0)
    z = F.softmin(tj.tensor([1.0, 2.0]), 0, dtype=tj.float64)
    assert z.dtype == tj.float64
    np.testing.assert_allclose(z.numpy(), [0.7310585786300049, 0.2689414213699951], rtol=1e-15)   # torch's


@pytest.mark.parametrize("name", ["hardtanh", "relu6", "hardsigmoid", "hardswish", "softshrink", "hardshrink", "celu",
                                  "selu", "mish", "logsigmoid", "softsign", "tanhshrink", "rrelu_eval"])
def test_compositions_trace_under_compile(name):
    """No comparison reads values, so tj.compile replays them: a replay on new inputs (kinks
    included) gives the eager values and gradients (to the last bit of a gradient: the
    frozen trace computes ``call(F, t)`` once and sums its two readers' gradients there)."""
    call, _ = ELEMENTWISE[name]
    compiled = tj.compile(lambda t: (call(F, t) * call(F, t)).sum())
    compiled(tj.tensor(np.array([-2.0, 0.3, 4.0, -7.0]), requires_grad=True)).backward()
    for x in (np.array([-3.0, -1.0, 0.0, 6.0]), np.array([0.5, 3.0, -0.5, 1.0])):
        traced, eager = tj.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
        y = compiled(traced)
        y.backward()
        z = (call(F, eager) * call(F, eager)).sum()
        z.backward()
        assert y.item() == z.item()
        np.testing.assert_allclose(traced.grad.numpy(), eager.grad.numpy(), rtol=1e-15, atol=0)


def test_threshold_is_refused_under_compile_not_frozen():
    """threshold's mask is a comparison read into Python: refused, never a stale replay."""
    compiled = tj.compile(lambda t: F.threshold(t, 0.5, -1.0).sum())
    with pytest.raises(tj.CompileError, match="threshold reads a traced tensor's value"):
        compiled(tj.tensor([0.2, 0.7], requires_grad=True))


@pytest.mark.parametrize("name", ["hardtanh", "relu6", "hardsigmoid", "hardswish", "softshrink", "hardshrink", "mish",
                                  "selu", "celu", "logsigmoid", "softsign"])
def test_integer_inputs_as_torch(name):
    """torch clamps integers in their dtype (hardtanh, relu6), computes softsign in float
    and refuses the float-only kernels with NotImplementedError naming them."""
    torch = pytest.importorskip("torch")
    call, _ = ELEMENTWISE[name]
    try:
        want = call(torch.nn.functional, torch.tensor([-2, 1, 7]))
    except NotImplementedError as e:
        with pytest.raises(NotImplementedError) as got:
            call(F, tj.tensor([-2, 1, 7]))
        assert str(got.value) == str(e)
        return
    got = call(F, tj.tensor([-2, 1, 7]))
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


@pytest.mark.parametrize("name", ["hardswish", "mish", "selu", "celu", "logsigmoid", "softsign", "tanhshrink",
                                  "softmin"])
def test_second_derivatives_match_torch(name):
    torch = pytest.importorskip("torch")
    call, _ = ELEMENTWISE[name]
    x = np.array([[-3.5, -1.2, -0.3, 0.4], [1.1, 2.5, 6.5, -0.8]])
    tx = torch.tensor(x, requires_grad=True)
    tg, = torch.autograd.grad((call(torch.nn.functional, tx) ** 2).sum(), tx, create_graph=True)
    th, = torch.autograd.grad((tg * tg).sum(), tx)
    jx = tj.tensor(x, requires_grad=True)
    jg, = tj.autograd.grad((call(F, jx) ** 2).sum(), jx, create_graph=True)
    jh, = tj.autograd.grad((jg * jg).sum(), jx)
    np.testing.assert_allclose(jh.numpy(), th.numpy(), rtol=1e-10, atol=1e-12)


def test_signed_zero_values_are_torchs():
    """torch's hardshrink gives +0.0 inside [-lambd, lambd] (x * mask gave -0.0 for negative
    x); its hardtanh/relu6 keep x = -0.0 as -0.0 (clamp's value)."""
    torch = pytest.importorskip("torch")
    x = [-0.3, 0.3, -0.0, 0.0, -0.6, -3.0, 7.0]
    for name, call in [("hardshrink", lambda f, t: f.hardshrink(t)), ("hardtanh", lambda f, t: f.hardtanh(t)),
                       ("relu6", lambda f, t: f.relu6(t))]:
        got = call(F, tj.tensor(x, requires_grad=True)).detach().numpy()
        want = call(torch.nn.functional, torch.tensor(x, requires_grad=True)).detach().numpy()
        np.testing.assert_array_equal(got, want, err_msg=name)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=name)


def test_hardtanh_accepts_torchs_deprecated_keywords():
    """torch's Hardtanh(min_value=, max_value=) (pre-1.0 names): the bounds, with its FutureWarning."""
    with pytest.warns(FutureWarning) as caught:
        m = tj.nn.Hardtanh(min_value=-2.0, max_value=0.5)
    assert [str(w.message) for w in caught] == [
        "keyword argument `min_value` is deprecated and renamed to `min_val`",
        "keyword argument `max_value` is deprecated and renamed to `max_val`"]
    assert (m.min_val, m.max_val) == (-2.0, 0.5)
    assert repr(m) == "Hardtanh(min_val=-2.0, max_val=0.5)"     # torch's
    np.testing.assert_array_equal(m(tj.tensor([-3.0, 0.25, 1.0])).numpy(), [-2.0, 0.25, 0.5])


@pytest.mark.parametrize("name, args", [("relu_", ()), ("elu_", (0.5,)), ("leaky_relu_", (0.2,)),
                                        ("hardtanh_", (-0.5, 0.5)), ("threshold_", (0.3, -2.0)), ("celu_", (0.7,)),
                                        ("selu_", ()), ("rrelu_", ())])
def test_functional_inplace_names_are_torchs(name, args):
    """torch.nn.functional.relu_ and the rest: the input written and returned, gradients
    through it as torch's, a leaf that requires grad refused."""
    torch = pytest.importorskip("torch")
    x = [[-1.0, 2.0, 0.5], [3.0, -0.2, 0.1]]
    results = []
    for lib in (tj, torch):
        leaf = lib.tensor(x, requires_grad=True)
        mid = leaf * 1.0
        assert getattr(lib.nn.functional, name)(mid, *args) is mid
        (mid * mid).sum().backward()
        results.append((mid.detach().numpy(), leaf.grad.numpy()))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-6)
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-6)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place operation"):
        getattr(F, name)(tj.ones(2, requires_grad=True), *args)
