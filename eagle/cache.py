"""The disk cache of generated modules: private, verified before import, compiled once per host.

A generated module is written to the cache directory (``cache_dir``: ``EAGLE_CACHE_DIR``, default
``~/.cache/eagle``) under a name derived from a hash of its text **and of everything it depends
on** (``dependencies``): the source files of the modules it imports (eagle's own runtime, each
imported helper and what that helper calls), and the versions of eagle, numba and numpy.  numba
keys its disk cache by one function's own file, so an edited helper or an upgraded eagle gets a
new module, never stale machine code.  numba's own cache files (index and machine code) lie in
the directory's ``__pycache__``, beside the modules.

The directory runs code as its owner, so it must be private: created mode 0700, and a directory
that is not the user's, or that group or others may write, is refused (the default directory is
repaired to 0700 instead).  A cached file is imported only when its content is the text eagle
generated for its name; any other content is replaced, never run (``load_module``).  A module is
published (in ``sys.modules``) only once it has fully run, one thread at a time per name.

``compile_lock`` is a file lock per module name in the cache directory: processes on one host
that compile the same kernel (Dask workers, MPI ranks) compile it once; the others wait
(``EAGLE_COMPILE_WAIT`` seconds at most) and load the compiled code from the cache.
"""
from __future__ import annotations

import ast
import contextlib
import fcntl
import hashlib
import importlib
import importlib.util
import os
import stat
import sys
import sysconfig
import tempfile
import threading
import time
import types

import numba
import numpy as np

from . import __version__
from .syntax import parse

ENV = "EAGLE_CACHE_DIR"
#: seconds a process waits for another one compiling the same module (``EAGLE_COMPILE_WAIT``)
COMPILE_WAIT = 600.0
PYCACHE = "__pycache__"

_GUARD = threading.Lock()
_KEY_LOCKS: dict = {}
_LOCK_FDS: dict = {}
_COMPILED: set = set()


# -- the directory ---------------------------------------------------------------------------------
def default_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "eagle")


def check_private(path: str, repair: bool, what: str = "the eagle cache directory") -> None:
    """Refuse ``path`` unless it is the user's and only the user may write it; with ``repair``,
    a directory of the user's that others may read or write is made 0700 instead."""
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(f"{what} {path!r} is not a directory; set {ENV} to a directory of your own")
    mine = st.st_uid == os.geteuid()
    if mine and repair and st.st_mode & 0o077:
        os.chmod(path, 0o700)
        return
    if not mine:
        why = f"owned by uid {st.st_uid}, not by you (uid {os.geteuid()})"
    elif st.st_mode & 0o022:
        who = "group and others" if st.st_mode & 0o022 == 0o022 else "group" if st.st_mode & 0o020 else "others"
        why = f"writable by {who} (mode {stat.S_IMODE(st.st_mode):04o})"
    else:
        return
    raise PermissionError(f"{what} {path!r} is {why}: a module planted there would run as you, so eagle "
                          f"does not use it.  Fix: chmod 700 {path!r} if it is yours, or set {ENV} to a "
                          "directory of your own with mode 0700")


def cache_dir() -> str:
    """The cache directory, created mode 0700 and checked private (see ``check_private``)."""
    given = os.environ.get(ENV)
    d = os.path.abspath(given or default_dir())
    try:
        os.makedirs(d, mode=0o700, exist_ok=True)
    except OSError as e:
        raise _unusable(d, given, e) from None
    check_private(d, repair=not given)
    if not os.access(d, os.W_OK | os.X_OK):
        raise _unusable(d, given, PermissionError("you cannot write to it"))
    own = os.path.join(d, PYCACHE)              # numba's index and machine code, beside the modules
    os.makedirs(own, mode=0o700, exist_ok=True)
    check_private(own, repair=True, what="numba's cache directory")
    if numba.config.CACHE_DIR:                  # NUMBA_CACHE_DIR moves numba's files out of ``d``
        check_private(numba.config.CACHE_DIR, repair=False, what="numba's cache directory (NUMBA_CACHE_DIR)")
    return d


def _unusable(d: str, given, err: OSError) -> OSError:
    """The error for a cache directory that cannot be made or written, naming where it came from."""
    why = "a file is there" if isinstance(err, FileExistsError) else (
        "a part of the path is a file" if isinstance(err, NotADirectoryError) else err.strerror or str(err))
    source = f"{ENV}={given!r}" if given else f"the default cache directory {d!r} (set {ENV} to move it)"
    kind = NotADirectoryError if isinstance(err, (FileExistsError, NotADirectoryError)) else PermissionError
    return kind(f"eagle's compiled-code cache cannot be made at {d!r} ({why}): {source}; set {ENV} to a "
                "directory of your own (created mode 0700 if missing), e.g. export EAGLE_CACHE_DIR=~/.cache/eagle")


# -- the lock of one module name, between threads and processes ------------------------------------
def _wait_limit() -> float:
    env = os.environ.get("EAGLE_COMPILE_WAIT")
    if not env:
        return COMPILE_WAIT
    try:
        return float(env)
    except ValueError:
        raise ValueError(f"EAGLE_COMPILE_WAIT={env!r} is not a number of seconds") from None


def _lock_fd(path: str) -> int:
    """The open lock file ``path``, kept open for the process (a child after fork opens its own:
    a shared open file would share the lock)."""
    with _GUARD:
        fd, pid = _LOCK_FDS.get(path, (None, None))
        if fd is None or pid != os.getpid():
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            _LOCK_FDS[path] = (fd, os.getpid())
        return fd


@contextlib.contextmanager
def _file_lock(path: str, what: str):
    """Hold the lock file ``path``: the callers hold the name's thread lock, so one thread of a
    process uses its open file at a time, and the lock excludes the other processes."""
    fd = _lock_fd(path)
    limit, deadline, pause = None, None, 0.01
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if limit is None:
                limit = _wait_limit()
                deadline = time.monotonic() + limit
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"{what}: waited {limit:g} s for another process compiling it (lock {path!r}); a "
                    "compile under heavy load can take that long: set EAGLE_COMPILE_WAIT to more seconds, "
                    "or end the process that holds the lock (`fuser` names it)") from None
            time.sleep(pause)
            pause = min(pause * 2, 0.2)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def _key_lock(modname: str) -> threading.Lock:
    with _GUARD:
        return _KEY_LOCKS.setdefault(modname, threading.Lock())


@contextlib.contextmanager
def compile_lock(module):
    """Hold the lock of a generated module's name (from ``load_module``) around its first compile:
    on one host, one process compiles it and the others then load it from numba's cache.  Once a
    call under the lock has returned, the process no longer takes it for that module (a later
    compile for new argument types may then be done by several processes: the same code)."""
    if module.__name__ in _COMPILED:
        yield
        return
    base = os.path.splitext(module.__file__)[0]
    with _key_lock(module.__name__), _file_lock(base + ".lock", f"module {module.__name__}"):
        yield
        _COMPILED.add(module.__name__)


# -- what a generated module depends on -----------------------------------------------------------
_STDLIB = os.path.realpath(sysconfig.get_paths()["stdlib"])
#: packages whose code is covered by their version in the key (numba compiles them itself)
_VERSIONED = ("numpy", "numba", "llvmlite", "math", "cmath")


def _module_file(mod) -> str | None:
    """The source file of a module whose text is part of the key, or None (stdlib, versioned)."""
    name = getattr(mod, "__name__", "")
    if name.split(".")[0] in _VERSIONED or name in sys.builtin_module_names:
        return None
    path = getattr(mod, "__file__", None)
    if not path or not path.endswith(".py") or os.path.realpath(path).startswith(_STDLIB + os.sep):
        return None
    return path


def _code_names(code) -> set:
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _code_names(c)
    return names


def _walk(obj, files: dict, seen: set):
    """Add the files ``obj`` (a module, a function or a numba dispatcher) depends on."""
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, types.ModuleType):
        path = _module_file(obj)
        if path is None:
            return
        files[path] = None
        for value in list(vars(obj).values()):
            if getattr(value, "__module__", None) == obj.__name__:
                _walk(value, files, seen)
        return
    fn = getattr(obj, "py_func", obj)
    if not isinstance(fn, types.FunctionType):
        return
    path = _module_file(sys.modules.get(fn.__module__))
    if path is None:
        return                                 # stdlib, numpy, numba: covered by the versions
    files[path] = None
    for name in _code_names(fn.__code__):
        value = fn.__globals__.get(name)
        if isinstance(value, types.ModuleType) or callable(value):
            _walk(value, files, seen)


def dependencies(source: str) -> str:
    """A digest of what the generated module ``source`` imports: the source files of the modules
    and functions it imports (and, through their globals, what they call), with the versions of
    eagle, numba and numpy."""
    files, seen = {}, set()
    for node in parse(source).body:
        if isinstance(node, ast.Import):
            targets = [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            targets = [(node.module, a.name) for a in node.names]
        else:
            continue
        for modname, attr in targets:
            try:
                mod = importlib.import_module(modname)
            except ImportError:
                continue                       # the import fails in the module itself, by name
            _walk(getattr(mod, attr, mod) if attr else mod, files, seen)
    h = hashlib.sha256(f"eagle {__version__} numba {numba.__version__} numpy {np.__version__}".encode())
    for path in sorted(files):
        try:
            with open(path, "rb") as f:
                h.update(path.encode() + b"\0" + f.read() + b"\0")
        except OSError:
            h.update(path.encode() + b"\0?\0")
    return h.hexdigest()


# -- loading ------------------------------------------------------------------------------------------
def _verified_file(path: str, text: bytes) -> None:
    """Leave at ``path`` exactly ``text``: a file with any other content (edited, planted, cut
    short) is replaced, atomically, mode 0600."""
    try:
        with open(path, "rb") as f:
            if hashlib.sha256(f.read()).digest() == hashlib.sha256(text).digest():
                return
    except FileNotFoundError:
        pass
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")   # mode 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def load_module(tag: str, plugin, source: str):
    """The generated module ``source``, run once per process: its file in the cache checked (or
    written), then the module run from the verified text and published in ``sys.modules``."""
    key = hashlib.sha256((source + "\0" + dependencies(source)).encode()).hexdigest()[:24]
    modname = f"eagle_{tag}_{plugin.name[:40]}_{key}"
    mod = sys.modules.get(modname)
    if mod is not None:
        return mod
    d = cache_dir()
    path = os.path.join(d, modname + ".py")
    with _key_lock(modname):
        mod = sys.modules.get(modname)
        if mod is not None:
            return mod
        with _file_lock(os.path.join(d, modname + ".lock"), f"module {modname}"):
            _verified_file(path, source.encode())
        mod = types.ModuleType(modname)
        mod.__file__ = path
        mod.__spec__ = importlib.util.spec_from_file_location(modname, path)
        # run from the text checked here, not re-read from disk (nor from a .pyc)
        exec(compile(source, path, "exec"), mod.__dict__)
        sys.modules[modname] = mod
    return mod
