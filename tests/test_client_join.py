"""The road of a lazy run's bytes on one cluster: a computed dask array is joined on the driver
from blocks fetched straight from the workers (``eagle_dask.client_join``), never on one worker;
a block reads only the samples it needs of a neighbour's chunk (``eagle_dask.arrays``' slivers).
References: numpy, and the bits of one process."""
from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
from dask.core import get_dependencies
from distributed import get_task_stream, wait

import eagle
import eagle_dask
from eagle import plan as eplan
from eagle.bits import same_bits
from tests import kernels as K

N, CHUNKS = 100_003, 25_000          # chunks not a multiple of a cell's rows (32)


@pytest.fixture(scope="module")
def client():
    with eagle_dask.local_cluster(n_workers=2, threads_per_worker=1, dashboard=False) as c:
        yield c


def lazy(client, name, n=N, chunks=CHUNKS, min_block=CHUNKS // 2):
    plugin = eagle.deploy(K.CASES[name][0])
    planes = {k: (da.from_array(v, chunks=(chunks,) + v.shape[1:]) if isinstance(v, np.ndarray) else v)
              for k, v in K.inputs(name, n).items()}
    structure = eagle_dask.DaskPartition.on(client, progress=False, min_block=min_block)
    return plugin, eplan.plan(plugin, structure=structure).run(**planes)


def moved(client, compute):
    """What ``compute()`` returns; the keys that moved from one worker to another meanwhile,
    ``{worker: [(key, bytes)]}``; and ``{task key: worker}`` of the tasks the workers ran."""
    client.run(lambda dask_worker: dask_worker.transfer_incoming_log.clear())
    with get_task_stream(client) as stream:
        got = compute()
    logs = client.run(lambda dask_worker: [(str(k), b) for e in dask_worker.transfer_incoming_log
                                           for k, b in e["keys"].items()])
    return got, logs, {str(t["key"]): t["worker"] for t in stream.data}


def joined_on_a_worker(logs, *names):
    """The blocks of results named ``names`` that moved between workers (a join on one worker)."""
    return [(k, b) for log in logs.values() for k, b in log if any(n in k for n in names)]


def reference(name, n=N):
    return K.CASES[name][2](K.inputs(name, n))


def test_every_way_of_computing_a_lazy_result_joins_it_on_the_driver(client):
    """``dask.compute``, ``.compute()`` and ``np.asarray`` of a lazy run's planes and cell (four
    blocks on two workers): numpy's bits and those of one process, and no block of a plane
    moved from one worker to another (dask's ``finalize`` on a worker pulls them all to it)."""
    plugin, res = lazy(client, "oscillator")
    ref, one = reference("oscillator"), K.one_process("oscillator", N)
    assert len(res["x"].chunks[0]) == 4
    (got,), logs, ran = moved(client, lambda: dask.compute(res))
    assert same_bits(ref, got) and same_bits(one, got), "dask.compute: not numpy's bits"
    assert len({w for k, w in ran.items() if "-eagle-block-" in k}) == 2, f"one worker ran every block: {ran}"
    assert not joined_on_a_worker(logs, "-eagle-out-", "-eagle-block-"), logs
    for plane in ("x", "v"):
        x, logs, _ = moved(client, res[plane].compute)
        assert isinstance(x, np.ndarray) and x.shape == (N,) and same_bits(ref[plane], x), plane
        assert not joined_on_a_worker(logs, "-eagle-out-", "-eagle-block-"), (plane, logs)
        assert same_bits(ref[plane], np.asarray(res[plane]))
    energy, _, _ = moved(client, res["energy"].compute)
    assert same_bits(ref["energy"], energy)


def test_mixed_collections_keep_their_shape_and_values(client):
    """Arrays among other collections (a sum, a plain dask array of two axes cut both ways, an
    empty one, a slice, a Delayed) in one ``dask.compute``: the structure asked for, numpy's
    values, and no array's blocks joined on a worker."""
    plugin, y = lazy(client, "axpb")
    ref = reference("axpb")["y"]
    grid = (da.arange(60.0, chunks=7).reshape(6, 10).rechunk((4, 3)) * 2).persist()
    wait(grid)
    empty = da.zeros(0, chunks=5)
    got, logs, _ = moved(client, lambda: dask.compute({"y": y, "sum": y.sum()}, grid, empty, (y[:5], 7)))
    out, g, e, (head, seven) = got
    assert same_bits(ref, out["y"]) and seven == 7
    assert np.isclose(out["sum"], ref.sum())
    assert np.array_equal(g, 2 * np.arange(60.0).reshape(6, 10)) and g.shape == (6, 10)
    assert e.shape == (0,) and e.dtype == np.float64
    assert same_bits(ref[:5], head)
    assert not joined_on_a_worker(logs, "-eagle-block-", grid.name), logs
    # (dask 2026.8 itself mixes up the results of three or more collections with a Delayed
    # among them, with any scheduler: a Delayed is tried beside one array only)
    arr, three = dask.compute(y, dask.delayed(len)([1, 2, 3]))
    assert same_bits(ref, arr) and three == 3
    again = dask.compute(y, direct=False)[0]                # the user's own direct= is kept
    assert same_bits(ref, again)


def test_an_empty_lazy_run_computes_to_empty_planes(client):
    plugin, res = lazy(client, "oscillator", n=0, chunks=5)
    got = dask.compute(res)[0]
    assert got["x"].shape == (0,) and got["v"].shape == (0,) and got["x"].dtype == np.float64
    assert same_bits(reference("oscillator", 0), got)


def test_a_block_takes_only_the_samples_it_reads_of_a_neighbours_chunk(client):
    """Planes persisted with every chunk ``i`` on one worker, cut at 25 000, blocks cut at whole
    rows of the cell (24 992, 49 984, ...): a worker receives an input chunk whole only when it
    ran a block that reads at least half of that chunk; of the others, only the few samples a
    block reads travel.  The bits are numpy's."""
    plugin = eagle.deploy(K.CASES["oscillator"][0])
    inputs = K.inputs("oscillator", N)
    arrays = [k for k, v in inputs.items() if isinstance(v, np.ndarray)]
    table = da.from_array(np.stack([inputs[k] for k in arrays], axis=1), chunks=(CHUNKS, -1)).persist()
    planes = {**inputs, **dict(zip(arrays, dask.persist(*[table[:, j] for j in range(len(arrays))])))}
    wait([planes[k] for k in arrays])
    del table
    plan = eplan.plan(plugin, structure=eagle_dask.DaskPartition.on(client, progress=False, min_block=CHUNKS // 2))
    res = plan.run(**planes)
    cuts = np.concatenate([[0], np.cumsum(res["x"].chunks[0])])
    assert list(cuts) == [0, 24_992, 49_984, 74_976, N]
    # the graph: a block depends on an input chunk itself only where it reads at least half of it
    graph = dict(res["x"].__dask_graph__())
    edges = np.arange(0, N + CHUNKS, CHUNKS).clip(max=N)
    names = {planes[k].name for k in arrays}
    for key in graph:
        if "-eagle-block-" not in str(key):
            continue
        b = key[1]
        for dep in get_dependencies(graph, key):
            if isinstance(dep, tuple) and dep[0] in names:
                i = dep[1]
                reads = min(edges[i + 1], cuts[b + 1]) - max(edges[i], cuts[b])
                assert 2 * reads >= edges[i + 1] - edges[i], f"block {b} depends on chunk {i} whole to read {reads}"
    got, logs, ran = moved(client, lambda: dask.compute(res)[0])
    assert same_bits(reference("oscillator"), got)
    blocks_on = {}
    for key, worker in ran.items():
        if "-eagle-block-" in key:
            blocks_on.setdefault(worker, []).append(int(key.rsplit(",", 1)[1].strip(" )")))
    for worker, log in logs.items():
        for key, nbytes in log:
            if not any(name in key for name in names):
                continue
            i = int(key.rsplit(",", 1)[1].strip(" )"))
            lo, hi = edges[i], edges[i + 1]
            reads = [min(hi, cuts[b + 1]) - max(lo, cuts[b]) for b in blocks_on.get(worker, [])]
            assert any(2 * r >= hi - lo for r in reads), (
                f"{worker} received chunk {i} of an input ({nbytes} bytes) for blocks {blocks_on.get(worker)} "
                f"that read {reads} of its {hi - lo} samples")
