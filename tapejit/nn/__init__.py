"""``tapejit.nn``: modules, parameters, layers, losses, ``init`` and ``functional``."""
from tapejit.nn import functional, init  # noqa: F401
from tapejit.nn.containers import ModuleList, Sequential  # noqa: F401
from tapejit.nn.layers import (  # noqa: F401
                               GELU,
                               Dropout,
                               Embedding,
                               Flatten,
                               Identity,
                               LayerNorm,
                               Linear,
                               ReLU,
                               Sigmoid,
                               Softplus,
                               Tanh,
)
from tapejit.nn.loss import (  # noqa: F401
                               BCEWithLogitsLoss,
                               CrossEntropyLoss,
                               L1Loss,
                               MSELoss,
                               NLLLoss,
)
from tapejit.nn.module import Module  # noqa: F401
from tapejit.nn.parameter import Parameter  # noqa: F401
