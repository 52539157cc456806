"""Asynchronous clients, and clients that are no longer open.

A ``Client(asynchronous=True)`` used from its event loop cannot block that loop, so a
numpy-mode run there returns ``Pending``: an awaitable that runs the supervised run
(``eagle_dask.eager.EagerRun``) in a thread of the loop's executor.  From that thread every
call to the client blocks as a synchronous client's would, while the loop goes on serving the
client.  Cancelling the awaitable (``asyncio`` cancellation, Ctrl-C in ``asyncio.run``)
cancels the run's blocks.

A closed client is refused before a run touches it, naming the client and what to do.
"""
from __future__ import annotations

import asyncio

#: a client in these states can run nothing
CLOSED = ("closing", "closed", "failed")


def in_event_loop(client) -> bool:
    """Whether ``client`` is asynchronous and this call runs in its event loop."""
    try:
        return bool(client.asynchronous)
    except Exception:  # noqa: BLE001 - a client without a loop: not asynchronous
        return False


def open_client(client, kernel=None):
    """``client``, if it is open; else a RuntimeError naming it and saying what to do."""
    status = getattr(client, "status", None)
    if status in CLOSED or (status is not None and getattr(client, "scheduler", True) is None):
        who = f"kernel {kernel!r}: " if kernel else ""
        name = getattr(client, "id", None) or type(client).__name__
        raise RuntimeError(
            f"{who}DaskPartition's client {name} is {status}: nothing was run. Start a new client (or "
            "eagle_dask.local_cluster()) and pass structure=DaskPartition.on(new_client), or make the new "
            "client the current one")
    return client


class Pending:
    """A numpy-mode run under an asynchronous client: ``await`` it for the run's result."""

    def __init__(self, client, run):
        self.client, self.run = client, run
        self.future = asyncio.get_running_loop().run_in_executor(None, run.run)

    def result(self, finish):
        """A coroutine giving ``finish(rows)`` once the run is done (``Structure.result``)."""
        return self._wait(finish)

    async def _wait(self, finish):
        try:
            rows = await asyncio.shield(self.future)
        except asyncio.CancelledError:
            left = self.run.running()
            if left:
                await self.client.cancel(left)
            raise
        return finish(rows)
