"""tapejit.optim.lr_scheduler: every lr against torch's schedulers step by step (when torch
is importable) and against hand-computed values, state dicts, ReduceLROnPlateau's counters
and the errors."""
import math
import pickle
import re

import pytest

import tapejit as tj
from tapejit.optim import SGD, lr_scheduler
from tapejit.optim.lr_scheduler import (CosineAnnealingLR, ExponentialLR, LambdaLR, LinearLR,
                                        LRScheduler, MultiStepLR, ReduceLROnPlateau, StepLR,
                                        _LRScheduler)

STEPS = 30


def _tapejit_optimizer(initial_lr=None):
    """SGD with two groups of different lr (``initial_lr`` set for resumed schedulers)."""
    groups = [{"params": [tj.zeros(2, requires_grad=True)]},
              {"params": [tj.zeros(3, requires_grad=True)], "lr": 0.5}]
    if initial_lr is not None:
        for group, lr in zip(groups, initial_lr):
            group["initial_lr"] = lr
    return SGD(groups, lr=0.1)


def _torch_optimizer(torch, initial_lr=None):
    groups = [{"params": [torch.zeros(2, requires_grad=True)]},
              {"params": [torch.zeros(3, requires_grad=True)], "lr": 0.5}]
    if initial_lr is not None:
        for group, lr in zip(groups, initial_lr):
            group["initial_lr"] = lr
    return torch.optim.SGD(groups, lr=0.1)


def _lrs(optimizer):
    return [group["lr"] for group in optimizer.param_groups]


def _halve_every_third(epoch):
    return 0.5 ** (epoch // 3)


SCHEDULES = {
    "StepLR": ("StepLR", {"step_size": 4, "gamma": 0.3}),
    "MultiStepLR": ("MultiStepLR", {"milestones": [3, 7, 7, 20], "gamma": 0.7}),
    "ExponentialLR": ("ExponentialLR", {"gamma": 0.93}),
    "CosineAnnealingLR": ("CosineAnnealingLR", {"T_max": 7, "eta_min": 0.001}),
    "CosineAnnealingLR-no-min": ("CosineAnnealingLR", {"T_max": 10}),
    "LambdaLR": ("LambdaLR", {"lr_lambda": _halve_every_third}),
    "LambdaLR-per-group": ("LambdaLR", {"lr_lambda": [lambda e: 1 / (e + 1), lambda e: 0.9 ** e]}),
    "LinearLR": ("LinearLR", {}),
    "LinearLR-down": ("LinearLR", {"start_factor": 1.0, "end_factor": 0.05, "total_iters": 12}),
}


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_lrs_match_torch_every_step(name):
    torch = pytest.importorskip("torch")
    class_name, options = SCHEDULES[name]
    ours_opt, theirs_opt = _tapejit_optimizer(), _torch_optimizer(torch)
    ours = getattr(lr_scheduler, class_name)(ours_opt, **options)
    theirs = getattr(torch.optim.lr_scheduler, class_name)(theirs_opt, **options)
    assert _lrs(ours_opt) == _lrs(theirs_opt)
    assert ours.base_lrs == theirs.base_lrs
    assert [g["initial_lr"] for g in ours_opt.param_groups] == [0.1, 0.5]
    for _ in range(STEPS):
        ours_opt.step()
        theirs_opt.step()
        ours.step()
        theirs.step()
        assert _lrs(ours_opt) == _lrs(theirs_opt)
        assert ours.get_last_lr() == theirs.get_last_lr()
        assert ours.last_epoch == theirs.last_epoch


@pytest.mark.parametrize("name", ["StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR",
                                  "LambdaLR", "LinearLR-down"])
@pytest.mark.parametrize("last_epoch", [3, 4, 14])
def test_resumed_schedulers_match_torch(name, last_epoch):
    """With ``last_epoch`` given, each rule's constructor step and later steps agree with torch."""
    torch = pytest.importorskip("torch")
    class_name, options = SCHEDULES[name]
    initial = [0.2, 0.7]
    ours_opt, theirs_opt = _tapejit_optimizer(initial), _torch_optimizer(torch, initial)
    ours = getattr(lr_scheduler, class_name)(ours_opt, last_epoch=last_epoch, **options)
    theirs = getattr(torch.optim.lr_scheduler, class_name)(theirs_opt, last_epoch=last_epoch,
                                                           **options)
    assert ours.base_lrs == initial
    for _ in range(10):
        assert _lrs(ours_opt) == _lrs(theirs_opt)
        theirs_opt.step()  # torch warns when a scheduler steps before its optimizer
        ours.step()
        theirs.step()
    assert _lrs(ours_opt) == _lrs(theirs_opt)


PLATEAU_METRICS = [5.0, 4.0, 4.0, 3.9999, 4.1, 4.2, 3.0, 3.0, 3.0, 3.0, 2.0, 2.5, 2.5, 2.5,
                   2.5, 2.5, 2.5, 2.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]


@pytest.mark.parametrize("options", [
    {"patience": 1},
    {"patience": 0, "cooldown": 2, "factor": 0.5},
    {"mode": "max", "patience": 2, "threshold_mode": "abs", "threshold": 0.5},
    {"patience": 1, "min_lr": [0.02, 0.3], "factor": 0.5},
    {"patience": 0, "min_lr": 0.05, "eps": 0.01},
], ids=str)
def test_reduce_on_plateau_matches_torch(options):
    torch = pytest.importorskip("torch")
    ours_opt, theirs_opt = _tapejit_optimizer(), _torch_optimizer(torch)
    ours = ReduceLROnPlateau(ours_opt, **options)
    theirs = torch.optim.lr_scheduler.ReduceLROnPlateau(theirs_opt, **options)
    for metric in PLATEAU_METRICS:
        ours.step(metric)
        theirs.step(metric)
        assert _lrs(ours_opt) == _lrs(theirs_opt)
        assert ours.get_last_lr() == theirs.get_last_lr()
        assert (ours.best, ours.num_bad_epochs, ours.cooldown_counter) == \
            (theirs.best, theirs.num_bad_epochs, theirs.cooldown_counter)
    assert "initial_lr" not in ours_opt.param_groups[0]
    assert not hasattr(ours, "base_lrs") and not hasattr(theirs, "base_lrs")


def test_state_dict_keys_match_torch():
    torch = pytest.importorskip("torch")
    for class_name, options in SCHEDULES.values():
        ours = getattr(lr_scheduler, class_name)(_tapejit_optimizer(), **options)
        theirs = getattr(torch.optim.lr_scheduler, class_name)(_torch_optimizer(torch), **options)
        theirs.optimizer.step()
        ours.step()
        theirs.step()
        # torch also saves its flag for the warning about calling get_lr() directly
        assert set(ours.state_dict()) == set(theirs.state_dict()) - {"_get_lr_called_within_step"}
    ours = ReduceLROnPlateau(_tapejit_optimizer())
    theirs = torch.optim.lr_scheduler.ReduceLROnPlateau(_torch_optimizer(torch))
    assert set(ours.state_dict()) == set(theirs.state_dict())


# ---- hand-computed values -----------------------------------------------------------------

def _run(scheduler, optimizer, steps):
    """The first group's lr after construction and after each of ``steps`` steps."""
    lrs = [optimizer.param_groups[0]["lr"]]
    for _ in range(steps):
        optimizer.step()
        scheduler.step()
        lrs.append(optimizer.param_groups[0]["lr"])
    return lrs


def test_step_lr_values():
    opt = _tapejit_optimizer()
    scheduler = StepLR(opt, step_size=2, gamma=0.1)
    assert _run(scheduler, opt, 4) == pytest.approx([0.1, 0.1, 0.01, 0.01, 0.001], rel=1e-12)
    assert opt.param_groups[1]["lr"] == pytest.approx(0.005, rel=1e-12)
    assert scheduler.get_last_lr() == _lrs(opt)
    assert scheduler.last_epoch == 4
    assert scheduler.base_lrs == [0.1, 0.5]


def test_multistep_lr_values():
    opt = _tapejit_optimizer()
    scheduler = MultiStepLR(opt, milestones=[2, 4, 4], gamma=0.5)
    assert _run(scheduler, opt, 5) == pytest.approx([0.1, 0.1, 0.05, 0.05, 0.0125, 0.0125],
                                                    rel=1e-12)


def test_exponential_lr_values():
    opt = _tapejit_optimizer()
    assert _run(ExponentialLR(opt, gamma=0.5), opt, 3) == pytest.approx(
        [0.1, 0.05, 0.025, 0.0125], rel=1e-12)


def test_cosine_annealing_values_follow_the_closed_form():
    opt = _tapejit_optimizer()
    lrs = _run(CosineAnnealingLR(opt, T_max=8, eta_min=0.01), opt, 16)
    # from the initial lr down to eta_min at T_max, and back up at 2 * T_max
    expected = [0.01 + 0.09 * (1 + math.cos(math.pi * t / 8)) / 2 for t in range(17)]
    assert lrs == pytest.approx(expected, rel=1e-12)


def test_lambda_lr_values():
    opt = _tapejit_optimizer()
    scheduler = LambdaLR(opt, lr_lambda=[lambda e: e + 1, lambda e: 0.5 ** e])
    opt.step()
    scheduler.step()
    opt.step()
    scheduler.step()
    assert _lrs(opt) == pytest.approx([0.3, 0.125], rel=1e-12)


def test_linear_lr_values():
    opt = _tapejit_optimizer()
    lrs = _run(LinearLR(opt, start_factor=0.5, end_factor=1.0, total_iters=4), opt, 6)
    assert lrs == pytest.approx([0.05, 0.0625, 0.075, 0.0875, 0.1, 0.1, 0.1], rel=1e-12)


def test_recursive_rules_compose_with_outside_changes():
    """As in torch, StepLR scales whatever lr the group holds."""
    opt = _tapejit_optimizer()
    scheduler = StepLR(opt, step_size=1, gamma=0.5)
    opt.param_groups[0]["lr"] = 1.0
    scheduler.step()
    assert opt.param_groups[0]["lr"] == 0.5


def test_tensor_lr_is_updated_in_place():
    lr = tj.tensor(0.1, dtype=tj.float64)
    opt = SGD([tj.zeros(2, requires_grad=True)], lr=lr)
    scheduler = ExponentialLR(opt, gamma=0.5)
    scheduler.step()
    assert opt.param_groups[0]["lr"] is lr
    assert float(lr) == 0.05
    assert float(opt.param_groups[0]["initial_lr"]) == 0.1  # a copy, not the same tensor
    assert float(scheduler.get_last_lr()[0]) == 0.05


def test_base_class_and_alias():
    class Halving(_LRScheduler):
        def get_lr(self):
            return [base_lr * 0.5 ** self.last_epoch for base_lr in self.base_lrs]

    opt = _tapejit_optimizer()
    scheduler = Halving(opt)
    assert isinstance(scheduler, LRScheduler) and _LRScheduler.__name__ == "_LRScheduler"
    scheduler.step()
    assert _lrs(opt) == [0.05, 0.25]
    assert tj.optim.lr_scheduler is lr_scheduler and "lr_scheduler" in tj.optim.__all__


# ---- state dicts ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(SCHEDULES))
def test_state_dict_round_trip_continues_the_schedule(name):
    class_name, options = SCHEDULES[name]
    cls = getattr(lr_scheduler, class_name)
    straight_opt = _tapejit_optimizer()
    straight = cls(straight_opt, **options)
    first_opt = _tapejit_optimizer()
    first = cls(first_opt, **options)
    for _ in range(9):
        straight.step()
        first.step()
    saved_optimizer = pickle.loads(pickle.dumps(first_opt.state_dict()))
    saved = first.state_dict()
    assert "optimizer" not in saved
    resumed_opt = _tapejit_optimizer()
    resumed = cls(resumed_opt, **options)
    resumed_opt.load_state_dict(saved_optimizer)
    resumed.load_state_dict(saved)
    assert resumed.last_epoch == 9
    for _ in range(12):
        straight.step()
        resumed.step()
        assert _lrs(resumed_opt) == _lrs(straight_opt)


def test_lambda_state_dict_saves_callable_objects_not_functions():
    class Warmup:
        def __init__(self, steps):
            self.steps = steps

        def __call__(self, epoch):
            return min(1.0, (epoch + 1) / self.steps)

    scheduler = LambdaLR(_tapejit_optimizer(), [Warmup(4), lambda e: 1.0])
    saved = scheduler.state_dict()
    assert saved["lr_lambdas"] == [{"steps": 4}, None]
    other = LambdaLR(_tapejit_optimizer(), [Warmup(10), lambda e: 1.0])
    other.load_state_dict(saved)
    assert other.lr_lambdas[0].steps == 4
    assert saved["lr_lambdas"] == [{"steps": 4}, None]  # the argument is left as it was


def test_reduce_on_plateau_state_dict_round_trip():
    opt = _tapejit_optimizer()
    scheduler = ReduceLROnPlateau(opt, mode="max", patience=1)
    for metric in [1.0, 0.5, 0.5]:
        scheduler.step(metric)
    saved = scheduler.state_dict()
    other = ReduceLROnPlateau(_tapejit_optimizer())
    other.load_state_dict(saved)
    assert (other.mode, other.best, other.mode_worse, other.num_bad_epochs) == \
        ("max", 1.0, -math.inf, 0)


# ---- ReduceLROnPlateau --------------------------------------------------------------------

def test_reduce_on_plateau_waits_patience_epochs():
    opt = _tapejit_optimizer()
    scheduler = ReduceLROnPlateau(opt, patience=2, factor=0.5)
    lrs = []
    for metric in [1.0, 1.0, 1.0, 1.0, 0.5, 0.6, 0.6, 0.6]:
        scheduler.step(metric)
        lrs.append(opt.param_groups[0]["lr"])
    # the 3rd epoch without improvement (epochs 4 and 8) reduces the lr
    assert lrs == [0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.05, 0.025]
    assert scheduler.get_last_lr() == [0.025, 0.125]
    assert scheduler.last_epoch == 8


def test_reduce_on_plateau_cooldown_ignores_bad_epochs():
    opt = _tapejit_optimizer()
    scheduler = ReduceLROnPlateau(opt, patience=0, cooldown=2, factor=0.5)
    lrs = []
    for metric in [1.0, 2.0, 2.0, 2.0, 2.0, 2.0]:
        scheduler.step(metric)
        lrs.append(opt.param_groups[0]["lr"])
        if len(lrs) == 2:
            assert scheduler.in_cooldown
    assert lrs == [0.1, 0.05, 0.05, 0.05, 0.025, 0.025]


def test_reduce_on_plateau_threshold_and_floor():
    opt = _tapejit_optimizer()
    scheduler = ReduceLROnPlateau(opt, patience=0, threshold=0.1, min_lr=[0.05, 0.0], eps=0.0)
    scheduler.step(1.0)
    scheduler.step(0.95)  # not 10% better than 1.0: a bad epoch
    assert _lrs(opt) == [0.05, pytest.approx(0.05)]
    scheduler.step(tj.tensor(0.95))  # a 0-d tensor is accepted as the metric
    assert opt.param_groups[0]["lr"] == 0.05  # at min_lr
    assert scheduler.best == 1.0


def test_reduce_on_plateau_skips_changes_smaller_than_eps():
    opt = _tapejit_optimizer()
    scheduler = ReduceLROnPlateau(opt, patience=0, factor=0.5, eps=0.1)
    scheduler.step(1.0)
    scheduler.step(1.0)
    assert _lrs(opt) == [0.1, 0.25]


# ---- errors ---------------------------------------------------------------------------------

def test_errors():
    opt = _tapejit_optimizer()
    with pytest.raises(TypeError, match="list is not an Optimizer"):
        StepLR([], step_size=1)
    with pytest.raises(TypeError, match="list is not an Optimizer"):
        ReduceLROnPlateau([])
    with pytest.raises(KeyError, match=re.escape("param 'initial_lr' is not specified in "
                                                 "param_groups[0] when resuming scheduler")):
        StepLR(opt, step_size=2, last_epoch=3)
    with pytest.raises(ValueError, match="Expected positive integer T_max, but got 0"):
        CosineAnnealingLR(opt, T_max=0)
    with pytest.raises(ValueError, match="Expected 2 lr_lambdas, but got 1"):
        LambdaLR(opt, [lambda e: 1.0])
    with pytest.raises(ValueError, match="Starting multiplicative factor expected"):
        LinearLR(opt, start_factor=0)
    with pytest.raises(ValueError, match="Ending multiplicative factor expected"):
        LinearLR(opt, end_factor=1.5)
    with pytest.raises(ValueError, match=re.escape("Factor should be < 1.0.")):
        ReduceLROnPlateau(opt, factor=1.0)
    with pytest.raises(ValueError, match="expected 2 min_lrs, got 3"):
        ReduceLROnPlateau(opt, min_lr=[0, 0, 0])
    with pytest.raises(ValueError, match="mode maximum is unknown!"):
        ReduceLROnPlateau(opt, mode="maximum")
    with pytest.raises(ValueError, match="threshold mode relative is unknown!"):
        ReduceLROnPlateau(opt, threshold_mode="relative")
    with pytest.raises(TypeError, match="verbose"):
        StepLR(opt, step_size=2, verbose=True)
    with pytest.raises(TypeError, match="step\\(epoch\\)"):
        StepLR(opt, step_size=2).step(3)
    with pytest.raises(TypeError, match="step\\(epoch\\)"):
        ReduceLROnPlateau(opt).step(1.0, epoch=3)
    with pytest.raises(NotImplementedError):
        LRScheduler(_tapejit_optimizer())


def test_errors_match_torch_wording():
    torch = pytest.importorskip("torch")
    cases = [
        (lambda lib, opt: lib.StepLR(opt, step_size=2, last_epoch=3)),
        (lambda lib, opt: lib.LambdaLR(opt, [lambda e: 1.0])),
        (lambda lib, opt: lib.LinearLR(opt, start_factor=2.0)),
        (lambda lib, opt: lib.ReduceLROnPlateau(opt, min_lr=[0])),
        (lambda lib, opt: lib.ReduceLROnPlateau(opt, mode="up")),
    ]
    for make in cases:
        with pytest.raises(Exception) as theirs:
            make(torch.optim.lr_scheduler, _torch_optimizer(torch))
        with pytest.raises(theirs.type) as ours:
            make(lr_scheduler, _tapejit_optimizer())
        assert str(ours.value) == str(theirs.value)


def test_reduce_on_plateau_new_group_needs_min_lrs():
    opt = _tapejit_optimizer()
    scheduler = ReduceLROnPlateau(opt, patience=0, min_lr=[0.0, 0.0])
    opt.add_param_group({"params": [tj.zeros(1, requires_grad=True)]})
    scheduler.step(1.0)
    with pytest.raises(RuntimeError, match=re.escape("The number of param groups in the "
                                                     "`optimizer` (3) differs")):
        scheduler.step(2.0)


# ---- end to end -----------------------------------------------------------------------------

def test_training_loop_with_step_lr():
    tj.manual_seed(0)
    model = tj.nn.Linear(3, 1)
    optimizer = tj.optim.SGD(model.parameters(), lr=0.1)
    scheduler = tj.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
    loss_fn = tj.nn.MSELoss()
    x = tj.randn(16, 3)
    y = x.sum(dim=1, keepdim=True)
    losses, lrs = [], []
    for _ in range(9):
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
        lrs.append(scheduler.get_last_lr()[0])
    assert lrs == pytest.approx([0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025, 0.025, 0.0125],
                                rel=1e-12)
    assert losses[-1] < losses[0]
