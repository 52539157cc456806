"""DaskPartition's faults end, within a bounded time, with the same bits or eagle's own error.

* every worker that held a block dies and the nannies restart them (the blocks sat in
  ``no-worker`` forever, tied to the dead addresses): the blocks are resubmitted, same bits;
* a block that crashes every worker that runs it: a ``RuntimeError`` naming kernel and rank;
* the client closed, or the run's futures cancelled, mid-run: eagle's ``RuntimeError`` naming
  the kernel, not distributed's bare ``FuturesCancelledError``;
* a kernel that raises in one block leaves the caller's planes as they were, although another
  block finished first (on both transports);
* Ctrl-C in the driver cancels the run's tasks: the next run is not slowed by abandoned blocks;
* ``local_cluster`` and ``DaskPartition.on`` refuse bad arguments, saying what is allowed.

Every fault test starts its own small cluster on 127.0.0.1 (it kills or closes it).
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

import numpy as np
import pytest

pytest.importorskip("distributed")

import eagle  # noqa: E402
import eagle.exec as eexec  # noqa: E402
import eagle_dask  # noqa: E402
from eagle import In, Mutable, Out, Param  # noqa: E402
from eagle import plan as eplan  # noqa: E402
from eagle.models import oscillator  # noqa: E402
from distributed.diagnostics.plugin import WorkerPlugin  # noqa: E402
from eagle_dask import DaskPartition  # noqa: E402
from tests import kernels as K  # noqa: E402
from tests.launch import run_in_thread  # noqa: E402


ring_mean = K.slow_neighbours            # reads other samples: its input travels whole


@eagle.kernel
def crash_me(i, x: In, y: Out):
    y[i] = x[i]


@eagle.kernel
def fails_at(i, work: In, bad: Param, x: Mutable, y: Out):
    """Adds one to ``x`` and writes ``y``; sample ``bad`` reads ``work`` far out of range, after
    ``work[i]`` iterations of a loop: a block can be made to fail late."""
    s = 0.0
    for k in range(int(work[i])):
        s += 1e-12 * k
    j = i + 10**9 if i == bad else i
    x[i] = x[i] + 1.0 + 0.0 * s
    y[i] = work[j] * 0.0 + 2.0


class CrashOn(WorkerPlugin):
    """A worker plugin (re-installed on every restarted worker) that kills the worker process
    when a block of kernel ``name`` runs: a block that crashes every worker that runs it."""

    def __init__(self, name):
        self.name = name

    def setup(self, worker):
        import eagle.host
        run, name = eagle.host.HostEntry.run, self.name

        def crashing(entry, *args, **kwargs):
            if entry.plugin.name == name:
                os._exit(3)
            return run(entry, *args, **kwargs)
        eagle.host.HostEntry.run = crashing


def oscillators(n, steps):
    return {"omega": np.linspace(0.5, 2.0, n), "dt": 1e-3, "steps": steps, "x": np.ones(n), "v": np.zeros(n)}


#: steps per sample of a run the test stops: over a minute a block (at the rate below), so it is
#: surely still running when the test acts
LONG = 300_000_000

#: two blocks of about three seconds on this machine's two workers (the oscillator vectorised on
#: the host: about 0.04 ns a sample-step): still running when the test acts
CASES = {
    "sliced": (oscillator, lambda: oscillators(4096, 30_000_000)),
    "whole": (ring_mean, lambda: {"x": np.random.default_rng(3).uniform(-1, 1, 4096), "steps": 900_000}),
}




def processing(client, part="eagle-"):
    return {addr: [k for k in keys if part in str(k)] for addr, keys in client.processing().items()}


def wait_processing(client, count, part="eagle-", timeout=120):
    """Wait until ``count`` workers each run one of this test's blocks."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if sum(1 for keys in processing(client, part).values() if keys) >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"{count} blocks did not start within {timeout} s")


def kill_workers(client):
    import psutil
    for pid in client.run(os.getpid).values():
        psutil.Process(pid).kill()


@pytest.mark.parametrize("transport", ["shared memory", "messages"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_worker_lost_and_restarted_gives_same_bits(case, transport, monkeypatch):
    """Both workers killed mid-block, the nannies restart them: the blocks are resubmitted to the
    new workers -- through the driver's shared memory, or (``messages``, as for workers on other
    hosts) with each block's share of the sliced planes, lost with its worker, sent again from
    the driver's planes, and the whole planes scattered again."""
    if transport == "messages":
        monkeypatch.setenv("EAGLE_DASK_SHM", "0")
    kernel, make = CASES[case]
    plugin = eagle.deploy(kernel)
    assert ("x" in plugin.sliceable) == (case == "sliced")
    ref = K.as_dict(plugin, eplan.plan(plugin, structure=eexec.HostTeam).run(**make()))
    with eagle_dask.local_cluster(n_workers=2) as client:
        client.wait_for_workers(2, timeout=120)
        p = eplan.plan(plugin, structure=DaskPartition.on(client, progress=False, timeout=60))
        p.run(**{**make(), "steps": 1})                          # compile on both workers
        th, box = run_in_thread(p, make())
        wait_processing(client, 2)
        time.sleep(0.2)
        kill_workers(client)
        assert th.is_alive(), "the run ended before the workers were killed: its blocks are too short"
        th.join(90)
        assert not th.is_alive(), "the run hung after every worker was restarted"
        assert "error" not in box, repr(box.get("error"))
        assert K.same_bits(ref, K.as_dict(plugin, box["out"]))


@pytest.mark.parametrize("transport", ["shared memory", "messages"])
def test_a_kernel_error_in_one_block_leaves_the_callers_planes_as_they_were(transport, monkeypatch):
    """The last block raises after about a second, long after the first block has finished and
    been fetched: the run raises the kernel's IndexError, and neither the caller's Mutable nor
    its Out holds a byte of the first block's results (messages wrote them at once, before)."""
    if transport == "messages":
        monkeypatch.setenv("EAGLE_DASK_SHM", "0")
    n = 1000
    work = np.zeros(n)
    work[n - 100:] = 3e6                     # the last block's last 100 samples: ~1 s of loop
    x, y = np.arange(n, dtype=np.float64), np.full(n, -1.0)
    x0, y0 = x.copy(), y.copy()
    with eagle_dask.local_cluster(n_workers=2) as client:
        client.wait_for_workers(2, timeout=120)
        p = eplan.plan(fails_at, structure=DaskPartition.on(client, progress=False, timeout=60))
        p.run(work=np.zeros(n), bad=-1, x=np.zeros(n), y=np.zeros(n))           # compiled on both workers
        with pytest.raises(IndexError, match=r"plane 'work'.*kernel 'fails_at'"):
            p.run(work=work, bad=n - 1, x=x, y=y)
    assert x.tobytes() == x0.tobytes(), f"the caller's Mutable changed: {int((x != x0).sum())} samples"
    assert y.tobytes() == y0.tobytes(), f"the caller's Out changed: {int((y != y0).sum())} samples"


def test_block_crashing_every_worker_is_given_up_in_bounded_time():
    with eagle_dask.local_cluster(n_workers=2) as client:
        client.wait_for_workers(2, timeout=120)
        client.register_plugin(CrashOn("crash_me"), name="eagle-test-crash")
        p = eplan.plan(eagle.deploy(crash_me), structure=DaskPartition.on(client, progress=False, timeout=30))
        th, box = run_in_thread(p, {"x": np.ones(100)})
        th.join(90)
        assert not th.is_alive(), "the run hung on a block that crashes every worker"
        err = box.get("error")
        assert isinstance(err, RuntimeError), repr(box)
        assert "'crash_me'" in str(err) and "rank " in str(err), str(err)


def _set_status(dask_worker, status):
    from distributed.core import Status
    dask_worker.status = Status[status]


def _statuses(dask_scheduler):
    return sorted(ws.status.name for ws in dask_scheduler.workers.values())


def set_status(client, status):
    """Every worker ``status``, as the scheduler sees it."""
    client.run(_set_status, status=status)
    end = time.monotonic() + 30
    while client.run_on_scheduler(_statuses) != [status] * 2:
        assert time.monotonic() < end, client.run_on_scheduler(_statuses)
        time.sleep(0.05)


def test_workers_that_take_nothing_end_the_run_in_bounded_time():
    """Every worker paused (as for memory): the blocks sit in no-worker on live addresses; the run
    raises TimeoutError after ``timeout`` seconds instead of waiting forever.  (No memory limit:
    the workers' memory monitor would unpause them.)"""
    with eagle_dask.local_cluster(n_workers=2, memory_limit=0) as client:
        client.wait_for_workers(2, timeout=120)
        p = eplan.plan(eagle.deploy(oscillator), structure=DaskPartition.on(client, progress=False, timeout=2))
        p.run(**oscillators(64, 1))
        set_status(client, "paused")
        try:
            th, box = run_in_thread(p, oscillators(4096, 10))
            th.join(60)
        finally:
            set_status(client, "running")
        assert not th.is_alive(), "the run hung with every worker paused"
        err = box.get("error")
        assert isinstance(err, TimeoutError), repr(box)
        assert "'oscillator'" in str(err) and "found no worker to run them for 2 s" in str(err), str(err)
        assert box["seconds"] < 30


@pytest.mark.parametrize("how", ["client closed", "futures cancelled"])
def test_client_closed_or_futures_cancelled_is_eagles_error(how):
    from distributed import Future
    plugin = eagle.deploy(oscillator)
    client = eagle_dask.local_cluster(n_workers=2)
    try:
        client.wait_for_workers(2, timeout=120)
        p = eplan.plan(plugin, structure=DaskPartition.on(client, progress=False))
        p.run(**oscillators(64, 1))
        th, box = run_in_thread(p, oscillators(4096, LONG))
        wait_processing(client, 2)
        if how == "client closed":
            client.close()
        else:
            keys = [k for ks in processing(client).values() for k in ks]
            client.cancel([Future(k, client) for k in keys])
        th.join(60)
        assert not th.is_alive()
        err = box.get("error")
        assert type(err) is RuntimeError, repr(err)
        assert "'oscillator'" in str(err), str(err)
        assert ("client closed" if how == "client closed" else "cancelled") in str(err), str(err)
    finally:
        client.close()


def test_ctrl_c_cancels_the_runs_tasks():
    """Ctrl-C (SIGINT to the driver's main thread) in the middle of a run: KeyboardInterrupt at
    once, the run's tasks are cancelled and each block stops at the end of its current piece, so
    the next run does not wait behind them."""
    plugin = eagle.deploy(oscillator)
    with eagle_dask.local_cluster(n_workers=2) as client:
        client.wait_for_workers(2, timeout=120)
        p = eplan.plan(plugin, structure=DaskPartition.on(client, progress=False))
        p.run(**oscillators(64, 1))
        main = threading.main_thread().ident
        sent = []

        def interrupt():
            try:
                wait_processing(client, 2, timeout=60)
            except AssertionError:
                return
            time.sleep(0.5)
            sent.append(time.monotonic())
            signal.pthread_kill(main, signal.SIGINT)

        helper = threading.Thread(target=interrupt, daemon=True)
        helper.start()
        t = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            p.run(**oscillators(8192, LONG))
            pytest.fail(f"the run ended after {time.monotonic() - t:.1f} s without the interrupt "
                        f"({'sent' if sent else 'not sent'})")
        assert sent and time.monotonic() - sent[0] < 5, "KeyboardInterrupt came late"
        helper.join(5)
        t = time.monotonic()
        out = p.run(**oscillators(512, 1000))
        assert time.monotonic() - t < 4.0, "the next run waited behind the abandoned blocks"
        ref = eplan.plan(plugin, structure=eexec.HostTeam).run(**oscillators(512, 1000))
        assert K.same_bits(ref, out)


# -- arguments ---------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, kind, words", [
    ({"n_workers": 0}, ValueError, "n_workers=0): n_workers is the number of worker processes: an integer >= 1"),
    ({"n_workers": -1}, ValueError, "n_workers=-1)"),
    ({"n_workers": 1.5}, TypeError, "not a float"),
    ({"n_workers": True}, TypeError, "not a bool"),
    ({"threads_per_worker": 0}, ValueError, "threads_per_worker=0): threads_per_worker is the threads of each "
                                            "worker"),
    ({"threads_per_worker": "2"}, TypeError, "not a str"),
    ({"processes": False}, ValueError, "processes=False): eagle's local cluster runs its workers as processes"),
])
def test_local_cluster_refuses_bad_arguments(kwargs, kind, words, monkeypatch):
    import distributed
    started = []
    monkeypatch.setattr(distributed, "LocalCluster", lambda *a, **k: started.append(k))
    with pytest.raises(kind) as err:
        eagle_dask.local_cluster(**kwargs)
    assert words in str(err.value), str(err.value)
    assert "local_cluster(" in str(err.value)
    assert started == []


@pytest.mark.parametrize("kwargs, kind, words", [
    ({"timeout": -1}, ValueError, "timeout=-1): timeout is the seconds a run waits while the cluster has no "
                                  "worker before it raises TimeoutError: a finite number > 0"),
    ({"timeout": float("nan")}, ValueError, "timeout=nan)"),
    ({"timeout": float("inf")}, ValueError, "timeout=inf)"),
    ({"timeout": 0}, ValueError, "timeout=0)"),
    ({"timeout": "5"}, TypeError, "not a str"),
    ({"timeout": None}, TypeError, "not a NoneType"),
    ({"workers": []}, ValueError, "workers=[]) names no worker"),
    ({"workers": [1.5]}, TypeError, "1.5 is not a worker address or name"),
    ({"progress": "yes"}, TypeError, "progress='yes'): progress is True, False or None"),
])
def test_on_refuses_bad_arguments(kwargs, kind, words):
    with pytest.raises(kind) as err:
        DaskPartition.on(**kwargs)
    assert words in str(err.value), str(err.value)


def test_on_takes_what_it_says():
    s = DaskPartition.on(workers="tcp://127.0.0.1:1", progress=np.bool_(False), timeout=np.float32(2.5))
    assert s.workers == ["tcp://127.0.0.1:1"] and s.progress is False and s.timeout == 2.5
    assert DaskPartition.on(workers=np.int64(0)).workers == [0]
    with pytest.raises(TypeError, match=r"client='tcp://127.0.0.1:1'\): client is a distributed.Client"):
        DaskPartition.on("tcp://127.0.0.1:1")


#: seconds a hung worker is given in the stall test (the default is 15)
STALL = 3.0


@contextlib.contextmanager
def stopped_worker(client, address):
    """The worker process at ``address`` stopped with SIGSTOP, as on a hung host (the worker only:
    under ``local_cluster`` its nanny lives in this process), and let go on with SIGCONT however
    the block ends."""
    import psutil
    proc = psutil.Process(client.run(os.getpid, workers=[address])[address])
    assert proc.pid != os.getpid()
    proc.send_signal(signal.SIGSTOP)
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGCONT)


@contextlib.contextmanager
def running_on_two_workers(plugin, planes):
    """A local cluster of two workers running ``planes`` through ``plugin`` in a thread (the run's
    ``stall_timeout`` is ``STALL``), once both blocks are under way: (client, the thread, its box,
    the address of one of the two busy workers)."""
    with eagle_dask.local_cluster(n_workers=2) as client:
        client.wait_for_workers(2, timeout=120)
        p = eplan.plan(plugin, structure=DaskPartition.on(client, progress=False, stall_timeout=STALL))
        p.run(**oscillators(64, 1))                                   # compile on both workers
        th, box = run_in_thread(p, planes)
        wait_processing(client, 2)
        yield client, th, box, sorted(a for a, keys in processing(client).items() if keys)[0]


@pytest.mark.parametrize("transport", ["shared memory", "messages"])
def test_a_hung_worker_is_given_up_after_stall_timeout_with_the_same_bits(transport, monkeypatch):
    """One worker process stopped with SIGSTOP mid-block, as on a hung host: no heartbeat
    reaches the scheduler, which would wait for its worker-ttl (minutes).  The block is rerun on
    the other worker after ``stall_timeout``: the bits of one process, well before the worker is
    let go on."""
    if transport == "messages":
        monkeypatch.setenv("EAGLE_DASK_SHM", "0")
    plugin = eagle.deploy(oscillator)
    make = CASES["sliced"][1]
    t0 = time.monotonic()
    ref = K.as_dict(plugin, eplan.plan(plugin, structure=eexec.HostTeam).run(**make()))
    one = time.monotonic() - t0          # the whole run in this process: about a block on a worker
    with running_on_two_workers(plugin, make()) as (client, th, box, address):
        with stopped_worker(client, address):
            assert th.is_alive(), "the run ended before the worker was stopped: its blocks are too short"
            th.join(60)
            assert not th.is_alive(), "the run waited for the hung worker"
    assert "error" not in box, repr(box.get("error"))
    assert K.same_bits(ref, K.as_dict(plugin, box["out"]))
    # the stall bound, the other worker's own block, the block rerun there, and the polls (a bound
    # relative to this machine's speed now: the time the whole run took in this process)
    assert box["seconds"] < STALL + 4 * one + 10, (box["seconds"], one)


def test_a_hung_block_that_goes_on_while_its_rerun_runs_changes_nothing():
    """A worker stopped mid-block in shared memory (its writes into the Mutables' region under
    way), its block rerun elsewhere after ``stall_timeout`` -- and then the worker goes on while the
    rerun runs, writing the rest of its samples into the region.  No try of a block may read what
    another wrote: the run's bits are one process's."""
    plugin = eagle.deploy(oscillator)
    make = CASES["sliced"][1]
    ref = K.as_dict(plugin, eplan.plan(plugin, structure=eexec.HostTeam).run(**make()))
    with running_on_two_workers(plugin, make()) as (client, th, box, address):
        first = {k for keys in processing(client).values() for k in keys}
        time.sleep(0.5)                                 # its block well under way: samples written
        with stopped_worker(client, address):
            end = time.monotonic() + STALL + 60
            while time.monotonic() < end and not any(set(keys) - first for a, keys in processing(client).items()
                                                     if a != address):
                time.sleep(0.05)
            rerun = {a: set(keys) - first for a, keys in processing(client).items() if a != address}
        assert any(rerun.values()), "the stopped worker's block was not rerun elsewhere"
        assert th.is_alive(), "the run ended before the stopped worker went on"
        th.join(120)
        assert not th.is_alive()
    assert "error" not in box, repr(box.get("error"))
    assert K.same_bits(ref, K.as_dict(plugin, box["out"])), "a stale try of a block changed the results"


def test_stall_timeout_is_checked():
    for bad, err in ((0, ValueError), (-1.0, ValueError), (float("inf"), ValueError), ("15", TypeError),
                     (True, TypeError)):
        with pytest.raises(err, match=r"stall_timeout=.*unheard"):
            DaskPartition.on(progress=False, stall_timeout=bad)


def test_a_share_lies_on_the_worker_named_or_is_refused_within_the_bound():
    """``send.scatter_to``: a block's share lies on the worker it was sent to, and only there, with
    the bytes sent; a worker that is not in the cluster takes nothing: ``None`` within the bound,
    and the scheduler holds nothing under its key."""
    from eagle_dask import send
    x = np.random.default_rng(5).uniform(-1, 1, 1000)
    with eagle_dask.local_cluster(n_workers=2) as client:
        client.wait_for_workers(2, timeout=120)
        for i, address in enumerate(sorted(client.scheduler_info()["workers"])):
            f = send.scatter_to(client, f"t-eagle-share-0a-rank{i}", {"x": x}, address, 30)
            assert f is not None, address
            assert list(client.who_has([f])[f.key]) == [address], (address, client.who_has([f]))
            assert np.array_equal(f.result()["x"].view(np.uint64), x.view(np.uint64))
            f.release()
        t0 = time.monotonic()
        assert send.scatter_to(client, "t-eagle-share-0a-rank9", {"x": x}, "tls://127.0.0.1:9", 2.0) is None
        assert time.monotonic() - t0 < 2.0 + 5, "the send to a missing worker outlived its bound"
        assert "t-eagle-share-0a-rank9" not in client.who_has(), "a refused share left a key on the scheduler"


def test_a_worker_hung_before_the_run_gets_no_share_and_the_run_ends_with_the_same_bits(monkeypatch):
    """Through the messages (as for workers on other hosts): one worker stopped with SIGSTOP before
    the run, so its share cannot be sent to it.  The send is given up after ``stall_timeout`` (plus
    the share's bytes at ``SLOW_SEND``), the share goes to the other worker, and the run returns
    the bits of one process, well before the run's ``timeout``."""
    monkeypatch.setenv("EAGLE_DASK_SHM", "0")
    plugin = eagle.deploy(oscillator)
    make = lambda: oscillators(4096, 1000)          # noqa: E731 - short blocks: the send is what is timed
    ref = K.as_dict(plugin, eplan.plan(plugin, structure=eexec.HostTeam).run(**make()))
    with eagle_dask.local_cluster(n_workers=2) as client:
        client.wait_for_workers(2, timeout=120)
        p = eplan.plan(plugin, structure=DaskPartition.on(client, progress=False, stall_timeout=STALL,
                                                          timeout=120))
        p.run(**oscillators(64, 1))                                   # compile on both workers
        with stopped_worker(client, sorted(client.scheduler_info()["workers"])[0]):
            th, box = run_in_thread(p, make())
            th.join(100)
            assert not th.is_alive(), "the run waited for the hung worker"
    assert "error" not in box, repr(box.get("error"))
    assert K.same_bits(ref, K.as_dict(plugin, box["out"]))
    assert box["seconds"] < STALL + 30, box["seconds"]
