"""Optimizers with torch.optim's API and update rules: ``tj.optim.SGD(model.parameters(), lr=0.1)``.

SGD, Adam, AdamW and RMSprop update each parameter with one compiled pass; the rarer
optimizers (Adagrad, Adadelta, Adamax, NAdam, RAdam, ASGD, LBFGS) with NumPy operations
in torch's order, which needs no compilation on first use.
"""
from tapejit.optim import lr_scheduler
from tapejit.optim.adadelta import Adadelta
from tapejit.optim.adagrad import Adagrad
from tapejit.optim.adam import Adam
from tapejit.optim.adamax import Adamax
from tapejit.optim.adamw import AdamW
from tapejit.optim.asgd import ASGD
from tapejit.optim.lbfgs import LBFGS
from tapejit.optim.nadam import NAdam
from tapejit.optim.optimizer import Optimizer, required
from tapejit.optim.radam import RAdam
from tapejit.optim.rmsprop import RMSprop
from tapejit.optim.sgd import SGD

__all__ = ["ASGD", "SGD", "Adadelta", "Adagrad", "Adam", "AdamW", "Adamax", "LBFGS", "NAdam",
           "Optimizer", "RAdam", "RMSprop", "lr_scheduler", "required"]
