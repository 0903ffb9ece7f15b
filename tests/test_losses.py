"""The regression, distribution and embedding losses of ``tapejit.nn.functional`` and their
modules against torch 2.13: values and gradients for each reduction, float32 and float64,
broadcasting, the kinks, torch's errors; and central finite differences for a few in float64."""
import re
import warnings

import numpy as np
import pytest

import tapejit as tj
import tapejit.nn.functional as F
from tapejit.testing import check_grads

REDUCTIONS = ("none", "mean", "sum")
TOL = {np.float32: dict(rtol=2e-5, atol=2e-6), np.float64: dict(rtol=1e-10, atol=1e-12)}


def _rng(seed=0):
    return np.random.default_rng(seed)


def _pair(value, grad):
    """The same array as a tapejit and a torch tensor (a leaf requiring grad if ``grad``)."""
    torch = pytest.importorskip("torch")
    if not isinstance(value, np.ndarray):
        return value, value
    return (tj.tensor(value.copy(), requires_grad=grad),
            torch.tensor(value.copy(), requires_grad=grad))


def check_against_torch(name, args, kwargs=None, grad=(0,), dtype=np.float64, module=None):
    """Run ``F.<name>`` (or the module ``module=(class name, init kwargs)``) in tapejit and
    torch on the same arrays; compare the results and, through a random upstream gradient,
    the gradients of the float arguments listed in ``grad``.  Array keywords (``weight``)
    are passed as constant tensors of ``dtype``."""
    torch = pytest.importorskip("torch")
    kwargs = kwargs or {}
    args = [a.astype(dtype) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a for a in args]
    pairs = [_pair(a, i in grad) for i, a in enumerate(args)]
    keywords = {k: _pair(v.astype(dtype), False) if isinstance(v, np.ndarray) else (v, v) for k, v in kwargs.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if module is None:
            ours = getattr(F, name)(*[p[0] for p in pairs], **{k: v[0] for k, v in keywords.items()})
            theirs = getattr(torch.nn.functional, name)(*[p[1] for p in pairs],
                                                        **{k: v[1] for k, v in keywords.items()})
        else:
            cls, init = module
            ours = getattr(tj.nn, cls)(**init)(*[p[0] for p in pairs])
            theirs = getattr(torch.nn, cls)(**init)(*[p[1] for p in pairs])
    tol = TOL[dtype]
    assert tuple(ours.shape) == tuple(theirs.shape), (ours.shape, theirs.shape)
    assert ours.dtype == getattr(tj, str(theirs.dtype).split(".")[1])
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), equal_nan=True, **tol)
    if not grad:
        return ours
    upstream = _rng(99).standard_normal(tuple(theirs.shape)).astype(dtype)
    (ours * tj.tensor(upstream)).sum().backward()
    (theirs * torch.tensor(upstream)).sum().backward()
    for i in grad:
        ours_grad, theirs_grad = pairs[i][0].grad, pairs[i][1].grad
        assert (ours_grad is None) == (theirs_grad is None), i
        np.testing.assert_allclose(ours_grad.numpy(), theirs_grad.numpy(), equal_nan=True,
                                   err_msg=f"gradient of argument {i}", **tol)
    return ours


def check_same_error(name, args, kwargs=None, module=None):
    """tapejit raises torch's exception type with torch's message (shapes printed as
    ``tapejit.Size`` where torch prints ``torch.Size``)."""
    torch = pytest.importorskip("torch")
    kwargs = kwargs or {}
    pairs = [_pair(a, False) for a in args]
    caught = []
    for lib, functional, nn, side in ((tj, F, tj.nn, 0), (torch, torch.nn.functional, torch.nn, 1)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                if module is None:
                    getattr(functional, name)(*[p[side] for p in pairs], **kwargs)
                else:
                    getattr(nn, module[0])(**module[1])(*[p[side] for p in pairs])
            except Exception as e:  # noqa: BLE001 -- the point is to compare whatever is raised
                caught.append(e)
            else:
                caught.append(None)
    ours, theirs = caught
    assert theirs is not None, "torch accepts this case"
    assert type(ours) is type(theirs), (ours, theirs)
    ours = str(ours).replace("tapejit.Size", "torch.Size")
    if "must match the size" in ours:
        # tapejit names the loss and the shapes at fault; torch names the inner op's
        # operands, in whichever order its formula has them.
        sizes = re.compile(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) "
                           r"at non-singleton dimension (\d+)", re.I)
        (a1, b1, d1), = sizes.findall(ours)
        (a2, b2, d2), = sizes.findall(str(theirs))
        assert ours.startswith(name) and sorted((a1, b1)) == sorted((a2, b2)) and d1 == d2, (ours, str(theirs))
    elif "Dimension out of range" in ours:
        assert ours.endswith(str(theirs)), (ours, str(theirs))   # after the name of the op at fault
    else:
        assert ours == str(theirs)


def _float(shape, seed=0, scale=1.0):
    return _rng(seed).standard_normal(shape) * scale


def _signs(shape, seed=1):
    return np.where(_rng(seed).random(shape) < 0.5, -1.0, 1.0)


DTYPES = (np.float32, np.float64)


# ---- smooth L1 and Huber ----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("beta", [1.0, 0.5, 0.0])
def test_smooth_l1_loss(dtype, reduction, beta):
    check_against_torch("smooth_l1_loss", [_float((4, 5), scale=2), _float((4, 5), 1)],
                        dict(reduction=reduction, beta=beta), grad=(0, 1), dtype=dtype)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_smooth_l1_loss_broadcasts_with_torchs_warning(reduction):
    with pytest.warns(UserWarning, match="different to the input size"):
        F.smooth_l1_loss(tj.zeros(4, 5), tj.zeros(5))
    check_against_torch("smooth_l1_loss", [_float((4, 5), scale=2), _float((5,), 1)],
                        dict(reduction=reduction), grad=(0, 1))


def test_smooth_l1_loss_at_the_kink():
    # |diff| == beta and diff == 0 exactly: torch's gradients there are sign(diff) and 0.
    check_against_torch("smooth_l1_loss", [np.array([0.0, 1.0, -1.0, 2.0, 0.5]), np.zeros(5)],
                        dict(reduction="sum"), grad=(0,))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("delta", [1.0, 0.3])
def test_huber_loss(dtype, reduction, delta):
    check_against_torch("huber_loss", [_float((3, 4, 2), scale=2), _float((3, 4, 2), 1)],
                        dict(reduction=reduction, delta=delta), grad=(0, 1), dtype=dtype)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_huber_loss_weight(reduction):
    check_against_torch("huber_loss", [_float((4, 3), scale=2), _float((4, 3), 1)],
                        dict(reduction=reduction, weight=_float((4, 3), 2) ** 2), grad=(0, 1))


def test_huber_loss_broadcasting_and_module():
    check_against_torch("huber_loss", [_float((4, 1, 3), scale=2), _float((2, 3), 1)], grad=(0, 1))
    check_against_torch(None, [_float((4, 3), scale=2), _float((4, 3), 1)], grad=(0,),
                        module=("HuberLoss", dict(delta=0.5, reduction="sum")))
    check_against_torch(None, [_float((4, 3), scale=2), _float((4, 3), 1)], grad=(0,),
                        module=("SmoothL1Loss", dict(beta=0.5, reduction="none")))


# ---- KL divergence ----------------------------------------------------------------------------

def _log_probs(shape, seed):
    x = _float(shape, seed)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS + ("batchmean",))
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div(dtype, reduction, log_target):
    target = _log_probs((4, 5), 1)
    if not log_target:
        target = np.exp(target)
    check_against_torch("kl_div", [_log_probs((4, 5), 0), target],
                        dict(reduction=reduction, log_target=log_target), grad=(0, 1), dtype=dtype)


def test_kl_div_zero_targets_and_broadcasting():
    # A zero probability contributes 0 (xlogy), and torch's target gradient there is NaN.
    target = np.exp(_log_probs((3, 4), 1))
    target[0, 1] = 0.0
    check_against_torch("kl_div", [_log_probs((3, 4), 0), target], dict(reduction="sum"), grad=(0, 1))
    check_against_torch("kl_div", [_log_probs((3, 4), 0), np.exp(_log_probs((4,), 2))],
                        dict(reduction="batchmean"), grad=(0, 1))
    check_against_torch("kl_div", [np.array(-1.2), np.array(0.3)], dict(reduction="batchmean"), grad=(0, 1))


def test_kl_div_mean_warns_as_torch_and_module():
    with pytest.warns(UserWarning, match="'batchmean' divides only by the batch size"):
        F.kl_div(tj.zeros(2, 3), tj.ones(2, 3))
    check_against_torch(None, [_log_probs((4, 5), 0), _log_probs((4, 5), 1)], grad=(0, 1),
                        module=("KLDivLoss", dict(reduction="batchmean", log_target=True)))


# ---- cosine similarity and pairwise distance -----------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes, dim", [(((4, 5), (4, 5)), 1), (((4, 5), (4, 5)), 0),
                                         (((4, 1, 5), (3, 5)), -1), (((4, 1), (4, 3)), 1),
                                         (((2, 3, 4), (2, 3, 4)), 1)])
def test_cosine_similarity(dtype, shapes, dim):
    check_against_torch("cosine_similarity", [_float(shapes[0], 0), _float(shapes[1], 1)], dict(dim=dim),
                        grad=(0, 1), dtype=dtype)


def test_cosine_similarity_tiny_and_zero_norms():
    # Norms below eps are clamped in value only: the gradient still flows as torch's does;
    # a zero vector gives 0 and a zero gradient.
    x1 = _float((4, 3), 0)
    x1[1] = 0.0
    x1[2] *= 1e-10
    check_against_torch("cosine_similarity", [x1, _float((4, 3), 1)], dict(eps=1e-8), grad=(0, 1))
    check_against_torch("cosine_similarity", [x1, _float((4, 3), 1)], dict(eps=0.5), grad=(0, 1))


def test_cosine_similarity_integer_inputs():
    check_against_torch("cosine_similarity", [np.arange(6).reshape(2, 3), _float((2, 3), 1)], grad=(1,))
    check_same_error("cosine_similarity", [np.arange(6).reshape(2, 3), np.ones((2, 3), np.int64)])


def test_top_level_functions_as_torch():
    torch = pytest.importorskip("torch")
    x1, x2 = _float((3, 4), 0), _float((3, 4), 1)
    np.testing.assert_allclose(tj.cosine_similarity(tj.tensor(x1), tj.tensor(x2), 0).numpy(),
                               torch.cosine_similarity(torch.tensor(x1), torch.tensor(x2), 0).numpy(), rtol=1e-12)
    np.testing.assert_allclose(tj.pairwise_distance(tj.tensor(x1), tj.tensor(x2), 1.0).numpy(),
                               torch.pairwise_distance(torch.tensor(x1), torch.tensor(x2), 1.0).numpy(), rtol=1e-12)


def test_cosine_similarity_module():
    check_against_torch(None, [_float((3, 4), 0), _float((3, 4), 1)], grad=(0, 1),
                        module=("CosineSimilarity", dict(dim=0, eps=1e-6)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("p", [2.0, 1.0, 3.0])
@pytest.mark.parametrize("keepdim", [False, True])
def test_pairwise_distance(dtype, p, keepdim):
    check_against_torch("pairwise_distance", [_float((4, 5), 0), _float((4, 5), 1)], dict(p=p, keepdim=keepdim),
                        grad=(0, 1), dtype=dtype)


def test_pairwise_distance_broadcasting_and_module():
    check_against_torch("pairwise_distance", [_float((4, 5), 0), _float((5,), 1)], grad=(0, 1))
    check_against_torch("pairwise_distance", [_float((2, 1, 5), 0), _float((3, 5), 1)], dict(eps=0.1),
                        grad=(0, 1))
    check_against_torch(None, [_float((4, 5), 0), _float((4, 5), 1)], grad=(0, 1),
                        module=("PairwiseDistance", dict(p=1.0, keepdim=True)))


# ---- embedding and ranking losses ---------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("margin", [0.0, 0.2])
def test_cosine_embedding_loss(dtype, reduction, margin):
    target = np.array([1, -1, 1, -1, -1, 1])
    check_against_torch("cosine_embedding_loss", [_float((6, 5), 0), _float((6, 5), 1), target],
                        dict(margin=margin, reduction=reduction), grad=(0, 1), dtype=dtype)


def test_cosine_embedding_loss_unbatched_float_target_and_module():
    check_against_torch("cosine_embedding_loss", [_float((5,), 0), _float((5,), 1), np.array(-1.0)],
                        dict(margin=-0.9), grad=(0, 1))
    check_against_torch("cosine_embedding_loss", [_float((3, 5), 0), _float((3, 5), 1), np.array([1.0, 0.0, -1.0])],
                        dict(reduction="none"), grad=(0, 1))
    check_against_torch(None, [_float((3, 5), 0), _float((3, 5), 1), np.array([1, -1, -1])], grad=(0, 1),
                        module=("CosineEmbeddingLoss", dict(margin=-0.5, reduction="sum")))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("margin", [0.0, 0.5])
def test_margin_ranking_loss(dtype, reduction, margin):
    check_against_torch("margin_ranking_loss", [_float((8,), 0), _float((8,), 1), _signs((8,))],
                        dict(margin=margin, reduction=reduction), grad=(0, 1, 2), dtype=dtype)


def test_margin_ranking_loss_integer_target_and_module():
    check_against_torch("margin_ranking_loss", [_float((6,), 0), _float((6,), 1), np.array([1, -1, 1, 1, -1, -1])],
                        grad=(0, 1))
    check_against_torch(None, [_float((6,), 0), _float((6,), 1), _signs((6,))], grad=(0, 1),
                        module=("MarginRankingLoss", dict(margin=0.3, reduction="none")))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("p, swap, margin", [(2, False, 1.0), (2, True, 1.0), (1, False, 0.5), (3, True, 2.0)])
def test_triplet_margin_loss(dtype, reduction, p, swap, margin):
    check_against_torch("triplet_margin_loss", [_float((6, 4), 0), _float((6, 4), 1), _float((6, 4), 2)],
                        dict(p=p, swap=swap, margin=margin, reduction=reduction), grad=(0, 1, 2), dtype=dtype)


def test_triplet_margin_loss_unbatched_and_module():
    check_against_torch("triplet_margin_loss", [_float((4,), 0), _float((4,), 1), _float((4,), 2)],
                        dict(reduction="none", eps=0.01), grad=(0, 1, 2))
    check_against_torch(None, [_float((5, 3), 0), _float((5, 3), 1), _float((5, 3), 2)], grad=(0, 1, 2),
                        module=("TripletMarginLoss", dict(margin=0.7, p=1.0, swap=True)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("margin", [1.0, 0.3])
def test_hinge_embedding_loss(dtype, reduction, margin):
    target = _signs((4, 5))
    target[0, 0] = 0.0   # neither 1 nor -1: both terms count, as in torch
    check_against_torch("hinge_embedding_loss", [_float((4, 5), 0), target], dict(margin=margin, reduction=reduction),
                        grad=(0,), dtype=dtype)
    check_against_torch(None, [_float((4, 5), 0), target], grad=(0,),
                        module=("HingeEmbeddingLoss", dict(margin=margin, reduction=reduction)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_soft_margin_loss(dtype, reduction):
    check_against_torch("soft_margin_loss", [_float((4, 5), 0, scale=3), _signs((4, 5))], dict(reduction=reduction),
                        grad=(0,), dtype=dtype)
    check_against_torch(None, [_float((4, 5), 0), _signs((4, 5))], grad=(0,),
                        module=("SoftMarginLoss", dict(reduction=reduction)))


# ---- likelihood losses --------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("log_input, full", [(True, False), (True, True), (False, False), (False, True)])
def test_poisson_nll_loss(dtype, reduction, log_input, full):
    rates = _float((4, 5), 0) if log_input else np.abs(_float((4, 5), 0)) + 0.1
    counts = _rng(3).poisson(2.0, (4, 5)).astype(np.float64)
    counts[0, :3] = [0.0, 1.0, 1.5]     # around the Stirling term's t > 1 cut
    check_against_torch("poisson_nll_loss", [rates, counts], dict(log_input=log_input, full=full, reduction=reduction),
                        grad=(0,), dtype=dtype)


def test_poisson_nll_loss_target_gradient_eps_and_module():
    counts = np.abs(_float((3, 4), 1)) * 3 + 1.1
    check_against_torch("poisson_nll_loss", [np.abs(_float((3, 4), 0)), counts],
                        dict(log_input=False, full=True, eps=0.5), grad=(0, 1))
    check_against_torch(None, [_float((3, 4), 0), counts], grad=(0, 1),
                        module=("PoissonNLLLoss", dict(full=True, reduction="sum")))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("var_shape", [(4, 3), (4,), (4, 1), (1, 3)])
@pytest.mark.parametrize("full", [False, True])
def test_gaussian_nll_loss(dtype, reduction, var_shape, full):
    var = np.abs(_float(var_shape, 2)) + 0.1
    check_against_torch("gaussian_nll_loss", [_float((4, 3), 0), _float((4, 3), 1), var],
                        dict(full=full, reduction=reduction), grad=(0, 1, 2), dtype=dtype)


def test_gaussian_nll_loss_clamps_var_in_value_only():
    # Variances below eps count as eps, but their gradient is not cut (torch clamps under no_grad).
    var = np.array([[1e-9, 0.0, 2.0], [0.5, 1e-3, 3.0]])
    check_against_torch("gaussian_nll_loss", [_float((2, 3), 0), _float((2, 3), 1), var], dict(eps=1e-2),
                        grad=(0, 1, 2))
    check_against_torch("gaussian_nll_loss", [_float((2, 3), 0), _float((2, 3), 1), 0.5], grad=(0, 1))
    check_against_torch("gaussian_nll_loss", [_float((5, 2, 3), 0), _float((5, 2, 3), 1), np.ones((5, 1, 3))],
                        dict(full=True), grad=(0, 2))
    check_against_torch(None, [_float((2, 3), 0), _float((2, 3), 1), np.abs(_float((2,), 2))], grad=(0, 1, 2),
                        module=("GaussianNLLLoss", dict(full=True, eps=1e-3, reduction="sum")))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
def test_multilabel_soft_margin_loss(dtype, reduction, weighted):
    args = [_float((4, 5), 0, scale=3), (_rng(1).random((4, 5)) < 0.5).astype(np.float64)]
    kwargs = dict(reduction=reduction, weight=np.abs(_float((5,), 2)) if weighted else None)
    check_against_torch("multilabel_soft_margin_loss", args, kwargs, grad=(0, 1), dtype=dtype)


def test_multilabel_soft_margin_loss_unbatched_and_module():
    check_against_torch("multilabel_soft_margin_loss", [_float((5,), 0), _rng(1).random(5)], dict(reduction="none"),
                        grad=(0, 1))
    torch = pytest.importorskip("torch")
    weight = np.abs(_float((5,), 2))
    check_against_torch(None, [_float((4, 5), 0), _rng(1).random((4, 5))], grad=(0,),
                        module=("MultiLabelSoftMarginLoss", dict(weight=None, reduction="sum")))
    ours = tj.nn.MultiLabelSoftMarginLoss(weight=tj.tensor(weight))
    theirs = torch.nn.MultiLabelSoftMarginLoss(weight=torch.tensor(weight))
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["weight"]
    x, t = _float((4, 5), 0), _rng(1).random((4, 5))
    np.testing.assert_allclose(ours(tj.tensor(x), tj.tensor(t)).item(),
                               theirs(torch.tensor(x), torch.tensor(t)).item(), rtol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("p, margin, weighted", [(1, 1.0, False), (2, 1.0, False), (1, 0.5, True), (2, 2.0, True)])
def test_multi_margin_loss(dtype, reduction, p, margin, weighted):
    args = [_float((6, 4), 0), np.array([0, 3, 1, 1, 2, 0])]
    kwargs = dict(p=p, margin=margin, reduction=reduction)
    if weighted:
        kwargs["weight"] = np.abs(_float((4,), 2))
    check_against_torch("multi_margin_loss", args, kwargs, grad=(0,), dtype=dtype)


def test_multi_margin_loss_unbatched_ties_and_module():
    check_against_torch("multi_margin_loss", [_float((4,), 0), np.array(2)], dict(reduction="none"), grad=(0,))
    check_against_torch("multi_margin_loss", [_float((4,), 0), np.array([2])], dict(reduction="none"), grad=(0,))
    # margin - x_y + x_j == 0 exactly: torch's kernel counts only z > 0, so no gradient there.
    check_against_torch("multi_margin_loss", [np.array([[1.0, 0.0, 0.5]]), np.array([0])], dict(reduction="sum"),
                        grad=(0,))
    check_against_torch(None, [_float((3, 4), 0), np.array([0, 1, 3])], grad=(0,),
                        module=("MultiMarginLoss", dict(p=2, margin=0.5)))


# ---- the deprecated size_average / reduce flags ---------------------------------------------------

@pytest.mark.parametrize("size_average, reduce", [(False, None), (None, False), (True, True), (False, True)])
def test_legacy_reduction_flags(size_average, reduce):
    check_against_torch("smooth_l1_loss", [_float((3, 4), 0), _float((3, 4), 1)],
                        dict(size_average=size_average, reduce=reduce), grad=(0,))
    check_against_torch("margin_ranking_loss", [_float((5,), 0), _float((5,), 1), _signs((5,))],
                        dict(size_average=size_average, reduce=reduce), grad=(0,))
    check_against_torch(None, [_log_probs((3, 4), 0), np.exp(_log_probs((3, 4), 1))], grad=(0,),
                        module=("KLDivLoss", dict(size_average=size_average, reduce=reduce)))
    with pytest.warns(UserWarning, match="size_average and reduce args will be deprecated"):
        F.soft_margin_loss(tj.zeros(2), tj.ones(2), size_average=size_average, reduce=reduce)


# ---- torch's errors -----------------------------------------------------------------------------

A, B = np.zeros((2, 3)), np.zeros(2)
ERROR_CASES = [
    ("smooth_l1_loss", [A, A], dict(reduction="avg")),
    ("smooth_l1_loss", [A, A], dict(beta=-1.0)),
    ("smooth_l1_loss", [A, np.zeros((2, 4))], {}),
    ("huber_loss", [A, A], dict(delta=0.0)),
    ("huber_loss", [A, A], dict(reduction="avg")),
    ("kl_div", [A, A], dict(reduction="avg")),
    ("kl_div", [A, np.zeros((3, 3))], {}),
    ("poisson_nll_loss", [A, A], dict(reduction="avg")),
    ("poisson_nll_loss", [A, B], {}),
    ("gaussian_nll_loss", [A, A, np.ones(3)], {}),
    ("gaussian_nll_loss", [A, A, np.ones((2, 2))], {}),
    ("gaussian_nll_loss", [A, A, np.ones((1, 1))], {}),
    ("gaussian_nll_loss", [A, A, -1.0], {}),
    ("gaussian_nll_loss", [A, A, -np.ones((2, 3))], {}),
    ("gaussian_nll_loss", [A, A, 1.0], dict(reduction="avg")),
    ("cosine_similarity", [A, np.zeros((4, 3))], {}),
    ("cosine_similarity", [A, A], dict(dim=3)),
    ("pairwise_distance", [A, np.zeros((4, 3))], {}),
    ("cosine_embedding_loss", [A, A, np.ones((2, 2))], {}),
    ("cosine_embedding_loss", [A, B, np.ones(2)], {}),
    ("cosine_embedding_loss", [A, A, np.ones(())], {}),
    ("cosine_embedding_loss", [A, A, np.ones(2)], dict(reduction="avg")),
    ("margin_ranking_loss", [A, A, B], {}),
    ("margin_ranking_loss", [B, B, B], dict(reduction="avg")),
    ("triplet_margin_loss", [A, A, B], {}),
    ("triplet_margin_loss", [A, A, A], dict(margin=0.0)),
    ("multilabel_soft_margin_loss", [A, A], dict(reduction="avg")),
    ("multilabel_soft_margin_loss", [A, np.zeros((2, 4))], {}),
    ("soft_margin_loss", [A, B], {}),
    ("hinge_embedding_loss", [A, B], {}),
    ("multi_margin_loss", [A, np.array([0, 3])], {}),
    ("multi_margin_loss", [A, np.array([0, 1, 2])], {}),
    ("multi_margin_loss", [A, np.array([0, 1])], dict(p=3)),
    ("multi_margin_loss", [np.zeros((2, 3, 4)), np.array([0, 1])], {}),
    ("multi_margin_loss", [A, np.array([0.0, 1.0])], {}),
    ("multi_margin_loss", [A, np.array([0, 1])], dict(reduction="avg")),
    ("gaussian_nll_loss", [A, np.zeros((4, 3)), 1.0], {}),
    ("triplet_margin_loss", [A, A, np.zeros((4, 3))], {}),
    ("cosine_embedding_loss", [A, np.zeros((4, 3)), np.ones(2)], {}),
    ("margin_ranking_loss", [B, B, np.zeros(3)], {}),
]


@pytest.mark.parametrize("name, args, kwargs", ERROR_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(ERROR_CASES)])
def test_errors_as_torch(name, args, kwargs):
    check_same_error(name, args, kwargs)


def test_multi_margin_loss_weight_errors_as_torch():
    torch = pytest.importorskip("torch")
    for weight_shape, kind in (((2,), RuntimeError), ((1, 3), ValueError)):
        with pytest.raises(kind) as ours:
            F.multi_margin_loss(tj.zeros(2, 3), tj.tensor([0, 1]), weight=tj.ones(*weight_shape))
        with pytest.raises(kind) as theirs:
            torch.nn.functional.multi_margin_loss(torch.zeros(2, 3), torch.tensor([0, 1]),
                                                  weight=torch.ones(*weight_shape))
        assert str(ours.value) == str(theirs.value)
    with pytest.raises(ValueError, match="expected weight to be None or 1D tensor, got 2D instead"):
        tj.nn.MultiMarginLoss(weight=tj.ones(1, 3))
    # torch has no derivative of soft_margin_loss for its target, and says so.
    target = torch.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError) as theirs:
        torch.nn.functional.soft_margin_loss(torch.zeros(2), target)
    with pytest.raises(RuntimeError) as ours:
        F.soft_margin_loss(tj.zeros(2), tj.ones(2, requires_grad=True))
    assert str(ours.value) == str(theirs.value)
    with pytest.raises(ValueError, match="Weights and input must have the same size."):
        F.huber_loss(tj.zeros(2, 3), tj.zeros(2, 3), weight=tj.ones(3))   # torch: the same ValueError


# ---- central finite differences (float64) ---------------------------------------------------------

def _finite_difference_check(loss_of, arrays, which):
    """The gradient of the scalar ``loss_of(*tensors)`` w.r.t. ``arrays[which]`` against
    central differences of the loss."""
    check_grads(loss_of, arrays, wrt=which, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("case", ["smooth_l1", "huber", "kl_div", "cosine_similarity", "triplet", "poisson_full",
                                  "gaussian_var", "multilabel", "cosine_embedding"])
def test_finite_differences(case):
    x, y, z = _float((3, 4), 0, scale=1.5), _float((3, 4), 1), _float((3, 4), 2)
    positive = np.abs(z) + 0.5
    cases = {
        "smooth_l1": (lambda a, b: F.smooth_l1_loss(a, b, beta=0.7), [x, y], 0),
        "huber": (lambda a, b: F.huber_loss(a, b, delta=0.6, reduction="sum"), [x, y], 1),
        "kl_div": (lambda a, b: F.kl_div(a, b, reduction="batchmean"), [_log_probs((3, 4), 0), positive], 1),
        "cosine_similarity": (lambda a, b: F.cosine_similarity(a, b, dim=0).sum(), [x, y], 0),
        "triplet": (lambda a, b, c: F.triplet_margin_loss(a, b, c, margin=2.0, swap=True), [x, y, z], 0),
        "poisson_full": (lambda a, b: F.poisson_nll_loss(a, b, log_input=False, full=True), [positive, x * x + 1.2], 1),
        "gaussian_var": (lambda a, b, c: F.gaussian_nll_loss(a, b, c, full=True), [x, y, positive], 2),
        "multilabel": (lambda a, b: F.multilabel_soft_margin_loss(a, b), [x, _rng(5).random((3, 4))], 0),
        "cosine_embedding": (lambda a, b: F.cosine_embedding_loss(a, b, tj.tensor([1, -1, -1]), margin=-0.8),
                             [x, y], 1),
    }
    loss_of, arrays, which = cases[case]
    _finite_difference_check(loss_of, arrays, which)


# ---- tj.compile ---------------------------------------------------------------------------------

def test_losses_trace_under_compile():
    """The losses without comparisons of computed values replay under ``tj.compile`` with
    new inputs: each replay equals eager mode (which the tests above compare with torch)."""
    def losses(a, b, c, v):
        return (F.smooth_l1_loss(a, b, beta=0.5) + F.huber_loss(a, b, delta=0.7, reduction="sum")
                + F.kl_div(a, v, reduction="batchmean") + F.cosine_similarity(a, b).sum()
                + F.pairwise_distance(a, b).mean() + F.triplet_margin_loss(a, b, c, swap=True)
                + F.margin_ranking_loss(a, b, c.sign()) + F.poisson_nll_loss(a, v * 3, full=True)
                + F.gaussian_nll_loss(a, b, v, full=True) + F.multilabel_soft_margin_loss(a, v)
                + F.soft_margin_loss(a, c.sign()))

    compiled = tj.compile(losses)
    for seed in range(3):
        arrays = [_float((3, 4), seed), _float((3, 4), seed + 10), _float((3, 4), seed + 20),
                  _rng(seed).random((3, 4)) + 0.05]
        eager = losses(*[tj.tensor(a) for a in arrays])
        replayed = compiled(*[tj.tensor(a) for a in arrays])
        np.testing.assert_allclose(replayed.item(), eager.item(), rtol=1e-12)
