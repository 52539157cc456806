"""``Plan.run_until_done``: every plane, status, step count and cell equal to each sample stepped
one step at a time in plain Python (``tests.until_done_cases.reference``), on every structure.

HostTeam runs here at 1, 2 and 3 threads (and 1 and 3 partitions); its laned and one-at-a-time
loops and the CUDA simulator run in their own processes (``python -m tests.until_done_cases``);
RankPartition under mpiexec -n 1/2/3 (``mpi_scripts/until_done.py``); DaskPartition on 1-3
workers of a local cluster.  Refusals are checked by their words.
"""
from __future__ import annotations

import glob
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import eagle
import eagle.exec as eexec
from eagle import In, Mutable, Out, Param
from eagle import plan as eplan
from eagle.bits import same_bits
from eagle.until_done import CAPPED, FINISHED
from tests import until_done_cases as U

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(ROOT, "tests", "mpi_scripts")


def expected():
    out = {}
    for name, n, cap, rounds in U.RUNS:
        out[f"{name}/{n}/{cap}/{rounds}"] = U.flat_reference(U.reference(U.CASES[name], U.inputs(name, n), cap))
    out["walker/101/resume"] = U.flat_reference(U.reference(U.walker, U.inputs("walker", 101), 400))
    return out


@pytest.fixture(scope="module")
def want():
    return expected()


def assert_all_same(got, want):
    assert set(got) == set(want)
    for key in want:
        assert set(got[key]) == set(want[key]), key
        for part in want[key]:
            assert same_bits(np.asarray(got[key][part]), np.asarray(want[key][part])), (key, part)


def test_reference_is_not_trivial(want):
    """The cases cap some samples, finish others, and take very different step counts."""
    capped = want["walker/67/12/5"]["status"]
    assert (capped == CAPPED).any() and (capped == FINISHED).any()
    assert (want["kepler/53/3/1"]["status"] == CAPPED).any()
    steps = want["walker/101/400/None"]["steps"]
    assert steps.max() > 8 * max(steps.min(), 1) and (want["walker/101/400/None"]["status"] == FINISHED).all()
    assert want["walker/0/50/None"]["steps"].shape == (0,)


@pytest.mark.parametrize("threads", ["1", "2", "3"])
@pytest.mark.parametrize("parts", [1, 3])
def test_host_team_same_bits(monkeypatch, want, threads, parts):
    monkeypatch.setenv("EAGLE_NUM_THREADS", threads)
    assert_all_same(U.run_all(eexec.HostTeam, npartitions=parts), want)


def _in_process(tmp_path, structure, **env):
    full = dict(os.environ, PYTHONPATH=ROOT, **env)
    full.pop("NUMBA_ENABLE_CUDASIM", None) if "NUMBA_ENABLE_CUDASIM" not in env else None
    proc = subprocess.run([sys.executable, "-m", "tests.until_done_cases", str(tmp_path), structure], cwd=ROOT,
                          capture_output=True, text=True, timeout=400, env=full)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = {}
    for path in glob.glob(str(tmp_path / "*.npz")):
        with np.load(path) as z:
            got[os.path.basename(path)[:-4]] = {k: z[k] for k in z.files}
    return got


def _keyed(want):
    return {k.replace("/", "_"): v for k, v in want.items()}


@pytest.mark.parametrize("env, path", [({"EAGLE_HOST_SIMD": "0"}, "lanes"), ({"EAGLE_HOST_LANES": "1"}, "one")],
                         ids=["lanes", "one"])
def test_host_paths_same_bits(tmp_path, want, env, path):
    assert_all_same(_in_process(tmp_path, "HostTeam", EAGLE_NUM_THREADS="2", **env), _keyed(want))
    assert (tmp_path / "host_path.txt").read_text() == path


def test_default_host_path_is_vectorised():
    from eagle.step_kernel import loop_plugin
    assert loop_plugin(eagle.deploy(U.walker), "done").plugin.host_path == "simd"


def test_device_simulator_same_bits(tmp_path, want):
    assert_all_same(_in_process(tmp_path, "DeviceKernel", NUMBA_ENABLE_CUDASIM="1"), _keyed(want))


# -- resume ----------------------------------------------------------------------------------------

def test_resume_equals_one_longer_run():
    p = eplan.plan(U.walker, structure=eexec.HostTeam, npartitions=2)
    planes = U.inputs("walker", 201)
    once = p.run_until_done(max_steps=300, **planes)
    part = p.run_until_done(max_steps=5, round_steps=3, **planes)
    assert (part.status == CAPPED).any() and (part.steps <= 5).all()
    again = p.run_until_done(max_steps=40, resume=part)
    assert (again.status == CAPPED).any()
    last = p.run_until_done(max_steps=300, resume=again)
    assert_all_same({"r": U.flat(last)}, {"r": U.flat(once)})
    assert same_bits(last.contributions["last"], once.contributions["last"])


# -- refusals --------------------------------------------------------------------------------------

@eagle.kernel
def no_finish(i, x: Mutable, y: Out):
    x[i] = x[i] + 1.0
    y[i] = x[i]


@eagle.kernel
def reads_neighbour(i, x: In, y: Mutable, done: Out):
    j = i + 1 if i + 1 < x.shape[0] else i
    y[i] = y[i] + x[j]
    done[i] = 1.0


@eagle.kernel
def counts_samples(i, x: Mutable, done: Out):
    x[i] = x[i] + x.shape[0]
    done[i] = 1.0


@eagle.kernel
def returns_early(i, x: Mutable, done: Out):
    if x[i] > 3.0:
        done[i] = 1.0
        return
    x[i] = x[i] + 1.0


@eagle.kernel
def finish_elsewhere(i, x: Mutable, finished: Out, lim: Param):
    x[i] = x[i] + 1.0
    if x[i] > lim:
        finished[i] = 1.0


@eagle.kernel
def reserved_name(i, x: Mutable, done: Out, max_steps: Param):
    x[i] = x[i] + 1.0
    done[i] = 1.0 if x[i] > max_steps else 0.0


def test_reserved_argument_name_refused():
    with pytest.raises(ValueError, match="kernel 'reserved_name' has an argument named 'max_steps', which "
                                         "run_until_done reserves"):
        _host(reserved_name).run_until_done(max_steps=5, x=np.zeros(3))


def _host(k):
    return eplan.plan(k, structure=eexec.HostTeam)


@pytest.mark.parametrize("bad", [None, 0, -3, 2.5, True, "10"])
def test_max_steps_refused(bad):
    with pytest.raises(ValueError, match=r"kernel 'walker': run_until_done\(max_steps=.*positive integer"):
        _host(U.walker).run_until_done(max_steps=bad, **U.inputs("walker", 3))


def test_round_steps_refused():
    with pytest.raises(ValueError, match=r"kernel 'walker': run_until_done\(round_steps=0\).*positive integer"):
        _host(U.walker).run_until_done(max_steps=5, round_steps=0, **U.inputs("walker", 3))


def test_no_finish_condition_refused():
    with pytest.raises(ValueError, match="kernel 'no_finish' has no argument 'done' for its finish condition"):
        _host(no_finish).run_until_done(max_steps=5, x=np.zeros(3))


def test_finish_plane_named():
    got = _host(finish_elsewhere).run_until_done(max_steps=50, done_plane="finished", x=np.arange(5.0), lim=3.5)
    assert same_bits(got.planes["x"], np.array([4.0, 4.0, 4.0, 4.0, 5.0]))
    assert same_bits(got.steps, np.array([4, 3, 2, 1, 1]))
    with pytest.raises(ValueError, match="kernel 'finish_elsewhere' has no argument 'done'"):
        _host(finish_elsewhere).run_until_done(max_steps=50, x=np.arange(5.0), lim=3.5)
    with pytest.raises(ValueError, match="kernel 'finish_elsewhere' has 'lim' as a Param, not an output plane"):
        _host(finish_elsewhere).run_until_done(max_steps=50, done_plane="lim", x=np.arange(5.0), lim=3.5)


@eagle.kernel
def reads_finish(i, x: Mutable, over: Mutable):
    if over[i] == 0.0:
        x[i] = x[i] + 1.0


def test_never_writes_finish_refused():
    with pytest.raises(ValueError, match=r"kernel 'reads_finish' never writes its finish condition over\[i\]"):
        _host(reads_finish).run_until_done(max_steps=5, done_plane="over", x=np.zeros(3), over=np.zeros(3))


def test_other_samples_refused():
    with pytest.raises(ValueError, match="kernel 'reads_neighbour' is cross_sample_read: only a sample_local"):
        _host(reads_neighbour).run_until_done(max_steps=5, x=np.zeros(3), y=np.zeros(3))
    with pytest.raises(ValueError, match=r"kernel 'counts_samples' uses plane 'x' other than as x\[i\]"):
        _host(counts_samples).run_until_done(max_steps=5, x=np.zeros(3))


def test_return_refused():
    with pytest.raises(ValueError, match="kernel 'returns_early': a step kernel has no return"):
        _host(returns_early).run_until_done(max_steps=5, x=np.zeros(3))


def test_lazy_plane_refused():
    class Lazy:
        def __len__(self):
            return 3
    with pytest.raises(TypeError, match="plane 'x' of kernel 'walker' is a Lazy: run_until_done takes numpy planes here"):
        _host(U.walker).run_until_done(max_steps=5, **{**U.inputs("walker", 3), "x": Lazy()})


def test_resume_refusals():
    p = _host(U.walker)
    first = p.run_until_done(max_steps=3, **U.inputs("walker", 5))
    with pytest.raises(ValueError, match="kernel 'walker': resume= continues from the result's planes; do not "
                                         "pass 'x'"):
        p.run_until_done(max_steps=9, resume=first, x=np.zeros(5))
    other = _host(U.kepler).run_until_done(max_steps=3, **U.inputs("kepler", 5))
    with pytest.raises(ValueError, match="kernel 'walker': resume= takes the result of run_until_done of this"):
        p.run_until_done(max_steps=9, resume=other)


def test_step_kernel_still_runs_one_step():
    """The step kernel stays an ordinary kernel: plan.run is one step of every sample."""
    planes = U.inputs("walker", 9)
    ref = U.reference(U.walker, planes, 1)
    got = _host(U.walker).run(**planes)
    assert same_bits(got["x"], ref[0]["x"])


# -- RankPartition and DaskPartition ----------------------------------------------------------------

@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_rank_partition_same_bits(tmp_path, want, ranks):
    from tests import launch
    from tests.test_mpi import records
    out = tmp_path / "out"
    out.mkdir()
    launch.mpiexec(ranks, [os.path.join(SCRIPTS, "until_done.py"), str(out)], timeout=300)
    for rec in records(out, ranks):
        assert rec["size"] == ranks
        got = {}
        for name, value in rec["arrays"].items():
            key, part = name.split("|")
            got.setdefault(key, {})[part] = value
        assert_all_same(got, want)


@pytest.fixture(scope="module")
def client():
    pytest.importorskip("distributed")
    from tests.launch import local_client
    with local_client(3) as c:
        yield c


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_dask_partition_same_bits(client, want, workers):
    from eagle_dask import DaskPartition
    names = [r.name for r in DaskPartition.on(client).ranks(gpus=False).values()][:workers]
    structure = DaskPartition.on(client, workers=names, progress=False)
    assert_all_same(U.run_all(structure), want)


def _uneven(n):
    """Chunks of 1, 2, 3, ... samples, the last one what is left."""
    sizes, k = [], 1
    while sum(sizes) < n:
        sizes.append(min(k, n - sum(sizes)))
        k += 1
    return tuple(sizes) or (0,)


@pytest.mark.parametrize("workers, chunks", [(1, 7), (3, 16), (2, _uneven), (3, 1000)])
def test_dask_lazy_planes_same_bits(client, want, workers, chunks):
    """Dask planes in any chunking: the same bits as plain Python, the result dask arrays."""
    from eagle_dask import DaskPartition
    names = [r.name for r in DaskPartition.on(client).ranks(gpus=False).values()][:workers]
    structure = DaskPartition.on(client, workers=names, progress=False, min_block=1)
    assert_all_same(U.run_all(structure, chunks=chunks), want)


def test_dask_lazy_result_stays_on_the_cluster(client):
    """The result's planes, status, steps and cells are dask arrays whose keys the cluster holds
    (persisted): computing them runs nothing again; the caller's dask planes are unchanged."""
    import dask
    from distributed import futures_of
    from eagle_dask import DaskPartition
    planes = U.inputs("walker", 101)
    given = U.lazy("walker", planes, 10)
    before = given["x"].compute()
    r = eplan.plan(U.walker, structure=DaskPartition.on(client, progress=False)).run_until_done(max_steps=400,
                                                                                              **given)
    for v in (*r.planes.values(), r.status, r.steps, *r.contributions.values()):
        assert isinstance(v, dask.array.Array) and futures_of(v), v
    assert r.cells["hits"].shape == ()
    assert r.planes["x"].chunks == r.status.chunks == given["x"].chunks
    assert same_bits(given["x"].compute(), before) and same_bits(before, planes["x"])


def test_dask_lazy_rounds_are_cut_evenly_over_the_workers(client, monkeypatch):
    """Each round's running samples run as one block per worker, evenly cut, wherever they lie
    and whatever ``min_block`` (the default here): a tail held in one chunk is spread over all
    three workers."""
    from eagle_dask import DaskPartition
    from eagle_dask import arrays
    blocks = []
    real = arrays.block_sizes

    def spy(*args, **kwargs):
        blocks.append(real(*args, **kwargs))
        return blocks[-1]

    monkeypatch.setattr(arrays, "block_sizes", spy)
    planes = U.inputs("walker", 300)
    planes["x"][:250] = 1.0                       # the first 250 start next to the absorbing 0
    planes["x"][250:] = 5.0
    structure = DaskPartition.on(client, progress=False)
    eplan.plan(U.walker, structure=structure).run_until_done(max_steps=400, **U.lazy("walker", planes, 100))
    later = [b for b in blocks if 0 < sum(b) < 300]
    assert later, blocks
    for b in later:
        assert len(b) <= 3 and max(b) <= -(-sum(b) // 3), b


def test_dask_lazy_rounds_with_no_running_worker_end_in_bounded_time():
    """Every worker paused mid-run: run_until_done's wait for a round ends in eagle's TimeoutError
    after ``timeout`` seconds, not never; the cluster then serves the same run with the same bits."""
    import threading
    import eagle_dask
    from eagle_dask import DaskPartition
    from tests.test_dask_faults import set_status
    planes = U.inputs("walker", 101)
    with eagle_dask.local_cluster(n_workers=2, memory_limit=0) as c:
        c.wait_for_workers(2, timeout=120)
        p = eplan.plan(U.walker, structure=DaskPartition.on(c, progress=False, timeout=2))
        box = {}

        def run():
            t = time.monotonic()
            try:
                p.run_until_done(max_steps=400, round_steps=1, **U.lazy("walker", planes, 10))
            except BaseException as e:          # noqa: BLE001 - judged below
                box["error"] = e
            box["seconds"] = time.monotonic() - t
        set_status(c, "paused")
        try:
            th = threading.Thread(target=run, daemon=True)
            th.start()
            th.join(60)
        finally:
            set_status(c, "running")
        assert not th.is_alive(), "run_until_done hung with every worker paused"
        err = box.get("error")
        assert isinstance(err, TimeoutError) and "'walker'" in str(err) and "no running worker for 2 s" in str(err), \
            repr(err)
        assert box["seconds"] < 30
        got = U.flat(p.run_until_done(max_steps=400, **U.lazy("walker", planes, 10)))
    assert_all_same({"k": got}, {"k": U.flat_reference(U.reference(U.walker, planes, 400))})


def _page_recipe():
    """The zarr recipe of docs/until_done.md, as the page has it (the block after its marker)."""
    with open(os.path.join(ROOT, "docs", "until_done.md")) as f:
        page = f.read()
    after = page.split("<!-- the recipe below is run by tests/test_until_done.py -->", 1)[1]
    return after.split("```python\n", 1)[1].split("```", 1)[0]


def test_zarr_recipe_of_the_page_resumes_to_one_longer_runs_bits(client, tmp_path):
    """The page's recipe, run as written (caps and chunks made small, each substitution matching
    once): written to zarr after 7 steps, read back, continued to 400: one 400-step run's bits."""
    pytest.importorskip("zarr")
    from eagle_dask import DaskPartition
    code = _page_recipe()
    for old, new in (("max_steps=1000", "max_steps=7"), ("max_steps=5000", "max_steps=400"),
                     ("chunks=100_000", "chunks=10"), ("], 100_000)", "], 10)"),
                     ('"/scratch/me/walk.zarr"', repr(str(tmp_path / "walk.zarr")))):
        assert code.count(old) == 1, old
        code = code.replace(old, new)
    planes = U.inputs("walker", 101)
    params = {k: planes[k] for k in ("seed", "up", "bias")}
    ns = {"DaskPartition": DaskPartition, "client": client, "eplan": eplan, "walker": U.walker,
          "start": planes["x"], "params": params}
    exec(compile(code, "docs/until_done.md", "exec"), ns)
    assert (tmp_path / "walk.zarr").is_dir()
    first = U.flat(ns["p"].run_until_done(max_steps=7, **U.lazy("walker", planes, 10)))
    assert (first["status"] == CAPPED).any()            # the first session left samples to continue
    with pytest.raises(ValueError, match="give an absolute path every worker sees"):
        ns["save"](ns["r"], "walk.zarr")
    assert_all_same({"k": U.flat(ns["r"])}, {"k": U.flat_reference(U.reference(U.walker, planes, 400))})


def test_rounds_run_only_the_samples_still_running(monkeypatch):
    """Each round runs the samples not yet done (16 steps, then 4x the last), as counted from the
    reference's steps: finished samples stop costing."""
    import eagle.until_done as ud
    seen = []
    real = ud._round

    def spy(loop_plan, loop, idx, *args):
        seen.append(idx.copy())
        return real(loop_plan, loop, idx, *args)

    monkeypatch.setattr(ud, "_round", spy)
    planes = U.inputs("walker", 301)
    ref_steps = U.reference(U.walker, planes, 400)[2]
    _host(U.walker).run_until_done(max_steps=400, **planes)
    budgets, total = [], 0
    while total < 400 and (ref_steps > total).any():
        budgets.append(min(16 * 4 ** len(budgets), 400))
        total += budgets[-1]
    assert len(seen) == len(budgets) > 2
    done_before = 0
    for idx, b in zip(seen, budgets):
        assert np.array_equal(idx, np.flatnonzero(ref_steps > done_before))
        done_before += b


def test_dask_array_plane_refused():
    da = pytest.importorskip("dask.array")
    planes = U.inputs("walker", 40)
    planes["x"] = da.from_array(planes["x"], chunks=16)
    with pytest.raises(TypeError, match="plane 'x' of kernel 'walker' is a Array: run_until_done takes numpy planes "
                                        r"here \(dask arrays: run the plan on DaskPartition"):
        _host(U.walker).run_until_done(max_steps=5, **planes)
