"""Devices: tapejit computes on the CPU only, and says so.

Scripts written for PyTorch pick a device first (``torch.cuda.is_available()``,
``torch.device("cpu")``, ``tensor.to(device)``, ``device=`` arguments).  These work for
the CPU; asking for any other device raises, as a CPU-only PyTorch build does, instead
of silently computing somewhere else than the script asked.
"""


class device:
    __slots__ = ("type", "index")

    def __init__(self, type, index=None):
        if isinstance(type, device):
            type, index = type.type, type.index
        name, _, number = str(type).partition(":")
        if name != "cpu":
            raise RuntimeError(
                f"tapejit runs on the CPU only; device {str(type)!r} is not available "
                f"(as in a CPU-only PyTorch build)")
        self.type = "cpu"
        self.index = int(number) if number else index

    def __repr__(self):
        return "device(type='cpu')" if self.index is None else f"device(type='cpu', index={self.index})"

    def __str__(self):
        return "cpu" if self.index is None else f"cpu:{self.index}"

    def __eq__(self, other):
        if isinstance(other, str):
            other = _parse(other)
        return isinstance(other, device) and other.type == self.type

    def __hash__(self):
        return hash(self.type)

    def __reduce__(self):
        # By value, in every pickle protocol (slots alone need protocol 2 and a BUILD).
        return device, (self.type, self.index)


def _parse(text):
    try:
        return device(text)
    except RuntimeError:
        return None


CPU = device("cpu")


def check(d):
    """A ``device=`` argument: None or the CPU in any spelling; anything else raises."""
    if d is not None and not isinstance(d, device):
        device(d)


def set_default_device(d):
    check(d)


def get_default_device():
    return CPU


class cuda:
    """``torch.cuda`` as a CPU-only build reports it."""

    @staticmethod
    def is_available():
        return False

    @staticmethod
    def device_count():
        return 0

    @staticmethod
    def manual_seed(seed):
        pass

    @staticmethod
    def manual_seed_all(seed):
        pass


class accelerator:
    """``torch.accelerator``: none here."""

    @staticmethod
    def is_available():
        return False

    @staticmethod
    def current_accelerator(check_available=False):
        return None
