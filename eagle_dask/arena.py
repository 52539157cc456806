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
* ``close_arena`` retires the arena now; interpreter exit unlinks it (``eagle_dask.shm``'s exit hook).
* ``EAGLE_DASK_ARENA=0`` turns the arena off: every run makes fresh segments.
"""
from __future__ import annotations

import os
import secrets
import threading

import numpy as np

from .shm import SHM_DIR, Region, _create, _unlink

#: every region starts at a multiple of this (a cache line; a 512-bit vector)
ALIGN = 64
#: the smallest arena made (bytes)
MIN_SIZE = 1 << 20

_LOCK = threading.Lock()
_CURRENT = None


def enabled() -> bool:
    """Whether runs carve their planes from the arena (``EAGLE_DASK_ARENA``, default on)."""
    return os.environ.get("EAGLE_DASK_ARENA", "1").strip().lower() not in ("0", "off", "no", "false")


def aligned(nbytes: int) -> int:
    """``nbytes`` rounded up to a multiple of ``ALIGN`` (at least ``ALIGN``)."""
    return max(-(-int(nbytes) // ALIGN) * ALIGN, ALIGN)


class Arena:
    """One segment and its free spans (``free``: sorted ``[offset, size]``); ``users``: the runs
    holding regions in it; ``retired``: unlinked once ``users`` falls to 0."""

    def __init__(self, size):
        self.seg, self.buf = _create(size)
        self.path = os.path.join(SHM_DIR, self.seg.name)
        self.size = self.seg.size
        self.free = [[0, self.size]]
        self.users = 0
        self.retired = False

    def carve(self, sizes):
        """Offsets of regions of ``sizes`` (each ``aligned``), all or none (None: they do not fit)."""
        free = [list(s) for s in self.free]
        offsets = []
        for size in map(aligned, sizes):
            span = next((s for s in free if s[1] >= size), None)
            if span is None:
                return None
            offsets.append(span[0])
            span[0] += size
            span[1] -= size
        self.free = [s for s in free if s[1] > 0]
        return offsets

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
    """Called with ``_LOCK`` held: ``arena`` no longer carves; unlinked when no run holds it."""
    global _CURRENT
    arena.retired = True
    if _CURRENT is arena:
        _CURRENT = None
    if arena.users == 0:
        _unlink(arena.path)


def reserve(sizes):
    """(the arena, offsets) of a run's regions of ``sizes``, a new larger arena when they do not fit."""
    global _CURRENT
    with _LOCK:
        arena = _CURRENT
        offsets = arena.carve(sizes) if arena is not None else None
        if offsets is None:
            need = sum(map(aligned, sizes))
            size = max(MIN_SIZE, 2 * arena.size if arena is not None else 0)
            while size < need:
                size *= 2
            new = Arena(size)                       # raises OSError when /dev/shm cannot hold it
            if arena is not None:
                _retire(arena)
            _CURRENT = arena = new
            offsets = arena.carve(sizes)
        arena.users += 1
        return arena, offsets


def release(arena, spans, clean):
    """A run's regions ``spans`` given back (``clean``), or its arena retired (see the docstring)."""
    with _LOCK:
        arena.users -= 1
        if clean and not arena.retired:
            arena.give_back(spans)
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
    (a region of its own, a random token written there) -- a block checks the token before it
    touches the run's regions, and ``close`` clears it first, so a block of this run that the
    scheduler starts again after the run ended (its finished result lost with a worker) refuses
    instead of writing into regions a later run holds."""

    def __init__(self, sizes):
        self.sizes = list(sizes) + [8]
        self.arena, self.offsets = reserve(self.sizes)
        token = secrets.randbits(63) | 1
        self.token_view = self.arena.view(self.offsets[-1], np.int64, (1,))
        self.token_view[0] = token
        self.lease = (Region(self.arena.seg, self.offsets[-1], aligned(8)), token)
        self.taken = 0
        self.closed = False

    def put(self, shape, dtype, data=None):
        dtype = np.dtype(dtype)
        at, size = self.offsets[self.taken], self.sizes[self.taken]
        self.taken += 1
        view = self.arena.view(at, dtype, tuple(shape))
        if data is not None:
            np.copyto(view, data)
        return Region(self.arena.seg, at, aligned(size)), view

    def close(self, clean=False):
        if not self.closed:
            self.closed = True
            self.token_view[0] = 0
            release(self.arena, list(zip(self.offsets, self.sizes)), clean)


def in_use() -> int:
    """Bytes of the current arena held by runs (0 when none, or no arena)."""
    with _LOCK:
        return 0 if _CURRENT is None else _CURRENT.size - sum(size for _, size in _CURRENT.free)
