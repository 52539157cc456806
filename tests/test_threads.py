"""The host engine from several threads at once: one entry per kernel, one path, one team.

Each reproducer starts 8 threads at a ``threading.Barrier`` so that they really race; every
result is compared with plain per-sample Python, every wait has a bound.
"""
from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

import eagle
import eagle.bind
import eagle.exec as eexec
import eagle.host
from eagle import Cell, In, Out, Param
from eagle import plan as eplan
from eagle.bits import same_bits
from eagle.host import HostEntry
from tests import reference
from tests.test_simd import retyped

THREADS = 8
WAIT = 300          # seconds a test waits for its threads (a fresh compile under load included)


@eagle.kernel
def halving(i, x: In, steps: Param, y: Out):
    v = x[i]
    for _ in range(steps):
        v = v * 0.5 + 1.0
    y[i] = v


@eagle.kernel
def squares(i, x: In, y: Out, total: Cell["sum"]):
    v = x[i] * x[i] - 0.25
    y[i] = v
    total[i] = v


@eagle.kernel
def stepped(i, x: In, steps: Param, y: Out):
    v = x[i]
    k = 0
    while v < steps:                    # each sample its own trip count
        v = v + 1.5
        k += 1
    y[i] = v - k


def halving_ref(x, steps):
    y = np.empty(len(x))
    for k, v in enumerate(x.tolist()):
        for _ in range(steps):
            v = v * 0.5 + 1.0
        y[k] = v
    return y


def squares_ref(x):
    y = np.array([v * v - 0.25 for v in x.tolist()])
    return y, reference.cell("sum", y.tolist())


def stepped_ref(x, steps):
    y = np.empty(len(x))
    for k, v in enumerate(x.tolist()):
        c = 0
        while v < steps:
            v = v + 1.5
            c += 1
        y[k] = v - c
    return y


def retyped_ref(x, steps):
    y = np.empty(len(x))
    for k, v in enumerate(x.tolist()):
        y[k] = 3 // 2 + v
        for _ in range(steps):
            y[k] = y[k] + 0.5 * v
    return y


def race(work, count=THREADS):
    """``work(k)`` in ``count`` threads released together; their results, or the first error."""
    barrier = threading.Barrier(count, timeout=WAIT)
    results, errors = [None] * count, []

    def go(k):
        try:
            barrier.wait()
            results[k] = work(k)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=go, args=(k,), daemon=True) for k in range(count)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + WAIT
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), f"threads still running after {WAIT} s"
    if errors:
        raise errors[0]
    return results


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty disk cache: a first run compiles."""
    d = tmp_path / "cache"
    d.mkdir(mode=0o700)
    monkeypatch.setenv("EAGLE_CACHE_DIR", str(d))
    return d


def test_first_runs_of_one_kernel_in_eight_threads_build_one_entry(fresh_cache, monkeypatch):
    """Eight threads make the first run of the same kernel at once: one entry is built (the others
    wait for it, then use it), and every thread gets the right bits."""
    built = []

    class Counted(HostEntry):
        def __init__(self, plugin, *args, **kwargs):
            built.append(plugin.key)
            super().__init__(plugin, *args, **kwargs)

    monkeypatch.setattr(eagle.host, "HostEntry", Counted)
    p = eplan.plan(eagle.deploy(halving), structure=eexec.HostTeam)
    x = np.linspace(-3.0, 3.0, 300)

    def work(k):
        return p.run(x=x + k, steps=7 + k), eagle.host.host_entry(p.plugin)

    out = race(work)
    assert built == [p.plugin.key], f"{len(built)} entries built for one kernel"
    assert len({id(entry) for _, entry in out}) == 1
    for k, (got, _) in enumerate(out):
        assert same_bits(got, halving_ref(x + k, 7 + k))


def test_first_runs_of_a_kernel_that_falls_back_in_eight_threads(fresh_cache):
    """Eight threads make the first run of one entry whose vectorised loop does not type
    (``retyped``): each gets the right bits, none a TypeError, and the entry ends on the laned
    loop for the reason one thread alone gives."""
    p = eagle.deploy(retyped)
    entry = HostEntry(p)
    assert entry.path == "simd"
    x = np.linspace(-1.0, 1.0, 77)

    def work(k):
        bound = eagle.bind.bind(p, {"x": x + k, "steps": 3})
        entry.run(bound.values, 0, bound.n, threads=2)
        return bound.values["y"].copy()

    out = race(work)
    for k, y in enumerate(out):
        assert same_bits(y, retyped_ref(x + k, 3))
    alone = HostEntry(p)
    bound = eagle.bind.bind(p, {"x": x, "steps": 3})
    alone.run(bound.values, 0, bound.n, threads=1)
    assert (entry.path, entry.simd_reason, entry.lanes_reason) == (alone.path, alone.simd_reason,
                                                                  alone.lanes_reason)
    assert entry.path == "lanes"


def test_the_team_grows_while_other_threads_submit():
    """One thread runs with more threads each time (the shared team grows: a new pool replaces the
    old one) while three others run with 2 threads: no run is refused by a pool shut down."""
    p = eplan.plan(eagle.deploy(squares), structure=eexec.HostTeam)
    x = np.linspace(-2.0, 2.0, 100)
    want_y, want_total = squares_ref(x)
    p.run(x=x)                                                          # compile first
    rounds = 60
    start = 64 + os.cpu_count()                                         # beyond any team so far

    def work(k):
        for r in range(rounds):
            threads = start + r if k == 0 else 2
            got = _run(p.plugin, x, threads)
            assert same_bits(got[0], want_y) and got[1] == want_total
        return rounds

    assert race(work, 4) == [rounds] * 4


def _run(plugin, x, threads):
    """One run of ``squares`` through its host entry on ``threads`` threads: (y, total)."""
    entry = eagle.host.host_entry(plugin)
    bound = eagle.bind.bind(plugin, {"x": x})
    rows = entry.run(bound.values, 0, bound.n, threads=threads)
    return bound.values["y"], reference.fold_partials("sum", [tuple(r) for r in rows["total"]])


STRESS_SECONDS = 10.0       # each thread's time making runs (compiles come first)


def _stress_case(kernel, k, r):
    """Inputs of run ``r`` of thread ``k`` and the expected outputs (plain Python)."""
    n = 40 + 37 * ((k + r) % 5)
    x = np.linspace(-2.0, 2.0 + k, n)
    if kernel is halving:
        return {"x": x, "steps": 3 + r % 4}, {"y": halving_ref(x, 3 + r % 4)}
    if kernel is squares:
        y, total = squares_ref(x)
        return {"x": x}, {"y": y, "total": total}
    if kernel is stepped:
        return {"x": x, "steps": 4.0}, {"y": stepped_ref(x, 4.0)}
    return {"x": x, "steps": 2}, {"y": retyped_ref(x, 2)}


@pytest.mark.slow
@pytest.mark.parametrize("cache", ["fresh", "warm"])
def test_stress_eight_threads_own_and_shared_kernels(tmp_path, monkeypatch, cache):
    """8 threads for ``STRESS_SECONDS`` each: deploying kernels (the parser), running shared plans
    (one entry per kernel) and entries of their own, on 1 to 3 threads, four kernels on the
    three host paths and the fall back; a fresh disk cache (everything compiles at once) and a
    warm one (new entries load from it).  Every result against plain Python."""
    d = tmp_path / "cache"
    d.mkdir(mode=0o700)
    monkeypatch.setenv("EAGLE_CACHE_DIR", str(d))
    kernels = [halving, squares, stepped, retyped]
    if cache == "warm":
        for kernel in kernels:                  # the disk cache filled by entries of this thread
            e = HostEntry(eagle.deploy(kernel))
            planes, _ = _stress_case(kernel, 0, 0)
            bound = eagle.bind.bind(e.plugin, planes)
            e.run(bound.values, 0, bound.n)
    shared = {}

    def work(k):
        runs, stop = 0, None
        while stop is None or time.monotonic() < stop:
            kernel = kernels[(k + runs) % len(kernels)]
            plugin = eagle.deploy(kernel)
            planes, want = _stress_case(kernel, k, runs)
            threads = 1 + (k + runs) % 3
            if k % 2:                           # an entry of this thread's own
                entry = HostEntry(plugin)
            else:                               # the process's entry
                entry = shared.setdefault(kernel.__name__, eagle.host.host_entry(plugin))
                assert entry is eagle.host.host_entry(plugin)
            bound = eagle.bind.bind(plugin, planes)
            rows = entry.run(bound.values, 0, bound.n, threads=threads)
            assert same_bits(bound.values["y"], want["y"]), (kernel.__name__, k, runs)
            if "total" in want:
                got = reference.fold_partials("sum", [tuple(v) for v in rows["total"]])
                assert got == want["total"], (kernel.__name__, k, runs)
            runs += 1
            if stop is None and runs >= len(kernels):
                stop = time.monotonic() + STRESS_SECONDS   # every kernel compiled: the timed part
        return runs

    counts = race(work)
    assert min(counts) >= len(kernels)
