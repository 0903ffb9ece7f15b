"""tapejit.optim.lr_scheduler: every lr (and cycled momentum) against torch's schedulers step
by step (when torch is importable) and against hand-computed values, state dicts,
ReduceLROnPlateau's counters, the deprecated step(epoch), and the errors."""
import math
import pickle
import re
import warnings

import pytest

import tapejit as tj
from tapejit.optim import SGD, Adam, lr_scheduler
from tapejit.optim.lr_scheduler import (ChainedScheduler, ConstantLR, CosineAnnealingLR,
                                        CosineAnnealingWarmRestarts, CyclicLR, ExponentialLR,
                                        LambdaLR, LinearLR, LRScheduler, MultiplicativeLR,
                                        MultiStepLR, OneCycleLR, PolynomialLR, ReduceLROnPlateau,
                                        SequentialLR, StepLR, _LRScheduler)

STEPS = 30


def _groups(lib, initial_lr):
    groups = [{"params": [lib.zeros(2, requires_grad=True)]},
              {"params": [lib.zeros(3, requires_grad=True)], "lr": 0.5}]
    if initial_lr is not None:
        for group, lr in zip(groups, initial_lr):
            group["initial_lr"] = lr
    return groups


def _tapejit_optimizer(initial_lr=None, cls=SGD):
    """Two groups of different lr (``initial_lr`` set for resumed schedulers)."""
    return cls(_groups(tj, initial_lr), lr=0.1)


def _torch_optimizer(torch, initial_lr=None, cls=SGD):
    return getattr(torch.optim, cls.__name__)(_groups(torch, initial_lr), lr=0.1)


def _lrs(optimizer):
    return [group["lr"] for group in optimizer.param_groups]


def _momenta(optimizer):
    """What CyclicLR and OneCycleLR cycle: SGD's momentum, Adam's betas."""
    return [group.get("momentum", group.get("betas")) for group in optimizer.param_groups]


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
    "MultiplicativeLR": ("MultiplicativeLR", {"lr_lambda": lambda e: 0.9 if e % 2 else 1.05}),
    "ConstantLR": ("ConstantLR", {"factor": 0.25, "total_iters": 4}),
    "ConstantLR-default": ("ConstantLR", {}),
    "PolynomialLR": ("PolynomialLR", {"total_iters": 12, "power": 2.0}),
    "PolynomialLR-linear": ("PolynomialLR", {}),
    # restarts at epochs 5, 10, ... and, with T_mult=2, after periods of 3, 6, 12
    "CosineAnnealingWarmRestarts": ("CosineAnnealingWarmRestarts", {"T_0": 5}),
    "CosineAnnealingWarmRestarts-T_mult": ("CosineAnnealingWarmRestarts",
                                           {"T_0": 3, "T_mult": 2, "eta_min": 0.001}),
    # STEPS steps cover several cycles (and their momentum, cycled on SGD's momentum)
    "CyclicLR": ("CyclicLR", {"base_lr": 0.01, "max_lr": 0.1, "step_size_up": 4}),
    "CyclicLR-triangular2": ("CyclicLR", {"base_lr": [0.01, 0.02], "max_lr": [0.1, 0.3],
                                          "step_size_up": 3, "step_size_down": 5,
                                          "mode": "triangular2", "base_momentum": 0.5}),
    "CyclicLR-exp_range": ("CyclicLR", {"base_lr": 0.01, "max_lr": 0.1, "step_size_up": 4,
                                        "mode": "exp_range", "gamma": 0.9,
                                        "cycle_momentum": False}),
    "CyclicLR-scale_fn": ("CyclicLR", {"base_lr": 0.01, "max_lr": 0.1, "step_size_up": 2,
                                       "scale_fn": lambda x: 0.8 ** x,
                                       "scale_mode": "iterations"}),
    "OneCycleLR": ("OneCycleLR", {"max_lr": 1.0, "total_steps": STEPS}),
    "OneCycleLR-linear-three_phase": ("OneCycleLR", {"max_lr": [1.0, 2.0], "total_steps": STEPS,
                                                     "anneal_strategy": "linear",
                                                     "three_phase": True}),
    "OneCycleLR-epochs": ("OneCycleLR", {"max_lr": 0.5, "epochs": 3, "steps_per_epoch": 10,
                                         "pct_start": 0.25, "div_factor": 10.0,
                                         "final_div_factor": 100.0, "cycle_momentum": False}),
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
    assert [g["initial_lr"] for g in ours_opt.param_groups] == \
        [g["initial_lr"] for g in theirs_opt.param_groups]
    assert _momenta(ours_opt) == _momenta(theirs_opt)
    for _ in range(STEPS):
        ours_opt.step()
        theirs_opt.step()
        ours.step()
        theirs.step()
        assert _lrs(ours_opt) == _lrs(theirs_opt)
        assert _momenta(ours_opt) == _momenta(theirs_opt)
        assert ours.get_last_lr() == theirs.get_last_lr()
        assert ours.last_epoch == theirs.last_epoch
    assert ours.state_dict().keys() == theirs.state_dict().keys()


@pytest.mark.parametrize("name", ["StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR",
                                  "LambdaLR", "LinearLR-down", "MultiplicativeLR", "ConstantLR",
                                  "PolynomialLR", "CosineAnnealingWarmRestarts-T_mult"])
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
        assert set(ours.state_dict()) == set(theirs.state_dict())
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


# ---- schedulers of schedulers, momentum on Adam's betas, epochs ---------------------------

def _sequential(lib, opt):
    schedulers = lib.optim.lr_scheduler
    return schedulers.SequentialLR(
        opt, [schedulers.LinearLR(opt, start_factor=0.1, total_iters=4),
              schedulers.ExponentialLR(opt, gamma=0.9),
              schedulers.CosineAnnealingLR(opt, T_max=5)],
        milestones=[4, 9])


def _chained(lib, opt):
    schedulers = lib.optim.lr_scheduler
    return schedulers.ChainedScheduler([schedulers.ConstantLR(opt, factor=0.5, total_iters=3),
                                        schedulers.ExponentialLR(opt, gamma=0.9),
                                        schedulers.StepLR(opt, step_size=4, gamma=0.5)])


def _sequential_in_chained(lib, opt):
    schedulers = lib.optim.lr_scheduler
    sequential = schedulers.SequentialLR(
        opt, [schedulers.ConstantLR(opt, factor=0.2, total_iters=2),
              schedulers.ExponentialLR(opt, gamma=0.8)], milestones=[3])
    return schedulers.ChainedScheduler([sequential,
                                        schedulers.MultiplicativeLR(opt, lambda e: 0.99)])


def _sequential_in_sequential(lib, opt):
    """recursive_undo walks into the inner SequentialLR (torch's nesting: the inner one
    first, as a SequentialLR has no get_lr for a milestone's restart)."""
    schedulers = lib.optim.lr_scheduler
    inner = schedulers.SequentialLR(
        opt, [schedulers.LinearLR(opt, start_factor=0.5, total_iters=2),
              schedulers.ExponentialLR(opt, gamma=0.9)], milestones=[2])
    return schedulers.SequentialLR(opt, [inner, schedulers.PolynomialLR(opt, total_iters=6)],
                                   milestones=[5])


COMPOSITE = {"SequentialLR": _sequential, "ChainedScheduler": _chained,
             "sequential-in-chained": _sequential_in_chained,
             "sequential-in-sequential": _sequential_in_sequential}


@pytest.mark.filterwarnings("ignore:Detected call of:UserWarning")  # torch's, about its inner steps
@pytest.mark.parametrize("name", list(COMPOSITE))
def test_composite_schedulers_match_torch(name):
    torch = pytest.importorskip("torch")
    ours_opt, theirs_opt = _tapejit_optimizer(), _torch_optimizer(torch)
    ours, theirs = COMPOSITE[name](tj, ours_opt), COMPOSITE[name](torch, theirs_opt)
    assert _lrs(ours_opt) == _lrs(theirs_opt)
    assert ours.get_last_lr() == theirs.get_last_lr()
    for _ in range(STEPS):
        theirs_opt.step()
        ours.step()
        theirs.step()
        assert _lrs(ours_opt) == _lrs(theirs_opt)
        assert ours.get_last_lr() == theirs.get_last_lr()
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    assert [s.keys() for s in ours.state_dict()["_schedulers"]] == \
        [s.keys() for s in theirs.state_dict()["_schedulers"]]


@pytest.mark.parametrize("name", list(COMPOSITE))
def test_composite_state_dict_round_trip(name):
    straight_opt, first_opt, resumed_opt = (_tapejit_optimizer() for _ in range(3))
    straight, first = COMPOSITE[name](tj, straight_opt), COMPOSITE[name](tj, first_opt)
    for _ in range(6):
        straight.step()
        first.step()
    saved = pickle.loads(pickle.dumps(first.state_dict()))
    saved_optimizer = pickle.loads(pickle.dumps(first_opt.state_dict()))
    resumed = COMPOSITE[name](tj, resumed_opt)
    resumed.load_state_dict(saved)
    resumed_opt.load_state_dict(saved_optimizer)
    assert "_schedulers" in saved and resumed.get_last_lr() == first.get_last_lr()
    assert [s.last_epoch for s in resumed._schedulers if hasattr(s, "last_epoch")] == \
        [s.last_epoch for s in first._schedulers if hasattr(s, "last_epoch")]
    for _ in range(10):
        straight.step()
        resumed.step()
        assert _lrs(resumed_opt) == _lrs(straight_opt)


@pytest.mark.parametrize("name,options", [
    ("OneCycleLR", {"max_lr": 0.01, "total_steps": STEPS}),
    ("OneCycleLR", {"max_lr": 0.01, "total_steps": STEPS, "three_phase": True,
                    "base_momentum": [0.8, 0.7], "max_momentum": 0.99}),
    ("CyclicLR", {"base_lr": 0.001, "max_lr": 0.01, "step_size_up": 5}),
    ("CyclicLR", {"base_lr": 0.001, "max_lr": 0.01, "step_size_up": 5, "mode": "exp_range",
                  "gamma": 0.95}),
], ids=["OneCycleLR", "OneCycleLR-three_phase", "CyclicLR", "CyclicLR-exp_range"])
def test_momentum_cycles_on_adam_beta1_like_torch(name, options):
    torch = pytest.importorskip("torch")
    ours_opt = _tapejit_optimizer(cls=Adam)
    theirs_opt = _torch_optimizer(torch, cls=Adam)
    ours = getattr(lr_scheduler, name)(ours_opt, **options)
    theirs = getattr(torch.optim.lr_scheduler, name)(theirs_opt, **options)
    seen = set()
    for _ in range(STEPS):
        assert _momenta(ours_opt) == _momenta(theirs_opt)
        assert _lrs(ours_opt) == _lrs(theirs_opt)
        seen.add(ours_opt.param_groups[0]["betas"][0])
        theirs_opt.step()
        ours.step()
        theirs.step()
    assert len(seen) > 5  # beta1 did move
    assert all(g["betas"][1] == 0.999 for g in ours_opt.param_groups)


def test_one_cycle_values():
    opt = _tapejit_optimizer()
    scheduler = OneCycleLR(opt, max_lr=1.0, total_steps=11, pct_start=0.5)
    lrs = _run(scheduler, opt, 10)
    # up from max_lr / 25 along a half cosine to max_lr at step 0.5 * 11 - 1 = 4.5, then
    # down to initial_lr / 1e4 at step 10
    initial, final = 1.0 / 25, 1.0 / 25 / 1e4
    assert lrs[0] == pytest.approx(initial)
    assert lrs[4] == pytest.approx(1.0 + (initial - 1.0) / 2 * (1 + math.cos(math.pi * 4 / 4.5)))
    assert lrs[5] == pytest.approx(final + (1.0 - final) / 2 * (1 + math.cos(math.pi * 0.5 / 5.5)))
    assert lrs[-1] == pytest.approx(final)
    assert opt.param_groups[0]["momentum"] == pytest.approx(0.95)
    scheduler.step()   # as torch, epoch total_steps is still allowed (past the schedule's end)
    with pytest.raises(ValueError, match="Tried to step 12 times. The specified number of total "
                                         "steps is 11"):
        scheduler.step()


def test_polynomial_and_constant_values():
    opt = _tapejit_optimizer()
    assert _run(PolynomialLR(opt, total_iters=4, power=2.0), opt, 5) == pytest.approx(
        [0.1 * (1 - k / 4) ** 2 for k in range(5)] + [0.0], abs=1e-15)
    opt = _tapejit_optimizer()
    assert _run(ConstantLR(opt, factor=0.5, total_iters=2), opt, 3) == pytest.approx(
        [0.05, 0.05, 0.1, 0.1])


def test_warm_restarts_fractional_epochs_match_torch():
    """``step(epoch + i / iters)`` anneals within epochs; restarts follow T_0 * T_mult**n."""
    torch = pytest.importorskip("torch")
    for t_mult in (1, 2, 3):
        ours_opt, theirs_opt = _tapejit_optimizer(), _torch_optimizer(torch)
        ours = CosineAnnealingWarmRestarts(ours_opt, T_0=2, T_mult=t_mult, eta_min=0.01)
        theirs = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(theirs_opt, T_0=2,
                                                                      T_mult=t_mult, eta_min=0.01)
        for epoch in range(20):
            for i in range(7):
                ours.step(epoch + i / 7)
                theirs.step(epoch + i / 7)
                assert _lrs(ours_opt) == _lrs(theirs_opt)
                assert (ours.T_cur, ours.T_i, ours.last_epoch) == \
                    (theirs.T_cur, theirs.T_i, theirs.last_epoch)
        ours.step()   # and on from there without an epoch
        theirs.step()
        assert _lrs(ours_opt) == _lrs(theirs_opt)


def test_warm_restarts_hand_computed():
    opt = _tapejit_optimizer()
    scheduler = CosineAnnealingWarmRestarts(opt, T_0=2, T_mult=2)
    lrs = _run(scheduler, opt, 6)
    # periods of 2 then 4 epochs: restarts at epochs 2 and 6
    expected = [0.1, 0.05, 0.1, 0.1 * (1 + math.cos(math.pi / 4)) / 2, 0.05,
                0.1 * (1 + math.cos(3 * math.pi / 4)) / 2, 0.1]
    assert lrs == pytest.approx(expected)
    scheduler.step(1.5)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1 * (1 + math.cos(0.75 * math.pi)) / 2)
    with pytest.raises(ValueError, match="Expected non-negative epoch, but got -1"):
        scheduler.step(-1)


@pytest.mark.parametrize("name", ["StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR",
                                  "LambdaLR", "LinearLR-down", "ConstantLR", "PolynomialLR",
                                  "MultiplicativeLR", "CyclicLR", "OneCycleLR"])
def test_deprecated_step_with_epoch_matches_torch(name):
    """``step(epoch)`` warns and jumps, with torch's closed form where the rule has one."""
    torch = pytest.importorskip("torch")
    class_name, options = SCHEDULES[name]
    ours_opt, theirs_opt = _tapejit_optimizer(), _torch_optimizer(torch)
    ours = getattr(lr_scheduler, class_name)(ours_opt, **options)
    theirs = getattr(torch.optim.lr_scheduler, class_name)(theirs_opt, **options)
    theirs_opt.step()
    for epoch in [3, 4, 4, 11, 2, 0, 13, 20]:
        with pytest.warns(UserWarning, match="The epoch parameter in `scheduler.step\\(\\)` was "
                                             "not necessary and is being deprecated"):
            ours.step(epoch)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs.step(epoch)
        assert _lrs(ours_opt) == _lrs(theirs_opt)
        assert ours.last_epoch == theirs.last_epoch == epoch
        ours.step()
        theirs.step()
        assert _lrs(ours_opt) == _lrs(theirs_opt)


def test_reduce_on_plateau_step_with_epoch():
    torch = pytest.importorskip("torch")
    ours_opt, theirs_opt = _tapejit_optimizer(), _torch_optimizer(torch)
    ours = ReduceLROnPlateau(ours_opt, patience=0)
    theirs = torch.optim.lr_scheduler.ReduceLROnPlateau(theirs_opt, patience=0)
    for metric, epoch in [(1.0, 5), (2.0, 9), (3.0, None)]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ours.step(metric, epoch)
        assert (len(caught) == 1) == (epoch is not None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs.step(metric, epoch)
        assert ours.last_epoch == theirs.last_epoch
        assert _lrs(ours_opt) == _lrs(theirs_opt)


def test_get_lr_outside_step_warns_like_torch():
    scheduler = StepLR(_tapejit_optimizer(), step_size=2)
    with pytest.warns(UserWarning, match="To get the last learning rate computed by the "
                                         "scheduler, please use `get_last_lr\\(\\)`."):
        scheduler.get_lr()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scheduler.step()   # no warning from inside step
        assert scheduler.get_last_lr() == [0.1, 0.5]


def test_cyclic_state_dict_saves_a_callable_scale_fn_object():
    class Decay:
        def __init__(self, rate):
            self.rate = rate

        def __call__(self, x):
            return self.rate ** x

    opt = _tapejit_optimizer()
    scheduler = CyclicLR(opt, base_lr=0.01, max_lr=0.1, step_size_up=2, scale_fn=Decay(0.5))
    saved = scheduler.state_dict()
    assert saved["_scale_fn_custom"] == {"rate": 0.5} and "_scale_fn_ref" not in saved
    other = CyclicLR(_tapejit_optimizer(), base_lr=0.01, max_lr=0.1, step_size_up=2,
                     scale_fn=Decay(0.9))
    other.load_state_dict(saved)
    assert other._scale_fn_custom.rate == 0.5
    assert saved["_scale_fn_custom"] == {"rate": 0.5}  # the argument is left as it was
    function_saved = CyclicLR(_tapejit_optimizer(), base_lr=0.01, max_lr=0.1,
                              scale_fn=lambda x: 1.0).state_dict()
    assert function_saved["_scale_fn_custom"] is None
    triangular = CyclicLR(_tapejit_optimizer(), base_lr=0.01, max_lr=0.1, mode="triangular2")
    state = pickle.loads(pickle.dumps(triangular.state_dict()))
    again = CyclicLR(_tapejit_optimizer(), base_lr=0.01, max_lr=0.1)
    again.load_state_dict(state)
    assert again.mode == "triangular2" and again.scale_fn(3) == 0.25


def test_new_scheduler_errors_match_torch():
    torch = pytest.importorskip("torch")

    def with_adagrad(make):
        return lambda lib, opt: make(lib, lib.optim.Adagrad([lib.zeros(1, requires_grad=True)]))

    cases = [
        lambda lib, opt: lib.optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0),
        lambda lib, opt: lib.optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=0),
        lambda lib, opt: lib.optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0, epochs=2,
                                                           steps_per_epoch=1.5),
        lambda lib, opt: lib.optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=9,
                                                           pct_start=1),
        lambda lib, opt: lib.optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=9,
                                                           anneal_strategy="exp"),
        lambda lib, opt: lib.optim.lr_scheduler.OneCycleLR(opt, max_lr=[1.0], total_steps=9),
        with_adagrad(lambda lib, opt: lib.optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0,
                                                                        total_steps=9)),
        with_adagrad(lambda lib, opt: lib.optim.lr_scheduler.CyclicLR(opt, 0.1, 1.0)),
        lambda lib, opt: lib.optim.lr_scheduler.CyclicLR(opt, 0.1, 1.0, mode="sine"),
        lambda lib, opt: lib.optim.lr_scheduler.CyclicLR(opt, [0.1, 0.2, 0.3], 1.0),
        lambda lib, opt: lib.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=0),
        lambda lib, opt: lib.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=2.0),
        lambda lib, opt: lib.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=2,
                                                                            T_mult=0),
        lambda lib, opt: lib.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=2,
                                                                            eta_min="0"),
        lambda lib, opt: lib.optim.lr_scheduler.ConstantLR(opt, factor=1.5),
        lambda lib, opt: lib.optim.lr_scheduler.MultiplicativeLR(opt, [lambda e: 1.0, 0.5]),
        lambda lib, opt: lib.optim.lr_scheduler.SequentialLR(opt, [], milestones=[]),
        lambda lib, opt: lib.optim.lr_scheduler.SequentialLR(
            opt, [lib.optim.lr_scheduler.ConstantLR(opt)], milestones=[3]),
        lambda lib, opt: lib.optim.lr_scheduler.SequentialLR(
            opt, [lib.optim.lr_scheduler.ReduceLROnPlateau(opt)], milestones=[]),
        lambda lib, opt: lib.optim.lr_scheduler.SequentialLR(opt, [object()], milestones=[]),
        lambda lib, opt: lib.optim.lr_scheduler.ChainedScheduler([]),
        lambda lib, opt: lib.optim.lr_scheduler.ChainedScheduler(
            [lib.optim.lr_scheduler.ConstantLR(opt),
             lib.optim.lr_scheduler.ConstantLR(lib.optim.SGD([lib.zeros(1, requires_grad=True)],
                                                             lr=0.1))]),
    ]
    for make in cases:
        with pytest.raises(Exception) as theirs:
            make(torch, _torch_optimizer(torch))
        with pytest.raises(theirs.type) as ours:
            make(tj, _tapejit_optimizer())
        expected = str(theirs.value).replace("torch.optim.", "").replace("torch", "LIB")
        assert str(ours.value).replace("tapejit.optim.", "").replace("tapejit", "LIB") == expected


def test_training_loop_with_one_cycle_and_adam():
    tj.manual_seed(0)
    model = tj.nn.Linear(3, 1)
    optimizer = tj.optim.Adam(model.parameters(), lr=0.01)
    scheduler = tj.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=40)
    x = tj.randn(32, 3)
    y = x.sum(dim=1, keepdim=True)
    losses = []
    for step in range(40):
        optimizer.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        optimizer.step()
        if step < 39:   # the schedule's last lr is the one of step total_steps - 1
            scheduler.step()
        losses.append(loss.item())
    assert losses[-1] < 0.1 * losses[0]
    assert scheduler.get_last_lr()[0] == pytest.approx(0.1 / 25 / 1e4)
