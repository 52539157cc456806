"""A lazy run whose client closes while its result is computed: the user's ``.compute()`` (or a
``persist``'s futures) ends within a bound in a ``FutureCancelledError`` that says, in eagle's
words, that the client closed, which kernel's result was lost and what to do -- not distributed's
``cancelled for reason: unknown``.  Each test closes its own cluster.
"""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

pytest.importorskip("distributed")
da = pytest.importorskip("dask.array")

import eagle  # noqa: E402
import eagle_dask  # noqa: E402
from distributed.client import FutureCancelledError  # noqa: E402
from eagle import plan as eplan  # noqa: E402
from eagle_dask import DaskPartition  # noqa: E402
from tests import kernels as K  # noqa: E402


slow_sine = K.slow_sine


def _running(client, kernel, bound=60.0):
    """Wait until a task of ``kernel`` runs on a worker (at most ``bound`` seconds)."""
    end = time.monotonic() + bound
    while time.monotonic() < end:
        if any(str(k).startswith(f"('{kernel}-eagle") or str(k).startswith(f"{kernel}-eagle")
               for keys in client.processing().values() for k in keys):
            return
        time.sleep(0.05)
    raise AssertionError(f"no task of {kernel} ran within {bound} s")


def _lazy_output(client):
    plan = eplan.plan(eagle.deploy(slow_sine), structure=DaskPartition.on(client))
    # several seconds of work per block: the close always comes while blocks run
    return plan.run(x=da.from_array(np.arange(64.0), chunks=32), steps=30_000_000)


def _said_in_eagles_words(err):
    assert isinstance(err, FutureCancelledError), repr(err)
    text = str(err)
    assert "reason: unknown" not in text, text
    assert "the eagle client closed" in text and "client.close()" in text, text
    assert "compute it again with a client that stays open" in text, text
    return text


def _computed_while_the_client_closes(client, out):
    """The error of ``out.compute()`` in another thread when ``client`` closes while
    ``slow_sine``'s blocks run; the compute must end within 30 s of the close."""
    caught = []

    def compute():
        try:
            out.compute()
        except BaseException as e:  # noqa: BLE001 - looked at below
            caught.append(e)

    t = threading.Thread(target=compute, daemon=True)
    try:
        t.start()
        _running(client, "slow_sine")
    finally:
        start = time.monotonic()
        client.close()
    t.join(30)
    assert not t.is_alive(), "the compute still waits 30 s after its client closed"
    assert time.monotonic() - start < 30
    assert len(caught) == 1, "the compute of a closed client returned a result"
    return caught[0]


def test_a_compute_running_when_its_client_closes_says_so_in_eagles_words():
    client = eagle_dask.local_cluster(n_workers=2, threads_per_worker=1)
    try:
        out = _lazy_output(client)
    except BaseException:
        client.close()
        raise
    _said_in_eagles_words(_computed_while_the_client_closes(client, out))


def test_persisted_lazy_output_lost_with_its_client_names_the_kernel():
    client = eagle_dask.local_cluster(n_workers=2, threads_per_worker=1)
    try:
        kept = _lazy_output(client).persist()
    except BaseException:
        client.close()
        raise
    text = _said_in_eagles_words(_computed_while_the_client_closes(client, kept))
    assert "kernel 'slow_sine'" in text, text
