"""The driver takes a block in its arena for finished from the block's own flag (``SharedRun.done``),
not from its task's report through the scheduler (``eagle_dask.done_watch``).

Checked: a run whose tasks report late (their workers sleep after the block returned) still returns
at once, with numpy's bits, and the next run too (one of the same kind, which waits on its tasks
until near the time the first one took, then looks at the flags); a block that says it is done but still holds its
lock on the flag is not taken (what it wrote may not be visible yet); a block that failed after it
started never counts as done (the run raises the kernel's error).
"""
from __future__ import annotations

import time

import numpy as np
import pytest

pytest.importorskip("distributed")

import eagle  # noqa: E402
from eagle import In, Out  # noqa: E402
from eagle import plan as eplan  # noqa: E402
from eagle_dask import DaskPartition, done_watch, eager  # noqa: E402
from eagle_dask.shm import DONE  # noqa: E402
from tests import kernels as K  # noqa: E402
from tests.launch import local_client  # noqa: E402
from tests.test_dask_arena import _oscillator_run  # noqa: E402

#: seconds every block's task sleeps after the block returned (its report that late)
LATE = 3.0


def _report_late():
    import time as t

    import eagle_dask.task as task
    if getattr(task, "_late", None) is None:
        task._late = task.run_block

        def late(*args, **kwargs):
            out = task._late(*args, **kwargs)
            t.sleep(LATE)
            return out
        task.run_block = late


def _report_at_once():
    import eagle_dask.task as task
    if getattr(task, "_late", None) is not None:
        task.run_block, task._late = task._late, None


@pytest.fixture
def client():
    with local_client(2) as c:
        yield c


def test_a_run_returns_when_its_blocks_are_done_in_the_arena_not_when_their_tasks_report(client, monkeypatch):
    monkeypatch.setattr(eager, "POLL", 10 * LATE)       # no look at the scheduler's view comes first
    monkeypatch.setattr(done_watch, "QUIET_FROM", 0.0)  # these short runs too wait on their tasks first
    name = "oscillator"
    plugin = eagle.deploy(K.CASES[name][0])
    p = eplan.plan(plugin, structure=DaskPartition.on(client, progress=False))
    p.run(**K.inputs(name, 101))                                    # warm: compiled on the workers
    client.run(_report_late)
    try:
        for n, seed in ((2001, 1), (2001, 4), (3, 2)):        # a new kind of run, one like it, another
            d = K.inputs(name, n, seed)
            want = K.CASES[name][2]({k: (np.copy(v) if isinstance(v, np.ndarray) else v) for k, v in d.items()})
            t0 = time.monotonic()
            got = K.as_dict(plugin, p.run(**d))
            spent = time.monotonic() - t0
            assert K.same_bits(want, got), f"n={n}: not numpy's bits"
            assert spent < LATE / 2, f"n={n}: the run waited {spent:.2f} s for its tasks' reports"
            time.sleep(LATE + 0.5)                  # the tasks' threads free again for the next run
    finally:
        client.run(_report_at_once)


def test_a_block_that_says_done_but_holds_its_lock_is_not_done_yet():
    n = 50
    run, shared, _ = _oscillator_run(n, 3)
    try:
        block = shared.open(0, n)                   # its locks taken, its flag says started
        assert not run.done(0)
        block.mark_done()
        assert run.started[1][0] == DONE
        assert not run.done(0), "taken for done while the block still holds its lock on the flag"
        block.close()
        assert run.done(0)
        other = shared.open(n - 1, n)               # a block that ends without saying it is done
        other.close()
        assert not run.done(n - 1)
    finally:
        run.finish([])
        run.close()


@eagle.kernel
def fails_late(i, x: In, y: Out):
    """Raises at its last sample (an index out of its plane), after writing the others."""
    n = x.shape[0]
    y[i] = 2.0 * x[i]
    if i == n - 1:
        y[i] = x[n + 5]


def test_a_block_that_fails_is_never_taken_for_done(client):
    plugin = eagle.deploy(fails_late)
    p = eplan.plan(plugin, structure=DaskPartition.on(client, progress=False))
    x = np.linspace(0.0, 1.0, 4001)
    y = np.full_like(x, 7.0)
    with pytest.raises(Exception, match="fails_late"):
        p.run(x=x, y=y)


class _Shared:
    def __init__(self, flags):
        self.flags = flags

    def tells_done(self):
        return self.flags


def test_only_arena_runs_are_timed_and_the_fastest_of_the_last_few_is_expected(monkeypatch):
    """A run through fresh segments or the messages is not timed (the next arena run of its kind
    would wait on its tasks for most of its time); of the last ``LAST`` arena runs the fastest is
    what the next one expects; one faster than ``QUIET_FROM`` is expected by none."""
    kind = ("test-kind", time.monotonic())
    clock = [100.0]
    monkeypatch.setattr(done_watch.time, "monotonic", lambda: clock[0])

    def run(flags, seconds):
        watch = done_watch.DoneWatch(_Shared(flags), kind)
        clock[0] += seconds
        watch.finished()
        return watch

    run(False, 5.0)
    assert done_watch.TOOK.get(kind) is None, "a run without the arena's flags was timed"
    for seconds in (0.9, 0.5, 0.7, 0.6, 0.8):
        run(True, seconds)
    assert done_watch.DoneWatch(_Shared(True), kind).expected == pytest.approx(0.5)
    run(True, 0.95)                                     # the 0.9 s one drops out, 0.5 s stays the fastest
    assert done_watch.DoneWatch(_Shared(True), kind).expected == pytest.approx(0.5)
    for seconds in (0.7,) * done_watch.LAST:            # 0.5 s falls out of the last LAST
        run(True, seconds)
    assert done_watch.DoneWatch(_Shared(True), kind).expected == pytest.approx(0.7)
    for seconds in (done_watch.QUIET_FROM / 2,) * done_watch.LAST:
        run(True, seconds)
    assert done_watch.DoneWatch(_Shared(True), kind).expected is None
