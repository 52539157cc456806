"""Planes through shared memory between the driver and the workers on its host (numpy mode).

The bits are those of one process (``HostTeam``) and of numpy, through the segments, at 1, 2
and 3 workers; the workers really mapped the driver's segments; a worker counted as another
host (``EAGLE_DASK_HOST_ID``) takes the messages in the same run, with the same bits; and
``/dev/shm`` holds none of this process's segments after a run ends in any way -- returned,
raised, a worker killed, a block that kills every worker, a cancelled run, Ctrl-C, and an
interpreter that exits without closing its run -- but the arena, after a run that returned
(``eagle_dask.arena``: one segment, every region given back), until ``close_arena`` or exit.
Every test runs with the arena on and off (``EAGLE_DASK_ARENA``).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

pytest.importorskip("distributed")

import eagle  # noqa: E402
import eagle.exec as eexec  # noqa: E402
import eagle_dask  # noqa: E402
from eagle import plan as eplan  # noqa: E402
from eagle.models import oscillator  # noqa: E402
from eagle_dask import DaskPartition, arena, shm  # noqa: E402
from tests import kernels as K  # noqa: E402
from tests.launch import ROOT, local_client, run_in_thread  # noqa: E402
from tests.test_dask_faults import (LONG, CrashOn, crash_me, kill_workers, oscillators, processing,  # noqa: E402
                                    wait_processing)

pytestmark = pytest.mark.skipif(not shm.enabled(), reason="no writable /dev/shm")

SIZES = (0, 1, 31, 100_000)


def ours():
    """This process's segments in /dev/shm."""
    mine = f"{shm.PREFIX}{os.getpid()}-"
    return sorted(f for f in os.listdir(shm.SHM_DIR) if f.startswith(mine))


@pytest.fixture(autouse=True, params=["arena", "fresh"])
def mode(request, monkeypatch):
    """Every test with the arena on and off; no arena left from another test."""
    monkeypatch.setenv("EAGLE_DASK_ARENA", "1" if request.param == "arena" else "0")
    arena.close_arena()
    yield request.param
    arena.close_arena()
    assert ours() == [], "close_arena left segments"


def after_return(why=""):
    """What a run that returned leaves in /dev/shm: nothing with fresh segments; with the arena,
    the arena alone (mode 0600), every region of it given back."""
    cur = arena.current()
    if not arena.enabled():
        assert cur is None
    assert ours() == ([cur.name] if cur is not None else []), f"segments left in /dev/shm {why}"
    if cur is not None:
        assert os.stat(os.path.join(shm.SHM_DIR, cur.name)).st_mode & 0o777 == 0o600
        assert arena.in_use() == 0, f"regions of the arena not given back {why}"


def on(client, k, **kw):
    names = [r.name for r in DaskPartition.on(client).ranks(gpus=False).values()][:k]
    return DaskPartition.on(client, workers=names, progress=False, **kw)


def mapped(client):
    """{worker address: segments it mapped} since the last ``clear_opened``."""
    return {a: v for a, v in client.run(shm.opened, on_error="return").items() if not isinstance(v, BaseException)}


@pytest.fixture(scope="module")
def client():
    with local_client(3) as c:
        yield c


@pytest.mark.parametrize("name", ["axpb", "oscillator", "stencil", "vectors", "reductions", "transcendental"])
def test_same_bits_through_shared_memory(client, name):
    """1, 2, 3 workers, 0, 1, 31 and 10^5 samples (vector planes in ``vectors``, Mutables in
    ``oscillator``, whole planes in ``stencil``, cells in ``reductions``): the bits of one
    process and of numpy; every worker that ran a block mapped segments; none left after."""
    plugin = eagle.deploy(K.CASES[name][0])
    numpy_reference = K.CASES[name][2]
    for n in SIZES:
        want = K.one_process(name, n)
        if numpy_reference is not None:
            exact = numpy_reference(K.inputs(name, n))
            assert K.same_bits({k: want[k] for k in exact}, exact), f"{name}, n={n}: one process differs from numpy"
        for k in (1, 2, 3):
            client.run(shm.clear_opened)
            got = K.as_dict(plugin, eplan.plan(plugin, structure=on(client, k)).run(**K.inputs(name, n)))
            assert K.same_bits(want, got), f"{name}: {k} workers, n={n}: not the bits of one process"
            used = [a for a, names in mapped(client).items() if names]
            assert len(used) == (min(k, n) if not plugin.cells else min(k, -(-n // 32))), (name, k, n, used)
            after_return(f"{name}, {k} workers, n={n}")


@pytest.mark.parametrize("name", ["reductions", "oscillator"])
def test_blocks_on_the_drivers_host_are_not_fetched(client, monkeypatch, name):
    """Outputs and the cells' row partials are written in the segments: the driver fetches nothing
    from its host's workers (one round trip per block saved), and the cells have the bits of one
    process at every cut.  Through the messages the same runs fetch every block."""
    plugin = eagle.deploy(K.CASES[name][0])
    fetched = []
    real = client._gather

    async def counting(futures, *args, **kwargs):
        fetched.append(len(futures))
        return await real(futures, *args, **kwargs)

    monkeypatch.setattr(client, "_gather", counting)
    for shared in (True, False):
        monkeypatch.setenv("EAGLE_DASK_SHM", "1" if shared else "0")
        fetched.clear()
        for n in (0, 1, 33, 1001):
            want = K.one_process(name, n)
            for k in (1, 3):
                got = K.as_dict(plugin, eplan.plan(plugin, structure=on(client, k)).run(**K.inputs(name, n)))
                assert K.same_bits(want, got), f"{name}: {k} workers, n={n}, shared memory {shared}"
        if shared:
            assert fetched == [], f"blocks fetched from workers on the driver's host: {fetched}"
        else:
            assert sum(fetched) >= 2 + 3 * 2, fetched      # every block of n >= 1 (n = 1, 33: one per run)
    after_return()


def test_supplied_outputs_written_in_place(client):
    """A supplied Out keeps its values where the kernel does not write; Mutables are updated in
    the caller's arrays; the arrays returned are the caller's."""
    plugin = eagle.deploy(K.halvings)
    n = 1001
    d = K.inputs("halvings", n)
    want = K.one_process("halvings", n)
    count, rest = np.full(n, 7.0), np.full(n, -1.0)
    got = eplan.plan(plugin, structure=on(client, 3)).run(**d, count=count, rest=rest)
    assert got["count"] is count and got["rest"] is rest
    assert K.same_bits(want, {"count": count, "rest": rest})
    x0 = {"x": np.ones(n), "v": np.zeros(n)}
    ref = K.as_dict(eagle.deploy(oscillator), eplan.plan(eagle.deploy(oscillator), structure=eexec.HostTeam).run(
        omega=np.linspace(0.5, 2.0, n), dt=1e-3, steps=200, x=np.ones(n), v=np.zeros(n)))
    out = eplan.plan(eagle.deploy(oscillator), structure=on(client, 3)).run(
        omega=np.linspace(0.5, 2.0, n), dt=1e-3, steps=200, **x0)
    assert out["x"] is x0["x"] and out["v"] is x0["v"]
    assert K.same_bits(ref, out)
    after_return()


def test_same_bits_twice_on_the_same_planes(client):
    """A run that writes Mutables in place, run again on its own results: equal to one process
    doing the same (the segments of the first run are not reused stale)."""
    plugin = eagle.deploy(oscillator)
    n = 5000
    p = eplan.plan(plugin, structure=on(client, 3))
    one = eplan.plan(plugin, structure=eexec.HostTeam)
    a = {"x": np.ones(n), "v": np.zeros(n)}
    b = {"x": np.ones(n), "v": np.zeros(n)}
    omega = np.linspace(0.5, 2.0, n)
    for _ in range(2):
        p.run(omega=omega, dt=1e-3, steps=100, **a)
        one.run(omega=omega, dt=1e-3, steps=100, **b)
    assert K.same_bits(a, b)


def _as_elsewhere():
    os.environ["EAGLE_DASK_HOST_ID"] = "another-host"


def _as_here():
    os.environ.pop("EAGLE_DASK_HOST_ID", None)


def test_a_worker_on_another_host_in_the_same_run():
    """One of two workers counts as another host: its blocks take the messages (it maps no
    segment), the other's shared memory -- the same bits, sliced and whole planes.  Then that
    worker turns into another host after the driver asked (as if the scheduler moved a block
    there): the block fails to find its planes, is sent again through the messages, same bits."""
    with local_client(2) as c:
        addrs = sorted(c.scheduler_info()["workers"])
        c.run(_as_elsewhere, workers=[addrs[1]])
        for name in ("oscillator", "stencil", "reductions"):
            plugin = eagle.deploy(K.CASES[name][0])
            c.run(shm.clear_opened)
            got = K.as_dict(plugin, eplan.plan(plugin, structure=on(c, 2)).run(**K.inputs(name, 2000)))
            assert K.same_bits(K.one_process(name, 2000), got), name
            m = mapped(c)
            assert m[addrs[1]] == [] and m[addrs[0]], (name, m)
        c.run(_as_here, workers=[addrs[1]])
        c.run(_as_elsewhere, workers=[addrs[0]])           # the driver still counts it as on its host
        plugin = eagle.deploy(oscillator)
        c.run(shm.clear_opened)
        got = K.as_dict(plugin, eplan.plan(plugin, structure=on(c, 2)).run(**K.inputs("oscillator", 2000)))
        assert K.same_bits(K.one_process("oscillator", 2000), got)
        assert ours() == []             # a block sent again: the arena retired


def test_shared_memory_off_takes_the_messages(client, monkeypatch):
    monkeypatch.setenv("EAGLE_DASK_SHM", "0")
    plugin = eagle.deploy(K.axpb)
    client.run(shm.clear_opened)
    d = K.inputs("axpb", 3001)
    got = eplan.plan(plugin, structure=on(client, 3)).run(**d)
    assert K.same_bits(got, d["a"] * d["x"] + d["b"])
    y = np.full(3001, np.nan)                                   # a supplied Out: written in place
    assert eplan.plan(plugin, structure=on(client, 3)).run(**d, y=y) is y
    assert K.same_bits(y, d["a"] * d["x"] + d["b"])
    osc = {"omega": np.linspace(0.5, 2.0, 3001), "dt": 1e-3, "steps": 20, "x": np.ones(3001), "v": np.zeros(3001)}
    want = K.oscillator_numpy(osc)
    out = eplan.plan(eagle.deploy(oscillator), structure=on(client, 3)).run(**osc)       # Mutables
    assert out["x"] is osc["x"] and out["v"] is osc["v"]
    assert K.same_bits(want, K.as_dict(eagle.deploy(oscillator), out))
    assert not any(mapped(client).values())


def test_segments_are_private_and_exclusive():
    """Mode 0600, never an existing file reused; a worker-side open of a gone segment says why."""
    seg = shm.Segments()
    try:
        made, view = seg.new((10, 3), np.float64, np.arange(30.0).reshape(10, 3))
        st = os.stat(os.path.join(shm.SHM_DIR, made.name))
        assert st.st_mode & 0o777 == 0o600
        assert np.array_equal(shm.open_segment(made, "<f8", (10, 3)), np.arange(30.0).reshape(10, 3))
    finally:
        seg.close()
    assert ours() == []
    with pytest.raises(shm.Elsewhere, match=r"not on this worker's host.*EAGLE_DASK_SHM=0"):
        shm.open_segment(made, "<f8", (10, 3))


# -- every way a run ends leaves /dev/shm clean ---------------------------------------------------
def _watch_segments(box, stop):
    """Record the most segments of this process seen while a run goes on."""
    while not stop.is_set():
        box["most"] = max(box.get("most", 0), len(ours()) if not arena.enabled() else arena.in_use())
        time.sleep(0.02)


def test_raised_and_killed_worker_leave_nothing():
    plugin = eagle.deploy(oscillator)
    ref = K.as_dict(plugin, eplan.plan(plugin, structure=eexec.HostTeam).run(**oscillators(4096, 30_000_000)))
    with eagle_dask.local_cluster(n_workers=2) as c:
        c.wait_for_workers(2, timeout=120)
        picky = eplan.plan(eagle.deploy(K.picky), structure=DaskPartition.on(c, progress=False))
        x = np.ones(1000)
        x[700] = -1.0
        with pytest.raises(ValueError, match="negative input"):
            picky.run(x=x)
        assert ours() == [], "raised"
        p = eplan.plan(plugin, structure=DaskPartition.on(c, progress=False, timeout=60))
        p.run(**oscillators(64, 1))
        seen, stop = {}, threading.Event()
        watcher = threading.Thread(target=_watch_segments, args=(seen, stop), daemon=True)
        watcher.start()
        th, box = run_in_thread(p, oscillators(4096, 30_000_000))
        wait_processing(c, 2)
        time.sleep(0.2)
        kill_workers(c)                                            # both blocks die mid-run
        assert th.is_alive(), "the run ended before the workers were killed: its blocks are too short"
        th.join(120)
        stop.set()
        assert not th.is_alive()
        assert "error" not in box, repr(box.get("error"))
        assert seen.get("most", 0) > 0, "the run did not go through shared memory"
        assert K.same_bits(ref, box["out"]), "a block run again after its worker died changed the bits"
        assert ours() == [], "worker killed"


def test_cancelled_and_interrupted_runs_leave_nothing():
    from distributed import Future
    plugin = eagle.deploy(oscillator)
    with eagle_dask.local_cluster(n_workers=2) as c:
        c.wait_for_workers(2, timeout=120)
        p = eplan.plan(plugin, structure=DaskPartition.on(c, progress=False))
        p.run(**oscillators(64, 1))
        th, box = run_in_thread(p, oscillators(4096, LONG))
        wait_processing(c, 2)
        assert ours() and (not arena.enabled() or arena.in_use()), "the run did not go through shared memory"
        c.cancel([Future(k, c) for ks in processing(c).values() for k in ks])
        th.join(60)
        assert not th.is_alive() and isinstance(box.get("error"), RuntimeError), repr(box)
        assert ours() == [], "cancelled"

        main = threading.main_thread().ident

        def interrupt():
            try:
                wait_processing(c, 2, timeout=60)
            except AssertionError:
                return
            box["during"] = ours() if not arena.enabled() else arena.in_use()
            signal.pthread_kill(main, signal.SIGINT)              # Ctrl-C

        helper = threading.Thread(target=interrupt, daemon=True)
        helper.start()
        with pytest.raises(KeyboardInterrupt):
            p.run(**oscillators(8192, LONG))
            pytest.fail("the run ended without the interrupt")
        helper.join(5)
        assert box.get("during"), "the interrupted run did not go through shared memory"
        assert ours() == [], "KeyboardInterrupt"


def test_block_killing_every_worker_leaves_nothing():
    with eagle_dask.local_cluster(n_workers=2) as c:
        c.wait_for_workers(2, timeout=120)
        c.register_plugin(CrashOn("crash_me"), name="eagle-test-crash")
        p = eplan.plan(eagle.deploy(crash_me), structure=DaskPartition.on(c, progress=False, timeout=30))
        th, box = run_in_thread(p, {"x": np.ones(100)})
        th.join(120)
        assert not th.is_alive()
        assert isinstance(box.get("error"), RuntimeError) and "'crash_me'" in str(box["error"]), repr(box)
        assert ours() == [], "KilledWorker"


EXITS = """
import os, sys
import numpy as np
from eagle_dask import arena, shm
seg = arena.ArenaRun([8000]) if arena.enabled() else shm.Segments()
made, _ = seg.put((1000,), np.float64, np.ones(1000))
made = getattr(made, "seg", made)
print(made.name, flush=True)
assert os.path.exists(os.path.join(shm.SHM_DIR, made.name))
sys.exit(0)          # the run never closed its segments
"""


def test_interpreter_exit_unlinks_what_is_left():
    env = {**os.environ, "PYTHONPATH": ROOT}
    done = subprocess.run([sys.executable, "-c", EXITS], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    name = done.stdout.split()[0]
    assert name.startswith(shm.PREFIX)
    assert not os.path.exists(os.path.join(shm.SHM_DIR, name))
