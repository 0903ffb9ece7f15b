"""Compatibility shims older and everyday PyTorch scripts meet (issue 17): Variable, CUDA
devices on a CPU-only build, tensor() of any sequence, legacy type strings, constants, the
in-place shape and random methods, torch's in-place function forms, and the profiler."""
import array
import collections
import json
import warnings

import numpy as np
import pytest

import tapejit as tj
from tapejit import registry


def _outcome(lib, source):
    """What ``source`` (with ``L`` the library) gives: ("value", list, dtype name, shape) or
    ("raise", exception type name, message)."""
    env = {"L": lib, "np": np, "collections": collections, "array": array}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = eval(source, env)
    except Exception as e:  # noqa: BLE001 - the exception is what is compared
        return ("raise", type(e).__name__, str(e))
    if hasattr(r, "tolist") and hasattr(r, "dtype"):
        return ("value", r.tolist(), str(r.dtype).split(".")[-1], list(r.shape))
    return ("value", repr(r).replace("tapejit.", "torch."))


def _same_as_torch(source, message=True):
    """``message``: True, the same message; "suffix": tapejit's ends with torch's (tapejit
    names the op first); False, the exception type only."""
    torch = pytest.importorskip("torch")
    mine, theirs = _outcome(tj, source), _outcome(torch, source)
    if message is not True and mine[0] == theirs[0] == "raise":
        if message == "suffix":
            assert mine[2].endswith(theirs[2]), (mine, theirs)
        mine, theirs = mine[:2], theirs[:2]
    assert mine == theirs, source
    return mine


# ---- Variable and torch.cuda ----------------------------------------------------------------

def test_variable_returns_a_tensor_as_modern_torch():
    torch = pytest.importorskip("torch")
    for lib in (tj, torch):
        t = lib.zeros(2)
        v = lib.autograd.Variable(t, requires_grad=True)
        assert type(v) is lib.Tensor and v is not t and v.requires_grad and v.is_leaf
        assert not t.requires_grad and isinstance(t, lib.autograd.Variable)
        with lib.no_grad():
            v[0] = 5.0                      # torch: Variable(t) is t.detach(), sharing memory
        assert t.tolist() == [5.0, 0.0]
        assert not lib.autograd.Variable(t).requires_grad
        x = lib.ones(2, requires_grad=True) * 2
        assert lib.autograd.Variable(x).grad_fn is None            # detached
        assert lib.autograd.Variable(x, True).is_leaf
        assert lib.autograd.Variable().tolist() == []
        with pytest.warns(UserWarning, match="volatile was removed and now has no effect"):
            lib.autograd.Variable(t, volatile=True)


@pytest.mark.parametrize("source", ["L.autograd.Variable([1.0])", "L.autograd.Variable(3.0)"])
def test_variable_of_a_non_tensor_is_torchs_type_error(source):
    _same_as_torch(source)


def test_variable_of_an_integer_tensor_cannot_require_grad():
    _same_as_torch("L.autograd.Variable(L.zeros(2, dtype=L.int64), requires_grad=True)", message=False)


def test_cuda_reports_no_device():
    torch = pytest.importorskip("torch")
    assert tj.cuda.is_available() is torch.cuda.is_available() is False
    assert tj.cuda.device_count() == torch.cuda.device_count() == 0


@pytest.mark.parametrize("source", [
    "L.cuda.empty_cache()", "L.cuda.is_initialized()", "L.cuda.memory_allocated()", "L.cuda.seed()",
    "L.cuda.manual_seed(0)", "L.cuda.manual_seed_all(0)", "L.cuda.current_device()", "L.cuda.synchronize()",
    "L.cuda.get_device_name()", "L.backends.cudnn.benchmark", "L.backends.cudnn.deterministic",
    "L.backends.cudnn.enabled", "L.backends.cudnn.is_available()", "L.backends.cudnn.version()",
    "L.backends.mps.is_available()", "L.backends.mps.is_built()", "L.backends.cuda.is_built()",
])
def test_cuda_and_backends_as_a_cpu_only_build(source):
    _same_as_torch(source)


def test_backend_flags_can_be_set():
    before = tj.backends.cudnn.benchmark
    try:
        tj.backends.cudnn.benchmark = True   # common in training scripts
        assert tj.backends.cudnn.benchmark is True
    finally:
        tj.backends.cudnn.benchmark = before


# ---- devices ----------------------------------------------------------------------------------

@pytest.mark.parametrize("source", [
    "L.device('cuda')", "L.device('cuda:0')", "L.device('cuda:1')", "L.device('cuda', 1)",
    "L.device(type='cuda', index=2)", "L.device('cpu:0')", "L.device('mps')", "L.device('xpu')",
    "L.device('meta')", "str(L.device('cuda:3'))", "(L.device('cuda:1').type, L.device('cuda:1').index)",
    "L.device('cuda') == L.device('cuda:0')", "L.device('cuda:0') == L.device('cuda:0')",
    "L.device('cuda:0') == L.device('cpu')", "L.device(L.device('cuda:1'))",
    "len({L.device('cuda:0'), L.device('cuda:0'), L.device('cuda:1')})",
    # malformed: torch's RuntimeErrors
    "L.device('cuda:-1')", "L.device('cuda:x')", "L.device('CUDA')", "L.device(' cuda')",
    "L.device('cuda:01')", "L.device('cuda:0:1')", "L.device('cuda:0', 1)", "L.device('cuda', -1)",
    "L.device(-1)", "L.device(0)",
])
def test_a_device_is_constructed_as_on_a_cpu_only_torch_build(source):
    _same_as_torch(source)


@pytest.mark.parametrize("source", [
    "L.zeros(2).to('cuda')", "L.zeros(2).to('cuda:0')", "L.zeros(2).to(L.device('cuda'))",
    "L.zeros(2).to('cuda', L.float64)", "L.zeros(2).to(device='cuda')", "L.zeros(2).cuda()",
    "L.zeros(2).cuda(0)", "L.zeros(2).cuda('cpu')", "L.zeros(2).to(0)", "L.zeros(2).to('xpu')",
    "L.zeros(2).to('mps')", "L.zeros(2).to('cuda:x')",
    "L.zeros(2, device='cuda')", "L.tensor([1.0], device='cuda:0')", "L.tensor(1.0, device=L.device('cuda'))",
    "L.randn(2, device='cuda')", "L.arange(3, device='cuda')", "L.ones(2, device='cuda')",
    "L.full((2,), 1.0, device='cuda')", "L.eye(2, device='cuda')", "L.zeros(2, device=0)",
    "L.zeros(1).new_zeros(2, device='cuda')", "L.randn_like(L.zeros(2), device='cuda')",
    "L.nn.Linear(2, 2).cuda()", "L.nn.Linear(2, 2).cuda(0)", "L.nn.Linear(2, 2).to('cuda')",
    "L.nn.Linear(2, 2).to(L.device('cuda:0'))", "L.nn.Linear(2, 2).to('cuda', L.float64)",
    "L.nn.Linear(2, 2).to(0)", "L.nn.Linear(2, 2).to('mps')",
])
def test_data_on_an_accelerator_raises_torchs_cpu_build_error(source):
    outcome = _same_as_torch(source)
    assert outcome[0] == "raise"


def test_meta_tensors_are_refused():
    # torch makes shape-only tensors on the meta device; tapejit has none, and says so
    for call in (lambda: tj.zeros(2, device="meta"), lambda: tj.zeros(2).to("meta"),
                 lambda: tj.nn.Linear(2, 2).to("meta")):
        with pytest.raises(NotImplementedError, match="tapejit has no meta tensors"):
            call()


def test_a_module_without_tensors_moves_to_cuda_as_torch():
    # torch: nothing to move, so no error
    assert _same_as_torch("L.nn.ReLU().cuda()") == _same_as_torch("L.nn.ReLU().to('cuda')")


def test_modules_still_move_to_the_cpu_and_convert_dtypes():
    torch = pytest.importorskip("torch")
    weights = {"weight": np.arange(4.0).reshape(2, 2), "bias": np.array([0.5, -0.5])}
    results = []
    for lib in (tj, torch):
        m = lib.nn.Linear(2, 2)
        m.load_state_dict({k: lib.tensor(v, dtype=lib.float32) for k, v in weights.items()})
        assert m.cpu() is m and m.to("cpu") is m and m.to(lib.device("cpu")) is m
        assert m.to(lib.float64) is m and m.weight.dtype == lib.float64
        out = m(lib.ones(1, 2, dtype=lib.float64))
        results.append((out.tolist(), str(m.bias.dtype).split(".")[-1]))
    assert results[0] == results[1]


# ---- tensor() of any sequence -----------------------------------------------------------------

@pytest.mark.parametrize("source", [
    "L.tensor(range(3))", "L.tensor(range(0))", "L.tensor(collections.deque([1, 2]))",
    "L.tensor(collections.deque([1.5, 2]))", "L.tensor([collections.deque([1, 2]), collections.deque([3, 4])])",
    "L.tensor([range(2), range(2)])", "L.tensor(array.array('d', [1, 2]))", "L.tensor(array.array('i', [1, 2]))",
    "L.tensor(bytearray(b'ab'))", "L.tensor(memoryview(b'ab'))", "L.tensor([(1, 2), [3, 4]])",
    "L.as_tensor(collections.deque([1.0]))", "L.as_tensor(range(3))", "L.FloatTensor(range(3))",
    "L.tensor(collections.deque([1, 2]), dtype=L.float64)",
    # a list of one-element tensors: their values, in their promoted dtype
    "L.tensor([L.tensor(1.0), L.tensor(2.0)])", "L.tensor([L.tensor([1.0]), L.tensor([2.0])])",
    "L.tensor([L.tensor([[1.0]]), L.tensor([[2.0]])])", "L.tensor([L.tensor(1), L.tensor(2)])",
    "L.tensor([L.tensor(1.5), 2])", "L.tensor([L.tensor(1), 2.5])",
    "L.tensor([L.tensor(1.0, dtype=L.float64)])", "L.as_tensor([L.tensor(1.0), L.tensor(2.0)])",
    "L.tensor([[L.tensor(1.0), 2.0]])", "L.tensor(collections.deque([L.tensor(1.0), L.tensor(2.0)]))",
    # refused as torch refuses them
    "L.tensor(x for x in [1, 2])", "L.tensor(map(float, [1, 2]))", "L.tensor({1, 2})", "L.tensor({1: 2})",
    "L.tensor(zip([1], [2]))", "L.tensor({1: 2}.keys())", "L.tensor(frozenset([1]))", "L.tensor(None)",
    "L.tensor([L.tensor([1.0, 3.0]), L.tensor([2.0, 4.0])])", "L.tensor([[1, 2], collections.deque([3])])",
    "L.tensor([L.tensor([1.0, 2.0]), [3.0, 4.0]])",
])
def test_tensor_reads_what_torch_reads(source):
    _same_as_torch(source)


def test_tensor_of_a_sequence_class():
    torch = pytest.importorskip("torch")

    class Pair:   # a sequence by __len__ and __getitem__, as torch reads one
        def __len__(self):
            return 2

        def __getitem__(self, i):
            if i >= 2:
                raise IndexError(i)
            return float(i) + 0.5

    class OnlyIterable:
        def __iter__(self):
            return iter([1, 2])

    assert tj.tensor(Pair()).tolist() == torch.tensor(Pair()).tolist() == [0.5, 1.5]
    assert tj.tensor([Pair(), Pair()]).shape == (2, 2)
    for lib in (tj, torch):
        with pytest.raises(RuntimeError, match="Could not infer dtype of .*OnlyIterable"):
            lib.tensor(OnlyIterable())


# ---- legacy type strings ----------------------------------------------------------------------

@pytest.mark.parametrize("source", [
    "L.zeros(1).type()", "L.zeros(1, dtype=L.float64).type()", "L.zeros(1, dtype=L.int64).type()",
    "L.zeros(1, dtype=L.bool).type()", "L.tensor([1.5, 2.0]).type('torch.DoubleTensor')",
    "L.tensor([1.5, 2.0]).type('torch.LongTensor')", "L.tensor([1.5, 0.0]).type('torch.BoolTensor')",
    "L.tensor([1, 2]).type('torch.FloatTensor')", "L.tensor([1.5]).type(L.float64)",
    "L.tensor([1.5]).type(L.DoubleTensor)", "L.tensor([1.5]).type(L.LongTensor)",
    "L.tensor([1.5]).type(dtype=L.float64)", "L.tensor([1.5]).type(L.float64, non_blocking=True)",
    "L.tensor([1.5]).type('torch.Foo')", "L.tensor([1.5]).type('float')", "L.tensor([1.5]).type(float)",
    "L.tensor([1.5]).type(int)", "L.tensor([1.5]).type(3)",
    "L.tensor([1.5, 2.0]).type_as(L.zeros(1, dtype=L.int64))", "L.tensor([1, 2]).type_as(L.zeros(1))",
    "L.tensor([1.5]).type_as(3)",
])
def test_type_strings_and_conversions_as_torch(source):
    _same_as_torch(source)


def test_type_keeps_the_tensor_when_the_type_is_the_same_and_the_gradient_flows():
    torch = pytest.importorskip("torch")
    for lib in (tj, torch):
        x = lib.tensor([1.5, 2.0], requires_grad=True)
        assert x.type("torch.FloatTensor") is x and x.type(lib.float32) is x and x.type_as(x) is x
        y = x.type("torch.DoubleTensor")
        assert y.dtype == lib.float64 and y.grad_fn is not None
        (y * y).sum().backward()
        assert x.grad.tolist() == [3.0, 4.0] and x.grad.dtype == lib.float32


def test_type_of_a_cuda_type_is_refused():
    with pytest.raises(RuntimeError, match="Cannot initialize CUDA without ATen_cuda library"):
        tj.zeros(1).type("torch.cuda.FloatTensor")


# ---- constants --------------------------------------------------------------------------------

def test_constants_are_torchs():
    torch = pytest.importorskip("torch")
    for name in ("pi", "e", "inf"):
        assert getattr(tj, name) == getattr(torch, name) and type(getattr(tj, name)) is float
    assert np.isnan(tj.nan) and type(tj.nan) is float


# ---- in-place shape ops -----------------------------------------------------------------------

@pytest.mark.parametrize("source", [
    "(lambda x: (x.unsqueeze_(0) is x, x))(L.tensor([1.0, 2.0]))",
    "(lambda x: (x.unsqueeze_(-1), x.shape))(L.tensor([1.0, 2.0]))",
    "L.zeros(1, 2, 1).squeeze_()", "L.zeros(1, 2, 1).squeeze_(2)",
    "L.zeros(1, 2, 1).squeeze_(0).shape", "L.arange(6.0).reshape(2, 3).t_()", "L.arange(3.0).t_()",
    "L.zeros(2, 2, 2).t_()", "L.arange(6.0).reshape(2, 3).transpose_(0, 1)",
    "L.arange(24.0).reshape(2, 3, 4).transpose_(-1, 0)", "L.arange(6.0).reshape(2, 3).swapdims_(0, 1)",
    "L.arange(6.0).reshape(2, 3).swapaxes_(1, 0)",
    "L.zeros(2, requires_grad=True).unsqueeze_(0)", "L.zeros(2, 3, requires_grad=True).t_()",
    "(lambda x: (x.t_(), (x * 1).tolist()))(L.arange(6.0).reshape(2, 3))",
    "(lambda x: (x.unsqueeze_(1), x + L.tensor([[1.0, 2.0]])))(L.tensor([1.0, 2.0]))",
])
def test_in_place_shape_ops_as_torch(source):
    _same_as_torch(source)


@pytest.mark.parametrize("source", ["L.tensor([1.0, 2.0]).unsqueeze_(3)",
                                    "L.arange(6.0).reshape(2, 3).transpose_(0, 2)"])
def test_in_place_shape_op_dimension_errors_as_torch(source):
    _same_as_torch(source, message="suffix")


def test_in_place_shape_op_on_a_recorded_tensor_keeps_its_gradient():
    torch = pytest.importorskip("torch")
    grads = []
    for lib in (tj, torch):
        a = lib.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], requires_grad=True)
        x = (a * 2).reshape(2, 3)
        x.t_()
        x.unsqueeze_(0)
        assert x.shape == (1, 3, 2) and x.grad_fn is not None and not x.is_leaf
        (x * lib.arange(6.0).reshape(1, 3, 2)).sum().backward()
        grads.append(a.grad.tolist())
    assert grads[0] == grads[1]


def test_in_place_shape_op_bumps_the_version_as_torch():
    torch = pytest.importorskip("torch")
    for lib in (tj, torch):
        a = lib.tensor([1.0, 2.0], requires_grad=True)
        x = a * 2
        y = x.sin()          # saves x
        x.unsqueeze_(0)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()
        with lib.no_grad():
            leaf = lib.zeros(2, requires_grad=True)
            leaf.unsqueeze_(0)   # allowed without grad mode, as torch
        assert leaf.shape == (1, 2)


def test_in_place_transpose_of_a_view_still_writes_its_base():
    torch = pytest.importorskip("torch")
    results = []
    for lib in (tj, torch):
        a = lib.arange(6.0, requires_grad=True)
        base = a * 1
        w = base.view(2, 3)
        w.t_()
        w[0, 1] = 100.0        # element (1, 0) of the 2x3 view: base[3]
        w.unsqueeze_(0)
        w[0, 2, 0] = -1.0      # element (0, 2) of the 2x3 view: base[2]
        (base * lib.arange(6.0)).sum().backward()
        plain = lib.arange(6.0)
        pv = plain.view(2, 3)
        pv.t_()
        pv[0, 1] = 100.0
        results.append((base.tolist(), w.tolist(), a.grad.tolist(), plain.tolist()))
    assert results[0] == results[1]


def test_in_place_shape_op_of_a_tensor_sharing_its_memory_is_refused():
    # torch changes the sizes and strides of one tensor and its aliases keep theirs; tapejit's
    # aliases follow the value in its old shape, so it refuses rather than mix up elements
    for make in (lambda: tj.zeros(2, 3), lambda: tj.ones(2, 3, requires_grad=True) * 1):
        x = make()
        alias = x.detach()
        with pytest.raises(RuntimeError, match=r"t_: tapejit cannot change the shape in place of a tensor "
                                               r"that shares its memory"):
            x.t_()
        with pytest.raises(RuntimeError, match="unsqueeze_: tapejit cannot change the shape in place"):
            alias.unsqueeze_(0)
        del alias
        assert x.t_().shape == (3, 2)     # no alias left


# ---- random fills -----------------------------------------------------------------------------

def test_normal_and_uniform_methods():
    tj.manual_seed(0)
    u = tj.zeros(20000).uniform_(2.0, 3.0)
    assert 2.0 <= u.min().item() and u.max().item() < 3.0 and abs(u.mean().item() - 2.5) < 0.01
    n = tj.zeros(20000, dtype=tj.float64).normal_(1.0, 2.0)
    assert n.dtype == tj.float64 and abs(n.mean().item() - 1.0) < 0.05 and abs(n.std().item() - 2.0) < 0.05
    assert tj.zeros(3).normal_(mean=1.0, std=0.0).tolist() == [1.0, 1.0, 1.0]
    x = tj.zeros(3)
    assert x.uniform_() is x and x.normal_() is x
    tj.manual_seed(7)
    first = tj.zeros(4).normal_().tolist()
    tj.manual_seed(7)
    assert tj.zeros(4).normal_().tolist() == first


@pytest.mark.parametrize("source", [
    "L.zeros(2, dtype=L.int64).normal_()", "L.zeros(2, dtype=L.int64).uniform_()",
    "L.zeros(2).uniform_(1, 0)", "L.zeros(2).normal_(0, -1)", "L.zeros(2, requires_grad=True).normal_()",
    "L.zeros(2, requires_grad=True).uniform_()",
])
def test_random_fill_errors_as_torch(source):
    _same_as_torch(source)


def test_random_fill_of_a_recorded_tensor_has_a_zero_gradient_as_torch():
    torch = pytest.importorskip("torch")
    for lib in (tj, torch):
        a = lib.ones(3, requires_grad=True)
        x = a * 2
        x.uniform_(0.0, 1.0)
        assert x.requires_grad
        (x.sum() + a.sum()).backward()
        assert a.grad.tolist() == [1.0, 1.0, 1.0]


# ---- in-place function forms ------------------------------------------------------------------

@pytest.mark.parametrize("name", [op.names.in_place_names()[0] for op in registry.OPS
                                  if op.module == "tapejit.ops.unary" and op.names
                                  and op.names.in_place == "function" and not op.names.written])
def test_in_place_function_forms_as_torch(name):
    torch = pytest.importorskip("torch")
    values = [0.25, 0.5, 2.0]
    mine, theirs = tj.tensor(values), torch.tensor(values)
    assert getattr(tj, name)(mine) is mine and getattr(torch, name)(theirs) is theirs
    np.testing.assert_allclose(mine.tolist(), theirs.tolist(), rtol=1e-6)


@pytest.mark.parametrize("source", [
    "L.fill_(L.zeros(2), 3)", "L.zero_(L.ones(2))", "L.clamp_min_(L.tensor([-1.0, 2.0]), 0)",
    "L.clamp_max_(L.tensor([-1.0, 2.0]), 0)", "L.sin_(L.tensor([1]))", "L.sin_(1.0)",
    "L.relu_(L.tensor([-1.0, 2.0], requires_grad=True))",
])
def test_in_place_function_form_results_and_errors_as_torch(source):
    _same_as_torch(source)


# ---- profiler ---------------------------------------------------------------------------------

def _train_step(lib):
    lib.manual_seed(0)
    model = lib.nn.Sequential(lib.nn.Linear(4, 8), lib.nn.ReLU(), lib.nn.Linear(8, 1))
    opt = lib.optim.SGD(model.parameters(), lr=0.1)
    x = lib.randn(16, 4)
    with lib.autograd.profiler.record_function("forward"):
        loss = (model(x) - 1.0).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss


def test_profiler_counts_and_times_each_op():
    _train_step(tj)   # compiled before timing
    with tj.autograd.profiler.profile() as prof:
        _train_step(tj)
    averages = {e.key: e for e in prof.key_averages()}
    for name, count in [("linear", 2), ("relu", 1), ("sub", 1), ("pow", 1), ("mean", 1), ("backward", 1),
                        ("forward", 1), ("randn", 1), ("Optimizer.step#SGD.step", 1),
                        ("Optimizer.zero_grad#SGD.zero_grad", 1)]:
        assert averages[name].count == count, name
    for e in averages.values():
        assert 0 <= e.self_cpu_time_total <= e.cpu_time_total + 1e-9
        assert e.cpu_time == pytest.approx(e.cpu_time_total / e.count)
    # the record_function block contains the forward ops: its total time covers theirs
    forward = next(e for e in prof.function_events if e.name == "forward")
    assert {c.name for c in forward.cpu_children} >= {"linear", "relu", "sub", "pow", "mean"}
    assert forward.cpu_time_total >= sum(c.cpu_time_total for c in forward.cpu_children)
    assert forward.self_cpu_time_total == pytest.approx(
        forward.cpu_time_total - sum(c.cpu_time_total for c in forward.cpu_children), abs=1e-3)
    assert prof.self_cpu_time_total == pytest.approx(sum(e.self_cpu_time_total for e in prof.function_events))


def test_profiler_table_has_torchs_layout():
    torch = pytest.importorskip("torch")
    tables = []
    for lib in (tj, torch):
        with lib.autograd.profiler.profile() as prof:
            _train_step(lib)
        tables.append(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=5).splitlines())
    mine, theirs = tables
    assert mine[1].split() == theirs[1].split()                       # the column titles
    assert [len(c) for c in mine[0].split()[1:]] == [len(c) for c in theirs[0].split()[1:]]
    assert len(mine) == len(theirs) == 3 + 5 + 2 and mine[-1].startswith("Self CPU time total: ")
    rows = [line.split() for line in mine[3:8]]
    selfs = [float(r[-6][:-1]) for r in rows]     # Self CPU %, sorted in decreasing order
    assert selfs == sorted(selfs, reverse=True)
    assert all(len(line) == len(mine[0]) for line in mine[:9])


def test_profiler_input_shapes():
    torch = pytest.importorskip("torch")
    for lib in (tj, torch):
        with lib.autograd.profiler.profile(record_shapes=True) as prof:
            lib.relu(lib.zeros(2, 3))
            lib.relu(lib.zeros(4))
            lib.relu(lib.zeros(4))
        shapes = {str(e.input_shapes): e.count
                  for e in prof.key_averages(group_by_input_shape=True) if e.key.endswith("relu")}
        assert shapes == {"[[2, 3]]": 1, "[[4]]": 2}
        assert "Input Shapes" in prof.key_averages(group_by_input_shape=True).table()


def test_profiler_costs_nothing_when_off_and_restores_everything():
    before = (tj.Tensor.__add__, tj.Tensor.__dict__["relu"], tj.relu, tj.nn.functional.linear,
              tj.nn.layers.linear, tj.optim.SGD.step)
    with tj.autograd.profiler.profile():
        assert tj.Tensor.__add__ is not before[0] and tj.nn.layers.linear is not before[4]
        with pytest.raises(ValueError):
            with tj.autograd.profiler.profile():
                raise ValueError("inside")
        assert tj.relu is not before[2]   # the outer profiler still runs
    after = (tj.Tensor.__add__, tj.Tensor.__dict__["relu"], tj.relu, tj.nn.functional.linear,
             tj.nn.layers.linear, tj.optim.SGD.step)
    assert all(a is b for a, b in zip(after, before))
    # record_function without a profiler records nothing and costs one check
    with tj.autograd.profiler.record_function("idle"):
        assert (tj.ones(1) + 1).item() == 2.0


def test_profiler_times_ops_called_through_front_ends():
    """Modules below the facade call ``tj.<name>`` through ``api.front_ends`` (they do not
    import the facade): a profile times those calls too, as torch's lists the ops its
    Python functions run (torch: parameters_to_vector's aten::cat), and puts them back."""
    from tapejit.api import front_ends
    before = front_ends.cat
    p = tj.ones(2, requires_grad=True)
    with tj.autograd.profiler.profile() as prof:
        tj.nn.utils.parameters_to_vector([p, p])
        tj.value_and_grad(lambda x: np.maximum(x, 0.5).sum())(np.ones(2))
    assert {"cat", "maximum"} <= {e.name for e in prof.function_events}
    assert front_ends.cat is before


def test_profiler_disabled_before_running_and_as_a_decorator():
    with tj.autograd.profiler.profile(enabled=False) as off:
        tj.zeros(1) + 1
    assert len(off.key_averages()) == 0
    assert len(tj.autograd.profiler.profile().key_averages()) == 0   # torch: empty before running

    @tj.autograd.profiler.record_function("step")
    def step():
        return tj.exp(tj.zeros(2))

    with tj.autograd.profiler.profile() as prof:
        step()
        step()
    averages = {e.key: e.count for e in prof.key_averages()}
    assert averages["step"] == 2 and averages["exp"] == 2 and averages["zeros"] == 2


def test_profiler_refuses_cuda_and_exports_a_chrome_trace(tmp_path):
    with pytest.raises(AssertionError, match="Torch not compiled with CUDA enabled"):
        tj.autograd.profiler.profile(use_cuda=True)
    with tj.autograd.profiler.profile() as prof:
        tj.ones(2).sum()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    names = [e["name"] for e in json.loads(path.read_text())["traceEvents"]]
    assert names == ["ones", "sum"]


def test_torch_profiler_api():
    from tapejit.profiler import ProfilerActivity, profile, record_function
    ready = []
    with pytest.warns(UserWarning, match="CUDA is not available, disabling CUDA profiling"):
        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True,
                       on_trace_ready=ready.append)
    with prof:
        with record_function("model_inference"):
            tj.relu(tj.ones(3))
        prof.step()
    assert ready == [prof]
    assert {e.key: e.count for e in prof.key_averages()} == {"model_inference": 1, "ones": 1, "relu": 1}
    with pytest.raises(NotImplementedError, match="schedule= is not supported"):
        profile(schedule=lambda step: None)


def test_multinomial_draws_and_errors_as_torch():
    """torch.multinomial: int64 indices per row, with or without replacement, repeatable
    with tj.manual_seed (tapejit's generator: torch's draws differ), and torch's errors."""
    torch = pytest.importorskip("torch")
    tj.manual_seed(0)
    draws = tj.multinomial(tj.tensor([1.0, 3.0]), 4000, replacement=True)
    assert draws.dtype == tj.int64 and draws.shape == (4000,)
    assert abs(draws.double().mean().item() - 0.75) < 0.03
    tj.manual_seed(0)
    assert tj.equal(draws, tj.tensor([1.0, 3.0]).multinomial(4000, True))
    rows = tj.multinomial(tj.tensor([[0.0, 2.0, 1.0], [5.0, 0.0, 1.0]]), 2)
    assert sorted(rows[0].tolist()) == [1, 2] and sorted(rows[1].tolist()) == [0, 2]   # without replacement
    for args in [(lambda m: m.tensor([0.2, 0.8]), 3), (lambda m: m.tensor([-0.1, 0.8]), 1),
                 (lambda m: m.zeros(2), 1), (lambda m: m.ones(2, 2, 2), 1), (lambda m: m.ones(2), 0)]:
        with pytest.raises(RuntimeError) as theirs:
            torch.multinomial(args[0](torch), args[1])
        with pytest.raises(RuntimeError) as ours:
            tj.multinomial(args[0](tj), args[1])
        assert str(ours.value) == str(theirs.value)


def test_normal_bernoulli_and_random_fills_as_torch():
    """torch.normal's overloads, torch.bernoulli, Tensor.bernoulli_/exponential_: shapes,
    dtypes, zero gradients to the parameters (torch's), sample moments and torch's errors."""
    torch = pytest.importorskip("torch")
    tj.manual_seed(0)
    assert tj.normal(tj.zeros(2, 1), tj.ones(3)).shape == (2, 3)
    assert tj.normal(2.0, 3.0, (4, 5)).shape == (4, 5)
    assert abs(tj.normal(2.0, 3.0, size=(20000,)).std().item() - 3.0) < 0.1
    mean = tj.zeros(3, requires_grad=True)
    tj.normal(mean, 1.0).sum().backward()
    assert mean.grad.tolist() == [0.0, 0.0, 0.0]
    assert abs(tj.bernoulli(tj.full((20000,), 0.3)).mean().item() - 0.3) < 0.02
    assert abs(tj.zeros(20000).bernoulli_(0.7).mean().item() - 0.7) < 0.02
    assert abs(tj.zeros(20000, dtype=tj.float64).exponential_(2.0).mean().item() - 0.5) < 0.02
    assert tj.zeros(3).bernoulli_(tj.tensor([0.0, 1.0, 1.0])).tolist() == [0.0, 1.0, 1.0]
    for call in [lambda m: m.normal(m.zeros(2), -1.0), lambda m: m.normal(0.0, -1.0, (2,)),
                 lambda m: m.normal(m.zeros(2), m.tensor([1.0, -1.0])), lambda m: m.bernoulli(m.tensor([1.5])),
                 lambda m: m.ones(2).bernoulli_(1.5), lambda m: m.ones(2).exponential_(-1.0)]:
        with pytest.raises(RuntimeError) as theirs:
            call(torch)
        with pytest.raises(RuntimeError) as ours:
            call(tj)
        assert str(ours.value) == str(theirs.value)
