"""Sending a numpy-mode run's inputs to the workers, within the run's ``timeout``.

distributed's ``Client.scatter(..., broadcast=True, timeout=t)`` bounds only its wait for a
first worker: a worker lost while the bytes travel can leave it waiting for minutes (its copy
to the dead worker never ends), or end in distributed's raw ``KeyError`` or
``CommClosedError``.  ``scatter_everywhere`` bounds the whole send instead: one scatter, given
what is left of ``timeout`` (``callback_timeout``), tried again under a fresh key on the
workers alive then, at most ``TRIES`` times; a try that failed is forgotten on the scheduler
(nothing half-sent stays held).  A send that does not succeed ends in eagle's error naming
what was sent and the workers that left the cluster while it was sent.

``scatter_to`` sends a block's share of the sliced planes from the driver straight to the
worker that runs the block (``direct=True``: one network crossing, not relayed by the
scheduler); one try, bounded by what is left of ``timeout``; a try that failed is forgotten on
the scheduler and says so (``None``), and the run picks another worker.

``held`` asks the scheduler (one round trip) which of some kept futures still have a worker
holding their data: a future's own ``status`` stays ``finished`` when the only worker holding
a scattered key dies, so a kept input is checked against the scheduler before it is reused.
"""
from __future__ import annotations

import time

#: scatters one send tries at most (the first, and its resends after a lost worker)
TRIES = 3


def _workers(client, bound) -> dict:
    """Address -> name of the cluster's workers now (``{}`` if the scheduler does not answer)."""
    try:
        info = client.sync(client.scheduler.identity, n_workers=-1, callback_timeout=bound)["workers"]
    except Exception:  # noqa: BLE001 - only used to name the workers lost: never fatal here
        return {}
    return {addr: w.get("name", addr) for addr, w in info.items()}


def _forget(client, key):
    """Release whatever the scheduler kept of a failed try (a key on some of the workers)."""
    from distributed import Future
    try:
        Future(key, client).release()
    except Exception:  # noqa: BLE001 - the client is closing: nothing is held any more
        pass


def _errors():
    from distributed import TimeoutError as DaskTimeout
    from distributed.comm.core import CommClosedError
    from asyncio import CancelledError
    return (DaskTimeout, TimeoutError, CancelledError, CommClosedError, OSError, KeyError, ValueError)


def scatter_everywhere(client, key: str, value, timeout: float, what: str):
    """The future of ``value`` scattered to every worker under ``key`` (``key-resend<k>`` on a
    later try), within ``timeout`` seconds in all; else ``TimeoutError`` (the time ran out) or
    ``RuntimeError`` naming ``what`` and the workers lost during the send."""
    start = time.monotonic()
    before = _workers(client, min(timeout, 10.0))
    failures = []
    for attempt in range(TRIES):
        left = timeout - (time.monotonic() - start)
        if left <= 0:
            break
        k = key if not attempt else f"{key}-resend{attempt}"
        try:
            return client.sync(client._scatter, {k: value}, broadcast=True, hash=False, timeout=left,
                               callback_timeout=left)[k]
        except _errors() as exc:
            failures.append(exc)
            _forget(client, k)
    raise _failed(client, what, value, timeout, before, failures, time.monotonic() - start)


async def _send_to(client, key, value, address):
    """``value`` into the memory of the worker at ``address`` under ``key``, then the scheduler told
    it lies there (what ``Client.scatter(..., workers=[address], direct=True)`` does, as one
    coroutine: a bound that cancels it cancels the send, where distributed's own leaves it running
    to fail later, unobserved, on a worker that went silent)."""
    from distributed.protocol import to_serialize
    answer = await client.rpc(address).update_data(data={key: to_serialize(value)})
    await client.scheduler.update_data(who_has={key: [address]}, nbytes=answer["nbytes"], client=client.id)


def scatter_to(client, key: str, value, address: str, timeout: float):
    """The future of ``value`` sent from this process straight to the worker at ``address`` under
    ``key`` within ``timeout`` seconds (the scheduler is told where it lies, and never sees its
    bytes); None if that worker did not take it in time (gone, hung, closing): nothing of the
    try is kept."""
    from distributed import Future
    try:
        client.sync(_send_to, client, key, value, address, callback_timeout=timeout)
    except _errors():
        _forget(client, key)
        return None
    return Future(key, client, state="memory")


def _failed(client, what, value, timeout, before, failures, spent):
    now = _workers(client, 10.0)
    gone = [f"{addr} (name {name})" for addr, name in sorted(before.items()) if addr not in now]
    size = getattr(value, "nbytes", None)
    last = failures[-1] if failures else None
    why = f"{type(last).__name__}: {str(last)[:80]}" if last is not None else "no time left"
    lost = (f"worker(s) {', '.join(gone)} left the cluster during the send" if gone
            else "no worker left the cluster")
    timed_out = spent >= timeout or isinstance(last, TimeoutError)
    cls = TimeoutError if timed_out else RuntimeError
    return cls(f"DaskPartition: sending {what}{f' ({size / 1e6:.0f} MB)' if size else ''} to the workers "
               f"failed {len(failures)} time(s) in {spent:.1f} s of timeout={timeout:g} ({why}); {lost}. "
               "Nothing of it is kept: the next run sends it again (give a slow send a larger "
               "DaskPartition.on(timeout=...))")


def held(client, futures, timeout: float) -> set:
    """The keys of ``futures`` that some worker holds now (asked of the scheduler)."""
    futures = list(futures)
    if not futures:
        return set()
    try:
        where = client.sync(client.scheduler.who_has, keys=[f.key for f in futures], callback_timeout=timeout)
    except _errors() as exc:
        raise TimeoutError(f"DaskPartition: the scheduler did not say within {timeout:g} s which workers hold "
                           f"the inputs kept from earlier runs ({type(exc).__name__}); nothing was run") from None
    return {f.key for f in futures if f.status == "finished" and where.get(f.key)}
