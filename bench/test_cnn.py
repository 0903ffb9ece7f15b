"""LeNet-5 training step: tapejit eager, tapejit replayed by ``tj.compile``, and torch eager,
side by side (issue 17's speed target: the eager step at least as fast as torch's).

The model is LeNet-5 on 28x28 inputs: ``Conv2d(1, 6, 5)``, ReLU, ``MaxPool2d(2)``,
``Conv2d(6, 16, 5)``, ReLU, ``MaxPool2d(2)``, ``Flatten``, ``Linear(256, 120)``, ReLU,
``Linear(120, 84)``, ReLU, ``Linear(84, 10)``; cross-entropy on a fixed batch of 64,
``optim.SGD(lr=0.01)``, float32, written once with the module API for tapejit and torch.
Every row starts from the same parameters.  In the group "... step" the row ``tapejit``
is the eager step; in the group "... replayed" it is the replay (the step's
``zero_grad``, forward, loss and ``backward`` traced once, ``optimizer.step()`` between
calls, as in ``test_replay.py``), beside ``tapejit_eager`` and ``torch``.

Before timing, one step of every row is checked against torch's step from the same
parameters (loss and every parameter's update; without torch, tapejit's eager step is
the reference), and the timed steps must have lowered the loss.
"""
import numpy as np
import pytest
import targets as T

LENET_BATCH = 64
LENET_LR = 0.01
#: row -> the library it runs (``tapejit_replay``: the ``tapejit`` row of the replay group)
ROW_LIBRARY = {"tapejit": "tapejit", "tapejit_replay": "tapejit", "torch": "torch"}


def _module(row):
    name = ROW_LIBRARY[row]
    hint = {"torch": "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu",
            "tapejit": "pip install -e ."}[name]
    return pytest.importorskip(name, reason=f"peer {name!r} is not installed ({hint})")


def lenet(lib):
    nn = lib.nn
    return nn.Sequential(nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(256, 120), nn.ReLU(), nn.Linear(120, 84),
                         nn.ReLU(), nn.Linear(84, 10))


def lenet_init(seed=0):
    """float32 parameters in ``parameters()`` order, with torch's default init ranges."""
    rng = np.random.default_rng(seed)
    shapes = [((6, 1, 5, 5), 25), ((6,), 25), ((16, 6, 5, 5), 150), ((16,), 150), ((120, 256), 256),
              ((120,), 256), ((84, 120), 120), ((84,), 120), ((10, 84), 84), ((10,), 84)]
    return [rng.uniform(-1, 1, shape).astype(np.float32) / np.float32(np.sqrt(fan_in)) for shape, fan_in in shapes]


def lenet_batch(seed=1):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((LENET_BATCH, 1, 28, 28)).astype(np.float32),
            rng.integers(0, 10, LENET_BATCH).astype(np.int64))


class LeNetTrainer:
    """One training step as a user writes it (``step()`` returns the loss tensor); with
    ``replay``, tapejit's forward, loss and backward run under ``tj.compile``, traced by the
    constructor's first call (which updates nothing), so every ``step()`` replays."""

    def __init__(self, lib, params, x, y, replay=False):
        self.lib = lib
        self.model = lenet(lib)
        with lib.no_grad():
            for p, value in zip(self.model.parameters(), params):
                p.copy_(lib.from_numpy(value.copy()))
        self.loss_fn = lib.nn.CrossEntropyLoss()
        self.optimizer = lib.optim.SGD(self.model.parameters(), lr=LENET_LR)
        self.x, self.y = lib.from_numpy(x), lib.from_numpy(y)
        self.compiled = None
        if replay:
            self.compiled = lib.compile(self._forward_backward)
            self.compiled(self.x, self.y)

    def _forward_backward(self, x, y):
        self.optimizer.zero_grad()
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return loss

    def step(self):
        run = self.compiled or self._forward_backward
        loss = run(self.x, self.y)
        self.optimizer.step()
        return loss

    def params(self):
        return [p.detach().numpy().copy() for p in self.model.parameters()]

    @property
    def traces(self):
        return self.compiled.stats()["traces"]


def trainer(row, params=None, batch=None):
    lib = _module(row)
    params = lenet_init() if params is None else params
    x, y = lenet_batch() if batch is None else batch
    return LeNetTrainer(lib, params, x, y, replay=(row == "tapejit_replay"))


def reference_step():
    """Loss and updated parameters after one step from ``lenet_init``: torch's, else
    tapejit's eager step (then a replay row is checked against eager mode)."""
    try:
        import torch
    except ImportError:
        import tapejit as torch
    ref = LeNetTrainer(torch, lenet_init(), *lenet_batch())
    loss = float(ref.step().item())
    return loss, ref.params()


def assert_step_ok(row_trainer, what):
    loss_ref, params_ref = reference_step()
    before = row_trainer.params()
    loss = float(row_trainer.step().item())
    np.testing.assert_allclose(loss, loss_ref, rtol=1e-5, err_msg=f"{what}: loss")
    for k, (b, a, r) in enumerate(zip(before, row_trainer.params(), params_ref)):
        assert a.dtype == np.float32 and a.shape == b.shape, (what, k)
        want = r - b
        np.testing.assert_allclose(a - b, want, rtol=1e-3, atol=1e-3 * np.abs(want).max(),
                                   err_msg=f"{what}: SGD update of parameter {k}")


def assert_trained(row_trainer, what):
    """After the timed steps on the one batch the loss is lower than the first step's."""
    lib = row_trainer.lib
    with lib.no_grad():
        first = LeNetTrainer(lib, lenet_init(), *lenet_batch())
        start = float(first.loss_fn(first.model(first.x), first.y).item())
        now = float(row_trainer.loss_fn(row_trainer.model(row_trainer.x), row_trainer.y).item())
    assert np.all([np.isfinite(p).all() for p in row_trainer.params()]), what
    assert now < start, (what, start, now)


@pytest.mark.parametrize("group, peer", [(T.GROUP_CNN, "tapejit"), (T.GROUP_CNN, "torch"),
                                         (T.GROUP_CNN_REPLAY, "tapejit"), (T.GROUP_CNN_REPLAY, "tapejit_eager"),
                                         (T.GROUP_CNN_REPLAY, "torch")])
def test_lenet_step(benchmark, group, peer):
    row = "tapejit_replay" if (group, peer) == (T.GROUP_CNN_REPLAY, "tapejit") else peer
    if row == "tapejit_eager":
        row = "tapejit"
    what = f"{peer} LeNet-5 step" + (" (replayed)" if row == "tapejit_replay" else "")
    first = trainer(row)
    assert_step_ok(first, what)
    if row == "tapejit_replay":
        assert first.traces == 1, f"{what}: the checked step traced again"
    timed = trainer(row)
    benchmark.group = group
    benchmark(timed.step)
    assert_trained(timed, what)
    if row == "tapejit_replay":
        assert timed.traces == 1, f"{what}: a timed step traced again"
        benchmark.extra_info["records"] = timed.compiled.stats()["records"][0]
