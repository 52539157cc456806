"""eagle.random inside a user's own ``numba.prange`` loop: called through a small ``@numba.njit``
function of the user's, the loop stays parallel (no NumbaPerformanceWarning) and the draws are
those of plain Python calls (docs/random.md, "In your own numba code")."""
from __future__ import annotations

import warnings

import numba
import numpy as np

from eagle import random as erandom


@numba.njit
def draw(seed, i, k):
    return erandom.normal(seed, i, k)


@numba.njit(parallel=True)
def paths(n, steps, seed):
    out = np.empty(n)
    for i in numba.prange(n):
        s = 0.0
        for k in range(steps):
            s += draw(seed, i, k)
        out[i] = s
    return out


@numba.njit(parallel=True)
def inlined(n, seed):
    out = np.empty(n)
    for i in numba.prange(n):
        out[i] = erandom.normal(seed, i, 0)
    return out


def test_a_wrapped_draw_keeps_the_prange_parallel_and_its_bits():
    with warnings.catch_warnings():
        warnings.simplefilter("error", numba.NumbaPerformanceWarning)
        got = paths(301, 5, 42)
    want = np.array([sum(erandom.normal(42, i, k) for k in range(5)) for i in range(301)])
    assert np.array_equal(got.view(np.uint64), want.view(np.uint64))


def test_a_draw_written_straight_in_the_prange_runs_serially_with_numbas_warning():
    """What the docs warn about: the inlined draw's argument check is a second exit from the
    loop, so numba runs it serially and says so (the bits are still right)."""
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got = inlined(64, 7)
    assert any(issubclass(x.category, numba.NumbaPerformanceWarning) and "prange" in str(x.message) for x in w)
    assert np.array_equal(got, np.array([erandom.normal(7, i, 0) for i in range(64)]))
