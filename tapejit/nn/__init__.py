"""``tapejit.nn``: modules, parameters, layers, losses, ``init`` and ``functional``."""
from tapejit.nn import functional, init
from tapejit.nn.containers import ModuleList, Sequential
from tapejit.nn.layers import (
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
from tapejit.nn.loss import (
           BCEWithLogitsLoss,
           CrossEntropyLoss,
           L1Loss,
           MSELoss,
           NLLLoss,
)
from tapejit.nn.module import Module
from tapejit.nn.parameter import Parameter
from tapejit.nn import utils  # noqa: F401

__all__ = [
           "GELU",
           "BCEWithLogitsLoss",
           "CrossEntropyLoss",
           "Dropout",
           "Embedding",
           "Flatten",
           "Identity",
           "L1Loss",
           "LayerNorm",
           "Linear",
           "MSELoss",
           "Module",
           "ModuleList",
           "NLLLoss",
           "Parameter",
           "ReLU",
           "Sequential",
           "Sigmoid",
           "Softplus",
           "Tanh",
           "functional",
           "init",
]
