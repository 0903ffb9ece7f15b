"""Normalisation and recurrent layers against torch 2.13 on the same parameters.

Recurrent layers: ``RNN`` (tanh, relu), ``LSTM`` (``proj_size``), ``GRU`` over layers,
directions, ``batch_first``, unbatched input, bias or not, given or default initial
states; outputs, final states and the gradients of the input, the initial states and every
parameter, in float64 and float32; the cells; parameter names, shapes and initialisation;
torch's error texts; ``grad_fn`` names; dropout between layers; ``tj.compile``.

Normalisation: ``BatchNorm1d/2d`` (running statistics over several steps, ``momentum=None``,
``eval()``, ``track_running_stats=False``, ``affine=False``), ``InstanceNorm1d/2d``,
``GroupNorm``, ``LayerNorm``, ``LocalResponseNorm`` and the functional forms.

Texts are compared after ``_normalise`` (tapejit's ``tapejit.`` prefixes become torch's).
"""
import itertools
import math
import warnings

import numpy as np
import pytest

import tapejit as tj


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


def value(t):
    return np.array(t.detach().numpy(), copy=True)


def _normalise(text):
    return text.replace("tapejit.", "torch.")


def _outcome(fn):
    try:
        fn()
        return "ok", None
    except Exception as e:  # noqa: BLE001 - the outcome is what is compared
        return type(e).__name__, _normalise(str(e))


def _copy_params(torch, ours, theirs):
    """Give ``ours`` (tapejit) torch module ``theirs``'s parameters and buffers."""
    ours.load_state_dict({k: tj.tensor(v.detach().numpy().copy()) for k, v in theirs.state_dict().items()})


def _close(ours, theirs, dtype, what):
    want = theirs.detach().numpy() if hasattr(theirs, "detach") else np.asarray(theirs)
    got = value(ours)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, torch {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, torch {want.dtype}"
    rtol, atol = (1e-10, 1e-12) if dtype == "float64" else (2e-5, 2e-6)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol * max(1.0, float(np.abs(want).max(initial=0))),
                               err_msg=what)


# ---- recurrent layers ------------------------------------------------------------------------

RNN_CONFIGS = (
    [(mode, kw) for mode in ("LSTM", "GRU", "RNN") for kw in (
        {}, {"num_layers": 2}, {"bidirectional": True}, {"batch_first": True}, {"bias": False},
        {"num_layers": 3, "bidirectional": True, "batch_first": True}, {"unbatched": True},
        {"unbatched": True, "bidirectional": True, "num_layers": 2}, {"no_state": True},
        {"batch_first": True, "no_state": True, "num_layers": 2})]
    + [("RNN", {"nonlinearity": "relu"}), ("RNN", {"nonlinearity": "relu", "bidirectional": True}),
       ("LSTM", {"proj_size": 2}), ("LSTM", {"proj_size": 3, "num_layers": 2, "bidirectional": True}),
       ("LSTM", {"proj_size": 2, "unbatched": True}), ("LSTM", {"proj_size": 1, "bias": False, "batch_first": True})])


def _rnn_case(torch, mode, options, dtype, seed=0):
    options = dict(options)
    unbatched = options.pop("unbatched", False)
    no_state = options.pop("no_state", False)
    torch.manual_seed(seed)
    tdt = getattr(torch, dtype)
    theirs = getattr(torch.nn, mode)(3, 4, **options).to(tdt)
    ours = getattr(tj.nn, mode)(3, 4, **options, dtype=getattr(tj, dtype))
    _copy_params(torch, ours, theirs)
    T, B = 5, 2
    layers, dirs = options.get("num_layers", 1), 2 if options.get("bidirectional") else 1
    hidden = options.get("proj_size") or 4
    if unbatched:
        shape, hshape, cshape = (T, 3), (layers * dirs, hidden), (layers * dirs, 4)
    else:
        shape = (B, T, 3) if options.get("batch_first") else (T, B, 3)
        hshape, cshape = (layers * dirs, B, hidden), (layers * dirs, B, 4)
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s).astype(dtype) for s in (shape, hshape, cshape)]
    t_in = [torch.tensor(a, requires_grad=True) for a in arrays]
    o_in = [tj.tensor(a, requires_grad=True) for a in arrays]

    def run(module, x, h, c):
        if no_state:
            return module(x)
        return module(x, (h, c)) if mode == "LSTM" else module(x, h)
    return theirs, ours, t_in, o_in, run, no_state


def _states(mode, result):
    out, hidden = result
    return [out] + (list(hidden) if mode == "LSTM" else [hidden])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("mode, options", RNN_CONFIGS, ids=[f"{m}-{'-'.join(f'{k}={v}' for k, v in o.items()) or 'default'}"
                                                            for m, o in RNN_CONFIGS])
def test_rnn_matches_torch(torch, mode, options, dtype):
    theirs, ours, t_in, o_in, run, no_state = _rnn_case(torch, mode, options, dtype)
    t_res = _states(mode, run(theirs, *t_in))
    o_res = _states(mode, run(ours, *o_in))
    for i, (a, b) in enumerate(zip(o_res, t_res)):
        _close(a, b, dtype, f"result {i} (output, h_n[, c_n])")
    # a random weighting of every result: output, h_n and c_n all send gradients back
    rng = np.random.default_rng(1)
    weights = [rng.standard_normal(tuple(r.shape)).astype(dtype) for r in t_res]
    sum(((r * torch.tensor(w)).sum() for r, w in zip(t_res, weights))).backward()
    sum(((r * tj.tensor(w)).sum() for r, w in zip(o_res, weights))).backward()
    used = 1 if no_state else (3 if mode == "LSTM" else 2)
    for i in range(used):
        _close(o_in[i].grad, t_in[i].grad, dtype, f"gradient of input {i} (x, h0[, c0])")
    named = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        _close(p.grad, named[name].grad, dtype, f"gradient of {name}")


@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN"])
def test_rnn_parameters_names_shapes_init_and_state_dict(torch, mode):
    for options in ({}, {"num_layers": 2, "bidirectional": True}, {"bias": False, "num_layers": 2}) + (
            ({"proj_size": 2, "bidirectional": True},) if mode == "LSTM" else ()):
        theirs = getattr(torch.nn, mode)(5, 4, **options)
        ours = getattr(tj.nn, mode)(5, 4, **options)
        assert list(ours.state_dict().keys()) == list(theirs.state_dict().keys())
        assert [(n, tuple(p.shape)) for n, p in ours.named_parameters()] == \
            [(n, tuple(p.shape)) for n, p in theirs.named_parameters()]
        assert repr(ours) == repr(theirs)
        bound = 1 / math.sqrt(4)
        for p in ours.parameters():
            assert p.dtype is tj.float32 and p.requires_grad
        # torch's init: uniform(-1/sqrt(hidden), 1/sqrt(hidden)), whose deviation is bound/sqrt(3)
        every = np.concatenate([value(p).ravel() for p in ours.parameters()])
        assert np.all(np.abs(every) <= bound) and abs(np.std(every) - bound / math.sqrt(3)) < 0.05
        assert [[n for n in names] for names in ours._all_weights] == theirs._all_weights
        assert len(ours.all_weights) == len(theirs.all_weights)
    ours.flatten_parameters()   # a no-op, as torch's on the CPU


def test_rnn_repr_and_cells_repr(torch):
    pairs = [(lambda nn: nn.LSTM(3, 4, num_layers=2, bidirectional=True, batch_first=True, dropout=0.1,
                                 proj_size=2, bias=False)),
             (lambda nn: nn.RNN(3, 4, nonlinearity="relu")), (lambda nn: nn.GRU(3, 4, 2, True, True)),
             (lambda nn: nn.GRUCell(3, 4, bias=False)), (lambda nn: nn.RNNCell(3, 4, nonlinearity="relu")),
             (lambda nn: nn.LSTMCell(3, 4))]
    for make in pairs:
        assert repr(make(tj.nn)) == repr(make(torch.nn))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("cell, options, batched, with_state", [
    (c, o, b, s) for c in ("LSTMCell", "GRUCell", "RNNCell") for o in ({}, {"bias": False})
    for b in (True, False) for s in (True, False)] + [("RNNCell", {"nonlinearity": "relu"}, True, True)])
def test_cells_match_torch(torch, cell, options, batched, with_state, dtype):
    torch.manual_seed(0)
    theirs = getattr(torch.nn, cell)(3, 4, **options).to(getattr(torch, dtype))
    ours = getattr(tj.nn, cell)(3, 4, **options, dtype=getattr(tj, dtype))
    _copy_params(torch, ours, theirs)
    rng = np.random.default_rng(2)
    lead = (2,) if batched else ()
    arrays = [rng.standard_normal(lead + s).astype(dtype) for s in ((3,), (4,), (4,))]
    t_in = [torch.tensor(a, requires_grad=True) for a in arrays]
    o_in = [tj.tensor(a, requires_grad=True) for a in arrays]

    def run(module, x, h, c):
        if not with_state:
            return module(x)
        return module(x, (h, c)) if cell == "LSTMCell" else module(x, h)
    t_res, o_res = run(theirs, *t_in), run(ours, *o_in)
    t_res = list(t_res) if cell == "LSTMCell" else [t_res]
    o_res = list(o_res) if cell == "LSTMCell" else [o_res]
    for a, b in zip(o_res, t_res):
        _close(a, b, dtype, "cell result")
        assert type(a.grad_fn).__name__ == type(b.grad_fn).__name__
    weights = [rng.standard_normal(tuple(r.shape)).astype(dtype) for r in t_res]
    sum((r * torch.tensor(w)).sum() for r, w in zip(t_res, weights)).backward()
    sum((r * tj.tensor(w)).sum() for r, w in zip(o_res, weights)).backward()
    for i in range((3 if cell == "LSTMCell" else 2) if with_state else 1):
        _close(o_in[i].grad, t_in[i].grad, dtype, f"gradient of cell input {i}")
    named = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        _close(p.grad, named[name].grad, dtype, f"gradient of {name}")


def test_functional_rnn_forms_match_torch(torch):
    """tj.lstm / gru / rnn_tanh / rnn_relu and the cell functions: torch's signatures."""
    rng = np.random.default_rng(3)

    def arrays(*shapes):
        return [rng.standard_normal(s) for s in shapes]
    cases = [
        ("lstm", arrays((4, 2, 3), (1, 2, 2), (1, 2, 2), (8, 3), (8, 2), (8,), (8,)),
         lambda m, x, h, c, *w: m.lstm(x, (h, c), w, True, 1, 0.0, False, False, False)),
        ("gru_bidirectional", arrays((4, 2, 3), (2, 2, 2), (6, 3), (6, 2), (6, 3), (6, 2)),
         lambda m, x, h, *w: m.gru(x, h, w, False, 1, 0.0, False, True, False)),
        ("rnn_tanh_batch_first", arrays((2, 4, 3), (1, 2, 2), (2, 3), (2, 2), (2,), (2,)),
         lambda m, x, h, *w: m.rnn_tanh(x, h, w, True, 1, 0.0, False, False, True)),
        ("rnn_relu", arrays((4, 2, 3), (1, 2, 2), (2, 3), (2, 2), (2,), (2,)),
         lambda m, x, h, *w: m.rnn_relu(x, h, w, True, 1, 0.0, False, False, False)),
        ("lstm_cell", arrays((2, 3), (2, 2), (2, 2), (8, 3), (8, 2)),
         lambda m, x, h, c, *w: m.lstm_cell(x, (h, c), *w)),
        ("gru_cell", arrays((2, 3), (2, 2), (6, 3), (6, 2), (6,), (6,)), lambda m, x, h, *w: m.gru_cell(x, h, *w)),
        ("rnn_tanh_cell", arrays((2, 3), (2, 2), (2, 3), (2, 2)), lambda m, x, h, *w: m.rnn_tanh_cell(x, h, *w)),
    ]
    for name, inputs, fn in cases:
        t_in = [torch.tensor(a, requires_grad=True) for a in inputs]
        o_in = [tj.tensor(a, requires_grad=True) for a in inputs]
        t_res, o_res = fn(torch, *t_in), fn(tj, *o_in)
        t_res = list(t_res) if isinstance(t_res, tuple) else [t_res]
        o_res = list(o_res) if isinstance(o_res, tuple) else [o_res]
        assert len(o_res) == len(t_res), name
        for a, b in zip(o_res, t_res):
            _close(a, b, "float64", name)
            if "batch_first" not in name:   # torch's composed path transposes in place: TransposeBackward1
                assert type(a.grad_fn).__name__ == type(b.grad_fn).__name__, name
        sum(r.sum() for r in t_res).backward()
        sum(r.sum() for r in o_res).backward()
        for a, b in zip(o_in, t_in):
            _close(a.grad, b.grad, "float64", f"{name} gradient")


def test_rnn_grad_fn_names(torch):
    """torch's nodes for each way of calling (float64: torch's composed path)."""
    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((5, 2, 3))
    for mode, options in itertools.product(("LSTM", "GRU", "RNN"), ({}, {"bidirectional": True}, {"num_layers": 2},
                                                                   {"unbatched": True})):
        opts = dict(options)
        unbatched = opts.pop("unbatched", False)
        theirs = getattr(torch.nn, mode)(3, 4, **opts).double()
        ours = getattr(tj.nn, mode)(3, 4, **opts, dtype=tj.float64)
        data = x[:, 0] if unbatched else x
        t_res = _states(mode, theirs(torch.tensor(data, requires_grad=True)))
        o_res = _states(mode, ours(tj.tensor(data, requires_grad=True)))
        assert [type(r.grad_fn).__name__ for r in o_res] == [type(r.grad_fn).__name__ for r in t_res], (mode, options)
    ours = tj.nn.LSTM(3, 4, batch_first=True)
    assert type(ours(tj.tensor(x.astype(np.float32)))[0].grad_fn).__name__ == "TransposeBackward0"


def test_lstm_gradient_from_final_cell_state_alone(torch):
    """Only c_n (or only h_n) sends a gradient: the layer's backward sees the cell state's."""
    torch.manual_seed(0)
    theirs = torch.nn.LSTM(3, 4, num_layers=2, bidirectional=True).double()
    ours = tj.nn.LSTM(3, 4, num_layers=2, bidirectional=True, dtype=tj.float64)
    _copy_params(torch, ours, theirs)
    x = np.random.default_rng(0).standard_normal((4, 2, 3))
    for which in (0, 1):
        tx, ox = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
        (theirs(tx)[1][which] ** 2).sum().backward()
        (ours(ox)[1][which] ** 2).sum().backward()
        _close(ox.grad, tx.grad, "float64", f"input gradient from state {which}")
        named = dict(theirs.named_parameters())
        for name, p in ours.named_parameters():
            _close(p.grad, named[name].grad, "float64", f"{name} from state {which}")
            p.grad = None
        theirs.zero_grad()


def test_lstm_retain_graph_and_second_backward(torch):
    lstm = tj.nn.LSTM(3, 4)
    x = tj.randn(5, 2, 3, requires_grad=True)
    out, (h, c) = lstm(x)
    loss = out.sum() + c.sum() + h.sum()
    loss.backward(retain_graph=True)
    first = value(x.grad)
    loss.backward()
    np.testing.assert_allclose(value(x.grad), 2 * first, rtol=1e-5)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()


def test_lstm_output_modified_in_place_raises():
    lstm = tj.nn.LSTM(3, 4)
    out, _ = lstm(tj.randn(5, 2, 3))
    loss = out.sum()
    out.add_(1.0)   # the layer's backward reads its output (the hidden states)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_rnn_without_grad_matches(torch):
    torch.manual_seed(0)
    theirs = torch.nn.GRU(3, 4, num_layers=2, bidirectional=True)
    ours = tj.nn.GRU(3, 4, num_layers=2, bidirectional=True)
    _copy_params(torch, ours, theirs)
    x = np.random.default_rng(0).standard_normal((5, 2, 3)).astype(np.float32)
    with torch.no_grad():
        t_out, t_h = theirs(torch.tensor(x))
    with tj.no_grad():
        o_out, o_h = ours(tj.tensor(x))
    assert o_out.grad_fn is None and not o_out.requires_grad
    _close(o_out, t_out, "float32", "output without grad")
    _close(o_h, t_h, "float32", "h_n without grad")
    for cell in ("GRUCell", "RNNCell", "LSTMCell"):
        theirs, ours = getattr(torch.nn, cell)(3, 4), getattr(tj.nn, cell)(3, 4)
        _copy_params(torch, ours, theirs)
        with torch.no_grad():
            t_res = theirs(torch.tensor(x[0]))
        with tj.no_grad():
            o_res = ours(tj.tensor(x[0]))
        assert isinstance(o_res, tuple) == isinstance(t_res, tuple), cell
        for a, b in zip(o_res if isinstance(o_res, tuple) else [o_res], t_res if isinstance(t_res, tuple) else [t_res]):
            _close(a, b, "float32", f"{cell} without grad")


def test_dropout_between_layers(torch):
    torch.manual_seed(0)
    theirs = torch.nn.LSTM(3, 4, num_layers=2, dropout=1.0).double()
    ours = tj.nn.LSTM(3, 4, num_layers=2, dropout=1.0, dtype=tj.float64)
    _copy_params(torch, ours, theirs)
    x = np.random.default_rng(0).standard_normal((5, 2, 3))
    # dropout=1 zeroes the first layer's output: deterministic, so comparable with torch
    _close(ours(tj.tensor(x))[0], theirs(torch.tensor(x))[0], "float64", "training, dropout=1")
    ours.eval()
    theirs.eval()
    _close(ours(tj.tensor(x))[0], theirs(torch.tensor(x))[0], "float64", "eval, dropout off")
    ours.train()
    tj.manual_seed(0)
    half = tj.nn.GRU(3, 4, num_layers=2, dropout=0.5)
    xs = tj.randn(5, 2, 3)
    a, b = half(xs)[0], half(xs)[0]
    assert not np.allclose(value(a), value(b)), "dropout masks should differ between calls"
    half.eval()
    np.testing.assert_array_equal(value(half(xs)[0]), value(half(xs)[0]))
    with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1"):
        tj.nn.LSTM(3, 4, dropout=0.5)


def test_rnn_errors_match_torch(torch):
    cases = [
        lambda m: m.nn.LSTM(32, 64)(m.randn(5, 3, 16)),
        lambda m: m.nn.LSTM(32, 64)(m.randn(5, 3, 4, 32)),
        lambda m: m.nn.LSTM(32, 64)(m.randn(32)),
        lambda m: m.nn.LSTM(32, 64)(m.randn(5, 3, 32), (m.randn(1, 4, 64), m.randn(1, 3, 64))),
        lambda m: m.nn.LSTM(32, 64)(m.randn(5, 3, 32), (m.randn(1, 3, 64), m.randn(1, 3, 63))),
        lambda m: m.nn.LSTM(32, 64)(m.randn(5, 3, 32), (m.randn(3, 64), m.randn(3, 64))),
        lambda m: m.nn.LSTM(32, 64)(m.randn(5, 32), (m.randn(1, 3, 64), m.randn(1, 3, 64))),
        lambda m: m.nn.LSTM(3, 4, batch_first=True)(m.randn(2, 5, 3), (m.randn(1, 5, 4), m.randn(1, 5, 4))),
        lambda m: m.nn.GRU(32, 64)(m.randn(5, 3, 32), m.randn(2, 3, 64)),
        lambda m: m.nn.GRU(32, 64)(m.randn(5, 3, 32), m.randn(1, 2, 64)),
        lambda m: m.nn.GRU(32, 64)(m.randn(5, 3, 32, dtype=m.float64)),
        lambda m: m.nn.GRU(3, 4)(m.randn(2, 5, 3, 1)),
        lambda m: m.nn.RNN(3, 4)(m.randn(2, 5, 3, 1)),
        lambda m: m.nn.RNN(32, 64)(m.randn(0, 3, 32)),
        lambda m: m.nn.RNN(3, 4)(m.randn(2, 5, 3), m.randn(5, 4)),
        lambda m: m.nn.RNN(3, 4)(m.randn(5, 3), m.randn(1, 1, 4)),
        lambda m: m.nn.RNN(32, 64, nonlinearity="sigmoid"),
        lambda m: m.nn.LSTM(32, 64, proj_size=64),
        lambda m: m.nn.LSTM(32, 64, proj_size=-1),
        lambda m: m.nn.GRU(32, 64, proj_size=3),
        lambda m: m.nn.RNN(32, 64, proj_size=3),
        lambda m: m.nn.LSTM(32, 64, dropout=1.5),
        lambda m: m.nn.LSTM(32, 64, num_layers=0),
        lambda m: m.nn.LSTM(32, 0),
        lambda m: m.nn.LSTM(0, 4),
        lambda m: m.nn.LSTM(32, 2.5),
        lambda m: m.nn.LSTM(32, 4, bias=1),
        lambda m: m.nn.LSTMCell(32, 64)(m.randn(3, 16)),
        lambda m: m.nn.LSTMCell(32, 64)(m.randn(3, 32), (m.randn(2, 64), m.randn(3, 64))),
        lambda m: m.nn.LSTMCell(32, 64)(m.randn(3, 32), (m.randn(3, 63), m.randn(3, 64))),
        lambda m: m.nn.LSTMCell(32, 64)(m.randn(3, 32), (m.randn(3, 64), m.randn(3, 62))),
        lambda m: m.nn.LSTMCell(32, 64)(m.randn(3, 4, 32)),
        lambda m: m.nn.GRUCell(32, 64)(m.randn(3, 32), m.randn(3, 64, 1)),
        lambda m: m.nn.GRUCell(32, 64)(m.randn(32), m.randn(3, 64)),
        lambda m: m.nn.RNNCell(32, 64)(m.randn(3, 4, 32)),
        lambda m: m.gru_cell(m.randn(2, 3), m.randn(2, 4), m.randn(12, 3), m.randn(16, 4)),
    ]
    for i, case in enumerate(cases):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert _outcome(lambda: case(tj)) == _outcome(lambda: case(torch)), f"case {i}"


def test_compiled_lstm_training_step_replays_and_matches_eager(torch):
    """tj.compile of zero_grad, forward, loss and backward: traced once, then replayed, with
    the same loss and gradients as the eager step from the same parameters."""
    tj.manual_seed(0)
    model = tj.nn.LSTM(3, 5, num_layers=2, bidirectional=True)
    head = tj.nn.Linear(10, 1)
    params = list(model.parameters()) + list(head.parameters())
    opt = tj.optim.SGD(params, lr=0.1)
    rng = np.random.default_rng(0)
    x = tj.tensor(rng.standard_normal((6, 4, 3)).astype(np.float32))
    y = tj.tensor(rng.standard_normal((6, 4, 1)).astype(np.float32))

    def step(x, y):
        opt.zero_grad()
        out, (h, c) = model(x)
        loss = ((head(out) - y) ** 2).mean() + 0.1 * c.pow(2).mean()
        loss.backward()
        return loss

    compiled = tj.compile(step)
    for i in range(4):
        snapshot = [value(p) for p in params]
        replayed = float(compiled(x, y))
        replay_grads = [value(p.grad) for p in params]
        eager = float(step(x, y))
        eager_grads = [value(p.grad) for p in params]
        assert abs(replayed - eager) <= 1e-6 * abs(eager)
        for a, b in zip(replay_grads, eager_grads):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
        for p, s in zip(params, snapshot):
            np.testing.assert_array_equal(value(p), s)
        opt.step()
    assert compiled.stats()["traces"] == 1


# ---- normalisation ---------------------------------------------------------------------------

NORM_CASES = [
    ("BatchNorm1d", (3,), (4, 3), {}), ("BatchNorm1d", (3,), (4, 3, 5), {}), ("BatchNorm2d", (3,), (4, 3, 2, 2), {}),
    ("BatchNorm1d", (3,), (4, 3), {"affine": False}), ("BatchNorm2d", (3,), (4, 3, 2, 2), {"momentum": None}),
    ("BatchNorm2d", (3,), (4, 3, 2, 2), {"track_running_stats": False}), ("BatchNorm1d", (3,), (4, 3), {"bias": False}),
    ("BatchNorm3d", (2,), (2, 2, 2, 3, 2), {"momentum": 0.3, "eps": 1e-3}),
    ("InstanceNorm1d", (3,), (4, 3, 5), {}), ("InstanceNorm2d", (3,), (4, 3, 2, 3), {"affine": True}),
    ("InstanceNorm2d", (3,), (4, 3, 2, 3), {"affine": True, "track_running_stats": True}),
    ("InstanceNorm1d", (3,), (3, 5), {"track_running_stats": True}),
    ("GroupNorm", (2, 4), (3, 4, 5), {}), ("GroupNorm", (1, 4), (3, 4), {}), ("GroupNorm", (4, 4), (2, 4, 2, 2),
                                                                              {"affine": False}),
    ("GroupNorm", (3, 6), (2, 6, 3), {"bias": False, "eps": 1e-2}),
    ("LayerNorm", (5,), (3, 5), {}), ("LayerNorm", ((2, 5),), (3, 2, 5), {}), ("LayerNorm", ([5],), (3, 5), {"bias": False}),
    ("LayerNorm", (5,), (2, 3, 5), {"elementwise_affine": False}), ("LayerNorm", (5,), (5,), {"eps": 0.1}),
    ("LocalResponseNorm", (3,), (2, 5, 4), {}), ("LocalResponseNorm", (2,), (2, 5, 3, 3), {"alpha": 0.1, "k": 2.0}),
]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name, args, shape, options", NORM_CASES,
                         ids=[f"{n}-{list(s)}-{o}" for n, _, s, o in NORM_CASES])
def test_norm_layers_match_torch(torch, name, args, shape, options, dtype):
    tdt = getattr(torch, dtype)
    theirs = getattr(torch.nn, name)(*args, **options).to(tdt)
    extra = {} if name == "LocalResponseNorm" else {"dtype": getattr(tj, dtype)}
    ours = getattr(tj.nn, name)(*args, **options, **extra)
    with torch.no_grad():
        for p in theirs.parameters():
            p.uniform_(0.5, 1.5)
    assert list(ours.state_dict().keys()) == list(theirs.state_dict().keys())
    assert repr(ours) == repr(theirs)
    _copy_params(torch, ours, theirs)
    rng = np.random.default_rng(0)
    for step in range(3):   # training steps: running statistics move
        x = (rng.standard_normal(shape) * 2 + 1).astype(dtype)
        tx, ox = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
        ty, oy = theirs(tx), ours(ox)
        _close(oy, ty, dtype, f"{name} output, step {step}")
        assert type(oy.grad_fn).__name__ == type(ty.grad_fn).__name__
        u = rng.standard_normal(shape).astype(dtype)
        (ty * torch.tensor(u)).sum().backward()
        (oy * tj.tensor(u)).sum().backward()
        _close(ox.grad, tx.grad, dtype, f"{name} input gradient, step {step}")
        named = dict(theirs.named_parameters())
        for n, p in ours.named_parameters():
            _close(p.grad, named[n].grad, dtype, f"{name} gradient of {n}, step {step}")
            p.grad = None
        theirs.zero_grad()
        named_buffers = dict(theirs.named_buffers())
        for n, b in ours.named_buffers():
            if b.dtype is tj.int64:
                assert int(b) == int(named_buffers[n]), n
            else:
                _close(b, named_buffers[n], dtype, f"{name} buffer {n} after step {step}")
    theirs.eval()
    ours.eval()
    x = rng.standard_normal(shape).astype(dtype)
    tx, ox = torch.tensor(x, requires_grad=True), tj.tensor(x, requires_grad=True)
    ty, oy = theirs(tx), ours(ox)
    _close(oy, ty, dtype, f"{name} eval output")
    (ty ** 2).sum().backward()
    (oy ** 2).sum().backward()
    _close(ox.grad, tx.grad, dtype, f"{name} eval input gradient")
    named = dict(theirs.named_parameters())
    for n, p in ours.named_parameters():
        _close(p.grad, named[n].grad, dtype, f"{name} eval gradient of {n}")


def test_batch_norm_num_batches_tracked_and_cumulative_average(torch):
    ours = tj.nn.BatchNorm1d(2, momentum=None)
    theirs = torch.nn.BatchNorm1d(2, momentum=None)
    rng = np.random.default_rng(0)
    for _ in range(5):
        x = rng.standard_normal((6, 2)).astype(np.float32) * 3
        ours(tj.tensor(x))
        theirs(torch.tensor(x))
    assert ours.num_batches_tracked.dtype is tj.int64 and int(ours.num_batches_tracked) == 5
    _close(ours.running_mean, theirs.running_mean, "float32", "cumulative running mean")
    _close(ours.running_var, theirs.running_var, "float32", "cumulative running var")
    ours.reset_running_stats()
    assert int(ours.num_batches_tracked) == 0 and np.all(value(ours.running_var) == 1)
    # eval without running statistics: the batch's own (torch: bn_training when both are None)
    plain = tj.nn.BatchNorm1d(2, track_running_stats=False).eval()
    x = rng.standard_normal((6, 2)).astype(np.float32)
    _close(plain(tj.tensor(x)), torch.nn.BatchNorm1d(2, track_running_stats=False).eval()(torch.tensor(x)),
           "float32", "eval without running statistics")


def test_functional_norms_match_torch(torch):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 3, 5))
    w, b = rng.uniform(0.5, 1.5, 3), rng.standard_normal(3)
    calls = [
        lambda F, t, x, w, b: F.batch_norm(x, t.zeros(3, dtype=t.float64), t.ones(3, dtype=t.float64), w, b,
                                           training=True, momentum=0.2),
        lambda F, t, x, w, b: F.batch_norm(x, t.tensor([0.1, -0.2, 0.3]).double(), t.tensor([1.0, 2.0, 0.5]).double(),
                                           w, b),
        lambda F, t, x, w, b: F.instance_norm(x, weight=w, bias=b),
        lambda F, t, x, w, b: F.instance_norm(x, t.zeros(3).double(), t.ones(3).double(), w, b, use_input_stats=False),
        lambda F, t, x, w, b: F.group_norm(x, 3, w, b, eps=1e-3),
        lambda F, t, x, w, b: F.layer_norm(x, (3, 5)),
        lambda F, t, x, w, b: F.local_response_norm(x, 2, alpha=0.5),
    ]
    for i, call in enumerate(calls):
        t_in = [torch.tensor(a, requires_grad=True) for a in (x, w, b)]
        o_in = [tj.tensor(a, requires_grad=True) for a in (x, w, b)]
        ty = call(torch.nn.functional, torch, *t_in)
        oy = call(tj.nn.functional, tj, *o_in)
        _close(oy, ty, "float64", f"call {i}")
        assert type(oy.grad_fn).__name__ == type(ty.grad_fn).__name__, i
        (ty ** 3).sum().backward()
        (oy ** 3).sum().backward()
        for a, c in zip(o_in, t_in):
            if c.grad is None:
                assert a.grad is None, i
            else:
                _close(a.grad, c.grad, "float64", f"call {i} gradient")


def test_functional_batch_norm_updates_running_stats_in_place(torch):
    rng = np.random.default_rng(5)
    stats = {lib: (lib.zeros(3), lib.ones(3)) for lib in (tj, torch)}
    for _ in range(3):
        x = rng.standard_normal((5, 3, 2)).astype(np.float32)
        for lib in (tj, torch):
            lib.nn.functional.batch_norm(lib.tensor(x), *stats[lib], training=True, momentum=0.25)
    for a, b in zip(stats[tj], stats[torch]):
        _close(a, b, "float32", "running statistic updated by F.batch_norm")


def test_norm_errors_match_torch(torch):
    F = "nn.functional"
    cases = [
        lambda m: m.nn.BatchNorm1d(3)(m.randn(4, 5)),
        lambda m: m.nn.BatchNorm1d(3)(m.randn(4, 3, 2, 2)),
        lambda m: m.nn.BatchNorm1d(3)(m.randn(3)),
        lambda m: m.nn.BatchNorm2d(3)(m.randn(4, 3, 2)),
        lambda m: m.nn.BatchNorm2d(3)(m.randn(4, 4, 2, 2)),
        lambda m: m.nn.BatchNorm1d(3)(m.randn(4, 3, dtype=m.float64)),
        lambda m: m.nn.functional.batch_norm(m.randn(4, 3), None, None, training=False),
        lambda m: m.nn.functional.batch_norm(m.randn(4, 3), m.zeros(4), m.ones(4), training=False),
        lambda m: m.nn.functional.batch_norm(m.randn(4, 3), m.zeros(3), m.ones(3), m.ones(2), training=False),
        lambda m: m.nn.functional.batch_norm(m.randn(5, 3), None, None, bias=m.ones(4), training=True),
        lambda m: m.nn.functional.batch_norm(m.randn(5, 3), m.zeros(3), None, training=True),
        lambda m: m.nn.functional.batch_norm(m.randn(5, 3), None, None, training=True, eps=0),
        lambda m: m.nn.functional.batch_norm(m.randn(5, 3), None, None, training=False, eps=-1),
        lambda m: m.nn.functional.batch_norm(m.randn(4, 3), m.zeros(3, requires_grad=True), m.ones(3)),
        lambda m: m.nn.functional.batch_norm(m.randn(4, 3), m.zeros(3, dtype=m.float64), m.ones(3), training=True),
        lambda m: m.nn.functional.batch_norm(m.randn(4, 3, dtype=m.float64), m.zeros(3), m.ones(3), training=True),
        lambda m: m.nn.functional.batch_norm(m.randint(0, 3, (5, 3)), None, None, training=True),
        lambda m: m.nn.functional.instance_norm(m.randn(2, 3, 4), weight=m.ones(4)),
        lambda m: m.nn.functional.instance_norm(m.randn(2, 3, 4), running_mean=m.zeros(3), use_input_stats=False),
        lambda m: m.nn.functional.instance_norm(m.randn(2, 3, 4), running_mean=m.zeros(4), running_var=m.ones(4)),
        lambda m: m.nn.functional.instance_norm(m.randn(3, 4)),
        lambda m: m.nn.InstanceNorm1d(3)(m.randn(4, 3, 1)),
        lambda m: m.nn.InstanceNorm1d(3, affine=True)(m.randn(4, 5, 6)),
        lambda m: m.nn.InstanceNorm2d(3)(m.randn(4, 3, 5, 5, 5)),
        lambda m: m.nn.GroupNorm(4, 6),
        lambda m: m.nn.GroupNorm(2, 6)(m.randn(3, 4, 5)),
        lambda m: m.nn.GroupNorm(2, 6)(m.randn(6)),
        lambda m: m.nn.functional.group_norm(m.randn(3, 6, 5), 4),
        lambda m: m.nn.functional.group_norm(m.randn(3, 6, 5), 2, m.ones(5)),
        lambda m: m.nn.functional.group_norm(m.randn(1, 4), 4),
        lambda m: m.nn.functional.group_norm(m.randn(3, 4), 2, m.ones(4, dtype=m.float64)),
        lambda m: m.nn.LayerNorm(5)(m.randn(4, 3)),
        lambda m: m.nn.LayerNorm((3, 5))(m.randn(4, 5, 3)),
        lambda m: m.nn.LayerNorm(3)(m.randn(4, 3, dtype=m.float64)),
        lambda m: m.nn.functional.layer_norm(m.randn(4, 5), (5,), m.ones(4)),
        lambda m: m.nn.functional.layer_norm(m.randn(3, 4), (4,), None, m.ones(3)),
        lambda m: m.nn.functional.layer_norm(m.randn(4, 5), []),
        lambda m: m.nn.functional.layer_norm(m.randint(0, 3, (3, 4)), (4,)),
        lambda m: m.nn.functional.local_response_norm(m.randn(3, 4), 2),
    ]
    del F
    for i, case in enumerate(cases):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert _outcome(lambda: case(tj)) == _outcome(lambda: case(torch)), f"case {i}"


def test_instance_norm_size_mismatch_warns_without_affine():
    with pytest.warns(UserWarning, match="does not match num_features"):
        tj.nn.InstanceNorm1d(3)(tj.randn(4, 5, 6))


def test_batch_norm_training_refused_by_compile_eval_replays(torch):
    bn = tj.nn.BatchNorm1d(3)
    x = tj.randn(4, 3)
    with pytest.raises(tj.CompileError, match="running statistics"):
        tj.compile(lambda x: bn(x).sum())(x)
    bn.eval()
    w = tj.nn.Parameter(tj.ones(3))

    def f(x):
        loss = (bn(x) * w).sum()
        loss.backward()
        return loss
    compiled = tj.compile(f)
    first = float(compiled(x))
    w.grad = None
    again = float(compiled(x))
    assert first == again and compiled.stats()["traces"] == 1
    w.grad = None
    assert abs(float(f(x)) - again) < 1e-6


# ---- packed and padded sequences -------------------------------------------------------------

PACKED_CONFIGS = [("LSTM", {}), ("LSTM", {"bidirectional": True, "num_layers": 2}),
                  ("LSTM", {"proj_size": 2, "bidirectional": True}), ("GRU", {"batch_first": True}),
                  ("GRU", {"bidirectional": True}), ("RNN", {"num_layers": 2}),
                  ("RNN", {"nonlinearity": "relu", "bidirectional": True})]


@pytest.mark.parametrize("with_state", [True, False])
@pytest.mark.parametrize("mode, options", PACKED_CONFIGS, ids=[f"{m}-{o}" for m, o in PACKED_CONFIGS])
def test_packed_sequences_match_torch(torch, mode, options, with_state):
    """pack_padded_sequence (unsorted lengths) -> module -> pad_packed_sequence: every
    sequence's own last state in h_n (and c_n), zeros past each end, the gradients."""
    torch.manual_seed(0)
    theirs = getattr(torch.nn, mode)(3, 4, **options).double()
    ours = getattr(tj.nn, mode)(3, 4, **options, dtype=tj.float64)
    _copy_params(torch, ours, theirs)
    rng = np.random.default_rng(0)
    lengths = [3, 5, 1, 4]
    batch_first = options.get("batch_first", False)
    x = rng.standard_normal((4, 5, 3) if batch_first else (5, 4, 3))
    layers = options.get("num_layers", 1) * (2 if options.get("bidirectional") else 1)
    states = [rng.standard_normal((layers, 4, options.get("proj_size") or 4)), rng.standard_normal((layers, 4, 4))]
    t_in = [torch.tensor(a, requires_grad=True) for a in [x] + states]
    o_in = [tj.tensor(a, requires_grad=True) for a in [x] + states]

    def run(lib, module, x, h, c):
        packed = lib.nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=batch_first, enforce_sorted=False)
        hx = ((h, c) if mode == "LSTM" else h) if with_state else None
        out, hidden = module(packed, hx)
        assert isinstance(out, lib.nn.utils.rnn.PackedSequence)
        padded, out_lengths = lib.nn.utils.rnn.pad_packed_sequence(out, batch_first=batch_first, total_length=6)
        assert out_lengths.tolist() == lengths
        return [padded] + (list(hidden) if mode == "LSTM" else [hidden])
    t_res, o_res = run(torch, theirs, *t_in), run(tj, ours, *o_in)
    for i, (a, b) in enumerate(zip(o_res, t_res)):
        _close(a, b, "float64", f"packed result {i}")
    weights = [rng.standard_normal(tuple(r.shape)) for r in t_res]
    sum((r * torch.tensor(w)).sum() for r, w in zip(t_res, weights)).backward()
    sum((r * tj.tensor(w)).sum() for r, w in zip(o_res, weights)).backward()
    for i in range((3 if mode == "LSTM" else 2) if with_state else 1):
        _close(o_in[i].grad, t_in[i].grad, "float64", f"gradient of input {i}")
    named = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        _close(p.grad, named[name].grad, "float64", f"gradient of {name}")


def test_sequence_utilities_match_torch(torch):
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal((n, 2)) for n in (2, 4, 3)]
    for batch_first, side in itertools.product((False, True), ("right", "left")):
        ours = tj.nn.utils.rnn.pad_sequence([tj.tensor(a) for a in arrays], batch_first, -1.0, side)
        theirs = torch.nn.utils.rnn.pad_sequence([torch.tensor(a) for a in arrays], batch_first, -1.0, side)
        _close(ours, theirs, "float64", f"pad_sequence batch_first={batch_first} {side}")
    seqs = [tj.tensor(a, requires_grad=True) for a in arrays]
    packed = tj.nn.utils.rnn.pack_sequence(seqs, enforce_sorted=False)
    expected = torch.nn.utils.rnn.pack_sequence([torch.tensor(a) for a in arrays], enforce_sorted=False)
    _close(packed.data, expected.data, "float64", "pack_sequence data")
    for name in ("batch_sizes", "sorted_indices", "unsorted_indices"):
        assert getattr(packed, name).tolist() == getattr(expected, name).tolist(), name
        assert getattr(packed, name).dtype is tj.int64
    for a, b in zip(tj.nn.utils.rnn.unpack_sequence(packed), torch.nn.utils.rnn.unpack_sequence(expected)):
        _close(a, b, "float64", "unpack_sequence")
    packed.data.sum().backward()   # the gradient reaches every sequence element once
    for s in seqs:
        np.testing.assert_array_equal(value(s.grad), np.ones(s.shape))
    from tapejit.nn.utils.rnn import pad_sequence   # importable as torch's module
    assert pad_sequence is tj.nn.utils.rnn.pad_sequence
    for lib in (tj, torch):
        assert lib.nn.utils.rnn.PackedSequence(*expected if lib is torch else packed).batch_sizes.tolist() == [3, 3, 2, 1]
    errors = [
        lambda m: m.nn.utils.rnn.pack_padded_sequence(m.zeros(4, 2, 1), [2, 3]),
        lambda m: m.nn.utils.rnn.pack_padded_sequence(m.zeros(4, 2, 1), [2, 0]),
        lambda m: m.nn.utils.rnn.pad_packed_sequence(m.nn.utils.rnn.pack_sequence([m.zeros(3, 1)]), total_length=2),
        lambda m: m.nn.utils.rnn.pad_sequence([m.zeros(3, 1)], padding_side="middle"),
    ]
    for i, case in enumerate(errors):
        assert _outcome(lambda: case(tj)) == _outcome(lambda: case(torch)), f"case {i}"
