"""Planes through shared memory between the driver and the workers on its host.

A numpy-mode run (``eagle_dask.eager``) gives a worker on the driver's host its share of every
plane through POSIX shared memory instead of the task's messages:

* the driver creates one segment per input plane (``/dev/shm/eagle-<pid>-<token>``, opened
  with ``O_CREAT | O_EXCL`` and mode 0600, its pages reserved with ``posix_fallocate`` so a
  full ``/dev/shm`` is an error at creation, never a ``SIGBUS``) and copies the plane in once;
* an output plane has a segment of its own: a fresh ``Out`` *is* the run's result (the
  driver's plane is a view of it); a ``Mutable`` or a supplied ``Out`` keeps its initial
  values in an input segment, the worker copies its share into the output segment and runs
  there, and the driver copies the shares back into the caller's plane once -- so a block run
  again (its worker died) starts from the initial values, with the same bits;
* a task carries only a ``SharedPlanes``: the driver's host id and, per plane, the segments
  (``SegmentId``: name, device and inode, size and owner, as the driver made them), dtypes and
  shapes; the worker maps the segments, reads in place and writes its output share directly
  into the driver's segment;
* a cell's row partials go the same way: one segment per cell holds the run's rows (``ROW``
  samples each), a block writes its rows there before it returns, and the driver reads them
  once the block's task has finished -- so a block on the driver's host is never fetched from
  its worker (a round trip per block).

That is the path of fresh segments (``EAGLE_DASK_ARENA=0``).  By default the planes are regions
of the driver's arena instead (``eagle_dask.arena``: one segment kept across runs): a task
carries ``Region``s (the arena's ``SegmentId``, an offset and a size); a worker keeps the arena
mapped across runs (``arena_map``: opened by name and checked only when its id is new), the
fresh ``Out``s are copied out of it when the run ends, and a ``Mutable`` or a supplied ``Out``
has one region, run in place, with no staged copy: a block records at its first sample that it
started, and started again it refuses (``StartedBefore``): the driver sends it again through the
messages (``eagle_dask.shared_run``).  When its outputs and rows are written it records that it
is done, in the same byte (``MappedBlock.mark_done``), and holds a lock on that byte until it
returns: the driver takes the block for finished once it sees the flag and the lock gone, without
waiting for the task's report to come through the scheduler (``SharedRun.done``).  Before it
reads its run's lease a block opens the arena once more for itself and takes shared locks on the
regions it writes (``lock_regions``, ``eagle_dask.region_locks``; of the started flags, its own
byte), dropped when it returns (``MappedBlock.close``): the driver keeps a region still locked
when its run ends from every later run.  It then waits, within the run's timeout, until the
driver has placed the run's planes (the driver submits the blocks first and copies while they
travel: ``region_locks.wait_placed``), and only then reads the lease.

A block maps every segment it needs when it starts (``SharedPlanes.open``, all of them before
it writes a byte) and keeps those mappings until it returns: it never opens a name again.  An
open by name is ``O_NOFOLLOW`` and checked with ``fstat`` against what the driver recorded --
a regular file, the driver's owner, mode 0600, the size, the device and inode -- so a name
unlinked at the end of a run and made again by someone else (a file, a link) is refused
(``ForeignSegment``) and nothing is read or written through it.

Whether a worker is on the driver's host is decided by ``host_id`` -- the host name together
with the machine id and the boot id, never an address -- asked once per worker and client
(``LocalWorkers``).  ``EAGLE_DASK_SHM=0`` turns the path off; ``EAGLE_DASK_HOST_ID`` set on a
worker makes it count as another host (its blocks take the messages, in the same run).  A
worker that finds itself elsewhere than the driver raises ``Elsewhere``, and the run sends the
block again through the messages.

Segments are the driver's: ``Segments.close`` unlinks them when the run ends (returned,
raised, interrupted), and every segment this process still has is unlinked at interpreter
exit.  A driver killed outright runs no exit hook: the driver holds an owner's mark (a
``flock``) on each of its segments while it lives, and a driver's first segment is preceded by
a sweep that unlinks this user's segments left unmarked by a creator no longer running
(``eagle_dask.orphans``).  An unlinked segment stays mapped where it is mapped (a worker still running, the
driver's result) and its memory is freed with the last mapping.  A failed run unlinks while
its cancelled blocks may still run: those write only into their own mappings, and a block
that starts later fails closed (the name is gone: ``Elsewhere``; something else under it:
``ForeignSegment``).
"""
from __future__ import annotations

import atexit
import collections
import mmap
import errno
import functools
import os
import socket
import stat
import threading
import weakref

import numpy as np

from eagle.rows import row_span

from . import orphans, region_locks

#: where segments live (a tmpfs on Linux)
SHM_DIR = "/dev/shm"
PREFIX = "eagle-"
#: seconds the driver waits for the workers' host ids
ASK_TIMEOUT = 10.0

_LIVE = set()
#: the descriptor holding the owner's mark of each live segment (``eagle_dask.orphans``)
_MARKS = {}
_SWEPT = False
_LOCK = threading.Lock()
#: the segments this worker mapped recently (names) -- a debugging record, read with
#: ``client.run(eagle_dask.shm.opened)``
OPENED = collections.deque(maxlen=1024)


def opened():
    return list(OPENED)


def clear_opened():
    OPENED.clear()


def live() -> list:
    """The segments this process made and has not unlinked yet (paths)."""
    with _LOCK:
        return sorted(_LIVE)


class Elsewhere(RuntimeError):
    """A block given shared-memory planes ran on a worker of another host."""


class RunEnded(RuntimeError):
    """A block of a run that ended started (the scheduler ran it again): its regions of the
    arena may be a later run's, and it touches none of them."""


#: a block's flag in the run's started flags (one byte per sample, a block's at its first sample):
#: never started (0), started, its outputs and rows written
STARTED, DONE = 1, 2


class StartedBefore(RuntimeError):
    """A block whose Mutables are written in place in the arena started before (the scheduler ran
    it again after its worker was lost): the driver sends it again through the messages."""


def enabled() -> bool:
    """Whether this driver uses shared memory at all (``EAGLE_DASK_SHM``, default on)."""
    flag = os.environ.get("EAGLE_DASK_SHM", "1").strip().lower()
    return flag not in ("0", "off", "no", "false") and os.path.isdir(SHM_DIR) and os.access(SHM_DIR, os.W_OK)


def _read(path) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


@functools.lru_cache(maxsize=1)
def _machine_and_boot() -> tuple:
    """The machine id and boot id, read once per process (neither changes while it runs)."""
    machine = _read("/etc/machine-id") or _read("/var/lib/dbus/machine-id")
    return machine, _read("/proc/sys/kernel/random/boot_id")


def host_id() -> str:
    """This process's host: ``EAGLE_DASK_HOST_ID``, else the host name, machine id and boot id."""
    forced = os.environ.get("EAGLE_DASK_HOST_ID")
    if forced:
        return forced
    return "|".join((socket.gethostname(), *_machine_and_boot()))


# -- segments ----------------------------------------------------------------------------------
#: a segment as the driver made it: what a worker checks an open by name against
SegmentId = collections.namedtuple("SegmentId", ["name", "dev", "ino", "size", "uid"])


#: a plane's place in an arena (``eagle_dask.arena``): its segment, offset and bytes
Region = collections.namedtuple("Region", ["seg", "offset", "nbytes"])
#: a worker's arena mappings, kept across runs: ``{driver prefix: (SegmentId, mmap)}``
_ARENAS = {}
_ARENAS_LOCK = threading.Lock()
#: the segments this process opened by name (a debugging record; ``opened`` also counts the
#: blocks that used an arena mapped before)
OPENS = collections.deque(maxlen=1024)


class ForeignSegment(RuntimeError):
    """A segment's name leads to something else than the segment the driver made."""


def _sweep_once():
    """Before this process makes its first segment: unlink those a driver that died left
    (``eagle_dask.orphans``)."""
    global _SWEPT
    with _LOCK:
        if _SWEPT:
            return
        _SWEPT = True
    orphans.sweep(SHM_DIR, PREFIX, keep=live())


def _create(nbytes: int):
    """A new segment of ``nbytes`` (at least 1), mode 0600, its pages reserved, the owner's mark
    held on it until it is unlinked (``eagle_dask.orphans``); (SegmentId, mmap)."""
    _sweep_once()
    name = orphans.new_name(PREFIX)
    path = os.path.join(SHM_DIR, name)
    size = max(int(nbytes), 1)
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with _LOCK:
        _LIVE.add(path)
        _MARKS[path] = fd
    try:
        orphans.hold(fd)
        os.fchmod(fd, 0o600)                    # whatever the umask
        os.posix_fallocate(fd, 0, size)
        st = os.fstat(fd)
        return SegmentId(name, st.st_dev, st.st_ino, size, st.st_uid), mmap.mmap(fd, size)
    except BaseException:
        _unlink(path)
        raise


def _unlink(path):
    with _LOCK:
        _LIVE.discard(path)
        fd = _MARKS.pop(path, None)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    finally:
        if fd is not None:
            os.close(fd)                        # the owner's mark goes with it


def _view(buf, dtype, shape):
    count = int(np.prod(shape, dtype=np.int64))
    return np.frombuffer(buf, dtype=dtype, count=count).reshape(shape)


def _mismatch(st, seg):
    """Why the file ``st`` (an ``fstat``) is not segment ``seg``, or None when it is."""
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_uid != seg.uid:
        return f"is owned by uid {st.st_uid}, not by uid {seg.uid} that made it"
    if stat.S_IMODE(st.st_mode) != 0o600:
        return f"has mode {stat.S_IMODE(st.st_mode):04o}, not 0600"
    if st.st_size != seg.size:
        return f"holds {st.st_size} bytes, not {seg.size}"
    if (st.st_dev, st.st_ino) != (seg.dev, seg.ino):
        return "is another file than the segment its driver made (another inode)"
    return None


def _refused(path, why):
    return ForeignSegment(f"shared memory segment {path} {why}: refused, nothing read or written through it. Its run "
                          "ended and the name was made again (by another local user?); run again, or set "
                          "EAGLE_DASK_SHM=0 on the driver")


def _open_checked(seg, flags):
    """An fd of segment ``seg`` opened by name (``O_NOFOLLOW``) and checked against it (see the
    module docstring); ``FileNotFoundError`` when the name is gone."""
    path = os.path.join(SHM_DIR, seg.name)
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise _refused(path, "is a symbolic link" if e.errno == errno.ELOOP else f"cannot be opened ({e.strerror})") \
            from None
    try:
        why = _mismatch(os.fstat(fd), seg)
        if why is not None:
            raise _refused(path, why)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _map(seg):
    """The mmap of segment ``seg``, opened by name once and checked (see the module docstring)."""
    try:
        fd = _open_checked(seg, os.O_RDWR)
    except FileNotFoundError:
        raise Elsewhere(f"shared memory segment {os.path.join(SHM_DIR, seg.name)} is not on this worker's host (or "
                        "its run ended); set EAGLE_DASK_SHM=0 on the driver if the host ids of two machines agree") \
            from None
    try:
        OPENED.append(seg.name)
        OPENS.append(seg.name)
        return mmap.mmap(fd, seg.size)
    finally:
        os.close(fd)


def lock_regions(seg, spans):
    """A block's own open file description of the arena ``seg``, holding shared locks on the
    ``spans`` it will write (``eagle_dask.region_locks``); None when the arena's name is gone --
    retired, so no run is given its regions again.  Raises ``RunEnded`` when the driver is
    taking one of them back (their run has ended)."""
    try:
        fd = _open_checked(seg, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        if not region_locks.hold(fd, spans):
            raise RunEnded(f"the driver is taking back this block's regions of the arena {seg.name}: its run has "
                           "ended, and it reads and writes nothing")
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_segment(seg, dtype, shape):
    """A worker's writable view of segment ``seg`` (a ``SegmentId``): raises ``Elsewhere`` when it
    is not on this host, ``ForeignSegment`` when its name leads to another file."""
    if int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize > seg.size:
        raise ValueError(f"a plane of shape {tuple(shape)} and dtype {np.dtype(dtype)} does not fit "
                         f"segment {seg.name} ({seg.size} bytes)")
    return _view(_map(seg), dtype, shape)


def opens():
    return list(OPENS)


def arena_map(seg):
    """A worker's mapping of the arena ``seg``: kept across runs, opened and checked (``_map``)
    when its id is new to this process; the mapping of the arena it replaced (the same driver),
    and of arenas whose name is gone (retired, their driver ended), dropped."""
    driver = seg.name.rsplit("-", 1)[0]
    with _ARENAS_LOCK:
        known = _ARENAS.get(driver)
    if known is not None and known[0] == seg:
        OPENED.append(seg.name)
        return known[1]
    buf = _map(seg)
    with _ARENAS_LOCK:
        _ARENAS[driver] = (seg, buf)
        for other, (old, _) in list(_ARENAS.items()):
            if other != driver and not os.path.lexists(os.path.join(SHM_DIR, old.name)):
                del _ARENAS[other]          # a block still running keeps its own views
    return buf


def arenas_mapped() -> list:
    """The arenas this worker keeps mapped (names)."""
    with _ARENAS_LOCK:
        return sorted(seg.name for seg, _ in _ARENAS.values())


def region_view(buf, region, dtype, shape):
    """The plane of ``dtype`` and ``shape`` at ``region`` of the mapping ``buf``."""
    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    if nbytes > region.nbytes or region.offset < 0 or region.offset + region.nbytes > region.seg.size:
        raise ValueError(f"a plane of shape {tuple(shape)} and dtype {np.dtype(dtype)} does not fit region "
                         f"[{region.offset}, +{region.nbytes}) of segment {region.seg.name} ({region.seg.size} bytes)")
    count = nbytes // np.dtype(dtype).itemsize
    return np.frombuffer(buf, dtype=dtype, count=count, offset=region.offset).reshape(shape)


class Segments:
    """The segments of one run on the driver; ``close`` unlinks them all."""

    def __init__(self):
        self.paths = []

    def new(self, like_shape, dtype, data=None):
        """A segment holding a plane of ``like_shape`` and ``dtype`` (a copy of ``data`` when given);
        returns (its ``SegmentId``, the driver's view)."""
        dtype = np.dtype(dtype)
        seg, buf = _create(int(np.prod(like_shape, dtype=np.int64)) * dtype.itemsize)
        self.paths.append(os.path.join(SHM_DIR, seg.name))
        view = _view(buf, dtype, tuple(like_shape))
        if data is not None:
            np.copyto(view, data)
        return seg, view

    def put(self, shape, dtype, data=None):
        """``new``, for ``eagle_dask.shared_run``: (its ``SegmentId``, the driver's view)."""
        return self.new(shape, dtype, data)

    def close(self):
        for path in self.paths:
            _unlink(path)
        self.paths = []


@atexit.register
def _unlink_all():
    with _LOCK:
        paths = list(_LIVE)
    for path in paths:
        _unlink(path)


# -- what a task carries -----------------------------------------------------------------------
class SharedPlanes:
    """A block's planes as segments: ``planes[name] = (input segment or None, output segment or
    None, dtype, shape, sliced, fresh)``, and ``rows[cell] = (segment, rows of the run)``, each
    segment a ``SegmentId``; plain data, a few hundred bytes."""

    __slots__ = ("host", "planes", "rows", "started", "lease")

    def __init__(self, host, planes, rows=None, started=None, lease=None):
        self.host, self.planes, self.rows, self.started, self.lease = host, planes, rows or {}, started, lease

    def __getstate__(self):
        return (self.host, self.planes, self.rows, self.started, self.lease)

    def __setstate__(self, state):
        self.host, self.planes, self.rows, self.started, self.lease = state

    def open(self, start, stop):
        """On the worker: the block of samples ``[start, stop)`` with every segment mapped (a
        ``MappedBlock``), the outputs' shares set to their initial values (see the module
        docstring).  Nothing is written before every segment is mapped and checked."""
        if host_id() != self.host:
            raise Elsewhere("this block's planes are in shared memory on the driver's host, and this worker "
                            "runs on another one")
        mapped, maps, arenas = {}, {}, set()

        def view(ref, dtype, shape):
            region = ref if isinstance(ref, Region) else Region(ref, 0, ref.size)
            if region.seg not in mapped:
                mapped[region.seg] = arena_map(region.seg) if isinstance(ref, Region) else _map(region.seg)
                if isinstance(ref, Region):
                    arenas.add(region.seg)
            return region_view(mapped[region.seg], region, dtype, shape)

        for seg_in, seg_out, dtype, shape, _, _ in self.planes.values():
            for ref in (seg_in, seg_out):
                if ref is not None and ref not in maps:
                    maps[ref] = view(ref, dtype, shape)
        block = MappedBlock(start, stop, {cell: (ref, view(ref, np.float64, (total, 2)))
                                          for cell, (ref, total) in self.rows.items()})
        block.arenas = {seg: mapped[seg] for seg in arenas}
        try:
            block.lock = self._lease(view, start, stop)
            self._fill(block, maps, view, start, stop)
        except BaseException:
            block.close()
            raise
        return block

    def _lease(self, view, start, stop):
        """In the arena: shared locks on the regions this block writes, *then* the wait until the
        driver has placed the planes (``region_locks.wait_placed``), *then* the run's token
        checked (the order ``eagle_dask.arena.ArenaRun.close`` relies on); the locks' fd."""
        if self.lease is None:
            return None
        slot, token, bound = self.lease
        seg = slot.seg
        writes = [ref for _, ref, *_ in self.planes.values()] + [ref for ref, _ in self.rows.values()]
        spans = [(r.offset, r.nbytes) for r in writes if isinstance(r, Region) and r.seg == seg]
        if self.started is not None:        # its own flag only: the driver asks block by block (``done``)
            spans.append((self.started[0].offset + start, 1))
        fd = lock_regions(seg, spans)
        lease = view(slot, np.int64, (1,))

        def current():
            return int(lease[0]) == token

        try:
            # fd None: the arena's name is gone, so no run holds it any more (its token is cleared)
            placed = current() if fd is None else region_locks.wait_placed(fd, slot.offset, slot.nbytes, current,
                                                                           bound)
            if not placed:
                raise RunEnded(f"the block of samples [{start}, {stop}) belongs to a run that has ended: it reads "
                               "and writes nothing (its regions of the arena may be another run's)")
        except BaseException:
            if fd is not None:
                os.close(fd)
            raise
        return fd

    def _fill(self, block, maps, view, start, stop):
        """The block's planes in ``block``, the outputs' shares set to their initial values."""
        if self.started is not None:            # Mutables written in place, not staged: first start only
            flags = view(self.started[0], np.uint8, (self.started[1],))
            if flags[start]:
                raise StartedBefore(f"the block of samples [{start}, {stop}) started before and its Mutables were "
                                    "written in place: the driver sends it again through the messages")
            flags[start] = STARTED
            block.flags = flags
        for name, (seg_in, seg_out, _, _, is_sliced, fresh) in self.planes.items():
            src = maps[seg_in] if seg_in is not None else None
            if seg_out is None:
                (block.sliced if is_sliced else block.whole)[name] = src[start:stop] if is_sliced else src
                continue
            out = maps[seg_out]
            if fresh:
                out[start:stop] = 0
            elif src is not None:               # staged; else the region holds the initial values itself
                out[start:stop] = src[start:stop]
            block.in_place[name] = out[start:stop] if is_sliced else out


class MappedBlock:
    """One block's segments, mapped when it started and kept until it returns: ``sliced`` and
    ``whole`` inputs, outputs written ``in_place``, and the cells' rows (``rows[cell] = (segment,
    its mapping)``, written by ``write_rows``)."""

    __slots__ = ("start", "stop", "sliced", "whole", "in_place", "rows", "lock", "arenas", "flags")

    def __init__(self, start, stop, rows):
        self.start, self.stop, self.rows = start, stop, rows
        self.sliced, self.whole, self.in_place = {}, {}, {}
        self.lock = None            # the fd holding its locks on the arena's regions it writes
        self.arenas = {}            # the arenas its planes lie in: {SegmentId: the worker's mapping}
        self.flags = None           # the run's started flags (in the arena), its own at ``start``

    def mark_done(self):
        """Its outputs and rows are written: its flag says ``DONE`` (the driver's ``SharedRun.done``
        believes it once the block's lock on the flag is gone, i.e. after ``close``)."""
        if self.flags is not None:
            self.flags[self.start] = DONE

    def close(self):
        """The block wrote its last byte (or failed): its locks dropped (``SharedPlanes._lease``)."""
        if self.lock is not None:
            os.close(self.lock)
            self.lock = None

    def write_rows(self, rows):
        """The row partials of the block's samples into the cells' segments, through the mappings."""
        start, stop = self.start, self.stop
        r0, r1 = row_span(start, stop)
        for cell, (seg, view) in self.rows.items():
            got = np.asarray(rows[cell])
            if got.shape != (r1 - r0, 2):
                raise RuntimeError(f"cell {cell!r}: samples [{start}, {stop}) gave row partials of shape "
                                   f"{got.shape}, not ({r1 - r0}, 2)")
            view[r0:r1] = got                   # never ``seg`` opened by name again


# -- which workers share the driver's host -----------------------------------------------------
class LocalWorkers:
    """The workers of a client that run on the driver's host, asked once per worker address."""

    _known = weakref.WeakKeyDictionary()
    _lock = threading.Lock()

    @classmethod
    def of(cls, client, addresses) -> set:
        """The addresses among ``addresses`` whose workers share this host (none when disabled)."""
        if not enabled():
            return set()
        with cls._lock:
            known = cls._known.setdefault(client, {})
            unknown = [a for a in addresses if a not in known]
        if unknown:
            answers = cls._ask(client, unknown)
            with cls._lock:
                known.update(answers)
        mine = host_id()
        return {a for a in addresses if known.get(a) == mine}

    @staticmethod
    def _ask(client, addresses) -> dict:
        try:
            answers = client.sync(client._run, host_id, workers=list(addresses), on_error="return",
                                  callback_timeout=ASK_TIMEOUT)
        except Exception:  # noqa: BLE001 - workers that do not answer take the messages
            return {a: None for a in addresses}
        return {a: (answers.get(a) if isinstance(answers.get(a), str) else None) for a in addresses}
