"""Optimizers with torch.optim's API and update rules: ``tj.optim.SGD(model.parameters(), lr=0.1)``.

Each step updates the parameters' arrays in place with one compiled pass per parameter.
"""
from tapejit.optim import lr_scheduler
from tapejit.optim.adam import Adam
from tapejit.optim.adamw import AdamW
from tapejit.optim.optimizer import Optimizer, required
from tapejit.optim.rmsprop import RMSprop
from tapejit.optim.sgd import SGD

__all__ = ["SGD", "Adam", "AdamW", "Optimizer", "RMSprop", "lr_scheduler", "required"]
