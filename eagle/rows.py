"""Rows: how samples are cut among partitions, ranks and workers, and how cells are folded.

One rule for both, because a cell's bits depend on where the cuts fall:

* ``R`` parts of ``n`` samples: part ``r`` takes one contiguous block, the first ``n % R``
  parts take one extra sample (``split``, ``share``);
* a kernel with cells is cut in **rows of** ``ROW`` **samples** instead (rows split by the same
  rule, the last row possibly short), so that no row of a cell has two owners;
* each row folds its contributions in ascending sample order into one *row partial*
  (``row_partial``) -- for ``sum`` a Neumaier pair (sum, compensation), kept as a pair;
* row partials are folded in ascending row order (``fold``: the sums with Neumaier again, the
  compensations added up); the value is sum + compensation, or the plain sum where that is not
  finite (so an ``inf`` does not turn into NaN).

Ranks and workers exchange row partials, both halves of each pair, never their own totals.
Row partials are ``(rows, 2)`` float64 arrays; the second column is zero for other ops.
``row_loop_lines`` emits the one loop that walks a share row by row, for the host and the
device code alike.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit

from .roles import CELL_OPS

#: samples per row of a cell; a row's contributions are folded in ascending sample order
ROW = 32

OP_CODE = {op: k for k, op in enumerate(CELL_OPS)}
IDENTITY = {"sum": 0.0, "times": 1.0, "max": -math.inf, "min": math.inf, "land": 1.0}


# -- the sample split ----------------------------------------------------------------------------
class Partition(NamedTuple):
    """Samples ``[base, base + count)`` of ``n_samples``."""
    base: int
    count: int
    n_samples: int

    @property
    def stop(self) -> int:
        return self.base + self.count


def is_count(v) -> bool:
    """An integer (Python or numpy), not a bool."""
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _blocks(total: int, parts: int):
    q, r = divmod(total, parts)
    start = 0
    for k in range(parts):
        size = q + (1 if k < r else 0)
        yield start, size
        start += size


def n_rows(n: int) -> int:
    """Rows of ``ROW`` samples that cover ``n`` samples."""
    return -(-n // ROW)


def split(n: int, parts: int, *, rows: bool = False) -> list[Partition]:
    """Cut ``n`` samples into ``parts`` contiguous partitions (in rows of ``ROW`` if ``rows``)."""
    if not is_count(parts) or parts < 1:
        raise ValueError(f"the number of partitions must be an integer >= 1, not {parts!r}")
    parts = int(parts)
    if not rows:
        return [Partition(b, c, n) for b, c in _blocks(n, parts)]
    out = []
    for rb, rc in _blocks(n_rows(n), parts):
        base = min(rb * ROW, n)
        stop = min((rb + rc) * ROW, n)
        out.append(Partition(base, stop - base, n))
    return out


def share(n: int, rank: int, size: int, *, rows: bool = False) -> Partition:
    """The partition rank ``rank`` of ``size`` takes."""
    return split(n, size, rows=rows)[rank]


def shares(partition: Partition, size: int, rows: bool) -> list[Partition]:
    """Every rank's share of ``partition``, in rank order."""
    check_row_start(partition.base, partition.stop, rows)
    return [Partition(partition.base + s.base, s.count, partition.n_samples)
            for s in split(partition.count, size, rows=rows)]


def row_span(start: int, stop: int) -> tuple[int, int]:
    """The rows ``[r0, r1)`` that samples ``[start, stop)`` touch."""
    return start // ROW, n_rows(stop) if stop > start else start // ROW


def check_row_start(start: int, stop: int, rows: bool, kernel: str | None = None):
    """Refuse a non-empty share ``[start, stop)`` of a kernel with cells that does not start on a
    row (it would own part of a row another share owns too, and the row's fold would change)."""
    if rows and stop > start and start % ROW:
        who = f"kernel {kernel!r} writes cells, which are" if kernel else "cells are"
        raise ValueError(f"{who} folded in rows of {ROW} samples: a share must start at a multiple of "
                         f"{ROW}, not at sample {start}")


def check_partitions(partitions, *, rows: bool = False, kernel: str = "?") -> list[tuple[int, int]]:
    """Validate explicit partitions as far as they can be seen without the planes: integer
    ``(base, count)`` pairs, contiguous and in order from sample 0, starting on rows when
    ``rows``.  Returns them as pairs; ``cover`` checks the end against ``n`` at run time."""
    parts = []
    for p in partitions:
        try:
            base, count = (tuple(p) + (None,))[:2]
        except TypeError:
            raise TypeError(f"kernel {kernel!r}: a partition is Partition(base, count, n_samples) "
                            f"or (base, count), not {p!r}") from None
        if not (is_count(base) and is_count(count)):
            raise TypeError(f"kernel {kernel!r}: partition {p!r} needs integer base and count")
        base, count = int(base), int(count)
        if count < 0 or base < 0:
            raise ValueError(f"kernel {kernel!r}: partition {p!r} has a negative base or count")
        parts.append((base, count))
    if not parts:
        raise ValueError(f"kernel {kernel!r}: partitions= is empty; give at least one")
    expect = 0
    for base, count in parts:
        if base != expect:
            what = "a gap" if base > expect else "an overlap"
            raise ValueError(f"kernel {kernel!r}: partitions must be contiguous and cover [0, n); "
                             f"{what} at sample {min(base, expect)} (partition {(base, count)})")
        if rows and count and base % ROW:
            raise ValueError(f"kernel {kernel!r} writes cells, which are folded in rows of {ROW} samples: "
                             f"every partition must start at a multiple of {ROW} (partition {(base, count)})")
        expect = base + count
    return parts


def cover(parts, n: int, *, kernel: str = "?") -> list[Partition]:
    """Checked partitions (``check_partitions``) as Partitions of ``n`` samples, refusing any that
    do not end at ``n``."""
    end = parts[-1][0] + parts[-1][1]
    if end != n:
        raise ValueError(f"kernel {kernel!r}: partitions must be contiguous and cover [0, {n}); "
                         f"they end at {end}")
    return [Partition(b, c, n) for b, c in parts]


# -- the fold ------------------------------------------------------------------------------------
def op_code(op: str) -> int:
    try:
        return OP_CODE[op]
    except KeyError:
        raise ValueError(f"unknown cell op {op!r}: one of {', '.join(CELL_OPS)}") from None


def identity_rows(op: str, count: int) -> np.ndarray:
    """``count`` row partials of ``op`` that no sample contributed to."""
    rows = np.zeros((count, 2), dtype=np.float64)
    rows[:, 0] = IDENTITY[op]
    return rows


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
def _rows_of(code, ident, values, out):
    n = values.shape[0]
    for r in range(out.shape[0]):
        lo = r * ROW
        s, c = row_partial(code, ident, values[lo:], min(ROW, n - lo))
        out[r, 0] = s
        out[r, 1] = c


def row_partials(op: str, values) -> np.ndarray:
    """Row partials of per-sample contributions (sample 0 first), rows of ``ROW``."""
    values = np.ascontiguousarray(values, dtype=np.float64)
    out = np.zeros((n_rows(values.shape[0]), 2))
    _rows_of(op_code(op), IDENTITY[op], values, out)
    return out


def fold(op: str, values) -> np.float64:
    """Combine partials in index order, never in a tree whose shape depends on the split.

    ``values`` is either a 1-D sequence of plain values or a ``(k, 2)`` array of row partials
    (value, compensation).  The result is a numpy float64.
    """
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim == 1:
        arr = np.stack([arr, np.zeros_like(arr)], axis=1) if arr.size else np.zeros((0, 2))
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ValueError(f"fold({op!r}, ...) takes plain values (k,) or partial pairs (k, 2), "
                         f"not an array of shape {arr.shape}")
    return np.float64(fold_partials(op_code(op), IDENTITY[op], np.ascontiguousarray(arr)))


def reduce_samples(op: str, values) -> np.float64:
    """The value one process gives a cell whose samples contributed ``values``."""
    return fold(op, row_partials(op, values))


# -- the loop that walks a share row by row, as generated code ------------------------------------
def float_literal(v: float) -> str:
    """``v`` as generated Python source (infinities through the module's ``_eagle_np``)."""
    if v == math.inf:
        return "_eagle_np.inf"
    if v == -math.inf:
        return "-_eagle_np.inf"
    return repr(v)


#: generated loops call the builtins through these names, so a Param called ``min`` or ``range``
#: (a parameter of the generated loop) cannot shadow them
MIN, RANGE = "_eagle_min", "_eagle_range"
BUILTIN_ALIASES = f"{MIN}, {RANGE} = min, range"


def scratch_name(cell: str) -> str:
    """The name of a cell's ``ROW``-sample scratch row in generated code."""
    return f"_eagle_c_{cell}"


def row_loop_lines(ind: str, cells: dict, start: str, stop: str, scratch: str, samples) -> list:
    """Generated lines that run samples ``[start, stop)`` of a kernel with ``cells`` row by row.

    Each cell gets a scratch row (``scratch`` is the expression that allocates ``ROW`` float64
    values), reset to the identity at the start of every row; ``samples(ind, r, e)`` gives the
    lines that run the samples ``[r, e)`` of one row (the body writes ``cell[i]`` into the
    scratch at ``i - r``); then each row is folded by ``row_partial`` into the cell's row
    ``r // ROW - _eagle_row0`` of its partials.  ``start`` is on a row (``check_row_start``).
    """
    out = [f"{ind}{scratch_name(c)} = {scratch}" for c in cells]
    out += [f"{ind}_eagle_r = {start}", f"{ind}while _eagle_r < {stop}:",
            f"{ind}    _eagle_e = {MIN}(_eagle_r + {ROW}, {stop})",
            f"{ind}    for _eagle_k in {RANGE}({ROW}):"]
    out += [f"{ind}        {scratch_name(c)}[_eagle_k] = {float_literal(IDENTITY[op])}" for c, op in cells.items()]
    out += samples(ind + "    ", "_eagle_r", "_eagle_e")
    out.append(f"{ind}    _eagle_k = _eagle_r // {ROW} - _eagle_row0")
    for c, op in cells.items():
        out += [f"{ind}    _eagle_s, _eagle_t = _eagle_row_partial({op_code(op)}, "
                f"{float_literal(IDENTITY[op])}, {scratch_name(c)}, _eagle_e - _eagle_r)",
                f"{ind}    {c}[_eagle_k, 0] = _eagle_s",
                f"{ind}    {c}[_eagle_k, 1] = _eagle_t"]
    out.append(f"{ind}    _eagle_r = _eagle_e")
    return out
