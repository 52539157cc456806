"""Shared-memory segments whose driver died without unlinking them, found and unlinked.

A driver unlinks its segments when a run ends and at interpreter exit (``eagle_dask.shm``).  A
driver killed outright -- ``SIGKILL``, the out-of-memory killer, a batch job past its time, a
Jupyter kernel killed when it does not shut down in time -- runs no exit hook, and its arena (32 MB
or more) would stay in ``/dev/shm``, which is memory, until the machine reboots.

So every segment carries its owner's mark: the driver holds a shared ``flock`` on it
(``hold``) from the moment it makes it until it unlinks it, and the kernel drops that lock
when the process ends, however it ends.  ``sweep``, run by a driver before it makes its first
segment, unlinks the segments of this user whose mark is gone and whose creator (the pid in
the name) is not running, once they are ``AGE`` seconds old: never one of another user, never a
link, never a segment whose driver is alive (its lock stands, in whatever pid namespace it runs).
A worker never takes this lock (it maps segments and locks byte ranges with ``fcntl``, which is
apart from ``flock``).
"""
from __future__ import annotations

import fcntl
import os
import stat
import time
import uuid

#: seconds a segment must have existed before ``sweep`` may take it for an orphan (its maker
#: takes its mark microseconds after making it)
AGE = 60.0


def new_name(prefix) -> str:
    """A new segment's name, ``<prefix><pid>-<token>``: the creator's pid, which ``sweep`` reads."""
    return f"{prefix}{os.getpid()}-{uuid.uuid4().hex[:16]}"


def hold(fd) -> None:
    """The owner's mark on the segment open as ``fd``: kept while ``fd`` is open."""
    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)


def _creator_gone(name, prefix) -> bool:
    """Whether the pid in a ``new_name`` runs no process here (False when unsure)."""
    try:
        pid = int(name[len(prefix):].split("-", 1)[0])
    except ValueError:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def _orphan(path, name, prefix, age, now) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) != 0o600
                or now - st.st_mtime < age or not _creator_gone(name, prefix)):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)     # no owner's mark left on it
        except OSError:
            return False
        try:
            same = os.lstat(path)
        except OSError:
            return False
        if (same.st_dev, same.st_ino) != (st.st_dev, st.st_ino):
            return False
        os.unlink(path)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def sweep(directory, prefix, age=None, keep=()) -> list:
    """Unlink the orphaned segments ``<prefix>*`` of this user in ``directory`` (see the module
    docstring), except the paths in ``keep``; returns the paths unlinked.  Best effort: what
    cannot be looked at is left alone."""
    age = AGE if age is None else age
    try:
        names = [n for n in os.listdir(directory) if n.startswith(prefix)]
    except OSError:
        return []
    now, gone = time.time(), []
    for name in names:
        path = os.path.join(directory, name)
        if path not in keep and _orphan(path, name, prefix, age, now):
            gone.append(path)
    return gone
