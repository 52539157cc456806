"""A numpy-mode run's blocks reach the scheduler in one message (``EagerRun._submit_together``).

Each ``client.submit`` from the driver's thread goes out on its own, and the client sends at
most one message per interval: the blocks of one run, submitted one by one, started an interval
apart.  What is checked here is what goes on the wire: every frame the client writes to the
scheduler during the runs is recorded, and all of a run's ``update-graph`` messages must be in
one frame -- for shared-memory and message runs, 2 and 3 blocks, and after a block is resubmitted
alone.  Bits are those of one process (``HostTeam``).
"""
from __future__ import annotations

import time

import numpy as np
import pytest

pytest.importorskip("distributed")

import eagle  # noqa: E402
import eagle.exec as eexec  # noqa: E402
from eagle import plan as eplan  # noqa: E402
from eagle.bits import same_bits  # noqa: E402
from eagle.models import oscillator  # noqa: E402
from eagle_dask import DaskPartition  # noqa: E402
from tests.launch import local_client  # noqa: E402


@pytest.fixture(scope="module")
def client():
    with local_client(3) as c:
        yield c


class Frames:
    """Records the ops of every frame the client writes to the scheduler while in use."""

    def __init__(self, client):
        self.comm = client.scheduler_comm.comm
        self.frames = []

    def __enter__(self):
        original = self.write = self.comm.write

        async def write(msgs, *args, **kwargs):
            if isinstance(msgs, list):
                self.frames.append([m.get("op") for m in msgs if isinstance(m, dict)])
            return await original(msgs, *args, **kwargs)

        self.comm.write = write
        return self

    def __exit__(self, *exc):
        self.comm.write = self.write

    def graphs(self):
        """The number of ``update-graph`` messages in each frame that has any."""
        return [f.count("update-graph") for f in self.frames if "update-graph" in f]


def inputs(n, seed):
    rng = np.random.default_rng(seed)
    return {"omega": rng.uniform(0.5, 2.0, n), "dt": 0.01, "steps": 20, "x": np.ones(n), "v": np.zeros(n)}


@pytest.mark.parametrize("shm", ["1", "0"])
@pytest.mark.parametrize("ranks", [2, 3])
def test_a_runs_blocks_go_to_the_scheduler_in_one_frame(client, monkeypatch, shm, ranks):
    """Each ``submit`` takes 5 ms more here (as a large task's serialization would): submitted one
    after the other from this thread, the client's loop sends the first before the next is made."""
    monkeypatch.setenv("EAGLE_DASK_SHM", shm)
    submit = client.submit

    def slow_submit(*args, **kwargs):
        future = submit(*args, **kwargs)
        time.sleep(0.005)
        return future
    monkeypatch.setattr(client, "submit", slow_submit)
    plugin = eagle.deploy(oscillator)
    one = eplan.plan(plugin, structure=eexec.HostTeam)
    workers = sorted(client.scheduler_info(n_workers=-1)["workers"])[:ranks]
    p = eplan.plan(plugin, structure=DaskPartition.on(client, workers=workers, progress=False))
    p.run(**inputs(1001, 0))                              # warm: compiled on the workers
    for seed in range(1, 4):
        with Frames(client) as frames:
            got = p.run(**inputs(1001, seed))
        assert frames.graphs() == [ranks], (seed, frames.frames)
        assert same_bits(one.run(**inputs(1001, seed)), got)
