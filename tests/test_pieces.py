"""A worker's host block runs in pieces (``eagle_dask.task.run_pieces``): the bits are numpy's and
the row partials those of one pass; the first piece of a kernel is a few rows, later blocks of the
same kernel, Params and team start at the pace the last piece took (one piece when the block is
short); no piece is left shorter than a quarter of the one planned.
"""
from __future__ import annotations

import numpy as np
import pytest

import eagle
from eagle.host import thread_budget
from eagle.local import HostTeam
from eagle.models import oscillator
from eagle_dask import task
from tests import kernels as K
from tests.reference import row_partials


def _inputs(n, dt, steps, seed):
    rng = np.random.default_rng(seed)
    return {"omega": rng.uniform(0.5, 2.0, n), "dt": dt, "steps": steps, "x": rng.uniform(-1, 1, n),
            "v": rng.uniform(-1, 1, n)}


def _run(d, start, stop):
    """(row partials, the samples done after each piece) of ``[start, stop)`` on one thread."""
    plugin = task.plugin_of(eagle.deploy(oscillator), HostTeam)
    reports = []
    with thread_budget(1):
        rows = task.run_pieces(HostTeam, plugin, d, start, stop, po=0, wanted=lambda: True, report=reports.append)
    return rows, reports


def _first_piece():
    with thread_budget(1):
        return task.first_piece()


def _fresh_dt():
    """A time step no other test used: its Params have no pace yet in this process."""
    return float(np.random.default_rng().uniform(1e-4, 2e-4))


def _set_pace(d, samples):
    """The pace of ``d``'s kernel and Params set so that a first piece holds about ``samples``."""
    with thread_budget(1):
        key = task._Pace.of(task.plugin_of(eagle.deploy(oscillator), HostTeam), d).key
    task.PACES.put(key, task.PIECE_SECONDS / samples)


@pytest.mark.parametrize("start, stop", [(0, 4417), (96, 3001), (0, 1)])
@pytest.mark.parametrize("pace", [None, 1000])
def test_pieces_give_numpys_bits_and_the_rows_of_one_pass(start, stop, pace):
    """Measured from a few rows (``pace`` None), or at a pace of about ``pace`` samples a piece."""
    dt = _fresh_dt()
    for _ in range(2):
        d = _inputs(5000, dt, 7, start + stop)
        if pace is not None:
            _set_pace(d, pace)
        want = K.oscillator_numpy({**{k: (np.copy(v) if isinstance(v, np.ndarray) else v) for k, v in d.items()}})
        x0, v0 = d["x"].copy(), d["v"].copy()
        rows, _ = _run(d, start, stop)
        w = d["omega"][start:stop]
        x, v = want["x"][start:stop], want["v"][start:stop]
        energy = 0.5 * (v * v + w * w * x * x)
        assert np.array_equal(d["x"][start:stop], want["x"][start:stop])
        assert np.array_equal(d["v"][start:stop], want["v"][start:stop])
        assert np.array_equal(d["x"][:start], x0[:start]) and np.array_equal(d["x"][stop:], x0[stop:])
        assert np.array_equal(d["v"][stop:], v0[stop:])
        assert np.array_equal(rows["energy"], np.array(row_partials("sum", energy)).reshape(-1, 2))


def test_a_kernels_first_block_starts_small_and_the_next_runs_at_its_pace():
    dt = _fresh_dt()
    _, first = _run(_inputs(20000, dt, 3, 1), 0, 20000)
    assert first[0] == _first_piece(), f"the first piece of a new kernel's Params was not a few rows: {first}"
    assert len(first) >= 2
    _, again = _run(_inputs(20000, dt, 3, 2), 0, 20000)        # far below PIECE_SECONDS at its pace
    assert again == [], f"a short block at a known pace still ran in pieces: {again}"
    _, other = _run(_inputs(20000, _fresh_dt(), 3, 3), 0, 20000)
    assert other[:1] == [_first_piece()], f"another Param's block started at the first one's pace: {other}"


def test_no_short_last_piece():
    """Pieces of 256 then 4096 samples (the second grown 16 times, fast): 64 samples left would be
    a third piece; they join the second."""
    _run(_inputs(64, _fresh_dt(), 1, 5), 0, 64)                 # compiled: the first piece is fast
    dt = _fresh_dt()
    n = _first_piece() * 17 + 64
    _, reports = _run(_inputs(n, dt, 1, 4), 0, n)
    sizes = np.diff([0, *reports]).tolist()
    assert reports[-1] == n
    assert len(sizes) < 2 or sizes[-1] >= sizes[-2] // 4, f"a short last piece: {sizes}"
