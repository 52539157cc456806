"""The driver's side of one numpy-mode run's planes in shared memory (``eagle_dask.shm``).

The planes are carved from the driver's arena (``eagle_dask.arena``) or, with
``EAGLE_DASK_ARENA=0``, put in fresh segments of their own (``eagle_dask.shm.Segments``); the
workers map either the same way, checked.  A fresh ``Out`` is the driver's own array: the shares
written in shared memory are copied into it when the run ends (its region is the next run's, or a
stale try of a block may still write there), and blocks sent as messages write into it.
With ``place_later`` (a numpy-mode run) the arena's regions are reserved when the first block is
sent but the caller's planes copied in only by ``place``, once every block is submitted: the
blocks wait for it (``eagle_dask.region_locks.wait_placed``).

A ``Mutable`` or a supplied ``Out`` must start a block run again from its initial values.  With
fresh segments they are staged (a second segment holds them; the worker copies its share out).
In the arena they have one region, written in place, and the caller's array -- untouched until
the run ends -- is the original: a block records that it started (one byte per run, at its first
sample); started again (the scheduler reran it after its worker was lost) it refuses
(``StartedBefore``).  Every arena run keeps these flags, Mutables or not: a block the scheduler
runs again after it finished (its worker declared dead while the run goes on) would otherwise
zero and rewrite its share of a fresh ``Out`` while the driver copies it out; it refuses instead,
and the driver, which has its result, does not look at it again.  The same flag tells the driver
when a block is done (``done``), before its task's report has come through the scheduler.

Every block the driver sends again after a try in shared memory -- refused, or taken from a
silent, dead or lost worker -- takes the messages (``eagle_dask.eager``): the earlier try may
still be running and writing into its share of the regions (a stopped host that goes on), so the
rerun reads its share from the caller's untouched planes and writes its outputs into the
driver's; the regions of that share are not read again, and the run retires the arena.
"""
from __future__ import annotations

import numpy as np

from eagle.memory_thread import copy_split
from eagle.rows import n_rows, row_span

from . import arena
from .shm import DONE, LocalWorkers, Segments, SharedPlanes, host_id


class SharedRun:
    """The driver's side of one run's planes in shared memory: which workers share this host
    (``LocalWorkers``, asked for ``addresses``), the planes placed at the first block sent to
    one of them (``for_block``); ``finish`` copies the written shares back into the caller's
    planes; ``close`` gives the arena's regions back, or unlinks every fresh segment."""

    def __init__(self, client, addresses, bound, sliced, whole, fresh, outputs, sliceable, cells=(),
                 place_later=False, timeout=60.0):
        self.client = client
        self.place_later, self.timeout = place_later, timeout
        self.pending = []            # (view, data): the arena's copies ``place`` makes
        self.local = LocalWorkers.of(client, sorted(set(addresses)))
        self.bound, self.sliced, self.whole, self.fresh = bound, sliced, whole, fresh
        self.outputs, self.sliceable, self.cells = outputs, sliceable, tuple(cells)
        self.segments = None
        self.planes = None
        self.failed = False          # /dev/shm could not hold the planes: every block takes the messages
        self.rows = {}
        self.views = {}              # the planes the blocks write, copied into the caller's by ``finish``
        self.row_views = {}
        self.clean = False           # the run returned and no block of it ran twice (``finish``)
        self.started = None          # (Region, n) of the blocks' started flags, (Region, view) on the driver
        self.host = host_id()

    def _specs(self):
        """What the run places, in order: (what, name, shape, dtype, data)."""
        specs, staged = [], not arena.enabled()
        for name, v in {**self.sliced, **self.whole}.items():
            v = np.asarray(v)
            if name in self.outputs and not staged:
                specs.append(("inout", name, v.shape, v.dtype, v))      # one region, run in place
                continue
            specs.append(("in", name, v.shape, v.dtype, v))
            if name in self.outputs:
                specs.append(("out", name, v.shape, v.dtype, None))     # Mutables and supplied Outs: staged
        if not staged:                  # every arena run: a block writes its share on its first start only
            n = max(self.bound.n, 1)
            specs.append(("started", "", (n,), np.dtype(np.uint8), np.zeros(n, np.uint8)))
        for name in self.fresh:
            target = self.bound.values[name]
            specs.append(("fresh", name, target.shape, target.dtype, None))
        total = n_rows(self.bound.n)
        specs += [("rows", cell, (total, 2), np.dtype(np.float64), None) for cell in self.cells]
        return specs

    def _build(self):
        specs = self._specs()
        if arena.enabled():
            self.segments = arena.ArenaRun([int(np.prod(s, dtype=np.int64)) * np.dtype(d).itemsize
                                            for _, _, s, d, _ in specs], self.timeout)
        else:
            self.segments = Segments()
        planes, total, copies = {}, n_rows(self.bound.n), []
        for what, name, shape, dtype, data in specs:
            ref, view = self.segments.put(shape, dtype)
            if data is not None:
                copies.append((view, data))
            if what == "in":
                planes[name] = (ref, None, np.dtype(dtype).str, shape, name in self.sliced, False)
            elif what == "out":
                planes[name] = planes[name][:1] + (ref,) + planes[name][2:]
                self.views[name] = view
            elif what == "inout":
                planes[name] = (None, ref, np.dtype(dtype).str, shape, name in self.sliced, False)
                self.views[name] = view
            elif what == "started":
                self.started = ((ref, shape[0]), view)
            elif what == "fresh":
                # the result stays the driver's own array (bound's): blocks sent as messages land
                # there, shared-memory blocks' shares are copied in (``finish``); never a region a
                # stale try of a block could still write into
                self.views[name] = view
                planes[name] = (None, ref, np.dtype(dtype).str, shape, True, True)
            else:
                self.row_views[name] = view
                self.rows[name] = (ref, total)
        self.planes = planes
        self.pending = copies
        if not (self.place_later and isinstance(self.segments, arena.ArenaRun)):
            self.place()

    def place(self):
        """The caller's planes copied into the run's regions; in the arena, the blocks waiting for
        them let go (``ArenaRun.placed``).  With ``place_later`` the driver calls it once it has
        submitted the blocks, which wait for it: the copy and their way to the workers overlap."""
        self.place_later = False     # planes made after this (a block sent later) are placed at once
        copies, self.pending = self.pending, []
        copy_split(copies)                  # on two threads: the blocks are waiting
        if isinstance(self.segments, arena.ArenaRun):
            self.segments.placed()

    def for_block(self, address, remote=False):
        """The ``SharedPlanes`` of a block sent to ``address`` (planes placed at the first call),
        or None when it takes the messages: ``remote`` (it ran on another host before), a worker
        of another host, or a ``/dev/shm`` that cannot hold the planes."""
        if remote:
            return None
        if address not in self.local:
            self.local |= LocalWorkers.of(self.client, [address])      # a worker that joined since
            if address not in self.local:
                return None
        if self.planes is None:
            try:
                self._build()
            except OSError:
                self.close()
                self.planes, self.failed = {}, True
                return None
        if self.failed:
            return None
        planes = {k: (a, b, d, s, sl and k in self.sliceable, f) for k, (a, b, d, s, sl, f) in self.planes.items()}
        return SharedPlanes(self.host, planes, self.rows, self.started and self.started[0],
                            getattr(self.segments, "lease", None))

    def tells_done(self) -> bool:
        """Whether its blocks in shared memory say when they are done (``done``): arena runs."""
        return self.started is not None

    def done(self, start) -> bool:
        """Whether the block of samples starting at ``start`` is done in the arena: its flag says
        ``DONE`` and it has dropped its lock on the flag (asked without waiting), so everything it
        wrote is seen here (the lock's hand-over orders it, as ``region_locks`` says).  Always
        False with fresh segments: their blocks are finished when their tasks are."""
        if self.started is None or self.started[1][start] != DONE:
            return False
        (ref, _), _ = self.started
        return self.segments.unlocked(ref.offset + start, 1)

    def rows_of(self, start, stop):
        """The row partials a finished block of samples ``[start, stop)`` wrote (copies)."""
        r0, r1 = row_span(start, stop)
        return {cell: view[r0:r1].copy() for cell, view in self.row_views.items()}

    def finish(self, parts, twice=False):
        """Copy the shares ``parts`` ([(start, stop)]) written in shared memory into the caller's
        planes and the fresh ``Out``s.  ``twice``: a block of the run ran again (``close`` then
        retires the arena)."""
        copy_split((self.bound.values[name][a:b], view[a:b])   # its pages asked for meanwhile (``EagerRun``)
                   for name, view in self.views.items() for a, b in parts)
        self.clean = not twice

    def close(self):
        """The arena's regions given back (the run finished, no block ran twice), else the arena
        retired; fresh segments unlinked."""
        if isinstance(self.segments, arena.ArenaRun):
            self.segments.close(self.clean)
        elif self.segments is not None:
            self.segments.close()
