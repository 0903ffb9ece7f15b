"""Gradient tests for every differentiable op in the registry, driven by the ops' own samples.

Every op in ``tapejit.registry.OPS`` of kind ``unary``/``binary``/``kernel`` brings
``samples(rng) -> [(label, fn, inputs)]``, where ``fn(tj, *tensors)`` calls the op through
the public API and ``inputs`` are float64 NumPy arrays inside the op's domain.  Each case
is run through:

* a float64 check of ``autograd.grad`` against central finite differences, along a random
  output cotangent ``u`` and random input directions ``v`` (HIPS autograd's ``check_grads``
  style: ``<grad, v>`` must equal ``<u, (f(x + h v) - f(x - h v)) / 2h>``), plus the forward
  value against the same function evaluated on inputs that do not require grad;
* float32: forward values and gradients against tapejit's own float64 results, and the
  result dtypes must stay float32;
* PyTorch (when importable): the same ``fn`` with ``torch`` as the module, on the same
  float64 inputs and cotangent; values and gradients must agree to ~1e-10;
* the output's ``grad_fn`` name: the registry's ``node`` of the op the case applies last,
  and (with PyTorch) the name PyTorch gives the same call.
"""
import zlib

import numpy as np
import pytest

import tapejit as tj
from tapejit import registry
from tapejit.replay.optimize import FUSED_OPS
from tapejit.samples import anywhere, cases, distinct, unary_samples

DIFFERENTIABLE_KINDS = ("unary", "binary", "kernel")
# Ops only tj.compile's frozen-tape optimiser records (no front end makes them, so a sample
# cannot end in them eagerly): tests/test_replay_optimize.py runs their samples replayed.
FUSED = {op.name for op in FUSED_OPS}
DIFF_OPS = [op for op in registry.OPS if op.kind in DIFFERENTIABLE_KINDS and op.name not in FUSED]


def _seed(text):
    return zlib.crc32(text.encode())


# Stand-in cases for ops that bring no samples of their own, so their gradients are still
# checked (test_every_differentiable_op_has_samples fails for them regardless).  Used only
# while the op's ``samples`` is None; ids are prefixed ``extra:``.
SUPPLEMENTARY = {
    "sub_scalar": unary_samples("sub_scalar", anywhere, lambda tj, x: x - 1.5),
    "amin": cases(("amin_dim", lambda tj, x: tj.amin(x, 1), [(3, 4)], distinct),
                  ("amin02k", lambda tj, x: x.amin((0, 2), keepdim=True), [(2, 3, 4)], distinct)),
    "min_all": cases(("min_all", lambda tj, x: x.min(), [(3, 4)], distinct),
                     ("min_all_3d", lambda tj, x: tj.min(x), [(2, 3, 2)], distinct)),
    "mv": cases(("mv_fn", lambda tj, x, y: tj.mv(x, y), [(3, 4), (4,)], anywhere),
                ("mv_method", lambda tj, x, y: x.mv(y), [(2, 5), (5,)], anywhere)),
    "dot": cases(("dot_method", lambda tj, x, y: x.dot(y), [(5,), (5,)], anywhere),
                 ("matmul_vv", lambda tj, x, y: x @ y, [(3,), (3,)], anywhere)),
}


def _collect_cases():
    params = []
    seen = set()
    for op in DIFF_OPS:
        samples, prefix = op.samples, ""
        if samples is None:
            samples, prefix = SUPPLEMENTARY.get(op.name), "extra:"
        if samples is None:
            continue
        for label, fn, inputs in samples(np.random.default_rng(_seed(op.name))):
            case_id = f"{op.name}-{prefix}{label}"
            assert case_id not in seen, f"duplicate sample id {case_id}"
            seen.add(case_id)
            inputs = [np.asarray(x, dtype=np.float64) for x in inputs]
            params.append(pytest.param(op, prefix + label, fn, inputs, id=case_id))
    return params


CASES = _collect_cases()

# Cases whose ``fn`` applies a different op last than the op whose samples they belong to
# (checked against that op's ``node`` instead): {case id: name of the op applied last}.
LAST_OP = {
    "strided_slice-ellipsis": "unsqueeze",   # x[..., 0, None] shows torch's node, its last step
    "unbind-iter": "mul",              # list(x)[1] * list(x)[2]
    "amax-amin": "amin",
    "max_all-min": "min_all",
    "mm-mv": "mv",
    "mm-dot": "dot",
    "mm-outer": "mul",                 # torch's outer is a broadcast multiply (its node named so)
    "bmm-matmul_3d2d": "mm",           # (B, m, k) @ (k, n) folds the batch into one mm
    "linear-linear_3d": "reshape",     # the 2-D product viewed back to the batch shape
    "linear-linear_vec": "reshape",
    # singular vectors are defined up to sign: their samples square them
    "svd_part-svd_u_squared": "mul",
    "svd_part-svd_vh_squared": "mul",
    "svd_part-svd_full_u_squared": "mul",
    "eigh_part-eigh_vectors_squared": "mul",
}

# Cases where PyTorch's last autograd node is an artefact of how PyTorch decomposes the call
# (tapejit records one fused op instead), so the grad_fn names cannot be compared.
TORCH_DECOMPOSES = {
    "mm-vm": "torch.matmul(vector, matrix) ends in SqueezeBackward4 (unsqueeze, mm, squeeze)",
    "bmm-matmul_bcast": "torch.matmul with broadcast batch dims ends in UnsafeViewBackward0",
    "bmm-matmul_3d2d": "torch.matmul(3-D, 2-D) folds into mm and ends in UnsafeViewBackward0",
    "bmm-matmul_2d3d": "torch.matmul(2-D, 3-D) expands/clones the 2-D operand (CloneBackward0)",
}

# Cases PyTorch cannot run at all (an API difference, not a numerical one).
TORCH_UNSUPPORTED = {
    "strided_slice-mixed": "torch does not support negative slice steps (x[1, ::-1])",
}

FD_STEP = 1e-6


# ---- helpers -----------------------------------------------------------------------------

def _leaves(inputs, np_dtype, requires_grad=True):
    return [tj.tensor(np.asarray(x, dtype=np_dtype), requires_grad=requires_grad) for x in inputs]


def _value(t):
    """A copy of a tapejit tensor's value (the arena may be reused later)."""
    return np.array(t.detach().numpy(), copy=True)


def _call(fn, inputs, np_dtype=np.float64, requires_grad=True):
    out = fn(tj, *_leaves(inputs, np_dtype, requires_grad))
    assert isinstance(out, tj.Tensor), f"sample fn returned {type(out).__name__}, expected a Tensor"
    return out


def _directions(case_id, out_shape, inputs):
    """The random output cotangent ``u`` and input directions ``v`` of a case (deterministic)."""
    rng = np.random.default_rng(_seed("directions:" + case_id))
    u = rng.standard_normal(out_shape)
    v = [rng.standard_normal(x.shape) for x in inputs]
    return np.asarray(u, dtype=np.float64), v


def _tj_forward_and_grads(fn, inputs, u, np_dtype):
    """tapejit's value of ``fn`` and its gradients for output cotangent ``u`` (None -> 0)."""
    leaves = _leaves(inputs, np_dtype)
    out = fn(tj, *leaves)
    assert isinstance(out, tj.Tensor)
    assert out.requires_grad, "the output of an op on inputs that require grad must require grad"
    y = _value(out)
    grads = tj.autograd.grad(out, leaves, grad_outputs=tj.tensor(np.asarray(u, dtype=np_dtype)),
                             allow_unused=True)
    assert len(grads) == len(leaves)
    result = []
    for g, x in zip(grads, inputs):
        if g is None:
            result.append(np.zeros(x.shape, np_dtype))
            continue
        assert tuple(g.shape) == x.shape, f"gradient shape {tuple(g.shape)} != input shape {x.shape}"
        assert g.dtype is (tj.float64 if np_dtype == np.float64 else tj.float32), \
            f"gradient dtype {g.dtype} for {np.dtype(np_dtype)} inputs"
        result.append(np.array(g.numpy(), copy=True))
    return out, y, result


def _case_id(op, label):
    return f"{op.name}-{label}"


def _scale(*arrays):
    return max([1.0] + [float(np.max(np.abs(a))) for a in arrays if np.size(a)])


# ---- 1. every differentiable op brings samples -------------------------------------------

def test_every_differentiable_op_has_samples():
    missing = [f"{op.name} ({op.node})" for op in DIFF_OPS if op.samples is None]
    assert not missing, ("differentiable ops without samples (their gradients are never checked "
                         "directly): " + ", ".join(missing))


def test_samples_are_float64_arrays_in_domain():
    assert CASES, "no sample cases collected"
    for param in CASES:
        op, label, fn, inputs = param.values
        for x in inputs:
            assert x.dtype == np.float64 and np.all(np.isfinite(x)), f"{param.id}: bad input {x!r}"


# ---- 2. float64 against central finite differences ---------------------------------------

@pytest.mark.parametrize("op, label, fn, inputs", CASES)
def test_float64_gradient_finite_differences(op, label, fn, inputs):
    case_id = _case_id(op, label)
    # Forward value first (so the cotangent has the output's shape).
    y = _value(_call(fn, inputs))
    u, v = _directions(case_id, y.shape, inputs)
    out, y_taped, grads = _tj_forward_and_grads(fn, inputs, u, np.float64)
    assert out.dtype is tj.float64
    np.testing.assert_array_equal(y_taped, y, err_msg="forward value is not reproducible")

    # The same function on inputs that do not require grad (NumPy fast paths for views).
    y_plain = _value(_call(fn, inputs, requires_grad=False))
    np.testing.assert_allclose(y, y_plain, rtol=1e-12, atol=1e-14 * _scale(y),
                               err_msg="forward value differs when inputs do not require grad")

    vjp = float(sum(np.sum(g * d) for g, d in zip(grads, v)))
    h = FD_STEP
    y_plus = _value(_call(fn, [x + h * d for x, d in zip(inputs, v)]))
    y_minus = _value(_call(fn, [x - h * d for x, d in zip(inputs, v)]))
    jvp = float(np.sum(u * (y_plus - y_minus)) / (2 * h))
    # Rounding in the difference is ~eps * sum|u * y| / h ~ 1e-10 of that sum; truncation ~h^2.
    atol = 1e-7 * max(1.0, float(np.sum(np.abs(u * y))))
    assert abs(vjp - jvp) <= atol + 1e-5 * abs(jvp), (
        f"{case_id}: <grad, v> = {vjp!r} but finite differences give <u, J v> = {jvp!r} "
        f"(difference {vjp - jvp:.3e}, tolerance {atol + 1e-5 * abs(jvp):.3e})\n"
        f"grads = {grads}")


# ---- 3. float32 against tapejit's float64 ------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("op, label, fn, inputs", CASES)
def test_float32_matches_float64(op, label, fn, inputs):
    case_id = _case_id(op, label)
    y = _value(_call(fn, inputs))
    u, _ = _directions(case_id, y.shape, inputs)
    _, y64, g64 = _tj_forward_and_grads(fn, inputs, u, np.float64)
    inputs32 = [x.astype(np.float32) for x in inputs]
    out32, y32, g32 = _tj_forward_and_grads(fn, inputs32, u, np.float32)
    assert out32.dtype is tj.float32, f"float32 inputs gave a {out32.dtype} result"
    assert y32.dtype == np.float32
    np.testing.assert_allclose(y32, y64, rtol=1e-3, atol=1e-4, err_msg="float32 forward value")
    for i, (a, b) in enumerate(zip(g32, g64)):
        assert a.dtype == np.float32, f"gradient {i} has dtype {a.dtype}"
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4, err_msg=f"float32 gradient of input {i}")


# ---- 4. against PyTorch -------------------------------------------------------------------

def _torch_run(torch, case_id, fn, inputs, u):
    if case_id in TORCH_UNSUPPORTED:
        pytest.skip(TORCH_UNSUPPORTED[case_id])
    leaves = [torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in inputs]
    out = fn(torch, *leaves)
    grads = torch.autograd.grad(out, leaves, grad_outputs=torch.tensor(u, dtype=torch.float64),
                                allow_unused=True)
    grads = [np.zeros(x.shape) if g is None else g.detach().numpy() for g, x in zip(grads, inputs)]
    return out, out.detach().numpy(), grads


@pytest.mark.parametrize("op, label, fn, inputs", CASES)
def test_matches_torch(op, label, fn, inputs):
    torch = pytest.importorskip("torch")
    case_id = _case_id(op, label)
    y = _value(_call(fn, inputs))
    u, _ = _directions(case_id, y.shape, inputs)
    _, y_tj, g_tj = _tj_forward_and_grads(fn, inputs, u, np.float64)
    _, y_pt, g_pt = _torch_run(torch, case_id, fn, inputs, u)
    assert y_tj.shape == y_pt.shape, f"output shape {y_tj.shape}, torch {y_pt.shape}"
    np.testing.assert_allclose(y_tj, y_pt, rtol=1e-10, atol=1e-12 * _scale(y_pt),
                               err_msg="forward value differs from torch")
    for i, (a, b) in enumerate(zip(g_tj, g_pt)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12 * _scale(b),
                                   err_msg=f"gradient of input {i} differs from torch")


# ---- 5. grad_fn names ---------------------------------------------------------------------

@pytest.mark.parametrize("op, label, fn, inputs", CASES)
def test_grad_fn_name_is_registry_node(op, label, fn, inputs):
    case_id = _case_id(op, label)
    out = _call(fn, inputs)
    assert out.requires_grad
    last = registry.BY_NAME[LAST_OP[case_id]] if case_id in LAST_OP else op
    assert out.grad_fn is not None, f"{case_id}: output requires grad but has no grad_fn"
    assert type(out.grad_fn).__name__ == last.node, (
        f"{case_id}: grad_fn is {type(out.grad_fn).__name__}, expected {last.node} (op {last.name!r})")
    assert out.grad_fn.name() == last.node


@pytest.mark.parametrize("op, label, fn, inputs", CASES)
def test_grad_fn_name_matches_torch(op, label, fn, inputs):
    torch = pytest.importorskip("torch")
    case_id = _case_id(op, label)
    if case_id in TORCH_UNSUPPORTED:
        pytest.skip(TORCH_UNSUPPORTED[case_id])
    if case_id in TORCH_DECOMPOSES:
        pytest.skip(TORCH_DECOMPOSES[case_id])
    out = _call(fn, inputs)
    pt = fn(torch, *[torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in inputs])
    assert type(out.grad_fn).__name__ == type(pt.grad_fn).__name__, (
        f"{case_id}: tapejit grad_fn {type(out.grad_fn).__name__}, torch {type(pt.grad_fn).__name__}")
