"""The numpy mode of a Dask run: one task per rank, the blocks gathered into the caller's planes.

``EagerRun`` submits one task per rank that has samples, pinned to its worker *loosely*
(``allow_other_workers=True``), and supervises them from the scheduler's own view until every
block is back:

* a finished block is written into the output planes at its offset, its row partials kept
  by rank (``Plan.result`` folds them in fixed order);
* the data takes the shortest road: a block on another host than the driver gets its share of
  the sliced planes sent from the driver straight to its worker (``send.scatter_to``, a
  dependency of its task: the task itself carries no plane), and its output blocks are fetched
  straight from that worker (``direct=True``); neither is relayed by the scheduler.  Whole
  planes are scattered to every worker; a worker on the driver's host reads and writes the
  driver's shared memory instead (``eagle_dask.shm``);
* a worker lost mid-block: its share is lost with it, the scheduler cancels the block, and the
  block is submitted again with its share sent anew from the driver's planes to a worker alive;
* every worker that held a block lost and the nannies restarting them: the scheduler keeps
  such a block in ``no-worker``, tied to the dead address even though the restriction is
  loose.  A poll that finds a block there while the cluster has workers again resubmits it
  to its rank's worker (by name), at most ``RESUBMITS`` times, re-scattering whole planes
  that were lost with the workers;
* a block that kills every worker that runs it ends as the scheduler's ``KilledWorker``
  (``distributed.scheduler.allowed-failures``) or, resubmitted ``RESUBMITS`` times, as a
  ``RuntimeError`` naming the kernel and the rank;
* no worker at all for ``timeout`` seconds: ``TimeoutError``;
* the client closed, or the run's futures cancelled: a ``RuntimeError`` naming the kernel
  (what a block that did not come back means: ``eagle_dask.block_faults``);
* any exception in the driver (``KeyboardInterrupt`` included) cancels the run's tasks; each
  block stops at the end of its current piece (``eagle_dask.task.run_pieces``).

Every wait is bounded by ``POLL`` seconds; between polls nothing but the scheduler is asked.

The fixed cost of a run is mostly distributed's batching: the client sends to the scheduler
at most one message per interval (10 ms; 2 ms for ``EagleClient``), and the scheduler to a
worker every 5 ms.  So a run's blocks are submitted in one message (``_submit_together``), and
its planes are copied into shared memory while they travel (``SharedRun.place``: the blocks
wait for it).  Releasing a finished run's futures at once puts a message on both streams just
before the next run's tasks, which then wait behind it; so a finished run's futures are held
(``Held``) and released in the next run's submission message, after its tasks, or ``HOLD``
seconds after the run, whichever comes first.

A block sent again after a try in shared memory always takes the messages: that try may still
be running and writing into its share of the run's regions (``_transport``).
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import threading
import time
import weakref
from concurrent.futures import CancelledError

import numpy as np

from eagle.bind import is_array
from eagle.prefault import populate_soon
from eagle.roles import OUTPUT_KINDS, TABLE
from eagle.rows import split

from . import block_faults as faults
from . import keys
from .done_watch import DoneWatch, kind
from .progress import end_progress, show_progress
from .ranks import worker_ranks
from .send import TRIES, scatter_everywhere, scatter_to
from .shared_run import SharedRun
from .tables import shared
from .task import PluginRef, run_block

#: seconds between looks at the scheduler's view of the blocks while none comes back
POLL = 0.5
#: seconds a finished run's futures (its blocks, its scattered planes) stay held at most
HOLD = 0.25
#: seconds the first fetch of finished blocks may take (doubling at each retry, at most the
#: structure's timeout), and the fetches a run tries before it gives up
GATHER = 2.0
GATHERS = 12
#: seconds the driver waits, once every block has finished, for the pages of the caller's output
#: planes it asked for once the inputs were placed (``eagle.prefault.populate_soon``); past it the
#: results are written anyway, faulting the pages that are left
PAGES = 1.0
#: times a block stuck on the address of a dead worker is resubmitted before the run gives up
RESUBMITS = 2
#: bytes per second below which a block's share is taken for stalled on its way: a send to one
#: worker is given ``stall_timeout`` seconds plus the share's bytes at this rate, then another
#: worker is tried (a worker hung or silent before the run starts)
SLOW_SEND = 10e6


class Held:
    """The futures of a client's last finished run, released with the next run's submission
    (``release_after_submit``) or ``HOLD`` seconds later (see the module docstring)."""

    _by_client = weakref.WeakKeyDictionary()
    _lock = threading.Lock()

    @classmethod
    def hold(cls, client, futures):
        with cls._lock:
            old = cls._by_client.get(client)
            cls._by_client[client] = futures
        cls._release(old)
        try:
            client.loop.add_callback(client.loop.call_later, HOLD, cls._expire, weakref.ref(client), futures)
        except Exception:  # noqa: BLE001 - a loop that is closing: release now
            cls.release_after_submit(client)

    @classmethod
    def release_after_submit(cls, client):
        with cls._lock:
            old = cls._by_client.pop(client, None)
        cls._release(old)

    @classmethod
    def _expire(cls, ref, futures):
        client = ref()
        if client is None:
            return
        with cls._lock:
            if cls._by_client.get(client) is not futures:
                return
            del cls._by_client[client]
        cls._release(futures)

    @staticmethod
    def _release(futures):
        for f in futures or ():
            try:
                f.release()
            except Exception:  # noqa: BLE001 - the client closed: nothing is held any more
                pass


class _Block:
    __slots__ = ("rank", "part", "future", "address", "whole", "tables", "inputs", "attempts", "shared", "remote")

    def __init__(self, rank, part):
        self.rank, self.part = rank, part
        self.future = self.address = self.whole = None      # whole: the scattered planes it was given
        self.tables = {}            # the table futures it was given (``eagle_dask.tables``)
        self.inputs = None          # the future of its share of the sliced planes, on its worker
        self.attempts = 0
        self.shared = False         # its planes went through shared memory (``eagle_dask.shm``)
        self.remote = False         # it ran on another host than its worker's: messages only


class EagerRun:
    """One numpy-mode run of ``plan`` on ``structure`` (a ``DaskPartition``)."""

    def __init__(self, structure, plan, bound, device):
        self.structure, self.plan, self.bound, self.device = structure, plan, bound, device
        self.plugin = plan.plugin
        self.name = plan.plugin.name

    # -- setting up ----------------------------------------------------------------------
    def run(self):
        plugin, bound = self.plugin, self.bound
        client = self.client = self.structure.get_client(self.name)
        self.table = self.structure.ranks_now(client)
        n = bound.n
        parts = split(n, len(self.table), rows=bool(plugin.cells))
        sliceable = plugin.sliceable
        self.fresh = {name: (plugin.roles[name].width, plugin.roles[name].out_dtype)
                      for name in plugin.names("Out") if name not in bound.supplied}
        arrays = {k: v for k, v in bound.values.items() if is_array(v) and k not in self.fresh}
        self.params = {k: v for k, v in bound.values.items() if not is_array(v)}
        # numpy tables: sent once, kept on the workers across runs (eagle_dask.tables)
        self.tables = {k: v for k, v in arrays.items()
                       if plugin.roles[k].kind == TABLE and isinstance(v, np.ndarray)}
        self.table_f = {}
        self.whole = {k: v for k, v in arrays.items() if k not in sliceable and k not in self.tables}
        self.sliced = {k: v for k, v in arrays.items() if k in sliceable}
        self.rows_of = [None] * len(parts)
        self.outs = {}
        self.blocks = [_Block(r, p) for r, p in enumerate(parts) if p.count]
        if not self.blocks:
            return rows_by_cell(plugin, self.rows_of)
        self.task = run_block
        self.ref = PluginRef(plugin)
        self.tag = keys.new_tag(self.structure.wants_progress())
        self.whole_f = None
        self.bar = None
        self._resubmitted = []
        self._old_whole = []
        self.failed_gathers = 0
        self.shared = SharedRun(client, [self.table[b.rank].address for b in self.blocks], bound, self.sliced,
                                self.whole, self.fresh, set(plugin.names(*OUTPUT_KINDS)), plugin.sliceable,
                                plugin.cells, place_later=True, timeout=self.structure.timeout)
        try:
            if keys.reports_progress(self.tag):       # before the blocks start: they report as they go
                self.bar = show_progress(client, self.tag, self.name, n, {b.rank: b.part.count for b in self.blocks})
            self._send_tables()
            self._submit_together([(b, self.table[b.rank].address) for b in self.blocks], release_held=True)
            self.shared.place()                 # while the blocks travel; they wait for it to read
            pages = populate_soon(v for k, v in bound.values.items()       # on the memory thread, as they run
                                  if k in bound.outputs and isinstance(v, np.ndarray))
            self._supervise()
            concurrent.futures.wait([pages], timeout=PAGES)
            self._write()                       # every block finished: only now into the caller's planes
            self.shared.finish([(b.part.base, b.part.stop) for b in self.blocks if b.shared],
                               twice=any(b.attempts for b in self.blocks))      # (see ``SharedRun.close``)
        except BaseException:
            self._cancel()
            self._release()
            self._end_bar(False)
            raise
        finally:
            self.shared.close()
        self._end_bar(True)
        if HOLD > 0:
            Held.hold(client, self._futures())
        else:
            self._release()
        return rows_by_cell(plugin, self.rows_of)

    def _send_tables(self):
        """Numpy tables to every worker, kept there across runs (``eagle_dask.tables``)."""
        if self.tables:
            self.table_f = shared(self.client, self.tables, self.structure.timeout, self.name)

    def _scatter(self):
        """Whole planes to every worker, for the blocks that do not read them from shared memory."""
        if self.whole:
            # every worker holds a replica: a block recomputed on a survivor finds its planes there
            if self.whole_f is not None:
                self._old_whole.append(self.whole_f)
            key = keys.name(self.name, "planes", f"{self.tag}-{len(self._old_whole)}")
            self.whole_f = scatter_everywhere(self.client, key, self.whole, self.structure.timeout,
                                              f"the whole planes {sorted(self.whole)} of kernel {self.name!r}")

    def _submit(self, b, address, loose=True):
        """Submit block ``b`` pinned to ``address``; ``loose``: the scheduler may run it elsewhere
        (not for a block taken from a silent worker, which the scheduler takes for an idle one)."""
        self._submit_together([(b, address)], loose)

    def _submit_together(self, targets, loose=True, release_held=False):
        """Submit the blocks ``targets`` ([(block, address)]) in one message to the scheduler:
        their planes placed and shares sent first (blocking), then every ``client.submit`` in
        one turn of the client's event loop.  Submitted one by one from this thread, each would
        be sent on its own, and the client sends at most one message per 10 ms: the second
        block of a run would start 10 ms after the first."""
        calls = []
        for b, address in targets:
            p = b.part
            sliced, whole_f, fresh, shared, address = _transport(self, b, address)
            b.address, b.whole, b.tables = address, whole_f, self.table_f
            calls.append((b, (self.task, self.ref, self.plan.inner, b.rank, p.base, p.stop, self.bound.n,
                              sliced, whole_f, {**self.params, **self.table_f}, fresh, self.device, shared),
                          dict(key=keys.block_key(self.name, self.tag, b.rank, b.attempts), workers=[address],
                               allow_other_workers=loose, pure=False)))

        async def submit_all():
            for b, args, kwargs in calls:
                b.future = self.client.submit(*args, **kwargs)
            if release_held:
                Held.release_after_submit(self.client)

        self.client.sync(submit_all)

    # -- supervising -----------------------------------------------------------------------
    def _supervise(self):
        pending = {b.future: b for b in self.blocks}
        waits = DoneWatch(self.shared, kind(self.plugin, self.bound.n, self.params, len(self.blocks)))
        watch, silence = StuckWatch(self), StallWatch(self)
        while pending:
            done, early = waits.wait(pending, POLL)
            if done or early:
                with self._scheduler_calls():
                    again = self._collect([pending.pop(f) for f in done], [pending.pop(b.future) for b in early])
                pending.update({b.future: b for b in [*self._resubmitted, *again]})
            else:
                with self._scheduler_calls():
                    stuck, live = watch.stuck(list(pending.values()))
                    stalled, others = silence.stalled(list(pending.values()))
                again = [(b, live, True) for b in stuck] + [(b, others, False) for b in stalled if b not in stuck]
                for b, to, loose in again:
                    del pending[b.future]
                    self._again(b, to, loose)
                    pending[b.future] = b
        if not any(b.attempts for b in self.blocks):
            waits.finished()                    # the next run of its kind polls near its end only

    def _collect(self, blocks, early=()):
        """Write finished blocks; raise a block's error; resubmit blocks whose inputs were lost.
        ``early``: blocks done in the arena whose tasks have not reported yet (``DoneWatch``).

        Returns the blocks still to wait for: those whose results could not be fetched within
        the gather's bound (their data lost with a worker after they finished: the scheduler
        recomputes them, or keeps them stuck for ``StuckWatch`` to find)."""
        self._resubmitted = []
        finished = [b for b in blocks if b.future.status == "finished"] + list(early)
        others = [b for b in blocks if b.future.status != "finished"]
        again = []
        for b in (b for b in finished if b.shared):      # written in place, rows included: nothing to fetch
            self._done(b, {}, self.shared.rows_of(b.part.base, b.part.stop))
        finished = [b for b in finished if not b.shared]
        if finished:
            from distributed import TimeoutError as DaskTimeout
            bound = min(self.structure.timeout, GATHER * 2 ** min(self.failed_gathers, 8))
            try:
                # straight from the workers that hold them, not relayed by the scheduler
                results = self.client.sync(self.client._gather, [b.future for b in finished], errors="raise",
                                           direct=True, callback_timeout=bound)
            except (DaskTimeout, TimeoutError, CancelledError):
                results = None
            if results is None:
                self.failed_gathers += 1
                if self.client.status != "running":
                    others = blocks
                elif self.failed_gathers >= GATHERS:
                    raise TimeoutError(
                        f"DaskPartition: the blocks of rank(s) {sorted(b.rank for b in finished)} of kernel "
                        f"{self.name!r} finished, but could not be fetched from the workers ({GATHERS} tries, the "
                        f"last one {bound:g} s)")
                else:
                    again = finished
            else:
                for b, (out, rows) in zip(finished, results):
                    self._done(b, out, rows)
        for b in others:
            if b.future.status == "error":
                if faults.ran_elsewhere(self, b):
                    continue
                faults.failed(self, b)
            faults.cancelled(self, b)
        return again

    def _done(self, b, out, rows):
        """A finished block: its row partials kept; its blocks of the planes eagle made (fresh
        ``Out``s) written at its offset now, those of the caller's planes kept for ``_write``."""
        supplied = self.bound.supplied
        self._put(b.part, {k: v for k, v in out.items() if k not in supplied})
        self.outs[b.rank] = (b.part, {k: v for k, v in out.items() if k in supplied})
        self.rows_of[b.rank] = rows
        if self.bar is not None:
            self.bar.finished(b.rank)

    def _write(self):
        """The blocks of the caller's planes that came as messages written at their offsets, once
        every block has finished: a run that raises leaves the caller's planes as they were, as the
        shared-memory blocks' ``SharedRun.finish`` does."""
        for part, out in self.outs.values():
            self._put(part, out)

    def _put(self, part, out):
        """Output blocks ``out`` ({plane: block}) written at ``part``'s samples."""
        for name, block in out.items():
            self.bound.values[name][part.base:part.stop] = block

    def left(self):
        """The ranks whose blocks have not come back."""
        return sorted(b.rank for b in self.blocks if self.rows_of[b.rank] is None)

    @contextlib.contextmanager
    def _scheduler_calls(self):
        """Calls to the scheduler: a connection closed under them because the scheduler is gone
        (``CommClosedError``, an ``OSError``) ends the run in ``block_faults.scheduler_lost``'s words."""
        try:
            yield
        except OSError as e:
            if self.client.status == "running" and self.client.scheduler.address not in str(e):
                raise
            raise faults.scheduler_lost(self) from None

    def _again(self, b, live=None, loose=True):
        """Resubmit ``b`` to its rank's worker now (by name; else a worker by position)."""
        b.attempts += 1
        if b.attempts > RESUBMITS:
            raise RuntimeError(
                f"DaskPartition: the block of rank {b.rank} of kernel {self.name!r} was lost with every worker "
                f"that ran it, {b.attempts} times (the workers died or were restarted while it ran: a crash "
                "in the block, or the workers were killed); it was given up")
        old = b.future
        live = live or self._live()
        name = self.table[b.rank].name
        target = next((r for r in live if r.name == name), None) or live[b.rank % len(live)]
        self.client.cancel([old])
        old.release()
        self._submit(b, target.address, loose)

    def _live(self):
        """Every worker of the cluster now (waiting, at most ``timeout`` seconds, for one)."""
        return self.structure.ranks_now(self.client, every=True)

    # -- ending ----------------------------------------------------------------------------
    def _cancel(self):
        """Cancel every block still running (an error, or ``KeyboardInterrupt``, in the driver)."""
        if self.client.status != "running":
            return
        left = self.running()
        if left:
            try:
                self.client.cancel(left)
            except Exception:  # noqa: BLE001 - the client may be closing: nothing left to cancel
                pass

    def running(self):
        """The futures of the blocks not done yet."""
        return [b.future for b in getattr(self, "blocks", ()) if b.future is not None and not b.future.done()]

    def _end_bar(self, complete):
        if self.bar is not None:
            end_progress(self.tag, self.bar, complete)
            self.bar = None

    def _futures(self):
        return [f for f in [*(b.future for b in self.blocks), *(b.inputs for b in self.blocks), self.whole_f,
                            *self._old_whole] if f is not None]

    def _release(self):
        Held._release(self._futures())


class StuckWatch:
    """The blocks of ``run`` the scheduler holds in ``no-worker`` although workers are back
    (to resubmit), and how long the cluster has been without a worker for them (to give up)."""

    def __init__(self, run):
        self.run = run
        self.alone_since = None         # when the cluster was last seen with no worker at all
        self.held_since = None          # when a block was first seen held although its worker is there

    def stuck(self, blocks):
        """(blocks to resubmit, the live ranks) of ``blocks``; raises ``TimeoutError`` once the
        cluster has had no worker at all, or held blocks its workers would not take, for
        ``timeout`` seconds."""
        run = self.run
        client, timeout = run.client, run.structure.timeout
        if client.status != "running":
            return [], None                             # the next wait says what happened
        states = client.sync(client.scheduler.get_task_status, keys=[b.future.key for b in blocks])
        waiting = [b for b in blocks if states.get(b.future.key) == "no-worker"]
        if not waiting:
            self.alone_since = None
            return [], None
        live = worker_ranks(client)
        now = time.monotonic()
        if live:
            self.alone_since = None
            addresses = {r.address for r in live}
            held = [b for b in waiting if b.address in addresses]     # its worker is there, and takes nothing
            if not held:
                self.held_since = None
            elif self.held_since is None:
                self.held_since = now
            elif now - self.held_since > timeout:
                raise TimeoutError(
                    f"DaskPartition: the blocks of rank(s) {sorted(b.rank for b in held)} of kernel "
                    f"{run.name!r} found no worker to run them for {timeout:g} s although "
                    "the cluster has workers (paused, for memory?); the output planes are incomplete")
            return [b for b in waiting if b.address not in addresses], live
        if self.alone_since is None:
            self.alone_since = now
        elif now - self.alone_since > timeout:
            raise TimeoutError(
                f"DaskPartition: every worker left the cluster and none came back within "
                f"{timeout:g} s; the blocks of rank(s) {run.left()} of kernel {run.name!r} "
                "were not computed and the output planes are incomplete")
        return [], None


class StallWatch:
    """The blocks of ``run`` whose worker the scheduler has not heard from (no heartbeat) for the
    structure's ``stall_timeout``: a hung host (its processes stopped) or one gone silent on the
    network.  They are rerun on the workers still heard from; distributed itself would wait for its
    ``worker-ttl`` (5 minutes by default) or a TCP timeout.  A worker's silence is measured on the
    driver's clock, from when its last heartbeat time stopped changing."""

    def __init__(self, run):
        self.run = run
        self.heard = {}                 # address -> (its last heartbeat, when the driver saw it change)
        self.alone_since = None         # when every worker was last seen silent

    def stalled(self, blocks):
        """(blocks whose worker is silent, the ranks of the workers still heard from); raises
        ``TimeoutError`` once every worker has been silent for ``stall_timeout`` more seconds."""
        run = self.run
        client, bound = run.client, run.structure.stall_timeout
        if client.status != "running":
            return [], None
        now = time.monotonic()
        workers = client.sync(client.scheduler.identity, n_workers=-1).get("workers", {})
        silent = set()
        for address, info in workers.items():
            last = info.get("last_seen")
            seen = self.heard.get(address)
            if seen is None or seen[0] != last:
                self.heard[address] = (last, now)
            elif now - seen[1] > bound:
                silent.add(address)
        waiting = [b for b in blocks if b.address in silent]
        if not waiting:
            self.alone_since = None
            return [], None
        others = [r for r in worker_ranks(client) if r.address not in silent]
        if others:
            self.alone_since = None
            return waiting, others
        if self.alone_since is None:
            self.alone_since = now
        elif now - self.alone_since > bound:
            raise TimeoutError(
                f"DaskPartition: the workers {sorted(silent)} running kernel {run.name!r} sent no heartbeat for "
                f"{bound:g} s (stall_timeout) and no other worker could take the blocks of rank(s) {run.left()}; "
                "the output planes are incomplete")
        return [], None


def rows_by_cell(plugin, rows_of):
    """``{cell: row partials}`` of every rank's block, in rank order (``rows_of[rank]``, None for
    a rank without samples)."""
    return {c: np.concatenate([np.zeros((0, 2))] + [rows[c] for rows in rows_of if rows is not None])
            for c in plugin.cells}


# -- transport: shared memory on the driver's host (``eagle_dask.shm``), messages elsewhere ------
def _transport(run, b, address):
    """(sliced planes -- the future of the block's share, or ``{}`` --, scattered whole planes, Outs
    to allocate, SharedPlanes or None, the worker to run it) of block ``b`` of ``run`` sent to
    ``address``."""
    if b.attempts and b.shared:
        # sent again after a try in shared memory, which may still be running (a stopped host that
        # goes on, a worker the scheduler declared dead): that try writes into the run's regions
        # until it is stopped, so this one takes the messages -- its share from the caller's
        # untouched planes, its outputs into the driver's -- and reads or writes none of them
        b.remote = True
    if b.inputs is not None:
        b.inputs.release()          # the share of an earlier submission: sent anew where the block goes
        b.inputs = None
    shared = run.shared.for_block(address, b.remote)
    b.shared = shared is not None
    if b.shared:
        return {}, None, {}, shared, address
    if run.whole and run.whole_f is None:
        run._scatter()
    share, address = _send_share(run, b, address)
    return share, run.whole_f, run.fresh, None, address


def _send_share(run, b, address):
    """(the future of block ``b``'s share of the sliced planes, the worker holding it): sent from
    the driver's planes straight to ``address`` or, when that worker does not take it, to another
    worker of the cluster -- at most ``TRIES`` workers, within the run's ``timeout``, each given
    ``stall_timeout`` plus the share's bytes at ``SLOW_SEND``."""
    share = {k: np.ascontiguousarray(v[b.part.base:b.part.stop]) for k, v in run.sliced.items()}
    if not share:
        return {}, address
    size = sum(v.nbytes for v in share.values())
    start, timeout, tried = time.monotonic(), run.structure.timeout, []
    one = run.structure.stall_timeout + size / SLOW_SEND
    while len(tried) < TRIES and time.monotonic() - start < timeout:
        key = keys.share_key(run.name, run.tag, b.rank, b.attempts, len(tried))
        b.inputs = scatter_to(run.client, key, share, address, min(one, timeout - (time.monotonic() - start)))
        if b.inputs is not None:
            return b.inputs, address
        tried.append(address)
        others = [r.address for r in worker_ranks(run.client) if r.address not in tried]
        if not others:
            break
        address = others[b.rank % len(others)]
    cls = TimeoutError if time.monotonic() - start >= timeout else RuntimeError
    raise cls(f"DaskPartition: the share of rank {b.rank} ({size / 1e6:.0f} MB of the sliced planes "
              f"{sorted(share)}) of kernel {run.name!r} could not be sent to worker(s) {tried} within "
              f"timeout={timeout:g} s (gone, paused, or not reachable from the driver); the output planes "
              "are incomplete: rerun, or give DaskPartition.on(timeout=...) more")
