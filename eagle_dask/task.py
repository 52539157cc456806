"""The worker side of a Dask run: one block of samples.

A task gets the plugin (it pickles by value), the inner structure, its block's samples
``[start, stop)``, the planes it needs and the Params.  Sliceable planes (the body touches them
only as ``plane[i]``) arrive as their slice, indexed through one offset ``po = start``; every
other plane arrives whole.  The task returns the output blocks for ``[start, stop)`` and the
cells' row partials.  Compiled code is not shipped: ``plugin.host`` compiles (or loads from
the disk cache) once per worker process and stays cached there, keyed by the plugin's hash.

Two callers, one core (``_run``):

* ``run_block`` -- a rank's block in the numpy mode (``DaskPartition`` submits one per rank);
* ``run_chunk`` -- one block of the lazy mode (``eagle_dask.arrays``): its inputs are chunks of
  dask arrays, owned by the worker's store.

Every plane the kernel writes is copied before the kernel runs: a task's arguments are never
modified.

The plugin travels as a ``PluginRef`` (its manifest and source, plain data) and is made into a
``Plugin`` once per worker process, in the task's thread (``plugin_of``), its compiled entry
built there too: ``eagle.host.host_entry`` and ``eagle.device.device_entry`` build an entry once
under a lock of the kernel's own, and every parse goes through ``eagle.syntax``'s lock
(python/cpython#106905), so tasks of one kernel or of several may start in many threads at once.

A block on the host runs in *pieces* of whole rows, each a ``run_range`` of the inner
structure, sized to take about ``PIECE_SECONDS``; between pieces the task asks its worker
whether it is still wanted, and stops when the client cancelled it (``Abandoned``), so an
interrupted run does not keep the worker's threads busy; while a piece runs, ``eagle_dask.cancel``
stops it within a poll as Ctrl-C would.  Pieces start on rows and a cell's
row partials are the concatenation of the pieces' rows, so the bits are those of one call.
"""
from __future__ import annotations

import collections
import threading
import time
from contextlib import nullcontext

import numpy as np

from eagle.errors import with_place
from eagle.host import MIN_CHUNK, host_entry, num_threads, thread_budget
from eagle.local import DeviceKernel, HostTeam
from eagle.plugin import Plugin
from eagle.prefault import populate
from eagle.roles import OUTPUT_KINDS
from eagle.rows import ROW, fold

from .cancel import Abandoned, watching
from .pinned import pin_arena
from .progress import report_piece
from .recent import Recent, scalars
from .shm import SharedPlanes

#: what recent tasks of this worker received: (kernel, rank, start, stop, worker, {plane: length})
#: -- a debugging record, read with ``client.run(eagle_dask.task.received)``; lazy blocks are
#: recorded with the rank ``"block b"``
RECEIVED = collections.deque(maxlen=256)
#: the thread team of recent tasks of this worker: (kernel, rank or block, threads), read with
#: ``client.run(eagle_dask.task.teams)``
TEAMS = collections.deque(maxlen=256)

#: the first piece of a host block on one thread (samples, whole rows), and the time a piece
#: aims at once the first is measured
FIRST_PIECE = 8 * ROW
PIECE_SECONDS = 0.2


_PLUGINS = {}
_PLUGINS_LOCK = threading.Lock()        # one Plugin per key in this process


class PluginRef:
    """A plugin as it travels to the workers: plain data, made into a ``Plugin`` by ``plugin_of``."""

    __slots__ = ("manifest", "source", "key", "name")

    def __init__(self, plugin):
        self.manifest, self.source, self.key, self.name = plugin.manifest, plugin.source, plugin.key, plugin.name

    def __getstate__(self):
        return (self.manifest, self.source, self.key, self.name)

    def __setstate__(self, state):
        self.manifest, self.source, self.key, self.name = state

    def __repr__(self):
        return f"<eagle plugin {self.name} (ref)>"


def plugin_of(ref, inner=None):
    """The ``Plugin`` of ``ref`` in this process (built and checked once), its compiled entry for
    ``inner`` built too (see the module docstring)."""
    if isinstance(ref, Plugin):
        plugin = ref
    else:
        with _PLUGINS_LOCK:
            plugin = _PLUGINS.get(ref.key)
            if plugin is None:
                plugin = _PLUGINS[ref.key] = Plugin(ref.manifest, ref.source)
    if inner is HostTeam:
        host_entry(plugin)
    elif inner is DeviceKernel:
        try:
            from eagle.device import device_entry
            device_entry(plugin)
        except Exception:  # noqa: BLE001 - no GPU, no CUDA: the run itself says so, by name
            pass
    return plugin


def received():
    return list(RECEIVED)


def clear_received():
    RECEIVED.clear()
    TEAMS.clear()


def teams():
    return list(TEAMS)


def _worker():
    try:
        from distributed import get_worker
        return get_worker()
    except (ImportError, ValueError):
        return None


def _worker_address():
    w = _worker()
    return w.address if w is not None else "?"


def _this_task():
    """(worker, key) of the task this thread runs, or None outside a worker's task."""
    w = _worker()
    if w is None:
        return None
    try:
        from distributed.utils import thread_state
        return w, thread_state.key
    except AttributeError:
        return None


def _wanted(w, key) -> bool:
    ts = w.state.tasks.get(key)
    return ts is not None and ts.state not in ("cancelled", "released", "forgotten")


def still_wanted() -> bool:
    """Whether the task this thread runs is still wanted by its worker (True outside a worker)."""
    task = _this_task()
    return True if task is None else _wanted(*task)


def first_piece() -> int:
    """Samples of a host block's first piece: a few rows on one thread; on a team of ``T``
    threads, enough for the host engine to cut its ``4 T`` chunks (``eagle.host.chunks``), so
    that pieces never run on fewer threads than one call would."""
    threads = num_threads()
    return FIRST_PIECE if threads == 1 else max(FIRST_PIECE, 4 * threads * MIN_CHUNK)


def run_pieces(inner, plugin, values, start, stop, po=0, device=None, wanted=still_wanted, report=report_piece):
    """``inner.run_range`` over ``[start, stop)``, in pieces of whole rows on the host (see the
    module docstring); returns each cell's row partials for the whole range."""
    count = stop - start
    pace = _Pace.of(plugin, values) if inner is HostTeam else None
    size = pace.first() if pace is not None else count
    if count <= size:
        t = time.perf_counter()
        with _piece(inner, wanted):
            rows = inner.run_range(plugin, values, start, stop, po=po, device=device)
        if pace is not None:
            pace.ran(count, time.perf_counter() - t)
        return rows
    parts, a = [], start
    while a < stop:
        b = min(a + size, stop)
        if stop - b < size // 4:            # no short last piece: the rest joins this one
            b = stop
        t = time.perf_counter()
        with _piece(inner, wanted):
            parts.append(inner.run_range(plugin, values, a, b, po=po, device=device))
        spent = time.perf_counter() - t
        pace.ran(b - a, spent)
        a = b
        report(a - start)
        if a < stop and not wanted():
            raise Abandoned(f"kernel {plugin.name!r}: the block [{start}, {stop}) was released by the "
                            f"client; stopped at sample {a}")
        grow = 16.0 if spent <= 0 else min(16.0, max(1.0, PIECE_SECONDS / spent))
        size = max(size, int(size * grow) // ROW * ROW)
    return {c: np.concatenate([r[c] for r in parts]) for c in plugin.cells}


#: seconds per sample of each kernel's last host piece in this process, by kernel, team size and
#: scalar Params: the next block's first piece takes about ``PIECE_SECONDS`` at that pace
PACES = Recent()


class _Pace:
    """The pace of a block's kind (``PACES``): its first piece about ``PIECE_SECONDS`` long at the
    pace of the last piece of its kind (at least ``first_piece()``) instead of a few rows to measure
    it.  The pieces' bounds do not change the bits (they start on rows)."""

    def __init__(self, key):
        self.key = key

    @classmethod
    def of(cls, plugin, values):
        return cls((plugin.key, num_threads(), scalars(values)))

    def first(self) -> int:
        least = first_piece()
        per = PACES.get(self.key)
        if not per:
            return least
        return max(least, int(PIECE_SECONDS / per) // ROW * ROW)

    def ran(self, samples, seconds):
        if samples > 0 and seconds > 0:
            PACES.put(self.key, seconds / samples)


def _piece(inner, wanted):
    """A host piece of a worker's task is watched from another thread (``eagle_dask.cancel``):
    stopped within a poll once its task is no longer wanted."""
    task = _this_task() if inner is HostTeam and wanted is still_wanted else None
    return nullcontext() if task is None else watching(lambda: _wanted(*task))


def _run(plugin, inner, label, start, stop, n, sliced, whole, params, fresh, device, in_place=None):
    """The core of a block: planes set up, the kernel run, (output blocks, row partials) returned.

    Every plane the kernel writes is copied first: a task's arguments may be run again (a
    task the worker is asked for again, a lazy block's chunks shared with other tasks), and
    must be found as they were.  ``in_place``: output planes written where they lie (shares of
    the driver's shared-memory segments, ``eagle_dask.shm``), not returned."""
    plugin = plugin_of(plugin, inner)
    worker = _worker_address()
    in_place = in_place or {}
    RECEIVED.append((plugin.name, label, start, stop, worker,
                     {k: int(v.shape[0]) for k, v in {**(whole or {}), **sliced, **in_place}.items()}))
    TEAMS.append((plugin.name, label, num_threads()))
    values = dict(params)
    outputs = plugin.names(*OUTPUT_KINDS)
    sliceable = plugin.sliceable
    planes = {**sliced, **(whole or {})}
    for name, v in planes.items():
        # outputs copied; inputs C-contiguous (a broadcast chunk, da.ones', would compile anew)
        values[name] = _copy(v) if name in outputs else (v if _on_device(v) else np.ascontiguousarray(v))
    on_gpu = any(_on_device(v) for v in planes.values())
    for name, (width, dtype) in fresh.items():
        count = stop - start if name in sliceable else n
        shape = (count,) if width is None else (count, width)
        values[name] = _device_zeros(shape, dtype, device) if on_gpu else np.zeros(shape, dtype=dtype)
    values.update(in_place)
    if stop > start:
        try:
            rows = run_pieces(inner, plugin, values, start, stop, po=start, device=device)
        except Abandoned:
            raise
        except Exception as e:
            where = label if isinstance(label, str) else f"rank {label}"
            if worker != "?":
                where += f", worker {worker}"
            raise with_place(e, plugin.name, where) from None
    else:
        rows = {c: np.zeros((0, 2)) for c in plugin.cells}
    blocks = {}
    for name in outputs:
        if name in in_place:
            continue
        v = values[name]
        if not _on_device(v):
            v = np.asarray(v)
        blocks[name] = v if name in sliceable else _copy(v[start:stop])
    return blocks, {c: np.asarray(r) for c, r in rows.items()}


def _on_device(v) -> bool:
    return hasattr(v, "__cuda_array_interface__")


def _copy(v):
    """A C-contiguous copy of a plane, where it lies (numpy, or CuPy on its device)."""
    if _on_device(v):
        return v.copy()
    out = np.empty(v.shape, v.dtype)          # C order; its pages faulted in at once, then filled
    populate(out)
    np.copyto(out, v)
    return out


def _device_zeros(shape, dtype, device):
    """Zeros beside device chunks (CuPy-backed dask arrays on a dask-cuda worker)."""
    from eagle.device import device_zeros
    return device_zeros(0 if device is None else device)(shape, dtype)


def run_block(plugin, inner, rank, start, stop, n, sliced, whole, params, fresh, device=None, shared=None):
    """Run rank ``rank``'s samples ``[start, stop)``; return (output blocks, row partials).

    ``sliced``: sliceable planes, samples ``[start, stop)`` only.  ``whole``: the other planes
    (shared by the tasks of this worker).  ``fresh``: Out planes to allocate here,
    ``{name: (width, dtype)}``.  ``shared``: a ``SharedPlanes`` (a worker on the driver's host):
    the planes are mapped from the driver's segments and the outputs written there.  The team
    takes the threads Dask gave this worker (``worker_threads``).
    """
    mapped = shared.open(start, stop) if isinstance(shared, SharedPlanes) else None
    if mapped is None:
        with thread_budget(worker_threads()):
            return _run(plugin, inner, rank, start, stop, n, sliced, whole, params, fresh, device)
    try:                                # every segment mapped now, kept until the block returns
        if inner is DeviceKernel:       # uploads from page-locked memory (eagle_dask.pinned)
            for seg, buf in mapped.arenas.items():
                pin_arena(seg, buf, device)
        sliced, whole = {**sliced, **mapped.sliced}, {**(whole or {}), **mapped.whole}
        with thread_budget(worker_threads()):
            blocks, rows = _run(plugin, inner, rank, start, stop, n, sliced, whole, params, fresh, device,
                                mapped.in_place)
        if blocks:
            raise RuntimeError(f"kernel {plugin.name!r}: output planes {sorted(blocks)} of the block of rank {rank} "
                               "are not in shared memory, although the block's planes are")
        mapped.write_rows(rows)      # through the block's own mappings: the driver reads them there
        mapped.mark_done()           # the driver takes it for finished once its locks are dropped
    finally:
        mapped.close()               # its locks on the arena's regions dropped after its last write
    return blocks, None


def worker_threads() -> int:
    """The threads Dask gave this worker (1 outside a worker)."""
    w = _worker()
    state = getattr(w, "state", None)
    return int(getattr(state, "nthreads", None) or getattr(w, "nthreads", None) or 1)


# -- the lazy mode's tasks ---------------------------------------------------------------------
def run_chunk(plugin, inner, block, start, stop, n, sliced_names, sliced, whole_names, whole, params, fresh,
              device=None, result="all"):
    """Block ``block`` (samples ``[start, stop)``) of a lazy run.  ``sliced``: per sliced plane,
    ``[chunks, lo, hi]``: the chunks that overlap the block and where it lies in them;
    ``whole``: the assembled planes, in the order of ``whole_names``; none of them is written.
    ``result``: ``"all"`` (output blocks, row partials), ``"rows"`` (the row partials), or the
    name of the one output plane (its block).  The team takes one thread (``EAGLE_NUM_THREADS``
    says otherwise): several blocks run at once on a worker of several threads."""
    label = f"block {block} (samples [{start}, {stop}))"
    planes = {name: _assemble(*piece) for name, piece in zip(sliced_names, sliced)}
    for name, plane in planes.items():
        if len(plane) != stop - start:       # never run a kernel past its planes' ends
            raise RuntimeError(f"kernel {plugin.name!r}, {label}: plane {name!r} was cut to {len(plane)} samples, "
                               f"not {stop - start}: the chunks given to the block do not hold its samples "
                               "(an eagle bug: please report it with the planes' chunks)")
    with thread_budget(1):
        out = _run(plugin, inner, label, start, stop, n, planes, dict(zip(whole_names, whole)), params, fresh,
                   device)
    if result == "all":
        return out
    return out[1] if result == "rows" else out[0][result]


def _assemble(chunks, lo, hi):
    """Samples ``[lo, hi)`` of the concatenation of ``chunks`` (a view when one chunk holds them)."""
    if len(chunks) == 1:
        return chunks[0][lo:hi]
    pieces, at = [], 0
    for c in chunks:
        a, b = max(lo - at, 0), min(hi - at, len(c))
        if b > a:
            pieces.append(c[a:b])
        at += len(c)
    return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)


def take_rows(chunk, lo, hi):
    """Samples ``[lo, hi)`` of one chunk of a lazy run's plane: the few a block reads of a
    neighbour's chunk (``eagle_dask.arrays._overlapping``), which travel alone."""
    return chunk[lo:hi]


def pick_block(result, name):
    """One output's block from a ``run_chunk`` result."""
    return result[0][name]


def pick_rows(result):
    """The row partials of a ``run_chunk`` result (small: what the fold task receives)."""
    return result[1]


def fold_cell(op, name, rows):
    """Fold a cell's row partials of every block, in block order, into a 0-d float64 array."""
    parts = [r[name] for r in rows]
    return np.asarray(fold(op, np.concatenate([np.zeros((0, 2))] + parts)))
