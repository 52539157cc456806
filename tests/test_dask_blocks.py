"""Lazy blocks that scale with the number of chunks, and one thread budget on any cluster.

* neighbouring chunks are joined into blocks of at least ``min_block`` samples, cut at rows
  of 32 for a kernel with cells; output chunks follow the blocks;
* chunkings of 31, 333, 1000 and mixed give the bits of one process, and a run adds at most
  one task per block plus one per output plane and per cell step (no rechunk);
* on a user's own ``distributed.LocalCluster`` a block's thread team never has more threads
  than the worker: a numpy-mode rank block takes the worker's threads, a lazy block one
  (``EAGLE_NUM_THREADS`` says otherwise).
"""
from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("distributed")

import dask  # noqa: E402
import dask.array as da  # noqa: E402
import eagle  # noqa: E402
import eagle.host  # noqa: E402
from eagle import plan as eplan  # noqa: E402
from eagle.rows import ROW  # noqa: E402
from eagle_dask import DaskPartition, task  # noqa: E402
from eagle_dask.arrays import MIN_BLOCK, block_sizes  # noqa: E402
from tests import kernels as K  # noqa: E402
from tests.launch import local_client  # noqa: E402


def test_block_sizes_join_neighbours_up_to_min_block():
    assert block_sizes(1000, [(100,) * 10], rows=False, min_block=250) == (300, 300, 400)   # short tail joined
    # chunks of 31 with cells: every cut rounded down to a row, then joined up to 200 samples
    assert block_sizes(1000, [(31,) * 32 + (8,)], rows=True, min_block=200) == (224, 224, 224, 328)
    assert block_sizes(1000, [(100,) * 10], rows=False, min_block=5000) == (1000,)
    assert block_sizes(0, [(0,)], rows=True, min_block=64) == (0,)
    assert block_sizes(301, [(50, 200, 51)], rows=False, min_block=1) == (50, 200, 51)
    assert block_sizes(301, [(50, 200, 51), (100, 201)], rows=False, min_block=100) == (100, 201)


CHUNKINGS = {"31": 31, "333": 333, "1000": 1000, "mixed": (5000, 31, 7, 4962, 6000, 4000)}
N, MIN = 20_000, 2500


@pytest.fixture(scope="module")
def client():
    with local_client(2) as c:
        yield c


def run_lazy(plugin, planes, min_block):
    p = eplan.plan(plugin, structure=DaskPartition.on(progress=False, min_block=min_block))
    return K.as_dict(plugin, p.run(**planes))


def without_slivers(added):
    """``added`` less the slivers (``eagle_dask.arrays._overlapping``), and the slivers."""
    slivers = {k for k in added if "-sliver" in str(k[0] if isinstance(k, tuple) else k)}
    return added - slivers, slivers


def added_tasks(out, planes):
    """The keys a run put in the graph: its outputs' graphs less the inputs' keys."""
    keys = {k for v in out.values() for k in dict(v.__dask_graph__())}
    inputs = {k for v in planes.values() if isinstance(v, da.Array) for k in dict(v.__dask_graph__())}
    return keys - inputs


@pytest.mark.parametrize("name", ["axpb", "reductions", "oscillator", "vectors"])
def test_coalesced_blocks_same_bits_and_few_tasks(client, name):
    plugin = eagle.deploy(K.CASES[name][0])
    ref = K.one_process(name, N)
    outputs = [n_ for role, n_ in plugin.arg_spec if role.kind in ("Out", "Mutable")]
    for label, chunks in CHUNKINGS.items():
        planes = {k: (da.from_array(v, chunks=(chunks,) + v.shape[1:]) if isinstance(v, np.ndarray) else v)
                  for k, v in K.inputs(name, N).items()}
        out = run_lazy(plugin, planes, MIN)
        sizes = next(iter(out[o].chunks[0] for o in outputs)) if outputs else None
        if sizes is not None:
            assert sum(sizes) == N and all(s >= MIN for s in sizes), (label, sizes)
            assert all(out[o].chunks[0] == sizes for o in outputs), label       # outputs follow the blocks
            if plugin.cells:
                assert all(s % ROW == 0 for s in sizes[:-1]), (label, sizes)
        added = added_tasks(out, planes)
        assert not any("rechunk" in str(k) for k in added), (label, sorted(added, key=str)[:5])
        # a block reading under half of a neighbour's chunk reads it through a task of its own
        # (the sliver), at most one at each end of each block, for each dask plane
        added, slivers = without_slivers(added)
        blocks = len(sizes) if sizes is not None else len(added) - len(plugin.cells)
        assert len(slivers) <= 2 * (blocks - 1) * sum(hasattr(v, "dask") for v in planes.values()), (label, slivers)
        if not plugin.cells:
            assert not slivers, (label, sorted(slivers, key=str)[:5])   # every cut on a chunk's edge
        assert 1 <= blocks <= N // MIN, (label, blocks)
        multi = len(outputs) > 1 or (outputs and plugin.cells)
        per_block = 1 + (len(outputs) + (1 if plugin.cells else 0) if multi else 0)
        assert len(added) == blocks * per_block + len(plugin.cells), (label, len(added), blocks)
        if not multi:
            assert len(added) <= 2 * blocks + len(plugin.cells)
        got = dict(zip(out, dask.compute(*out.values())))
        assert K.same_bits(ref, got), f"{name}, chunks {label}: not the bits of one process"


def test_default_min_block(client):
    """Chunks of 1000 (not a multiple of 32) under the default: blocks of at least MIN_BLOCK."""
    plugin = eagle.deploy(K.reductions)
    n = 3 * MIN_BLOCK + 1000
    planes = {"x": da.from_array(K.inputs("reductions", n)["x"], chunks=1000)}
    p = eplan.plan(plugin, structure=DaskPartition.on(progress=False))
    out = K.as_dict(plugin, p.run(**planes))
    added, slivers = without_slivers(added_tasks(out, planes))
    assert len(added) == 3 + len(plugin.cells)
    # blocks [0, 65984), [65984, 132000), [132000, n): the second reads the last 16 samples of
    # chunk [65000, 66000) through a sliver; 132000 is a chunk's edge
    assert len(slivers) == 1, sorted(slivers, key=str)
    assert K.same_bits(K.one_process("reductions", n), dict(zip(out, dask.compute(*out.values()))))


def test_on_refuses_a_bad_min_block():
    for bad in (0, -5, 2.5, "big", True):
        with pytest.raises(ValueError, match=r"min_block=.*an integer >= 1"):
            DaskPartition.on(progress=False, min_block=bad)


# -- the thread budget ---------------------------------------------------------------------------
def test_thread_budget_in_this_process(monkeypatch):
    monkeypatch.delenv("EAGLE_NUM_THREADS", raising=False)
    assert eagle.host.num_threads() == eagle.host.cpu_count()
    with eagle.host.thread_budget(1):
        assert eagle.host.num_threads() == 1
        monkeypatch.setenv("EAGLE_NUM_THREADS", "3")
        assert eagle.host.num_threads() == 3                # the environment says otherwise
        monkeypatch.delenv("EAGLE_NUM_THREADS")
    assert eagle.host.num_threads() == eagle.host.cpu_count()


def _set_threads(value):
    if value is None:
        os.environ.pop("EAGLE_NUM_THREADS", None)
    else:
        os.environ["EAGLE_NUM_THREADS"] = value


def teams(client, plugin):
    return sorted(t for ts in client.run(task.teams).values() for k, _, t in ts if k == plugin.name)


@pytest.mark.parametrize("workers, threads", [(2, 1), (1, 2)])
def test_users_local_cluster_teams_fit_the_worker(monkeypatch, workers, threads):
    """A plain ``distributed.LocalCluster`` (no eagle environment): a numpy-mode block's team
    has the worker's threads, a lazy block's one."""
    from distributed import Client, LocalCluster
    monkeypatch.delenv("EAGLE_NUM_THREADS", raising=False)
    plugin = eagle.deploy(K.axpb)
    d = K.inputs("axpb", 200_000)
    with LocalCluster(n_workers=workers, threads_per_worker=threads, processes=True, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as c:
        c.wait_for_workers(workers, timeout=120)
        c.run(_set_threads, None)
        structure = DaskPartition.on(c, progress=False, min_block=50_000)
        c.run(task.clear_received)
        got = eplan.plan(plugin, structure=structure).run(**d)
        assert K.same_bits(got, d["a"] * d["x"] + d["b"])
        assert teams(c, plugin) == [threads] * workers
        c.run(task.clear_received)
        y = eplan.plan(plugin, structure=structure).run(x=da.from_array(d["x"], chunks=50_000), a=d["a"], b=d["b"])
        assert K.same_bits(c.compute(y).result(), d["a"] * d["x"] + d["b"])
        assert teams(c, plugin) == [1] * 4
        c.run(_set_threads, "3")
        c.run(task.clear_received)
        y = eplan.plan(plugin, structure=structure).run(x=da.from_array(d["x"], chunks=50_000), a=d["a"], b=-d["b"])
        c.compute(y).result()
        assert teams(c, plugin) == [3] * 4                   # EAGLE_NUM_THREADS says otherwise


# -- blocks and graph keys: what makes two runs different --------------------------------------------
def _axpb_host(x, a):
    import eagle.exec as eexec
    return eplan.plan(K.CASES["axpb"][0], structure=eexec.HostTeam).run(x=x, a=a, b=-1.25)


def _axpb_lazy(xd, a, min_block):
    p = eplan.plan(K.CASES["axpb"][0], structure=DaskPartition.on(progress=False, min_block=min_block))
    return p.run(x=xd, a=a, b=-1.25)


def _same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_two_chunks_with_one_interior_cut_are_joined(client):
    """Two chunks (150, 151) below min_block: one block, one output chunk, HostTeam's bits."""
    x = np.random.default_rng(8).uniform(-1, 1, 301)
    xd = da.from_array(x, chunks=((150, 151),))
    y = _axpb_lazy(xd, 2.5, 1000)
    assert y.chunks == ((301,),)
    assert _same(y.compute(), _axpb_host(x, 2.5))
    y = _axpb_lazy(xd, 2.5, 1)
    assert y.chunks == ((150, 151),)


def test_runs_differing_only_in_a_param_or_min_block_give_their_own_bits(client):
    """A first run's blocks held on the cluster (persisted) while two runs that differ from it only
    in a Param, or only in min_block, are computed: each has its own HostTeam bits, never the
    first run's blocks served under a shared key."""
    from distributed import wait
    x = np.random.default_rng(4).uniform(-1, 1, 4000)
    xd = da.from_array(x, chunks=1000)
    first = _axpb_lazy(xd, 2.5, 1).persist()
    wait(first, timeout=120)
    for a, min_block in ((3.5, 1), (2.5, 2000)):       # four blocks of 1000; two of 2000
        got = _axpb_lazy(xd, a, min_block).compute()
        assert _same(got, _axpb_host(x, a)), (a, min_block)
    assert _same(first.compute(), _axpb_host(x, 2.5))
