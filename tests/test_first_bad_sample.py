"""The first bad sample, in sample order, on every host path (the promise of ``eagle.bounds``).

The vectorised loop runs a body cut into several loops over a tile, and the laned loop runs a
group of samples statement by statement: a later sample may reach its bad index before an
earlier one reaches its own.  The IndexError must still name the first sample, in sample order,
that a plain per-sample Python run (the oracle here) finds.
"""
from __future__ import annotations

import numpy as np
import pytest

import eagle
import eagle.exec as eexec
from eagle import In, Mutable, Out, Param
from eagle import plan as eplan
from eagle.host import HostEntry

N = 300
BIG = 10 ** 6


@eagle.kernel
def two_loops(i, x: In, j1: In, j2: In, steps: Param, y: Out):
    a = x[int(j1[i])]
    for _ in range(steps):
        a = a * 0.5 + 1.0
    y[i] = a + x[int(j2[i])]


@eagle.kernel
def rewritten(i, x: In, j1: In, steps: Param, m: Mutable):
    k = int(m[i])                   # the index this sample starts with ...
    m[i] = 1e6                      # ... and what a second run of it would read: out of range
    a = x[int(j1[i])]
    for _ in range(steps):
        a = a * 0.5 + 1.0
    m[i] = a + x[k]


def first_bad_two_loops(x, j1, j2):
    """Plain Python, one sample after another: (sample, index) of the first bad access."""
    for i in range(len(j1)):
        for j in (int(j1[i]), int(j2[i])):
            if not 0 <= j < len(x):
                return i, j
    return None


def first_bad_rewritten(x, j1, m):
    m = m.copy()
    for i in range(len(j1)):
        k = int(m[i])
        m[i] = 1e6
        for j in (int(j1[i]), k):
            if not 0 <= j < len(x):
                return i, j
    return None


ENTRIES = {"simd": {}, "lanes": {"simd": False}, "one": {"lanes": 1}}


def run_entry(kernel, path, threads, planes, po=0):
    """One run through a host entry of ``path`` (asserted), planes starting at sample ``po``."""
    p = eagle.deploy(kernel)
    entry = HostEntry(p, **ENTRIES[path])
    assert entry.path == path
    values = {k: (v[po:] if isinstance(v, np.ndarray) and k in p.sliceable else v) for k, v in planes.items()}
    entry.run(values, po, N, po=po, threads=threads)


@pytest.mark.parametrize("path", ["simd", "lanes", "one"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("bad1, bad2", [(100, 5), (6, 5), (5, 6), (200, 130)])
def test_two_loops_name_the_first_bad_sample(path, threads, bad1, bad2):
    x = np.linspace(0.0, 1.0, N)
    j1, j2 = np.arange(N, dtype=np.float64), np.arange(N, dtype=np.float64)[::-1].copy()
    j1[bad1], j2[bad2] = N + 7, -3
    want = first_bad_two_loops(x, j1, j2)
    with pytest.raises(IndexError) as info:
        run_entry(two_loops, path, threads, {"x": x, "j1": j1, "j2": j2, "steps": 3, "y": np.empty(N)})
    text = str(info.value)
    assert f"sample {want[0]}" in text and f"index {want[1]} " in text, (want, text)


@pytest.mark.parametrize("path", ["simd", "lanes", "one"])
@pytest.mark.parametrize("bad1, bad2", [(100, 5), (6, 5)])
def test_a_rerun_restores_the_mutable_planes(path, bad1, bad2):
    """The sample a rewritten Mutable plane would misplace on a second run: still the first."""
    x = np.linspace(0.0, 1.0, N)
    j1 = np.arange(N, dtype=np.float64)
    j1[bad1] = N + 7
    m = np.arange(N, dtype=np.float64)[::-1].copy()
    m[bad2] = BIG
    want = first_bad_rewritten(x, j1, m)
    with pytest.raises(IndexError) as info:
        run_entry(rewritten, path, 1, {"x": x, "j1": j1, "steps": 3, "m": m})
    text = str(info.value)
    assert f"sample {want[0]}" in text and f"index {want[1]} " in text, (want, text)


@pytest.mark.parametrize("path", ["simd", "lanes"])
def test_at_a_partition_offset(path):
    """Planes that start at sample po (a task's slice): the sample is the global one."""
    po = 64
    x = np.linspace(0.0, 1.0, po + N)
    j1 = np.arange(po + N, dtype=np.float64) % N
    j2 = j1.copy()
    j1[po + 100], j2[po + 5] = 10 ** 5, -1
    with pytest.raises(IndexError) as info:
        p = eagle.deploy(two_loops)
        entry = HostEntry(p, **ENTRIES[path])
        planes = {"x": x, "j1": j1, "j2": j2, "steps": 3, "y": np.empty(po + N)}
        values = {k: (v[po:] if isinstance(v, np.ndarray) and k in p.sliceable else v) for k, v in planes.items()}
        entry.run(values, po, po + N, po=po, threads=1)
    assert f"sample {po + 5}" in str(info.value), str(info.value)


def test_through_a_plan():
    """The issue's case through HostTeam: sample 5, not 100."""
    x = np.linspace(0.0, 1.0, N)
    j1, j2 = np.zeros(N), np.zeros(N)
    j1[100], j2[5] = N, N + 1
    with pytest.raises(IndexError) as info:
        eplan.plan(eagle.deploy(two_loops), structure=eexec.HostTeam).run(x=x, j1=j1, j2=j2, steps=2)
    assert "sample 5" in str(info.value) and "sample 100" not in str(info.value)
