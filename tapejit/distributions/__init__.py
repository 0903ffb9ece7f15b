"""``tj.distributions``: torch.distributions' API and numbers for the common distributions.

``Normal``, ``Uniform``, ``Exponential``, ``Laplace``, ``MultivariateNormal`` (reparameterised
``rsample``), ``Gamma``, ``Beta``, ``Dirichlet`` (``rsample`` through implicit
reparameterisation of gamma samples), ``Bernoulli``, ``Categorical``, ``Poisson``,
``Binomial``; ``kl_divergence`` and ``register_kl``; ``constraints``.  Samples come from
tapejit's generator (``tj.manual_seed``), so they are not torch's bits, only draws from the
same distribution.
"""
from tapejit.distributions import constraints
from tapejit.distributions.bernoulli import Bernoulli
from tapejit.distributions.beta import Beta
from tapejit.distributions.binomial import Binomial
from tapejit.distributions.categorical import Categorical
from tapejit.distributions.dirichlet import Dirichlet
from tapejit.distributions.distribution import Distribution
from tapejit.distributions.exponential import Exponential
from tapejit.distributions.gamma import Gamma
from tapejit.distributions.kl import kl_divergence, register_kl
from tapejit.distributions.laplace import Laplace
from tapejit.distributions.multivariate_normal import MultivariateNormal
from tapejit.distributions.normal import Normal
from tapejit.distributions.poisson import Poisson
from tapejit.distributions.uniform import Uniform

__all__ = ["Bernoulli", "Beta", "Binomial", "Categorical", "Dirichlet", "Distribution", "Exponential", "Gamma",
           "Laplace", "MultivariateNormal", "Normal", "Poisson", "Uniform", "constraints", "kl_divergence",
           "register_kl"]
