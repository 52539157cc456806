"""A private directory for each cluster's files (the workers' and scheduler's ``local_directory``).

distributed's default is ``<temporary-directory>/dask-scratch-space`` (``/tmp`` unless configured),
which it reuses whoever made it, puts on ``sys.path`` and locks with ``global.lock``: another user
of the machine who creates it first (mode 0777, with a planted ``zict.py``) runs code in every
worker and in the driver, or stops the next cluster from starting.  Every cluster eagle starts
takes instead:

* :func:`private` -- a fresh directory, mode 0700, made with ``mkdtemp`` under ``$XDG_RUNTIME_DIR``
  (when it is yours and closed to others) or the system's temporary directory, and removed when the
  cluster closes; or the directory the user named, refused by name unless it is theirs and nobody
  else can write to it.
* :func:`unsafe_parts` -- the parts of a path another user could change (``eagle-dask info`` warns).
"""
from __future__ import annotations

import os
import shutil
import stat
import tempfile

#: dask's config key for where its scratch space goes (also ``DASK_TEMPORARY_DIRECTORY``)
CONFIG_KEY = "temporary-directory"
ENV_KEY = "DASK_TEMPORARY_DIRECTORY"


def _closed(st):
    """A directory (not a link) of this user that nobody else can write to."""
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022


def _base():
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        try:
            st = os.lstat(runtime)
        except OSError:
            st = None
        if st is not None and _closed(st) and not st.st_mode & 0o077:
            return runtime
    return None                                   # mkdtemp's own: the system temporary directory


def check_given(path, where):
    """``path`` as the user named it for ``where``: made 0700 if missing; refused unless it is a
    directory (not a link) of this user that nobody else can write to."""
    path = os.path.abspath(os.path.expanduser(os.fspath(path)))
    if not os.path.lexists(path):
        os.makedirs(path, mode=0o700)
    st = os.lstat(path)
    if not _closed(st):
        kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else (
            "not a directory" if not stat.S_ISDIR(st.st_mode) else f"mode {stat.S_IMODE(st.st_mode):04o}")
        raise PermissionError(f"{where}(local_directory={path!r}) is {kind}, owned by uid {st.st_uid}: a "
                              "cluster's directory goes on its workers' sys.path, so it must be yours and "
                              f"writable by you only (mkdir -m 700 a new one, or leave local_directory out)")
    return path


class Private:
    """A cluster's own directory: ``path``; :meth:`remove` deletes it if eagle made it (idempotent)."""

    def __init__(self, given=None, where="local_cluster"):
        self.made = given is None
        if self.made:
            self.path = tempfile.mkdtemp(prefix="eagle-dask-", dir=_base())     # mode 0700
        else:
            self.path = check_given(given, where)

    def env(self):
        """The environment that points dask's temporary directory of a worker process here."""
        return {ENV_KEY: self.path}

    def config(self):
        return {CONFIG_KEY: self.path}

    def remove(self):
        if self.made:
            shutil.rmtree(self.path, ignore_errors=True)


def private(given=None, where="local_cluster"):
    """A :class:`Private` directory: fresh (``given=None``) or the checked one the user named."""
    return Private(given, where)


def unsafe_parts(path):
    """The directories on ``path`` (itself and each parent) another user could write to or owns:
    writable by group or others without the sticky bit, or owned by another user than you or root."""
    out = []
    path = os.path.abspath(path)
    itself = True                 # the sticky bit guards a parent's entries, not files made in the directory
    while True:
        try:
            st = os.lstat(path)
        except OSError:
            st = None
        if st is not None:
            open_to_others = st.st_mode & 0o022 and (itself or not st.st_mode & stat.S_ISVTX)
            if open_to_others or st.st_uid not in (os.getuid(), 0):
                out.append(f"{path} (mode {stat.S_IMODE(st.st_mode):04o}, uid {st.st_uid})")
        parent, itself = os.path.dirname(path), False
        if parent == path:
            return out
        path = parent


def worker_unsafe_parts(dask_worker):
    """:func:`unsafe_parts` of a worker's directory (run on the worker: ``client.run``)."""
    return unsafe_parts(dask_worker.local_directory)


def warnings_for(client):
    """One line per worker whose directory another user of its host could change (empty when none)."""
    found = client.run(worker_unsafe_parts)
    return [f"warning: worker {addr}: its directory is on sys.path and another user can write to "
            f"{', '.join(parts)}: code put there runs as you; restart the workers with local_directory= a "
            "directory only you can write (eagle_dask.local_cluster makes one)" for addr, parts in sorted(found.items())
            if parts]
