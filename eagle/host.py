"""The host engine: samples ``[start, stop)`` of a plugin run by a team of CPU threads.

The share is cut into tiles (``tiles``: about four per thread, whole rows for a kernel with
cells); each tile is one call of the numba-compiled loop (``eagle.host_codegen``), which
releases the GIL, so the team's threads run in parallel.  A kernel that writes other samples
runs as one tile, in sample order.  The team waits for every tile before it raises, then raises
the first error in sample order.  The compiled entry is built once per process and plugin
(``host_entry``).
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import re
import threading
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
from numba.core.errors import NumbaError

from .access import CROSS_SAMPLE_WRITE
from .bounds import index_error, new_record, raised_record
from .cache import compile_lock
from .codegen import load_module, user_lines
from .errors import compile_error, kernel_error
from .host_codegen import host_source, simd_source
from .lanes import choose
from .simd import choose as simd_choose, refusal as simd_refusal
from .rows import ROW, check_row_start, identity_rows, row_span

_ENTRIES = {}
_LOCK = threading.Lock()
_POOL = None
MIN_TILE = 2048
#: seconds an interrupted run waits for its tiles to stop
STOP_WAIT = 10.0
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


def num_threads() -> int:
    """``EAGLE_NUM_THREADS``, else the context's ``thread_budget``, else the CPUs this process may use."""
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
    return cpu_count() if budget is None else budget


def _pool(threads: int) -> ThreadPoolExecutor:
    global _POOL
    with _LOCK:
        if _POOL is None or _POOL._max_workers < threads:
            if _POOL is not None:
                _POOL.shutdown(wait=False)
            _POOL = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="eagle-team")
        return _POOL


def tiles(start: int, stop: int, threads: int, rows: bool) -> list[tuple[int, int]]:
    """Cut ``[start, stop)`` into about 4 tiles per thread, whole rows when ``rows``."""
    count = stop - start
    if count <= 0:
        return []
    want = max(1, min(4 * threads if threads > 1 else 1, count // MIN_TILE or 1))
    size = -(-count // want)
    if rows:
        size = -(-size // ROW) * ROW
    return [(a, min(a + size, stop)) for a in range(start, stop, size)]


class HostEntry:
    """The compiled host loop of one plugin (one per process, keyed by the plugin's hash)."""

    def __init__(self, plugin, lanes: int | None = None, simd=None):
        """``lanes``: samples run in lockstep by the laned loop (``eagle.lanes``); None lets eagle
        choose (``EAGLE_HOST_LANES`` forces it), 1 runs one sample at a time.  ``simd``: None lets
        eagle choose the vectorised loop (``eagle.simd``; ``EAGLE_HOST_SIMD``), False never takes
        it, an ``eagle.simd.Options`` takes it with that tile, vector width and unroll.  A lane
        count given here runs the laned loop.

        ``path`` is what runs: ``"simd"``, ``"lanes"`` or ``"one"`` (one sample at a time);
        ``simd_reason`` why the vectorised loop does not (None when it does); ``lanes`` the samples
        in lockstep (a tile for ``"simd"``) and ``lanes_reason`` why one at a time."""
        self.plugin = plugin
        self.simd, self.simd_reason = simd_choose(plugin, lanes, simd)
        if self.simd is not None:
            self._load_simd()
        else:
            self._load(*choose(plugin, lanes))

    @property
    def path(self) -> str:
        return "simd" if self.simd is not None else "lanes" if self.lanes > 1 else "one"

    def _load(self, lanes, reason):
        self.lanes, self.lanes_reason = lanes, reason
        self.source = host_source(self.plugin, lanes)
        self.module = load_module("host", self.plugin, self.source)
        self.tile = self.module._eagle_tile

    def _load_simd(self):
        self.source = simd_source(self.plugin, self.simd)
        self.module = load_module("host", self.plugin, self.source)
        self.tile = self.module._eagle_tile
        self.lanes, self.lanes_reason = self.module.TILE_WIDTH, None

    def _compile(self, start, po, args, r0):
        """Compile the tile for these argument types.

        When one sample at a time does not compile either, the arguments are the kernel's problem:
        a short TypeError naming the kernel, its line and the types (``errors.compile_error``),
        and the entry keeps its path for later runs.  When only the faster path does not compile,
        the entry falls back visibly: the vectorised loop to the laned one, the laned body to one
        sample at a time (``simd_reason``, ``lanes_reason``)."""
        def attempt(module):
            with compile_lock(module):             # one process per host compiles, the others load
                module._eagle_tile(start, start, po, new_progress(), *args, new_record()[0], r0)

        try:
            return attempt(self.module)
        except NumbaError as e:
            failed = e
        one_source = host_source(self.plugin, 1)
        one = self.module if self.path == "one" else load_module("host", self.plugin, one_source)
        if one is not self.module:
            try:
                attempt(one)
            except NumbaError as e:
                failed = e
            else:
                if self.simd is not None:
                    self.simd, self.simd_reason = None, simd_refusal(failed)
                    self._load(*choose(self.plugin))
                    if self.lanes == 1:
                        return
                    try:
                        return attempt(self.module)
                    except NumbaError as e:
                        failed = e
                self._load(1, f"the laned body did not compile ({type(failed).__name__})")
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
        cut = tiles(start, stop, threads, bool(p.cells)) if threads > 1 else (
            [(start, stop)] if stop > start else [])
        if not cut:
            return rows
        # compile (or load from the disk cache) in this thread, before the team starts
        self._compile(start, po, args, r0)
        progs = [new_progress() for _ in cut]
        unused = new_record(len(cut))                  # the device's bounds record; the host raises
        errors = [None] * len(cut)

        def one(k):
            a, b = cut[k]
            try:
                self.tile(a, b, po, progs[k], *args, unused[k], r0)
            except Exception as e:  # noqa: BLE001 - re-raised below, first in sample order
                errors[k] = e

        def in_order():
            for k in range(len(cut)):
                one(k)
                if errors[k] is not None:
                    break

        # the tiles run on the team, never in this thread, which waits where Ctrl-C reaches it
        pool = _pool(max(threads, 1))
        if len(cut) == 1 or threads == 1:
            jobs = [pool.submit(in_order)]
        else:
            jobs = [pool.submit(one, k) for k in range(len(cut))]
        _wait(jobs, progs)
        for k, e in enumerate(errors):                # tiles in sample order: the first error wins
            if e is None:
                continue
            record = raised_record(e)
            if record is not None:
                raise kernel_error(p.name, index_error(p, record), f"sample {int(record[0])}") from None
            s = int(progs[k][0])
            where = f"sample {s}" if s >= 0 else f"a sample in [{cut[k][0]}, {cut[k][1]})"
            raise kernel_error(p.name, e, where) from e
        return rows


def new_progress() -> np.ndarray:
    """A tile's progress record: the sample a raising kernel is at, and the stop flag the
    generated loop polls between samples (``host_codegen.POLL``)."""
    return np.array([-1, 0], dtype=np.int64)


def _wait(jobs, progs):
    """Wait for the team's jobs.  When this thread is interrupted (Ctrl-C), every tile is told to
    stop at its next sample, the team is waited for (``STOP_WAIT`` seconds at most), and the
    interruption goes on: a run stops within about a poll of Ctrl-C and the process can exit."""
    try:
        pending = set(jobs)
        while pending:
            _, pending = futures.wait(pending, timeout=0.25)
    except BaseException:
        for prog in progs:
            prog[1] = 1
        futures.wait(jobs, timeout=STOP_WAIT)
        raise


def _failing_line(exc, module):
    """The line of ``module`` numba's message points at first (the body's, where it failed)."""
    name = os.path.basename(getattr(module, "__file__", "") or "")
    for m in re.finditer(r'File "([^"]+)", line (\d+)', str(exc)):
        if name and os.path.basename(m.group(1)) == name:
            return int(m.group(2))
    return None


def host_entry(plugin) -> HostEntry:
    with _LOCK:
        entry = _ENTRIES.get(plugin.key)
    if entry is None:
        entry = HostEntry(plugin)
        with _LOCK:
            entry = _ENTRIES.setdefault(plugin.key, entry)
    return entry
