"""tj.distributions against torch.distributions: log_prob, entropy, moments and KL values
and their gradients with respect to the parameters, reparameterised samples' gradients on
a fixed noise, sample moments (statistically, with a fixed seed), shapes, and torch's
validation errors."""
import math

import numpy as np
import pytest
import scipy.special as sc

import tapejit as tj

torch = pytest.importorskip("torch")
D = tj.distributions
TD = torch.distributions


def _pair(x):
    x = np.asarray(x, np.float64)
    return tj.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)


def _close(a, b, rtol=1e-10, atol=1e-12):
    a = a.detach().numpy() if isinstance(a, tj.Tensor) else np.asarray(a)
    b = b.detach().numpy() if isinstance(b, torch.Tensor) else np.asarray(b)
    assert a.shape == b.shape, f"shape {a.shape} vs torch {b.shape}"
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, equal_nan=True)


def _grads_match(ours, theirs, tj_params, torch_params, rtol=1e-10):
    """The gradients of sum(ours) and sum(theirs) w.r.t. the paired parameters."""
    # retain_graph: lazily computed parameterisations (probs from logits) stay in later graphs
    g = tj.autograd.grad(ours.sum(), tj_params, allow_unused=True, retain_graph=True)
    h = torch.autograd.grad(theirs.sum(), torch_params, allow_unused=True, retain_graph=True)
    for i, (a, b) in enumerate(zip(g, h)):
        if b is None:
            assert a is None or np.all(a.numpy() == 0), f"parameter {i}: torch has no gradient"
            continue
        _close(a, b, rtol=rtol, atol=1e-12)


RNG = np.random.default_rng(0)
POS = RNG.uniform(0.5, 3.0, (2, 3))
POS2 = RNG.uniform(0.5, 3.0, (2, 3))
REAL = RNG.standard_normal((2, 3))
PROB = RNG.uniform(0.1, 0.9, (2, 3))

# name -> (constructor args as arrays, a function (module, *params) -> distribution, a value in support)
CASES = {
    "Normal": ([REAL, POS], lambda m, a, b: m.Normal(a, b), RNG.standard_normal((4, 2, 3))),
    "Uniform": ([REAL, POS], lambda m, a, b: m.Uniform(a, a + b), REAL + POS * 0.4),
    "Exponential": ([POS], lambda m, a: m.Exponential(a), RNG.uniform(0.1, 3, (2, 3))),
    "Laplace": ([REAL, POS], lambda m, a, b: m.Laplace(a, b), RNG.standard_normal((2, 3))),
    "Gamma": ([POS, POS2], lambda m, a, b: m.Gamma(a, b), RNG.uniform(0.1, 3, (5, 2, 3))),
    "Beta": ([POS, POS2], lambda m, a, b: m.Beta(a, b), RNG.uniform(0.05, 0.95, (2, 3))),
    "Dirichlet": ([POS], lambda m, a: m.Dirichlet(a), RNG.dirichlet([1.0, 2.0, 3.0], size=(4, 2))),
    "Bernoulli_probs": ([PROB], lambda m, p: m.Bernoulli(probs=p), (RNG.uniform(size=(2, 3)) < 0.5) * 1.0),
    "Bernoulli_logits": ([REAL], lambda m, p: m.Bernoulli(logits=p), (RNG.uniform(size=(2, 3)) < 0.5) * 1.0),
    "Categorical_probs": ([POS], lambda m, p: m.Categorical(probs=p), np.array([[0, 2], [1, 1], [2, 0]])),
    "Categorical_logits": ([REAL], lambda m, p: m.Categorical(logits=p), np.array([2, 0])),
    "Poisson": ([POS], lambda m, a: m.Poisson(a), np.array([[0.0, 1.0, 4.0], [2.0, 0.0, 7.0]])),
    "Binomial": ([PROB], lambda m, p: m.Binomial(6, probs=p), np.array([[0.0, 1.0, 4.0], [6.0, 3.0, 2.0]])),
    "Binomial_logits": ([REAL], lambda m, p: m.Binomial(4, logits=p), np.array([0.0, 4.0, 1.0])),
}


def _value(module, name, v):
    dtype = {tj: tj.int64, torch: torch.int64}[module] if name.startswith("Categorical") else None
    if module is tj:
        return tj.tensor(v, dtype=dtype or tj.float64)
    return torch.tensor(v, dtype=dtype or torch.float64)


@pytest.mark.parametrize("name", list(CASES))
def test_log_prob_entropy_and_moments_match_torch(name):
    arrays, make, value = CASES[name]
    # entropies of gamma-family laws differentiate to trigamma, where torch's series is 5e-10 off
    rtol = 5e-9 if name in ("Gamma", "Beta", "Dirichlet") else 1e-10
    pairs = [_pair(a) for a in arrays]
    ours = make(D, *[p[0] for p in pairs])
    theirs = make(TD, *[p[1] for p in pairs])
    ours_params, torch_params = [p[0] for p in pairs], [p[1] for p in pairs]
    assert tuple(ours.batch_shape) == tuple(theirs.batch_shape)
    assert tuple(ours.event_shape) == tuple(theirs.event_shape)
    assert ours.has_rsample == theirs.has_rsample or name in ("Gamma", "Beta", "Dirichlet")
    lp, tlp = ours.log_prob(_value(tj, name, value)), theirs.log_prob(_value(torch, name, value))
    _close(lp, tlp)
    _grads_match(lp, tlp, ours_params, torch_params)
    if name != "Poisson":   # torch has no Poisson entropy
        ent, tent = ours.entropy(), theirs.entropy()
        _close(ent, tent)
        _grads_match(ent, tent, ours_params, torch_params, rtol=rtol)
    for moment in ("mean", "variance", "stddev", "mode"):
        try:
            expected = getattr(theirs, moment)
        except NotImplementedError:
            continue
        got = getattr(ours, moment)
        _close(got, expected)
        if moment != "mode" and got.requires_grad:
            _grads_match(got, expected, ours_params, torch_params)


KL_PAIRS = {
    "Normal": (lambda m, a, b, c, d: (m.Normal(a, b), m.Normal(c, d)), [REAL, POS, REAL.T.reshape(2, 3), POS2]),
    "Uniform": (lambda m, a, b, c, d: (m.Uniform(a, a + b), m.Uniform(a - c, a + b + d)), [REAL, POS, POS2, POS]),
    "Exponential": (lambda m, a, b: (m.Exponential(a), m.Exponential(b)), [POS, POS2]),
    "Laplace": (lambda m, a, b, c, d: (m.Laplace(a, b), m.Laplace(c, d)), [REAL, POS, REAL * 0.5, POS2]),
    "Gamma": (lambda m, a, b, c, d: (m.Gamma(a, b), m.Gamma(c, d)), [POS, POS2, POS2, POS]),
    "Beta": (lambda m, a, b, c, d: (m.Beta(a, b), m.Beta(c, d)), [POS, POS2, POS2, POS]),
    "Dirichlet": (lambda m, a, b: (m.Dirichlet(a), m.Dirichlet(b)), [POS, POS2]),
    "Bernoulli": (lambda m, a, b: (m.Bernoulli(probs=a), m.Bernoulli(logits=b)), [PROB, REAL]),
    "Categorical": (lambda m, a, b: (m.Categorical(logits=a), m.Categorical(probs=b)), [REAL, POS]),
    "Poisson": (lambda m, a, b: (m.Poisson(a), m.Poisson(b)), [POS, POS2]),
    "Binomial": (lambda m, a, b: (m.Binomial(5, a), m.Binomial(5, b)), [PROB, PROB[::-1]]),
}


@pytest.mark.parametrize("name", list(KL_PAIRS))
def test_kl_divergence_and_its_gradients_match_torch(name):
    make, arrays = KL_PAIRS[name]
    pairs = [_pair(np.ascontiguousarray(a)) for a in arrays]
    p, q = make(D, *[x[0] for x in pairs])
    tp, tq = make(TD, *[x[1] for x in pairs])
    kl, tkl = D.kl_divergence(p, q), TD.kl_divergence(tp, tq)
    _close(kl, tkl)
    rtol = 5e-9 if name in ("Gamma", "Beta", "Dirichlet") else 1e-10   # trigamma: see above
    _grads_match(kl, tkl, [x[0] for x in pairs], [x[1] for x in pairs], rtol=rtol)


def test_kl_with_disjoint_supports_and_zero_probabilities_is_torchs():
    p, q = D.Uniform(0.0, 2.0), D.Uniform(1.0, 3.0)
    assert D.kl_divergence(p, q).item() == math.inf
    probs = tj.tensor([0.0, 0.5, 0.5], dtype=tj.float64)
    other = tj.tensor([0.5, 0.5, 0.0], dtype=tj.float64)
    expected = TD.kl_divergence(TD.Categorical(probs=torch.tensor([0.0, 0.5, 0.5], dtype=torch.float64)),
                                TD.Categorical(probs=torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64)))
    assert D.kl_divergence(D.Categorical(probs=probs), D.Categorical(probs=other)).item() == expected.item()
    expected = TD.kl_divergence(TD.Bernoulli(torch.tensor([0.0, 1.0, 0.3])), TD.Bernoulli(torch.tensor([0.5, 0.5, 1.0])))
    got = D.kl_divergence(D.Bernoulli(tj.tensor([0.0, 1.0, 0.3])), D.Bernoulli(tj.tensor([0.5, 0.5, 1.0])))
    _close(got, expected, rtol=1e-6)


# ---- MultivariateNormal ---------------------------------------------------------------------

def _spd(rng, n, batch=()):
    m = rng.standard_normal(batch + (n, n))
    return m @ np.swapaxes(m, -1, -2) + n * np.eye(n)


@pytest.mark.parametrize("form", ["covariance_matrix", "precision_matrix", "scale_tril"])
def test_multivariate_normal_matches_torch(form):
    rng = np.random.default_rng(1)
    cov = _spd(rng, 3, (2,))
    matrix = np.linalg.cholesky(cov) if form == "scale_tril" else cov
    loc, tloc = _pair(rng.standard_normal(3))
    mat, tmat = _pair(matrix)
    ours = D.MultivariateNormal(loc, **{form: mat})
    theirs = TD.MultivariateNormal(tloc, **{form: tmat})
    assert tuple(ours.batch_shape) == (2,) and tuple(ours.event_shape) == (3,)
    x = rng.standard_normal((4, 2, 3))
    lp, tlp = ours.log_prob(tj.tensor(x)), theirs.log_prob(torch.tensor(x))
    _close(lp, tlp)
    _grads_match(lp, tlp, [loc, mat], [tloc, tmat], rtol=1e-9)
    _close(ours.entropy(), theirs.entropy())
    _grads_match(ours.entropy(), theirs.entropy(), [mat], [tmat], rtol=1e-9)
    for prop in ("mean", "variance", "covariance_matrix", "precision_matrix", "scale_tril"):
        _close(getattr(ours, prop), getattr(theirs, prop), rtol=1e-9)
    other = D.MultivariateNormal(loc * 0.5, covariance_matrix=tj.tensor(_spd(rng, 3)))
    tother = TD.MultivariateNormal(tloc * 0.5, covariance_matrix=torch.tensor(_spd(np.random.default_rng(1), 3)))
    del other, tother
    q_cov = _spd(np.random.default_rng(2), 3)
    kl = D.kl_divergence(ours, D.MultivariateNormal(loc * 0.5, covariance_matrix=tj.tensor(q_cov)))
    tkl = TD.kl_divergence(theirs, TD.MultivariateNormal(tloc * 0.5, covariance_matrix=torch.tensor(q_cov)))
    _close(kl, tkl, rtol=1e-9)
    _grads_match(kl, tkl, [loc, mat], [tloc, tmat], rtol=1e-9)


def test_multivariate_normal_errors_are_torchs():
    with pytest.raises(ValueError, match="Exactly one of covariance_matrix or precision_matrix or scale_tril"):
        D.MultivariateNormal(tj.zeros(2), covariance_matrix=tj.eye(2), scale_tril=tj.eye(2))
    with pytest.raises(ValueError, match="loc must be at least one-dimensional"):
        D.MultivariateNormal(tj.tensor(0.0), covariance_matrix=tj.eye(1))
    with pytest.raises(ValueError, match="PositiveDefinite"):
        D.MultivariateNormal(tj.zeros(2), covariance_matrix=tj.tensor([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(ValueError, match="LowerCholesky"):
        D.MultivariateNormal(tj.zeros(2), scale_tril=tj.tensor([[1.0, 1.0], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="different event shapes"):
        D.kl_divergence(D.MultivariateNormal(tj.zeros(2), tj.eye(2)), D.MultivariateNormal(tj.zeros(3), tj.eye(3)))


# ---- reparameterised samples ----------------------------------------------------------------

def test_rsample_pathwise_gradients_on_a_fixed_noise_match_torch():
    """tapejit's rsample, with the noise it drew recovered from the sample, through torch's
    formula: the same values and the same pathwise gradients."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((5, 2, 3))
    loc, tloc = _pair(REAL)
    scale, tscale = _pair(POS)
    tj.manual_seed(0)
    x = D.Normal(loc, scale).rsample((5,))
    eps = (x.detach().numpy() - REAL) / POS
    tx = tloc + torch.tensor(eps) * tscale
    _close(x, tx)
    _grads_match(x * tj.tensor(w), tx * torch.tensor(w), [loc, scale], [tloc, tscale])

    x = D.Uniform(loc, loc + scale).rsample((5,))
    u = (x.detach().numpy() - REAL) / POS
    assert np.all((u >= 0) & (u < 1))
    tx = tloc + torch.tensor(u) * (tloc + tscale - tloc)
    _grads_match(x * tj.tensor(w), tx * torch.tensor(w), [loc, scale], [tloc, tscale])

    x = D.Laplace(loc, scale).rsample((5,))
    z = (x.detach().numpy() - REAL) / POS                 # = -sign(u) log1p(-|u|)
    tx = tloc + torch.tensor(z) * tscale
    _grads_match(x * tj.tensor(w), tx * torch.tensor(w), [loc, scale], [tloc, tscale])

    x = D.Exponential(scale).rsample((5,))
    e = x.detach().numpy() * POS
    tx = torch.tensor(e) / tscale
    _grads_match(x * tj.tensor(w), tx * torch.tensor(w), [scale], [tscale])

    rng = np.random.default_rng(4)
    L = np.linalg.cholesky(_spd(rng, 3))
    mloc, tmloc = _pair(rng.standard_normal(3))
    tril, ttril = _pair(L)
    x = D.MultivariateNormal(mloc, scale_tril=tril).rsample((4,))
    eps = np.linalg.solve(L, (x.detach().numpy() - mloc.detach().numpy()).T).T
    tx = tmloc + (ttril @ torch.tensor(eps).unsqueeze(-1)).squeeze(-1)
    _close(x, tx)
    _grads_match(x * tj.tensor(w[:4, 0]), tx * torch.tensor(w[:4, 0]), [mloc, tril], [tmloc, ttril])


@pytest.mark.parametrize("a", [0.05, 0.7, 1.0, 3.5, 40.0])
def test_gamma_rsample_gradient_is_the_implicit_one(a):
    """d(sample)/d(concentration) at a fixed quantile u = F(x): the derivative of SciPy's
    inverse CDF, and torch's approximation of it (which is within ~1e-3)."""
    tj.manual_seed(5)
    conc = tj.full((200,), a, dtype=tj.float64, requires_grad=True)
    x = D.Gamma(conc, 1.0).rsample()
    (g,) = tj.autograd.grad(x.sum(), [conc])
    xv = x.detach().numpy()
    u = sc.gammainc(a, xv)
    h = 1e-6 * a
    fd = (sc.gammaincinv(a + h, u) - sc.gammaincinv(a - h, u)) / (2 * h)
    ok = (u > 1e-10) & (u < 1 - 1e-10)
    np.testing.assert_allclose(g.numpy()[ok], fd[ok], rtol=1e-6)
    theirs = torch._standard_gamma_grad(torch.full((200,), a, dtype=torch.float64), torch.tensor(xv)).numpy()
    np.testing.assert_allclose(g.numpy(), theirs, rtol=2e-3)
    # the rate enters pathwise: x = standard_gamma / rate
    rate = tj.tensor(2.0, dtype=tj.float64, requires_grad=True)
    y = D.Gamma(tj.full((50,), a, dtype=tj.float64), rate).rsample()
    (gr,) = tj.autograd.grad(y.sum(), [rate])
    np.testing.assert_allclose(gr.item(), -y.detach().numpy().sum() / 2.0, rtol=1e-12)


def test_beta_and_dirichlet_rsample_gradients_are_unbiased():
    """E[x] = a / sum(a): the average reparameterised gradient of the samples matches the
    gradient of the mean (a Monte Carlo check with a fixed seed)."""
    tj.manual_seed(6)
    conc = tj.tensor([1.5, 0.7, 3.0], dtype=tj.float64, requires_grad=True)
    x = D.Dirichlet(conc).rsample((40000,))
    (g,) = tj.autograd.grad(x[:, 0].mean(), [conc])
    c = np.array([1.5, 0.7, 3.0])
    expected = -c[0] / c.sum() ** 2 * np.ones(3)
    expected[0] += 1 / c.sum()
    np.testing.assert_allclose(g.numpy(), expected, atol=4e-3)
    a = tj.tensor(2.0, dtype=tj.float64, requires_grad=True)
    b = tj.tensor(3.0, dtype=tj.float64, requires_grad=True)
    x = D.Beta(a, b).rsample((40000,))
    ga, gb = tj.autograd.grad(x.mean(), [a, b])
    np.testing.assert_allclose([ga.item(), gb.item()], [3 / 25, -2 / 25], atol=3e-3)


# ---- sampling: moments, shapes, dtypes ---------------------------------------------------------

MOMENTS = [
    ("Normal", lambda: D.Normal(tj.tensor([0.5, -1.0]), tj.tensor([1.0, 2.0]))),
    ("Uniform", lambda: D.Uniform(tj.tensor([0.0, -2.0]), tj.tensor([1.0, 5.0]))),
    ("Exponential", lambda: D.Exponential(tj.tensor([0.5, 3.0]))),
    ("Laplace", lambda: D.Laplace(tj.tensor([1.0, 0.0]), tj.tensor([0.5, 2.0]))),
    ("Gamma", lambda: D.Gamma(tj.tensor([0.3, 4.0]), tj.tensor([1.0, 2.0]))),
    ("Beta", lambda: D.Beta(tj.tensor([0.5, 2.0]), tj.tensor([0.5, 5.0]))),
    ("Dirichlet", lambda: D.Dirichlet(tj.tensor([0.5, 2.0, 4.0]))),
    ("Bernoulli", lambda: D.Bernoulli(tj.tensor([0.1, 0.6]))),
    ("Poisson", lambda: D.Poisson(tj.tensor([0.5, 12.0]))),
    ("Binomial", lambda: D.Binomial(tj.tensor([5.0, 20.0]), tj.tensor([0.3, 0.9]))),
    ("MultivariateNormal", lambda: D.MultivariateNormal(tj.tensor([1.0, -1.0]),
                                                        tj.tensor([[2.0, 0.6], [0.6, 1.0]]))),
]


@pytest.mark.parametrize("name, make", MOMENTS, ids=[m[0] for m in MOMENTS])
def test_sample_moments_match_the_distribution(name, make):
    tj.manual_seed(7)
    d = make()
    n = 40000
    x = d.sample((n,))
    assert tuple(x.shape) == (n,) + tuple(d.batch_shape) + tuple(d.event_shape)
    assert not x.requires_grad
    v = x.numpy().astype(np.float64)
    mean, var = d.mean.numpy().astype(np.float64), d.variance.numpy().astype(np.float64)
    # 5 standard errors of the sample mean and (roughly, through the 4th moment) of the variance
    np.testing.assert_array_less(np.abs(v.mean(0) - mean), 5 * np.sqrt(var / n) + 1e-12)
    fourth = np.mean((v - mean) ** 4, axis=0)
    np.testing.assert_array_less(np.abs(v.var(0) - var), 5 * np.sqrt(np.maximum(fourth - var ** 2, 0) / n) + 1e-12)
    if name == "MultivariateNormal":
        np.testing.assert_allclose(np.cov(v.T), d.covariance_matrix.numpy(), atol=0.05)


def test_categorical_samples_follow_the_probabilities():
    tj.manual_seed(8)
    probs = np.array([[0.2, 0.5, 0.3], [0.0, 0.1, 0.9]])
    d = D.Categorical(probs=tj.tensor(probs))
    x = d.sample((30000,))
    assert x.dtype is tj.int64 and tuple(x.shape) == (30000, 2)
    freq = np.stack([np.bincount(x.numpy()[:, i], minlength=3) / 30000 for i in range(2)])
    np.testing.assert_allclose(freq, probs, atol=0.015)
    assert (x.numpy()[:, 1] != 0).all()


def test_samples_are_reproducible_with_manual_seed():
    d = D.Normal(tj.zeros(3), tj.ones(3))
    tj.manual_seed(11)
    a = d.sample((2,)).numpy()
    tj.manual_seed(11)
    np.testing.assert_array_equal(d.sample((2,)).numpy(), a)


def test_shapes_expand_and_enumerate_support_match_torch():
    ours = D.Normal(tj.zeros(3), tj.ones(3)).expand((4, 3))
    theirs = TD.Normal(torch.zeros(3), torch.ones(3)).expand((4, 3))
    assert tuple(ours.batch_shape) == tuple(theirs.batch_shape) == (4, 3)
    assert tuple(ours.sample((2,)).shape) == (2, 4, 3)
    c = D.Categorical(logits=tj.zeros(2, 4))
    tc = TD.Categorical(logits=torch.zeros(2, 4))
    _close(c.enumerate_support(), tc.enumerate_support())
    _close(D.Bernoulli(tj.tensor([0.2, 0.4])).enumerate_support(),
           TD.Bernoulli(torch.tensor([0.2, 0.4])).enumerate_support())
    assert tuple(D.Dirichlet(tj.ones(2, 3)).expand((5, 2)).batch_shape) == (5, 2)
    assert tuple(D.Beta(1.0, 2.0).batch_shape) == tuple(TD.Beta(1.0, 2.0).batch_shape)
    assert tuple(D.Normal(0.0, 1.0).sample((3,)).shape) == (3,)
    assert D.Normal(0.0, 1.0).sample().dtype is tj.float32
    assert repr(D.Normal(0.0, 1.0)) == repr(TD.Normal(0.0, 1.0)) == "Normal(loc: 0.0, scale: 1.0)"


def test_cdf_icdf_match_torch():
    x = np.array([-1.0, 0.2, 0.9])
    for name, make in [("Normal", lambda m: m.Normal(0.3, 1.5)), ("Laplace", lambda m: m.Laplace(0.3, 1.5)),
                       ("Uniform", lambda m: m.Uniform(-2.0, 2.0))]:
        ours, theirs = make(D), make(TD)
        _close(ours.cdf(tj.tensor(x)), theirs.cdf(torch.tensor(x)), rtol=1e-6)
        _close(ours.icdf(tj.tensor([0.1, 0.5, 0.8])), theirs.icdf(torch.tensor([0.1, 0.5, 0.8])), rtol=1e-6)
    _close(D.Exponential(2.0).cdf(tj.tensor([0.5])), TD.Exponential(2.0).cdf(torch.tensor([0.5])), rtol=1e-6)


# ---- validation -----------------------------------------------------------------------------

def test_bad_parameters_raise_torchs_value_error():
    cases = [(lambda m: m.Normal(m_tensor(m, [0.0]), m_tensor(m, [-1.0])), "scale"),
             (lambda m: m.Gamma(m_tensor(m, [0.0]), m_tensor(m, [1.0])), "concentration"),
             (lambda m: m.Bernoulli(m_tensor(m, [1.5])), "probs"),
             (lambda m: m.Poisson(m_tensor(m, [-1.0])), "rate"),
             (lambda m: m.Dirichlet(m_tensor(m, [1.0, -1.0])), "concentration")]
    for make, param in cases:
        with pytest.raises(ValueError) as ours:
            make(D)
        with pytest.raises(ValueError) as theirs:
            make(TD)
        assert str(ours.value).split(" of distribution")[0] == str(theirs.value).split(" of distribution")[0]
        assert f"Expected parameter {param}" in str(ours.value)
    with pytest.raises(ValueError, match="Uniform is not defined when low>= high"):
        D.Uniform(1.0, 0.0)
    with pytest.raises(ValueError, match="Either `probs` or `logits` must be specified, but not both"):
        D.Categorical(probs=tj.ones(3), logits=tj.ones(3))
    with pytest.raises(ValueError, match="Either `probs` or `logits`"):
        D.Bernoulli()
    D.Normal(0.0, -1.0, validate_args=False)   # no check


def m_tensor(distributions, values):
    return (tj if distributions is D else torch).tensor(values)


def test_values_outside_the_support_raise_torchs_value_error():
    cases = [(lambda m: m.Bernoulli(m_tensor(m, [0.3])), [0.5]),
             (lambda m: m.Gamma(m_tensor(m, [1.0]), m_tensor(m, [1.0])), [-1.0]),
             (lambda m: m.Beta(m_tensor(m, [1.0]), m_tensor(m, [1.0])), [1.5]),
             (lambda m: m.Poisson(m_tensor(m, [1.0])), [1.5]),
             (lambda m: m.Exponential(m_tensor(m, [1.0])), [-0.5])]
    for make, value in cases:
        with pytest.raises(ValueError) as ours:
            make(D).log_prob(tj.tensor(value))
        with pytest.raises(ValueError) as theirs:
            make(TD).log_prob(torch.tensor(value))
        assert str(ours.value).split("(")[0] == str(theirs.value).split("(")[0]
        assert "to be within the support" in str(ours.value)
    with pytest.raises(ValueError, match="to be within the support"):
        D.Categorical(logits=tj.zeros(3)).log_prob(tj.tensor(3))
    with pytest.raises(ValueError, match="The value argument to log_prob must be a Tensor"):
        D.Normal(0.0, 1.0).log_prob(0.5)
    with pytest.raises(ValueError, match="The right-most size of value must match event_shape"):
        D.Dirichlet(tj.ones(3)).log_prob(tj.ones(2) / 2)
    # without validation, the formula's value comes back, as torch's
    _close(D.Bernoulli(tj.tensor([0.3]), validate_args=False).log_prob(tj.tensor([0.5])),
           TD.Bernoulli(torch.tensor([0.3]), validate_args=False).log_prob(torch.tensor([0.5])), rtol=1e-6)
    D.Distribution.set_default_validate_args(False)
    try:
        D.Normal(0.0, -1.0)
    finally:
        D.Distribution.set_default_validate_args(True)


def test_kl_dispatch_registration_and_missing_pairs():
    with pytest.raises(NotImplementedError, match="No KL"):
        D.kl_divergence(D.Normal(0.0, 1.0), D.Gamma(1.0, 1.0))

    class MyNormal(D.Normal):
        pass

    # a subclass uses its parent's formula, and a registration for it takes precedence
    assert D.kl_divergence(MyNormal(0.0, 1.0), D.Normal(1.0, 1.0)).item() == pytest.approx(0.5)

    @D.register_kl(MyNormal, D.Normal)
    def _kl(p, q):
        return tj.tensor(42.0)
    assert D.kl_divergence(MyNormal(0.0, 1.0), D.Normal(1.0, 1.0)).item() == 42.0


def test_has_rsample_flags_and_rsample_refusals():
    assert D.Normal.has_rsample and D.MultivariateNormal.has_rsample and D.Gamma.has_rsample
    assert not D.Bernoulli.has_rsample and not D.Categorical.has_rsample and not D.Poisson.has_rsample
    with pytest.raises(NotImplementedError):
        D.Bernoulli(tj.tensor([0.5])).rsample()


def test_tj_compile_refuses_validation_and_replays_without_it():
    y = tj.tensor([0.3, 0.5])

    @tj.compile
    def validated(mu):
        return D.Normal(mu, 1.0).log_prob(y).sum()
    with pytest.raises(tj.CompileError, match="validate_args=False"):
        validated(tj.tensor([0.1, 0.2], requires_grad=True))

    @tj.compile
    def unvalidated(mu):
        return D.Normal(mu, 1.0, validate_args=False).log_prob(y).sum()
    for shift in (0.0, 1.0):
        mu = tj.tensor([0.1 + shift, 0.2], requires_grad=True)
        unvalidated(mu).backward()
        np.testing.assert_allclose(mu.grad.numpy(), y.numpy() - mu.detach().numpy(), rtol=1e-6)


def test_parameters_of_the_full_shape_are_kept_as_given():
    """torch's broadcast_all returns a tensor already of the broadcast shape itself: a leaf
    loc's Normal(loc, scale).mean is loc (no ExpandBackward0), as Bernoulli's probs."""
    loc, scale = tj.zeros(3, requires_grad=True), tj.ones(3, requires_grad=True)
    normal = tj.distributions.Normal(loc, scale)
    assert normal.mean is loc and normal.stddev is scale and normal.mean.grad_fn is None
    probs = tj.tensor([0.2, 0.7], requires_grad=True)
    assert tj.distributions.Bernoulli(probs=probs).mean is probs
    wide = tj.distributions.Normal(loc, tj.ones(2, 1))
    assert wide.mean.shape == (2, 3) and wide.mean.grad_fn.name() == "ExpandBackward0"   # torch's
