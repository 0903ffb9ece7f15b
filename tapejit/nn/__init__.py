"""``tapejit.nn``: modules, parameters, layers, losses, ``init`` and ``functional``."""
from tapejit.nn import functional, init
from tapejit.nn.containers import ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential
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
           Unflatten,
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
from tapejit.nn import hooks  # noqa: F401
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
           "ModuleDict",
           "ModuleList",
           "NLLLoss",
           "Parameter",
           "ParameterDict",
           "ParameterList",
           "ReLU",
           "Sequential",
           "Sigmoid",
           "SiLU",
           "Softmax",
           "Softplus",
           "Tanh",
           "Unflatten",
           "functional",
           "init",
]
