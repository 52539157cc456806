"""How eagle's clusters are launched: ``eagle-dask cluster`` writes its scheduler file only once
its workers have joined, a hung worker is forgotten by the scheduler after eagle's stall bound
(not distributed's 5 minutes), and without a dashboard no HTTP page is served; every listener
on loopback.  When the scheduler's rank is lost, a run says so (not "cancelled"), and ``connect``
refuses a scheduler file left behind, within seconds, naming it."""
from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import time

import numpy as np
import pytest

pytest.importorskip("distributed")

import eagle  # noqa: E402
import eagle_dask  # noqa: E402
from eagle import plan as eplan  # noqa: E402
from eagle_dask import DaskPartition  # noqa: E402
from tests import kernels as K  # noqa: E402
from eagle_dask.structure import DEFAULT_STALL  # noqa: E402
from tests.launch import (ROOT, assert_loopback_only, listeners, mpiexec, process_tree, run_in_thread,  # noqa: E402
                          speaks_http)


slow_sine = K.slow_sine


def _cluster(n, sched, *more):
    """``eagle-dask cluster`` on ``n`` ranks under gforker, up (its scheduler file written)."""
    proc = mpiexec(n, ["-m", "eagle_dask", "cluster", "--scheduler-file", str(sched), "--no-dashboard", *more],
                   popen=True)
    end = time.monotonic() + 180
    while not sched.exists() and proc.poll() is None and time.monotonic() < end:
        time.sleep(0.05)
    if not sched.exists():
        _end(proc)
        raise AssertionError(proc.stdout.read() if proc.poll() is not None else "no scheduler file in 180 s")
    return proc


def _end(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)


def _scheduler_pid(proc, address):
    port = int(address.rsplit(":", 1)[1])
    pids = [pid for pid, _, p in listeners(process_tree(proc.pid)) if p == port]
    assert pids, f"no process of the job listens at {address}"
    return pids[0]


def _ttl(dask_scheduler):
    return dask_scheduler.worker_ttl


def _routes(dask_worker=None, dask_scheduler=None):
    import dask
    which = "scheduler" if dask_scheduler is not None else "worker"
    return dask.config.get(f"distributed.{which}.http.routes")


def test_the_scheduler_file_is_written_once_every_worker_joined(tmp_path):
    sched = tmp_path / "scheduler.json"
    proc = mpiexec(4, ["-m", "eagle_dask", "cluster", "--scheduler-file", str(sched), "--no-dashboard"], popen=True)
    try:
        end = time.monotonic() + 180
        while not sched.exists() and proc.poll() is None and time.monotonic() < end:
            time.sleep(0.05)
        assert sched.exists(), proc.stdout.read() if proc.poll() is not None else "no scheduler file"
        with eagle_dask.connect(sched) as client:
            seen = len(client.scheduler_info()["workers"])          # no wait: the file means ready
            assert seen == 3, f"the scheduler file was written with {seen} of 3 workers joined"
            assert client.run_on_scheduler(_ttl) == DEFAULT_STALL
            assert client.run_on_scheduler(_routes) == []
            assert set(map(str, client.run(_routes).values())) == {"[]"}
            found = listeners(process_tree(proc.pid))
            assert_loopback_only(found, "eagle-dask cluster --no-dashboard")
            comms = {client.scheduler.address, *client.scheduler_info()["workers"]}
            ports = {int(a.rsplit(":", 1)[1]) for a in comms}
            ranks = {pid for pid, _, port in found if port in ports}
            assert len(ranks) == 4, found
            http = [(pid, port) for pid, ip, port in found if pid in ranks and port not in ports and speaks_http(port)]
            assert http == [], f"--no-dashboard, and a rank still serves HTTP: {http}"
            assert all(not w["services"] for w in client.scheduler_info()["workers"].values())
            client.shutdown()
        assert proc.wait(timeout=120) == 0
        assert not sched.exists()
    finally:
        for pid in reversed(process_tree(proc.pid)):        # the ranks too: a failed check leaks none
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_local_cluster_without_a_dashboard_serves_no_http_at_all():
    """``dashboard_address=None``: no process of the cluster (scheduler, nannies, workers) answers
    HTTP (distributed alone would still serve the dashboard on 127.0.0.1:8787 and the workers'
    metrics); with the default, the dashboard answers, so the probe can tell."""
    import psutil
    for dashboard, want in ((None, 0), ("127.0.0.1:0", 1)):
        with eagle_dask.local_cluster(n_workers=2, dashboard_address=dashboard) as client:
            pids = {p.pid for p in psutil.Process().children(recursive=True)} | {os.getpid()}
            found = listeners(pids)
            assert_loopback_only(found, "local_cluster")
            http = [port for _, _, port in found if speaks_http(port)]
            assert len(http) >= want and (want or http == []), (dashboard, http)
            assert bool(client.scheduler_info()["services"]) is bool(want)
            d = K.inputs("axpb", 1001)
            got = eplan.plan(eagle.deploy(K.axpb), structure=DaskPartition.on(client, progress=False)).run(**d)
            assert K.same_bits(got, d["a"] * d["x"] + d["b"])


def test_local_cluster_forgets_a_silent_worker_after_the_stall_bound():
    with eagle_dask.local_cluster(n_workers=1) as client:
        assert client.run_on_scheduler(_ttl) == DEFAULT_STALL


def test_a_scheduler_that_cannot_start_ends_the_whole_job_with_its_reason(tmp_path):
    """A network name the host does not have: rank 0 says so and aborts the MPI job, instead of
    leaving the worker ranks waiting for an address until the job's time limit."""
    start = time.monotonic()
    proc = mpiexec(3, ["-m", "eagle_dask", "cluster", "--scheduler-file", str(tmp_path / "s.json"),
                       "--interface", "ib0"], check=False, timeout=120)
    took = time.monotonic() - start
    assert proc.returncode != 0
    assert took < 30, f"the job took {took:.0f} s to end"
    out = proc.stdout + proc.stderr
    assert "'ib0' is not a valid network interface" in out and "ending the MPI job" in out, out[-3000:]
    assert not (tmp_path / "s.json").exists()


def test_a_run_whose_scheduler_rank_is_lost_says_so(tmp_path):
    sched = tmp_path / "s.json"
    proc = _cluster(3, sched)
    try:
        client = eagle_dask.connect(sched)
        address = client.scheduler.address
        p = eplan.plan(eagle.deploy(slow_sine), structure=DaskPartition.on(client))
        th, box = run_in_thread(p, {"x": np.arange(8.0), "steps": 2_000_000_000})
        time.sleep(2.0)
        os.kill(_scheduler_pid(proc, address), signal.SIGKILL)
        th.join(60)
        assert not th.is_alive(), "the run still waits 60 s after its scheduler's rank was killed"
        err = box.get("error")
        assert isinstance(err, RuntimeError), box
        text = str(err)
        assert "connection to the scheduler" in text and address in text and "'slow_sine'" in text, text
        assert "cancel" not in text, text
        client.close()
    finally:
        _end(proc)


def test_connect_refuses_a_scheduler_file_whose_scheduler_is_gone(tmp_path):
    sched = tmp_path / "s.json"
    proc = _cluster(2, sched)
    try:
        left = tmp_path / "left.json"            # what a killed scheduler's rank leaves behind
        shutil.copy2(sched, left)
        shutil.copy2(str(sched) + ".credentials.json", str(left) + ".credentials.json")
        with eagle_dask.connect(sched) as client:
            address = client.scheduler.address
            client.shutdown()
        assert proc.wait(timeout=120) == 0
    finally:
        _end(proc)
    start = time.monotonic()
    with pytest.raises(ConnectionError) as e:
        eagle_dask.connect(left)
    took = time.monotonic() - start
    assert took < 8, f"connect took {took:.1f} s to refuse a file whose scheduler is gone"
    assert str(left) in str(e.value) and address in str(e.value) and "nothing listens" in str(e.value)


def test_a_quiet_cluster_says_nothing_through_a_run_and_its_shutdown(tmp_path):
    """``eagle-dask cluster --quiet``: joined (connect's check that the scheduler is there
    included), a run, ``client.shutdown()``: not one INFO line or traceback, and no warning of a
    failed handshake (connect's check is an ordinary client coming and going)."""
    sched = tmp_path / "s.json"
    proc = _cluster(3, sched, "--quiet")
    try:
        with eagle_dask.connect(sched) as client:
            p = eplan.plan(eagle.deploy(slow_sine), structure=DaskPartition.on(client, progress=False))
            y = p.run(x=np.arange(5.0), steps=3)
            ref = np.array([sum(0.5 * math.sin(v + k) for k in range(3)) for v in np.arange(5.0)])
            assert np.allclose(y, ref)
            client.shutdown()
        out = proc.communicate(timeout=120)[0]
        assert proc.returncode == 0, out[-3000:]
    finally:
        _end(proc)
    noise = [line for line in out.splitlines()
             if " - INFO - " in line or "Traceback" in line or "handshake failed" in line]
    assert noise == [], "\n".join(noise[:40])


def test_initialize_is_quiet_through_a_run_and_the_shutdown_at_exit():
    """``eagle_dask.initialize()`` (``quiet=True`` by default) under mpiexec: the run has numpy's
    bits, and the whole job prints not one INFO line or traceback."""
    proc = mpiexec(4, [os.path.join(ROOT, "tests", "mpi_scripts", "quiet_initialize.py")], timeout=240)
    out = proc.stdout + proc.stderr
    assert 'RESULT {"same": true}' in out, out[-3000:]
    noise = [line for line in out.splitlines() if " - INFO - " in line or "Traceback" in line]
    assert noise == [], "\n".join(noise[:40])
