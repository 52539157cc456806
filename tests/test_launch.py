"""How eagle's clusters are launched: ``eagle-dask cluster`` writes its scheduler file only once
its workers have joined, a hung worker is forgotten by the scheduler after eagle's stall bound
(not distributed's 5 minutes), and without a dashboard no HTTP page is served; every listener
on loopback."""
from __future__ import annotations

import time

import pytest

pytest.importorskip("distributed")

import eagle_dask  # noqa: E402
from eagle_dask.structure import DEFAULT_STALL  # noqa: E402
from tests.launch import assert_loopback_only, listeners, mpiexec, process_tree  # noqa: E402


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
            assert_loopback_only(listeners(process_tree(proc.pid)), "eagle-dask cluster --no-dashboard")
            client.shutdown()
        assert proc.wait(timeout=120) == 0
        assert not sched.exists()
    finally:
        if proc.poll() is None:
            proc.kill()


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
