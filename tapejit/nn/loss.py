"""Loss modules (torch's ``nn.modules.loss``): thin wrappers over the loss functions of
``tapejit.nn.loss_functions`` holding the options (class weights are buffers, as in torch,
so they appear in ``state_dict``)."""
from tapejit.nn import loss_functions as losses
from tapejit.nn.module import Module


class _Loss(Module):
    def __init__(self, reduction="mean"):
        super().__init__()
        losses.check_reduction(reduction)
        self.reduction = reduction


class _WeightedLoss(_Loss):
    def __init__(self, weight=None, reduction="mean"):
        super().__init__(reduction)
        self.register_buffer("weight", weight)


class MSELoss(_Loss):
    def forward(self, input, target):
        return losses.mse_loss(input, target, reduction=self.reduction)


class L1Loss(_Loss):
    def forward(self, input, target):
        return losses.l1_loss(input, target, reduction=self.reduction)


class NLLLoss(_WeightedLoss):
    def __init__(self, weight=None, ignore_index=-100, reduction="mean"):
        super().__init__(weight, reduction)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return losses.nll_loss(input, target, self.weight, ignore_index=self.ignore_index,
                               reduction=self.reduction)


class CrossEntropyLoss(_WeightedLoss):
    def __init__(self, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
        super().__init__(weight, reduction)
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing

    def forward(self, input, target):
        return losses.cross_entropy(input, target, self.weight, ignore_index=self.ignore_index,
                                    reduction=self.reduction, label_smoothing=self.label_smoothing)


class BCELoss(_WeightedLoss):
    def forward(self, input, target):
        return losses.binary_cross_entropy(input, target, self.weight, reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    def __init__(self, weight=None, reduction="mean", pos_weight=None):
        super().__init__(reduction)
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input, target):
        return losses.binary_cross_entropy_with_logits(input, target, self.weight, reduction=self.reduction,
                                                       pos_weight=self.pos_weight)


class SmoothL1Loss(_Loss):
    def __init__(self, size_average=None, reduce=None, reduction="mean", beta=1.0):
        super().__init__(losses.legacy_reduction(size_average, reduce, reduction))
        self.beta = beta

    def forward(self, input, target):
        return losses.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class HuberLoss(_Loss):
    def __init__(self, reduction="mean", delta=1.0):
        super().__init__(reduction)
        self.delta = delta

    def forward(self, input, target):
        return losses.huber_loss(input, target, reduction=self.reduction, delta=self.delta)


class KLDivLoss(Module):
    """Not a ``_Loss``: ``'batchmean'`` is a valid reduction here only."""

    def __init__(self, size_average=None, reduce=None, reduction="mean", log_target=False):
        super().__init__()
        self.reduction = losses.legacy_reduction(size_average, reduce, reduction)
        self.log_target = log_target

    def forward(self, input, target):
        return losses.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)


class CosineSimilarity(Module):
    def __init__(self, dim=1, eps=1e-8):
        super().__init__()
        self.dim = dim
        self.eps = eps

    def forward(self, x1, x2):
        return losses.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    def __init__(self, p=2.0, eps=1e-6, keepdim=False):
        super().__init__()
        self.norm = p
        self.eps = eps
        self.keepdim = keepdim

    def forward(self, x1, x2):
        return losses.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)


class CosineEmbeddingLoss(_Loss):
    def __init__(self, margin=0.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(losses.legacy_reduction(size_average, reduce, reduction))
        self.margin = margin

    def forward(self, input1, input2, target):
        return losses.cosine_embedding_loss(input1, input2, target, margin=self.margin, reduction=self.reduction)


class MarginRankingLoss(_Loss):
    def __init__(self, margin=0.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(losses.legacy_reduction(size_average, reduce, reduction))
        self.margin = margin

    def forward(self, input1, input2, target):
        return losses.margin_ranking_loss(input1, input2, target, margin=self.margin, reduction=self.reduction)


class TripletMarginLoss(_Loss):
    def __init__(self, margin=1.0, p=2.0, eps=1e-6, swap=False, size_average=None, reduce=None, reduction="mean"):
        super().__init__(losses.legacy_reduction(size_average, reduce, reduction))
        self.margin = margin
        self.p = p
        self.eps = eps
        self.swap = swap

    def forward(self, anchor, positive, negative):
        return losses.triplet_margin_loss(anchor, positive, negative, margin=self.margin, p=self.p, eps=self.eps,
                                          swap=self.swap, reduction=self.reduction)


class PoissonNLLLoss(_Loss):
    def __init__(self, log_input=True, full=False, size_average=None, eps=1e-8, reduce=None, reduction="mean"):
        super().__init__(losses.legacy_reduction(size_average, reduce, reduction))
        self.log_input = log_input
        self.full = full
        self.eps = eps

    def forward(self, log_input, target):
        return losses.poisson_nll_loss(log_input, target, log_input=self.log_input, full=self.full, eps=self.eps,
                                       reduction=self.reduction)


class GaussianNLLLoss(_Loss):
    def __init__(self, *, full=False, eps=1e-6, reduction="mean"):
        super().__init__(reduction)
        self.full = full
        self.eps = eps

    def forward(self, input, target, var):
        return losses.gaussian_nll_loss(input, target, var, full=self.full, eps=self.eps, reduction=self.reduction)


class MultiLabelSoftMarginLoss(_WeightedLoss):
    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean"):
        super().__init__(weight, losses.legacy_reduction(size_average, reduce, reduction))

    def forward(self, input, target):
        return losses.multilabel_soft_margin_loss(input, target, weight=self.weight, reduction=self.reduction)


class SoftMarginLoss(_Loss):
    def __init__(self, size_average=None, reduce=None, reduction="mean"):
        super().__init__(losses.legacy_reduction(size_average, reduce, reduction))

    def forward(self, input, target):
        return losses.soft_margin_loss(input, target, reduction=self.reduction)


class HingeEmbeddingLoss(_Loss):
    def __init__(self, margin=1.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(losses.legacy_reduction(size_average, reduce, reduction))
        self.margin = margin

    def forward(self, input, target):
        return losses.hinge_embedding_loss(input, target, margin=self.margin, reduction=self.reduction)


class MultiMarginLoss(_WeightedLoss):
    def __init__(self, p=1, margin=1.0, weight=None, size_average=None, reduce=None, reduction="mean"):
        super().__init__(weight, losses.legacy_reduction(size_average, reduce, reduction))
        if p not in (1, 2):
            raise ValueError("only p == 1 and p == 2 supported")
        if weight is not None and weight.dim() != 1:
            raise ValueError(f"MultiMarginLoss: expected weight to be None or 1D tensor, got {weight.dim()}D instead")
        self.p = p
        self.margin = margin

    def forward(self, input, target):
        return losses.multi_margin_loss(input, target, p=self.p, margin=self.margin, weight=self.weight,
                                        reduction=self.reduction)
