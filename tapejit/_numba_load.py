"""tapejit's on-disk cache of compiled code: where it is, whom it trusts, how it loads.

Where.  One folder, ``cache_dir()``: ``$TAPEJIT_CACHE_DIR``, else a folder for this
installation and Python in the user's cache directory (``platformdirs.user_cache_dir``,
``~/.cache/tapejit/...`` on Linux), never the installed package, which may be read-only.
It holds the generated sweep modules (``tapejit/codegen.py``) and Numba's cache of every
``_jit.sweep`` function: the generated modules' in ``__pycache__`` beside them, that of
tapejit's own modules under ``numba/``.  With ``$NUMBA_CACHE_DIR`` set, Numba's entries go
there instead, where Numba would put them (a CI lane relies on that to keep bounds-checked
code apart).

Trust.  What is in that folder runs in this process: the generated modules' Python, and
Numba's entries, which are pickles.  So a folder is used only if ``private_dir`` finds that
no other user can change its contents: it is the user's own and writable by no one else,
and each parent belongs to the user or root and is writable by no one else either (unless
sticky, as ``/tmp`` is: others cannot rename what is in it).  Folders tapejit makes are
mode 0o700.  Where that fails, nothing is cached and a warning says why; there is no
fallback to a shared folder.

Faults.  Each file of Numba's cache carries a SHA-256 of its contents (``_CheckedCacheFile``),
so a truncated or garbled entry is never unpickled: it reads as missing and is compiled and
written again.  An entry that passes its checksum and still fails to load is deleted and
compiled again.  A cache that cannot be written (full disk, read-only folder) leaves the
compiled code in memory for the process.  Each kind of fault warns once per process.

Loading without the compiler's set-up.  Before a Numba dispatcher loads compiled code from
its on-disk cache, Numba "refreshes" its CPU target, as it does before compiling: it imports
some forty modules of its own (array maths and linear algebra, which import SciPy's, typed
containers, random, polynomials, ...) and installs their typing and lowering registries.
That is about 0.15 s and 30,000 objects in every process, a large part of SPEC section 5's
start-up budget, and the interpreter's collections at exit walk those objects again.

Code read from the cache is already lowered and linked: what it calls at run time are
Numba's C helpers (their symbols are registered when Numba is imported) and its runtime
(NRT, registered on first use).  So tapejit's cached entry points (``_jit.sweep``) use
``SweepCache``, whose load registers the runtime and nothing else.  A cache miss compiles
through Numba's compiler, which refreshes the target itself; a load that fails for any
reason is retried the usual way.

Numba's check that SciPy's BLAS is there (with the integer width its build expects) runs
when Numba imports its array maths, which such a process may never do.  ``ensure_blas``
runs that check before tapejit first loads the sweeps of its ``linalg`` group
(``tape.sweeps``); tapejit's products call Numba's C helper ``numba_xxgemm``
(``ops/_blas.py``), which imports SciPy's BLAS itself at the first product.
"""
import hashlib
import io
import logging
import os
import pickle
import stat
import sys
import time
import uuid
import warnings

import numba
from numba.core import config

try:    # Numba's internals (pyproject.toml's Numba range is the one tested with them)
    from numba.core.caching import (CompileResultCacheImpl, FunctionCache, IndexDataCacheFile,
                                    _CacheLocator, _SourceFileBackedLocatorMixin)
    from numba.core.runtime import rtsys
    _MISSING_INTERNALS = None
except ImportError as e:    # another Numba's layout: nothing is cached (disk_cached warns)
    _MISSING_INTERNALS = e
    CompileResultCacheImpl, FunctionCache, IndexDataCacheFile, _CacheLocator, _SourceFileBackedLocatorMixin = (
        type(name, (), {}) for name in ("CompileResultCacheImpl", "FunctionCache", "IndexDataCacheFile",
                                        "_CacheLocator", "_SourceFileBackedLocatorMixin"))

from tapejit import threads

# The Numba versions tapejit is tested with (pyproject.toml's dependency), for warnings.
TESTED_NUMBA = "numba>=0.68,<0.69"
# The package name tapejit/codegen.py gives the generated sweep modules.
GENERATED_PACKAGE = "tapejit._sweeps"
# INFO when a first use compiles (what, why, then how long it took): see SweepCache
log = logging.getLogger("tapejit")
_blas_checked = [False]
_default_dir = []
_warned = set()


def warn_once(kind, message):
    """A ``UserWarning``, the first time this process meets a fault of this ``kind``."""
    if kind not in _warned:
        _warned.add(kind)
        warnings.warn(message, UserWarning, stacklevel=3)


def not_cached(reason):
    warn_once("not cached", f"tapejit: compiled code is not cached on disk ({reason}); every "
                            "process compiles its sweeps again, seconds per op group.  Set "
                            "TAPEJIT_CACHE_DIR to a folder that only you can write to.")


def cache_dir():
    """``$TAPEJIT_CACHE_DIR``, else this installation's folder in the user's cache directory
    (one per package path and Python version, so that two installations never overwrite
    each other's sweeps)."""
    chosen = os.environ.get("TAPEJIT_CACHE_DIR")
    if chosen:
        return os.path.abspath(chosen)
    if not _default_dir:
        import platformdirs
        package = os.path.dirname(os.path.realpath(__file__))
        key = hashlib.sha256(package.encode()).hexdigest()[:12]
        python = f"{sys.implementation.name}-{sys.version_info[0]}{sys.version_info[1]}"
        _default_dir.append(os.path.join(platformdirs.user_cache_dir("tapejit", appauthor=False),
                                         f"{python}-{key}"))
    return _default_dir[0]


def private_dir(path):
    """The real path of folder ``path``, made (mode 0o700, and any missing parents) if it is
    not there, once it is sure that no other user can change what is in it.  Raises
    ``OSError`` naming the fault otherwise."""
    path = os.path.abspath(path)
    missing = []
    existing = path
    while not os.path.isdir(existing) and os.path.dirname(existing) != existing:
        missing.append(existing)
        existing = os.path.dirname(existing)
    if missing:                 # nothing is made in a folder that is not safe already
        _check(os.path.realpath(existing), parent_of=path)
        for folder in reversed(missing):
            try:
                os.mkdir(folder, 0o700)
            except FileExistsError:
                pass            # made meanwhile by another process; checked below
    real = os.path.realpath(path)
    _check(real)
    return real


def _check(real, parent_of=None):
    """Raise unless only this user can change what is in folder ``real``: its own folder,
    writable by no one else, in parents of the user's or root's that no one else can write
    to (or sticky).  With ``parent_of``, ``real`` is to hold that folder: it may be root's
    or sticky too."""
    st = os.stat(real)
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(f"{real} is not a folder")
    if os.name != "posix":
        return                  # Windows: the user's profile folders are private by their ACLs
    uid = os.getuid()
    folder, of = real, ""
    if parent_of is None:
        if st.st_uid != uid:
            raise PermissionError(f"{real} belongs to another user (uid {st.st_uid})")
        if _others_can_write(st):
            raise PermissionError(f"others can write to {real} (mode {stat.filemode(st.st_mode)})")
        folder, of = os.path.dirname(real), f", a parent of {real}"
        st = os.stat(folder)
    else:
        of = f", a parent of {parent_of}"
    while True:
        if st.st_uid not in (0, uid):
            raise PermissionError(f"{folder}{of}, belongs to another user (uid {st.st_uid})")
        if _others_can_write(st) and not st.st_mode & stat.S_ISVTX:
            raise PermissionError(f"others can write to {folder}{of} (mode {stat.filemode(st.st_mode)})")
        if os.path.dirname(folder) == folder:
            return
        folder = os.path.dirname(folder)
        st = os.stat(folder)


def _others_can_write(st):
    if st.st_mode & stat.S_IWOTH:
        return True
    return bool(st.st_mode & stat.S_IWGRP) and not _own_group(st.st_gid)


def _own_group(gid):
    """Whether ``gid`` is the user's private group (named after the user, no other member),
    where a umask of 002 makes folders group-writable and that is no one else's write."""
    try:
        import grp
        import pwd
        name = pwd.getpwuid(os.getuid()).pw_name
        group = grp.getgrgid(gid)
    except (ImportError, KeyError):
        return False
    return gid == os.getgid() and group.gr_name == name and set(group.gr_mem) <= {name}


def write_atomically(path, data):
    """``data`` into ``path`` through a temporary file beside it: readers see the old file or
    the new one, never part of one, and a write that fails (a full disk) leaves no file."""
    tmp = f"{path}.{uuid.uuid4().hex[:16]}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with open(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class _PrivateLocator(_SourceFileBackedLocatorMixin, _CacheLocator):
    """Numba's entries for a function of ``py_file``: under ``$NUMBA_CACHE_DIR`` where Numba
    would put them; else those of a generated module in ``__pycache__`` beside it (in
    ``cache_dir()``: the folder stays valid if moved), those of tapejit's own modules under
    ``numba/`` in ``cache_dir()``, named as Numba names them from the source's folder.
    Never in the installed package, never in Numba's user-wide folder."""

    def __init__(self, py_func, py_file):
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        if config.CACHE_DIR:
            self._cache_path = os.path.join(config.CACHE_DIR, self.get_suitable_cache_subpath(py_file))
        elif py_func.__module__.startswith(GENERATED_PACKAGE + "."):
            self._cache_path = os.path.join(os.path.dirname(py_file), "__pycache__")
        else:
            self._cache_path = os.path.join(cache_dir(), "numba", self.get_suitable_cache_subpath(py_file))

    def get_cache_path(self):
        return self._cache_path

    def ensure_cache_path(self):
        private_dir(self._cache_path)

    @classmethod
    def from_function(cls, py_func, py_file):
        return cls(py_func, py_file) if os.path.isfile(py_file) else None


class _PrivateCacheImpl(CompileResultCacheImpl):
    _locator_classes = [_PrivateLocator]


_MAGIC = b"tapejit numba cache 1\n"
_DIGEST = len(_MAGIC) + 32


class _CheckedCacheFile(IndexDataCacheFile):
    """Numba's index and data files, each written as ``_MAGIC``, the SHA-256 of the rest,
    then Numba's own contents.  A file that fails the check was truncated (a full disk, a
    killed process) or garbled: it reads as missing, so the function is compiled again and
    the file overwritten, and its bytes are never unpickled."""

    def _load_index(self):
        body = self._read_checked(self._index_path)
        if body is None:
            return {}
        stream = io.BytesIO(body)
        try:
            if pickle.load(stream) != self._version:
                return {}       # another Numba's: its pickles may not load in this one
            stamp, overloads = pickle.loads(stream.read())
        except Exception as e:
            _damaged(self._index_path, e)
            return {}
        return overloads if stamp == self._source_stamp else {}

    def _save_index(self, overloads):
        body = pickle.dumps(self._version, protocol=-1) + self._dump((self._source_stamp, overloads))
        self._write_checked(self._index_path, body)

    def _load_data(self, name):
        path = self._data_path(name)
        body = self._read_checked(path)
        if body is None:
            raise FileNotFoundError(path)    # the caller's "no entry": compile and save again
        return pickle.loads(body)

    def _save_data(self, name, data):
        self._write_checked(self._data_path(name), self._dump(data))

    @staticmethod
    def _read_checked(path):
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        body = data[_DIGEST:]
        if data[:len(_MAGIC)] == _MAGIC and hashlib.sha256(body).digest() == data[len(_MAGIC):_DIGEST]:
            return body
        _damaged(path, "its checksum does not match its contents")
        return None

    @staticmethod
    def _write_checked(path, body):
        write_atomically(path, _MAGIC + hashlib.sha256(body).digest() + body)


def _damaged(path, why):
    warn_once("damaged", f"tapejit: discarded a damaged entry of the compiled-code cache, {path} "
                         f"({why}); compiling it again.")


class SweepCache(FunctionCache):
    """A dispatcher's on-disk cache in tapejit's private folder, with checked files, whose
    loads skip the target's refresh and whose faults never stop a computation (see above)."""

    _impl_class = _PrivateCacheImpl

    def __init__(self, py_func):
        super().__init__(py_func)
        private_dir(self._cache_path)
        self._cache_file = _CheckedCacheFile(self._cache_path, self._impl.filename_base,
                                             self._cache_file._source_stamp)

    def load_overload(self, sig, target_context):
        rtsys.initialize(target_context)
        try:
            cres = self._load_overload(sig, target_context)
        except Exception:   # not expected (another Numba's internals?): Numba's own load
            cres = self._usual_load(sig, target_context)
        if cres is None:        # Numba compiles it now, then calls save_overload
            self._compiling = (_compile_label(self._py_func, sig), time.perf_counter())
            log.info("compiling %s %s: not in the compiled-code cache yet (first use on this install, "
                     "or tapejit changed); cached afterwards", self._compiling[0], _dtype_of(sig))
        return cres

    def _usual_load(self, sig, target_context):
        """Numba's own load, which refreshes the target first; an entry it cannot load
        either (it passed its checksum) is deleted, so no later process fails on it."""
        try:
            return super().load_overload(sig, target_context)
        except Exception as e:
            self._discard()
            _damaged(os.path.join(self._cache_path, self._impl.filename_base + ".nbi"),
                     f"{type(e).__name__}: {e}")
            return None

    def save_overload(self, sig, data):
        compiling = self.__dict__.pop("_compiling", None)
        if compiling is not None:
            log.info("compiled %s %s in %.1f s", compiling[0], _dtype_of(sig), time.perf_counter() - compiling[1])
        try:
            self._save_overload(sig, data)
        except Exception as e:
            warn_once("not saved", f"tapejit: could not save compiled code in {self._cache_path} "
                                   f"({type(e).__name__}: {e}); this process keeps it in memory.")

    def _discard(self):
        """Delete this function's index and data files."""
        base = self._impl.filename_base
        try:
            names = os.listdir(self._cache_path)
        except OSError:
            return
        for name in names:
            if name == base + ".nbi" or (name.startswith(base + ".") and name.endswith(".nbc")):
                try:
                    os.unlink(os.path.join(self._cache_path, name))
                except OSError:
                    pass


def _compile_label(py_func, sig):
    """What is compiling, for the log: an op's sweep (``forward_add``: the forward sweep of
    op add and the ops sharing its kernel) by its op and group, an entry point by its name."""
    module = py_func.__module__
    if module.startswith(GENERATED_PACKAGE + ".sweep_"):
        group = module[len(GENERATED_PACKAGE + ".sweep_"):]
        for kind in ("backward_elementwise", "backward", "forward"):
            if py_func.__name__.startswith(kind + "_"):
                return f"the {kind} sweep of op {py_func.__name__[len(kind) + 1:]} (op group {group})"
    if module == GENERATED_PACKAGE + ".sweeps":
        return f"the sweeps' entry point {py_func.__name__}"
    return f"{module}.{py_func.__name__}"


def _dtype_of(sig):
    """``(float32)``: the float dtypes among a signature's arrays (the arena's), or ''."""
    names = []
    for ty in getattr(sig, "args", sig):
        dtype = getattr(ty, "dtype", ty)        # an array's, or a number type's own
        if dtype is not None and str(dtype).startswith("float") and str(dtype) not in names:
            names.append(str(dtype))
    return f"({', '.join(names)})" if names else ""


def disk_cached(dispatcher):
    """``dispatcher`` with its compiled code cached by ``SweepCache``.  Left uncached if its
    function has no source file (a generated module compiled in memory: tapejit/codegen.py
    says why) or no private folder can hold its cache (a warning says why)."""
    py_func = getattr(dispatcher, "py_func", None)
    if py_func is None or not hasattr(dispatcher, "_cache"):
        return dispatcher       # NUMBA_DISABLE_JIT: a plain function
    if not os.path.isfile(py_func.__code__.co_filename):
        return dispatcher
    if _MISSING_INTERNALS is not None:
        not_cached(f"Numba {numba.__version__} lacks the internals of its cache that tapejit's loader "
                   f"uses, {_MISSING_INTERNALS}; tapejit is tested with {TESTED_NUMBA}")
        return dispatcher
    try:
        dispatcher._cache = SweepCache(py_func)
    except (AttributeError, TypeError) as e:    # another Numba's cache layout
        not_cached(f"{type(e).__name__}: {e}; Numba {numba.__version__}'s cache differs from the one "
                   f"tapejit's loader knows, tested with {TESTED_NUMBA}")
    except Exception as e:      # an unsafe or unwritable folder
        not_cached(f"{type(e).__name__}: {e}")
    return dispatcher


def ensure_blas():
    """Numba's check that SciPy's BLAS is there, with the integer width Numba expects."""
    if not _blas_checked[0]:
        from numba.np.linalg import ensure_blas
        ensure_blas()
        _blas_checked[0] = True
        threads.blas_loaded()   # a thread count set before SciPy's BLAS was loaded
