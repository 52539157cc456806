"""A cancelled task stops its host piece as Ctrl-C stops a run: within a poll, not at the piece's end.

distributed cannot interrupt a running task: cancelling it (``client.cancel``, its client
closed, Ctrl-C in the driver) only marks it on its worker (``cancelled``, then ``released``),
and the worker's thread stays busy until the function returns.  A host block already asks
between pieces whether it is still wanted (``eagle_dask.task.still_wanted``); a piece itself can
last long (the first one of a team of ``T`` threads holds ``4 T`` whole chunks).

While a piece runs (``watching``), one watcher thread per worker process looks at the task's
state every ``POLL`` seconds (the thread ends once nothing has been watched for ``LINGER``
seconds).  When the task is no longer wanted, it raises ``Abandoned`` in the task's thread --
the thread that waits for the host engine's team, where Ctrl-C lands in a driver -- and only
while that thread waits there (``eagle.host.waiting_for_team``): raised while
it loads or compiles the kernel, the exception could leave a lock held (the module's file lock,
which every process of the host would then wait for), so the watcher waits for its next look.
The host engine treats it as it treats Ctrl-C (``eagle.host``: every tile is told to stop at its
next sample, the team is waited for, the exception goes on), so the worker's threads are free
within about ``POLL`` plus the engine's own wait poll (0.25 s).

The exception is raised at most once per piece, and only while the piece runs: the watcher
frees the piece's slot as it raises (``_fire``), and leaving ``watching`` clears one that was
raised but not yet delivered, and raises it there instead.  A raised exception is delivered at the
thread's next bytecode check, which may fall inside ``watching``'s own exit: the slot is free
already, so the watcher still ends once no piece is watched, and a later piece starts it again.
"""
from __future__ import annotations

import ctypes
import threading
import time

from eagle.host import waiting_for_team

#: seconds between two looks at the watched tasks' states
POLL = 0.1
#: seconds the watcher thread stays with nothing to watch before it ends: the pieces of the next
#: blocks find it running (starting a thread per block cost a short block a tenth of its time)
LINGER = 2.0


class Abandoned(Exception):
    """The client released this task while it ran (a cancelled or interrupted run)."""


_LOCK = threading.Lock()
_WATCHED = {}            # thread ident -> _Watch
_WATCHER = None


class _Watch:
    __slots__ = ("wanted", "fired")

    def __init__(self, wanted):
        self.wanted, self.fired = wanted, False


def _raise_in(ident, exc) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(exc) if exc else None)


def _watch_loop():
    global _WATCHER
    idle_since = time.monotonic()
    while True:
        with _LOCK:
            if _WATCHED:
                idle_since = None
            elif idle_since is None:
                idle_since = time.monotonic()
            if not _WATCHED and time.monotonic() - idle_since >= LINGER:
                _WATCHER = None
                return
            watched = list(_WATCHED.items())
        for ident, w in watched:
            try:
                gone = not w.wanted()
            except Exception:  # noqa: BLE001 - the worker closing: leave the piece to end on its own
                gone = False
            if gone and waiting_for_team(ident):        # never while it loads or compiles
                with _LOCK:
                    _fire(ident, w)
        threading.Event().wait(POLL)


def _fire(ident, w):
    """``Abandoned`` raised once in thread ``ident`` for its watch ``w``, whose slot is freed at
    once (the caller holds ``_LOCK``)."""
    if _WATCHED.get(ident) is w and not w.fired:
        w.fired = True
        del _WATCHED[ident]
        _raise_in(ident, Abandoned)


class watching:
    """Context: while its body runs, ``Abandoned`` is raised in this thread once ``wanted()`` is
    False (see the module docstring)."""

    def __init__(self, wanted):
        self.watch = _Watch(wanted)

    def __enter__(self):
        global _WATCHER
        with _LOCK:
            _WATCHED[threading.get_ident()] = self.watch
            if _WATCHER is None:
                _WATCHER = threading.Thread(target=_watch_loop, name="eagle-dask-cancel", daemon=True)
                _WATCHER.start()
        return self

    def __exit__(self, kind, exc, tb):
        ident = threading.get_ident()
        with _LOCK:
            if _WATCHED.get(ident) is self.watch:
                del _WATCHED[ident]
            fired = self.watch.fired
            if fired:
                _raise_in(ident, None)          # raised but not delivered yet: cleared, raised below
        if fired and not isinstance(exc, Abandoned):
            raise Abandoned("the client released this task while it ran")
        return False
