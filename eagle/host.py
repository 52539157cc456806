"""The host engine: samples ``[start, stop)`` of a plugin run by a team of CPU threads.

The share is cut into chunks (``chunks``: about four per thread, whole rows for a kernel with
cells); each chunk is one call of the numba-compiled loop (``eagle.host_codegen``), which
releases the GIL, so the team's threads run in parallel.  A kernel that writes other samples
runs as one chunk, in sample order.  The team waits for every chunk before it raises, then raises
the first error in sample order (a laned or vectorised group that raised an out-of-range index
reruns one sample at a time to name the first).  Ctrl-C sets every chunk's stop flag, which the
loops poll (``eagle.interrupt``).  The compiled entry is built once per process and plugin
(``host_entry``), however many threads ask; which loop it runs is ``eagle.host_path``'s choice,
and an entry may be run from several threads at once.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import re
import sys
import threading
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor

import numba
from numba.core.errors import NumbaError

from .access import CROSS_SAMPLE_WRITE
from .bounds import AT, index_error, new_record, raised_record
from .cache import compile_lock, load_module
from .codegen import body_function, user_lines
from .entries import Entries
from .errors import compile_error, kernel_error
from .host_codegen import host_source, simd_source
from .interrupt import new_progress, stop
from .mpi.world import local_ranks
from .prefault import populate
from .roles import OUTPUT_KINDS
from .host_path import decide, without_lanes, without_simd
from .rows import ROW, check_row_start, identity_rows, row_span

_ENTRIES = Entries()          # one entry per plugin key (eagle.entries)
_LOCK = threading.Lock()
_LOADING = threading.Lock()
_POOL = None
_POOL_THREADS = 0
#: the fewest samples in a chunk (a smaller run is cut into fewer chunks)
MIN_CHUNK = 2048
#: the body's error record argument: the device's (``eagle.bounds``); on the host ``at`` raises
#: and never writes it, so every chunk passes this one
_NO_RECORD = new_record()[0]
#: seconds an interrupted run waits for its chunks to stop (their loops poll the stop flag every few
#: thousand iterations: ``eagle.interrupt``)
STOP_WAIT = 1.0
#: the threads a caller gave this context's teams (``thread_budget``); None: the CPUs
_BUDGET = contextvars.ContextVar("eagle_thread_budget", default=None)


def cpu_count() -> int:
    """The CPUs this process may use (its affinity mask where the system has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


@contextlib.contextmanager
def thread_budget(threads: int):
    """Teams started in this context take ``threads`` threads unless ``EAGLE_NUM_THREADS`` says
    otherwise (a Dask worker's task: the threads Dask gave it)."""
    token = _BUDGET.set(max(1, int(threads)))
    try:
        yield
    finally:
        _BUDGET.reset(token)


def dask_worker_threads() -> int | None:
    """The threads of the Dask worker whose task this thread runs (a HostTeam run inside a user's
    own Dask task), or None.  Asked of distributed only where it is already imported."""
    worker = sys.modules.get("distributed.worker")
    if worker is None:
        return None
    try:
        w = worker.get_worker()
    except (ValueError, AttributeError):     # not inside a task
        return None
    state = getattr(w, "state", None)
    threads = getattr(state, "nthreads", None) or getattr(w, "nthreads", None)
    return int(threads) if threads else None


def rank_share(cpus: int) -> int:
    """An MPI rank's share of the CPUs: ``cpus`` split between the ranks on this host, unless the
    launcher already bound the rank to fewer CPUs than the host has (its mask is its share)."""
    ranks = local_ranks()
    if ranks <= 1 or cpus < (os.cpu_count() or cpus):
        return cpus
    return max(1, cpus // ranks)


def num_threads() -> int:
    """``EAGLE_NUM_THREADS``, else the context's ``thread_budget``, else the threads of the Dask
    worker whose task runs this, else this MPI rank's share of the host's CPUs, else the CPUs this
    process may use."""
    env = os.environ.get("EAGLE_NUM_THREADS")
    if env:
        try:
            n = int(env)
        except ValueError:
            raise ValueError(f"EAGLE_NUM_THREADS={env!r} is not a number of threads") from None
        if n < 1:
            raise ValueError(f"EAGLE_NUM_THREADS={env!r}: a team has at least one thread")
        return n
    budget = _BUDGET.get()
    if budget is not None:
        return budget
    threads = dask_worker_threads()
    return rank_share(cpu_count()) if threads is None else threads


def _submit(threads: int, calls: list) -> list:
    """Submit ``calls`` (functions of no argument) to the shared team of at least ``threads``
    threads.  The team grows by a new pool replacing the old one, which finishes what it was given;
    submitting under the same lock as the replacement, no caller ever submits to a pool shut down."""
    global _POOL, _POOL_THREADS
    with _LOCK:
        if _POOL is None or _POOL_THREADS < threads:
            if _POOL is not None:
                _POOL.shutdown(wait=False)
            _POOL = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="eagle-team")
            _POOL_THREADS = threads
        return [_POOL.submit(c) for c in calls]


def chunks(start: int, stop: int, threads: int, rows: bool) -> list[tuple[int, int]]:
    """Cut ``[start, stop)`` into about 4 chunks per thread, whole rows when ``rows``."""
    count = stop - start
    if count <= 0:
        return []
    want = max(1, min(4 * threads if threads > 1 else 1, count // MIN_CHUNK or 1))
    size = -(-count // want)
    if rows:
        size = -(-size // ROW) * ROW
    return [(a, min(a + size, stop)) for a in range(start, stop, size)]


class HostEntry:
    """The compiled host loop of one plugin (one per process, keyed by the plugin's hash)."""

    def __init__(self, plugin, lanes: int | None = None, simd=None, polls: bool = True):
        """``lanes``: samples run in lockstep by the laned loop (``eagle.lanes``); None lets eagle
        choose (``EAGLE_HOST_LANES`` forces it), 1 runs one sample at a time.  ``simd``: None lets
        eagle choose the vectorised loop (``eagle.simd``; ``EAGLE_HOST_SIMD``), False never takes
        it, an ``eagle.simd.Options`` takes it with that tile, vector width and unroll.  A lane
        count given here runs the laned loop.

        ``path`` is what runs: ``"simd"``, ``"lanes"`` or ``"one"`` (one sample at a time);
        ``simd_reason`` why the vectorised loop does not (None when it does); ``simd_width`` the
        samples of its tile (None off that path); ``lanes`` the laned loop's lanes (1 on the other
        paths) and ``lanes_reason`` why one at a time.  ``polls``:
        the loops poll the stop flag (``eagle.interrupt``; off only to measure what polls cost).

        An entry may be run from several threads at once: what it runs, and its fall back to a
        slower path, change under its lock."""
        self.plugin = plugin
        self.polls = polls
        self._lock = threading.RLock()
        self.restored = self._restored(plugin)
        self.written = plugin.names(*OUTPUT_KINDS)          # faulted in before a run (``_populate``)
        self._take(decide(plugin, lanes, simd))

    # what runs: the path (``eagle.host_path``) and its module
    simd = property(lambda self: self.chosen.simd)
    simd_reason = property(lambda self: self.chosen.simd_reason)
    lanes_reason = property(lambda self: self.chosen.lanes_reason)
    path = property(lambda self: self.chosen.name)

    @property
    def lanes(self) -> int:
        """The laned loop's lanes: samples run in lockstep on the ``"lanes"`` path; 1 on the
        vectorised and one-at-a-time paths."""
        return self.chosen.lanes if self.chosen.simd is None else 1

    @property
    def simd_width(self) -> int | None:
        """The samples of one tile of the vectorised loop; None off the ``"simd"`` path."""
        return self.width if self.chosen.simd is not None else None

    def _take(self, chosen):
        """Build the module of the path ``chosen`` and make it the entry's."""
        unpolled = {} if self.polls else {"polls": False}
        if chosen.simd is not None:
            source = simd_source(self.plugin, chosen.simd, **unpolled)
        else:
            source = host_source(self.plugin, chosen.lanes, **unpolled)
        module = _load(self.plugin, source)
        self.chosen, self.source, self.module, self.loop = chosen, source, module, module._eagle_tile
        #: samples that run together (a vectorised tile, a lane group; 1: one at a time)
        self.width = module.TILE_WIDTH if chosen.simd is not None else chosen.lanes

    def _compile(self, start, po, args, r0):
        """The compiled loop to run for these argument types and its ``width`` (``_settle``,
        under the entry's lock: two threads never change the path at once, nor run one half
        changed)."""
        with self._lock:
            self._settle(start, po, args, r0)
            return self.loop, self.width

    def _settle(self, start, po, args, r0):
        """Compile the loop for these argument types.

        When one sample at a time does not compile either, the arguments are the kernel's problem:
        a short TypeError naming the kernel, its line and the types (``errors.compile_error``),
        and the entry keeps its path for later runs.  When only the faster path does not compile,
        the entry falls back visibly (``eagle.host_path``): the vectorised loop to the laned one,
        the laned body to one sample at a time (``simd_reason``, ``lanes_reason``)."""
        def attempt(module):
            with compile_lock(module):             # one process per host compiles, the others load
                module._eagle_tile(start, start, po, new_progress(), *args, _NO_RECORD, r0)

        try:
            return attempt(self.module)
        except NumbaError as e:
            failed = e
        one_source = host_source(self.plugin, 1, self.polls)
        one = self.module if self.path == "one" else _load(self.plugin, one_source)
        if one is not self.module:
            try:
                attempt(one)
            except NumbaError as e:
                failed = e
            else:
                if self.simd is not None:
                    self._take(without_simd(self.plugin, failed))
                    if self.path == "one":
                        return
                    try:
                        return attempt(self.module)
                    except NumbaError as e:
                        failed = e
                self._take(without_lanes(self.chosen, failed))
                return
        line = user_lines(self.plugin, self.source if one is self.module else one_source).get(
            _failing_line(failed, one))
        described = ", ".join(f"{name}: {role!r} {numba.typeof(v)}"
                              for (role, name), v in zip(self.plugin.arg_spec, args))
        raise compile_error(self.plugin.name, failed, described, line) from failed

    def run(self, values: dict, start: int, stop: int, po: int = 0, threads: int | None = None) -> dict:
        """Run samples ``[start, stop)``; planes in ``values`` start at sample ``po``.

        Writes the output planes in place and returns each cell's row partials for the rows
        ``row_span(start, stop)`` as a ``(rows, 2)`` array.
        """
        p = self.plugin
        check_row_start(start, stop, bool(p.cells), p.name)
        r0, r1 = row_span(start, stop)
        rows = {c: identity_rows(op, r1 - r0) for c, op in p.cells.items()}
        args = [rows[name] if name in rows else values[name] for _, name in p.arg_spec]
        threads = num_threads() if threads is None else threads
        if p.exec_access == CROSS_SAMPLE_WRITE:
            threads = 1
        cut = chunks(start, stop, threads, bool(p.cells)) if threads > 1 else (
            [(start, stop)] if stop > start else [])
        if not cut:
            return rows
        # compile (or load from the disk cache) in this thread, before the team starts
        loop, width = self._compile(start, po, args, r0)
        self._populate(values, start, stop, po)
        progs = [new_progress() for _ in cut]
        errors = [None] * len(cut)
        saved = [None] * len(cut)
        keep = self.restored if width > 1 else ()

        def one(k):
            a, b = cut[k]
            if keep:                                   # what a rerun of the share's samples restores
                saved[k] = {m: values[m][self._rows(m, a, b, po)].copy() for m in keep}
            try:
                loop(a, b, po, progs[k], *args, _NO_RECORD, r0)
            except Exception as e:  # noqa: BLE001 - re-raised below, first in sample order
                errors[k] = e

        def in_order():
            for k in range(len(cut)):
                one(k)
                if errors[k] is not None:
                    break

        # the chunks run on the team, never in this thread, which waits where Ctrl-C reaches it
        if len(cut) == 1 or threads == 1:
            jobs = _submit(max(threads, 1), [in_order])
        else:
            jobs = _submit(threads, [functools.partial(one, k) for k in range(len(cut))])
        _wait(jobs, progs)
        for k, e in enumerate(errors):                # chunks in sample order: the first error wins
            if e is None:
                continue
            record = raised_record(e)
            if record is not None:
                if width > 1:
                    record = self._first_bad(record, cut[k], width, values, po, args, r0, saved[k])
                raise kernel_error(p.name, index_error(p, record), f"sample {int(record[0])}") from None
            s = int(progs[k][0])
            where = f"sample {s}" if s >= 0 else f"a sample in [{cut[k][0]}, {cut[k][1]})"
            raise kernel_error(p.name, e, where) from e
        return rows


    @staticmethod
    def _restored(plugin):
        """The Mutable planes a rerun of some samples must restore first: none when the body has
        no checked index (then no IndexError to place)."""
        if AT not in body_function(plugin):
            return ()
        return tuple(name for role, name in plugin.arg_spec if role.kind == "Mutable")

    def _populate(self, values, start, stop, po):
        """The pages the run writes faulted in at once (``eagle.prefault``), not one fault per page
        in the team's threads: the share ``[start, stop)`` of each sliceable output plane, the
        others whole."""
        for name in self.written:
            plane = values[name]
            populate(plane[self._rows(name, start, stop, po)] if name in self.plugin.sliceable else plane)

    def _rows(self, name, a, b, po):
        """The slice of plane ``name`` holding samples ``[a, b)``."""
        off = po if name in self.plugin.sliceable else 0
        return slice(a - off, b - off)

    def _first_bad(self, record, share, width, values, po, args, r0, saved):
        """The first sample in sample order with a bad index, given the ``record`` a laned or
        vectorised share raised.  Those run ``width`` samples together statement by statement (or
        loop by loop over the tile), so a later sample of the group may fail before an earlier one
        reaches its own bad index; every sample before the group finished.  The group's samples up
        to the reported one rerun one at a time, the Mutable planes restored first, and the first
        of them to fail is the answer (the reported one when the rerun does not compile)."""
        a, s = share[0], int(record[0])
        lo = a + (max(0, s - width + 1 - a) // ROW) * ROW       # on a row: where a group started
        for m, rows in (saved or {}).items():
            values[m][self._rows(m, lo, s + 1, po)] = rows[lo - a:s + 1 - a]
        one = _load(self.plugin, host_source(self.plugin, 1, self.polls))
        try:
            one._eagle_tile(lo, s + 1, po, new_progress(), *args, _NO_RECORD, r0)
        except NumbaError:
            return record
        except Exception as e:  # noqa: BLE001 - only the bounds record is used
            first = raised_record(e)
            return record if first is None else first
        return record


#: the threads now in ``_wait``: the one place where an exception raised into a thread from
#: outside (``eagle_dask.cancel``) stops its run cleanly; raised while the thread loads or
#: compiles a kernel, it could leave a lock held (a module's file lock, numba's)
_WAITING = set()


def waiting_for_team(ident: int) -> bool:
    """Whether thread ``ident`` is waiting for its team (in ``_wait``)."""
    return ident in _WAITING


def _wait(jobs, progs):
    """Wait for the team's jobs.  When this thread is interrupted (Ctrl-C), every chunk is told to
    stop (its loops poll the flag: ``eagle.interrupt``), the team is waited for (``STOP_WAIT``
    seconds at most), and the interruption goes on: a run stops within a poll of Ctrl-C and the
    process can exit."""
    me = threading.get_ident()
    try:
        _WAITING.add(me)
        pending = set(jobs)
        while pending:
            _, pending = futures.wait(pending, timeout=0.25)
    except BaseException:
        for prog in progs:
            stop(prog)
        futures.wait(jobs, timeout=STOP_WAIT)
        raise
    finally:
        _WAITING.discard(me)


def _load(plugin, source):
    """The host module of ``source``, loaded by one thread at a time (two entries of one kernel, in
    two threads, never see each other's module half executed; loading defines the compiled
    functions, it does not compile them)."""
    with _LOADING:
        return load_module("host", plugin, source)


def _failing_line(exc, module):
    """The line of ``module`` numba's message points at first (the body's, where it failed)."""
    name = os.path.basename(getattr(module, "__file__", "") or "")
    for m in re.finditer(r'File "([^"]+)", line (\d+)', str(exc)):
        if name and os.path.basename(m.group(1)) == name:
            return int(m.group(2))
    return None


def host_entry(plugin) -> HostEntry:
    """The one entry of ``plugin`` in this process: built by the first thread that asks (under a
    lock of its own key, so threads asking for other kernels do not wait), found by the others."""
    return _ENTRIES.get(plugin, HostEntry)
