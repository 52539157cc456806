"""A kernel numba cannot type for the arguments given: eagle's line first, then what numba tried
(the signature and the candidates it rejected), bounded, with no path to the generated module."""
from __future__ import annotations

import numpy as np
import pytest

import eagle
import eagle.exec as eexec
from eagle import In, Out
from eagle import plan as eplan
from eagle.errors import DETAIL_CHARS, DETAIL_LINES


@eagle.kernel
def halve_into(i, x: In, y: Out):
    y[i] = x[i] * 0.5


def test_a_typing_error_keeps_what_numba_tried_below_eagles_line():
    with pytest.raises(TypeError) as info:
        eplan.plan(halve_into, structure=eexec.HostTeam).run(x=np.arange(4) + 1j)
    lines = str(info.value).split("\n")
    assert lines[0].startswith("kernel 'halve_into', line ") and "numba says: No implementation of function" in lines[0]
    below = lines[1:]
    assert below and all(t.startswith("    ") for t in below), lines
    # the signature numba tried: the output plane, the sample index and the complex value
    assert any(">>> setitem(array(float64, 1d, C), int64, complex128)" in t for t in below), below
    assert any("candidate implementations" in t for t in below), below
    assert len(below) <= DETAIL_LINES + 1 and sum(len(t) for t in below) <= DETAIL_CHARS + 120 + 4 * len(below)
    assert "eagle_host_" not in str(info.value) and "During:" not in str(info.value)
