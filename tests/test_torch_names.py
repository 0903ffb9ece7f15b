"""grad_fn names of composed ops are torch's: a loss or layer tapejit builds from several
records shows as torch's one node (``NllLossBackward0``), whose ``next_functions`` are the
nodes of its inputs.  Every case is run in torch and in tapejit and the names compared."""
import numpy as np
import pytest

import tapejit as tj

torch = pytest.importorskip("torch")


def _cases(lib, rng):
    F = lib.nn.functional

    def mk(*shape, rg=True):
        return lib.tensor(rng.random(shape) * 0.8 + 0.1, dtype=lib.float64, requires_grad=rg)

    x, y, p = mk(4, 3), mk(4, 3, rg=False), mk(4, 3, rg=False)
    x3, x4 = mk(2, 3, 8), mk(2, 3, 6, 6)
    t = lib.tensor([0, 2, 1, 1])
    signs = lib.tensor([1.0, -1.0, 1.0, 1.0], dtype=lib.float64)
    return {
        "cross_entropy": lambda: F.cross_entropy(x, t),
        "cross_entropy_sum": lambda: F.cross_entropy(x, t, reduction="sum"),
        "cross_entropy_none": lambda: F.cross_entropy(x, t, reduction="none"),
        "cross_entropy_weight": lambda: F.cross_entropy(x, t, weight=mk(3, rg=False)),
        "cross_entropy_ignore": lambda: F.cross_entropy(x, lib.tensor([0, -100, 1, 1])),
        "cross_entropy_unbatched": lambda: F.cross_entropy(x[0], t[1]),
        "cross_entropy_probabilities": lambda: F.cross_entropy(x, p),
        "cross_entropy_probabilities_sum": lambda: F.cross_entropy(x, p, reduction="sum"),
        "cross_entropy_smoothing": lambda: F.cross_entropy(x, t, label_smoothing=0.1),
        "CrossEntropyLoss": lambda: lib.nn.CrossEntropyLoss()(x, t),
        "nll_loss": lambda: F.nll_loss(x, t),
        "nll_loss_none": lambda: F.nll_loss(x, t, reduction="none"),
        "binary_cross_entropy": lambda: F.binary_cross_entropy(x, y),
        "binary_cross_entropy_none": lambda: F.binary_cross_entropy(x, y, reduction="none"),
        "binary_cross_entropy_with_logits": lambda: F.binary_cross_entropy_with_logits(x, y),
        "binary_cross_entropy_with_logits_pos_weight":
            lambda: F.binary_cross_entropy_with_logits(x, y, pos_weight=mk(3, rg=False)),
        "BCEWithLogitsLoss": lambda: lib.nn.BCEWithLogitsLoss()(x, y),
        "mse_loss": lambda: F.mse_loss(x, y),
        "mse_loss_none": lambda: F.mse_loss(x, y, reduction="none"),
        "l1_loss": lambda: F.l1_loss(x, y),
        "smooth_l1_loss": lambda: F.smooth_l1_loss(x, y),
        "smooth_l1_loss_beta0": lambda: F.smooth_l1_loss(x, y, beta=0.0),
        "huber_loss": lambda: F.huber_loss(x, y),
        "kl_div": lambda: F.kl_div(x, y, reduction="batchmean"),
        "poisson_nll_loss": lambda: F.poisson_nll_loss(x, y),
        "gaussian_nll_loss": lambda: F.gaussian_nll_loss(x, y, mk(4, 3, rg=False)),
        "soft_margin_loss": lambda: F.soft_margin_loss(x, y),
        "multilabel_soft_margin_loss": lambda: F.multilabel_soft_margin_loss(x, y),
        "margin_ranking_loss": lambda: F.margin_ranking_loss(x[:, 0], x[:, 1], signs),
        "hinge_embedding_loss": lambda: F.hinge_embedding_loss(x, y.sign()),
        "multi_margin_loss": lambda: F.multi_margin_loss(x, t),
        "cosine_embedding_loss": lambda: F.cosine_embedding_loss(x, mk(4, 3), signs),
        "cosine_similarity": lambda: F.cosine_similarity(x, mk(4, 3)),
        "pairwise_distance": lambda: F.pairwise_distance(x, mk(4, 3)),
        "triplet_margin_loss": lambda: F.triplet_margin_loss(x, mk(4, 3), mk(4, 3)),
        "embedding": lambda: F.embedding(t, x),
        "embedding_padding_idx": lambda: F.embedding(t, x, padding_idx=1),
        "Embedding": lambda: lib.nn.Embedding(5, 3)(t),
        "linear": lambda: F.linear(x, mk(2, 3), mk(2)),
        "relu": lambda: F.relu(x),
        "leaky_relu": lambda: F.leaky_relu(x),
        "elu": lambda: F.elu(x),
        "ELU": lambda: lib.nn.ELU()(x),
        "silu": lambda: F.silu(x),
        "SiLU": lambda: lib.nn.SiLU()(x),
        "gelu": lambda: F.gelu(x),
        "softplus": lambda: F.softplus(x),
        "softmax": lambda: F.softmax(x, 1),
        "log_softmax": lambda: F.log_softmax(x, 1),
        "normalize": lambda: F.normalize(x),
        "dropout": lambda: F.dropout(x, 0.5),
        "layer_norm": lambda: F.layer_norm(x, (3,)),
        "conv1d": lambda: F.conv1d(x3, mk(4, 3, 3)),
        "conv2d": lambda: F.conv2d(x4, mk(4, 3, 3, 3)),
        "max_pool2d": lambda: F.max_pool2d(x4, 2),
        "avg_pool2d": lambda: F.avg_pool2d(x4, 2),
        "max_pool1d": lambda: F.max_pool1d(x3, 2),
        "adaptive_avg_pool2d": lambda: F.adaptive_avg_pool2d(x4, 3),
        "batch_norm": lambda: F.batch_norm(x4, None, None, training=True),
        "group_norm": lambda: F.group_norm(x4, 3),
        "interpolate": lambda: F.interpolate(x4, scale_factor=2, mode="bilinear"),
        "pad_constant": lambda: F.pad(x, (1, 1)),
        "pad_reflect": lambda: F.pad(x3, (2, 1), mode="reflect"),
        "pad_replicate_2d": lambda: F.pad(x4, (2, 1, 1, 0), mode="replicate"),
        "pad_circular": lambda: F.pad(x3, (2, 1), mode="circular"),
        "select": lambda: x[1],
        "select_inner": lambda: x[:, 1],
        "select_after_slice": lambda: x4[1:, 1],
        "select_ellipsis": lambda: x4[..., 2],
        "select_then_slice": lambda: x4[0, 1:3],
        "slice_step": lambda: x4[0, ::2],
        "select_unsqueeze": lambda: x4[..., 0, None],
        "slice": lambda: x4[:, 1:3],
    }


# composites shown as one torch node: their next_functions are compared too
_ONE_NODE = {"cross_entropy", "cross_entropy_sum", "cross_entropy_none", "cross_entropy_weight",
             "cross_entropy_ignore", "CrossEntropyLoss", "nll_loss", "nll_loss_none", "binary_cross_entropy",
             "binary_cross_entropy_none", "binary_cross_entropy_with_logits",
             "binary_cross_entropy_with_logits_pos_weight", "BCEWithLogitsLoss", "mse_loss", "mse_loss_none",
             "smooth_l1_loss", "huber_loss", "soft_margin_loss", "multi_margin_loss", "embedding",
             "embedding_padding_idx", "Embedding", "elu", "ELU", "silu", "SiLU", "pad_constant", "pad_reflect",
             "pad_replicate_2d"}   # (circular: torch's chain of slice copies)

_NAMES = sorted(_cases(torch, np.random.default_rng(0)))


def _node_names(node):
    return [None if child is None else type(child).__name__ for child, _ in node.next_functions]


@pytest.mark.parametrize("name", _NAMES)
def test_grad_fn_name_is_torchs(name):
    expected = _cases(torch, np.random.default_rng(0))[name]()
    got = _cases(tj, np.random.default_rng(0))[name]()
    assert type(got.grad_fn).__name__ == type(expected.grad_fn).__name__
    assert got.grad_fn.name() == expected.grad_fn.name()
    if name in _ONE_NODE:
        assert _node_names(got.grad_fn) == _node_names(expected.grad_fn)


def test_cross_entropy_node_chain_and_gradient():
    # torch: NllLossBackward0 -> LogSoftmaxBackward0 -> AccumulateGrad, and the gradient
    # flows through the composite's records unchanged
    x = tj.randn(5, 4, requires_grad=True)
    loss = tj.nn.functional.cross_entropy(x, tj.tensor([0, 3, 1, 1, 2]))
    node = loss.grad_fn
    assert type(node).__name__ == "NllLossBackward0"
    log_softmax = node.next_functions[0][0]
    assert type(log_softmax).__name__ == "LogSoftmaxBackward0"
    assert type(log_softmax.next_functions[0][0]).__name__ == "AccumulateGrad"
    assert loss.grad_fn is node
    loss.backward()
    tx = torch.tensor(x.detach().numpy(), requires_grad=True)
    torch.nn.functional.cross_entropy(tx, torch.tensor([0, 3, 1, 1, 2])).backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_viz_draws_composite_nodes():
    w = tj.randn(6, 3, requires_grad=True)
    loss = tj.nn.functional.embedding(tj.tensor([1, 2, 2]), w).sum()
    labels = [label for _, label, _ in tj.viz.backward_graph(loss)[0]]
    assert "EmbeddingBackward0" in labels and "IndexBackward0" not in labels
