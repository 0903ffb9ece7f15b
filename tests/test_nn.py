"""``tapejit.nn`` module mechanics: ``Parameter``, registration, traversal, ``state_dict``,
modes, ``repr``, containers, dtype conversion and initialisation.

Torch comparisons import torch inside the test (and skip without it); every behaviour
is also pinned by a torch-free assertion.
"""
import copy
import math
import pickle
from collections import OrderedDict

import numpy as np
import pytest

import tapejit as tj
from tapejit import nn


def value(t):
    return np.asarray(t.detach())


# ---- Parameter ------------------------------------------------------------------------------

def test_parameter_is_a_leaf_tensor_requiring_grad():
    p = nn.Parameter(tj.ones(2, 3))
    assert isinstance(p, tj.Tensor) and isinstance(p, nn.Parameter)
    assert p.requires_grad and p.is_leaf and p.grad_fn is None
    assert tuple(p.shape) == (2, 3) and p.dtype == tj.float32
    assert not nn.Parameter(tj.ones(2), requires_grad=False).requires_grad
    assert tuple(nn.Parameter().shape) == (0,)


def test_parameter_shares_memory_with_leaf_data():
    data = tj.zeros(3)
    p = nn.Parameter(data)
    with tj.no_grad():
        p.add_(1.0)
    np.testing.assert_array_equal(value(data), [1.0, 1.0, 1.0])


def test_parameter_repr():
    assert repr(nn.Parameter(tj.tensor([1.0, 2.0]))) == "Parameter containing:\ntensor([1., 2.], requires_grad=True)"
    assert str(nn.Parameter(tj.tensor([1.0]))).startswith("Parameter containing:\n")


def test_parameter_rejects_integer_data():
    with pytest.raises(RuntimeError, match="Only Tensors of floating point"):
        nn.Parameter(tj.tensor([1, 2]))


OPERATIONS = {
    "x + p": (lambda x, p: x + p, lambda x, p: x + p),
    "p + x": (lambda x, p: p + x, lambda x, p: p + x),
    "x - p": (lambda x, p: x - p, lambda x, p: x - p),
    "p - x": (lambda x, p: p - x, lambda x, p: p - x),
    "x * p": (lambda x, p: x * p, lambda x, p: x * p),
    "x / p": (lambda x, p: x / p, lambda x, p: x / p),
    "p / x": (lambda x, p: p / x, lambda x, p: p / x),
    "x ** p": (lambda x, p: x ** p, lambda x, p: x ** p),
    "2 - p": (lambda x, p: 2.0 - p, lambda x, p: 2.0 - p),
    "2 / p": (lambda x, p: 2.0 / p, lambda x, p: 2.0 / p),
    "2 ** p": (lambda x, p: 2.0 ** p, lambda x, p: 2.0 ** p),
    "array - p": (lambda x, p: np.full(3, 5.0) - p, lambda x, p: 5.0 - p),
    "x @ p": (lambda x, p: x @ p, lambda x, p: x @ p),
    "maximum": (lambda x, p: tj.maximum(x, p), np.maximum),
    "where": (lambda x, p: tj.where(x > 1.5, x, p), lambda x, p: np.where(x > 1.5, x, p)),
}


@pytest.mark.parametrize("name", sorted(OPERATIONS))
def test_operations_with_a_parameter_give_tensors_and_gradients(name):
    ours, reference = OPERATIONS[name]
    xv, pv = np.array([1.0, 2.0, 3.0]), np.array([0.5, 1.5, 2.5])
    x = tj.tensor(xv, requires_grad=True)
    p = nn.Parameter(tj.tensor(pv))
    out = ours(x, p)
    assert type(out) is tj.Tensor and out.grad_fn is not None
    np.testing.assert_allclose(value(out), reference(xv, pv), rtol=1e-12)
    out.sum().backward()
    assert p.grad is not None and tuple(p.grad.shape) == (3,)
    # The gradient agrees with central differences of the reference.
    eps = 1e-6
    numeric = [(reference(xv, pv + eps * e).sum() - reference(xv, pv - eps * e).sum()) / (2 * eps)
               for e in np.eye(3)]
    np.testing.assert_allclose(value(p.grad), numeric, rtol=1e-6, atol=1e-8)


def test_parameter_copies_and_pickles_as_parameter():
    p = nn.Parameter(tj.tensor([1.0, 2.0]))
    p.grad = tj.tensor([0.5, 0.5])
    q = copy.deepcopy(p)
    assert type(q) is nn.Parameter and q is not p and q.requires_grad
    np.testing.assert_array_equal(value(q), [1.0, 2.0])
    np.testing.assert_array_equal(value(q.grad), [0.5, 0.5])
    r = pickle.loads(pickle.dumps(p))
    assert type(r) is nn.Parameter and r.requires_grad
    np.testing.assert_array_equal(value(r), [1.0, 2.0])


# ---- registration -----------------------------------------------------------------------------

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4)
        self.scale = nn.Parameter(tj.ones(4))
        self.register_buffer("running", tj.zeros(4))
        self.register_buffer("scratch", tj.zeros(2), persistent=False)
        self.act = nn.Tanh()

    def forward(self, x):
        return self.act(self.fc(x)) * self.scale + self.running


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = Block()
        self.layers = nn.ModuleList([nn.Linear(4, 4), nn.ReLU()])
        self.shared = self.first.fc                          # the same module twice
        self.head = nn.Sequential(nn.Linear(4, 2), nn.Sigmoid())
        self.temperature = nn.Parameter(tj.tensor(1.0))

    def forward(self, x):
        h = self.first(x)
        for layer in self.layers:
            h = layer(h)
        return self.head(h) / self.temperature


def torch_net(torch):
    tnn = torch.nn

    class TBlock(tnn.Module):
        def __init__(self):
            super().__init__()
            self.fc = tnn.Linear(3, 4)
            self.scale = tnn.Parameter(torch.ones(4))
            self.register_buffer("running", torch.zeros(4))
            self.register_buffer("scratch", torch.zeros(2), persistent=False)
            self.act = tnn.Tanh()

        def forward(self, x):
            return self.act(self.fc(x)) * self.scale + self.running

    class TNet(tnn.Module):
        def __init__(self):
            super().__init__()
            self.first = TBlock()
            self.layers = tnn.ModuleList([tnn.Linear(4, 4), tnn.ReLU()])
            self.shared = self.first.fc
            self.head = tnn.Sequential(tnn.Linear(4, 2), tnn.Sigmoid())
            self.temperature = tnn.Parameter(torch.tensor(1.0))

        def forward(self, x):
            h = self.first(x)
            for layer in self.layers:
                h = layer(h)
            return self.head(h) / self.temperature

    TBlock.__name__, TBlock.__qualname__ = "Block", "Block"
    TNet.__name__, TNet.__qualname__ = "Net", "Net"
    return TNet()


NET_PARAMETERS = ["temperature", "first.scale", "first.fc.weight", "first.fc.bias", "layers.0.weight",
                  "layers.0.bias", "head.0.weight", "head.0.bias"]


def test_named_parameters_in_registration_order_without_duplicates():
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == NET_PARAMETERS
    assert len(list(net.parameters())) == len(NET_PARAMETERS)
    assert [n for n, _ in net.first.named_parameters(prefix="first")][:2] == ["first.scale", "first.fc.weight"]
    assert [n for n, _ in net.named_parameters(recurse=False)] == ["temperature"]
    assert all(isinstance(p, nn.Parameter) for p in net.parameters())


def test_traversal_names_match_torch():
    torch = pytest.importorskip("torch")
    ours, theirs = Net(), torch_net(torch)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert [n for n, _ in ours.named_buffers()] == [n for n, _ in theirs.named_buffers()]
    assert [n for n, _ in ours.named_modules()] == [n for n, _ in theirs.named_modules()]
    assert [n for n, _ in ours.named_children()] == [n for n, _ in theirs.named_children()]
    assert list(ours.state_dict().keys()) == list(theirs.state_dict().keys())
    assert [type(m).__name__ for m in ours.modules()] == [type(m).__name__ for m in theirs.modules()]


def test_modules_children_and_buffers():
    net = Net()
    assert [n for n, _ in net.named_children()] == ["first", "layers", "shared", "head"]
    # "shared" is first.fc again: listed once, under its first name.
    assert [n for n, _ in net.named_modules()] == ["", "first", "first.fc", "first.act", "layers", "layers.0",
                                                   "layers.1", "head", "head.0", "head.1"]
    assert [n for n, _ in net.named_modules(remove_duplicate=False)][7] == "shared"
    assert [n for n, _ in net.named_buffers()] == ["first.running", "first.scratch"]
    assert next(net.children()) is net.first
    assert net.get_submodule("head.0") is net.head[0]


def test_attribute_assignment_registers_and_replaces():
    m = nn.Module()
    m.w = nn.Parameter(tj.ones(2))
    m.sub = nn.Linear(2, 2)
    m.plain = tj.ones(1)                                     # a plain tensor is just an attribute
    assert list(m._parameters) == ["w"] and list(m._modules) == ["sub"] and list(m._buffers) == []
    m.w = None
    assert list(m.parameters()) == list(m.sub.parameters())
    m.w = nn.Parameter(tj.zeros(3))
    assert tuple(m.w.shape) == (3,)
    with pytest.raises(TypeError, match=r"cannot assign '.*FloatTensor' as parameter 'w' \(torch.nn.Parameter or None"):
        m.w = tj.ones(3)
    with pytest.raises(TypeError, match="cannot assign 'int' as child module 'sub'"):
        m.sub = 3
    m.register_buffer("buf", tj.zeros(2))
    m.buf = tj.ones(2)
    assert m._buffers["buf"] is m.buf
    with pytest.raises(TypeError, match="as buffer 'buf'"):
        m.buf = 3
    del m.sub
    assert "sub" not in m._modules and not hasattr(m, "sub")
    m.sub = nn.Parameter(tj.ones(1))                        # a name can change kind
    assert "sub" in m._parameters


def test_registration_errors():
    m = nn.Linear(2, 2)
    with pytest.raises(KeyError, match="attribute 'weight' already exists"):
        m.register_buffer("weight", tj.ones(1))
    with pytest.raises(KeyError, match=r'parameter name can.*contain "\."'):
        m.register_parameter("a.b", None)
    with pytest.raises(TypeError, match="cannot assign .* object to parameter 'x'"):
        m.register_parameter("x", tj.ones(1))
    with pytest.raises(AttributeError, match="'Linear' object has no attribute 'missing'"):
        m.missing  # noqa: B018

    class Early(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(tj.ones(1))
            super().__init__()
    with pytest.raises(AttributeError, match=r"cannot assign parameters before Module.__init__\(\) call"):
        Early()
    with pytest.raises(NotImplementedError, match='missing the required "forward" function'):
        nn.Module()(tj.ones(1))


def test_call_forwards_arguments():
    class Affine(nn.Module):
        def forward(self, x, shift=0.0, *, scale=1.0):
            return x * scale + shift
    out = Affine()(tj.tensor([1.0, 2.0]), 1.0, scale=3.0)
    np.testing.assert_array_equal(value(out), [4.0, 7.0])


# ---- modes, gradients, apply --------------------------------------------------------------------

def test_train_eval_set_every_module():
    net = Net()
    assert net.training and all(m.training for m in net.modules())
    assert net.eval() is net
    assert not any(m.training for m in net.modules())
    net.train()
    assert all(m.training for m in net.modules())
    net.head.train(False)
    assert net.training and not net.head[0].training
    with pytest.raises(ValueError, match="training mode is expected to be boolean"):
        net.train("yes")


def test_zero_grad_and_requires_grad():
    net = Net()
    net(tj.randn(5, 3)).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    net.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not value(p.grad).any() for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())
    assert net.requires_grad_(False) is net
    assert not any(p.requires_grad for p in net.parameters())
    out = net(tj.randn(2, 3))
    assert not out.requires_grad


def test_apply_visits_children_before_parents():
    seen = []
    net = Net()
    assert net.apply(lambda m: seen.append(type(m).__name__)) is net
    assert seen[-1] == "Net" and seen.index("Linear") < seen.index("Block")


# ---- state_dict -------------------------------------------------------------------------------

def test_state_dict_keys_values_and_round_trip():
    a, b = Net(), Net()
    state = a.state_dict()
    assert isinstance(state, OrderedDict)
    assert list(state) == ["temperature", "first.scale", "first.running", "first.fc.weight", "first.fc.bias",
                           "layers.0.weight", "layers.0.bias", "shared.weight", "shared.bias", "head.0.weight",
                           "head.0.bias"]
    assert all(not v.requires_grad and type(v) is tj.Tensor for v in state.values())
    weight_before = b.first.fc.weight
    result = b.load_state_dict(state)
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert repr(result) == "<All keys matched successfully>"   # what a script prints, as in torch
    assert b.first.fc.weight is weight_before                # copied in place
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        np.testing.assert_array_equal(value(p), value(q), err_msg=name)
    x = tj.randn(4, 3)
    np.testing.assert_array_equal(value(a(x)), value(b(x)))
    assert a.state_dict(keep_vars=True)["temperature"] is a.temperature


def test_state_dict_values_share_memory_like_torch():
    layer = nn.Linear(2, 2)
    state = layer.state_dict()
    with tj.no_grad():
        layer.weight.fill_(3.0)
    np.testing.assert_array_equal(value(state["weight"]), 3.0)


def test_load_state_dict_errors():
    layer = nn.Linear(2, 2)
    with pytest.raises(RuntimeError) as err:
        layer.load_state_dict({"weight": tj.ones(3, 2), "foo": tj.ones(1)})
    assert str(err.value) == (
        "Error(s) in loading state_dict for Linear:\n"
        "\tMissing key(s) in state_dict: \"bias\". \n"
        "\tUnexpected key(s) in state_dict: \"foo\". \n"
        "\tsize mismatch for weight: copying a param with shape tapejit.Size([3, 2]) from checkpoint, "
        "the shape in current model is tapejit.Size([2, 2]).")
    result = layer.load_state_dict({"weight": tj.full((2, 2), 2.0), "extra": tj.ones(1)}, strict=False)
    assert result.missing_keys == ["bias"] and result.unexpected_keys == ["extra"]
    assert repr(result) == "_IncompatibleKeys(missing_keys=['bias'], unexpected_keys=['extra'])"  # torch's text
    np.testing.assert_array_equal(value(layer.weight), 2.0)
    with pytest.raises(RuntimeError, match="size mismatch for bias"):
        layer.load_state_dict({"bias": tj.ones(5)}, strict=False)


def test_load_state_dict_converts_dtype_and_accepts_arrays():
    layer = nn.Linear(2, 1)
    layer.load_state_dict({"weight": np.array([[1.0, 2.0]]), "bias": tj.tensor([0.5], dtype=tj.float64)})
    assert layer.weight.dtype == tj.float32 and layer.bias.dtype == tj.float32
    np.testing.assert_array_equal(value(layer(tj.tensor([[1.0, 1.0]]))), [[3.5]])


def test_state_dict_exchange_with_torch():
    torch = pytest.importorskip("torch")
    ours, theirs = Net(), torch_net(torch)
    theirs.load_state_dict({k: torch.tensor(np.array(v)) for k, v in ours.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    np.testing.assert_allclose(value(ours(tj.tensor(x))), theirs(torch.tensor(x)).detach().numpy(), rtol=1e-5,
                               atol=1e-6)
    fresh = torch_net(torch)
    ours.load_state_dict({k: tj.tensor(v.numpy()) for k, v in fresh.state_dict().items()})
    np.testing.assert_allclose(value(ours(tj.tensor(x))), fresh(torch.tensor(x)).detach().numpy(), rtol=1e-5,
                               atol=1e-6)


def test_loss_weights_are_buffers():
    loss = nn.CrossEntropyLoss(weight=tj.tensor([1.0, 2.0]))
    assert list(loss.state_dict()) == ["weight"]
    assert list(nn.BCEWithLogitsLoss(pos_weight=tj.ones(3)).state_dict()) == ["pos_weight"]
    assert list(nn.MSELoss().state_dict()) == []


def test_deepcopy_and_pickle_keep_registrations():
    net = Net()
    x = tj.randn(3, 3)
    for clone in (copy.deepcopy(net), pickle.loads(pickle.dumps(net))):
        assert clone.first.fc.weight is clone.first._modules["fc"]._parameters["weight"]
        assert clone.shared is clone.first.fc                # sharing survives the copy
        assert clone.first.fc.weight is not net.first.fc.weight
        assert [n for n, _ in clone.named_parameters()] == NET_PARAMETERS
        np.testing.assert_array_equal(value(clone(x)), value(net(x)))


# ---- dtype conversion ---------------------------------------------------------------------------

def test_double_and_float_convert_in_place():
    net = Net()
    weight = net.first.fc.weight
    net(tj.randn(2, 3)).sum().backward()
    assert net.double() is net
    assert net.first.fc.weight is weight                    # the same Parameter object, as torch
    assert all(p.dtype == tj.float64 for p in net.parameters())
    assert weight.grad.dtype == tj.float64 and net.first.running.dtype == tj.float64
    out = net(tj.randn(2, 3, dtype=tj.float64))
    assert out.dtype == tj.float64
    net.to(tj.float32)
    assert all(p.dtype == tj.float32 for p in net.parameters())
    assert net.float() is net
    with pytest.raises(TypeError, match="floating point"):
        net.to(tj.int64)


# ---- containers -------------------------------------------------------------------------------

def test_sequential_indexing_slicing_and_growth():
    layers = [nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)]
    seq = nn.Sequential(*layers)
    assert len(seq) == 3 and list(seq) == layers
    assert seq[0] is layers[0] and seq[-1] is layers[2]
    head = seq[:2]
    assert isinstance(head, nn.Sequential) and list(head) == layers[:2]
    assert [n for n, _ in head.named_children()] == ["0", "1"]
    with pytest.raises(IndexError, match="index 3 is out of range"):
        seq[3]
    extra = nn.Tanh()
    assert seq.append(extra) is seq and seq[3] is extra
    del seq[1]
    assert [n for n, _ in seq.named_children()] == ["0", "1", "2"] and seq[1] is layers[2]
    seq[0] = nn.Identity()
    assert isinstance(seq[0], nn.Identity)
    x = tj.randn(4, 3)
    np.testing.assert_array_equal(value(seq(x)), value(extra(layers[2](x))))


def test_sequential_from_ordered_dict():
    seq = nn.Sequential(OrderedDict([("hidden", nn.Linear(2, 4)), ("act", nn.Tanh()), ("out", nn.Linear(4, 1))]))
    assert [n for n, _ in seq.named_parameters()] == ["hidden.weight", "hidden.bias", "out.weight", "out.bias"]
    assert seq.act is seq[1]
    assert tuple(seq(tj.randn(5, 2)).shape) == (5, 1)


def test_module_list():
    blocks = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    assert len(blocks) == 3 and len(list(blocks.parameters())) == 6
    blocks.append(nn.ReLU())
    blocks.extend([nn.Tanh()])
    assert isinstance(blocks[-1], nn.Tanh) and isinstance(blocks[1:3], nn.ModuleList)
    blocks.insert(0, nn.Sigmoid())
    assert isinstance(blocks[0], nn.Sigmoid) and [n for n, _ in blocks.named_children()][-1] == "5"
    del blocks[0]
    assert isinstance(blocks[0], nn.Linear)


# ---- repr ---------------------------------------------------------------------------------------

REPR_MODELS = {
    "mlp": lambda lib: lib.nn.Sequential(lib.nn.Linear(3, 1), lib.nn.ReLU(), lib.nn.Linear(1, 2, bias=False)),
    "layers": lambda lib: lib.nn.Sequential(
        lib.nn.Softplus(), lib.nn.Softplus(beta=2, threshold=10), lib.nn.GELU(), lib.nn.GELU(approximate="tanh"),
        lib.nn.Flatten(), lib.nn.Flatten(0, 2), lib.nn.Dropout(), lib.nn.Dropout(0.1), lib.nn.Embedding(3, 4),
        lib.nn.Embedding(3, 4, padding_idx=0), lib.nn.LayerNorm(4), lib.nn.LayerNorm((2, 3), eps=1e-3,
                                                                                       elementwise_affine=False),
        lib.nn.Identity(), lib.nn.ReLU(inplace=True), lib.nn.Tanh(), lib.nn.Sigmoid()),
    "losses": lambda lib: lib.nn.ModuleList([
        lib.nn.MSELoss(), lib.nn.L1Loss(reduction="sum"), lib.nn.CrossEntropyLoss(label_smoothing=0.1),
        lib.nn.NLLLoss(), lib.nn.BCEWithLogitsLoss()]),
    "repeats": lambda lib: lib.nn.ModuleList([lib.nn.Linear(2, 2), lib.nn.Linear(2, 2), lib.nn.ReLU(),
                                              lib.nn.Sequential(lib.nn.Linear(2, 2), lib.nn.Tanh())]),
    "nested": lambda lib: lib.nn.Sequential(lib.nn.Sequential(lib.nn.Linear(2, 2)), lib.nn.ModuleList()),
}


@pytest.mark.parametrize("name", sorted(REPR_MODELS))
def test_repr_equals_torch(name):
    torch = pytest.importorskip("torch")
    assert repr(REPR_MODELS[name](tj)) == repr(REPR_MODELS[name](torch))


def test_repr_text():
    assert repr(REPR_MODELS["mlp"](tj)) == (
        "Sequential(\n"
        "  (0): Linear(in_features=3, out_features=1, bias=True)\n"
        "  (1): ReLU()\n"
        "  (2): Linear(in_features=1, out_features=2, bias=False)\n"
        ")")
    assert repr(nn.LayerNorm(4)) == "LayerNorm((4,), eps=1e-05, elementwise_affine=True, bias=True)"
    assert repr(nn.ModuleList([nn.Tanh(), nn.Tanh()])) == "ModuleList(\n  (0-1): 2 x Tanh()\n)"

    class Custom(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(1, 1)

        def extra_repr(self):
            return "scale=2"
    assert repr(Custom()) == "Custom(\n  scale=2\n  (body): Linear(in_features=1, out_features=1, bias=True)\n)"


# ---- Linear -----------------------------------------------------------------------------------

def test_linear_default_init_bounds_and_statistics():
    tj.manual_seed(0)
    layer = nn.Linear(400, 300)
    bound = 1 / math.sqrt(400)
    w, b = value(layer.weight), value(layer.bias)
    assert w.shape == (300, 400) and b.shape == (300,)
    assert np.abs(w).max() <= bound and np.abs(b).max() <= bound
    # Uniform(-bound, bound): variance bound^2 / 3, and it fills the range.
    assert abs(w.var() / (bound ** 2 / 3) - 1) < 0.02
    assert np.abs(w).max() > 0.99 * bound and abs(w.mean()) < 0.01 * bound   # 6 standard errors


def test_linear_init_is_reproducible_and_dtype_follows_default():
    tj.manual_seed(5)
    a = value(nn.Linear(3, 2).weight)
    tj.manual_seed(5)
    np.testing.assert_array_equal(value(nn.Linear(3, 2).weight), a)
    assert nn.Linear(3, 2, dtype=tj.float64).weight.dtype == tj.float64
    previous = tj.get_default_dtype()
    tj.set_default_dtype(tj.float64)
    try:
        layer = nn.Linear(3, 2)
        assert layer.weight.dtype == tj.float64 and layer.bias.dtype == tj.float64
    finally:
        tj.set_default_dtype(previous)
    assert nn.Linear(3, 2, bias=False).bias is None
    assert [n for n, _ in nn.Linear(3, 2, bias=False).named_parameters()] == ["weight"]


# ---- init -----------------------------------------------------------------------------------

def test_init_functions_write_in_place_without_recording():
    w = nn.Parameter(tj.empty(200, 100))
    for fn, args in [(nn.init.uniform_, (-0.5, 0.5)), (nn.init.normal_, (1.0, 2.0)), (nn.init.zeros_, ()),
                     (nn.init.ones_, ()), (nn.init.constant_, (0.25,)), (nn.init.xavier_uniform_, ()),
                     (nn.init.xavier_normal_, ()), (nn.init.kaiming_uniform_, ()), (nn.init.kaiming_normal_, ())]:
        assert fn(w, *args) is w
        assert w.is_leaf and w.requires_grad and w.grad_fn is None
    vals = {}
    for name, fn, args in [("uniform", nn.init.uniform_, (-0.5, 0.5)), ("normal", nn.init.normal_, (1.0, 2.0)),
                           ("constant", nn.init.constant_, (0.25,))]:
        vals[name] = value(fn(w, *args)).copy()
    assert vals["uniform"].min() >= -0.5 and vals["uniform"].max() <= 0.5
    assert abs(vals["uniform"].var() - 1 / 12) < 0.003
    assert abs(vals["normal"].mean() - 1.0) < 0.03 and abs(vals["normal"].std() - 2.0) < 0.03
    assert (vals["constant"] == 0.25).all()


def test_xavier_and_kaiming_statistics():
    w = tj.empty(300, 200)
    fan_in, fan_out = 200, 300
    bound = math.sqrt(6 / (fan_in + fan_out))
    x = value(nn.init.xavier_uniform_(w, gain=2.0))
    assert np.abs(x).max() <= 2 * bound and np.abs(x).max() > 0.99 * 2 * bound
    assert abs(value(nn.init.xavier_normal_(w)).std() - math.sqrt(2 / (fan_in + fan_out))) < 0.002
    k = value(nn.init.kaiming_uniform_(w, nonlinearity="relu"))
    assert np.abs(k).max() <= math.sqrt(6 / fan_in)
    assert abs(value(nn.init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu")).std()
               - math.sqrt(2 / fan_out)) < 0.002


def test_init_is_reproducible_under_manual_seed():
    w = tj.empty(4, 5)
    tj.manual_seed(11)
    a = value(nn.init.kaiming_uniform_(w)).copy()
    tj.manual_seed(11)
    np.testing.assert_array_equal(value(nn.init.kaiming_uniform_(w)), a)


def test_calculate_gain():
    assert nn.init.calculate_gain("linear") == 1 and nn.init.calculate_gain("sigmoid") == 1
    assert nn.init.calculate_gain("tanh") == pytest.approx(5 / 3)
    assert nn.init.calculate_gain("relu") == pytest.approx(math.sqrt(2))
    assert nn.init.calculate_gain("leaky_relu", 0.2) == pytest.approx(math.sqrt(2 / 1.04))
    assert nn.init.calculate_gain("selu") == pytest.approx(0.75)
    with pytest.raises(ValueError, match="Unsupported nonlinearity foo"):
        nn.init.calculate_gain("foo")


def test_calculate_gain_matches_torch():
    torch = pytest.importorskip("torch")
    for args in [("linear",), ("tanh",), ("relu",), ("leaky_relu",), ("leaky_relu", 0.3), ("selu",), ("conv2d",)]:
        assert nn.init.calculate_gain(*args) == pytest.approx(torch.nn.init.calculate_gain(*args))


def test_init_errors():
    with pytest.raises(ValueError, match="Fan in and fan out can not be computed"):
        nn.init.kaiming_uniform_(tj.ones(3))
    with pytest.raises(ValueError, match=r"Mode fan_x not supported, please use one of \['fan_in', 'fan_out'\]"):
        nn.init.kaiming_uniform_(tj.ones(3, 3), mode="fan_x")
    with pytest.warns(UserWarning, match="Initializing zero-element tensors is a no-op"):
        nn.init.kaiming_uniform_(tj.empty(0, 3))


# ---- a training script written against torch's names --------------------------------------------

def test_torch_style_training_script_runs_and_learns():
    torch = tj                                               # as in `import tapejit as torch`

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(2, 16), torch.nn.Tanh(), torch.nn.Linear(16, 16),
                                           torch.nn.Tanh(), torch.nn.Linear(16, 1))

        def forward(self, x):
            return self.net(x)

    torch.manual_seed(0)
    model = MLP()
    x = torch.rand(32, 2) * 2 - 1
    y = (x[:, :1] * x[:, 1:]).detach()
    loss_fn = torch.nn.MSELoss()
    losses = []
    for _ in range(200):
        model.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.2 * p.grad
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
