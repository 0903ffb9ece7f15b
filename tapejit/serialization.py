"""``tapejit.save`` / ``tapejit.load``: objects holding tensors (state dicts, optimizer
states, checkpoints) to and from a file.

The file format is tapejit's own: a plain pickle, in which a tensor is its NumPy value and
its ``requires_grad`` flag.  It is not PyTorch's zip format, so PyTorch cannot read these
files, and ``load`` refuses PyTorch's files with an error saying so.

As torch >= 2.6, ``load`` defaults to ``weights_only=True``: it unpickles only tensors,
Parameters, NumPy arrays and scalars, tapejit dtypes and devices, containers and plain
Python values, and raises ``pickle.UnpicklingError`` on anything else (unpickling an
arbitrary object can run arbitrary code).  ``weights_only=False`` loads anything.
"""
import contextlib
import os
import pickle

from tapejit import dtypes

__all__ = ["add_safe_globals", "get_safe_globals", "load", "save"]

_SAFE_GLOBALS = {
    ("builtins", "bytearray"), ("builtins", "complex"), ("builtins", "frozenset"),
    ("builtins", "set"), ("builtins", "slice"),
    ("_codecs", "encode"),   # bytes under pickle protocol 2
    ("collections", "Counter"), ("collections", "OrderedDict"),
    ("tapejit.tensor", "_rebuild"), ("tapejit.tensor", "Size"),
    ("tapejit.nn.parameter", "_rebuild_parameter"),
    ("tapejit.device", "device"),
    ("numpy", "dtype"), ("numpy", "ndarray"),
    # NumPy 2 pickles arrays through numpy._core, NumPy 1 through numpy.core.
    ("numpy._core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "scalar"),
    ("numpy.core.multiarray", "_reconstruct"), ("numpy.core.multiarray", "scalar"),
}
_user_safe_globals = {}

_ZIP_MAGIC = b"PK\x03\x04"
# PyTorch's pre-1.6 format opens with its magic number pickled under protocol 2.
_TORCH_LEGACY_MAGIC = b"\x80\x02\x8a\nl\xfc\x9cF\xf9 j\xa8P\x19"


def add_safe_globals(safe_globals):
    """Let ``load(weights_only=True)`` rebuild these classes or functions too."""
    for obj in safe_globals:
        _user_safe_globals[(obj.__module__, obj.__qualname__)] = obj


def get_safe_globals():
    return list(_user_safe_globals.values())


class _WeightsOnlyUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) in _user_safe_globals:
            return _user_safe_globals[(module, name)]
        if (module, name) in _SAFE_GLOBALS:
            return super().find_class(module, name)
        if module == "tapejit.dtypes" and isinstance(getattr(dtypes, name, None), dtypes.dtype):
            return getattr(dtypes, name)
        raise pickle.UnpicklingError(
            f"Weights only load failed: the file needs {module}.{name}, which "
            "tapejit.load(weights_only=True) does not unpickle: it loads only tensors, "
            "Parameters, NumPy arrays, dtypes, containers and plain Python values. If you "
            "trust the file's source, load it with weights_only=False (unpickling can run "
            f"arbitrary code), or allow this global with "
            f"tapejit.serialization.add_safe_globals([{name}]).")


def _opened(f, mode):
    if isinstance(f, (str, os.PathLike)):
        return open(f, mode)
    return contextlib.nullcontext(f)


def save(obj, f, pickle_module=pickle, pickle_protocol=pickle.DEFAULT_PROTOCOL):
    """Pickle ``obj`` to ``f`` (a path or a binary file object) in tapejit's format (a
    plain pickle, not PyTorch's zip format)."""
    with _opened(f, "wb") as file:
        pickle_module.Pickler(file, protocol=pickle_protocol).dump(obj)


def _refuse_torch_file(file, f):
    """Raise if ``file`` starts like a PyTorch checkpoint; leave its position unchanged."""
    start = file.tell()
    head = file.read(len(_TORCH_LEGACY_MAGIC))
    file.seek(start)
    if head.startswith(_ZIP_MAGIC) or head == _TORCH_LEGACY_MAGIC:
        where = f"{os.fspath(f)!r}" if isinstance(f, (str, os.PathLike)) else "the file"
        raise RuntimeError(
            f"{where} is a PyTorch checkpoint (written by torch.save); tapejit.load reads "
            "only tapejit's own format (a plain pickle written by tapejit.save). Convert it "
            "with PyTorch: torch.load it and rebuild each tensor t as tapejit.tensor(t.numpy()).")


def load(f, map_location=None, pickle_module=None, *, weights_only=None, mmap=None,
         **pickle_load_args):
    """Unpickle an object written by ``tapejit.save`` from ``f`` (a path or a binary file
    object).  ``weights_only`` defaults to True, as in torch >= 2.6 (see the module
    docstring).  tapejit tensors always live on the CPU, so ``map_location`` and ``mmap``
    are accepted and have no effect."""
    if weights_only is None:
        weights_only = pickle_module is None
    if weights_only and pickle_module is not None:
        raise RuntimeError("Can not safely load weights when explicit pickle_module is specified")
    with _opened(f, "rb") as file:
        if getattr(file, "seekable", lambda: False)():
            _refuse_torch_file(file, f)
        if weights_only:
            return _WeightsOnlyUnpickler(file, **pickle_load_args).load()
        return (pickle_module or pickle).Unpickler(file, **pickle_load_args).load()
