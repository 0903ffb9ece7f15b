"""The registry is the one op table: every name an op's ``define_*`` line declares exists
(``tj.<name>``, ``Tensor.<name>``, in place, ``tj.special``, NumPy's ufunc, the type stub),
runs that op, and no elementwise op is left without a way in."""
import numpy as np
import pytest

import tapejit as tj
from tapejit import _stub, numpy_interop, registry

NAMED = [op for op in registry.OPS if op.names is not None]

# Elementwise ops that have no names of their own, and the front end each is reached by;
# a new elementwise op must get names(...) in its define_ line or a line here.
REACHED_OTHERWISE = {
    "add_scalar": "x + 1.5", "sub_scalar": "x - 1.5", "mul_scalar": "x * 2", "div_scalar": "x / 2",
    "rsub_scalar": "2 - x", "rdiv_scalar": "2 / x", "pow_scalar": "x ** 3", "rpow_scalar": "2 ** x",
    "remainder_scalar": "x % 2", "fmod_scalar": "tj.fmod(x, 2)", "fill": "x.fill_(0)", "copy": "x.copy_(y)",
    "clamp_min_tensor": "tj.clamp(x, min=y)", "clamp_max_tensor": "tj.clamp(x, max=y)",
    "round_decimals": "tj.round(x, decimals=1)", "lerp_tensor": "tj.lerp(x, y, w)",
    "softplus": "tj.nn.functional.softplus", "gelu": "tj.nn.functional.gelu",
    "gelu_tanh": "tj.nn.functional.gelu(x, approximate='tanh')", "leaky_relu": "tj.nn.functional.leaky_relu",
    "binary_cross_entropy": "tj.nn.functional.binary_cross_entropy",
}


def test_every_elementwise_op_has_names_or_a_known_front_end():
    unnamed = {op.name for op in registry.OPS if op.kind in ("unary", "binary") and op.names is None}
    assert unnamed == set(REACHED_OTHERWISE), "give these names(...) in their define_ line: " \
                                              f"{sorted(unnamed - set(REACHED_OTHERWISE))}"


@pytest.mark.parametrize("op", NAMED, ids=lambda op: op.name)
def test_declared_names_exist(op):
    names = op.names
    assert op.samples is not None, f"{op.name}: no samples, so the gradient tests never run it"
    for public in names.functions:
        assert callable(getattr(tj, public, None)), f"tj.{public}"
        if names.method:
            assert callable(getattr(tj.Tensor, public, None)), f"Tensor.{public}"
    for public in names.in_place_names():
        assert callable(getattr(tj.Tensor, public, None)), f"Tensor.{public}"
        assert hasattr(tj, public) == (names.in_place == "function"), f"tj.{public} (torch's function form)"
    for public in names.special:
        assert callable(getattr(tj.special, public, None)) and public in tj.special.__all__, f"tj.special.{public}"
    table = numpy_interop._UNARY if op.kind == "unary" else numpy_interop._BINARY_TENSORS
    for public in names.numpy:
        assert getattr(np, public) in table, f"np.{public} is not routed to {op.name}"


def _inputs(op):
    return [tj.tensor(a, requires_grad=True) for a in op.samples(np.random.default_rng(0))[0][2]]


GENERATED = [op for op in NAMED if not op.names.written]


@pytest.mark.parametrize("op", GENERATED, ids=lambda op: op.name)
def test_generated_front_ends_record_the_op(op):
    """Every spelling (function, method, tj.special, np.<ufunc>) records the op itself: its
    grad_fn is the op's node, with no second record around it."""
    inputs = _inputs(op)
    calls = [getattr(tj, public) for public in op.names.functions]
    calls += [getattr(tj.special, public) for public in op.names.special]
    if op.names.method:
        calls += [lambda *xs, public=public: getattr(xs[0], public)(*xs[1:]) for public in op.names.functions]
    calls += [getattr(np, public) for public in op.names.numpy]
    for call in calls:
        out = call(*inputs)
        assert type(out).__name__ == "Tensor" and out.grad_fn.name() == op.node, (op.name, call)


def test_committed_stub_is_current():
    assert _stub.path().read_text() == _stub.generate(), "the stub is stale: run python -m tapejit stub"


def test_stub_lists_the_generated_names():
    text = _stub.path().read_text()
    assert "\ndef log1p(input) -> Tensor: ..." in text
    assert "\n    def log1p(input) -> Tensor: ..." in text and "\n    def log1p_(input) -> Tensor: ..." in text
