"""``tapejit.nn``: modules, parameters, layers, losses, ``init`` and ``functional``."""
from tapejit.nn import functional, init
from tapejit.nn.containers import ModuleList, Sequential
from tapejit.nn.layers import (
           ELU,
           GELU,
           Dropout,
           Embedding,
           Flatten,
           Identity,
           LayerNorm,
           LeakyReLU,
           Linear,
           LogSoftmax,
           ReLU,
           Sigmoid,
           SiLU,
           Softmax,
           Softplus,
           Tanh,
)
from tapejit.nn.loss import (
           BCELoss,
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
           "ELU",
           "GELU",
           "BCELoss",
           "BCEWithLogitsLoss",
           "CrossEntropyLoss",
           "Dropout",
           "Embedding",
           "Flatten",
           "Identity",
           "L1Loss",
           "LayerNorm",
           "LeakyReLU",
           "Linear",
           "LogSoftmax",
           "MSELoss",
           "Module",
           "ModuleList",
           "NLLLoss",
           "Parameter",
           "ReLU",
           "Sequential",
           "Sigmoid",
           "SiLU",
           "Softmax",
           "Softplus",
           "Tanh",
           "functional",
           "init",
]
