"""eagle_dask under MPI: ``initialize()`` (dask-mpi) and the ``eagle-dask cluster`` launcher.

Every MPI job goes through ``tests.launch.mpiexec`` (mpiexec.gforker, UCX_NET_DEVICES=lo).
The scripts keep their work under ``if __name__ == "__main__":``.
"""
from __future__ import annotations

import json
import os
import textwrap
import time

import pytest

pytest.importorskip("dask_mpi")

import eagle  # noqa: E402
import eagle.exec as eexec  # noqa: E402
import eagle_dask  # noqa: E402
from eagle import plan as eplan  # noqa: E402
from tests import kernels as K  # noqa: E402
from tests.launch import beyond_loopback, listeners, mpiexec, process_tree, require_mpi  # noqa: E402

SCRIPT = textwrap.dedent('''
    import json
    import os

    import eagle
    import eagle.exec as eexec
    import eagle_dask
    from eagle import plan as eplan
    from tests import kernels as K
    from tests.launch import beyond_loopback, listeners, process_tree

    if __name__ == "__main__":
        client = eagle_dask.initialize()
        ranks = eagle_dask.DaskPartition.ranks()
        same = {}
        for name in K.GATHERABLE:
            plugin = eagle.deploy(K.CASES[name][0])
            for n in (0, 3, 301):
                ref = eplan.plan(plugin, structure=eexec.HostTeam).run(**K.inputs(name, n))
                got = eplan.plan(plugin, structure=eagle_dask.DaskPartition).run(**K.inputs(name, n))
                same[f"{name}/{n}"] = K.same_bits(K.as_dict(plugin, ref), K.as_dict(plugin, got))
        found = listeners(process_tree(os.getppid()))
        print("RESULT " + json.dumps({"ranks": {r: [str(w.name), w.host, w.address] for r, w in ranks.items()},
                                      "warm": list(client.run(eagle_dask.warm.started).values()),
                                      "same": same, "listeners": len(found),
                                      "beyond": beyond_loopback(found)}), flush=True)
''')


@pytest.mark.parametrize("world", [4, 5])
def test_initialize_runs_plans_with_the_same_bits(tmp_path, world):
    script = tmp_path / "my_run.py"
    script.write_text(SCRIPT)
    proc = mpiexec(world, [str(script)], timeout=300, env={"EAGLE_DASK_PROGRESS": "0"})
    assert proc.returncode == 0
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert len(line) == 1, proc.stdout + proc.stderr
    res = json.loads(line[0][len("RESULT "):])
    # ranks are the worker MPI ranks 2.., sorted, all on loopback
    assert [res["ranks"][str(r)][0] for r in range(world - 2)] == [str(r) for r in range(2, world)]
    assert all(w[1] == "127.0.0.1" and w[2].startswith("tls://127.0.0.1:") for w in res["ranks"].values())
    assert res["same"] and all(res["same"].values()), {k: v for k, v in res["same"].items() if not v}
    assert len(res["warm"]) == world - 2 and all(w.get("seconds", 0) > 0 for w in res["warm"]), res["warm"]
    assert res["listeners"] >= world - 1          # the scheduler and every worker
    assert res["beyond"] == []


def test_initialize_refuses_outside_main():
    with pytest.raises(RuntimeError, match=r'if __name__ == "__main__":'):
        eagle_dask.initialize()


class _World:
    def __init__(self, size):
        self.size = size

    def Get_size(self):
        return self.size


@pytest.mark.parametrize("size", [1, 2])
def test_initialize_refuses_a_small_world(size):
    scope = {"__name__": "__main__", "eagle_dask": eagle_dask, "comm": _World(size)}
    with pytest.raises(RuntimeError, match=rf"at least 3 MPI ranks.*the world has {size}"):
        exec("eagle_dask.initialize(comm=comm)", scope)


def test_cluster_launcher_and_scheduler_file_join(tmp_path):
    require_mpi()
    sched = tmp_path / "scheduler.json"
    proc = mpiexec(3, ["-m", "eagle_dask", "cluster", "--scheduler-file", str(sched)], popen=True)
    try:
        end = time.monotonic() + 180
        while not sched.exists() and proc.poll() is None and time.monotonic() < end:
            time.sleep(0.2)
        assert sched.exists(), proc.stdout.read() if proc.poll() is not None else "no scheduler file"
        with eagle_dask.connect(sched) as client:
            client.wait_for_workers(2, timeout=180)
            ranks = eagle_dask.DaskPartition.on(client).ranks()
            assert [w.name for w in ranks.values()] == [1, 2]
            started = list(client.run(eagle_dask.warm.started).values())
            assert len(started) == 2 and all(w.get("seconds", 0) > 0 for w in started), started
            plugin = eagle.deploy(K.reductions)
            ref = eplan.plan(plugin, structure=eexec.HostTeam).run(**K.inputs("reductions", 333))
            got = eplan.plan(plugin, structure=eagle_dask.DaskPartition.on(client, progress=False)).run(
                **K.inputs("reductions", 333))
            assert K.same_bits(ref, got)
            found = listeners(process_tree(proc.pid))
            assert len(found) >= 3 and beyond_loopback(found) == []
            client.shutdown()
        assert proc.wait(timeout=120) == 0, proc.stdout.read()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
