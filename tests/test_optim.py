"""tapejit.optim: update rules against torch.optim (when importable) and against NumPy
references written from torch's documented formulas (always), plus the Optimizer API."""
import copy
import pickle
import re
import warnings

import numpy as np
import pytest

import tapejit as tj
from tapejit.optim import SGD, Adam, AdamW, Optimizer, RMSprop

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not importable")

SHAPES = [(3, 4), (5,), ()]
STEPS = 5
# A float32 update is rounded at every operation; torch fuses some multiply-adds, so the
# two agree to an ulp or so per step.
TOLERANCE = {np.float32: {"rtol": 2e-6, "atol": 2e-7}, np.float64: {"rtol": 1e-13, "atol": 1e-15}}

SGD_OPTIONS = [
    {"lr": 0.1},
    {"lr": 0.1, "momentum": 0.9},
    {"lr": 0.05, "momentum": 0.9, "dampening": 0.3},
    {"lr": 0.05, "momentum": 0.9, "nesterov": True},
    {"lr": 0.1, "weight_decay": 0.1},
    {"lr": 0.1, "maximize": True},
    {"lr": 0.05, "momentum": 0.8, "weight_decay": 0.1, "maximize": True},
    {"lr": 0.02, "momentum": 0.5, "nesterov": True, "weight_decay": 0.01},
]
ADAM_OPTIONS = [
    {"lr": 0.01},
    {"lr": 0.01, "weight_decay": 0.1},
    {"lr": 0.01, "amsgrad": True},
    {"lr": 0.01, "maximize": True},
    {"lr": 0.02, "amsgrad": True, "weight_decay": 0.05, "maximize": True},
    {"lr": 0.01, "betas": (0.5, 0.9), "eps": 1e-6},
    {"lr": 0.01, "betas": (0.3, 0.8)},  # 1 - beta1 >= 0.5: torch's lerp takes its other formula
    {"lr": 0.01, "weight_decay": 0.1, "decoupled_weight_decay": True},
]
ADAMW_OPTIONS = [
    {"lr": 0.01},
    {"lr": 0.01, "weight_decay": 0.1, "amsgrad": True},
    {"lr": 0.01, "maximize": True, "betas": (0.8, 0.99)},
]
RMSPROP_OPTIONS = [
    {"lr": 0.01},
    {"lr": 0.01, "momentum": 0.9},
    {"lr": 0.01, "centered": True},
    {"lr": 0.01, "centered": True, "momentum": 0.5},
    {"lr": 0.01, "weight_decay": 0.1},
    {"lr": 0.01, "maximize": True},
    {"lr": 0.01, "alpha": 0.3, "centered": True},  # 1 - alpha >= 0.5: lerp's other formula
    {"lr": 0.01, "alpha": 0.9, "eps": 1e-3, "momentum": 0.3, "weight_decay": 0.05, "maximize": True},
]
CASES = ([(SGD, o) for o in SGD_OPTIONS] + [(Adam, o) for o in ADAM_OPTIONS]
         + [(AdamW, o) for o in ADAMW_OPTIONS] + [(RMSprop, o) for o in RMSPROP_OPTIONS])
CASE_IDS = [f"{cls.__name__}-" + "-".join(f"{k}={v}" for k, v in o.items()) for cls, o in CASES]


def _initial_values(dtype, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=shape).astype(dtype) for shape in SHAPES]


def _gradient_schedule(dtype, seed=1):
    """Gradients for every step; ``None`` (no gradient: the parameter is skipped) for the
    second parameter at step 2, as happens to an unused parameter."""
    rng = np.random.default_rng(seed)
    schedule = []
    for step in range(STEPS):
        grads = [rng.normal(size=shape).astype(dtype) for shape in SHAPES]
        if step == 2:
            grads[1] = None
        schedule.append(grads)
    return schedule


def _leaves(values):
    return [tj.tensor(v.copy(), requires_grad=True) for v in values]


def _set_grads(params, grads):
    for p, g in zip(params, grads):
        p.grad = None if g is None else tj.tensor(g.copy())


def _run_tapejit(cls, options, dtype):
    params = _leaves(_initial_values(dtype))
    opt = cls(params, **options)
    trajectory = []
    for grads in _gradient_schedule(dtype):
        _set_grads(params, grads)
        opt.step()
        trajectory.append([p.detach().numpy().copy() for p in params])
    return params, opt, trajectory


# ---- NumPy references: torch's documented rules, one NumPy expression per line ------------

def _reference_trajectory(cls, options, dtype):
    """The same run as ``_run_tapejit`` with the update written out in NumPy, in ``dtype``."""
    cast = np.dtype(dtype).type
    params = [v.copy() for v in _initial_values(dtype)]
    state = [{} for _ in params]
    trajectory = []
    for grads in _gradient_schedule(dtype):
        for p, g, s in zip(params, grads, state):
            if g is not None:
                _REFERENCE_STEP[cls](p, g.copy(), s, options, cast)
        trajectory.append([p.copy() for p in params])
    return trajectory


def _lerp(start, end, weight):
    """torch.lerp's formula (it switches at weight 0.5 for accuracy)."""
    if abs(weight) < 0.5:
        return start + weight * (end - start)
    return end - (end - start) * (weight.dtype.type(1) - weight)


def _sgd_reference(p, g, s, o, cast):
    lr, momentum = o["lr"], o.get("momentum", 0.0)
    dampening, wd = o.get("dampening", 0.0), o.get("weight_decay", 0.0)
    if o.get("maximize"):
        g = -g
    if wd:
        g = g + cast(wd) * p
    if momentum:
        if "buf" not in s:
            s["buf"] = g.copy()
        else:
            s["buf"] = s["buf"] * cast(momentum) + cast(1 - dampening) * g
        g = g + cast(momentum) * s["buf"] if o.get("nesterov") else s["buf"]
    p += cast(-lr) * g


def _adam_reference(p, g, s, o, cast, decoupled=False):
    lr, eps = o["lr"], o.get("eps", 1e-8)
    beta1, beta2 = o.get("betas", (0.9, 0.999))
    wd = o.get("weight_decay", 0.0)
    decoupled = decoupled or o.get("decoupled_weight_decay", False)
    if o.get("maximize"):
        g = -g
    if wd and decoupled:
        p *= cast(1 - lr * wd)
    elif wd:
        g = g + cast(wd) * p
    s.setdefault("m", np.zeros_like(p))
    s.setdefault("v", np.zeros_like(p))
    s["t"] = s.get("t", 0) + 1
    s["m"] = _lerp(s["m"], g, cast(1 - beta1))
    s["v"] = s["v"] * cast(beta2) + cast(1 - beta2) * g * g
    v = s["v"]
    if o.get("amsgrad"):
        s["vmax"] = np.maximum(s.get("vmax", np.zeros_like(p)), v)
        v = s["vmax"]
    step_size = lr / (1 - beta1 ** s["t"])
    denom = np.sqrt(v) / cast((1 - beta2 ** s["t"]) ** 0.5) + cast(eps)
    p += cast(-step_size) * s["m"] / denom


def _adamw_reference(p, g, s, o, cast):
    _adam_reference(p, g, s, dict(o, weight_decay=o.get("weight_decay", 1e-2)), cast,
                    decoupled=True)


def _rmsprop_reference(p, g, s, o, cast):
    lr, alpha, eps = o["lr"], o.get("alpha", 0.99), o.get("eps", 1e-8)
    wd, momentum = o.get("weight_decay", 0.0), o.get("momentum", 0.0)
    if o.get("maximize"):
        g = -g
    if wd:
        g = g + cast(wd) * p
    s["sq"] = s.get("sq", np.zeros_like(p)) * cast(alpha) + cast(1 - alpha) * g * g
    if o.get("centered"):
        s["ga"] = _lerp(s.get("ga", np.zeros_like(p)), g, cast(1 - alpha))
        avg = np.sqrt(s["sq"] - s["ga"] * s["ga"]) + cast(eps)
    else:
        avg = np.sqrt(s["sq"]) + cast(eps)
    if momentum > 0:
        s["buf"] = s.get("buf", np.zeros_like(p)) * cast(momentum) + g / avg
        p += cast(-lr) * s["buf"]
    else:
        p += cast(-lr) * g / avg


_REFERENCE_STEP = {SGD: _sgd_reference, Adam: _adam_reference, AdamW: _adamw_reference,
                   RMSprop: _rmsprop_reference}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cls,options", CASES, ids=CASE_IDS)
def test_update_rule_matches_numpy_reference(cls, options, dtype):
    params, _, trajectory = _run_tapejit(cls, options, dtype)
    expected = _reference_trajectory(cls, options, dtype)
    for step, (got, want) in enumerate(zip(trajectory, expected)):
        for i, (a, b) in enumerate(zip(got, want)):
            assert a.dtype == dtype
            np.testing.assert_allclose(a, b, **TOLERANCE[dtype], err_msg=f"step {step} param {i}")
    # the run moved every parameter (the comparison is not between two unchanged copies)
    for p, v in zip(params, _initial_values(dtype)):
        assert not np.allclose(p.detach().numpy(), v)


def _torch_optimizer(cls):
    return getattr(torch.optim, cls.__name__)


@needs_torch
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cls,options", CASES, ids=CASE_IDS)
def test_update_rule_matches_torch(cls, options, dtype):
    _, opt, trajectory = _run_tapejit(cls, options, dtype)
    t_params = [torch.tensor(v.copy(), requires_grad=True) for v in _initial_values(dtype)]
    t_opt = _torch_optimizer(cls)(t_params, **options)
    for step, grads in enumerate(_gradient_schedule(dtype)):
        for p, g in zip(t_params, grads):
            p.grad = None if g is None else torch.tensor(g.copy())
        t_opt.step()
        for i, (a, p) in enumerate(zip(trajectory[step], t_params)):
            np.testing.assert_allclose(a, p.detach().numpy(), **TOLERANCE[dtype],
                                       err_msg=f"step {step} param {i}")
    # the state has torch's layout, keys and values
    ours, theirs = opt.state_dict(), t_opt.state_dict()
    assert ours["param_groups"] == theirs["param_groups"]
    assert list(ours["state"]) == list(theirs["state"])
    for index, entry in theirs["state"].items():
        assert list(ours["state"][index]) == list(entry)
        for name, value in entry.items():
            assert ours["state"][index][name].dtype.name == str(value.dtype).replace("torch.", "")
            np.testing.assert_allclose(ours["state"][index][name].numpy(), value.numpy(),
                                       **TOLERANCE[dtype], err_msg=name)
    assert repr(opt) == repr(t_opt)


def test_hand_computed_sgd_momentum_steps():
    p = tj.tensor([1.0, -2.0], dtype=tj.float64, requires_grad=True)
    opt = SGD([p], lr=0.1, momentum=0.5)
    p.grad = tj.tensor([0.5, 1.0], dtype=tj.float64)
    opt.step()  # buf = g = [0.5, 1]; p = [1 - 0.05, -2 - 0.1]
    assert p.tolist() == pytest.approx([0.95, -2.1])
    opt.step()  # buf = 0.5 * [0.5, 1] + [0.5, 1] = [0.75, 1.5]
    assert p.tolist() == pytest.approx([0.95 - 0.075, -2.1 - 0.15])
    assert opt.state[p]["momentum_buffer"].tolist() == pytest.approx([0.75, 1.5])


def test_hand_computed_adam_first_step_moves_by_lr():
    # At t = 1 the bias-corrected update is lr * g / (|g| + eps * ...) = lr * sign(g).
    p = tj.tensor([1.0, 2.0, 3.0], dtype=tj.float64, requires_grad=True)
    opt = Adam([p], lr=0.01, eps=0.0)
    p.grad = tj.tensor([3.0, -0.5, 1e-3], dtype=tj.float64)
    opt.step()
    assert p.tolist() == pytest.approx([0.99, 2.01, 2.99], rel=1e-12)
    assert opt.state[p]["step"].item() == 1.0
    assert opt.state[p]["exp_avg"].tolist() == pytest.approx([0.3, -0.05, 1e-4])


def test_hand_computed_rmsprop_first_step():
    p = tj.tensor([1.0], dtype=tj.float64, requires_grad=True)
    opt = RMSprop([p], lr=0.01, alpha=0.75, eps=0.0)
    p.grad = tj.tensor([2.0], dtype=tj.float64)
    opt.step()  # square_avg = 0.25 * 4 = 1; p = 1 - 0.01 * 2 / 1
    assert p.item() == pytest.approx(0.98)
    assert opt.state[p]["square_avg"].item() == pytest.approx(1.0)


def test_adamw_decays_weights_without_a_gradient_signal():
    p = tj.tensor([2.0, -4.0], dtype=tj.float64, requires_grad=True)
    opt = AdamW([p], lr=0.1, weight_decay=0.5)
    p.grad = tj.zeros(2, dtype=tj.float64)  # m = v = 0: only the decoupled decay acts
    opt.step()
    assert p.tolist() == pytest.approx([2.0 * 0.95, -4.0 * 0.95])
    assert opt.param_groups[0]["decoupled_weight_decay"] is True


# ---- param groups -------------------------------------------------------------------------

@pytest.mark.parametrize("cls", [SGD, Adam, AdamW, RMSprop])
def test_param_groups_with_their_own_lr(cls):
    a = tj.tensor([1.0, 2.0], dtype=tj.float64, requires_grad=True)
    b = tj.tensor([1.0, 2.0], dtype=tj.float64, requires_grad=True)
    opt = cls([{"params": [a]}, {"params": b, "lr": 0.5}], lr=0.01)
    assert [g["lr"] for g in opt.param_groups] == [0.01, 0.5]
    assert len(opt.param_groups[1]["params"]) == 1 and opt.param_groups[1]["params"][0] is b
    single_a = tj.tensor([1.0, 2.0], dtype=tj.float64, requires_grad=True)
    single_b = tj.tensor([1.0, 2.0], dtype=tj.float64, requires_grad=True)
    opt_a, opt_b = cls([single_a], lr=0.01), cls([single_b], lr=0.5)
    for _ in range(3):
        for p in (a, b, single_a, single_b):
            p.grad = tj.tensor([0.3, -0.7], dtype=tj.float64)
        opt.step()
        opt_a.step()
        opt_b.step()
    np.testing.assert_array_equal(a.detach().numpy(), single_a.detach().numpy())
    np.testing.assert_array_equal(b.detach().numpy(), single_b.detach().numpy())
    assert not np.allclose(a.detach().numpy(), b.detach().numpy())


@needs_torch
@pytest.mark.parametrize("cls,options", [(SGD, {"momentum": 0.9, "nesterov": True}),
                                         (Adam, {"amsgrad": True}), (AdamW, {}),
                                         (RMSprop, {"centered": True, "momentum": 0.5})])
def test_param_groups_match_torch(cls, options):
    values = _initial_values(np.float32)
    ours = _leaves(values)
    theirs = [torch.tensor(v.copy(), requires_grad=True) for v in values]

    def groups(ps):
        return [{"params": ps[:1], "lr": 0.05, "weight_decay": 0.1}, {"params": ps[1:]}]

    opt = cls(groups(ours), lr=0.01, **options)
    t_opt = _torch_optimizer(cls)(groups(theirs), lr=0.01, **options)
    for grads in _gradient_schedule(np.float32):
        _set_grads(ours, grads)
        for p, g in zip(theirs, grads):
            p.grad = None if g is None else torch.tensor(g.copy())
        opt.step()
        t_opt.step()
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(),
                                   **TOLERANCE[np.float32])
    assert opt.state_dict()["param_groups"] == t_opt.state_dict()["param_groups"]


def test_changing_lr_in_param_groups_takes_effect():
    p = tj.tensor([1.0], dtype=tj.float64, requires_grad=True)
    opt = SGD([p], lr=0.1)
    p.grad = tj.tensor([1.0], dtype=tj.float64)
    opt.step()
    opt.param_groups[0]["lr"] = 0.01  # what an lr scheduler does
    opt.step()
    assert p.item() == pytest.approx(1.0 - 0.1 - 0.01)


def test_add_param_group_and_named_parameters():
    a = tj.tensor([1.0], requires_grad=True)
    b = tj.tensor([2.0], requires_grad=True)
    opt = Adam([a], lr=0.1)
    opt.add_param_group({"params": [b], "betas": (0.5, 0.6)})
    assert opt.param_groups[1]["lr"] == 0.1 and opt.param_groups[1]["betas"] == (0.5, 0.6)
    assert opt.param_groups[1]["params"][0] is b
    named = SGD([("w", a), ("b", b)], lr=0.1)
    assert named.param_groups[0]["param_names"] == ["w", "b"]
    assert named.state_dict()["param_groups"][0]["param_names"] == ["w", "b"]
    with pytest.raises(ValueError, match="all optimizer param groups should be with/without names"):
        named.add_param_group({"params": [tj.tensor([0.0], requires_grad=True)]})


def test_params_from_a_generator():
    params = [tj.tensor([1.0], requires_grad=True) for _ in range(3)]
    opt = SGD((p for p in params), lr=0.1)
    assert len(opt.param_groups[0]["params"]) == 3


# ---- state dict ---------------------------------------------------------------------------

@pytest.mark.parametrize("cls,options", [(SGD, {"lr": 0.1, "momentum": 0.9}),
                                         (Adam, {"lr": 0.01, "amsgrad": True}),
                                         (AdamW, {"lr": 0.01}),
                                         (RMSprop, {"lr": 0.01, "momentum": 0.5, "centered": True})])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_state_dict_round_trip_continues_the_same_trajectory(cls, options, dtype):
    schedule = _gradient_schedule(dtype) + _gradient_schedule(dtype, seed=7)
    params = _leaves(_initial_values(dtype))
    opt = cls(params, **options)
    for grads in schedule[:STEPS]:
        _set_grads(params, grads)
        opt.step()
    saved = pickle.loads(pickle.dumps(opt.state_dict()))  # as torch.save/torch.load would
    assert sorted(saved) == ["param_groups", "state"]
    assert saved["param_groups"][0]["params"] == [0, 1, 2]
    assert list(saved["state"]) == [0, 1, 2]

    resumed_params = _leaves([p.detach().numpy() for p in params])
    resumed = cls(resumed_params, lr=123.0)  # the loaded groups bring their hyper-parameters
    resumed.load_state_dict(saved)
    assert resumed.param_groups[0]["lr"] == options["lr"]
    assert all(a is b for a, b in zip(resumed.param_groups[0]["params"], resumed_params))
    for grads in schedule[STEPS:]:
        _set_grads(params, grads)
        _set_grads(resumed_params, grads)
        opt.step()
        resumed.step()
        for a, b in zip(params, resumed_params):
            np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    # loading copied the state: the saved dict did not move with the resumed optimizer
    first_state = next(iter(saved["state"].values()))
    for name, value in first_state.items():
        assert value is not resumed.state[resumed_params[0]][name]


def test_state_dict_holds_live_state_and_dtypes():
    p = tj.tensor(np.ones(3, np.float32), requires_grad=True)
    opt = Adam([p], lr=0.1)
    assert opt.state_dict()["state"] == {}
    p.grad = tj.ones(3)
    opt.step()
    state = opt.state_dict()["state"][0]
    assert list(state) == ["step", "exp_avg", "exp_avg_sq"]
    assert state["step"].dtype is tj.float32 and state["step"].shape == ()
    assert state["exp_avg"].dtype is tj.float32 and state["exp_avg"].shape == (3,)
    assert state["exp_avg"] is opt.state[p]["exp_avg"]  # as torch: references, not copies


def test_sgd_without_momentum_keeps_no_state():
    p = tj.tensor([1.0], requires_grad=True)
    opt = SGD([p], lr=0.1)
    p.grad = tj.ones(1)
    opt.step()
    assert opt.state_dict()["state"] == {}


def test_load_state_dict_errors():
    a = tj.tensor([1.0], requires_grad=True)
    b = tj.tensor([1.0], requires_grad=True)
    two_groups = SGD([{"params": [a]}, {"params": [b]}], lr=0.1)
    with pytest.raises(ValueError, match="loaded state dict has a different number of parameter groups"):
        SGD([a], lr=0.1).load_state_dict(two_groups.state_dict())
    with pytest.raises(ValueError, match="loaded state dict contains a parameter group that doesn't "
                                         "match the size of optimizer's group"):
        SGD([a, b], lr=0.1).load_state_dict(SGD([a], lr=0.1).state_dict())


def test_loaded_state_is_cast_to_the_parameter_dtype():
    p64 = tj.tensor(np.ones(2), requires_grad=True)
    opt64 = Adam([p64], lr=0.1)
    p64.grad = tj.tensor(np.ones(2))
    opt64.step()
    p32 = tj.tensor(np.ones(2, np.float32), requires_grad=True)
    opt32 = Adam([p32], lr=0.1)
    opt32.load_state_dict(opt64.state_dict())
    assert opt32.state[p32]["exp_avg"].dtype is tj.float32
    assert opt32.state[p32]["step"].dtype is opt64.state[p64]["step"].dtype  # step keeps its dtype
    p32.grad = tj.ones(2)
    opt32.step()
    assert p32.dtype is tj.float32 and opt32.state[p32]["step"].item() == 2.0


@needs_torch
@pytest.mark.parametrize("cls,options", [(SGD, {"lr": 0.1, "momentum": 0.9}),
                                         (Adam, {"lr": 0.01, "amsgrad": True}),
                                         (RMSprop, {"lr": 0.01, "centered": True})])
def test_torch_state_dict_loads_and_continues_like_torch(cls, options):
    values = _initial_values(np.float32)
    theirs = [torch.tensor(v.copy(), requires_grad=True) for v in values]
    t_opt = _torch_optimizer(cls)(theirs, **options)
    schedule = _gradient_schedule(np.float32)
    for grads in schedule[:2]:
        for p, g in zip(theirs, grads):
            p.grad = None if g is None else torch.tensor(g.copy())
        t_opt.step()
    ours = _leaves([p.detach().numpy() for p in theirs])
    opt = cls(ours, **options)
    opt.load_state_dict(t_opt.state_dict())
    for grads in schedule[2:]:
        _set_grads(ours, grads)
        for p, g in zip(theirs, grads):
            p.grad = None if g is None else torch.tensor(g.copy())
        opt.step()
        t_opt.step()
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), **TOLERANCE[np.float32])


# ---- zero_grad, closure, grad handling ----------------------------------------------------

def test_zero_grad_sets_to_none_by_default():
    p = tj.tensor([1.0, 2.0], requires_grad=True)
    q = tj.tensor([3.0], requires_grad=True)
    opt = SGD([p, q], lr=0.1)
    (p * p).sum().backward()
    assert p.grad is not None and q.grad is None
    opt.zero_grad()
    assert p.grad is None and q.grad is None


def test_zero_grad_in_place_keeps_the_gradient_tensor():
    p = tj.tensor([1.0, 2.0], requires_grad=True)
    opt = SGD([p], lr=0.1)
    (p * p).sum().backward()
    grad = p.grad
    array = grad.numpy()
    opt.zero_grad(set_to_none=False)
    assert p.grad is grad and p.grad.numpy() is array
    assert p.grad.tolist() == [0.0, 0.0]
    (3 * p).sum().backward()  # accumulates into the zeroed gradient
    assert p.grad.tolist() == [3.0, 3.0]


def test_closure_is_evaluated_with_grad_enabled_and_its_loss_returned():
    x = tj.tensor([3.0], dtype=tj.float64, requires_grad=True)
    opt = SGD([x], lr=0.25)
    calls = []

    def closure():
        calls.append(tj.is_grad_enabled())
        opt.zero_grad()
        loss = (x * x).sum()
        loss.backward()
        return loss

    with tj.no_grad():
        loss = opt.step(closure)
    assert calls == [True]
    assert loss.item() == 9.0
    assert x.item() == pytest.approx(3.0 - 0.25 * 6.0)
    assert opt.step() is None


def test_parameters_without_grad_are_skipped():
    p = tj.tensor([1.0], requires_grad=True)
    q = tj.tensor([1.0], requires_grad=True)
    opt = Adam([p, q], lr=0.1)
    p.grad = tj.ones(1)
    version = q._version_counter
    opt.step()
    assert q.item() == 1.0 and q._version_counter == version
    assert q not in opt.state and "step" in opt.state[p]


@pytest.mark.parametrize("cls", [SGD, Adam, RMSprop])
def test_float32_parameters_stay_float32_in_place(cls):
    p = tj.tensor(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3), requires_grad=True)
    array = p.detach().numpy()
    view = p.data
    opt = cls([p], lr=0.1, momentum=0.9) if cls is not Adam else cls([p], lr=0.1)
    p.grad = tj.ones(2, 3)
    opt.step()
    assert p.dtype is tj.float32 and p.detach().numpy() is array and array.dtype == np.float32
    np.testing.assert_array_equal(view.numpy(), array)  # .data shares the updated memory
    assert all(v.dtype is tj.float32 for k, v in opt.state[p].items() if k != "step")


def test_non_contiguous_parameter_is_updated_in_its_own_memory():
    base = np.arange(6.0).reshape(2, 3)
    p = tj.zeros(3, 2, dtype=tj.float64, requires_grad=True)
    p.data = base.T  # a transposed view: no 1-D view of it exists
    opt = SGD([p], lr=0.5)
    p.grad = tj.tensor(np.ones((3, 2)))
    opt.step()
    np.testing.assert_array_equal(base, np.arange(6.0).reshape(2, 3) - 0.5)


def test_gradient_of_another_dtype_is_cast_to_the_parameter_dtype():
    p = tj.tensor(np.ones(2, np.float32), requires_grad=True)
    p.grad = tj.tensor(np.full(2, 0.5))  # float64
    SGD([p], lr=1.0).step()
    assert p.dtype is tj.float32 and p.tolist() == [0.5, 0.5]


# ---- in-place semantics -------------------------------------------------------------------

@pytest.mark.parametrize("cls", [SGD, Adam, AdamW, RMSprop])
def test_step_bumps_the_version_once_so_saved_graphs_refuse_backward(cls):
    w = tj.tensor([1.0, 2.0], requires_grad=True)
    opt = cls([w], lr=0.1)
    loss = (w * w).sum()  # MulBackward0 saves w
    w.grad = tj.ones(2)
    version = w._version_counter
    opt.step()
    assert w._version_counter == version + 1
    with pytest.raises(RuntimeError, match="one of the variables needed for gradient computation "
                                           "has been modified by an inplace operation"):
        loss.backward()


@needs_torch
def test_in_place_error_reads_like_torch():
    def message(lib):
        w = lib.tensor([1.0, 2.0], requires_grad=True)
        opt = lib.optim.SGD([w], lr=0.1)
        loss = (w * w).sum()
        w.grad = lib.ones(2)
        opt.step()
        with pytest.raises(RuntimeError) as info:
            loss.backward()
        return str(info.value)

    ours, theirs = message(tj), message(torch)
    head = "one of the variables needed for gradient computation has been modified by an inplace operation"
    assert ours.startswith(head) and theirs.startswith(head)
    assert "is at version 1; expected version 0 instead" in ours
    assert "is at version 1; expected version 0 instead" in theirs


def test_a_new_graph_after_step_sees_the_updated_value():
    w = tj.tensor([1.0, 2.0], dtype=tj.float64, requires_grad=True)
    opt = SGD([w], lr=0.5)
    (w * w).sum().backward()
    opt.step()  # w = [1, 2] - 0.5 * [2, 4] = [0, 0]
    opt.zero_grad()
    (w * w + w).sum().backward()
    assert w.grad.tolist() == [1.0, 1.0]


def test_manual_update_under_no_grad_and_grad_reset():
    w = tj.tensor([1.0, -1.0], dtype=tj.float64, requires_grad=True)
    for _ in range(3):
        loss = (w * w).sum()
        loss.backward()
        with tj.no_grad():
            w -= 0.25 * w.grad
        w.grad = None
    assert w.is_leaf and w.requires_grad and w.grad is None
    assert w.tolist() == pytest.approx([0.125, -0.125])
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an "
                                           "in-place operation"):
        w -= 0.1


def test_manual_update_bumps_the_version_like_step():
    w = tj.tensor([1.0, 2.0], requires_grad=True)
    loss = (w * w).sum()
    with tj.no_grad():
        w -= 0.1
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


# ---- errors -------------------------------------------------------------------------------

def _leaf():
    return tj.tensor([1.0], requires_grad=True)


@pytest.mark.parametrize("make,error,message", [
    (lambda: SGD([_leaf()], lr=-1), ValueError, "Invalid learning rate: -1"),
    (lambda: SGD([_leaf()], momentum=-0.5), ValueError, "Invalid momentum value: -0.5"),
    (lambda: SGD([_leaf()], weight_decay=-1), ValueError, "Invalid weight_decay value: -1"),
    (lambda: SGD([_leaf()], nesterov=True), ValueError,
     "Nesterov momentum requires a momentum and zero dampening"),
    (lambda: SGD([_leaf()], momentum=0.9, dampening=0.1, nesterov=True), ValueError,
     "Nesterov momentum requires a momentum and zero dampening"),
    (lambda: Adam([_leaf()], lr=-1), ValueError, "Invalid learning rate: -1"),
    (lambda: Adam([_leaf()], eps=-1e-8), ValueError, "Invalid epsilon value: -1e-08"),
    (lambda: Adam([_leaf()], betas=(1.0, 0.999)), ValueError, "Invalid beta parameter at index 0: 1.0"),
    (lambda: Adam([_leaf()], betas=(0.9, -0.1)), ValueError, "Invalid beta parameter at index 1: -0.1"),
    (lambda: Adam([_leaf()], weight_decay=-1), ValueError, "Invalid weight_decay value: -1"),
    (lambda: AdamW([_leaf()], lr=-0.5), ValueError, "Invalid learning rate: -0.5"),
    (lambda: RMSprop([_leaf()], lr=-1), ValueError, "Invalid learning rate: -1"),
    (lambda: RMSprop([_leaf()], alpha=-1), ValueError, "Invalid alpha value: -1"),
    (lambda: RMSprop([_leaf()], momentum=-1), ValueError, "Invalid momentum value: -1"),
    (lambda: RMSprop([_leaf()], eps=-1), ValueError, "Invalid epsilon value: -1"),
    (lambda: SGD([], lr=0.1), ValueError, "optimizer got an empty parameter list"),
    (lambda: SGD(_leaf(), lr=0.1), TypeError,
     "params argument given to the optimizer should be an iterable of Tensors or dicts"),
    (lambda: SGD([_leaf() * 2], lr=0.1), ValueError, "can't optimize a non-leaf Tensor"),
    (lambda: SGD([1.0], lr=0.1), TypeError,
     "optimizer can only optimize Tensors, but one of the params is float"),
    (lambda: SGD([{"params": {_leaf()}}], lr=0.1), TypeError,
     "optimizer parameters need to be organized in ordered collections"),
])
def test_errors(make, error, message):
    with pytest.raises(error, match=re.escape(message)):
        make()


@needs_torch
@pytest.mark.parametrize("make", [
    lambda lib, p: lib.optim.SGD([p], lr=-1),
    lambda lib, p: lib.optim.SGD([p], lr=0.1, nesterov=True),
    lambda lib, p: lib.optim.SGD([], lr=0.1),
    lambda lib, p: lib.optim.SGD([p * 2], lr=0.1),
    lambda lib, p: lib.optim.Adam([p], betas=(0.9, 1.0)),
    lambda lib, p: lib.optim.Adam([p], eps=-1.0),
    lambda lib, p: lib.optim.RMSprop([p], alpha=-0.5),
    lambda lib, p: lib.optim.SGD([[p]], lr=0.1),
])
def test_error_messages_equal_torch(make):
    def raised(lib):
        with pytest.raises(Exception) as info:
            make(lib, lib.tensor([1.0], requires_grad=True))
        return type(info.value), str(info.value).replace("torch", "LIB").replace("tapejit", "LIB")

    assert raised(tj) == raised(torch)


def test_duplicate_parameters_warn_and_shared_groups_raise():
    p = _leaf()
    with pytest.warns(UserWarning, match="optimizer contains a parameter group with duplicate parameters"):
        SGD([p, p], lr=0.1)
    with pytest.raises(ValueError, match="some parameters appear in more than one parameter group"):
        SGD([{"params": [p]}, {"params": [p]}], lr=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SGD([p, _leaf()], lr=0.1)  # distinct parameters: no warning


def test_add_param_group_errors():
    opt = SGD([_leaf()], lr=0.1)
    with pytest.raises(TypeError, match="param_group must be a dict"):
        opt.add_param_group([_leaf()])


def test_required_hyper_parameter_of_a_custom_optimizer():
    class SignDescent(Optimizer):
        """A user-defined optimizer written with tensor ops, as with torch.optim."""

        def __init__(self, params, lr=tj.optim.required):
            super().__init__(params, {"lr": lr})

        def step(self, closure=None):
            with tj.no_grad():
                for group in self.param_groups:
                    for p in group["params"]:
                        if p.grad is not None:
                            p -= group["lr"] * p.grad.sign()

    p = tj.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(ValueError, match="parameter group didn't specify a value of required "
                                         "optimization parameter lr"):
        SignDescent([p])
    opt = SignDescent([p], lr=0.5)
    p.grad = tj.tensor([3.0, -0.1])
    opt.step()
    assert p.tolist() == [0.5, 2.5]


def test_repr():
    opt = SGD([_leaf()], lr=0.1, momentum=0.9)
    text = repr(opt)
    assert text.startswith("SGD (\nParameter Group 0\n    dampening: 0\n")
    assert "    lr: 0.1\n" in text and "    momentum: 0.9\n" in text and text.endswith(")")


def test_deepcopy_of_an_optimizer_state_dict_is_a_snapshot():
    p = _leaf()
    opt = SGD([p], lr=0.1, momentum=0.9)
    p.grad = tj.ones(1)
    opt.step()
    snapshot = copy.deepcopy(opt.state_dict())
    opt.step()
    assert snapshot["state"][0]["momentum_buffer"].item() == 1.0
    assert opt.state[p]["momentum_buffer"].item() == pytest.approx(1.9)


# ---- end to end ---------------------------------------------------------------------------

def _tiny_mlp_data(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(32, 2)).astype(np.float32)
    y = (np.sin(x[:, :1]) * np.cos(x[:, 1:])).astype(np.float32)
    sizes = [(2, 16), (16,), (16, 16), (16,), (16, 1), (1,)]
    weights = [(rng.normal(size=s) * 0.5).astype(np.float32) for s in sizes]
    return x, y, weights


def _mlp_loss(lib, params, x, y):
    w1, b1, w2, b2, w3, b3 = params
    h = lib.tanh(x @ w1 + b1)
    h = lib.tanh(h @ w2 + b2)
    return ((h @ w3 + b3 - y) ** 2).mean()


@pytest.mark.parametrize("cls,options", [(SGD, {"lr": 0.1, "momentum": 0.9}), (Adam, {"lr": 0.01}),
                                         (AdamW, {"lr": 0.01}), (RMSprop, {"lr": 0.005})])
def test_tiny_mlp_training_reduces_the_loss(cls, options):
    x, y, weights = _tiny_mlp_data()
    params = _leaves(weights)
    x, y = tj.tensor(x), tj.tensor(y)
    opt = cls(params, **options)
    losses = []
    for _ in range(60):
        opt.zero_grad()
        loss = _mlp_loss(tj, params, x, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


@needs_torch
@pytest.mark.parametrize("cls,options", [(SGD, {"lr": 0.1, "momentum": 0.9, "nesterov": True}),
                                         (Adam, {"lr": 0.01, "amsgrad": True}),
                                         (RMSprop, {"lr": 0.005, "centered": True})])
def test_tiny_mlp_training_follows_torch(cls, options):
    x, y, weights = _tiny_mlp_data()
    ours, theirs = _leaves(weights), [torch.tensor(w.copy(), requires_grad=True) for w in weights]
    opt, t_opt = cls(ours, **options), _torch_optimizer(cls)(theirs, **options)
    tx, ty, ttx, tty = tj.tensor(x), tj.tensor(y), torch.tensor(x), torch.tensor(y)
    for _ in range(10):
        opt.zero_grad()
        t_opt.zero_grad()
        _mlp_loss(tj, ours, tx, ty).backward()
        _mlp_loss(torch, theirs, ttx, tty).backward()
        opt.step()
        t_opt.step()
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-4, atol=1e-5)


def test_nn_parameter_is_optimized():
    Parameter = getattr(tj.nn, "Parameter", None)
    if Parameter is None:
        pytest.skip("tapejit.nn.Parameter does not exist yet")
    w = Parameter(tj.tensor([1.0, 2.0]))
    opt = Adam([w], lr=0.5)
    w.grad = tj.tensor([2.0, -4.0])
    version = w._version_counter
    opt.step()
    assert w.tolist() == pytest.approx([0.5, 2.5])  # Adam's first step moves by lr * sign(g)
    assert isinstance(w, Parameter) and w.requires_grad and w.is_leaf
    assert w._version_counter == version + 1
