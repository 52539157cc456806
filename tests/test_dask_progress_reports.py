"""Who reports progress, and the bar's last line: a numpy-mode run without a bar sends no
progress event at all (and prints nothing); a run with a bar sends them; the bar always draws
its last state when it closes, even when the count did not move since the last redraw (the
line then ends, and a stopped run says so).
"""
from __future__ import annotations

import io
import time

import numpy as np
import pytest

pytest.importorskip("distributed")

from eagle import plan as eplan  # noqa: E402
from eagle.models import oscillator  # noqa: E402
from eagle_dask import DaskPartition, progress  # noqa: E402
from tests.launch import local_client  # noqa: E402


def oscillators(n, steps):
    return {"omega": np.linspace(0.5, 2.0, n), "dt": 1e-3, "steps": steps, "x": np.ones(n), "v": np.zeros(n)}


@pytest.fixture(scope="module")
def client():
    with local_client(2) as c:
        yield c


def _events(client):
    time.sleep(1.0)                       # the workers' batched streams have reached the scheduler
    return len(client.get_events(progress.TOPIC))


def _piece_seconds(seconds):
    import eagle_dask.task as task
    before, task.PIECE_SECONDS = task.PIECE_SECONDS, seconds
    return before


def test_only_runs_with_a_bar_report_progress(client, capsys):
    n = 16384                             # 8192 samples a block (~20 ms): pieces of 1 ms
    before = client.run(_piece_seconds, 0.001)
    try:
        _bar_or_not(client, capsys, n)
    finally:
        client.run(_piece_seconds, next(iter(before.values())))


def _bar_or_not(client, capsys, n):
    quiet = eplan.plan(oscillator, structure=DaskPartition.on(client, progress=False))
    loud = eplan.plan(oscillator, structure=DaskPartition.on(client, progress=True))
    before = _events(client)
    quiet.run(**oscillators(n, 20000))
    assert _events(client) == before, "a run without a bar sent progress events"
    assert capsys.readouterr().out == ""
    loud.run(**oscillators(n, 20000))
    assert _events(client) >= before + 4, "a run with a bar reports each of its blocks' pieces"
    out = capsys.readouterr().out
    assert out.endswith("\n") and f"{n}/{n} samples" in out.rsplit("\r", 1)[1], out[-200:]


class _Record:
    def __init__(self):
        self.calls = []

    def show(self, text, frac, last):
        self.calls.append((text, frac, last))


def _drawn(rec, words, timeout=5.0):
    end = time.monotonic() + timeout
    while not any(words in text for text, _, _ in rec.calls) and time.monotonic() < end:
        time.sleep(progress.REFRESH / 4)
    return any(words in text for text, _, _ in rec.calls)


def test_the_last_state_is_drawn_when_the_count_did_not_move():
    """The bar's thread has drawn 64/64 already; closing still draws the last line (it ends the
    terminal line); a stopped run's bar says '(stopped)' at an unmoved count."""
    rec = _Record()
    bar = progress.SampleBar("k", 64, {0: 64}, out=rec)
    bar.finished(0)
    assert _drawn(rec, "64/64 samples")
    bar.close()
    text, frac, last = rec.calls[-1]
    assert last and frac == 1.0 and "100%" in text and "(stopped)" not in text

    stream = io.StringIO()
    bar = progress.SampleBar("k", 64, {0: 32, 1: 32}, out=progress._Line(stream))
    bar.finished(0)
    end = time.monotonic() + 5.0
    while "32/64 samples" not in stream.getvalue() and time.monotonic() < end:
        time.sleep(progress.REFRESH / 4)
    bar.close(complete=False)
    shown = stream.getvalue()
    assert shown.endswith("(stopped)\n") and shown.count("\n") == 1, shown
    assert shown.rsplit("\r", 1)[1].startswith("k: [") and "32/64 samples" in shown.rsplit("\r", 1)[1]
