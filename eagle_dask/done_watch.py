"""How the driver waits for a numpy-mode run's blocks: their tasks, and the arena's done flags.

A block's task reports its end worker -> scheduler -> client, each hop batched (every 2 to 5 ms):
the driver hears of a block 2.5 to 4.5 ms after it returned, and of a second block one batch
later still.  A block that ran in the driver's arena says it is done in its own flag
(``eagle_dask.shm.MappedBlock.mark_done``) and drops its lock on it when it returns; the driver
looks at the flags (``SharedRun.done``) and takes such a block for finished at once.  Its task
still ends as usual; the run holds its future (``eagle_dask.eager.Held``) and never looks at it
again.  A block that fails never says it is done: its task's error comes through the scheduler.

While a block in the arena is pending the flags and the futures are polled.  A run like one
before it (the same kernel, samples, scalar Params and number of blocks: ``kind``) waits on its
tasks alone (distributed's wait: no polling) until ``EARLY`` of the time the fastest of the last
``LAST`` such runs took (``TOOK``) has passed, then polls every ``NEAR`` of it; a run of a new
kind, or of a kind that took less than ``QUIET_FROM``, polls from the start, the pause growing with
the time waited (``SHARE`` of it).  Pauses are at least ``FIRST_PAUSE`` and at most ``MAX_PAUSE``.
Only arena runs are timed.
With no block in the arena pending the wait is distributed's own (``distributed.wait``).
"""
from __future__ import annotations

import time
from concurrent.futures import CancelledError

from .recent import Recent, scalars

#: seconds of the first pause and the most a pause grows to; a pause's share of the time waited
#: so far (a new kind of run); the share of an expected run's time waited on the tasks alone, and
#: a pause's share of it after that
FIRST_PAUSE = 50e-6
MAX_PAUSE = 0.01
SHARE = 0.04
EARLY = 0.85
NEAR = 0.01
#: seconds a run of the kind must have taken for the next to wait on its tasks first: a shorter one
#: polls from the start (a few dozen looks), the way back from distributed's wait costing more
QUIET_FROM = 0.02


#: how long the last ``LAST`` runs of each kind took, from their blocks' submission to their last
#: block done
TOOK = Recent()
LAST = 5


def kind(plugin, n, params, blocks):
    """A run's kind: its kernel, samples, scalar Params and number of blocks."""
    return (plugin.key, n, scalars(params), blocks)


class DoneWatch:
    """The waits of one run (``shared``: its ``SharedRun``; ``kind``: its ``kind``, or None)."""

    def __init__(self, shared, kind=None):
        self.shared, self.kind = shared, kind
        self.since = time.monotonic()               # its blocks went out
        took = TOOK.get(kind) if kind is not None else None
        fastest = min(took) if took else None          # of the last few: a slow one is noise
        self.expected = fastest if fastest is not None and fastest >= QUIET_FROM else None

    def wait(self, pending, bound):
        """(the futures of ``pending`` -- {future: block} -- that are done, the blocks done in the
        arena whose futures are not), as soon as one is not empty, or both empty after ``bound``
        seconds."""
        if not (self.shared.tells_done() and any(b.shared for b in pending.values())):
            return self._tasks(pending, bound), []
        deadline = time.monotonic() + bound
        if self.expected is not None:
            quiet = self.since + EARLY * self.expected - time.monotonic()
            if quiet > 0:
                done = self._tasks(pending, min(quiet, bound))
                if done or time.monotonic() >= deadline:
                    return done, []
        while True:
            done = [f for f in pending if f.done()]
            early = [b for f, b in pending.items() if b.shared and f not in done and self.shared.done(b.part.base)]
            now = time.monotonic()
            if done or early or now >= deadline:
                return done, early
            share = NEAR * self.expected if self.expected is not None else SHARE * (now - self.since)
            time.sleep(min(MAX_PAUSE, max(FIRST_PAUSE, share), deadline - now))

    def finished(self):
        """The run's last block is done: its time kept for the next run of its kind -- a run
        through the arena only (one through fresh segments or the messages takes longer, and the
        arena run after it would wait on its tasks alone for most of its time)."""
        if self.kind is not None and self.shared.tells_done():
            took = (TOOK.get(self.kind) or ())[-(LAST - 1):]
            TOOK.put(self.kind, (*took, time.monotonic() - self.since))

    @staticmethod
    def _tasks(pending, bound):
        from distributed import TimeoutError as DaskTimeout
        from distributed import wait
        try:
            wait(list(pending), timeout=bound, return_when="FIRST_COMPLETED")
        except (DaskTimeout, TimeoutError, CancelledError):
            pass                                    # looked at by the caller, block by block
        return [f for f in pending if f.done()]
