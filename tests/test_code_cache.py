"""The cache of generated and compiled code: whom it trusts, and its faults.

Code in the cache runs in the process that loads it (the generated modules' Python, and
Numba's entries, which are pickles), so it is read only from a folder no other user can
write to.  Its faults (damaged entries, no writable folder, a full disk) never stop a
computation: tapejit compiles again, in memory if it must, and warns once.

Each test runs a program in a subprocess with a cache folder of its own.  The program's
tape uses two op groups (arith and sum), so a compile takes seconds, not minutes.
"""
import hashlib
import os
import pickle
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from numba.core import config
from numba.core.caching import _CacheLocator

import tapejit
from tapejit import _jit, _numba_load, codegen, registry

GROUP = "arith"
NAME = codegen.module_name(GROUP)
ENTRY = codegen.module_name()

PROGRAM = textwrap.dedent("""
    import tapejit as tj
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward()
    print("grad", x.grad.tolist())
""")

# Loads a generated module without calling it, so nothing compiles.
LOAD_ONLY = textwrap.dedent(f"""
    from tapejit import codegen
    module = codegen.load_module({GROUP!r})
    print("file", getattr(module, "__file__", None))
""")
LOAD_ENTRY = LOAD_ONLY.replace(f"load_module({GROUP!r})", "load_module()")

# Ownership and modes are POSIX's; on Windows the user's folders are private by their ACLs.
posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX folder ownership and modes")

NOT_CACHED = "compiled code is not cached on disk"
DAMAGED = "discarded a damaged entry of the compiled-code cache"
NOT_SAVED = "could not save compiled code"


def run(script, cache=None, cwd=None, **env_changes):
    """``script`` in a fresh interpreter whose sweep cache is folder ``cache``."""
    env = dict(os.environ)
    for name in ("NUMBA_CACHE_DIR", "TAPEJIT_CACHE_DIR"):
        env.pop(name, None)    # Numba's entries beside the module
    if cache is not None:
        env["TAPEJIT_CACHE_DIR"] = str(cache)
    env.update({name: str(value) for name, value in env_changes.items()})
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                         timeout=900, cwd=cwd or (Path(cache).parent if cache else None))
    assert out.returncode == 0, out.stderr
    return out


def plant_module(folder, marker, forge_record):
    """A module in ``folder`` that carries the right registry hash line and creates
    ``marker`` when imported; with ``forge_record``, also the record of its SHA-256 that
    tapejit would have written for it."""
    text = codegen.group_source(GROUP) + f"\nopen({str(marker)!r}, 'w').close()\n"
    (folder / f"{NAME}.py").write_text(text)
    if forge_record:
        digest = hashlib.sha256(text.encode()).hexdigest()
        (folder / f"{NAME}.sha256").write_text(f"{registry.registry_hash()} {digest}\n")


@posix_only
@pytest.mark.parametrize("how", ["world-writable", "parent world-writable", "another user's"])
def test_a_module_planted_where_others_can_write_is_never_imported(tmp_path, how):
    marker = tmp_path / "planted-code-ran"
    if how == "world-writable":
        folder = tmp_path / "shared"
        folder.mkdir()
        folder.chmod(0o777)
        fault = "others can write to"
    elif how == "parent world-writable":
        (tmp_path / "open").mkdir()
        (tmp_path / "open").chmod(0o777)    # not sticky: anyone may rename "cache" away
        folder = tmp_path / "open" / "cache"
        folder.mkdir(mode=0o700)
        fault = "a parent of"
    else:
        if os.getuid() != 0:
            pytest.skip("giving a folder to another user needs root")
        folder = tmp_path / "theirs"
        folder.mkdir(mode=0o755)
        os.chown(folder, 65534, 65534)
        fault = "belongs to another user"
    plant_module(folder, marker, forge_record=True)
    out = run(LOAD_ONLY, folder, cwd=tmp_path)
    assert not marker.exists()
    assert "file None" in out.stdout                  # made in memory from the generated text
    assert NOT_CACHED in out.stderr and fault in out.stderr
    assert out.stderr.count(NOT_CACHED) == 1


@posix_only
def test_the_same_planted_module_runs_from_a_private_folder(tmp_path):
    """The control for the test above: the planted module is at the path tapejit imports,
    and a forged record makes it pass; only the folder's ownership keeps it out (whoever can
    write to a private folder is the user already)."""
    marker = tmp_path / "planted-code-ran"
    folder = tmp_path / "private"
    folder.mkdir(mode=0o700)
    plant_module(folder, marker, forge_record=True)
    out = run(LOAD_ONLY, folder)
    assert marker.exists()
    assert f"file {folder / NAME}.py" in out.stdout


@pytest.mark.parametrize("record", ["none", "of the generated text"])
def test_a_module_with_the_right_hash_line_and_other_text_is_written_again(tmp_path, record):
    """Only the whole text counts, checked against the SHA-256 tapejit recorded when it wrote
    the file (a header line, or a hash in the file, would prove nothing)."""
    marker = tmp_path / "planted-code-ran"
    folder = tmp_path / "private"
    folder.mkdir(mode=0o700)
    generated = codegen.group_source(GROUP)
    plant_module(folder, marker, forge_record=False)
    assert f'REGISTRY_HASH = "{registry.registry_hash()}"' in (folder / f"{NAME}.py").read_text()
    if record != "none":    # the file was changed after tapejit wrote it
        digest = hashlib.sha256(generated.encode()).hexdigest()
        (folder / f"{NAME}.sha256").write_text(f"{registry.registry_hash()} {digest}\n")
    out = run(LOAD_ONLY, folder)
    assert not marker.exists()
    assert f"file {folder / NAME}.py" in out.stdout
    assert (folder / f"{NAME}.py").read_text() == generated


@posix_only
@pytest.mark.parametrize("private", [False, True])
def test_numba_entries_are_read_only_from_a_private_folder(tmp_path, private):
    """``NUMBA_CACHE_DIR`` is honoured (as Numba does), under the same rule: a planted
    entry (a pickle) is never loaded from a folder others can write to.  The private case is
    the control: the same entry is loaded there, so the planted path is the one read."""
    marker = tmp_path / "planted-pickle-ran"
    numba_dir = tmp_path / "numba"
    numba_dir.mkdir(mode=0o700 if private else 0o777)
    numba_dir.chmod(0o700 if private else 0o777)
    sweeps = tmp_path / "sweeps"
    run(LOAD_ENTRY, sweeps)         # writes the module, so its entries' folder is known
    module_file = str(Path(_numba_load.private_dir(sweeps)) / f"{ENTRY}.py")
    entries = numba_dir / _CacheLocator.get_suitable_cache_subpath(module_file)
    entries.mkdir(mode=0o700)

    class Planted:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    body = pickle.dumps(Planted())
    index = _numba_load._MAGIC + hashlib.sha256(body).digest() + body   # tapejit's layout
    # Numba names a function's index by the line of its first decorator.
    lines = Path(module_file).read_text().splitlines()
    decorator_line = lines.index("def forward(rec, lo, hi, v, ints, floats, table):")
    python = f"py{sys.version_info[0]}{sys.version_info[1]}{getattr(sys, 'abiflags', '')}"
    (entries / f"{ENTRY}.forward-{decorator_line}.{python}.nbi").write_bytes(index)
    script = LOAD_ENTRY + "module.forward._cache.load_overload((), module.forward.targetctx)\n"
    out = run(script, sweeps, cwd=tmp_path, NUMBA_CACHE_DIR=numba_dir)
    assert marker.exists() == private
    assert (NOT_CACHED in out.stderr) == (not private)


@posix_only
def test_private_dir(tmp_path):
    made = tmp_path / "a" / "b"
    assert _numba_load.private_dir(made) == str(made)
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o700
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)          # as /tmp: others cannot rename what is in it
    (sticky / "mine").mkdir(mode=0o700)
    assert _numba_load.private_dir(sticky / "mine") == str(sticky / "mine")
    with pytest.raises(PermissionError, match="others can write to"):
        _numba_load.private_dir(sticky)
    (tmp_path / "file").write_text("")
    with pytest.raises(OSError):
        _numba_load.private_dir(tmp_path / "file")
    with pytest.raises(OSError):
        _numba_load.private_dir(tmp_path / "file" / "below")


@pytest.fixture(scope="module")
def warm_cache(tmp_path_factory):
    """A cache folder where PROGRAM's sweeps are generated and compiled."""
    folder = tmp_path_factory.mktemp("warm")
    out = run(PROGRAM, folder)
    assert "grad [2.0, 4.0]" in out.stdout
    assert list((folder / "__pycache__").glob("*.nbc"))
    return folder


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])


def _garble(path):
    data = bytearray(path.read_bytes())
    for i in range(len(data) // 3, len(data) // 3 + 64):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))


@pytest.mark.slow
@pytest.mark.parametrize("pattern, damage", [("*.nbi", _truncate), ("*.nbc", _truncate),
                                             ("*.nbc", _garble), ("*.pyc", _truncate)],
                         ids=["truncated index", "truncated data", "garbled data", "truncated bytecode"])
def test_a_damaged_cache_entry_is_compiled_again_with_one_warning(tmp_path, warm_cache, pattern, damage):
    folder = tmp_path / "cache"
    shutil.copytree(warm_cache, folder)     # Numba's entries sit beside the module: still valid
    damaged = list((folder / "__pycache__").glob(pattern))
    assert damaged
    for path in damaged:
        damage(path)
    first = run(PROGRAM, folder, PYTHONDONTWRITEBYTECODE=1)
    assert "grad [2.0, 4.0]" in first.stdout
    assert first.stderr.count(DAMAGED) == 1
    second = run(PROGRAM, folder, PYTHONDONTWRITEBYTECODE=1)    # repaired: loads, no warning
    assert "grad [2.0, 4.0]" in second.stdout
    assert DAMAGED not in second.stderr and NOT_SAVED not in second.stderr


@posix_only
@pytest.mark.slow
def test_read_only_package_and_unwritable_home_compute_in_memory(tmp_path):
    package = tmp_path / "site" / "tapejit"
    shutil.copytree(Path(tapejit.__file__).parent, package,
                    ignore=shutil.ignore_patterns("__pycache__", "_sweeps"))
    (tmp_path / "not-a-folder").write_text("")
    unwritable = tmp_path / "not-a-folder"      # any path below it fails, even for root
    before = sorted(p.relative_to(package) for p in package.rglob("*"))
    for path in [package, *package.rglob("*")]:
        path.chmod(0o555 if path.is_dir() else 0o444)
    try:
        out = run(PROGRAM, cwd=tmp_path, PYTHONPATH=package.parent, PYTHONDONTWRITEBYTECODE=1,
                  HOME=unwritable / "home", XDG_CACHE_HOME=unwritable / "cache")
    finally:
        for path in [package, *package.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
    assert "grad [2.0, 4.0]" in out.stdout
    assert out.stderr.count(NOT_CACHED) == 1 and "Not a directory" in out.stderr
    assert sorted(p.relative_to(package) for p in package.rglob("*")) == before


FULL_DISK = textwrap.dedent("""
    import resource, signal
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # a write past the limit fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
""")


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["the module", "Numba's entries"])
def test_a_full_disk_computes_and_leaves_no_temporary_files(tmp_path, stage):
    """Files stop growing at a few kilobytes (RLIMIT_FSIZE: as a full disk, a write fails
    part-way): at writing the generated modules (6 kB and more), or, with room for the
    modules (and their bytecode and Numba's indexes), at saving Numba's entries (30 kB and
    more each)."""
    pytest.importorskip("resource")
    folder = tmp_path / "cache"
    if stage == "the module":
        limit, warning = 4_000, NOT_CACHED
    else:
        run(LOAD_ONLY, folder)                  # writes a module, compiles nothing
        limit, warning = 20_000, NOT_SAVED
    out = run(FULL_DISK.format(limit=limit) + PROGRAM, folder, PYTHONDONTWRITEBYTECODE=1)
    assert "grad [2.0, 4.0]" in out.stdout
    assert out.stderr.count(warning) == 1
    left = [p for p in folder.rglob("*") if p.is_file()]
    if stage == "the module":
        assert left == []
    else:                   # the indexes are small; with no data file they read as missing
        assert {p.suffix for p in left} == {".py", ".sha256", ".pyc", ".nbi"}, left


def test_an_entry_that_passes_its_checksum_but_does_not_load_is_deleted(tmp_path, monkeypatch):
    """Numba's load fails after the checksum (a Numba bug, an object file LLVM refuses):
    the light load, then Numba's own load, then the function's entries are deleted, so
    the next process does not fail the same way, and the caller compiles."""
    monkeypatch.setenv("TAPEJIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(config, "CACHE_DIR", "")
    monkeypatch.setattr(_numba_load, "_warned", set())
    cache = _jit.sweep(_sweep_fixture)._cache
    assert type(cache) is _numba_load.SweepCache
    base = Path(cache.cache_path) / cache._impl.filename_base
    entries = [Path(f"{base}.nbi"), Path(f"{base}.1.nbc"), Path(f"{base}.2.nbc")]
    for path in entries:
        path.write_bytes(b"entry")
    other = Path(cache.cache_path) / "other_function-3.py311.nbi"
    other.write_bytes(b"entry")

    class Target:
        def refresh(self):
            pass

    def load(sig, target_context):
        raise ValueError("cannot load object code")

    monkeypatch.setattr(_numba_load.rtsys, "initialize", lambda ctx: None)
    monkeypatch.setattr(cache, "_load_overload", load)
    with pytest.warns(UserWarning, match="discarded a damaged entry.*cannot load object code"):
        assert cache.load_overload((), Target()) is None
    assert not any(path.exists() for path in entries) and other.exists()


def _sweep_fixture(x):
    return x + 1
