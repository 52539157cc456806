"""How the driver waits for a numpy-mode run's blocks: their tasks, and the arena's done flags.

A block's task reports its end worker -> scheduler -> client, each hop batched (every 2 to 5 ms):
the driver hears of a block 2.5 to 4.5 ms after it returned, and of a second block one batch
later still.  A block that ran in the driver's arena says it is done in its own flag
(``eagle_dask.shm.MappedBlock.mark_done``) and drops its lock on it when it returns; the driver
looks at the flags (``SharedRun.done``) and takes such a block for finished at once.  Its task
still ends as usual; the run holds its future (``eagle_dask.eager.Held``) and never looks at it
again.  A block that fails never says it is done: its task's error comes through the scheduler.

While a block in the arena is pending the flags and the futures are polled: the first look after
``FIRST_PAUSE``, then the pause grows with the time waited (``SHARE`` of it, at most
``MAX_PAUSE``), so a short run is seen finished at once and a long one costs a few looks a second.
With no such block pending the wait is distributed's own (``distributed.wait``).
"""
from __future__ import annotations

import time
from concurrent.futures import CancelledError

#: seconds of the first pause, the most a pause grows to, and its share of the time waited so far
FIRST_PAUSE = 50e-6
MAX_PAUSE = 0.01
SHARE = 0.04


class DoneWatch:
    """The waits of one run (``shared``: its ``SharedRun``); ``since``: when its blocks went out."""

    def __init__(self, shared):
        self.shared = shared
        self.since = time.monotonic()

    def wait(self, pending, bound):
        """(the futures of ``pending`` -- {future: block} -- that are done, the blocks done in the
        arena whose futures are not), as soon as one is not empty, or both empty after ``bound``
        seconds."""
        if not (self.shared.tells_done() and any(b.shared for b in pending.values())):
            return self._tasks(pending, bound), []
        deadline = time.monotonic() + bound
        while True:
            done = [f for f in pending if f.done()]
            early = [b for f, b in pending.items() if b.shared and f not in done and self.shared.done(b.part.base)]
            now = time.monotonic()
            if done or early or now >= deadline:
                return done, early
            pause = min(MAX_PAUSE, max(FIRST_PAUSE, SHARE * (now - self.since)), deadline - now)
            time.sleep(pause)

    @staticmethod
    def _tasks(pending, bound):
        from distributed import TimeoutError as DaskTimeout
        from distributed import wait
        try:
            wait(list(pending), timeout=bound, return_when="FIRST_COMPLETED")
        except (DaskTimeout, TimeoutError, CancelledError):
            pass                                    # looked at by the caller, block by block
        return [f for f in pending if f.done()]
