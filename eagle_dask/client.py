"""The client eagle's clusters hand out (``local_cluster``, ``connect``, ``initialize``).

A ``distributed.Client`` that

* joins a computed dask array on the driver, from blocks fetched straight from the workers that
  hold them (``eagle_dask.client_join``), not on one worker and then through the scheduler;
* on ``close`` first ends every computation still waiting on it with eagle's reason: a lazy
  run's output is computed by the user's own ``.compute()``, where no eagle code runs, and
  distributed alone says only ``cancelled for reason: unknown``;
* sends to the scheduler at most every ``SEND_INTERVAL`` seconds (distributed's client: 10 ms,
  its workers and scheduler to each other: 2-5 ms): a run's submission that follows the last
  message by less than that waits for it, so back-to-back small runs took 10 ms at least.
"""
from __future__ import annotations

from distributed import Client

from . import client_join
from .keys import kernel_of

#: seconds between two messages of the client to the scheduler, at least (see the docstring)
SEND_INTERVAL = 0.002
#: the reason a computation still waiting when its client closed is given
CLOSED_REASON = "the eagle client closed"


def closed_message(keys) -> str:
    """What a computation that was still waiting on ``keys`` when its client closed is told."""
    kernels = sorted({k for k in map(kernel_of, keys) if k is not None})
    which = f" (kernel {', '.join(repr(k) for k in kernels)})" if kernels else ""
    return (f"eagle_dask: the client was closed (client.close(), or the end of its `with` block) while "
            f"this result{which} was computed; nothing of it is kept: compute it again with a client "
            f"that stays open until the result is back")


class EagleClient(Client):
    """``distributed.Client``; a computed dask array is joined on the driver from its blocks
    (``get``); on ``close``, whatever is still pending ends in a ``FutureCancelledError`` whose
    reason and message say the client closed and what to do."""

    def get(self, dsk, keys, *args, sync=True, asynchronous=None, direct=None, **kwargs):
        """``Client.get`` (what ``.compute()`` and ``dask.compute`` call): every result fetched
        straight from the worker that holds it unless ``direct=False``, and every dask array
        among ``keys`` fetched as its blocks and concatenated here (``eagle_dask.client_join``)."""
        direct = True if direct is None else direct
        cut = None
        if sync and not (asynchronous or self.asynchronous):
            cut = client_join.split(dsk, keys)
        if cut is None:
            return super().get(dsk, keys, *args, sync=sync, asynchronous=asynchronous, direct=direct, **kwargs)
        fetch, joined = cut
        fetched = super().get(dsk, fetch, *args, sync=sync, asynchronous=asynchronous, direct=direct, **kwargs)
        return client_join.join(keys, fetched, joined)

    async def _ensure_connected(self, *args, **kwargs):
        await super()._ensure_connected(*args, **kwargs)
        comm = getattr(self, "scheduler_comm", None)
        if comm is not None and hasattr(comm, "interval"):
            comm.interval = SEND_INTERVAL

    def close(self, *args, **kwargs):
        if self.status not in ("closing", "closed") and getattr(self, "futures", None):
            try:
                self.sync(self._eagle_end_pending)
            except Exception:  # noqa: BLE001 - the close goes on; distributed's own reason then
                pass
        return super().close(*args, **kwargs)

    async def _eagle_end_pending(self):
        # on the client's loop, where a FutureState may be touched; popped, so distributed's
        # release at close does not cancel them again without a reason
        pending = [k for k, st in list(self.futures.items()) if st.status == "pending"]
        if not pending:
            return
        msg = closed_message(pending)
        for k in pending:
            st = self.futures.pop(k, None)
            if st is not None:
                st.cancel(reason=CLOSED_REASON, msg=msg)
