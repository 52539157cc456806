"""The cancel watcher over a worker's lifetime (``eagle_dask.cancel``, ``eagle.host``'s wait mark).

A worker thread runs many pieces one after the other.  Each must be watched whatever came
before: a piece after the watcher thread ended (no piece was watched for a while), a piece
after an ``Abandoned`` delivered while the previous one was leaving ``watching``, and a thread
that ran the host engine before must not count as waiting for its team once its wait returned
(``Abandoned`` raised then would land outside the wait, where a lock may be held).
"""
from __future__ import annotations

import sys
import threading
import time

import numpy as np

import eagle.exec as eexec
from eagle import plan as eplan
from eagle.models import oscillator
from eagle_dask import cancel
from eagle_dask.cancel import Abandoned, watching
from tests.launch import in_thread

#: seconds a released piece may run on: the watcher's poll, the engine's wait poll, a loaded machine
STOPS_WITHIN = 5.0


def oscillators(n, steps):
    return {"omega": np.linspace(0.5, 2.0, n), "dt": 1e-3, "steps": steps, "x": np.ones(n), "v": np.zeros(n)}


def _plan():
    plan = eplan.plan(oscillator, structure=eexec.HostTeam)
    plan.run(**oscillators(64, 1))                 # compiled before anything is timed
    return plan


def _long(plan):
    """Minutes of work unless stopped; returns the seconds it ran and how it ended."""
    t = time.monotonic()
    try:
        with watching(lambda: False):                # released from the start
            plan.run(**oscillators(4096, 150_000_000))
        return time.monotonic() - t, "returned"
    except Abandoned:
        return time.monotonic() - t, "abandoned"


def _watchers():
    return [t for t in threading.enumerate() if t.name == "eagle-dask-cancel" and t.is_alive()]


def _watcher_ends(within=5.0) -> bool:
    end = time.monotonic() + within
    while _watchers() and time.monotonic() < end:
        time.sleep(0.02)
    return not _watchers()


def test_a_piece_after_the_watcher_ended_is_still_stopped():
    """A watched piece ends, the watcher thread ends with nothing to watch; a later piece,
    released by its client, is still stopped within a poll."""
    plan = _plan()
    with watching(lambda: True):
        plan.run(**oscillators(256, 10))
    assert _watcher_ends(), "the watcher did not end with nothing to watch"
    th, box = in_thread(lambda: _long(plan))
    th.join(STOPS_WITHIN + 10)
    assert not th.is_alive(), "the second piece was never stopped: nobody watched it"
    seconds, how = box["out"]
    assert how == "abandoned" and seconds < STOPS_WITHIN, box


def test_abandoned_delivered_while_leaving_is_raised_once():
    """The watcher fires just as the piece leaves ``watching`` (the thread waits for the
    watcher's lock in the exit): the thread sees one ``Abandoned``, none later; the watcher
    ends; a later piece of that thread is still stopped."""
    plan = _plan()
    gate = threading.Event()
    box = {"caught": 0}

    def task():
        try:
            try:
                with watching(lambda: True):
                    gate.wait(30)
            except Abandoned:
                box["caught"] += 1
            s = 0
            for k in range(2_000_000):          # the next work of this thread: nothing pending lands here
                s += k
            time.sleep(0.1)
            box["after"] = "clean"
        except Abandoned:
            box["after"] = "abandoned later"
        box["watcher_ended"] = _watcher_ends()
        box["next"] = _long(plan)

    th = threading.Thread(target=task, daemon=True)
    th.start()
    end = time.monotonic() + 30
    while th.ident not in cancel._WATCHED and time.monotonic() < end:
        time.sleep(0.01)
    watch = cancel._WATCHED[th.ident]
    with cancel._LOCK:                                   # the watcher's lock, as while it fires
        gate.set()
        frame = None
        while time.monotonic() < end:
            frame = sys._current_frames().get(th.ident)
            if frame is not None and frame.f_code.co_name == "__exit__":
                break
            time.sleep(0.001)
        assert frame is not None and frame.f_code.co_name == "__exit__", "the piece did not reach its exit"
        cancel._fire(th.ident, watch)                    # what the watcher does when the piece is released
    th.join(STOPS_WITHIN + 40)
    assert not th.is_alive(), box
    assert box["caught"] == 1 and box["after"] == "clean", box
    assert box["watcher_ended"], "the watcher kept running with no piece to watch (a slot left behind)"
    seconds, how = box["next"]
    assert how == "abandoned" and seconds < STOPS_WITHIN, box


def test_not_waiting_for_the_team_once_the_wait_returned():
    """A thread that ran the host engine before, then spends a second in its own Python inside
    a released piece: ``Abandoned`` waits until the thread waits for its team again (raised
    earlier it could land where a lock is held), then stops the team within a poll."""
    plan = _plan()
    box = {}

    def task():
        plan.run(**oscillators(256, 10))             # this thread waited for its team once
        t = time.monotonic()
        try:
            with watching(lambda: False):
                while time.monotonic() - t < 1.0:      # its own Python, outside the team's wait
                    box["spins"] = box.get("spins", 0) + 1
                box["outside"] = time.monotonic() - t
                plan.run(**oscillators(4096, 150_000_000))
            box["ended"] = "returned"
        except Abandoned:
            box["ended"] = "abandoned"
        box["seconds"] = time.monotonic() - t

    th = threading.Thread(target=task, daemon=True)
    th.start()
    th.join(60)
    assert not th.is_alive(), "the team was not stopped"
    assert box.get("outside", 0) >= 1.0, f"Abandoned was raised outside the team's wait: {box}"
    assert box["ended"] == "abandoned" and box["seconds"] < 1.0 + STOPS_WITHIN, box


def test_pieces_one_after_the_other_keep_one_watcher_thread():
    """A worker's blocks follow each other with gaps (the next task's way from the scheduler): the
    watcher thread started for one piece still watches the next, rather than a thread per piece."""
    plan = _plan()
    with watching(lambda: True):
        plan.run(**oscillators(256, 10))
    first = _watchers()
    time.sleep(cancel.POLL * 3)
    with watching(lambda: True):
        plan.run(**oscillators(256, 10))
        assert _watchers() == first and len(first) == 1, "a new watcher thread for the next piece"
    assert _watcher_ends(cancel.LINGER + 5.0), "the watcher did not end with nothing to watch"

