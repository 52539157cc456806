"""Cells: reductions over samples with the same bits at every split.

A cell is finished in two fixed steps, neither of which depends on how samples were split:

1. each row of 32 samples folds its contributions in ascending sample order into one *row
   partial* -- for ``sum`` a Neumaier pair (sum, compensation), kept as a pair;
2. the row partials are folded in ascending row order (the sums with Neumaier again, the
   compensations added up); the value is sum + compensation, or the plain sum where that is
   not finite (so an ``inf`` does not turn into NaN).

Ranks and workers exchange row partials, both halves of each pair, never their own totals.
Row partials are ``(rows, 2)`` float64 arrays; the second column is zero for other ops.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from .partition import ROW
from .roles import CELL_OPS

OP_CODE = {op: k for k, op in enumerate(CELL_OPS)}
IDENTITY = {"sum": 0.0, "times": 1.0, "max": -math.inf, "min": math.inf, "land": 1.0}


def op_code(op: str) -> int:
    try:
        return OP_CODE[op]
    except KeyError:
        raise ValueError(f"unknown cell op {op!r}: one of {', '.join(CELL_OPS)}") from None


@njit(cache=True, nogil=True)
def step(code, s, c, v):
    """Fold one value ``v`` into the accumulator ``(s, c)`` with op ``code``."""
    if code == 0:                      # sum: Neumaier
        t = s + v
        if abs(s) >= abs(v):
            c += (s - t) + v
        else:
            c += (v - t) + s
        return t, c
    if code == 1:                      # times
        return s * v, c
    if code == 2:                      # max, NaN wins
        if s != s:
            return s, c
        if v != v or v > s:
            return v, c
        return s, c
    if code == 3:                      # min, NaN wins
        if s != s:
            return s, c
        if v != v or v < s:
            return v, c
        return s, c
    # land: 1.0 while every value is non-zero
    return (1.0 if (s != 0.0 and v != 0.0) else 0.0), c


@njit(cache=True, nogil=True)
def row_partial(code, ident, buf, count):
    """Fold ``buf[:count]`` (one row's contributions) in ascending order."""
    s, c = ident, 0.0
    for k in range(count):
        s, c = step(code, s, c, buf[k])
    return s, c


@njit(cache=True, nogil=True)
def fold_partials(code, ident, partials):
    """Fold ``(k, 2)`` partials in ascending order and finish the value."""
    s, c = ident, 0.0
    for r in range(partials.shape[0]):
        s, c = step(code, s, c, partials[r, 0])
        c += partials[r, 1]
    if code == 0:
        total = s + c
        if not math.isfinite(total):
            return s
        return total
    return s


@njit(cache=True, nogil=True)
def rows_of(code, ident, values, out):
    """Row partials of per-sample contributions ``values`` into ``out`` (rows, 2)."""
    n = values.shape[0]
    for r in range(out.shape[0]):
        lo = r * 32
        hi = min(lo + 32, n)
        s, c = ident, 0.0
        for k in range(lo, hi):
            s, c = step(code, s, c, values[k])
        out[r, 0] = s
        out[r, 1] = c


def empty_rows(count: int) -> np.ndarray:
    return np.zeros((count, 2), dtype=np.float64)


def row_partials(op: str, values) -> np.ndarray:
    """Row partials of per-sample contributions (sample 0 first), rows of 32."""
    values = np.ascontiguousarray(values, dtype=np.float64)
    out = empty_rows(-(-values.shape[0] // ROW))
    rows_of(op_code(op), IDENTITY[op], values, out)
    return out


def fold(op: str, values) -> np.float64:
    """Combine partials in index order, never in a tree whose shape depends on the split.

    ``values`` is either a 1-D sequence of plain values or a ``(k, 2)`` array of row partials
    (value, compensation).  The result is a numpy float64.
    """
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim == 1:
        arr = np.stack([arr, np.zeros_like(arr)], axis=1) if arr.size else empty_rows(0)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ValueError(f"fold({op!r}, ...) takes plain values (k,) or partial pairs (k, 2), "
                         f"not an array of shape {arr.shape}")
    return np.float64(fold_partials(op_code(op), IDENTITY[op], np.ascontiguousarray(arr)))


def reduce_samples(op: str, values) -> np.float64:
    """The value one process gives a cell whose samples contributed ``values``."""
    return fold(op, row_partials(op, values))
