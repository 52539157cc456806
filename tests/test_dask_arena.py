"""The driver's arena (``eagle_dask.arena``): a run's planes carved from one segment kept across
runs, mapped once by every worker of the host.

The allocator hands out aligned regions that never overlap and takes them back; two runs of
the same size reuse the arena (no worker opens it again), a larger run grows it (a new segment,
the old one unlinked, every worker maps and checks the new one); a run's results are copies out
of the arena, untouched by the next run; a worker refuses an arena id that does not match the
file under its name.  Bits are those of one process (``HostTeam``) throughout.
"""
from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("distributed")

import eagle  # noqa: E402
import eagle.exec as eexec  # noqa: E402
from eagle import plan as eplan  # noqa: E402
from eagle.models import oscillator  # noqa: E402
from eagle_dask import DaskPartition, arena, region_locks, shm  # noqa: E402
from eagle_dask.shared_run import SharedRun  # noqa: E402
from eagle_dask.task import run_block  # noqa: E402
from tests import kernels as K  # noqa: E402
from tests.launch import in_thread, local_client  # noqa: E402

pytestmark = pytest.mark.skipif(not shm.enabled(), reason="no writable /dev/shm")


def ours():
    mine = f"{shm.PREFIX}{os.getpid()}-"
    return sorted(f for f in os.listdir(shm.SHM_DIR) if f.startswith(mine))


@pytest.fixture(autouse=True)
def fresh_arena(monkeypatch):
    monkeypatch.setenv("EAGLE_DASK_ARENA", "1")
    arena.close_arena()
    yield
    arena.close_arena()
    assert ours() == []


@pytest.fixture(scope="module")
def client():
    with local_client(3) as c:
        yield c


def on(client, k):
    names = [r.name for r in DaskPartition.on(client).ranks(gpus=False).values()][:k]
    return DaskPartition.on(client, workers=names, progress=False)


def opens(client):
    """{worker: segments it opened by name} since the last ``clear``."""
    return client.run(shm.opens)


def clear(client):
    client.run(shm.OPENS.clear)


# -- the allocator ---------------------------------------------------------------------------------
def test_regions_are_aligned_disjoint_and_given_back():
    sizes = [0, 1, 63, 64, 65, 8 * 1000, 3 * 8 * 31, 12345]
    a, offsets, slot = arena.reserve(sizes)
    try:
        spans = sorted(zip(offsets, sizes))
        for (o1, s1), (o2, _) in zip(spans, spans[1:]):
            assert o1 + max(s1, 1) <= o2, f"regions [{o1}, +{s1}) and [{o2}, ...) overlap"
        assert all(o % 64 == 0 for o in offsets), offsets
        assert max(o + s for o, s in spans) <= a.size and min(offsets) >= arena.LEASE_BYTES, "a region in the leases"
        # every region written with its own byte: each reads back whole
        for i, (o, s) in enumerate(zip(offsets, sizes)):
            a.view(o, np.uint8, (s,))[:] = i
        for i, (o, s) in enumerate(zip(offsets, sizes)):
            assert np.all(a.view(o, np.uint8, (s,)) == i), f"region {i} overwritten"
        assert arena.in_use() == sum(max(-(-s // 64) * 64, 64) for s in sizes)
        b, again, slot_b = arena.reserve([a.size // 2])     # fits beside the first run's regions
        assert b is a and not set(again) & set(offsets) and slot_b != slot
        arena.release(b, [(again[0], a.size // 2)], True, slot_b)
    finally:
        arena.release(a, list(zip(offsets, sizes)), True, slot)
    assert arena.in_use() == 0
    assert a.free == [[arena.LEASE_BYTES, a.size - arena.LEASE_BYTES]], "the spans given back were not merged"
    c, whole, slot_c = arena.reserve([a.size - arena.LEASE_BYTES])     # all of it, in one piece
    assert c is a and whole == [arena.LEASE_BYTES]
    arena.release(c, [(whole[0], a.size - arena.LEASE_BYTES)], True, slot_c)


def test_an_unclean_run_retires_the_arena_and_a_larger_one_grows_it():
    a, offs, _ = arena.reserve([1000])
    name = a.seg.name
    assert ours() == [name] and os.stat(os.path.join(shm.SHM_DIR, name)).st_mode & 0o777 == 0o600
    b, offs_b, _ = arena.reserve([4 * a.size])                 # does not fit: a new, larger arena
    assert b is not a and b.size >= 4 * a.size and arena.current() == b.seg
    assert os.path.exists(os.path.join(shm.SHM_DIR, name)), "unlinked while a run held regions in it"
    arena.release(a, [(offs[0], 1000)], True)
    assert ours() == [b.seg.name], "the replaced arena was not unlinked when its last run ended"
    arena.release(b, [(offs_b[0], 4 * a.size)], False)      # a run that raised: never reused
    assert ours() == [] and arena.current() is None
    c, offs_c, _ = arena.reserve([100])                         # no run holds it when it is replaced:
    arena.release(c, [(offs_c[0], 100)], True)
    d, offs_d, _ = arena.reserve([4 * c.size])
    assert d is not c and ours() == [d.seg.name], "a replaced arena no run held was not unlinked at once"
    arena.release(d, [(offs_d[0], 4 * c.size)], True)
    assert ours() == [d.seg.name] and arena.in_use() == 0 and arena.current() == d.seg


def test_a_worker_checks_every_new_arena_id():
    """The cached mapping serves the same id only; another id under a known name is opened and
    checked again (a wrong inode refused), and the mapping of a replaced arena is dropped."""
    a, _, _ = arena.reserve([1000])
    try:
        assert shm.arena_map(a.seg) is shm.arena_map(a.seg)
        forged = a.seg._replace(ino=a.seg.ino + 1)
        with pytest.raises(shm.ForeignSegment, match="another inode"):
            shm.arena_map(forged)
        with pytest.raises(shm.ForeignSegment, match=r"holds \d+ bytes"):
            shm.arena_map(a.seg._replace(size=a.seg.size * 2))
        b, _, _ = arena.reserve([8 * a.size])         # grown while a run still holds the old one
        assert os.path.exists(os.path.join(shm.SHM_DIR, a.seg.name))
        shm.arena_map(b.seg)
        assert shm.arenas_mapped() == [b.seg.name], "the replaced arena is still mapped"
        arena.release(b, [], False)
    finally:
        arena.release(a, [], False)


class _Client:
    """A client for a ``SharedRun`` asked about no worker (any weak-referenceable object)."""


@pytest.mark.parametrize("on", [True, False], ids=["arena", "fresh"])
def test_a_block_started_twice_writes_nothing_the_second_time(monkeypatch, on):
    """Mutables run in place in the arena (no staged copy of them): a block run a second time (as
    the scheduler does after its worker was lost) refuses before it writes -- the driver sends it
    again through the messages -- and the run's bits are one process's.  With fresh segments the
    Mutables are staged and a second start is harmless."""
    monkeypatch.setenv("EAGLE_DASK_ARENA", "1" if on else "0")
    plugin = eagle.deploy(oscillator)
    n, params = 1000, {"dt": 1e-3, "steps": 300}
    omega = np.linspace(0.5, 2.0, n)
    x, v = np.ones(n), np.zeros(n)
    bound = SimpleNamespace(values={"omega": omega, "x": x, "v": v}, n=n)
    run = SharedRun(_Client(), [], bound, {"omega": omega, "x": x, "v": v}, {}, {}, {"x", "v"},
                    plugin.sliceable, plugin.cells)
    run.local = {"here"}
    shared = run.for_block("here")
    assert (shared.planes["x"][0] is None) == on, "the Mutable is staged (arena) or not (fresh segments)"
    go = lambda a, b: run_block(plugin, eexec.HostTeam, 0, a, b, n, {}, {}, params, {}, shared=shared)  # noqa: E731
    parts = [(0, 512), (512, 1000)]
    try:
        for a, b in parts:
            go(a, b)
        assert np.array_equal(x, np.ones(n)) and np.array_equal(v, np.zeros(n)), "the caller's arrays changed"
        if on:
            written = np.copy(run.views["x"])
            with pytest.raises(shm.StartedBefore, match=r"samples \[0, 512\) started before"):
                go(0, 512)
            assert K.same_bits(written, run.views["x"]), "the refused second start wrote into its share"
        else:
            go(0, 512)
        run.finish(parts)
    finally:
        run.close()
    want = eplan.plan(plugin, structure=eexec.HostTeam).run(omega=omega, x=np.ones(n), v=np.zeros(n), **params)
    want = K.as_dict(plugin, want)
    assert K.same_bits({"x": want["x"], "v": want["v"]}, {"x": x, "v": v})


def test_a_finished_block_run_again_during_its_run_leaves_its_share_alone():
    """A block the scheduler runs again after it finished (its worker declared dead while the run
    goes on) refuses before it writes: its share of a fresh ``Out`` is not zeroed under the
    driver, which copies it out when the run ends; the run's bits are numpy's."""
    plugin = eagle.deploy(K.axpb)
    n, params = 1000, {"a": 2.5, "b": -1.25}
    x = np.random.default_rng(4).uniform(-3, 3, n)
    fresh = {"y": (plugin.roles["y"].width, plugin.roles["y"].out_dtype)}
    bound = SimpleNamespace(values={"x": x, "y": np.empty(n)}, n=n)
    run = SharedRun(_Client(), [], bound, {"x": x}, {}, fresh, set(), plugin.sliceable, plugin.cells)
    run.local = {"here"}
    shared = run.for_block("here")
    parts = [(0, 600), (600, 1000)]
    try:
        for a, b in parts:
            run_block(plugin, eexec.HostTeam, 0, a, b, n, {}, {}, params, {}, shared=shared)
        written = np.copy(run.views["y"])
        with pytest.raises(shm.StartedBefore, match=r"samples \[0, 600\) started before"):
            shared.open(0, 600)                 # the rerun's first step: its share set up
        assert K.same_bits(written, run.views["y"]), "a rerun of a finished block zeroed its share"
        run.finish(parts)
    finally:
        run.close()
    want = eplan.plan(plugin, structure=eexec.HostTeam).run(x=np.copy(x), **params)
    assert K.same_bits(K.as_dict(plugin, want)["y"], bound.values["y"])


def test_a_block_of_a_run_that_ended_touches_nothing(monkeypatch):
    """The scheduler may start a block again after its run returned (its result lost with a
    worker): the run's regions are a later run's by then, and the block refuses before it reads
    or writes a byte of them."""
    plugin = eagle.deploy(oscillator)
    n, params = 256, {"dt": 1e-3, "steps": 10}
    d = {"omega": np.linspace(0.5, 2.0, n), "x": np.ones(n), "v": np.zeros(n)}
    bound = SimpleNamespace(values=dict(d), n=n)
    run = SharedRun(_Client(), [], bound, dict(d), {}, {}, {"x", "v"}, plugin.sliceable, plugin.cells)
    run.local = {"here"}
    shared = run.for_block("here")
    run_block(plugin, eexec.HostTeam, 0, 0, n, n, {}, {}, params, {}, shared=shared)
    run.finish([(0, n)])
    run.close()
    with pytest.raises(shm.RunEnded):                          # at once: its lease is cleared
        run_block(plugin, eexec.HostTeam, 0, 0, n, n, {}, {}, params, {}, shared=shared)
    later = arena.ArenaRun([arena.in_use() + (1 << 16)])        # the next run: the same regions
    try:
        ref, mine = later.put((1 << 16,), np.uint8, np.full(1 << 16, 7, np.uint8))
        assert ref.offset == arena.LEASE_BYTES
        with pytest.raises(shm.RunEnded, match=r"samples \[0, 256\) belongs to a run that has ended"):
            run_block(plugin, eexec.HostTeam, 0, 0, n, n, {}, {}, params, {}, shared=shared)
        assert np.all(mine == 7), "the block of the ended run wrote into the next run's region"
    finally:
        later.close(True)


# -- a block still writing when its run ends (eagle_dask.region_locks) ---------------------------------
def _oscillator_run(n, seed):
    """A ``SharedRun`` of the oscillator (omega In; x, v Mutables run in place; a cell's rows) on
    this host, its planes placed: (run, its ``SharedPlanes``, the caller's arrays)."""
    plugin = eagle.deploy(oscillator)
    r = np.random.default_rng(seed)
    d = {"omega": r.uniform(0.5, 2.0, n), "x": r.uniform(-1, 1, n), "v": r.uniform(-1, 1, n)}
    bound = SimpleNamespace(values=dict(d), n=n)
    run = SharedRun(_Client(), [], bound, dict(d), {}, {}, {"x", "v"}, plugin.sliceable, plugin.cells)
    run.local = {"here"}
    return run, run.for_block("here"), d


def _spans(run):
    """(the regions a block of ``run`` writes, the one it only reads) as ``(offset, bytes)``."""
    written = [run.planes["x"][1], run.planes["v"][1], run.started[0][0], run.rows["energy"][0]]
    return sorted((r.offset, r.nbytes) for r in written), (run.planes["omega"][0].offset, run.planes["omega"][0].nbytes)


def _overlap(spans, others):
    return [(a, b) for a in spans for b in others if a[0] < b[0] + b[1] and b[0] < a[0] + a[1]]


def _locked_on(ino):
    """The byte ranges ``[start, end]`` /proc/locks lists as OFD read locks on inode ``ino``."""
    out = []
    for line in Path("/proc/locks").read_text().splitlines():
        f = line.split()
        if "OFDLCK" in f and "READ" in f and int(f[-3].rsplit(":", 1)[1]) == ino:
            out.append((int(f[-2]), int(f[-1])))
    return out


_HELD_BLOCK = """
import pickle, sys
import eagle, eagle.exec as eexec
from eagle.models import oscillator
from eagle_dask.task import run_block
shared, n, params = pickle.load(sys.stdin.buffer)
run_block(eagle.deploy(oscillator), eexec.HostTeam, 0, 0, n, n, {}, {}, params, {}, shared=shared)
"""


def test_a_block_still_writing_when_its_run_ends_keeps_its_regions_from_the_next_run():
    """A block of a run in another process, stopped (SIGSTOP) after it began writing, while its
    run ends: the run returns at once; the regions the block writes (and only those) are kept
    from the next run, whose bits are numpy's although the block goes on writing during it; once
    the block has ended, the next allocation takes them back."""
    n = 200
    run, shared, _ = _oscillator_run(n, 1)
    written, read_only = _spans(run)
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    held = subprocess.Popen([sys.executable, "-c", _HELD_BLOCK], stdin=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env)
    try:
        held.stdin.write(pickle.dumps((shared, n, {"dt": 1e-3, "steps": 100_000_000})))
        held.stdin.close()
        flags = run.started[1]
        deadline = time.monotonic() + 120
        while not flags[0] and held.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        assert flags[0], f"the held block did not start: {held.poll()} {held.stderr.read()[-2000:]!r}"
        held.send_signal(signal.SIGSTOP)                # past its check, writing its samples
        ino = run.segments.arena.seg.ino
        locks = _locked_on(ino)
        flag = run.started[0][0]                        # of the started flags, it writes its own only
        writes = [s for s in written if s != (flag.offset, flag.nbytes)] + [(flag.offset + 0, 1)]
        assert all(any(a <= off and off + size - 1 <= b for a, b in locks) for off, size in writes), \
            f"the block does not lock every byte it writes (/proc/locks: {locks}, spans {writes})"
        t0 = time.monotonic()
        run.finish([])
        run.close()
        assert time.monotonic() - t0 < 1.0, "the run waited for the stopped block"
        assert arena.quarantined() == written, "not exactly the regions the block writes were kept back"
        assert read_only not in arena.quarantined()
        nxt, nxt_shared, d2 = _oscillator_run(n, 2)
        start2 = {k: np.copy(v) for k, v in d2.items()}             # d2's Mutables become the results
        mine = [(o, arena.aligned(s)) for o, s in zip(nxt.segments.offsets, nxt.segments.sizes)]
        assert not _overlap(written, mine), "the next run was given regions the running block writes"
        params = {"dt": 1e-3, "steps": 300}
        run_block(eagle.deploy(oscillator), eexec.HostTeam, 0, 0, n, n, {}, {}, params, {}, shared=nxt_shared)
        held.send_signal(signal.SIGCONT)               # it goes on writing into its regions, then ends
        assert held.wait(timeout=180) == 0, held.stderr.read()[-2000:]
        assert arena.quarantined() == written                   # no one asked since
        last = arena.ArenaRun([64])                             # the next allocation asks again
        assert arena.quarantined() == [], "the regions were not taken back once the block ended"
        last.close(True)
        nxt.finish([(0, n)])
        got = {"x": nxt.bound.values["x"], "v": nxt.bound.values["v"]}
        nxt.close()
    finally:
        held.send_signal(signal.SIGCONT)
        held.kill()
        held.wait()
    plugin = eagle.deploy(oscillator)
    want = K.as_dict(plugin, eplan.plan(plugin, structure=eexec.HostTeam).run(**start2, **params))
    assert K.same_bits({"x": want["x"], "v": want["v"]}, got), "the next run's bits changed under the old block"
    assert arena.in_use() == 0 and run.segments.arena.free == [[arena.LEASE_BYTES, run.segments.arena.size
                                                                 - arena.LEASE_BYTES]]


@pytest.mark.parametrize("pause", ["before", "after"])
def test_a_block_at_its_lock_when_its_run_ends_writes_nothing(monkeypatch, pause):
    """The order of a block's lock and its check of the run's lease: a block paused just
    *before* taking its locks while its run ends finds the lease cleared and writes nothing
    into the regions given back (a later run's by then); paused just *after* them, its regions
    are kept back, it refuses the same way, and they are taken back at the next allocation."""
    run, shared, _ = _oscillator_run(256, 3)
    written, _ = _spans(run)
    real, at, go = shm.lock_regions, threading.Event(), threading.Event()

    def paused(seg, spans):
        if pause == "before":
            at.set()
            go.wait(60)
        fd = real(seg, spans)
        if pause == "after":
            at.set()
            go.wait(60)
        return fd

    monkeypatch.setattr(shm, "lock_regions", paused)
    got = []
    block = threading.Thread(target=lambda: got.append(_outcome(
        lambda: run_block(eagle.deploy(oscillator), eexec.HostTeam, 0, 0, 256, 256, {}, {},
                          {"dt": 1e-3, "steps": 10}, {}, shared=shared))))
    block.start()
    try:
        assert at.wait(60), "the block never reached its lock"
        run.finish([])
        run.close()
        assert arena.quarantined() == (written if pause == "after" else [])
        whole = sum(map(arena.aligned, run.segments.sizes))
        later = arena.ArenaRun([whole])                         # where the run's regions were, if free
        _, mine = later.put((whole,), np.uint8, _ones(whole))
        assert (later.offsets[0] == run.segments.offsets[0]) == (pause == "before")
    finally:
        go.set()
        block.join(60)
    try:
        assert len(got) == 1 and isinstance(got[0], shm.RunEnded), f"the block of the ended run gave {got}"
        assert np.array_equal(mine, _ones(whole)), "the block of the ended run wrote into the next run's regions"
    finally:
        later.close(True)
    assert arena.quarantined() == [] and arena.in_use() == 0


def test_a_block_starting_while_its_run_gives_back_its_regions_writes_nothing(monkeypatch):
    """The driver's side of the order: a run clears its lease before it asks which regions are
    locked, so a block that starts at the moment they are given back (and a later run has them)
    finds the lease cleared and writes nothing."""
    run, shared, _ = _oscillator_run(256, 5)
    other = arena.ArenaRun([64])            # its lease slot freed last: the later run's, not the run's
    real, seen = arena.release, {}

    def release(*args, **kwargs):
        real(*args, **kwargs)
        monkeypatch.setattr(arena, "release", real)
        other.close(True)
        whole = sum(map(arena.aligned, run.segments.sizes))
        seen["later"] = later = arena.ArenaRun([whole])                # the run's regions again
        seen["mine"] = later.put((whole,), np.uint8, _ones(whole))[1]
        seen["block"] = _outcome(lambda: run_block(eagle.deploy(oscillator), eexec.HostTeam, 0, 0, 256, 256, {}, {},
                                                   {"dt": 1e-3, "steps": 10}, {}, shared=shared))

    monkeypatch.setattr(arena, "release", release)
    run.finish([])
    run.close()
    try:
        assert seen["later"].offsets[0] == run.segments.offsets[0], "the later run was not given the run's regions"
        assert isinstance(seen["block"], shm.RunEnded), f"the block of the ended run gave {seen['block']!r}"
        assert np.array_equal(seen["mine"], _ones(seen["mine"].size)), "the block of the ended run wrote into the next run's regions"
    finally:
        seen["later"].close(True)


def _ones(nbytes):
    """The bytes of 1.0s (a started flag reads 0 there, an oscillator's x and v 1.0: a block that
    got past its checks would write into them)."""
    return np.ones(nbytes // 8).view(np.uint8)


def _outcome(f):
    try:
        return f()
    except BaseException as e:  # noqa: BLE001 - the test looks at it
        return e


# -- the planes placed while the blocks travel (region_locks.placing / wait_placed) ----------------
def _placed_later(n, seed, timeout=60.0, build=True):
    """An oscillator ``SharedRun`` whose planes are placed only when ``place`` is called (as a run
    does once its blocks are submitted): (run, its ``SharedPlanes``, the caller's arrays, params)."""
    plugin = eagle.deploy(oscillator)
    params = {"dt": 1e-3, "steps": 50}
    warm = {"omega": np.ones(64), "x": np.ones(64), "v": np.zeros(64)}
    eplan.plan(plugin, structure=eexec.HostTeam).run(**warm, **params)     # compiled: a block reads at once
    r = np.random.default_rng(seed)
    d = {"omega": r.uniform(0.5, 2.0, n), "x": r.uniform(-1, 1, n), "v": r.uniform(-1, 1, n)}
    bound = SimpleNamespace(values=dict(d), n=n)
    run = SharedRun(_Client(), [], bound, dict(d), {}, {}, {"x", "v"}, plugin.sliceable, plugin.cells,
                    place_later=True, timeout=timeout)
    run.local = {"here"}
    return plugin, run, run.for_block("here") if build else None, d, params


def _block_in_thread(plugin, shared, n, params):
    """``run_block`` of samples ``[0, n)`` in a thread, as a worker would: (thread, its box)."""
    return in_thread(lambda: run_block(plugin, eexec.HostTeam, 0, 0, n, n, {}, {}, params, {}, shared=shared))


def test_a_block_sent_before_its_planes_are_placed_waits_for_them():
    """A run submits its blocks before it copies the caller's planes in: a block that arrives first
    reads nothing until the driver has placed them, then gives one process's bits.  The arena's
    regions are dirtied first, so a block that did not wait would read garbage."""
    n = 4096
    junk = arena.ArenaRun([1 << 20])
    junk.put((1 << 17,), np.float64, np.full(1 << 17, np.nan))     # where the run's regions will be
    junk.placed()
    junk.close(True)
    plugin, run, shared, d, params = _placed_later(n, 11)
    try:
        t, out = _block_in_thread(plugin, shared, n, params)
        t.join(0.5)
        assert t.is_alive(), f"the block did not wait for the planes: {out}"
        run.place()
        t.join(30)
        assert not t.is_alive() and "error" not in out, out
        run.finish([(0, n)])
    finally:
        run.close()
    want = K.as_dict(plugin, eplan.plan(plugin, structure=eexec.HostTeam).run(**d, **params))
    got = {"x": run.bound.values["x"], "v": run.bound.values["v"]}
    assert K.same_bits({"x": want["x"], "v": want["v"]}, got)


def test_planes_placed_first_for_a_block_sent_after_the_runs_submission():
    """A run whose first blocks all took the messages calls ``place`` before any plane is in shared
    memory; a block sent later to a worker of this host (a rerun, a worker that joined) makes the
    planes then, and must find them placed -- not wait out the run's timeout."""
    n = 2048
    plugin, run, _, d, params = _placed_later(n, 15, timeout=5.0, build=False)
    try:
        run.place()                              # the run's submission: no plane in shared memory yet
        shared = run.for_block("here")           # a block sent to this host later
        start = time.monotonic()
        run_block(plugin, eexec.HostTeam, 0, 0, n, n, {}, {}, params, {}, shared=shared)
        assert time.monotonic() - start < 2, "the late block waited for planes nobody would place"
        run.finish([(0, n)])
    finally:
        run.close()
    want = K.as_dict(plugin, eplan.plan(plugin, structure=eexec.HostTeam).run(**d, **params))
    assert K.same_bits({"x": want["x"], "v": want["v"]}, {"x": run.bound.values["x"], "v": run.bound.values["v"]})


def test_a_block_waiting_for_planes_of_a_run_that_raised_ends_at_once():
    """The driver raised before it placed the planes (Ctrl-C while it copied): ``close`` clears the
    lease and lets the waiting block go, which refuses (``RunEnded``) without reading a byte."""
    n = 1024
    plugin, run, shared, d, params = _placed_later(n, 12)
    t, out = _block_in_thread(plugin, shared, n, params)
    t.join(0.3)
    assert t.is_alive()
    fd = os.open(os.path.join(shm.SHM_DIR, run.segments.arena.seg.name), os.O_RDONLY)
    try:
        start = time.monotonic()
        run.close()
        t.join(10)
        assert not t.is_alive() and time.monotonic() - start < 2
        assert isinstance(out.get("error"), shm.RunEnded), out
        assert region_locks.hold(fd, [(8 * run.segments.slot, 8)]), "the run's slot is still write-locked"
    finally:
        os.close(fd)
    assert np.array_equal(run.bound.values["x"], d["x"]), "the caller's array changed"


def test_a_block_waiting_for_planes_sees_its_lease_taken_while_the_slot_is_locked():
    """The lease cleared while the slot stays write-locked (a later run took the slot and places its
    own planes): the waiting block refuses at once, not when that later run is done placing."""
    n = 1024
    plugin, run, shared, d, params = _placed_later(n, 14)
    try:
        t, out = _block_in_thread(plugin, shared, n, params)
        t.join(0.3)
        assert t.is_alive()
        run.segments.token_view[0] = 0            # as a later run of the slot would hold it
        t.join(5)
        assert not t.is_alive() and isinstance(out.get("error"), shm.RunEnded), out
    finally:
        run.close()


def test_a_block_waits_for_the_planes_within_the_runs_timeout():
    """A driver that stops while it places the planes (SIGSTOP, swapping) and never closes: the
    block gives up after the run's timeout with an error saying so, holding nothing."""
    n = 512
    plugin, run, shared, d, params = _placed_later(n, 13, timeout=0.4)
    try:
        start = time.monotonic()
        with pytest.raises(TimeoutError, match=r"did not finish placing the run's planes within 0.4 s"):
            run_block(plugin, eexec.HostTeam, 0, 0, n, n, {}, {}, params, {}, shared=shared)
        assert 0.4 <= time.monotonic() - start < 5
        assert _locked_on(os.fstat(run.segments.arena.fd).st_ino) == [], "the block kept its locks"
    finally:
        run.close()


def test_a_lease_slot_an_earlier_block_checks_is_not_handed_out():
    """A block of an ended run may be checking its lease slot right now (a shared lock on it for an
    instant): the next run takes another slot, whose write lock it holds until placed."""
    first = arena.ArenaRun([64])
    first.placed()
    slot = first.slot
    first.close(True)
    fd = os.open(os.path.join(shm.SHM_DIR, first.arena.seg.name), os.O_RDONLY)
    try:
        assert region_locks.hold(fd, [(8 * slot, 8)])           # the earlier block's instant
        nxt = arena.ArenaRun([64])
        try:
            assert nxt.slot != slot
            assert not region_locks.hold(fd, [(8 * nxt.slot, 8)]), "the new run's slot is not locked"
            nxt.placed()
            assert region_locks.hold(fd, [(8 * nxt.slot, 8)])
        finally:
            nxt.close(True)
    finally:
        os.close(fd)


# -- through a cluster -----------------------------------------------------------------------------
def test_the_same_size_reuses_the_arena_and_a_larger_run_grows_it(client):
    plugin = eagle.deploy(oscillator)
    p = eplan.plan(plugin, structure=on(client, 3))
    one = eplan.plan(plugin, structure=eexec.HostTeam)
    clear(client)
    seen = []
    for n, seed in ((20_000, 1), (20_000, 2), (200_000, 3), (20_000, 4), (31, 5), (0, 6)):
        d = K.inputs("oscillator", n, seed=seed)
        got = K.as_dict(plugin, p.run(**{k: np.copy(v) for k, v in d.items()}))
        want = K.as_dict(plugin, one.run(**{k: np.copy(v) for k, v in d.items()}))
        assert K.same_bits(want, got), f"n={n}: not the bits of one process"
        assert arena.in_use() == 0, f"n={n}: regions not given back"
        seen.append(arena.current())
    assert seen[0] == seen[1], "a second run of the same size made a new arena"
    assert seen[2] != seen[1] and seen[2].size > seen[1].size, "a larger run did not grow the arena"
    assert seen[3] == seen[4] == seen[2], "runs after growing did not reuse the grown arena"
    assert ours() == [seen[2].name], "the replaced arena is still in /dev/shm"
    opened = opens(client)
    for worker, names in opened.items():
        assert sorted(set(names)) == sorted({seen[0].name, seen[2].name}) and len(names) == 2, \
            f"{worker} opened {names}: each arena once"
    for worker, names in client.run(shm.arenas_mapped).items():
        assert names == [seen[2].name], f"{worker} keeps {names} mapped"


@pytest.mark.parametrize("name", ["vectors", "halvings", "reductions", "stencil"])
def test_results_are_not_views_of_the_arena(client, name):
    """The arrays a run returns keep their bits while later runs reuse the arena's regions."""
    plugin = eagle.deploy(K.CASES[name][0])
    p = eplan.plan(plugin, structure=on(client, 2))
    first = K.as_dict(plugin, p.run(**K.inputs(name, 4000)))
    kept = {k: np.copy(v) for k, v in first.items()}
    assert K.same_bits(K.one_process(name, 4000), kept)
    for seed in (2, 3):
        p.run(**K.inputs(name, 4000, seed=seed))
    assert K.same_bits(kept, first), f"{name}: a result changed under a later run"


def test_the_callers_output_planes_are_populated_while_the_blocks_run(client, monkeypatch):
    """Once it has placed the inputs, and before it waits for the blocks, the driver asks for the
    pages of the caller's output planes (``x``, ``v``; not ``omega``) on its helper thread
    (``eagle.prefault``), so the copy back finds them there; and the run's bits are numpy's."""
    import eagle_dask.eager as eager
    from eagle.prefault import populate_soon
    events = []
    monkeypatch.setattr(eager, "populate_soon", lambda arrays: events.append(("pages", list(arrays))) or
                        populate_soon([]))
    place, supervise = SharedRun.place, eager.EagerRun._supervise
    monkeypatch.setattr(SharedRun, "place", lambda self: events.append(("place",)) or place(self))
    monkeypatch.setattr(eager.EagerRun, "_supervise", lambda self: events.append(("wait",)) or supervise(self))
    n = 3001
    d = {"omega": np.linspace(0.5, 2.0, n), "dt": 1e-3, "steps": 40, "x": np.ones(n), "v": np.zeros(n)}
    ref = K.oscillator_numpy(d)
    out = eplan.plan(oscillator, structure=on(client, 2)).run(**d)
    assert [e[0] for e in events] == ["place", "pages", "wait"], events
    asked = events[1][1]
    assert len(asked) == 2 and asked[0] is d["x"] and asked[1] is d["v"], "not exactly the caller's output planes"
    assert K.same_bits(ref, K.as_dict(eagle.deploy(oscillator), out))
