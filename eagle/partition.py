"""The sample split: how samples are cut among partitions, ranks and workers.

This module owns the rule, and every structure (threads, device launches, MPI ranks, Dask
workers) calls it:

* ``R`` parts of ``n`` samples: part ``r`` takes one contiguous block, the first ``n % R``
  parts take one extra sample;
* a kernel with cells is cut in **rows of 32 samples** instead (rows split by the same rule,
  the last row possibly short), so that no row of a cell has two owners.
"""
from __future__ import annotations

from typing import NamedTuple

#: samples per row of a cell; a row's contributions are folded in ascending sample order
ROW = 32


class Partition(NamedTuple):
    """Samples ``[base, base + count)`` of ``n_samples``."""
    base: int
    count: int
    n_samples: int

    @property
    def stop(self) -> int:
        return self.base + self.count


def _blocks(total: int, parts: int):
    q, r = divmod(total, parts)
    start = 0
    for k in range(parts):
        size = q + (1 if k < r else 0)
        yield start, size
        start += size


def n_rows(n: int) -> int:
    """Rows of 32 samples that cover ``n`` samples."""
    return -(-n // ROW)


def split(n: int, parts: int, *, rows: bool = False) -> list[Partition]:
    """Cut ``n`` samples into ``parts`` contiguous partitions (in rows of 32 if ``rows``)."""
    if isinstance(parts, bool) or not isinstance(parts, int) or parts < 1:
        raise ValueError(f"the number of partitions must be an integer >= 1, not {parts!r}")
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


def row_span(start: int, stop: int) -> tuple[int, int]:
    """The rows ``[r0, r1)`` that samples ``[start, stop)`` touch."""
    return start // ROW, n_rows(stop) if stop > start else start // ROW


def check_partitions(partitions, n: int, *, rows: bool = False, kernel: str = "?") -> list[Partition]:
    """Validate explicit partitions: contiguous, in order, covering ``[0, n)``."""
    parts = []
    for p in partitions:
        if isinstance(p, Partition):
            base, count = p.base, p.count
        else:
            try:
                base, count = (tuple(p) + (None,))[:2]
            except TypeError:
                raise TypeError(f"kernel {kernel!r}: a partition is Partition(base, count, n_samples) "
                                f"or (base, count), not {p!r}") from None
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (base, count)):
            raise TypeError(f"kernel {kernel!r}: partition {p!r} needs integer base and count")
        if count < 0 or base < 0:
            raise ValueError(f"kernel {kernel!r}: partition {p!r} has a negative base or count")
        parts.append(Partition(base, count, n))
    if not parts:
        raise ValueError(f"kernel {kernel!r}: partitions= is empty; give at least one")
    expect = 0
    for p in parts:
        if p.base != expect:
            what = "a gap" if p.base > expect else "an overlap"
            raise ValueError(f"kernel {kernel!r}: partitions must be contiguous and cover [0, {n}); "
                             f"{what} at sample {min(p.base, expect)} (partition {tuple(p[:2])})")
        if rows and p.base % ROW and p.base != n:
            raise ValueError(f"kernel {kernel!r} writes cells, which are folded in rows of {ROW} samples: "
                             f"every partition must start at a multiple of {ROW} (partition {tuple(p[:2])})")
        expect = p.stop
    if expect != n:
        raise ValueError(f"kernel {kernel!r}: partitions must be contiguous and cover [0, {n}); "
                         f"they end at {expect}")
    return parts
