"""The driver's arena: one shared-memory segment per driver process, a run's planes carved from it.

Fresh segments per run (``eagle_dask.shm.Segments``) cost their reservation (``posix_fallocate``)
and, in every process that touches them, the first-touch page faults -- each run anew.  The arena
is one segment made the same way (``/dev/shm/eagle-<pid>-<token>``, ``O_CREAT | O_EXCL``, mode
0600, reserved) and kept across runs: a run carves its planes from it (``ArenaRun``: offsets
aligned to ``ALIGN`` bytes, first fit) and gives them back when it ends, and every worker of the
host keeps it mapped (``eagle_dask.shm.arena_map``, checked like any segment when its id is new),
so a second run touches pages every process has already faulted in.

* A run that does not fit makes a new, larger arena (at least twice the old one); the old one is
  *retired*: unlinked once no run holds regions in it.  Workers drop their mapping of a replaced
  arena when they are given the new one's id, or when its name is gone.
* A run that did not end cleanly -- it raised (``KeyboardInterrupt`` included), or one of its
  blocks ran again (a dead, silent or moved worker) -- retires the arena at once instead of giving
  its regions back: a block of it may still be running somewhere and write into its regions, which
  must never be a later run's.
* A block the scheduler ran again while its run went on (its worker declared dead after it had
  finished) may still be writing when the run returns, unknown to the driver.  Each block holds
  shared locks on the regions it writes while it writes (``eagle_dask.region_locks``); a run
  that ends gives back only the regions no one holds a lock on, and *quarantines* the others:
  each later ``reserve`` asks again, without waiting, and takes them back once free.  The run
  itself returns at once.
* Each run's lease is a slot of the arena's first ``LEASE_BYTES`` (never a plane's region): a
  token unique in this process, which the run clears when it ends; a block reads it (after it
  took its locks) and refuses when it is not its run's (``eagle_dask.shm.RunEnded``).
* ``close_arena`` retires the arena now; interpreter exit unlinks it (``eagle_dask.shm``'s exit hook).
* ``EAGLE_DASK_ARENA=0`` turns the arena off: every run makes fresh segments.
"""
from __future__ import annotations

import itertools
import os
import threading

import numpy as np

from . import region_locks
from .shm import SHM_DIR, Region, _create, _open_checked, _unlink

#: every region starts at a multiple of this (a cache line; a 512-bit vector)
ALIGN = 64
#: the smallest arena made (bytes)
MIN_SIZE = 1 << 20
#: the arena's first bytes: the runs' leases, 8 bytes each, never a plane's region
LEASE_BYTES = 4096

_LOCK = threading.Lock()
_CURRENT = None
_TOKENS = itertools.count(1)     # a run's lease: never the same twice in this process


def enabled() -> bool:
    """Whether runs carve their planes from the arena (``EAGLE_DASK_ARENA``, default on)."""
    return os.environ.get("EAGLE_DASK_ARENA", "1").strip().lower() not in ("0", "off", "no", "false")


def aligned(nbytes: int) -> int:
    """``nbytes`` rounded up to a multiple of ``ALIGN`` (at least ``ALIGN``)."""
    return max(-(-int(nbytes) // ALIGN) * ALIGN, ALIGN)


class Arena:
    """One segment and its free spans (``free``: sorted ``[offset, size]``); ``held``: spans of
    ended runs a block still locks (quarantined); ``slots``: the free lease slots; ``users``: the
    runs holding regions in it; ``retired``: unlinked once ``users`` falls to 0.  ``fd``: the
    driver's own open file description of it, for the lock checks."""

    def __init__(self, size):
        self.seg, self.buf = _create(size)
        self.path = os.path.join(SHM_DIR, self.seg.name)
        self.fd = _open_checked(self.seg, os.O_RDWR)
        self.size = self.seg.size
        self.free = [[LEASE_BYTES, self.size - LEASE_BYTES]]
        self.held = []
        self.slots = list(range(LEASE_BYTES // 8 - 1, -1, -1))
        self.users = 0
        self.retired = False

    def carve(self, sizes):
        """(offsets of regions of ``sizes``, each ``aligned``, a lease slot), all or none (None:
        they do not fit, or no slot is free)."""
        free = [list(s) for s in self.free]
        offsets = []
        for size in map(aligned, sizes):
            span = next((s for s in free if s[1] >= size), None)
            if span is None:
                return None
            offsets.append(span[0])
            span[0] += size
            span[1] -= size
        slot = self._slot()
        if slot is None:
            return None
        self.free = [s for s in free if s[1] > 0]
        return offsets, slot

    def _slot(self):
        """A free lease slot, write-locked by the driver until its run's planes are placed
        (``region_locks.placing``); one a block of an earlier run checks right now is skipped."""
        for i in range(len(self.slots) - 1, -1, -1):
            if region_locks.placing(self.fd, 8 * self.slots[i], 8):
                return self.slots.pop(i)
        return None

    def settle(self, spans):
        """The spans ``[(offset, aligned size)]`` of an ended run: those no block locks given back,
        the others quarantined; the quarantined ones asked again, given back once free."""
        free, held = region_locks.unlocked(self.fd, [*self.held, *spans])
        self.held = held
        self.give_back(free)

    def give_back(self, spans):
        """Spans ``[(offset, size)]`` free again, merged with their neighbours."""
        merged = []
        for off, size in sorted([*map(tuple, self.free), *((o, aligned(s)) for o, s in spans)]):
            if merged and merged[-1][0] + merged[-1][1] == off:
                merged[-1][1] += size
            else:
                merged.append([off, size])
        self.free = merged

    def view(self, offset, dtype, shape):
        count = int(np.prod(shape, dtype=np.int64))
        return np.frombuffer(self.buf, dtype=dtype, count=count, offset=offset).reshape(shape)


def _retire(arena):
    """Called with ``_LOCK`` held: ``arena`` no longer carves; unlinked when no run holds it
    (a block still running keeps its mapping; no run is ever given its regions again)."""
    global _CURRENT
    arena.retired = True
    if _CURRENT is arena:
        _CURRENT = None
    if arena.users == 0:
        _unlink(arena.path)
        if arena.fd is not None:
            os.close(arena.fd)
            arena.fd = None


def reserve(sizes):
    """(the arena, offsets of a run's regions of ``sizes``, its lease slot), a new larger arena
    when they do not fit; quarantined regions (``Arena.settle``) asked again first."""
    global _CURRENT
    with _LOCK:
        arena = _CURRENT
        if arena is not None and arena.held:
            arena.settle([])
        got = arena.carve(sizes) if arena is not None else None
        if got is None:
            need = LEASE_BYTES + sum(map(aligned, sizes))
            size = max(MIN_SIZE, 2 * arena.size if arena is not None else 0)
            while size < need:
                size *= 2
            new = Arena(size)                       # raises OSError when /dev/shm cannot hold it
            if arena is not None:
                _retire(arena)
            _CURRENT = arena = new
            got = arena.carve(sizes)
        arena.users += 1
        return (arena, *got)


def release(arena, spans, clean, slot=None):
    """A run's regions ``spans`` ``[(offset, size)]`` given back (``clean``) but for those a block
    still locks (quarantined), or its arena retired (see the docstring); its lease ``slot`` free."""
    with _LOCK:
        arena.users -= 1
        if slot is not None:
            arena.slots.append(slot)
        if clean and not arena.retired:
            arena.settle([(o, aligned(s)) for o, s in spans])
        else:
            _retire(arena)


def close_arena():
    """Retire this process's arena now (unlinked at once when no run holds it)."""
    with _LOCK:
        if _CURRENT is not None:
            _retire(_CURRENT)


def current():
    """The arena runs carve from now (its ``SegmentId``), or None."""
    with _LOCK:
        return None if _CURRENT is None else _CURRENT.seg


class ArenaRun:
    """One run's regions in the arena, reserved at once: ``put`` hands them out in the order of
    ``sizes`` (a ``Region`` and the driver's view); ``close(clean)`` gives them back.  ``lease``:
    (the run's slot, its token, the seconds a block waits for the planes) -- a block takes its
    locks, waits until the planes are placed (the slot stays write-locked by the driver until
    ``placed``), then checks the token before it touches the run's regions; ``close`` clears the
    token, then asks which regions are locked."""

    def __init__(self, sizes, timeout=60.0):
        self.sizes = list(sizes)
        self.arena, self.offsets, slot = reserve(self.sizes)
        self.slot = slot
        token = next(_TOKENS)
        self.token_view = self.arena.view(8 * slot, np.int64, (1,))
        self.token_view[0] = token
        self.lease = (Region(self.arena.seg, 8 * slot, 8), token, float(timeout))
        self.taken = 0
        self.closed = False
        self.placing = True         # the slot write-locked until ``placed``: blocks wait to read

    def placed(self):
        """The run's planes are in place: blocks waiting for them go on (``region_locks``)."""
        if self.placing:
            self.placing = False
            region_locks.placed(self.arena.fd, 8 * self.slot, 8)

    def unlocked(self, offset, size) -> bool:
        """Whether no block holds a lock on the arena's bytes ``[offset, offset + size)`` now
        (asked through the driver's descriptor, never waiting: ``region_locks.unlocked``)."""
        free, _ = region_locks.unlocked(self.arena.fd, [(offset, size)])
        return bool(free)

    def put(self, shape, dtype, data=None):
        dtype = np.dtype(dtype)
        at, size = self.offsets[self.taken], self.sizes[self.taken]
        self.taken += 1
        view = self.arena.view(at, dtype, tuple(shape))
        if data is not None:
            np.copyto(view, data)
        return Region(self.arena.seg, at, aligned(size)), view

    def close(self, clean=False):
        """The run's end.  Order matters, on both sides: a block takes its shared locks *then*
        reads the token (``eagle_dask.shm.SharedPlanes.open``); here the token is cleared *then*
        each region's lock is asked for (``release``).  Both lock requests go through the kernel's
        lock list of the segment under its lock, so one comes first: if the block's, the driver
        sees its lock and quarantines the region (held until the block closes its descriptor);
        if the driver's, the cleared token was stored before it, and the block, reading it after
        its own request, finds it cleared and refuses before writing.  A block that is done
        dropped its locks after its last write.  So no region is given back while a block that
        passed the check can still write into it, and the run does not wait for any block.  A block
        still waiting for the planes (the run raised before ``placed``) sees the token cleared and
        refuses; the slot's write lock goes with the driver's descriptor when the arena is retired,
        or is taken again by the next run of the slot."""
        if not self.closed:
            self.closed = True
            self.token_view[0] = 0
            release(self.arena, list(zip(self.offsets, self.sizes)), clean, self.slot)


def in_use() -> int:
    """Bytes of the current arena held by runs (0 when none, or no arena)."""
    with _LOCK:
        return 0 if _CURRENT is None else _CURRENT.size - LEASE_BYTES - sum(size for _, size in _CURRENT.free)


def quarantined() -> list:
    """The current arena's regions ``[(offset, size)]`` of ended runs that a block still locks."""
    with _LOCK:
        return [] if _CURRENT is None else sorted(_CURRENT.held)
