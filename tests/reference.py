"""The design's rules written out in plain Python, independently of ``eagle.rows``.

Tests compute their expected ranks, shares and cell values here, never with the ``split`` /
``share`` / ``fold`` that the code under test calls (``tests/test_reference.py`` checks these
against hand-written cases and ``math.fsum``).

* the split: ``parts`` contiguous blocks of ``n`` samples, block ``r`` one sample longer than
  ``n // parts`` for the first ``n % parts`` blocks; with ``rows`` the same rule over rows of
  ``ROW`` samples (the last row possibly short), so a block starts on a row;
* a cell: each row folds its contributions in sample order (``sum``: a Neumaier pair (sum,
  compensation)); the row partials fold in row order (the sums with Neumaier again, the
  compensations added up); a ``sum`` is sum + compensation, or the plain sum where that is not
  finite.

Importable from MPI scripts and Dask workers (``tests.reference``).
"""
from __future__ import annotations

import math

ROW = 32
IDENTITY = {"sum": 0.0, "times": 1.0, "max": -math.inf, "min": math.inf, "land": 1.0}


# -- the split -----------------------------------------------------------------------------------
def blocks(n, parts):
    """``[(start, stop)]`` of ``parts`` contiguous blocks of ``n`` items, the first ``n % parts``
    one longer."""
    out, start = [], 0
    for r in range(parts):
        size = n // parts + (1 if r < n % parts else 0)
        out.append((start, start + size))
        start += size
    assert start == n
    return out


def cut(n, parts, rows=False):
    """``[(start, stop)]`` of each of ``parts`` parts of ``n`` samples (in rows of 32 if ``rows``)."""
    if not rows:
        return blocks(n, parts)
    nrows = (n + ROW - 1) // ROW
    return [(min(a * ROW, n), min(b * ROW, n)) for a, b in blocks(nrows, parts)]


def part_of(sample, n, parts, rows=False):
    """The part that holds ``sample``."""
    for r, (a, b) in enumerate(cut(n, parts, rows)):
        if a <= sample < b:
            return r
    raise ValueError(f"sample {sample} is not one of {n}")


# -- the fold ------------------------------------------------------------------------------------
def step(op, s, c, v):
    """One value into the accumulator ``(s, c)``."""
    if op == "sum":
        t = s + v
        if abs(s) >= abs(v):
            c += (s - t) + v
        else:
            c += (v - t) + s
        return t, c
    if op == "times":
        return s * v, c
    if op in ("max", "min"):
        if s != s:                       # NaN wins
            return s, c
        if v != v or (v > s if op == "max" else v < s):
            return v, c
        return s, c
    if op == "land":
        return (1.0 if (s != 0.0 and v != 0.0) else 0.0), c
    raise ValueError(f"unknown op {op!r}")


def row_partials(op, values):
    """``[(s, c)]``, one per row of 32 contributions, each folded in sample order."""
    values = [float(v) for v in values]
    out = []
    for lo in range(0, len(values), ROW):
        s, c = IDENTITY[op], 0.0
        for v in values[lo:lo + ROW]:
            s, c = step(op, s, c, v)
        out.append((s, c))
    return out


def fold_partials(op, partials):
    """Row partials ``[(s, c)]`` folded in row order, finished as a value."""
    s, c = IDENTITY[op], 0.0
    for ps, pc in partials:
        s, c = step(op, s, c, float(ps))
        c += float(pc)
    if op == "sum":
        total = s + c
        return total if math.isfinite(total) else s
    return s


def cell(op, values):
    """The value one process gives a cell whose samples (in order) contributed ``values``."""
    return fold_partials(op, row_partials(op, values))


def fold_values(op, values):
    """Plain values (one per rank, say) folded in order, as ``(value, 0)`` partials."""
    return fold_partials(op, [(v, 0.0) for v in values])


# -- a kernel run in Python ------------------------------------------------------------------------
def per_sample(kernel, planes):
    """``kernel`` run by a plain loop over its samples in Python: its body called as a function for
    ``i = 0, 1, ...``, in sample order, with none of eagle's generated code, bounds checks, tiles
    or folds.  Returns ``(outputs, contributions)``: every ``Out`` and ``Mutable`` plane (an ``Out``
    not given allocated as zeros of its declared dtype, a ``Mutable`` copied first) and, for each
    cell, ``(op, [the samples' contributions])`` (a sample that writes none gives the identity)."""
    import numpy as np
    counts = {len(planes[name]) for role, name in kernel.arg_spec
              if role.kind in ("In", "Out", "Mutable") and name in planes}
    assert len(counts) == 1, counts
    n = counts.pop()
    args, outputs, cells = [], {}, {}
    for role, name in kernel.arg_spec:
        if role.kind == "Param":
            v = planes[name] if name in planes else kernel.defaults[name]
        elif role.kind == "In":
            v = np.asarray(planes[name])
        elif role.kind == "Cell":
            v = cells[name] = np.full(n, IDENTITY[role.op])
        elif name in planes:
            v = outputs[name] = np.array(planes[name], copy=True)
        else:
            shape = (n,) if role.width is None else (n, role.width)
            v = outputs[name] = np.zeros(shape, dtype=role.out_dtype)
        args.append(v)
    for i in range(n):
        kernel.fn(i, *args)
    ops = {name: role.op for role, name in kernel.arg_spec if role.kind == "Cell"}
    return outputs, {name: (ops[name], [float(c) for c in v]) for name, v in cells.items()}
