"""tapejit.optim beyond SGD/Adam/AdamW/RMSprop: Adagrad, Adadelta, Adamax, NAdam, RAdam, ASGD
and LBFGS against torch.optim step by step (when torch is importable) and against
hand-computed steps (always); the options torch accepts or refuses on the CPU (foreach,
fused, capturable, differentiable) for every optimizer; state_dict round trips; step and
state-dict hooks."""
import copy
import importlib
import inspect
import pickle
import re
import warnings

import numpy as np
import pytest

import tapejit as tj
from tapejit.optim import (ASGD, LBFGS, SGD, Adadelta, Adagrad, Adam, Adamax, AdamW, NAdam,
                           RAdam, RMSprop)
from tapejit.optim.optimizer import (register_optimizer_step_post_hook,
                                     register_optimizer_step_pre_hook)

SHAPES = [(3, 4), (5,), ()]
STEPS = 10   # RAdam's rectified update starts at step 6 with the default betas
# float64: torch fuses some multiply-adds (FMA) where NumPy rounds twice, so the two agree
# to an ulp or two per step.  float32 the same, relative to float32's precision.
TOLERANCE = {np.float64: {"rtol": 1e-13, "atol": 1e-15},
             np.float32: {"rtol": 1e-5, "atol": 1e-6}}

OPTIONS = {
    Adagrad: [{}, {"lr": 0.1, "lr_decay": 0.05}, {"lr": 0.05, "weight_decay": 0.1},
              {"initial_accumulator_value": 0.5, "eps": 1e-3}, {"maximize": True},
              {"lr": 0.1, "lr_decay": 0.01, "weight_decay": 0.1, "initial_accumulator_value": 0.3,
               "maximize": True}],
    Adadelta: [{}, {"lr": 0.5, "rho": 0.5}, {"eps": 1e-3, "weight_decay": 0.1},
               {"maximize": True}, {"lr": 0.3, "rho": 0.95, "weight_decay": 0.05,
                                    "maximize": True}],
    Adamax: [{}, {"lr": 0.01, "betas": (0.5, 0.9)}, {"betas": (0.3, 0.8)},  # lerp's other side
             {"weight_decay": 0.1, "eps": 1e-3}, {"maximize": True},
             {"lr": 0.02, "betas": (0.8, 0.99), "weight_decay": 0.1, "maximize": True}],
    NAdam: [{}, {"lr": 0.01, "momentum_decay": 0.01}, {"weight_decay": 0.1},
            {"weight_decay": 0.1, "decoupled_weight_decay": True}, {"betas": (0.3, 0.8)},
            {"maximize": True}, {"lr": 0.01, "weight_decay": 0.05, "decoupled_weight_decay": True,
                                 "momentum_decay": 0.02, "maximize": True, "eps": 1e-4}],
    RAdam: [{}, {"lr": 0.01}, {"weight_decay": 0.1},
            {"weight_decay": 0.1, "decoupled_weight_decay": True},
            {"betas": (0.5, 0.5)},   # rho_inf = 3: never rectified
            {"maximize": True}, {"lr": 0.01, "betas": (0.8, 0.9), "weight_decay": 0.05,
                                 "decoupled_weight_decay": True, "maximize": True}],
    ASGD: [{}, {"lr": 0.05, "lambd": 0.01}, {"alpha": 0.5, "t0": 3},   # averaging from step 4
           {"weight_decay": 0.1}, {"maximize": True},
           {"lr": 0.05, "lambd": 0.001, "alpha": 0.9, "t0": 2, "weight_decay": 0.05,
            "maximize": True}],
}
CASES = [(cls, o) for cls, options in OPTIONS.items() for o in options]
CASE_IDS = [f"{cls.__name__}-" + "-".join(f"{k}={v}" for k, v in o.items()) for cls, o in CASES]


def _initial_values(dtype, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=shape).astype(dtype) for shape in SHAPES]


def _gradient_schedule(dtype, seed=1, steps=STEPS):
    """Gradients for every step; none for the second parameter at step 2 (it is skipped)."""
    rng = np.random.default_rng(seed)
    schedule = []
    for step in range(steps):
        grads = [rng.normal(size=shape).astype(dtype) for shape in SHAPES]
        if step == 2:
            grads[1] = None
        schedule.append(grads)
    return schedule


def _set_grads(lib, params, grads):
    for p, g in zip(params, grads):
        p.grad = None if g is None else lib.tensor(g.copy())


def _torch_class(cls):
    import torch
    return getattr(torch.optim, cls.__name__)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("cls,options", CASES, ids=CASE_IDS)
def test_update_rule_matches_torch(cls, options, dtype):
    torch = pytest.importorskip("torch")
    values = _initial_values(dtype)
    ours = [tj.tensor(v.copy(), requires_grad=True) for v in values]
    theirs = [torch.tensor(v.copy(), requires_grad=True) for v in values]
    opt, t_opt = cls(ours, **options), _torch_class(cls)(theirs, **options)
    for step, grads in enumerate(_gradient_schedule(dtype)):
        _set_grads(tj, ours, grads)
        _set_grads(torch, theirs, grads)
        opt.step()
        t_opt.step()
        for i, (a, b) in enumerate(zip(ours, theirs)):
            assert a.dtype.name == str(b.dtype).replace("torch.", "")
            np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), **TOLERANCE[dtype],
                                       err_msg=f"step {step} param {i}")
    for a, v in zip(ours, values):   # the run moved every parameter
        assert not np.allclose(a.detach().numpy(), v)
    # torch's state layout: keys in order, dtypes, values
    state, t_state = opt.state_dict(), t_opt.state_dict()
    assert state["param_groups"] == t_state["param_groups"]
    assert list(state["state"]) == list(t_state["state"])
    for index, entry in t_state["state"].items():
        assert list(state["state"][index]) == list(entry)
        for name, value in entry.items():
            ours_value = state["state"][index][name]
            assert ours_value.dtype.name == str(value.dtype).replace("torch.", ""), name
            assert ours_value.shape == tuple(value.shape), name
            np.testing.assert_allclose(ours_value.numpy(), value.numpy(), **TOLERANCE[dtype],
                                       err_msg=name)
    assert repr(opt) == repr(t_opt)


def test_adagrad_state_exists_from_construction_like_torch():
    torch = pytest.importorskip("torch")
    values = _initial_values(np.float64)
    opt = Adagrad([tj.tensor(v, requires_grad=True) for v in values],
                  initial_accumulator_value=0.25)
    t_opt = torch.optim.Adagrad([torch.tensor(v, requires_grad=True) for v in values],
                                initial_accumulator_value=0.25)
    state, t_state = opt.state_dict()["state"], t_opt.state_dict()["state"]
    assert list(state) == list(t_state) == [0, 1, 2]
    for index in state:
        assert list(state[index]) == ["step", "sum"]
        assert state[index]["step"].item() == 0.0
        np.testing.assert_array_equal(state[index]["sum"].numpy(), t_state[index]["sum"].numpy())
    # a group added later starts from the constructor's accumulator value, as in torch
    for lib, optimizer in ((tj, opt), (torch, t_opt)):
        p = lib.ones(2, dtype=lib.float64, requires_grad=True)
        optimizer.add_param_group({"params": [p], "initial_accumulator_value": 4.0})
        p.grad = lib.ones(2, dtype=lib.float64)
        optimizer.step()
    np.testing.assert_array_equal(opt.state[opt.param_groups[1]["params"][0]]["sum"].numpy(),
                                  [1.25, 1.25])
    np.testing.assert_allclose(opt.param_groups[1]["params"][0].detach().numpy(),
                               t_opt.param_groups[1]["params"][0].detach().numpy(), rtol=1e-15)


# ---- hand-computed steps (no torch needed) -------------------------------------------------

def _one_param(values, cls, **options):
    p = tj.tensor(values, dtype=tj.float64, requires_grad=True)
    return p, cls([p], **options)


def test_hand_computed_adagrad():
    p, opt = _one_param([1.0, -1.0], Adagrad, lr=0.5, lr_decay=1.0, eps=0.0)
    p.grad = tj.tensor([3.0, 4.0], dtype=tj.float64)
    opt.step()   # sum = g^2; p -= 0.5 * g / |g|
    assert p.tolist() == [0.5, -1.5]
    p.grad = tj.tensor([4.0, 3.0], dtype=tj.float64)
    opt.step()   # clr = 0.5 / 2; sum = [25, 25]
    assert p.tolist() == pytest.approx([0.5 - 0.25 * 0.8, -1.5 - 0.25 * 0.6], rel=1e-15)
    assert opt.state[p]["step"].item() == 2.0


def test_hand_computed_adadelta():
    p, opt = _one_param([1.0], Adadelta, lr=1.0, rho=0.5, eps=1e-2)
    p.grad = tj.tensor([2.0], dtype=tj.float64)
    opt.step()   # s = 0.5 * 4 = 2; delta = sqrt(0.01) / sqrt(2.01) * 2; acc = 0.5 * delta^2
    delta = 0.1 / np.sqrt(2.01) * 2
    assert p.item() == pytest.approx(1.0 - delta, rel=1e-14)
    assert opt.state[p]["acc_delta"].item() == pytest.approx(0.5 * delta ** 2, rel=1e-14)


def test_hand_computed_adamax():
    p, opt = _one_param([0.0, 0.0], Adamax, lr=0.1, betas=(0.5, 0.5), eps=0.0)
    p.grad = tj.tensor([2.0, -1.0], dtype=tj.float64)
    opt.step()   # m = 0.5 g, u = |g|; p -= 0.1 / 0.5 * m / u = 0.1 * sign(g)
    assert p.tolist() == pytest.approx([-0.1, 0.1], rel=1e-15)
    p.grad = tj.tensor([0.0, 0.0], dtype=tj.float64)
    opt.step()   # m = [0.5, -0.25], u = [1, 0.5]; p -= 0.1 / 0.75 * m / u
    assert p.tolist() == pytest.approx([-0.1 - 0.1 / 0.75 * 0.5, 0.1 + 0.1 / 0.75 * 0.5])


def test_hand_computed_nadam_first_step():
    p, opt = _one_param([0.0], NAdam, lr=0.1, eps=0.0, momentum_decay=0.0)
    p.grad = tj.tensor([2.0], dtype=tj.float64)
    opt.step()
    # momentum_decay=0: mu = mu_next = 0.9 * 0.5; denom = |g|; prod = 0.45 (as float32)
    mu = 0.45
    product = float(np.float32(mu))
    expected = -0.1 * (1 - mu) / (1 - product) * 1.0 - 0.1 * mu / (1 - product * mu) * 0.1
    assert p.item() == pytest.approx(expected, rel=1e-12)
    assert opt.state[p]["mu_product"].dtype is tj.float32


def test_hand_computed_radam_without_rectification():
    p, opt = _one_param([1.0], RAdam, lr=0.1)
    p.grad = tj.tensor([4.0], dtype=tj.float64)
    opt.step()   # rho_t < 5 at first: p -= lr * m / (1 - beta1) = lr * g
    assert p.item() == pytest.approx(1.0 - 0.1 * 4.0, rel=1e-13)


def test_hand_computed_asgd():
    p, opt = _one_param([1.0], ASGD, lr=0.5, lambd=0.1, alpha=1.0, t0=1)
    p.grad = tj.tensor([1.0], dtype=tj.float64)
    opt.step()   # p = 1 * (1 - 0.05) - 0.5; ax = p; eta = 0.5 / (1 + 0.05); mu = 1
    assert p.item() == pytest.approx(0.45)
    assert opt.state[p]["ax"].item() == pytest.approx(0.45)
    eta = float(np.float32(0.5 / 1.05))
    assert opt.state[p]["eta"].item() == eta
    opt.step()   # mu = 1 / max(1, 2 - 1) = 1 still; then mu = 1 / (3 - 1)
    second = 0.45 * (1 - 0.1 * eta) - eta
    assert p.item() == pytest.approx(second, rel=1e-12)
    assert opt.state[p]["ax"].item() == pytest.approx(second, rel=1e-12)
    assert opt.state[p]["mu"].item() == 1.0
    opt.step()
    assert opt.state[p]["mu"].item() == 0.5
    assert opt.state[p]["ax"].item() == pytest.approx(second + (p.item() - second) * 1.0)


def test_float32_parameters_stay_float32_in_their_own_memory():
    for cls in OPTIONS:
        p = tj.tensor(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3), requires_grad=True)
        array = p.detach().numpy()
        opt = cls([p])
        p.grad = tj.ones(2, 3)
        version = p._version_counter
        opt.step()
        assert p.dtype is tj.float32 and p.detach().numpy() is array, cls.__name__
        assert p._version_counter == version + 1, cls.__name__
        assert not np.array_equal(array, np.linspace(-1, 1, 6).reshape(2, 3)), cls.__name__


def test_non_contiguous_parameter_is_updated_in_place():
    for cls in OPTIONS:
        base = np.arange(1.0, 7.0).reshape(2, 3)
        p = tj.zeros(3, 2, dtype=tj.float64, requires_grad=True)
        p.data = base.T
        reference = tj.tensor(np.ascontiguousarray(base.T), requires_grad=True)
        opt, ref_opt = cls([p], lr=0.1), cls([reference], lr=0.1)
        for _ in range(2):
            p.grad = tj.tensor(np.ones((3, 2)))
            reference.grad = tj.tensor(np.ones((3, 2)))
            opt.step()
            ref_opt.step()
        np.testing.assert_array_equal(base.T, reference.detach().numpy(), err_msg=cls.__name__)


@pytest.mark.parametrize("cls", list(OPTIONS))
def test_step_bumps_the_version_so_saved_graphs_refuse_backward(cls):
    w = tj.tensor([1.0, 2.0], requires_grad=True)
    opt = cls([w])
    loss = (w * w).sum()   # saves w
    w.grad = tj.ones(2)
    opt.step()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_lbfgs_writes_bump_the_version_like_torch():
    torch = pytest.importorskip("torch")
    versions = []
    for lib in (tj, torch):
        w = lib.tensor([1.0, 2.0, -4.0], dtype=lib.float64, requires_grad=True)
        for line_search_fn in (None, "strong_wolfe"):
            opt = lib.optim.LBFGS([w], max_iter=3, line_search_fn=line_search_fn)

            def closure():
                opt.zero_grad()
                loss = _rosenbrock(w)
                loss.backward()
                return loss

            opt.step(closure)
            versions.append(w._version_counter if lib is tj else w._version)
    assert versions[:2] == versions[2:] and versions[0] > 0


@pytest.mark.parametrize("cls", list(OPTIONS))
def test_tiny_mlp_training_reduces_the_loss(cls):
    rng = np.random.default_rng(0)
    x = tj.tensor(rng.normal(size=(32, 2)))
    y = tj.tensor(np.sin(rng.normal(size=(32, 1))))
    params = [tj.tensor(rng.normal(size=s) * 0.5, requires_grad=True)
              for s in [(2, 16), (16,), (16, 1), (1,)]]
    lr = {Adadelta: 1.0, ASGD: 0.05}.get(cls, 0.01)
    opt = cls(params, lr=lr)
    losses = []
    for _ in range(100):
        opt.zero_grad()
        w1, b1, w2, b2 = params
        loss = ((tj.tanh(x @ w1 + b1) @ w2 + b2 - y) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]


# ---- LBFGS --------------------------------------------------------------------------------

def _rosenbrock(x):
    return (100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()


def _lbfgs_run(lib, n, dtype, steps, **options):
    """Iterates and losses of LBFGS on the n-dimensional Rosenbrock function from the usual
    start (-1.2, 1, -1.2, 1, ...), and the number of closure calls."""
    start = np.tile([-1.2, 1.0], n // 2).astype(dtype)
    x = lib.tensor(start, requires_grad=True)
    opt = lib.optim.LBFGS([x], **options)
    calls = []

    def closure():
        calls.append(1)
        opt.zero_grad()
        loss = _rosenbrock(x)
        loss.backward()
        return loss

    iterates, losses = [], []
    for _ in range(steps):
        loss = opt.step(closure)
        losses.append(float(loss.detach()))
        iterates.append(x.detach().numpy().copy())
    return iterates, losses, len(calls), opt


LBFGS_CASES = {
    "fixed-step": (2, {"lr": 0.5}),
    "fixed-step-history": (2, {"lr": 0.5, "history_size": 3, "max_iter": 7}),
    "strong_wolfe": (2, {"line_search_fn": "strong_wolfe"}),
    "strong_wolfe-history": (2, {"line_search_fn": "strong_wolfe", "history_size": 2,
                                 "max_iter": 5, "max_eval": 6}),
    "strong_wolfe-n6": (6, {"line_search_fn": "strong_wolfe", "max_iter": 4}),
}


@pytest.mark.parametrize("name", list(LBFGS_CASES))
def test_lbfgs_matches_torch_iterates_and_losses(name):
    torch = pytest.importorskip("torch")
    n, options = LBFGS_CASES[name]
    steps = 6
    ours, ours_losses, ours_calls, opt = _lbfgs_run(tj, n, np.float64, steps, **options)
    theirs, theirs_losses, theirs_calls, t_opt = _lbfgs_run(torch, n, np.float64, steps,
                                                            **options)
    assert ours_calls == theirs_calls
    for step, (a, b) in enumerate(zip(ours, theirs)):
        # torch fuses some multiply-adds; the ulp this costs grows slowly over the iterations
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-14, err_msg=f"step {step}")
    np.testing.assert_allclose(ours_losses, theirs_losses, rtol=1e-9, atol=1e-18)
    assert ours_losses[-1] < 0.05 * ours_losses[0]   # the runs moved
    state, t_state = opt.state_dict()["state"][0], t_opt.state_dict()["state"][0]
    assert list(state) == list(t_state)
    for key, value in t_state.items():
        ours_value = state[key]
        if isinstance(value, torch.Tensor):
            assert ours_value.dtype is tj.float64 and ours_value.shape == tuple(value.shape)
        elif isinstance(value, list):
            assert len(ours_value) == len(value)
            assert [v is None for v in ours_value] == [v is None for v in value]
        else:
            assert type(ours_value) is type(value), key
            if key in ("func_evals", "n_iter"):
                assert ours_value == value


def test_lbfgs_float32_follows_torch():
    """float32 steps round where torch's do (a scalar tensor stays float32 against Python
    floats).  Along Rosenbrock's curved valley the ulp torch's fused multiply-adds save
    grows to ~1e-4 over the first step's 20 iterations; both then converge to (1, 1)."""
    torch = pytest.importorskip("torch")
    options = {"line_search_fn": "strong_wolfe"}
    ours, ours_losses, ours_calls, opt = _lbfgs_run(tj, 2, np.float32, 4, **options)
    theirs, theirs_losses, theirs_calls, _ = _lbfgs_run(torch, 2, np.float32, 4, **options)
    assert ours_calls == theirs_calls
    for step, (a, b) in enumerate(zip(ours, theirs)):
        assert a.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=5e-4 if step == 0 else 1e-4)
    assert ours_losses[0] == theirs_losses[0] == pytest.approx(24.2)
    assert max(ours_losses[-1], theirs_losses[-1]) < 1e-8
    state = opt.state_dict()["state"][0]
    assert state["d"].dtype is tj.float32 and state["ro"][0].dtype is tj.float32


def test_lbfgs_minimises_a_quadratic_in_few_iterations():
    """On a convex quadratic L-BFGS with an exact-enough line search converges at once."""
    a = np.array([[3.0, 1.0, 0.0], [1.0, 2.0, 0.5], [0.0, 0.5, 1.0]])
    b = np.array([1.0, -2.0, 0.5])
    x = tj.zeros(3, dtype=tj.float64, requires_grad=True)
    opt = LBFGS([x], line_search_fn="strong_wolfe", tolerance_grad=1e-12,
                tolerance_change=1e-14)
    matrix, vector = tj.tensor(a), tj.tensor(b)

    def closure():
        opt.zero_grad()
        loss = 0.5 * (x @ (matrix @ x)) - vector @ x
        loss.backward()
        return loss

    opt.step(closure)
    np.testing.assert_allclose(x.detach().numpy(), np.linalg.solve(a, b), rtol=1e-9)
    assert opt.state[x]["n_iter"] < 10


def test_lbfgs_state_dict_round_trip_continues_the_same_iterates():
    options = {"line_search_fn": "strong_wolfe", "max_iter": 3, "history_size": 4}
    x = tj.tensor([-1.2, 1.0], dtype=tj.float64, requires_grad=True)
    opt = LBFGS([x], **options)

    def closure_for(param, optimizer):
        def closure():
            optimizer.zero_grad()
            loss = _rosenbrock(param)
            loss.backward()
            return loss
        return closure

    for _ in range(3):
        opt.step(closure_for(x, opt))
    saved = pickle.loads(pickle.dumps(opt.state_dict()))
    resumed_x = tj.tensor(x.detach().numpy().copy(), requires_grad=True)
    resumed = LBFGS([resumed_x], **options)
    resumed.load_state_dict(saved)
    assert isinstance(resumed.state[resumed_x]["old_dirs"], list)
    for _ in range(3):
        opt.step(closure_for(x, opt))
        resumed.step(closure_for(resumed_x, resumed))
        np.testing.assert_array_equal(resumed_x.detach().numpy(), x.detach().numpy())


def test_lbfgs_loads_torch_state_and_continues_like_torch():
    torch = pytest.importorskip("torch")
    options = {"line_search_fn": "strong_wolfe", "max_iter": 4}
    _, _, _, t_opt = _lbfgs_run(torch, 2, np.float64, 2, **options)
    t_x = t_opt.param_groups[0]["params"][0]
    x = tj.tensor(t_x.detach().numpy().copy(), requires_grad=True)
    opt = LBFGS([x], **options)
    opt.load_state_dict(t_opt.state_dict())
    for lib, param, optimizer in ((tj, x, opt), (torch, t_x, t_opt)):
        for _ in range(2):
            def closure():
                optimizer.zero_grad()
                loss = _rosenbrock(param)
                loss.backward()
                return loss
            optimizer.step(closure)
    np.testing.assert_allclose(x.detach().numpy(), t_x.detach().numpy(), rtol=1e-12)


def test_lbfgs_several_parameters_and_a_parameter_without_gradient():
    torch = pytest.importorskip("torch")
    results = []
    for lib in (tj, torch):
        a = lib.tensor([[-1.2, 1.0], [0.5, 0.3]], dtype=lib.float64, requires_grad=True)
        b = lib.tensor([2.0], dtype=lib.float64, requires_grad=True)
        unused = lib.tensor([7.0], dtype=lib.float64, requires_grad=True)
        opt = lib.optim.LBFGS([a, unused, b], line_search_fn="strong_wolfe")

        def closure():
            opt.zero_grad()
            flat = lib.cat([a.reshape(-1), b])
            loss = _rosenbrock(flat)
            loss.backward()
            return loss

        for _ in range(3):
            opt.step(closure)
        results.append([t.detach().numpy().copy() for t in (a, unused, b)])
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10)
    assert results[0][1].tolist() == [7.0]


def test_lbfgs_errors_match_torch():
    torch = pytest.importorskip("torch")

    def raised(lib, make):
        with pytest.raises(Exception) as info:
            make(lib)
        return type(info.value), str(info.value)

    def bad_line_search(lib):
        x = lib.zeros(2, requires_grad=True)
        opt = lib.optim.LBFGS([x], line_search_fn="armijo")

        def closure():
            loss = ((x - 1) ** 2).sum()
            loss.backward()
            return loss
        opt.step(closure)

    def added_group(lib):
        opt = lib.optim.LBFGS([lib.zeros(2, requires_grad=True)])
        opt.add_param_group({"params": [lib.zeros(1, requires_grad=True)]})
        opt.step(lambda: 0.0)

    makers = [
        lambda lib: lib.optim.LBFGS([{"params": [lib.zeros(1, requires_grad=True)]},
                                     {"params": [lib.zeros(1, requires_grad=True)]}]),
        lambda lib: lib.optim.LBFGS([lib.zeros(1, requires_grad=True)], lr=-1.0),
        lambda lib: lib.optim.LBFGS([lib.zeros(1, requires_grad=True)]).step(),
        bad_line_search,
        added_group,
    ]
    for make in makers:
        assert raised(tj, make) == raised(torch, make)


def test_lbfgs_stops_at_once_when_the_gradient_is_small():
    x = tj.tensor([1.0, 1.0], dtype=tj.float64, requires_grad=True)
    opt = LBFGS([x])
    calls = []

    def closure():
        calls.append(1)
        opt.zero_grad()
        loss = _rosenbrock(x)
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert loss.item() == 0.0 and len(calls) == 1
    assert x.tolist() == [1.0, 1.0] and opt.state[x] == {"func_evals": 1, "n_iter": 0}


# ---- state dicts --------------------------------------------------------------------------

ROUND_TRIP = [(SGD, {"lr": 0.1, "momentum": 0.9}), (Adam, {"lr": 0.01, "amsgrad": True}),
              (AdamW, {"lr": 0.01}), (RMSprop, {"lr": 0.01, "momentum": 0.5, "centered": True}),
              (Adagrad, {"lr": 0.1, "lr_decay": 0.1}), (Adadelta, {"rho": 0.5}),
              (Adamax, {"lr": 0.01}), (NAdam, {"lr": 0.01, "weight_decay": 0.1}),
              (RAdam, {"lr": 0.01}), (ASGD, {"lr": 0.05, "t0": 2})]


@pytest.mark.parametrize("cls,options", ROUND_TRIP, ids=[c.__name__ for c, _ in ROUND_TRIP])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_state_dict_round_trip_continues_the_same_trajectory(cls, options, dtype):
    schedule = _gradient_schedule(dtype) + _gradient_schedule(dtype, seed=7)
    params = [tj.tensor(v, requires_grad=True) for v in _initial_values(dtype)]
    opt = cls(params, **options)
    for grads in schedule[:STEPS]:
        _set_grads(tj, params, grads)
        opt.step()
    saved = pickle.loads(pickle.dumps(opt.state_dict()))
    resumed_params = [tj.tensor(p.detach().numpy(), requires_grad=True) for p in params]
    resumed = cls(resumed_params)
    resumed.load_state_dict(saved)
    assert resumed.param_groups[0]["lr"] == options.get("lr", opt.defaults["lr"])
    # As torch, loading casts NAdam's mu_product and ASGD's eta and mu (float32 scalars) to
    # a float64 parameter's dtype, so those continue in float64: equal to float32 rounding.
    recast = dtype == np.float64 and cls in (NAdam, ASGD)
    for grads in schedule[STEPS:]:
        _set_grads(tj, params, grads)
        _set_grads(tj, resumed_params, grads)
        opt.step()
        resumed.step()
        for a, b in zip(params, resumed_params):
            if recast:
                np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-6)
            else:
                np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())


@pytest.mark.parametrize("cls,options", ROUND_TRIP[4:], ids=[c.__name__ for c, _ in ROUND_TRIP[4:]])
def test_torch_state_dict_loads_and_continues_like_torch(cls, options):
    torch = pytest.importorskip("torch")
    values = _initial_values(np.float64)
    theirs = [torch.tensor(v.copy(), requires_grad=True) for v in values]
    t_opt = _torch_class(cls)(theirs, **options)
    schedule = _gradient_schedule(np.float64)
    for grads in schedule[:4]:
        _set_grads(torch, theirs, grads)
        t_opt.step()
    ours = [tj.tensor(p.detach().numpy().copy(), requires_grad=True) for p in theirs]
    opt = cls(ours)
    opt.load_state_dict(t_opt.state_dict())
    # torch's side reloads too: loading casts some scalar state (NAdam's mu_product, ASGD's
    # eta and mu) to the parameters' dtype, in both libraries
    t_opt_state = t_opt.state_dict()
    t_opt = _torch_class(cls)(theirs)
    t_opt.load_state_dict(t_opt_state)
    for grads in schedule[4:]:
        _set_grads(tj, ours, grads)
        _set_grads(torch, theirs, grads)
        opt.step()
        t_opt.step()
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(),
                                   **TOLERANCE[np.float64])


def test_scalar_state_keeps_its_dtype_when_loaded():
    """As torch: ``step`` keeps its dtype; NAdam's mu_product and ASGD's eta and mu (scalar
    tensors of the default dtype) are cast to the parameter's, as torch casts them."""
    torch = pytest.importorskip("torch")
    for cls in (NAdam, ASGD):
        p = tj.ones(2, dtype=tj.float64, requires_grad=True)
        t_p = torch.ones(2, dtype=torch.float64, requires_grad=True)
        opt, t_opt = cls([p]), _torch_class(cls)([t_p])
        for lib, param, optimizer in ((tj, p, opt), (torch, t_p, t_opt)):
            param.grad = lib.ones(2, dtype=lib.float64)
            optimizer.step()
        q, t_q = tj.ones(2, dtype=tj.float64, requires_grad=True), torch.ones(
            2, dtype=torch.float64, requires_grad=True)
        loaded, t_loaded = cls([q]), _torch_class(cls)([t_q])
        loaded.load_state_dict(opt.state_dict())
        t_loaded.load_state_dict(t_opt.state_dict())
        for name, value in t_loaded.state[t_q].items():
            assert loaded.state[q][name].dtype.name == str(value.dtype).replace("torch.", "")


def test_fused_groups_keep_float32_steps_like_torch():
    torch = pytest.importorskip("torch")
    previous = torch.get_default_dtype()
    tj.set_default_dtype(tj.float64)
    torch.set_default_dtype(torch.float64)
    try:
        for cls, fused in ((Adam, True), (Adam, False), (Adagrad, True), (AdamW, True)):
            p, t_p = (lib.ones(2, requires_grad=True) for lib in (tj, torch))
            opt, t_opt = cls([p], fused=fused), _torch_class(cls)([t_p], fused=fused)
            for lib, param, optimizer in ((tj, p, opt), (torch, t_p, t_opt)):
                param.grad = lib.ones(2)
                optimizer.step()
            assert opt.state[p]["step"].dtype.name == \
                str(t_opt.state[t_p]["step"].dtype).replace("torch.", "")
            np.testing.assert_allclose(p.detach().numpy(), t_p.detach().numpy(), rtol=1e-15)
    finally:
        tj.set_default_dtype(tj.float32)
        torch.set_default_dtype(previous)


# ---- options torch accepts or refuses on the CPU -------------------------------------------

ALL = [SGD, Adam, AdamW, RMSprop, Adagrad, Adadelta, Adamax, NAdam, RAdam, ASGD]
OPTION_CASES = [{"foreach": True}, {"foreach": False}, {"fused": True}, {"fused": False},
                {"capturable": True}, {"differentiable": True},
                {"fused": True, "foreach": True}, {"fused": True, "differentiable": True},
                {"fused": True, "capturable": True}]


def _outcome(lib, cls_name, options, requires_grad=True):
    """What happens at construction and at the first step: the exception (type and text),
    or the parameter after the step."""
    p = lib.tensor([1.0, -2.0], dtype=lib.float64, requires_grad=requires_grad)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            opt = getattr(lib.optim, cls_name)([p], lr=0.1, **options)
        except Exception as error:  # noqa: BLE001 (compared with torch's)
            return "constructor", type(error).__name__, str(error).replace(
                "tapejit", "LIB").replace("torch", "LIB")
        p.grad = lib.tensor([0.5, 1.0], dtype=lib.float64)
        try:
            opt.step()
        except Exception as error:  # noqa: BLE001
            return "step", type(error).__name__, str(error)
    return "ok", p.detach().numpy().tolist()


@pytest.mark.parametrize("options", OPTION_CASES, ids=str)
@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_option_accepted_or_refused_like_torch(cls, options):
    torch = pytest.importorskip("torch")
    ours, theirs = _outcome(tj, cls.__name__, options), _outcome(torch, cls.__name__, options)
    if ours[0] == theirs[0] == "ok":
        np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-14)
    else:
        assert ours == theirs


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_differentiable_step_on_parameters_that_do_not_require_grad(cls):
    """torch's differentiable step then records nothing: most rules are the usual update;
    Adam's, AdamW's and NAdam's compute their bias corrections in the step counter's dtype
    (float32), which tapejit does not implement: it refuses rather than differ."""
    torch = pytest.importorskip("torch")
    ours = _outcome(tj, cls.__name__, {"differentiable": True}, requires_grad=False)
    theirs = _outcome(torch, cls.__name__, {"differentiable": True}, requires_grad=False)
    assert theirs[0] == "ok"
    if cls in (Adam, AdamW, NAdam):
        assert ours[:2] == ("step", "RuntimeError")
        assert ours[2].startswith(f"{cls.__name__}(differentiable=True): torch's differentiable "
                                  "update computes the bias corrections")
    else:
        assert ours[0] == "ok"
        np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-14)


def test_differentiable_with_a_gradient_that_requires_grad_is_refused():
    p = tj.tensor([1.0, 2.0])
    opt = SGD([p], lr=0.1, differentiable=True)
    p.grad = tj.tensor([1.0, 1.0], requires_grad=True) * 2.0
    with pytest.raises(RuntimeError, match="does not record optimizer steps on the tape"):
        opt.step()
    assert p.tolist() == [1.0, 2.0]


def test_tensor_lr_with_foreach_is_refused_like_torch():
    torch = pytest.importorskip("torch")
    for cls in ("Adam", "AdamW"):
        def make(lib, name=cls):
            getattr(lib.optim, name)([lib.zeros(1, requires_grad=True)],
                                     lr=lib.tensor(0.01), foreach=True)
        with pytest.raises(ValueError) as theirs:
            make(torch)
        with pytest.raises(ValueError) as ours:
            make(tj)
        assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("make", [
    lambda lib, p: lib.optim.Adagrad([p], lr_decay=-1),
    lambda lib, p: lib.optim.Adagrad([p], initial_accumulator_value=-1),
    lambda lib, p: lib.optim.Adagrad([p], eps=-1),
    lambda lib, p: lib.optim.Adadelta([p], rho=1.5),
    lambda lib, p: lib.optim.Adadelta([p], lr=-1),
    lambda lib, p: lib.optim.Adamax([p], betas=(1.0, 0.9)),
    lambda lib, p: lib.optim.Adamax([p], weight_decay=-1),
    lambda lib, p: lib.optim.NAdam([p], momentum_decay=-1),
    lambda lib, p: lib.optim.NAdam([p], betas=(0.9, 1.0)),
    lambda lib, p: lib.optim.RAdam([p], eps=-1),
    lambda lib, p: lib.optim.RAdam([p], betas=(-0.1, 0.9)),
    lambda lib, p: lib.optim.ASGD([p], lr=-0.1),
    lambda lib, p: lib.optim.ASGD([p], weight_decay=-0.1),
    lambda lib, p: lib.optim.NAdam([p], lr=lib.tensor([0.1, 0.2])),
    lambda lib, p: lib.optim.Adagrad([p], nesterov=True),
    lambda lib, p: lib.optim.Adagrad([p * 2]),
    lambda lib, p: lib.optim.RAdam([]),
], ids=lambda make: "")
def test_errors_equal_torch(make):
    torch = pytest.importorskip("torch")

    def raised(lib):
        with pytest.raises(Exception) as info:
            make(lib, lib.tensor([1.0], requires_grad=True))
        return type(info.value), str(info.value).replace("torch", "LIB").replace("tapejit", "LIB")

    assert raised(tj) == raised(torch)


# ---- hooks --------------------------------------------------------------------------------

def test_step_hooks_run_in_torch_order_and_can_replace_arguments():
    torch = pytest.importorskip("torch")
    logs = []
    for lib in (tj, torch):
        log = []
        p = lib.tensor([1.0], requires_grad=True)
        opt = lib.optim.Adagrad([p], lr=0.1)
        p.grad = lib.ones(1)
        optimizer_module = importlib.import_module(lib.__name__ + ".optim.optimizer")
        global_pre = optimizer_module.register_optimizer_step_pre_hook(
            lambda o, args, kwargs: log.append(("global pre", args[0] is o, args[1:],
                                                dict(kwargs))))
        global_post = optimizer_module.register_optimizer_step_post_hook(
            lambda o, args, kwargs: log.append(("global post", args[0] is o, args[1:],
                                                sorted(kwargs))))
        pre = opt.register_step_pre_hook(lambda o, args, kwargs: (args, {"closure": lambda: 5.0}))
        post = opt.register_step_post_hook(
            lambda o, args, kwargs: log.append(("post", args[0] is o, sorted(kwargs))))
        try:
            log.append(("returned", opt.step()))
            pre.remove()
            post.remove()
            log.append(("returned", opt.step(closure=None)))
        finally:
            global_pre.remove()
            global_post.remove()
        opt.step()
        logs.append(log)
    assert logs[0] == logs[1]
    assert ("returned", 5.0) in logs[0]


def test_step_hook_with_a_bad_result_raises():
    p = tj.tensor([1.0], requires_grad=True)
    opt = SGD([p], lr=0.1)
    opt.register_step_pre_hook(lambda o, args, kwargs: "nope")
    with pytest.raises(RuntimeError, match="must return None or a tuple of \\(new_args, "
                                           "new_kwargs\\), but got nope"):
        opt.step()


def test_step_hooks_of_a_user_defined_optimizer():
    class Halver(tj.optim.Optimizer):
        def __init__(self, params):
            super().__init__(params, {})

        def step(self, closure=None):
            with tj.no_grad():
                for group in self.param_groups:
                    for p in group["params"]:
                        p.mul_(0.5)

    p = tj.tensor([4.0])
    opt = Halver([p])
    calls = []
    opt.register_step_post_hook(lambda o, args, kwargs: calls.append(o is opt))
    opt.step()
    assert calls == [True] and p.tolist() == [2.0]


def test_state_dict_hooks_like_torch():
    torch = pytest.importorskip("torch")
    results = []
    for lib in (tj, torch):
        log = []
        p = lib.tensor([1.0], requires_grad=True)
        opt = lib.optim.SGD([p], lr=0.1, momentum=0.9)
        p.grad = lib.ones(1)
        opt.step()
        opt.register_state_dict_pre_hook(lambda o: log.append("pre"))
        opt.register_state_dict_pre_hook(lambda o: log.append("first pre"), prepend=True)

        def post(o, state_dict):
            log.append("post")
            state_dict["extra"] = 1
        opt.register_state_dict_post_hook(post)
        saved = opt.state_dict()

        def load_pre(o, state_dict):
            log.append(sorted(state_dict))
            state_dict = dict(state_dict)
            state_dict["param_groups"] = copy.deepcopy(state_dict["param_groups"])
            state_dict["param_groups"][0]["lr"] = 0.5
            return state_dict
        opt.register_load_state_dict_pre_hook(load_pre)
        opt.register_load_state_dict_post_hook(lambda o: log.append(o.param_groups[0]["lr"]))
        opt.load_state_dict(saved)
        results.append(log)
    assert results[0] == results[1] == ["first pre", "pre", "post",
                                        ["extra", "param_groups", "state"], 0.5]


def test_removed_hooks_do_not_run():
    p = tj.tensor([1.0], requires_grad=True)
    opt = SGD([p], lr=0.1)
    calls = []
    with opt.register_step_pre_hook(lambda o, a, k: calls.append("pre")):
        opt.step()
    handle = register_optimizer_step_post_hook(lambda o, a, k: calls.append("post"))
    opt.step()
    handle.remove()
    opt.step()
    handle = register_optimizer_step_pre_hook(lambda o, a, k: calls.append("global pre"))
    handle.remove()
    opt.step()
    assert calls == ["pre", "post"]


def test_add_param_group_to_every_optimizer():
    for cls in ALL:
        a = tj.tensor([1.0, 2.0], dtype=tj.float64, requires_grad=True)
        b = tj.tensor([1.0, 2.0], dtype=tj.float64, requires_grad=True)
        opt = cls([a], lr=0.01)
        opt.add_param_group({"params": [b], "lr": 0.02})
        assert opt.param_groups[1]["lr"] == 0.02
        assert set(opt.param_groups[1]) == set(opt.param_groups[0]), cls.__name__
        single = tj.tensor([1.0, 2.0], dtype=tj.float64, requires_grad=True)
        single_opt = cls([single], lr=0.02)
        for _ in range(3):
            for p in (a, b, single):
                p.grad = tj.tensor([0.3, -0.7], dtype=tj.float64)
            opt.step()
            single_opt.step()
        np.testing.assert_array_equal(b.detach().numpy(), single.detach().numpy(),
                                      err_msg=cls.__name__)


def _parameters(function):
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


def test_signatures_equal_torch():
    """Names, order, kinds (positional or keyword-only) and defaults of every constructor."""
    torch = pytest.importorskip("torch")
    for name in ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam",
                 "RAdam", "ASGD", "LBFGS"]:
        assert name in tj.optim.__all__ and getattr(tj.optim, name).__name__ == name
        assert _parameters(getattr(tj.optim, name).__init__) == \
            _parameters(getattr(torch.optim, name).__init__), name
    for name in torch.optim.lr_scheduler.__all__:
        ours = getattr(tj.optim.lr_scheduler, name)
        assert _parameters(ours.__init__) == \
            _parameters(getattr(torch.optim.lr_scheduler, name).__init__), name
        assert _parameters(ours.step) == \
            _parameters(getattr(torch.optim.lr_scheduler, name).step), name
    assert _parameters(LBFGS.step) == _parameters(torch.optim.LBFGS.step)
    with pytest.raises(TypeError, match=re.escape("unexpected keyword argument 'fused'")):
        NAdam([tj.zeros(1, requires_grad=True)], fused=True)
