"""The thread budget of a HostTeam run the user starts inside a Dask task or an MPI rank: a team
never takes more threads than the worker has, or than the rank's share of the host's CPUs."""
from __future__ import annotations

import json
import os
import threading

import numpy as np
import pytest

import eagle
import eagle.exec as eexec
import eagle.host
from eagle import plan as eplan
from eagle.bits import same_bits
from eagle.mpi.world import local_ranks
from tests import kernels as K
from tests.launch import mpiexec

N = 1_000_000            # enough samples for a team of every thread there is


def team_threads():
    return sum(t.name.startswith("eagle-team") for t in threading.enumerate())


def run_in_a_task(x):
    """What a user's own Dask task does: a HostTeam run; returns its output and the team's size."""
    y = eplan.plan(eagle.deploy(K.axpb), structure=eexec.HostTeam).run(x=x, a=2.0, b=1.0)
    return y, eagle.host.num_threads(), team_threads()


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one CPU: every budget is one thread")
def test_a_hostteam_run_inside_a_users_dask_task_fits_its_worker(monkeypatch):
    from distributed import Client, LocalCluster
    monkeypatch.delenv("EAGLE_NUM_THREADS", raising=False)
    x = np.random.default_rng(3).random(N)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster, Client(cluster) as c:
        c.wait_for_workers(1, timeout=120)
        y, budget, started = c.submit(run_in_a_task, x, pure=False).result(timeout=300)
    assert same_bits(y, 2.0 * x + 1.0)
    assert budget == 1, "a 1-thread worker's task got a team of the host's CPUs"
    assert started <= 1, f"{started} team threads in a 1-thread worker"


def test_local_ranks_from_each_launcher():
    assert local_ranks({}) == 1
    assert local_ranks({"PMI_RANK": "0", "PMI_SIZE": "3", "PMI_FD": "7"}) == 3          # gforker: one host
    assert local_ranks({"PMI_SIZE": "8", "PMI_FD": "7", "MPI_LOCALNRANKS": "2"}) == 2   # hydra
    assert local_ranks({"OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}) == 4
    slurm = {"SLURM_JOB_ID": "7", "SLURM_STEP_TASKS_PER_NODE": "2(x3),1", "PMI_SIZE": "7", "PMI_FD": "5"}
    assert [local_ranks(dict(slurm, SLURM_NODEID=str(k))) for k in range(4)] == [2, 2, 2, 1]
    # a batch script is one process, whatever the job's tasks
    assert local_ranks({"SLURM_JOB_ID": "7", "SLURM_TASKS_PER_NODE": "4", "SLURM_NODEID": "0"}) == 1
    assert local_ranks({"MPI_LOCALNRANKS": "two"}) == 1


_RANK = """
import json, threading, numpy as np, eagle, eagle.exec as eexec, eagle.host
from eagle import plan as eplan
from tests import kernels as K
x = np.arange(%d, dtype=np.float64)
y = eplan.plan(eagle.deploy(K.axpb), structure=eexec.HostTeam).run(x=x, a=2.0, b=1.0)
print(json.dumps({"budget": eagle.host.num_threads(), "cpus": eagle.host.cpu_count(),
                  "team": sum(t.name.startswith("eagle-team") for t in threading.enumerate()),
                  "right": bool(np.array_equal(y, 2.0 * x + 1.0))}))
""" % N


@pytest.mark.parametrize("ranks", [1, 2])
def test_a_hostteam_run_in_each_mpi_rank_takes_its_share(ranks, monkeypatch):
    monkeypatch.delenv("EAGLE_NUM_THREADS", raising=False)
    proc = mpiexec(ranks, ["-c", _RANK], timeout=300)
    recs = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(recs) == ranks
    for r in recs:
        assert r["right"]
        if r["cpus"] < (os.cpu_count() or 1):        # bound by the launcher: the mask is the share
            want = r["cpus"]
        else:
            want = max(1, (os.cpu_count() or 1) // ranks)
        assert r["budget"] == want, (r, ranks)
        assert r["team"] <= want, (r, ranks)
