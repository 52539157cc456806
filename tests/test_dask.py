"""DaskPartition on local clusters (127.0.0.1): the same bits as one process, and its faults.

One module-scoped cluster of 4 single-thread worker processes serves the identity tests; 1, 2
and 3 workers are the first ranks of it (``DaskPartition.on(client, workers=...)``).  Fault
tests start their own small clusters, since they kill workers.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

pytest.importorskip("distributed")

import eagle  # noqa: E402
from eagle import In, Out, Param  # noqa: E402
import eagle.exec as eexec  # noqa: E402
import eagle_dask  # noqa: E402
from eagle import plan as eplan  # noqa: E402
from eagle_dask import DaskPartition, task  # noqa: E402
from tests import kernels as K  # noqa: E402
from tests import reference as ref  # noqa: E402
from tests.launch import (ROOT, assert_loopback_only, listeners, local_client, loopback_env,  # noqa: E402
                          process_tree, run_in_thread)

WORKERS = 4


@pytest.fixture(scope="module")
def client():
    with local_client(WORKERS) as c:
        yield c


def records(client):
    """What every live worker's tasks received (a worker killed by the test may still be listed
    by the scheduler for a moment: its answer is an error, and it received nothing since)."""
    answers = client.run(task.received, on_error="return")
    return [rec for recs in answers.values() if not isinstance(recs, BaseException) for rec in recs]


def on(client, k, **kw):
    names = [r.name for r in DaskPartition.on(client).ranks(gpus=False).values()][:k]
    return DaskPartition.on(client, workers=names, progress=False, **kw)


@pytest.mark.parametrize("name", K.GATHERABLE)
def test_same_bits_as_one_process(client, name):
    """Every kernel class, 1-4 workers, odd n, n smaller than the workers, n = 0; each rank ran
    its share (by the rule, ``tests.reference``) on its worker; numpy's bits where exact."""
    plugin = eagle.deploy(K.CASES[name][0])
    numpy_reference = K.CASES[name][2]
    for n in (0, 3, 301):
        want = K.one_process(name, n)
        if numpy_reference is not None:
            exact = numpy_reference(K.inputs(name, n))
            assert K.same_bits({k: want[k] for k in exact}, exact), f"{name}, n={n}: one process differs from numpy"
        for k in (1, 2, 3, 4):
            structure = on(client, k)
            client.run(task.clear_received)
            got = K.as_dict(plugin, eplan.plan(plugin, structure=structure).run(**K.inputs(name, n)))
            assert K.same_bits(want, got), f"{name}: {k} workers, n={n} differ from one process"
            table = structure.ranks(gpus=False)
            ran = {rec[1]: (rec[2], rec[3], rec[4]) for rec in records(client) if rec[0] == plugin.name}
            shares = ref.cut(n, k, rows=bool(plugin.cells))
            assert ran == {r: (a, b, table[r].address) for r, (a, b) in enumerate(shares) if b > a}, (k, n)


def test_numpy_reference(client):
    """An independent reference too: axpb against numpy."""
    d = K.inputs("axpb", 1001)
    got = eplan.plan(eagle.deploy(K.axpb), structure=on(client, 4)).run(**d)
    assert K.same_bits(got, d["a"] * d["x"] + d["b"])


@pytest.mark.parametrize("name, sliced", [("axpb", True), ("vectors", True), ("reductions", True),
                                          ("stencil", False), ("neighbour_sum", False)])
def test_slices_only_for_sample_local_planes(client, name, sliced):
    """Seen from the workers: a plane read only at [i] arrives as the rank's slice, else whole."""
    plugin = eagle.deploy(K.CASES[name][0])
    n = 301
    client.run(task.clear_received)
    eplan.plan(plugin, structure=on(client, 4)).run(**K.inputs(name, n))
    recs = [rec for rec in records(client) if rec[0] == plugin.name]
    assert sorted(rec[1] for rec in recs) == [0, 1, 2, 3]
    for _, rank, start, stop, _, lengths in recs:
        ins = plugin.names("In")
        assert set(ins) <= set(lengths)
        for plane in ins:
            assert lengths[plane] == (stop - start if sliced else n), (plane, rank, lengths)


def test_inputs_shipped_whole_are_shared_once(client):
    """Whole planes are scattered once per run; every rank's task still sees the full plane."""
    plugin = eagle.deploy(K.stencil)
    client.run(task.clear_received)
    out = eplan.plan(plugin, structure=on(client, 3)).run(**K.inputs("stencil", 200))
    assert K.same_bits(out, K.one_process("stencil", 200)["y"])
    assert all(rec[5]["x"] == 200 for rec in records(client) if rec[0] == plugin.name)


def test_refusals_before_anything_runs(client):
    """The placement table and the gathered-output rules, raised on the driver."""
    with pytest.raises(ValueError, match=r"histogram.*cross_sample_write.*dask_partition"):
        eplan.plan(eagle.deploy(K.histogram), structure=DaskPartition)
    with pytest.raises(ValueError, match=r"output plane 'parity' of kernel 'integers' is declared int64.*float64"):
        eplan.plan(eagle.deploy(K.integers), structure=DaskPartition)
    with pytest.raises(ValueError, match=r"kernel 'axpb': .*DaskPartition splits the samples by rank.*npartitions="):
        eplan.plan(eagle.deploy(K.axpb), structure=DaskPartition, npartitions=2)
    client.run(task.clear_received)
    p = eplan.plan(eagle.deploy(K.axpb), structure=on(client, 2))
    with pytest.raises(TypeError, match=r"output plane 'y' of kernel 'axpb' is float32.*float64"):
        p.run(x=np.ones(10), a=1.0, b=2.0, y=np.zeros(10, dtype=np.float32))
    with pytest.raises(TypeError, match=r"kernel 'axpb' is missing Param 'a'"):
        p.run(x=np.ones(10), b=2.0)
    assert records(client) == []


def test_raising_kernel_names_rank_worker_and_kernel(client):
    structure = on(client, 4)
    x = np.ones(400)
    x[250] = -1.0                     # rank 2 of 4 holds samples [200, 300)
    with pytest.raises(ValueError) as err:
        eplan.plan(eagle.deploy(K.picky), structure=structure).run(x=x)
    msg = str(err.value)
    worker = structure.ranks(gpus=False)[2].address
    for part in ("negative input", "'picky'", "sample 250", "rank 2", f"worker {worker}"):
        assert part in msg, (part, msg)


def test_ranks_and_pickling(client):
    import pickle
    ranks = DaskPartition.on(client).ranks()
    assert sorted(ranks) == [0, 1, 2, 3]
    assert [r.name for r in ranks.values()] == [0, 1, 2, 3]
    assert all(r.host == "127.0.0.1" and r.gpu is None and r.address.startswith("tls://127.0.0.1:")
               for r in ranks.values())
    assert pickle.loads(pickle.dumps(DaskPartition.on(client))) is DaskPartition
    assert repr(DaskPartition) == "eagle_dask.DaskPartition"


def test_default_client_and_progress_bar(client, capsys, monkeypatch):
    """DaskPartition alone uses the current client; progress=True draws the bar of samples done."""
    monkeypatch.delenv("EAGLE_DASK_PROGRESS", raising=False)
    want = K.one_process("oscillator", 500)
    got = eplan.plan(eagle.deploy(K.oscillator), structure=DaskPartition).run(**K.inputs("oscillator", 500))
    assert K.same_bits(want, got)
    capsys.readouterr()
    eplan.plan(eagle.deploy(K.oscillator), structure=DaskPartition.on(client, progress=True)).run(
        **K.inputs("oscillator", 500))
    assert "100% 500/500 samples" in capsys.readouterr().out
    monkeypatch.setenv("EAGLE_DASK_PROGRESS", "0")
    assert not eagle_dask.progress.progress_wanted(None)


def test_no_listener_beyond_loopback(client):
    eplan.plan(eagle.deploy(K.axpb), structure=on(client, 4)).run(**K.inputs("axpb", 100))
    found = listeners(process_tree(os.getpid()))
    assert len({pid for pid, _, _ in found}) >= WORKERS + 1      # the scheduler here, every worker
    assert_loopback_only(found, "a local Dask cluster")


# -- faults: their own clusters -------------------------------------------------------------
slow_neighbours = K.slow_neighbours


BLOCK_SECONDS = 3.0
_STEPS = {}


def _steps_for(name, kernel, make, seconds=BLOCK_SECONDS):
    """Steps that make a block of 32 samples take about ``seconds`` on one thread here (measured
    once: the host loop's speed differs between machines and between its laned and vectorised
    forms), so that a block is still running when a test kills its worker."""
    if name not in _STEPS:
        probe = eplan.plan(kernel, structure=eexec.HostTeam)
        trial = 1_000_000
        block = {k: (v[:32].copy() if isinstance(v, np.ndarray) else v) for k, v in make(trial).items()}
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("EAGLE_NUM_THREADS", "1")
            probe.run(**{**block, "steps": 1})                 # compile outside the timing
            t = time.perf_counter()
            probe.run(**block)
            took = time.perf_counter() - t
        _STEPS[name] = max(trial, int(trial * seconds / max(took, 1e-6)))
    return _STEPS[name]


def _slow(name, kernel, make):
    return kernel, lambda: make(_steps_for(name, kernel, make))


#: kernel, fresh inputs of 64 samples at about BLOCK_SECONDS per block of 32 (on an idle core)
SLOW = {
    "oscillator": _slow("oscillator", K.oscillator,
                        lambda steps: {**K.inputs("oscillator", 64), "steps": steps}),
    "slow_neighbours": _slow("slow_neighbours", slow_neighbours,
                             lambda steps: {"x": np.random.default_rng(7).uniform(-1, 1, 64), "steps": steps}),
}


def slow_inputs():
    return SLOW["oscillator"][1]()




def _wait_processing_key(client, key_part, timeout=120):
    """(worker, key) of the first task whose key holds ``key_part`` once a worker processes it."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for addr, keys in client.processing().items():
            for k in keys:
                if key_part in str(k):
                    return addr, k
        time.sleep(0.05)
    raise AssertionError(f"no task {key_part!r} started within {timeout} s")


def _wait_processing(client, key_part, timeout=120):
    return _wait_processing_key(client, key_part, timeout)[0]


@pytest.mark.parametrize("name", sorted(SLOW))
def test_worker_killed_mid_block_gives_same_bits(name):
    """Sliced inputs (oscillator) and inputs scattered whole (slow_neighbours) both survive."""
    import psutil
    kernel, make = SLOW[name]
    plugin = eagle.deploy(kernel)
    assert ("x" in plugin.sliceable) == (name == "oscillator")
    want = K.as_dict(plugin, eplan.plan(plugin, structure=eexec.HostTeam).run(**make()))
    with eagle_dask.local_cluster(n_workers=2) as client:
        client.wait_for_workers(2, timeout=120)
        structure = DaskPartition.on(client, progress=False)
        eplan.plan(plugin, structure=structure).run(**{**make(), "steps": 1})    # compile on both
        client.run(task.clear_received)
        th, box = run_in_thread(eplan.plan(plugin, structure=structure), make())
        victim = _wait_processing(client, "rank1")
        time.sleep(0.3)
        pid = client.run(os.getpid, workers=[victim])[victim]
        psutil.Process(pid).kill()
        th.join(240)
        assert not th.is_alive(), "the run hung after a worker was killed"
        assert "error" not in box, box.get("error")
        assert K.same_bits(want, K.as_dict(plugin, box["out"]))
        again = [rec for rec in records(client) if rec[0] == plugin.name and rec[1] == 1]
        assert again and all(rec[4] != victim for rec in again)   # rank 1's block was recomputed elsewhere


def _bare_workers(address, count):
    """Worker processes without a nanny (nothing restarts them), on loopback."""
    cmd = [sys.executable, "-m", "distributed.cli.dask_worker", address, "--no-nanny", "--nthreads", "1",
           "--host", "127.0.0.1", "--dashboard-address", "127.0.0.1:0"]
    env = loopback_env({"EAGLE_NUM_THREADS": "1"})
    return [subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for _ in range(count)]


def test_all_workers_gone_is_a_clear_error_in_bounded_time():
    from distributed import Client, LocalCluster
    plugin = eagle.deploy(K.oscillator)
    with LocalCluster(n_workers=0, host="127.0.0.1", dashboard_address="127.0.0.1:0") as cluster, \
            Client(cluster) as client:
        procs = _bare_workers(cluster.scheduler_address, 2)
        try:
            client.wait_for_workers(2, timeout=120)
            structure = DaskPartition.on(client, progress=False, timeout=3)
            eplan.plan(plugin, structure=structure).run(**K.inputs("oscillator", 64))
            th, box = run_in_thread(eplan.plan(plugin, structure=structure), slow_inputs())
            _wait_processing(client, "rank")
            for proc in procs:
                proc.kill()
            th.join(120)
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()
        assert not th.is_alive(), "the run hung with no worker left"
        err = box.get("error")
        assert isinstance(err, TimeoutError), box
        assert "every worker left" in str(err) and "'oscillator'" in str(err), str(err)
        assert box["seconds"] < 60


@pytest.fixture(scope="module")
def fragile():
    """Two workers whose scheduler gives a task up the first time a worker dies running it
    (``allowed-failures`` 0: the scheduler reads it when it starts, here in this process)."""
    import dask
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        c = eagle_dask.local_cluster(n_workers=2)
    assert c.cluster.scheduler.allowed_failures == 0
    c.wait_for_workers(2, timeout=120)
    plugin = eagle.deploy(K.oscillator)
    eplan.plan(plugin, structure=DaskPartition.on(c, progress=False)).run(**{**slow_inputs(), "steps": 1})
    yield c
    c.close()


def test_a_block_that_killed_its_worker_is_given_up_by_name(fragile):
    """KilledWorker: the run raises a RuntimeError naming the rank and the kernel, at once."""
    import psutil
    plugin = eagle.deploy(K.oscillator)
    th, box = run_in_thread(eplan.plan(plugin, structure=DaskPartition.on(fragile, progress=False)),
                             slow_inputs())
    victim, key = _wait_processing_key(fragile, "-rank1", timeout=60)
    pid = fragile.run(os.getpid, workers=[victim])[victim]
    killed = time.monotonic()
    psutil.Process(pid).kill()
    th.join(60)
    assert not th.is_alive(), "the run hung after the block's worker was killed"
    err = box.get("error")
    assert type(err) is RuntimeError, box
    msg = str(err)
    for part in ("rank 1", "kernel 'oscillator'", "killed every worker that ran it", str(key)):
        assert part in msg, (part, msg)
    assert time.monotonic() - killed < 30, "the run did not give up promptly"


def test_a_cancelled_block_is_named_and_ends_the_run(fragile):
    """A block cancelled (here by the client, from another thread) while the run waits for it."""
    from distributed import Future
    plugin = eagle.deploy(K.oscillator)
    fragile.wait_for_workers(2, timeout=120)            # a worker killed by the test above comes back
    th, box = run_in_thread(eplan.plan(plugin, structure=DaskPartition.on(fragile, progress=False)),
                             slow_inputs())
    _, key = _wait_processing_key(fragile, "-rank1", timeout=60)
    assert str(key).startswith(f"{plugin.name}-eagle-block-")
    cancelled = time.monotonic()
    fragile.cancel([Future(key, fragile)])
    th.join(60)
    assert not th.is_alive(), "the run hung after its block was cancelled"
    assert time.monotonic() - cancelled < 30, "the run did not end promptly"
    err = box.get("error")
    assert type(err) is RuntimeError, box
    msg = str(err)
    for part in ("rank 1", "kernel 'oscillator'", "was cancelled"):
        assert part in msg, (part, msg)


def test_workers_that_are_not_the_clusters_are_refused_by_name(client):
    """workers= naming an address or a name the cluster does not have: refused, nothing runs."""
    table = DaskPartition.on(client).ranks(gpus=False)
    bogus = ["tcp://127.0.0.1:9", 7]
    structure = DaskPartition.on(client, workers=[table[0].address, 1, *bogus], progress=False)
    with pytest.raises(ValueError) as err:
        structure.ranks(gpus=False)
    msg = str(err.value)
    assert "workers=['7', 'tcp://127.0.0.1:9'] are not workers of this cluster" in msg, msg
    assert all(r.address in msg for r in table.values()), msg
    client.run(task.clear_received)
    x = np.ones(10)
    with pytest.raises(ValueError, match=r"workers=\['7', 'tcp://127\.0\.0\.1:9'\] are not workers"):
        eplan.plan(eagle.deploy(K.axpb), structure=structure).run(x=x, a=1.0, b=2.0)
    assert records(client) == []
    assert [r.address for r in DaskPartition.on(client, workers=[table[2].address, 0]).ranks(gpus=False).values()] \
        == [table[0].address, table[2].address]        # named ones kept, in rank order


def test_device_kernel_inner_on_simulated_gpus(monkeypatch):
    """inner=DeviceKernel on workers running numba's CUDA simulator, against one process."""
    plugin = eagle.deploy(K.transcendental)
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    with eagle_dask.local_cluster(n_workers=2, env={"NUMBA_ENABLE_CUDASIM": "1"}) as client:
        client.wait_for_workers(2, timeout=120)
        d = K.inputs("transcendental", 301)

        def one_device_process(planes):
            return eplan.plan(eagle.deploy(K.transcendental), structure=eexec.DeviceKernel).run(**planes)

        want = client.submit(one_device_process, d, pure=False).result()
        got = eplan.plan(plugin, structure=DaskPartition.on(client, progress=False),
                         inner=eexec.DeviceKernel).run(**K.inputs("transcendental", 301))
        assert K.same_bits(want, got)


def test_demo_command_end_to_end():
    try:
        proc = subprocess.run([sys.executable, "-m", "eagle_dask", "demo", "--samples", "20000", "--workers", "2"],
                              cwd=ROOT, env=loopback_env(), capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the demo did not end within 300 s; it printed:\n{e.stdout}\n{e.stderr}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "identical: yes" in proc.stdout
    assert "dask (2 workers)" in proc.stdout and "one process" in proc.stdout


def test_info_command_lists_ranks_on_loopback():
    proc = subprocess.run([sys.executable, "-m", "eagle_dask", "info", "--workers", "2"],
                          cwd=ROOT, env=loopback_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "workers: 2" in proc.stdout
    rows = [line.split() for line in proc.stdout.splitlines() if line[:1].isdigit()]
    assert [r[0] for r in rows] == ["0", "1"], proc.stdout
    assert all(r[3].startswith("tls://127.0.0.1:") for r in rows), proc.stdout


def test_demo_lazy_run_warms_every_worker_first():
    """The demo's lazy warm-up runs a block on each worker (a small run on all of them at once
    joins its chunks into one block on one worker), and its timed run still has the bits of one
    process (numpy's oscillator)."""
    from eagle_dask import demo
    from eagle_dask.ranks import scheduler_workers
    n, steps = 6400, 3
    with eagle_dask.local_cluster(n_workers=3) as client:
        client.wait_for_workers(3, timeout=120)
        client.run(task.clear_received)
        got, _ = demo._lazy(client, eagle.deploy(demo.oscillator), n, steps, 3)
        seen = client.run(task.received)
        addresses = set(scheduler_workers(client))
    warmed = {w for w, recs in seen.items()
              if any(r[0] == "oscillator" and str(r[1]).startswith("block") and r[3] - r[2] == 64 for r in recs)}
    assert warmed == addresses, (warmed, addresses)
    want = K.oscillator_numpy(demo.planes(n, steps))
    assert K.same_bits(got, want)
