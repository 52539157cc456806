"""Byte-range locks on the arena's segment: which regions a block of some run still writes.

A block of a run writes into the run's regions of the arena (``eagle_dask.arena``).  The
scheduler may run a block again while its run goes on (its worker was declared dead after the
block had finished): the driver does not wait for that copy, and it may still be writing when
the run returns -- into regions the next run is given.  So a block holds a *shared* lock on the
byte ranges of every region it writes, from before it reads the run's lease until it is done,
and the driver, when the run ends, gives back only the regions no one holds a lock on; the
others are quarantined and taken back once free (``unlocked``).

The same locks tell a block when its run's planes are in place: the driver submits a run's
blocks first and copies the planes in while they travel, holding a write lock on the run's
lease slot (``placing``) until the copy is done (``placed``); a block waits for a shared lock
on that slot (``wait_placed``) before it reads a byte.  The lock's hand-over goes through the
kernel's lock list under its lock, so the driver's writes before ``placed`` are seen by the
block after ``wait_placed``, on any processor.

The locks are Linux open-file-description locks (``F_OFD_SETLK``): they belong to the file
description a block opened for itself, so they tell apart two blocks in threads of one worker
(a per-process ``lockf`` lock would not), and they go when that description is closed -- by the
block, or by the kernel when its process dies.  Nothing here waits but ``wait_placed``, polling
within its bound: a request that conflicts fails at once.
"""
from __future__ import annotations

import errno
import fcntl
import os
import struct
import time

#: ``struct flock`` on Linux: l_type, l_whence, l_start, l_len, l_pid (0 for OFD locks), padding
_FLOCK = "hhqqi4x"


def _request(fd, kind, start, length) -> bool:
    """One non-blocking OFD lock request on ``[start, start + length)``; False when another open
    file description holds a conflicting lock there."""
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack(_FLOCK, kind, os.SEEK_SET, start, length, 0))
    except OSError as e:
        if e.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


def merged(spans):
    """``[(offset, size)]`` sorted, adjacent spans joined (one lock request each)."""
    out = []
    for off, size in sorted((int(o), int(s)) for o, s in spans if s > 0):
        if out and out[-1][0] + out[-1][1] == off:
            out[-1][1] += size
        elif out and out[-1][0] + out[-1][1] > off:
            out[-1][1] = max(out[-1][1], off + size - out[-1][0])
        else:
            out.append([off, size])
    return [tuple(s) for s in out]


def hold(fd, spans) -> bool:
    """The block's side: shared locks on ``spans`` through its own ``fd`` (opened for reading);
    False when the driver is taking one of them back right now (its run has ended).  Closing
    ``fd`` drops them all."""
    return all(_request(fd, fcntl.F_RDLCK, off, size) for off, size in merged(spans))


def unlocked(fd, spans):
    """The driver's side: (spans no one holds a lock on, spans still locked) of ``spans``, asked
    through the driver's own ``fd`` (opened for writing) by taking a write lock and dropping it at
    once -- never waiting.  A write lock request goes through the kernel's lock list of the file
    under its lock, in one order with every block's shared lock request (see
    ``ArenaRun.close``)."""
    free, held = [], []
    for off, size in merged(spans):
        if _request(fd, fcntl.F_WRLCK, off, size):
            _request(fd, fcntl.F_UNLCK, off, size)
            free += [s for s in spans if off <= s[0] < off + size]
            continue
        for s in (s for s in spans if off <= s[0] < off + size):
            if _request(fd, fcntl.F_WRLCK, s[0], s[1]):
                _request(fd, fcntl.F_UNLCK, s[0], s[1])
                free.append(s)
            else:
                held.append(s)
    return free, held


def placing(fd, start, length) -> bool:
    """The driver's side: a write lock on ``[start, start + length)`` (a run's lease slot) while
    it copies the run's planes in; False when a block of an earlier run holds it right now."""
    return _request(fd, fcntl.F_WRLCK, start, length)


def placed(fd, start, length):
    """The driver's side: the planes are in place, the lock of ``placing`` dropped."""
    _request(fd, fcntl.F_UNLCK, start, length)


def wait_placed(fd, start, length, current, bound) -> bool:
    """The block's side: wait until the driver's write lock on ``[start, start + length)`` is gone
    (a shared lock taken there through ``fd``, kept with the block's other locks until it closes
    ``fd``: the slot is not handed to a later run meanwhile); False as soon as ``current()`` says
    the run has ended.  Raises ``TimeoutError`` after ``bound`` seconds (the driver stopped while
    placing)."""
    deadline, pause = time.monotonic() + bound, 50e-6
    while not _request(fd, fcntl.F_RDLCK, start, length):
        if not current():
            return False
        if time.monotonic() > deadline:
            raise TimeoutError(f"the driver did not finish placing the run's planes within {bound:g} s "
                               "(its process stopped or is swapping?); the block reads nothing")
        time.sleep(pause)
        pause = min(2 * pause, 1e-3)
    return current()
