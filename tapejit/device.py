"""Devices: tapejit computes on the CPU only, and says so as a CPU-only PyTorch build does.

Scripts written for PyTorch pick a device first (``torch.cuda.is_available()``,
``torch.device("cuda" if ... else "cpu")``, ``tensor.to(device)``, ``device=`` arguments).
Every device torch names can be constructed, as on a CPU-only torch build; putting a
tensor anywhere but the CPU raises that build's error (``AssertionError: Torch not
compiled with CUDA enabled``) instead of silently computing somewhere else than the script
asked.
"""
import re

from tapejit.dtypes import type_name

# torch 2.13's device types, in the order its parse error lists them.
_TYPES = ("cpu", "cuda", "ipu", "xpu", "mkldnn", "opengl", "opencl", "ideep", "hip", "ve", "fpga",
          "maia", "xla", "lazy", "vulkan", "mps", "meta", "hpu", "mtia", "privateuseone")
_DEVICE_STRING = re.compile(r"([a-zA-Z_]+)(?::(0|[1-9][0-9]*))?")
NO_ACCELERATOR = "Cannot access accelerator device when none is available."


def _index_error(index):
    if index < 0:
        return RuntimeError("Device index must not be negative")
    return RuntimeError(NO_ACCELERATOR)   # a bare index means the accelerator's device


class device:
    __slots__ = ("type", "index")

    def __init__(self, type, index=None):
        if isinstance(type, device):
            type, index = type.type, type.index
        elif isinstance(type, int) and not isinstance(type, bool):
            raise _index_error(type)
        elif not isinstance(type, str):
            raise TypeError(f"device() received an invalid combination of arguments - got "
                            f"({type_name(type)}), but expected one of:\n * (torch.device device)\n"
                            f" * (str type, int index = -1)")
        else:
            match = _DEVICE_STRING.fullmatch(type)
            if match is None:
                raise RuntimeError(f"Invalid device string: {type!r}")
            if match.group(1) not in _TYPES:
                raise RuntimeError(f"Expected one of {', '.join(_TYPES)} device type at start of device "
                                   f"string: {type}")
            if match.group(2) is not None:
                if index is not None:
                    raise RuntimeError(f"type (string) must not include an index because index was "
                                       f"passed explicitly: {type}")
                index = int(match.group(2))
            type = match.group(1)
        if index is not None:
            index = int(index)
            if index < 0:
                raise RuntimeError("Device index must not be negative")
        self.type = type
        self.index = index

    def __repr__(self):
        if self.index is None:
            return f"device(type={self.type!r})"
        return f"device(type={self.type!r}, index={self.index})"

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __eq__(self, other):
        if isinstance(other, str):
            other = _parse(other)
        return isinstance(other, device) and other.type == self.type and other.index == self.index

    def __hash__(self):
        return hash((self.type, self.index))

    def __reduce__(self):
        # By value, in every pickle protocol (slots alone need protocol 2 and a BUILD).
        return device, (self.type, self.index)


def _parse(text):
    try:
        return device(text)
    except RuntimeError:
        return None


CPU = device("cpu")


def unavailable(d):
    """The error of a CPU-only torch build for data on device ``d`` (a device, a string
    or an index), or None for the CPU."""
    if isinstance(d, int) and not isinstance(d, bool):
        return _index_error(d)
    if not isinstance(d, device):
        d = device(d)   # a malformed device raises here, as torch's argument parsing
    if d.type == "cpu":
        return None
    if d.type in ("cuda", "xpu"):
        return AssertionError(f"Torch not compiled with {d.type.upper()} enabled")
    if d.type == "meta":   # torch has them even on the CPU; tapejit does not
        return NotImplementedError("tapejit has no meta tensors (shapes without data): only the CPU device")
    return RuntimeError(f"PyTorch is not linked with support for {d.type} devices")


def check(d):
    """A ``device=`` argument or a ``to()`` target: None or the CPU in any spelling;
    any other device raises a CPU-only torch build's error."""
    if d is not None and d is not CPU:
        error = unavailable(d)
        if error is not None:
            raise error


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

    @staticmethod
    def seed():
        pass

    @staticmethod
    def seed_all():
        pass

    @staticmethod
    def is_initialized():
        return False

    @staticmethod
    def empty_cache():
        pass   # no CUDA memory to release, as torch on a CPU-only build

    @staticmethod
    def memory_allocated(device=None):
        return 0

    @staticmethod
    def max_memory_allocated(device=None):
        return 0

    @staticmethod
    def current_device():
        raise AssertionError("Torch not compiled with CUDA enabled")

    @staticmethod
    def synchronize(device=None):
        raise AssertionError("Torch not compiled with CUDA enabled")

    @staticmethod
    def get_device_name(device=None):
        raise AssertionError("Torch not compiled with CUDA enabled")


class accelerator:
    """``torch.accelerator``: none here."""

    @staticmethod
    def is_available():
        return False

    @staticmethod
    def current_accelerator(check_available=False):
        return None


class _Flags:
    """A namespace of settings scripts assign (``torch.backends.cudnn.benchmark = True``):
    kept, and without effect on the CPU, as on a CPU-only torch build."""

    def __init__(self, **flags):
        self.__dict__.update(flags)


class backends:
    """``torch.backends`` as a CPU-only build reports it: no cuDNN, CUDA or MPS."""
    cudnn = _Flags(benchmark=False, deterministic=False, enabled=True, allow_tf32=True,
                   is_available=lambda: False, version=lambda: None)
    cuda = _Flags(is_built=lambda: False)
    mps = _Flags(is_available=lambda: False, is_built=lambda: False)
