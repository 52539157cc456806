"""The tables a numpy-mode Dask run keeps on the workers (``eagle_dask.tables``): found again
by dtype, shape and bytes, trimmed least recently used first, keyed by a random token (never a
digest of the bytes), and a send that loses a worker ends within the run's ``timeout=``.

Each run's bits are compared with plain per-sample Python (``tests.table_kernels``' references)
or numpy, never with another run of the code under test.
"""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

import eagle.exec as eexec
from eagle import plan as eplan
from tests import launch
from tests.table_kernels import data, interp, interp_reference, poly2d, poly2d_reference

pytest.importorskip("distributed")


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.fixture(scope="module")
def client():
    with launch.local_client(2) as c:
        yield c


def _dask(client, **kw):
    import eagle_dask
    return eagle_dask.DaskPartition.on(client, progress=False, **kw)


def _poly(client, c, n=257, seed=5):
    rng = np.random.default_rng(seed)
    u, v = rng.standard_normal(n), rng.standard_normal(n)
    got = eplan.plan(poly2d, structure=_dask(client)).run(u=u, v=v, c=c)
    want = poly2d_reference(u, v, c)
    host = eplan.plan(poly2d, structure=eexec.HostTeam).run(u=u, v=v, c=c)
    assert same(host, want)
    return got, want


# -- issue 28: a kept table is found again by dtype, shape and bytes ---------------------------------

def test_same_bytes_other_shape_is_its_own_table(client):
    c34 = np.random.default_rng(1).standard_normal((3, 4))
    got, want = _poly(client, c34)
    assert same(got, want)
    c43 = c34.reshape(4, 3).copy()                      # the same 96 bytes, another shape
    got, want = _poly(client, c43)
    assert same(got, want)


def test_same_bytes_other_dtype_is_its_own_table(client):
    ci = np.arange(1, 13, dtype=np.int64).reshape(3, 4)
    got, want = _poly(client, ci)
    assert same(got, want)
    cf = ci.view(np.float64)                             # the same bytes read as float64
    got, want = _poly(client, cf)
    assert same(got, want)


# -- issue 31: the store is trimmed least recently used first ------------------------------------------

def test_store_releases_the_least_recently_used_table(client, monkeypatch):
    """With room for two tables: A, B, A again (reused), then C -- B, the least recently used, is
    released; A and C are kept (their next runs send nothing), B is sent again."""
    from eagle_dask import tables
    monkeypatch.setattr(tables, "MAX_TABLES", 2)
    store = tables.store_of(client)
    rng = np.random.default_rng(21)
    a, b, c = (rng.standard_normal((3, 4)) for _ in range(3))

    def run(t):
        sent = store.sent
        got, want = _poly(client, t.copy())
        assert same(got, want)
        return store.sent - sent

    assert [run(a), run(b), run(a), run(c)] == [1, 1, 0, 1]
    assert len(store.entries) == 2
    assert [run(a), run(c)] == [0, 0]
    assert run(b) == 1


# -- issue 28: a worker lost while a table is sent ---------------------------------------------------

@pytest.mark.parametrize("delay", [0.3, 1.0])
def test_worker_killed_during_a_large_table_send_is_bounded_and_forgotten(delay):
    """A worker killed while 100 MB of tables travel: the run ends within its timeout in numpy's
    bits (after a resend) or in eagle's error naming the table and the worker; the next runs
    have numpy's bits (nothing dead kept)."""
    import os
    import threading
    import time

    import psutil

    import eagle_dask
    timeout = 30
    m = 6_250_000
    xs = np.linspace(0.0, 1.0, m)
    ys = np.sin(xs * 7.0)
    x = np.random.default_rng(1).random(1000)
    want = interp_reference(x, xs, ys)
    with eagle_dask.local_cluster(n_workers=2, threads_per_worker=1) as c:
        c.wait_for_workers(2, timeout=120)
        p = eplan.plan(interp, structure=_dask(c, timeout=timeout))
        pid = sorted(c.run(os.getpid).values())[0]
        box = {}

        def go():
            t = time.monotonic()
            try:
                box["out"] = p.run(x=x, xs=xs, ys=ys)
            except Exception as e:  # noqa: BLE001 - judged below
                box["error"] = e
            box["seconds"] = time.monotonic() - t

        th = threading.Thread(target=go, daemon=True)
        th.start()
        time.sleep(delay)
        psutil.Process(pid).kill()
        th.join(timeout + 30)
        assert not th.is_alive(), f"the run did not end within timeout={timeout} s (+30 s)"
        assert box["seconds"] < timeout + 15, box
        if "error" in box:
            msg = str(box["error"])
            assert isinstance(box["error"], (RuntimeError, TimeoutError)), repr(box["error"])
            assert "table 'xs'" in msg or "table 'ys'" in msg, msg
            assert "kernel 'interp'" in msg and "worker" in msg, msg
        else:
            assert same(box["out"], want)
        for _ in range(2):
            assert same(p.run(x=x, xs=xs, ys=ys), want)


def test_kept_table_whose_workers_all_died_is_forgotten_and_sent_again():
    """Every worker holding the kept tables killed (the nannies start new ones): the futures' own
    status still says 'finished', yet the next run sends the tables again and has numpy's bits."""
    import os
    import time

    import psutil

    import eagle_dask
    from eagle_dask.tables import store_of
    a, _ = data(300, seed=4)
    want = interp_reference(**a)
    with eagle_dask.local_cluster(n_workers=2, threads_per_worker=1) as c:
        c.wait_for_workers(2, timeout=120)
        p = eplan.plan(interp, structure=_dask(c, timeout=30))
        assert same(p.run(**a), want)
        sent = store_of(c).sent
        old = c.run(os.getpid)
        for pid in old.values():
            psutil.Process(pid).kill()
        end = time.monotonic() + 120
        while time.monotonic() < end:                      # two new workers, neither of the old ones
            now = set(c.scheduler_info(n_workers=-1)["workers"])
            if len(now) == 2 and not now & set(old):
                break
            time.sleep(0.1)
        assert same(p.run(**a), want)
        assert store_of(c).sent == sent + 2
        assert same(p.run(**a), want) and store_of(c).sent == sent + 2


# -- issue 27: the dashboard's keys carry no digest of a table's bytes -------------------------------

def _digests(v):
    raw = np.ascontiguousarray(v).tobytes()
    from dask.base import tokenize
    out = [hashlib.new(h, raw).hexdigest() for h in ("sha256", "sha1", "md5", "blake2b", "blake2s", "sha512")]
    return out + [hashlib.sha256(np.ascontiguousarray(v)).hexdigest(), tokenize(v)]


def test_table_keys_on_the_scheduler_hold_no_digest_of_the_bytes_and_are_reused(client):
    from eagle_dask.tables import store_of
    a, _ = data(500, seed=13)
    a = {**a, "xs": a["xs"] + 0.5, "ys": a["ys"] * 2.0}          # tables no other test sent
    p = eplan.plan(interp, structure=_dask(client))
    sent = store_of(client).sent
    assert same(p.run(**a), interp_reference(**a))
    assert store_of(client).sent == sent + 2
    names = client.run_on_scheduler(lambda dask_scheduler: [str(k) for k in dask_scheduler.tasks])
    tables = [k for k in names if "eagle-table-" in k]
    assert len(tables) >= 2, names
    for v in (a["xs"], a["ys"]):
        for d in _digests(v):
            assert not any(d[:16] in k for k in names), (d, tables)
    assert same(p.run(**{**a, "xs": a["xs"].copy(), "ys": a["ys"].copy()}), interp_reference(**a))
    assert store_of(client).sent == sent + 2                    # found again by the driver's own map
