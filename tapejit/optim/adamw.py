"""AdamW: Adam with decoupled weight decay, as torch.optim.AdamW."""
from tapejit.optim.adam import Adam

__all__ = ["AdamW"]


class AdamW(Adam):
    """Adam whose weight decay shrinks the parameter (``p *= 1 - lr * weight_decay``) instead
    of entering the moment estimates; default ``weight_decay=1e-2`` as in torch."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, maximize=False, foreach=None, capturable=False,
                 differentiable=False, fused=None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach,
                         maximize=maximize, capturable=capturable, differentiable=differentiable,
                         fused=fused, decoupled_weight_decay=True)

    def __setstate__(self, state):
        super().__setstate__(state)
        # As torch: whatever a loaded state says, AdamW's weight decay stays decoupled.
        for group in self.param_groups:
            group["decoupled_weight_decay"] = True
