"""``run_until_done`` with dask planes: the state of every sample stays on the cluster.

``DaskPartition.until_done_state`` gives ``eagle.until_done`` a ``DaskState`` when any plane of
the run (or of the result it resumes) is a dask array.  The rounds are those of numpy planes;
only where the state lives differs:

* the Out and Mutable planes, the steps taken and the cells' per-sample contributions are dask
  arrays chunked as the run's first dask plane, **persisted** on the workers after every round
  (the graph never grows with the rounds, and nothing is computed twice);
* a round finds the samples still running on the cluster, from the state (``_running_at``: no
  index is sent, only each chunk's count, which its task checks); the round's planes are cut in
  **shares, evenly over the workers**, each share one task reading the pieces of the chunks it
  covers (``_gather``) and run as one block (``min_block=1`` for the rounds): a long tail in one
  chunk is spread over all of them;
* the round's results go back into each chunk of the state by one task per chunk, reading the
  pieces of the shares its samples went out in (``_put_pieces``);
* the driver fetches only what decides the next round: which of the round's samples run on
  (one byte per running sample), waited for in slices of ``POLL`` seconds: a Ctrl-C ends the
  wait and cancels the round, and ``timeout`` seconds with no running worker (every worker gone
  or paused) end it in eagle's ``TimeoutError``;
* the result's planes, status and steps are persisted dask arrays; each cell is a 0-d dask array
  folding the samples' contributions in sample order (``eagle.rows.row_partials`` per chunk of
  whole rows, then ``eagle.rows.fold``): the bits of one process.
"""
from __future__ import annotations

import math
import time

import numpy as np

from eagle.rows import ROW, fold, row_partials
from eagle.until_done import CAPPED, FINISHED

from .arrays import is_dask
from .ranks import scheduler_workers

#: seconds between two looks at the cluster while a round runs
POLL = 0.5


def _start_of(block_info):
    return block_info[0]["array-location"][0][0]


def _edges(sizes):
    """The edges of consecutive intervals of ``sizes``: ``(0, s0, s0 + s1, ...)``."""
    return np.cumsum((0,) + tuple(sizes)).astype(np.int64)


def _pieces(outer, inner):
    """For each interval of the edges ``outer``, the pieces of the intervals of ``inner`` it
    covers: ``(j, lo, hi)``, ``lo``/``hi`` counted from the start of ``inner``'s interval ``j``."""
    out = []
    for a, b in zip(outer[:-1], outer[1:]):
        j = max(int(np.searchsorted(inner, a, side="right")) - 1, 0)
        row = []
        while j < len(inner) - 1 and inner[j] < b:
            lo, hi = max(a, inner[j]), min(b, inner[j + 1])
            if hi > lo:
                row.append((j, int(lo - inner[j]), int(hi - inner[j])))
            j += 1
        out.append(row)
    return out


def _array(name, layer, dependencies, chunks, dtype):
    """A dask array made of the tasks ``layer`` (``{key: task}``) over ``dependencies``."""
    from dask.array.core import Array
    from dask.highlevelgraph import HighLevelGraph
    return Array(HighLevelGraph.from_collections(name, layer, dependencies=dependencies), name, chunks, dtype=dtype)


def _gather(tail, dtype, *parts):
    """A share of a round: for each piece ``(chunk, pos, lo, hi, start)`` (flat, five arguments
    each), the samples at ``pos[lo:hi]`` (global indices) of a chunk starting at ``start`` (no
    chunk: the indices themselves)."""
    got = [pos[lo:hi] if chunk is None else chunk[pos[lo:hi] - start]
           for chunk, pos, lo, hi, start in zip(*[iter(parts)] * 5)]
    return np.concatenate(got) if got else np.zeros((0,) + tuple(tail), dtype=dtype)


def _put_pieces(old, pos, start, *parts):
    """A chunk of the state (starting at ``start``) with its samples at ``pos`` (global) replaced
    by the pieces ``(new, lo, hi)`` (flat, three arguments each) of the round's shares, in order."""
    out = np.array(old, copy=True)
    if len(pos):
        out[pos - start] = np.concatenate([new[lo:hi] for new, lo, hi in zip(*[iter(parts)] * 3)])
    return out


def _running_at(done, steps, cap, block_info=None):
    """The global indices of a chunk's samples still running, as many as the driver counted."""
    at = np.flatnonzero((done == 0) & (steps < cap)) + _start_of(block_info)
    if len(at) != block_info[None]["chunk-shape"][0]:
        raise RuntimeError(f"eagle run_until_done: a chunk of the state holds {len(at)} running samples where "
                           f"the driver counted {block_info[None]['chunk-shape'][0]}: its state changed under it")
    return at


def _row_partials(values, op):
    return row_partials(op, values)


class DaskState:
    """The state of a run with dask planes, on the cluster of ``structure``."""

    def __init__(self, structure, plan, planes):
        import dask.array as da
        self.da = da
        self.structure, self.kernel = structure, plan.plugin.name
        self.client = structure.get_client(self.kernel)
        first = next(v for v in planes.values() if is_dask(v))
        self.chunks = first.chunks[0]
        self.parts = max(len(structure.ranks(gpus=False)), 1)
        self._pos = self._starts = self._shares = self._gathers = self._puts = None

    def rounds_on(self, structure):
        """``structure`` with no joining of chunks into blocks: a round's chunks are its shares."""
        return structure.on(structure.client, workers=structure.workers, progress=structure.progress,
                            timeout=structure.timeout, min_block=1, stall_timeout=structure.stall_timeout)

    # -- the state's planes --------------------------------------------------------------
    def check_in(self, k, name, v):
        """A plane as a dask array chunked as the state (numpy planes cut so)."""
        if not isinstance(v, self.da.Array):
            if type(v) is not np.ndarray:
                raise TypeError(f"plane {name!r} of kernel {k!r} is a {type(v).__name__}: run_until_done on "
                                "DaskPartition takes dask arrays and numpy planes")
            return self.da.from_array(v, chunks=(self.chunks,) + v.shape[1:])
        return v if v.chunks[0] == self.chunks else v.rechunk({0: self.chunks})

    def plane(self, k, name, v):
        v = self.check_in(k, name, v)
        return v.astype(np.float64) if v.dtype != np.float64 else v

    def full(self, n, width, value):
        shape = (n,) if width is None else (n, width)
        return self.da.full(shape, value, dtype=np.float64, chunks=(self.chunks,) + shape[1:])

    # -- a round -------------------------------------------------------------------------
    def begin_round(self, idx, done, steps, cap):
        """The round's samples found on the cluster, chunk by chunk, from the state itself: the
        driver sends no index (it gives each chunk's count, which the chunk's task checks); and
        the round's cut, once: its shares (``len(idx)`` evenly over the workers) and which pieces
        of the chunks each share reads (``self._gathers``) and of the shares each chunk takes
        back (``self._puts``)."""
        self._starts = _edges(self.chunks)
        sizes = tuple(int(s) for s in np.diff(np.searchsorted(idx, self._starts)))
        self._pos = self.da.map_blocks(_running_at, done, steps, cap, dtype=np.int64, chunks=(sizes,))
        share = max(math.ceil(len(idx) / self.parts), 1)
        shares = np.array([*range(0, len(idx), share), len(idx)] if len(idx) else [0, 0], dtype=np.int64)
        self._shares = tuple(int(c) for c in np.diff(shares))
        self._gathers, self._puts = _pieces(shares, _edges(sizes)), _pieces(_edges(sizes), shares)

    def take(self, v, idx, origin=False):
        """Samples ``idx`` of ``v`` (``origin``: ``idx`` itself) in shares cut evenly over the workers:
        one task per share, reading the pieces of the chunks it covers."""
        from dask.base import tokenize
        pos, tail, starts = self._pos, (() if origin else v.shape[1:]), self._starts
        name = f"eagle-until-take-{tokenize(None if origin else v.name, pos.name, self._shares)}"
        dtype = np.int64 if origin else v.dtype
        layer = {}
        for k, row in enumerate(self._gathers):
            parts = [x for j, lo, hi in row
                     for x in (None if origin else (v.name, j, *(0,) * len(tail)), (pos.name, j), lo, hi, int(starts[j]))]
            layer[(name, k, *(0,) * len(tail))] = (_gather, tail, dtype, *parts)
        deps = [pos] if origin else [v, pos]
        return _array(name, layer, deps, (self._shares,) + tuple((w,) for w in tail), dtype)

    def put(self, v, idx, new):
        """``v`` with samples ``idx`` replaced by ``new`` (chunked as the round's shares): one task
        per chunk of ``v``, taking the pieces of the shares its running samples came in."""
        from dask.base import tokenize
        pos, zeros = self._pos, (0,) * (v.ndim - 1)
        if new.chunks[0] != self._shares:
            new = new.rechunk({0: self._shares})
        name = f"eagle-until-put-{tokenize(v.name, pos.name, new.name)}"
        layer = {}
        for j, row in enumerate(self._puts):
            parts = [x for k, lo, hi in row for x in ((new.name, k, *zeros), lo, hi)]
            layer[(name, j, *zeros)] = (_put_pieces, (v.name, j, *zeros), (pos.name, j), int(self._starts[j]), *parts)
        return _array(name, layer, [v, pos, new], v.chunks, v.dtype)

    def settle(self, dicts):
        """Every array of ``dicts`` persisted on the workers (one graph)."""
        names = [(i, n) for i, d in enumerate(dicts) for n in d]
        done = self.client.persist([dicts[i][n] for i, n in names])
        out = tuple({} for _ in dicts)
        for (i, n), v in zip(names, done):
            out[i][n] = v
        return out

    def flags(self, values):
        """``values`` computed in the driver, waited for within the run's bounds."""
        from distributed import wait
        futures = self.client.compute(list(values))
        try:
            return self._wait(futures, wait)
        except BaseException:
            self.client.cancel(futures)
            raise

    def _wait(self, futures, wait):
        without = None
        while True:
            try:
                wait(futures, timeout=POLL)
                return [np.asarray(v) for v in self.client.gather(futures)]
            except TimeoutError:
                pass
            if any(w.get("status") == "running" for w in scheduler_workers(self.client).values()):
                without = None
            elif without is None:
                without = time.monotonic()
            elif time.monotonic() - without > self.structure.timeout:
                raise TimeoutError(f"DaskPartition: run_until_done of kernel {self.kernel!r} found no running "
                                   f"worker for {self.structure.timeout:g} s (every worker gone or paused, for "
                                   "memory?); the state of the run is lost")

    # -- the result ----------------------------------------------------------------------
    def status(self, done):
        return self.client.persist(self.da.where(done != 0, FINISHED, CAPPED).astype(np.int8))

    def steps(self, steps):
        return self.client.persist(steps.astype(np.int64))

    def cell(self, op, contributions):
        """A 0-d dask array: the contributions folded in sample order, as one process folds."""
        import dask
        whole = tuple(ROW * math.ceil(c / ROW) for c in contributions.chunks[0])
        rows = contributions.rechunk({0: _cover(whole, contributions.shape[0])})
        partials = rows.map_blocks(_row_partials, op, chunks=(tuple(-(-c // ROW) for c in rows.chunks[0]), (2,)),
                                   new_axis=1, dtype=np.float64)
        return self.da.from_delayed(dask.delayed(fold)(op, partials), shape=(), dtype=np.float64)


def _cover(sizes, n):
    """``sizes`` cut to sum to ``n`` (the last one shortened, empty ones dropped)."""
    out, left = [], n
    for s in sizes:
        if left <= 0:
            break
        out.append(min(s, left))
        left -= out[-1]
    return tuple(out) or (0,)
