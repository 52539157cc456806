"""Workers start numba before they join (``eagle_dask.warm``, a preload of eagle's clusters)."""
from __future__ import annotations

import logging

import pytest

pytest.importorskip("distributed")

import eagle  # noqa: E402
import eagle.exec as eexec  # noqa: E402
import eagle_dask  # noqa: E402
from eagle import plan as eplan  # noqa: E402
from eagle_dask import DaskPartition, warm  # noqa: E402
from eagle_dask.cluster import _worker_class  # noqa: E402
from tests import kernels as K  # noqa: E402


def _preload_names(dask_worker):
    return [p.name for p in dask_worker.preloads]


def test_local_cluster_workers_start_numba_before_they_join():
    with eagle_dask.local_cluster(n_workers=2) as client:
        client.wait_for_workers(2, timeout=120)
        states = client.run(warm.started)
        assert len(states) == 2
        for address, state in states.items():
            assert "error" not in state, (address, state)
            assert state.get("seconds", 0) > 0, (address, state)
        assert all(warm.PRELOAD in names for names in client.run(_preload_names).values())
        # and the first run on those workers has the bits of one process
        plugin = eagle.deploy(K.oscillator)
        ref = eplan.plan(plugin, structure=eexec.HostTeam).run(**K.inputs("oscillator", 301))
        got = eplan.plan(plugin, structure=DaskPartition.on(client, progress=False)).run(**K.inputs("oscillator", 301))
        assert K.same_bits(K.as_dict(plugin, ref), K.as_dict(plugin, got))


def test_a_users_own_preloads_are_kept():
    assert warm.preloads(None) == [warm.PRELOAD]
    assert warm.preloads("mine") == ["mine", warm.PRELOAD]
    assert warm.preloads(("a", "b")) == ["a", "b", warm.PRELOAD]
    assert warm.preloads(["a", warm.PRELOAD]) == ["a", warm.PRELOAD]


@pytest.mark.parametrize("options", [None, {"preload": ["mine"]}, {"preload": "mine", "nthreads": 2}])
def test_mpi_workers_get_the_preload(options):
    """``initialize`` and ``serve`` build their workers' options here."""
    _, opts, _ = _worker_class(None, 1, options, None)
    assert opts["preload"][-1] == warm.PRELOAD
    assert opts["preload"].count(warm.PRELOAD) == 1
    if options and "preload" in options:
        assert opts["preload"][0] == "mine"
    if options:
        assert {k: v for k, v in opts.items() if k != "preload"} == {k: v for k, v in options.items() if k != "preload"}


def test_a_warm_up_that_fails_leaves_the_worker_starting(monkeypatch, caplog):
    def broken():
        raise OSError("no compiler here")
    monkeypatch.setattr(warm, "STARTED", {})
    monkeypatch.setattr(warm, "warm", broken)

    class Worker:
        address = "tls://127.0.0.1:1"

    with caplog.at_level(logging.WARNING, logger="eagle_dask.warm"):
        assert warm.dask_setup(Worker()) is None
    assert warm.started() == {"error": "OSError: no compiler here"}
    assert "tls://127.0.0.1:1" in caplog.text and "no compiler here" in caplog.text

