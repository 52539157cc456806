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
* a task carries only a ``SharedPlanes``: the driver's host id and, per plane, the segment
  names, dtypes and shapes; the worker maps the segments, reads in place and writes its output
  share directly into the driver's segment;
* a cell's row partials go the same way: one segment per cell holds the run's rows (``ROW``
  samples each), a block writes its rows there before it returns, and the driver reads them
  once the block's task has finished -- so a block on the driver's host is never fetched from
  its worker (a round trip per block).

Whether a worker is on the driver's host is decided by ``host_id`` -- the host name together
with the machine id and the boot id, never an address -- asked once per worker and client
(``LocalWorkers``).  ``EAGLE_DASK_SHM=0`` turns the path off; ``EAGLE_DASK_HOST_ID`` set on a
worker makes it count as another host (its blocks take the messages, in the same run).  A
worker that finds itself elsewhere than the driver raises ``Elsewhere``, and the run sends the
block again through the messages.

Segments are the driver's: ``Segments.close`` unlinks them when the run ends (returned,
raised, interrupted), and every segment this process still has is unlinked at interpreter
exit.  An unlinked segment stays mapped where it is mapped (a worker still running, the
driver's result) and its memory is freed with the last mapping.
"""
from __future__ import annotations

import atexit
import collections
import mmap
import os
import socket
import threading
import uuid
import weakref

import numpy as np

from eagle.rows import n_rows, row_span

#: where segments live (a tmpfs on Linux)
SHM_DIR = "/dev/shm"
PREFIX = "eagle-"
#: seconds the driver waits for the workers' host ids
ASK_TIMEOUT = 10.0

_LIVE = set()
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


def host_id() -> str:
    """This process's host: ``EAGLE_DASK_HOST_ID``, else the host name, machine id and boot id."""
    forced = os.environ.get("EAGLE_DASK_HOST_ID")
    if forced:
        return forced
    machine = _read("/etc/machine-id") or _read("/var/lib/dbus/machine-id")
    return "|".join((socket.gethostname(), machine, _read("/proc/sys/kernel/random/boot_id")))


# -- segments ----------------------------------------------------------------------------------
def _create(nbytes: int):
    """A new segment of ``nbytes`` (at least 1), mode 0600, its pages reserved; (name, mmap)."""
    name = f"{PREFIX}{os.getpid()}-{uuid.uuid4().hex[:16]}"
    path = os.path.join(SHM_DIR, name)
    size = max(int(nbytes), 1)
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    with _LOCK:
        _LIVE.add(path)
    try:
        os.posix_fallocate(fd, 0, size)
        return name, mmap.mmap(fd, size)
    except BaseException:
        _unlink(path)
        raise
    finally:
        os.close(fd)


def _unlink(path):
    with _LOCK:
        _LIVE.discard(path)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _view(buf, dtype, shape):
    count = int(np.prod(shape, dtype=np.int64))
    return np.frombuffer(buf, dtype=dtype, count=count).reshape(shape)


def open_segment(name, dtype, shape):
    """A worker's writable view of segment ``name`` (raises ``Elsewhere`` when it is not here)."""
    path = os.path.join(SHM_DIR, name)
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        raise Elsewhere(f"shared memory segment {path} is not on this worker's host (or its run ended); "
                        "set EAGLE_DASK_SHM=0 on the driver if the host ids of two machines agree") from None
    OPENED.append(name)
    try:
        size = max(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize, 1)
        return _view(mmap.mmap(fd, size), dtype, shape)
    finally:
        os.close(fd)


class Segments:
    """The segments of one run on the driver; ``close`` unlinks them all."""

    def __init__(self):
        self.paths = []

    def new(self, like_shape, dtype, data=None):
        """A segment holding a plane of ``like_shape`` and ``dtype`` (a copy of ``data`` when given);
        returns (name, the driver's view)."""
        dtype = np.dtype(dtype)
        name, buf = _create(int(np.prod(like_shape, dtype=np.int64)) * dtype.itemsize)
        self.paths.append(os.path.join(SHM_DIR, name))
        view = _view(buf, dtype, tuple(like_shape))
        if data is not None:
            np.copyto(view, data)
        return name, view

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
    None, dtype, shape, sliced, fresh)``, and ``rows[cell] = (segment, rows of the run)``; plain
    data, a few hundred bytes."""

    __slots__ = ("host", "planes", "rows")

    def __init__(self, host, planes, rows=None):
        self.host, self.planes, self.rows = host, planes, rows or {}

    def __getstate__(self):
        return (self.host, self.planes, self.rows)

    def __setstate__(self, state):
        self.host, self.planes, self.rows = state

    def write_rows(self, start, stop, rows):
        """On the worker: the row partials of samples ``[start, stop)`` into the cells' segments."""
        r0, r1 = row_span(start, stop)
        for cell, (name, total) in self.rows.items():
            got = np.asarray(rows[cell])
            if got.shape != (r1 - r0, 2):
                raise RuntimeError(f"cell {cell!r}: samples [{start}, {stop}) gave row partials of shape "
                                   f"{got.shape}, not ({r1 - r0}, 2)")
            open_segment(name, np.float64, (total, 2))[r0:r1] = got

    def open(self, start, stop):
        """On the worker: (sliced inputs, whole inputs, planes written in place), the outputs'
        shares set to their initial values first (see the module docstring)."""
        if host_id() != self.host:
            raise Elsewhere("this block's planes are in shared memory on the driver's host, and this worker "
                            "runs on another one")
        sliced, whole, in_place = {}, {}, {}
        for name, (seg_in, seg_out, dtype, shape, is_sliced, fresh) in self.planes.items():
            src = open_segment(seg_in, dtype, shape) if seg_in is not None else None
            if seg_out is None:
                (sliced if is_sliced else whole)[name] = src[start:stop] if is_sliced else src
                continue
            out = open_segment(seg_out, dtype, shape)
            if fresh:
                out[start:stop] = 0
            else:
                out[start:stop] = src[start:stop]
            in_place[name] = out[start:stop] if is_sliced else out
        return sliced, whole, in_place


class SharedRun:
    """The driver's side of one run's planes in shared memory: which workers share this host
    (``LocalWorkers``, asked for ``addresses``), the segments created at the first block sent to
    one of them (``for_block``); ``finish`` copies the written shares back into the caller's
    planes; ``close`` unlinks every segment."""

    def __init__(self, client, addresses, bound, sliced, whole, fresh, outputs, sliceable, cells=()):
        self.client = client
        self.local = LocalWorkers.of(client, sorted(set(addresses)))
        self.bound, self.sliced, self.whole, self.fresh = bound, sliced, whole, fresh
        self.outputs, self.sliceable, self.cells = outputs, sliceable, tuple(cells)
        self.segments = None
        self.planes = None
        self.failed = False          # /dev/shm could not hold the planes: every block takes the messages
        self.rows = {}
        self.views = {}
        self.row_views = {}
        self.host = host_id()

    def _build(self):
        seg, planes = Segments(), {}
        self.segments = seg
        for name, v in {**self.sliced, **self.whole}.items():
            v = np.asarray(v)
            seg_in, _ = seg.new(v.shape, v.dtype, v)
            seg_out = None
            if name in self.outputs:
                seg_out, self.views[name] = seg.new(v.shape, v.dtype)
            planes[name] = (seg_in, seg_out, v.dtype.str, v.shape, name in self.sliced, False)
        for name in self.fresh:
            target = self.bound.values[name]
            seg_out, view = seg.new(target.shape, target.dtype)
            self.bound.values[name] = view                      # the result is the segment itself
            planes[name] = (None, seg_out, target.dtype.str, target.shape, True, True)
        total = n_rows(self.bound.n)
        for cell in self.cells:
            name, self.row_views[cell] = seg.new((total, 2), np.float64)
            self.rows[cell] = (name, total)
        self.planes = planes

    def for_block(self, address, remote=False):
        """The ``SharedPlanes`` of a block sent to ``address`` (segments made at the first call),
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
        return SharedPlanes(self.host, planes, self.rows)

    def rows_of(self, start, stop):
        """The row partials a finished block of samples ``[start, stop)`` wrote (copies)."""
        r0, r1 = row_span(start, stop)
        return {cell: view[r0:r1].copy() for cell, view in self.row_views.items()}

    def finish(self, parts):
        """Copy the shares ``parts`` ([(start, stop)]) written in the segments into the caller's planes."""
        for name, view in self.views.items():
            target = self.bound.values[name]
            for a, b in parts:
                target[a:b] = view[a:b]

    def close(self):
        if self.segments is not None:
            self.segments.close()


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
