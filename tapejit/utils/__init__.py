"""``tapejit.utils``: ``data`` (datasets and the DataLoader), as ``torch.utils``."""
from tapejit.utils import data  # noqa: F401
