"""DaskPartition: a plan's samples split across the workers of a Dask cluster.

Two modes, chosen by the planes of each run:

* **numpy planes** (the numpy mode, ``eagle_dask.eager``): ranks are the workers sorted by
  name (see :mod:`eagle_dask.ranks`).  A run validates every argument on the driver first (the
  same refusals as any structure that gathers outputs), cuts the samples with
  ``eagle.rows.split`` (rows of 32 for a kernel with cells) and submits one task per rank,
  pinned to its worker with a *loose* restriction; blocks are written into the output planes
  at their offsets as they arrive; row partials are placed by rank and folded by
  ``Plan.result`` in fixed order.
* **any plane a dask array** (the lazy mode, ``eagle_dask.arrays``): the run returns dask
  arrays at once, one task per block of the inputs' own chunks, the cells folded by one final
  task in row order.

With an asynchronous client (``Client(asynchronous=True)``, used from its event loop) a
numpy-mode run returns an awaitable (``await plan.run(...)``, see ``eagle_dask.awaiting``);
the lazy mode returns dask arrays as always (``await client.compute(...)``).
"""
from __future__ import annotations

import math

import numpy as np

from eagle.rows import is_count
from eagle.structure import Structure

from .arrays import bind_lazy, execute_lazy, has_dask, plan_result
from .awaiting import Pending, in_event_loop, open_client
from .eager import EagerRun
from .lazy_until_done import DaskState
from .progress import progress_wanted
from .ranks import worker_ranks

#: seconds a run waits with no worker at all before it gives up
DEFAULT_TIMEOUT = 60.0
#: seconds a worker running a block may go unheard (no heartbeat reaches the scheduler) before its
#: blocks are rerun on other workers (``DaskPartition.on(stall_timeout=...)``)
DEFAULT_STALL = 15.0


class _DaskPartition(Structure):
    """Splits samples over Dask workers; each worker runs its share through ``inner``.

    ``DaskPartition`` uses the current client (``distributed.default_client()``);
    ``DaskPartition.on(client, ...)`` is the same structure bound to another client.
    """

    name = "dask_partition"
    public_name = "DaskPartition"
    crosses_processes = True
    settings_hint = "a client, workers, timeout or min_block go to DaskPartition.on(client, ...)"

    client = None
    workers = None
    progress = None
    timeout = DEFAULT_TIMEOUT
    stall_timeout = DEFAULT_STALL
    min_block = None

    def on(self, client=None, *, workers=None, progress=None, timeout=DEFAULT_TIMEOUT, min_block=None,
           stall_timeout=DEFAULT_STALL):
        """This structure bound to ``client``.

        ``workers``: addresses or names of the workers to use as ranks (default all).
        ``progress``: show a progress bar (default: in a notebook or a terminal, unless
        ``EAGLE_DASK_PROGRESS=0``).  ``timeout``: seconds without any worker before a run
        raises ``TimeoutError`` instead of waiting for one (a finite number > 0).
        ``min_block``: the samples a lazy run's block holds at least, neighbouring chunks joined
        (default ``eagle_dask.arrays.MIN_BLOCK``; 1 keeps the chunks' own boundaries).
        ``stall_timeout``: seconds a numpy-mode block's worker may go unheard by the scheduler (a
        hung or silent host) before the block is rerun on another worker, with the same bits.
        """
        bound = _BoundDaskPartition()
        bound.client = _check_client(client)
        bound.workers = _check_workers(workers)
        bound.progress = _check_progress(progress)
        bound.timeout = _check_timeout(timeout)
        bound.stall_timeout = _check_timeout(stall_timeout, "stall_timeout")
        bound.min_block = _check_min_block(min_block)
        return bound

    def get_client(self, kernel=None):
        """The client runs go to: ``on(client)``'s, else the current one; refused when closed."""
        if self.client is not None:
            return open_client(self.client, kernel)
        from distributed import default_client
        try:
            return open_client(default_client(), kernel)
        except ValueError:
            raise ValueError("DaskPartition found no Dask client: start one (eagle_dask.local_cluster(), "
                             "eagle_dask.initialize() or distributed.Client(...)) or pass "
                             "structure=DaskPartition.on(client)") from None

    def ranks(self, gpus=True):
        """``{rank: Rank(address, name, host, gpu)}`` of the workers this structure runs on."""
        return dict(enumerate(worker_ranks(self.get_client(), self.workers, gpus=gpus)))

    # -- the run -----------------------------------------------------------------------
    def result(self, plan, bound, rows):
        """A lazy run returns dask arrays (``eagle_dask.arrays``); a numpy run, numpy planes (an
        awaitable of them with an asynchronous client)."""
        if isinstance(rows, Pending):
            return rows.result(lambda r: plan_result(plan, bound, r))
        return plan_result(plan, bound, rows)

    def bind(self, plan, planes, device):
        """Any plane a dask array: the lazy mode's rules (``eagle_dask.arrays.bind_lazy``);
        else those of every structure that gathers outputs."""
        if has_dask(planes):
            return bind_lazy(plan, planes, device)
        return super().bind(plan, planes, device)

    def until_done_state(self, plan, planes):
        """Dask planes: ``run_until_done`` keeps its state on the cluster (``eagle_dask.lazy_until_done``)."""
        return DaskState(self, plan, planes) if has_dask(planes) else None

    def execute(self, plan, bound, device):
        """Lazy: build the graph (``eagle_dask.arrays``).  numpy: run every block on the workers
        (``eagle_dask.eager``); return the cells' row partials (full rows)."""
        if getattr(bound, "lazy", False):
            return execute_lazy(plan, bound, device)
        run = EagerRun(self, plan, bound, device)
        client = self.get_client(plan.plugin.name)
        if in_event_loop(client):
            return Pending(client, run)
        return run.run()

    def ranks_now(self, client, every=False):
        """The ranks now (``every``: all the cluster's workers), waiting at most ``timeout``
        seconds for a first worker."""
        keep = None if every else self.workers
        table = worker_ranks(client, keep)
        if not table:
            from distributed import TimeoutError as DaskTimeout
            try:
                client.wait_for_workers(1, timeout=self.timeout)
            except (DaskTimeout, TimeoutError):
                raise TimeoutError(f"DaskPartition: the cluster at {client.scheduler.address} has no worker "
                                   f"(waited {self.timeout:g} s); nothing was run") from None
            table = worker_ranks(client, keep)
        return table

    def wants_progress(self):
        """Whether a run shows a progress bar (``on(progress=...)``, else the environment's default)."""
        return progress_wanted(self.progress)

    def __repr__(self):
        return "eagle_dask.DaskPartition"


# -- what DaskPartition.on takes ----------------------------------------------------------
def _check_client(client):
    if client is None:
        return None
    from distributed import Client
    if not isinstance(client, Client):
        raise TypeError(f"DaskPartition.on(client={client!r}): client is a distributed.Client (or None for the "
                        "current one), not a " + type(client).__name__)
    return client


def _check_workers(workers):
    if workers is None:
        return None
    if isinstance(workers, (str, bytes)) or is_count(workers):
        workers = [workers]
    try:
        names = list(workers)
    except TypeError:
        raise TypeError(f"DaskPartition.on(workers={workers!r}): workers is a list of worker addresses or names "
                        "(or None for every worker)") from None
    bad = [w for w in names if not (isinstance(w, str) or is_count(w))]
    if bad:
        raise TypeError(f"DaskPartition.on(workers=...): {bad[0]!r} is not a worker address or name "
                        "(a str such as 'tcp://127.0.0.1:40811', or a worker's name)")
    if not names:
        raise ValueError("DaskPartition.on(workers=[]) names no worker: leave workers out to use every worker")
    return [int(w) if is_count(w) else w for w in names]


def _check_progress(progress):
    if progress is None or isinstance(progress, (bool, np.bool_)):
        return None if progress is None else bool(progress)
    raise TypeError(f"DaskPartition.on(progress={progress!r}): progress is True, False or None (None: a bar "
                    "in a notebook or a terminal)")


def _check_min_block(min_block):
    if min_block is None:
        return None
    if not is_count(min_block) or int(min_block) < 1:
        raise ValueError(f"DaskPartition.on(min_block={min_block!r}): min_block is the samples a lazy block holds "
                         "at least: an integer >= 1 (or None for the default)")
    return int(min_block)


_SECONDS = {"timeout": "the seconds a run waits while the cluster has no worker before it raises TimeoutError",
            "stall_timeout": "the seconds a block's worker may go unheard before the block is rerun elsewhere"}


def _check_timeout(timeout, name="timeout"):
    what = f"{name} is {_SECONDS[name]}: a finite number > 0"
    if isinstance(timeout, (bool, np.bool_)) or not isinstance(timeout, (int, float, np.integer, np.floating)):
        raise TypeError(f"DaskPartition.on({name}={timeout!r}): {what}, not a {type(timeout).__name__}")
    value = float(timeout)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"DaskPartition.on({name}={timeout!r}): {what}")
    return value


def _unbound():
    return DaskPartition


class _BoundDaskPartition(_DaskPartition):
    """DaskPartition bound to a client (made by ``DaskPartition.on``); pickles as DaskPartition."""

    def __repr__(self):
        return "eagle_dask.DaskPartition.on(...)"

    def __reduce__(self):
        return (_unbound, ())


DaskPartition = _DaskPartition()
