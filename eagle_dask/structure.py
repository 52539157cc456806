"""DaskPartition: a plan's samples split across the workers of a Dask cluster.

Ranks are the workers sorted by name (see :mod:`eagle_dask.ranks`).  A run validates every
argument on the driver first (the same refusals as any structure that gathers outputs), cuts
the samples with ``eagle.rows.split`` (rows of 32 for a kernel with cells) and submits
one task per rank, pinned to its worker with a *loose* restriction: if that worker dies, the
scheduler recomputes the block on a survivor, from the same inputs, giving the same bits.
Blocks are written into the output planes at their offsets as they arrive; row partials are
placed by rank and folded by ``Plan.result`` in fixed order.
"""
from __future__ import annotations

import os
import sys
import threading
import time
import uuid
import warnings

import numpy as np

from eagle.bind import is_array
from eagle.rows import split
from eagle.structure import Structure

#: seconds a run waits with no worker at all before it gives up
DEFAULT_TIMEOUT = 60.0


def _progress_wanted(progress):
    if progress is not None:
        return bool(progress)
    if os.environ.get("EAGLE_DASK_PROGRESS", "").strip().lower() in ("0", "off", "no", "false"):
        return False
    from distributed.utils import is_kernel
    return is_kernel() or sys.stdout.isatty()


def _show_progress(futures):
    """distributed's progress bar: a widget in a notebook, a text bar (in a thread) in a terminal."""
    from distributed import progress
    from distributed.utils import is_kernel
    if is_kernel():
        try:
            import ipywidgets  # noqa: F401 - the notebook bar is a widget
        except ImportError:
            pass                     # no widgets: the text bar below prints into the cell
        else:
            from IPython.display import display
            display(progress(futures, multi=False))
            return None
    t = threading.Thread(target=progress, args=(futures,), kwargs={"notebook": False, "multi": False},
                         name="eagle-dask-progress", daemon=True)
    t.start()
    return t


class _DaskPartition(Structure):
    """Splits samples over Dask workers; each worker runs its share through ``inner``.

    ``DaskPartition`` uses the current client (``distributed.default_client()``);
    ``DaskPartition.on(client, ...)`` is the same structure bound to another client.
    """

    name = "dask_partition"
    public_name = "DaskPartition"
    crosses_processes = True

    client = None
    workers = None
    progress = None
    timeout = DEFAULT_TIMEOUT

    def on(self, client=None, *, workers=None, progress=None, timeout=DEFAULT_TIMEOUT):
        """This structure bound to ``client``.

        ``workers``: addresses or names of the workers to use as ranks (default all).
        ``progress``: show a progress bar (default: in a notebook or a terminal, unless
        ``EAGLE_DASK_PROGRESS=0``).  ``timeout``: seconds without any worker before a run
        raises ``TimeoutError`` instead of waiting for one.
        """
        bound = _BoundDaskPartition()
        bound.client = client
        bound.workers = list(workers) if workers is not None else None
        bound.progress = progress
        bound.timeout = float(timeout)
        return bound

    def get_client(self):
        if self.client is not None:
            return self.client
        from distributed import default_client
        try:
            return default_client()
        except ValueError:
            raise ValueError("DaskPartition found no Dask client: start one (eagle_dask.local_cluster(), "
                             "eagle_dask.initialize() or distributed.Client(...)) or pass "
                             "structure=DaskPartition.on(client)") from None

    def ranks(self, gpus=True):
        """``{rank: Rank(address, name, host, gpu)}`` of the workers this structure runs on."""
        from .ranks import worker_ranks
        return dict(enumerate(worker_ranks(self.get_client(), self.workers, gpus=gpus)))

    # -- the run -----------------------------------------------------------------------
    def _ranks_now(self, client):
        from .ranks import worker_ranks
        table = worker_ranks(client, self.workers)
        if not table:
            from distributed import TimeoutError as DaskTimeout
            try:
                client.wait_for_workers(1, timeout=self.timeout)
            except (DaskTimeout, TimeoutError):
                raise TimeoutError(f"DaskPartition: the cluster at {client.scheduler.address} has no worker "
                                   f"(waited {self.timeout:g} s); nothing was run") from None
            table = worker_ranks(client, self.workers)
        return table

    def execute(self, plan, bound, device):
        """Run every block on the workers; return the cells' row partials (full rows).

        Whole planes (those a kernel reads at other samples, or through ``x.shape``) travel
        once per run with ``client.scatter(..., broadcast=True)``: every worker holds a
        replica, so when a worker dies the survivors still hold the inputs, and a block the
        scheduler recomputes on one of them finds its data in place.  (Scattering to one
        worker would lose the data with that worker; scattered data has no lineage to
        recompute it from.)  Slices travel inside their task, which the scheduler keeps
        until the task is done, so a rescheduled block gets its slice again.
        """
        from distributed import wait
        from distributed import TimeoutError as DaskTimeout

        from .task import run_block

        plugin, n = plan.plugin, bound.n
        inner = plan.inner
        client = self.get_client()
        table = self._ranks_now(client)
        parts = split(n, len(table), rows=bool(plugin.cells))
        sliceable = plugin.sliceable
        fresh = {name: (plugin.roles[name].width, plugin.roles[name].out_dtype)
                 for name in plugin.names("Out") if name not in bound.supplied}
        arrays = {k: v for k, v in bound.values.items() if is_array(v) and k not in fresh}
        params = {k: v for k, v in bound.values.items() if not is_array(v)}
        whole = {k: v for k, v in arrays.items() if k not in sliceable}
        runs = [(r, p) for r, p in enumerate(parts) if p.count]
        rows_of = [None] * len(parts)
        if not runs:
            return self._rows(plugin, rows_of)
        tag = uuid.uuid4().hex[:12]
        whole_f = None
        futures = {}
        try:
            if whole:
                [whole_f] = client.scatter([whole], broadcast=True, hash=False)
            for r, p in runs:
                sliced = {k: np.ascontiguousarray(v[p.base:p.stop]) for k, v in arrays.items()
                          if k in sliceable}
                with warnings.catch_warnings():
                    # the slices ride in the task on purpose (see above): not a graph to slim down
                    warnings.filterwarnings("ignore", message="Sending large graph", category=UserWarning)
                    f = client.submit(run_block, plugin, inner, r, p.base, p.stop, n, sliced, whole_f, params,
                                      fresh, device, key=f"eagle-{plugin.name}-{tag}-rank{r}",
                                      workers=[table[r].address], allow_other_workers=True, pure=False)
                futures[f] = (r, p)
            bar = _show_progress(list(futures)) if _progress_wanted(self.progress) else None
            pending, alone_since = set(futures), None
            while pending:
                try:
                    done, pending = wait(pending, timeout=0.5, return_when="FIRST_COMPLETED")
                except (DaskTimeout, TimeoutError):
                    done = set()
                for f in done:
                    r, p = futures[f]
                    blocks, rows = self._outcome(f, plugin, r, table)
                    for name, block in blocks.items():
                        bound.values[name][p.base:p.stop] = block
                    rows_of[r] = rows
                if pending and not done:
                    if client.nthreads():
                        alone_since = None
                    elif alone_since is None:
                        alone_since = time.monotonic()
                    elif time.monotonic() - alone_since > self.timeout:
                        left = sorted(futures[f][0] for f in pending)
                        raise TimeoutError(
                            f"DaskPartition: every worker left the cluster and none came back within "
                            f"{self.timeout:g} s; the blocks of rank(s) {left} of kernel {plugin.name!r} "
                            "were not computed and the output planes are incomplete")
            if bar is not None:            # the bar counts the finished keys: release them after it ends
                bar.join(timeout=10.0)
        finally:
            for f in futures:
                f.release()
            if whole_f is not None:
                whole_f.release()
        return self._rows(plugin, rows_of)

    @staticmethod
    def _outcome(f, plugin, r, table):
        if f.status == "finished":
            return f.result()
        if f.status == "cancelled":
            raise RuntimeError(f"DaskPartition: the block of rank {r} of kernel {plugin.name!r} was cancelled "
                               "(its inputs were lost with every worker that held them, or the client closed)")
        exc = f.exception()
        from distributed.scheduler import KilledWorker
        if isinstance(exc, KilledWorker):
            raise RuntimeError(f"DaskPartition: the block of rank {r} of kernel {plugin.name!r} killed every "
                               f"worker that ran it ({exc}); it was given up") from None
        raise exc

    @staticmethod
    def _rows(plugin, rows_of):
        return {c: np.concatenate([np.zeros((0, 2))] + [rows[c] for rows in rows_of if rows is not None])
                for c in plugin.cells}

    def __repr__(self):
        return "eagle_dask.DaskPartition"


def _unbound():
    return DaskPartition


class _BoundDaskPartition(_DaskPartition):
    """DaskPartition bound to a client (made by ``DaskPartition.on``); pickles as DaskPartition."""

    def __repr__(self):
        return "eagle_dask.DaskPartition.on(...)"

    def __reduce__(self):
        return (_unbound, ())


DaskPartition = _DaskPartition()
