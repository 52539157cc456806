"""DaskPartition on dask arrays: lazy runs whose planes never pass through the driver.

Every kernel class gives the bits of one process (``HostTeam``) over regular, irregular and
tiny chunks (not multiples of 32), numpy planes beside dask planes, vector planes, ``n = 0``;
chained runs equal one long run; a kernel raises only when the graph is computed; a worker
killed mid-compute is recomputed from lineage with the same bits; the refusals name the plane;
the driver's memory does not grow with the planes; nothing listens beyond loopback.

One module-scoped cluster of 2 single-thread worker processes (127.0.0.1) serves most tests;
the fault test starts its own.
"""
from __future__ import annotations

import itertools
import os
import pickle
import threading
import time

import numpy as np
import pytest

pytest.importorskip("distributed")
da = pytest.importorskip("dask.array")

import dask  # noqa: E402
import distributed  # noqa: E402

import eagle  # noqa: E402
import eagle.exec as eexec  # noqa: E402
import eagle_dask  # noqa: E402
from eagle import Cell, In, Out, Param  # noqa: E402
from eagle import plan as eplan  # noqa: E402
from eagle.models import oscillator  # noqa: E402
from eagle.rows import ROW  # noqa: E402
from eagle_dask import DaskPartition, task  # noqa: E402
from eagle_dask.arrays import block_sizes  # noqa: E402
from tests import kernels as K  # noqa: E402
from tests.reference import ROW as REFERENCE_ROW  # noqa: E402
from tests.launch import beyond_loopback, listeners, local_client, process_tree  # noqa: E402

WORKERS = 2


@pytest.fixture(scope="module")
def client():
    with local_client(WORKERS) as c:
        yield c


def as_dask(planes, chunks, keep=()):
    """Every plane of ``planes`` a dask array chunked ``chunks`` along samples (``keep``: left numpy)."""
    return {k: (da.from_array(v, chunks=(chunks,) + v.shape[1:]) if isinstance(v, np.ndarray) and k not in keep
                else v) for k, v in planes.items()}


def computed(result):
    keys = list(result)
    return dict(zip(keys, dask.compute(*[result[k] for k in keys])))


def records(client):
    answers = client.run(task.received, on_error="return")
    return [rec for recs in answers.values() if not isinstance(recs, BaseException) for rec in recs]


def lazy_plan(plugin, min_block=None, **kw):
    return eplan.plan(plugin, structure=DaskPartition.on(progress=False, min_block=min_block), **kw)


#: blocks at the chunks' own boundaries (no neighbours joined): what the tests below look at
AT_CHUNKS = 1


CHUNKINGS = {"one chunk": 301, "regular": 100, "irregular": (50, 200, 51), "tiny": 7}


def expected_blocks(n, chunkings, rows):
    """The blocks a lazy run of ``n`` samples cuts, by the rule written out here (not taken from
    ``eagle_dask``): a cut at every chunk boundary of every dask plane, each rounded down to a row
    of 32 for a kernel with cells; no empty block; one block of 0 samples when ``n == 0``."""
    cuts = {0, n}
    for chunks in chunkings:
        cuts.update(itertools.accumulate(int(c) for c in chunks))
    if rows:
        cuts = {c - c % REFERENCE_ROW for c in cuts if c < n} | {n}
    edges = sorted(cuts)
    return tuple(b - a for a, b in zip(edges, edges[1:]) if b > a) or (0,)


@pytest.mark.parametrize("name", K.GATHERABLE)
def test_same_bits_as_one_process_at_any_chunking(client, name):
    """Regular, irregular and tiny chunks (none a multiple of 32): the planes and the cells of
    one process, and outputs chunked as the run cut the samples."""
    plugin = eagle.deploy(K.CASES[name][0])
    n = 301
    ref = K.one_process(name, n)
    p = lazy_plan(plugin, min_block=AT_CHUNKS)
    for label, chunks in CHUNKINGS.items():
        planes = as_dask(K.inputs(name, n), chunks)
        out = K.as_dict(plugin, p.run(**planes))
        sizes = expected_blocks(n, [v.chunks[0] for v in planes.values() if isinstance(v, da.Array)],
                                rows=bool(plugin.cells))
        for o, v in out.items():
            assert isinstance(v, da.Array) and v.dtype == np.float64, (o, type(v))
            if o in plugin.cells:
                assert v.shape == () and v.chunks == ()
            else:
                assert v.chunks[0] == sizes, (label, o, v.chunks)
        got = computed(out)
        assert K.same_bits(ref, got), f"{name}, {label} chunks: not the bits of one process"


def test_block_sizes_follow_the_chunks():
    assert block_sizes(301, [(100, 100, 101)], rows=False) == (100, 100, 101)
    assert block_sizes(301, [(50, 200, 51)], rows=True) == (32, 192, 77)         # cuts rounded down to rows
    assert block_sizes(301, [(50, 200, 51), (100, 201)], rows=False) == (50, 50, 150, 51)   # the union
    tiny = block_sizes(301, [(7,) * 43], rows=True)
    assert sum(tiny) == 301 and all(s == ROW for s in tiny[:-1])
    assert block_sizes(0, [(0,)], rows=True) == (0,)
    assert block_sizes(40, [(40,)], rows=True) == (40,)


def test_one_task_per_block_where_its_chunk_lies(client):
    """Inputs persisted on the workers: each block is one task, run on the worker that holds its chunk."""
    plugin = eagle.deploy(K.axpb)
    n, chunk = 4 * 50_000, 50_000
    x = da.random.default_rng(5).random(n, chunks=chunk).persist()
    distributed.wait(x)
    where = {key[1]: sorted(addrs)[0] for key, addrs in client.who_has(x).items()}
    client.run(task.clear_received)
    y = lazy_plan(plugin, min_block=AT_CHUNKS).run(x=x, a=2.0, b=1.0)
    assert records(client) == []                                   # nothing has run yet
    got = y.compute()
    recs = [r for r in records(client) if r[0] == plugin.name]
    assert sorted(r[1] for r in recs) == [f"block {b} (samples [{b * chunk}, {(b + 1) * chunk}))" for b in range(4)]
    for r in recs:
        b = int(r[1].split()[1])
        assert r[4] == where[b], (b, r[4], where)
    assert K.same_bits(got, 2.0 * x.compute() + 1.0)


def test_mixed_numpy_and_dask_planes_read_never_written(client):
    """numpy planes beside dask planes (a numpy Mutable among them): the bits of one process, and
    the caller's numpy arrays untouched."""
    plugin = eagle.deploy(oscillator)
    n = 1000
    ref = K.one_process("oscillator", n)
    planes = K.inputs("oscillator", n)
    before = {k: v.copy() for k, v in planes.items() if isinstance(v, np.ndarray)}
    mixed = {**planes, "x": da.from_array(planes["x"], chunks=(300, 300, 400))}   # omega and v stay numpy
    got = computed(lazy_plan(plugin).run(**mixed))
    assert K.same_bits(ref, got)
    assert all(K.same_bits(before[k], planes[k]) for k in before), "a numpy plane was written in place"


def test_vector_planes_chunked_along_samples(client):
    plugin = eagle.deploy(K.vectors)
    n = 301
    ref = K.one_process("vectors", n)
    planes = K.inputs("vectors", n)
    out = lazy_plan(plugin, min_block=AT_CHUNKS).run(p=da.from_array(planes["p"], chunks=(64, 3)),
                                                     scale=planes["scale"])
    assert out["q"].chunks == ((64, 64, 64, 64, 45), (3,))
    assert K.same_bits(ref, computed(out))


def test_whole_planes_assembled_on_the_cluster(client):
    """A kernel that reads other samples gets each input whole, assembled by the workers: every block
    receives the full plane, and the driver's graph carries no plane data."""
    plugin = eagle.deploy(K.stencil)
    n = 30_000
    ref = K.one_process("stencil", n)
    x = da.from_array(K.inputs("stencil", n)["x"], chunks=10_000).persist()
    client.run(task.clear_received)
    y = lazy_plan(plugin, min_block=AT_CHUNKS).run(x=x)
    assert len(pickle.dumps(dict(y.__dask_graph__()))) < 100_000
    assert K.same_bits(ref["y"], y.compute())
    recs = [r for r in records(client) if r[0] == plugin.name]
    assert len(recs) == 3 and all(r[5] == {"x": n} for r in recs), recs


def test_chained_runs_equal_one_long_run(client):
    """Ten runs of 10 steps feeding ``out["x"]``, ``out["v"]`` back equal one run of 100 steps, and
    nothing passes through the driver (the graph holds no plane)."""
    plugin = eagle.deploy(oscillator)
    n = 20_000
    omega = np.random.default_rng(1).uniform(0.5, 2.0, n)
    ref = eplan.plan(plugin, structure=eexec.HostTeam).run(omega=omega.copy(), dt=1e-3, steps=100,
                                                            x=np.ones(n), v=np.zeros(n))
    w = da.from_array(omega, chunks=5000).persist()
    x, v = da.ones(n, chunks=5000), da.zeros(n, chunks=5000)
    p = lazy_plan(plugin)
    for _ in range(10):
        out = p.run(omega=w, dt=1e-3, steps=10, x=x, v=v)
        x, v = out["x"], out["v"]
    graph = dict(out["energy"].__dask_graph__())
    assert len(pickle.dumps(graph)) < 200_000, "plane data in the driver's graph"
    assert K.same_bits(ref, computed(out))
    # and persisted step by step: the same bits again
    x, v = da.ones(n, chunks=5000), da.zeros(n, chunks=5000)
    for _ in range(10):
        out = p.run(omega=w, dt=1e-3, steps=10, x=x, v=v)
        x, v, e = dask.persist(out["x"], out["v"], out["energy"])
    assert K.same_bits(ref, computed({"x": x, "v": v, "energy": e}))


def test_lazy_a_raising_kernel_raises_at_compute(client):
    plugin = eagle.deploy(K.picky)
    x = np.ones(400)
    x[250] = -1.0
    y = lazy_plan(plugin, min_block=AT_CHUNKS).run(x=da.from_array(x, chunks=100))   # builds the graph only
    assert isinstance(y, da.Array)
    with pytest.raises(ValueError) as err:
        y.compute()
    for part in ("negative input", "'picky'", "sample 250", "block 2 (samples [200, 300))", "worker tls://127.0.0.1:"):
        assert part in str(err.value), (part, str(err.value))


def test_n_zero(client):
    for name in ("axpb", "reductions", "oscillator", "vectors", "stencil"):
        plugin = eagle.deploy(K.CASES[name][0])
        ref = K.one_process(name, 0)
        got = computed(K.as_dict(plugin, lazy_plan(plugin).run(**as_dask(K.inputs(name, 0), 10))))
        assert K.same_bits(ref, got), name


def test_refusals_name_the_plane(client):
    client.run(task.clear_received)
    vec = eagle.deploy(K.vectors)
    p = da.from_array(np.ones((100, 3)), chunks=(50, 2))
    with pytest.raises(ValueError, match=r"plane 'p' of kernel 'vectors' is chunked along its second axis "
                                         r"\(chunks \(2, 1\)\).*p.rechunk\(\{1: -1\}\)"):
        lazy_plan(vec).run(p=p, scale=1.0)
    axpb = lazy_plan(eagle.deploy(K.axpb))
    x = da.ones(100, chunks=30)
    with pytest.raises(TypeError, match=r"Param 'a' of kernel 'axpb' is a dask array of shape \(3,\): a Param takes "
                                        r"one number for all samples, here a 0-d dask array"):
        axpb.run(x=x, a=da.ones(3), b=1.0)          # a 0-d dask array is a lazy Param (tests/test_lazy_params.py)
    with pytest.raises(ValueError, match=r"output plane 'y' of kernel 'axpb' is a numpy array, and this run is lazy "
                                         r"\(plane 'x' is a dask array\): nothing is written in place"):
        axpb.run(x=x, a=1.0, b=1.0, y=np.zeros(100))
    with pytest.raises(ValueError, match=r"plane 'x' of kernel 'axpb' has unknown chunk sizes"):
        axpb.run(x=x[x > 0], a=1.0, b=1.0)
    with pytest.raises(ValueError, match=r"planes of kernel 'axpb' have different sample counts"):
        axpb.run(x=x, a=1.0, b=1.0, y=da.zeros(99, chunks=30))
    with pytest.raises(ValueError, match=r"output plane 'x' of kernel 'oscillator' is float32.*must be float64"):
        lazy_plan(eagle.deploy(oscillator)).run(omega=np.ones(10), dt=1.0, steps=1, v=np.zeros(10),
                                                x=da.ones(10, chunks=5, dtype=np.float32))
    with pytest.raises(TypeError, match=r"kernel 'axpb' is missing Param 'b'"):
        axpb.run(x=x, a=1.0)
    assert records(client) == []                                    # nothing ran


def test_a_supplied_dask_out_is_read_as_initial_values(client):
    """A dask Out is not mutated: the run returns a new array (its own name), from the same samples."""
    plugin = eagle.deploy(K.axpb)
    x = da.arange(100.0, chunks=30)
    y0 = da.full(100, 7.0, chunks=30)
    y = lazy_plan(plugin).run(x=x, a=2.0, b=1.0, y=y0)
    assert y.name != y0.name
    assert K.same_bits(y.compute(), 2.0 * np.arange(100.0) + 1.0)
    assert K.same_bits(y0.compute(), np.full(100, 7.0))


@eagle.kernel
def mean_square(i, x: In, total: Cell["sum"]):
    total[i] = x[i] * x[i]


def test_driver_memory_stays_small(client):
    """Planes made on the workers (da.random): computing the cell grows the driver's resident
    memory by far less than one plane (160 MB here)."""
    import psutil
    plugin = eagle.deploy(mean_square)
    p = lazy_plan(plugin)
    p.run(x=da.random.default_rng(0).random(1000, chunks=500)).compute()          # warm: imports, compile
    proc = psutil.Process()
    base, peak, done = proc.memory_info().rss, [0], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            time.sleep(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    n = 20_000_000
    s = p.run(x=da.random.default_rng(0).random(n, chunks=2_000_000)).compute()
    done.set()
    sampler.join(5)
    growth = (max(peak[0], proc.memory_info().rss) - base) / 2 ** 20
    assert abs(float(s) / n - 1.0 / 3.0) < 1e-3
    assert growth < 60, f"the driver grew by {growth:.0f} MB for a plane of {n * 8 / 2 ** 20:.0f} MB"


def test_no_listener_beyond_loopback(client):
    lazy_plan(eagle.deploy(K.axpb)).run(x=da.ones(100, chunks=10), a=1.0, b=1.0).compute()
    found = listeners(process_tree(os.getpid()))
    assert len({pid for pid, _, _ in found}) >= WORKERS + 1
    assert beyond_loopback(found) == []


def started_blocks(c, name, workers=None):
    """Labels of the blocks of kernel ``name`` that ``workers`` (all by default) started, in the
    order each worker started them."""
    answers = c.run(task.received, workers=workers, on_error="return")
    return [rec[1] for recs in answers.values() if not isinstance(recs, BaseException)
            for rec in recs if rec[0] == name]


def test_worker_killed_mid_compute_gives_same_bits():
    """A worker killed while it computes a block of this compute (checked: it started one, and
    holds tasks of this compute's graph): dask recomputes what it had (and the lost chunks) from
    the graph's lineage, every block it had started runs again elsewhere, with the same bits."""
    import psutil
    plugin = eagle.deploy(oscillator)
    n, chunk, steps = 8192, 1024, 10_000_000          # seconds of work per worker, vectorised or not
    ref = eplan.plan(plugin, structure=eexec.HostTeam).run(
        omega=np.linspace(0.5, 2.0, n), dt=1e-3, steps=steps, x=np.ones(n), v=np.zeros(n))
    with eagle_dask.local_cluster(n_workers=2, threads_per_worker=1) as c:
        c.wait_for_workers(2, timeout=120)
        p = eplan.plan(plugin, structure=DaskPartition.on(c, progress=False))
        planes = dict(omega=da.from_array(np.linspace(0.5, 2.0, n), chunks=chunk), dt=1e-3, x=da.ones(n, chunks=chunk),
                      v=da.zeros(n, chunks=chunk))
        c.compute(p.run(**planes, steps=1)["energy"]).result()          # compile on both workers
        c.run(task.clear_received)
        out = p.run(**planes, steps=steps)
        ours = {str(k) for arr in (out["x"], out["v"], out["energy"]) for k in arr.__dask_graph__().keys()}
        futures = c.compute([out["x"], out["v"], out["energy"]])
        end, victim, running = time.monotonic() + 60, None, None
        while victim is None and time.monotonic() < end:
            for addr, keys in c.processing().items():
                started = started_blocks(c, plugin.name, [addr]) if keys else []
                if started:           # a block takes seconds: the one it started last is running
                    victim, running = addr, started[-1]
                    assert {str(k) for k in keys} & ours, "the worker processes none of this compute's tasks"
                    break
            time.sleep(0.02)
        assert victim is not None, "no worker started a block of this compute within 60 s"
        psutil.Process(c.run(os.getpid, workers=[victim])[victim]).kill()
        x, v, e = c.gather(futures)
        assert running in started_blocks(c, plugin.name), (f"{running} of the killed worker was not run again",
                                                           started_blocks(c, plugin.name))
    assert K.same_bits(ref, {"x": x, "v": v, "energy": e})


def test_device_kernel_inner_on_simulated_gpus(monkeypatch):
    """inner=DeviceKernel in the lazy mode, on workers running numba's CUDA simulator: the bits of
    one device process, cells included, over chunks that are not multiples of 32."""
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    with eagle_dask.local_cluster(n_workers=2, env={"NUMBA_ENABLE_CUDASIM": "1"}) as c:
        c.wait_for_workers(2, timeout=120)
        for name in ("transcendental", "reductions"):
            plugin = eagle.deploy(K.CASES[name][0])

            def one_device_process(planes, name=name):
                p = eagle.deploy(K.CASES[name][0])
                return K.as_dict(p, eplan.plan(p, structure=eexec.DeviceKernel).run(**planes))

            want = c.submit(one_device_process, K.inputs(name, 301), pure=False).result()
            p = eplan.plan(plugin, structure=DaskPartition.on(c, progress=False), inner=eexec.DeviceKernel)
            out = K.as_dict(plugin, p.run(**as_dask(K.inputs(name, 301), (50, 200, 51))))
            got = dict(zip(out, c.gather(c.compute(list(out.values())))))
            assert K.same_bits(want, got), name
