"""Recurrent workload: one SGD training step of a 1-layer LSTM (input 32, hidden 64,
sequence 35, batch 20, float32), forward over the sequence, MSE loss on every output,
backward, ``optimizer.step()``; eager side by side with torch, and replayed with
``tj.compile`` (issue 17's speed target: the eager step at least as fast as torch's).

tapejit and torch run the same module-API code (``ModuleLSTM``).  Every trainer first
takes one step from shared initial parameters, and its loss and parameter update must
equal a hand-written NumPy LSTM step's (forward and back-propagation through time in
float64, below).
"""
import importlib

import numpy as np
import pytest
import targets as T
import workloads as W

SEQ, BATCH, INPUT, HIDDEN = 35, 20, 32, 64
LR = 0.1
NAMES = ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")


def lstm_init(seed=0):
    """torch's layout and initialisation: uniform(-1/sqrt(hidden), 1/sqrt(hidden))."""
    rng = np.random.default_rng(seed)
    bound = 1 / np.sqrt(HIDDEN)
    shapes = ((4 * HIDDEN, INPUT), (4 * HIDDEN, HIDDEN), (4 * HIDDEN,), (4 * HIDDEN,))
    return {n: rng.uniform(-bound, bound, s).astype(np.float32) for n, s in zip(NAMES, shapes)}


def lstm_batch(seed=1):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((SEQ, BATCH, INPUT)).astype(np.float32),
            rng.standard_normal((SEQ, BATCH, HIDDEN)).astype(np.float32))


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def numpy_loss_and_grads(params, x, y):
    """The MSE loss of the LSTM's outputs and its gradients, by hand (gates i, f, g, o)."""
    w_ih, w_hh, b_ih, b_hh = (params[n].astype(np.float64) for n in NAMES)
    x, y = x.astype(np.float64), y.astype(np.float64)
    H = HIDDEN
    h, c = np.zeros((BATCH, H)), np.zeros((BATCH, H))
    saved, outs = [], []
    for t in range(SEQ):
        pre = x[t] @ w_ih.T + b_ih + h @ w_hh.T + b_hh
        i, f, g, o = _sigmoid(pre[:, :H]), _sigmoid(pre[:, H:2 * H]), np.tanh(pre[:, 2 * H:3 * H]), _sigmoid(pre[:, 3 * H:])
        c_new = f * c + i * g
        h_new = o * np.tanh(c_new)
        saved.append((h, c, i, f, g, o, c_new))
        h, c = h_new, c_new
        outs.append(h)
    out = np.stack(outs)
    loss = np.mean((out - y) ** 2)
    dout = 2 * (out - y) / out.size
    grads = {n: np.zeros_like(params[n], dtype=np.float64) for n in NAMES}
    dh, dc = np.zeros((BATCH, H)), np.zeros((BATCH, H))
    for t in range(SEQ - 1, -1, -1):
        h_prev, c_prev, i, f, g, o, c_t = saved[t]
        dh = dh + dout[t]
        tc = np.tanh(c_t)
        dc = dc + dh * o * (1 - tc ** 2)
        dpre = np.concatenate([dc * g * i * (1 - i), dc * c_prev * f * (1 - f), dc * i * (1 - g ** 2),
                               dh * tc * o * (1 - o)], axis=1)
        grads["weight_ih_l0"] += dpre.T @ x[t]
        grads["weight_hh_l0"] += dpre.T @ h_prev
        grads["bias_ih_l0"] += dpre.sum(0)
        grads["bias_hh_l0"] += dpre.sum(0)
        dh = dpre @ w_hh
        dc = dc * f
    return loss, grads


class ModuleLSTM:
    """The workload with the module API: the same code for tapejit and torch."""

    def __init__(self, lib, params, x, y):
        tl = lib.tl
        nn = importlib.import_module(f"{tl.__name__}.nn")
        optim = importlib.import_module(f"{tl.__name__}.optim")
        self.tl = tl
        self.lstm = nn.LSTM(INPUT, HIDDEN)
        self.lstm.load_state_dict({n: tl.from_numpy(params[n].copy()) for n in NAMES})
        self.loss_fn = nn.MSELoss()
        self.optimizer = optim.SGD(self.lstm.parameters(), lr=LR)
        self.x = tl.from_numpy(x)
        self.y = tl.from_numpy(y)

    def forward_backward(self, x, y):
        self.optimizer.zero_grad()
        out, _ = self.lstm(x)
        loss = self.loss_fn(out, y)
        loss.backward()
        return loss

    def step(self):
        loss = self.forward_backward(self.x, self.y)
        self.optimizer.step()
        return loss

    def params(self):
        return {n: np.array(getattr(self.lstm, n).detach().numpy()) for n in NAMES}


class ReplayLSTM(ModuleLSTM):
    """The step under ``tj.compile``: zero_grad, forward, loss and backward compiled (traced
    by the constructor's call), ``optimizer.step()`` between calls."""

    def __init__(self, lib, params, x, y):
        super().__init__(lib, params, x, y)
        self.compiled = lib.tl.compile(self.forward_backward)
        self.compiled(self.x, self.y)

    def step(self):
        loss = self.compiled(self.x, self.y)
        self.optimizer.step()
        return loss


def assert_step_ok(trainer, what):
    """One step from ``lstm_init``: loss and SGD update equal the NumPy step's."""
    params = lstm_init()
    x, y = lstm_batch()
    ref_loss, ref_grads = numpy_loss_and_grads(params, x, y)
    before = trainer.params()
    loss = float(trainer.step().item())
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5, err_msg=f"{what}: loss")
    after = trainer.params()
    for n in NAMES:
        want = -LR * ref_grads[n]
        # the update is read as a difference of float32 parameters: a few of their ulps
        ulps = 4 * np.finfo(np.float32).eps * np.abs(before[n]).max()
        np.testing.assert_allclose(after[n] - before[n], want, rtol=1e-3, atol=ulps + 1e-4 * np.abs(want).max(),
                                   err_msg=f"{what}: SGD update of {n}")


def make_trainer(row, lib):
    params, (x, y) = lstm_init(), lstm_batch()
    if row == "tapejit":
        return ReplayLSTM(lib, params, x, y)
    return ModuleLSTM(lib, params, x, y)


def _library(row):
    name = "tapejit" if row.startswith("tapejit") else row
    module, hint = W.PEERS[name]
    pytest.importorskip(module, reason=f"peer {name!r} is not installed ({hint})")
    return W.library(name)


@pytest.mark.parametrize("peer", ("tapejit", "torch"))
def test_lstm_step(peer, benchmark):
    lib = _library(peer)
    assert_step_ok(ModuleLSTM(lib, lstm_init(), *lstm_batch()), f"{peer} LSTM step")
    trainer = ModuleLSTM(lib, lstm_init(), *lstm_batch())
    benchmark.group = T.GROUP_LSTM
    benchmark(trainer.step)
    assert all(np.isfinite(p).all() for p in trainer.params().values())


@pytest.mark.parametrize("peer", ("tapejit", "tapejit_eager", "torch"))
def test_lstm_step_replayed(peer, benchmark):
    """``tapejit``: the replayed step; ``tapejit_eager`` and ``torch`` as in test_lstm_step."""
    lib = _library(peer)
    what = f"{peer} LSTM step"
    # the replay trainer's constructor traced (gradients computed, nothing updated): its
    # first step() is a replay from the initial parameters, checked like the others
    assert_step_ok(make_trainer(peer, lib), what)
    trainer = make_trainer(peer, lib)
    benchmark.group = T.GROUP_LSTM_REPLAY
    benchmark(trainer.step)
    if peer == "tapejit":
        assert trainer.compiled.stats()["traces"] == 1, f"{what}: a timed step traced again"
        benchmark.extra_info["records"] = trainer.compiled.stats()["records"][0]
