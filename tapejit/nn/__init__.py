"""Neural-network building blocks.  ``functional`` is here; modules come with the nn issue."""
from tapejit.nn import functional  # noqa: F401
