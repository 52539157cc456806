"""Clusters on this machine or under ``mpirun``, bound to loopback unless told otherwise.

* :func:`local_cluster` -- the embedded default: a ``LocalCUDACluster`` (one worker per GPU)
  where dask-cuda and a GPU are present, else a ``LocalCluster`` of processes; scheduler,
  workers and dashboard on 127.0.0.1.  The returned client owns its cluster.
* :func:`initialize` -- dask-mpi's bootstrap (rank 0 the scheduler, rank 1 the script, ranks
  2+ workers), on loopback when every rank is on one host, one GPU per worker rank.
* :func:`serve` -- the same ranks as a cluster for others to join (``eagle-dask cluster``):
  rank 0 the scheduler (writing a scheduler file), every other rank a worker.
"""
from __future__ import annotations

import asyncio
import atexit
import inspect
import logging
import os
import sys

from eagle.host import cpu_count

from .ranks import gpu_ids

LOOPBACK = "127.0.0.1"


def cuda_workers_available() -> bool:
    """dask-cuda importable and a GPU present."""
    if not gpu_ids():
        return False
    try:
        import dask_cuda  # noqa: F401
    except ImportError:
        return False
    return True


def _owning_client(cluster):
    from distributed import Client

    class OwningClient(Client):
        """A client that closes its cluster when it closes (once)."""

        _eagle_cluster_closed = False

        def close(self, *args, **kwargs):
            try:
                return super().close(*args, **kwargs)
            finally:
                if not self._eagle_cluster_closed:
                    self._eagle_cluster_closed = True
                    cluster.close()

        def __del__(self):
            # at garbage collection, closing the cluster can deadlock a client being started in
            # the same thread (distributed's LoopRunner lock); the cluster's own finaliser closes it
            self._eagle_cluster_closed = True
            super().__del__()

    return OwningClient(cluster)


def _count(value, what, allowed):
    """``value`` as an int >= 1, or None; else a TypeError/ValueError that says what is allowed."""
    from eagle.rows import is_count
    if value is None:
        return None
    if not is_count(value):
        raise TypeError(f"local_cluster({what}={value!r}): {what} is {allowed}, not a {type(value).__name__}")
    if value < 1:
        raise ValueError(f"local_cluster({what}={value!r}): {what} is {allowed}")
    return int(value)


def local_cluster(n_workers=None, threads_per_worker=None, **kwargs):
    """Start a cluster on this machine and return a ``Client`` that owns it.

    With dask-cuda and a GPU: ``LocalCUDACluster`` (one worker per GPU, one thread each).
    Otherwise a ``LocalCluster`` of processes: ``n_workers`` (default one per CPU) of
    ``threads_per_worker`` threads (default 1); each worker's eagle thread team takes that many
    threads (``EAGLE_NUM_THREADS``).  Both counts are integers >= 1 (or None); workers are
    processes (``processes=False`` is refused).  Keyword arguments go to the cluster.
    Scheduler, workers and dashboard (its HTTP server, at a free port) listen on 127.0.0.1
    unless ``host=``/``dashboard_address=`` say otherwise.
    """
    n_workers = _count(n_workers, "n_workers", "the number of worker processes: an integer >= 1, or None for "
                                               "one per CPU (one per GPU with dask-cuda)")
    threads = _count(threads_per_worker, "threads_per_worker", "the threads of each worker (and of its eagle "
                                                               "thread team): an integer >= 1, or None for 1") or 1
    processes = kwargs.pop("processes", True)
    if processes is not True:
        raise ValueError(f"local_cluster(processes={processes!r}): eagle's local cluster runs its workers as "
                         "processes (each compiles the kernels once and runs its own thread team); for "
                         "workers in this process, start distributed.LocalCluster(processes=False) yourself "
                         "and pass structure=DaskPartition.on(Client(cluster))")
    kwargs.setdefault("host", LOOPBACK)
    kwargs.setdefault("dashboard_address", f"{LOOPBACK}:0")
    env = dict(kwargs.pop("env", None) or {})
    env.setdefault("EAGLE_NUM_THREADS", str(threads))
    if cuda_workers_available():
        from dask_cuda import LocalCUDACluster
        cluster = LocalCUDACluster(n_workers=n_workers, threads_per_worker=threads, env=env, **kwargs)
    else:
        from distributed import LocalCluster
        kwargs.setdefault("silence_logs", logging.ERROR)
        cluster = LocalCluster(n_workers=n_workers or cpu_count(), threads_per_worker=threads, processes=True,
                               env=env, **kwargs)
    return _owning_client(cluster)


# -- under mpirun ------------------------------------------------------------------------
def loopback_interface() -> str:
    """The name of the interface holding 127.0.0.1 (``lo`` on Linux, ``lo0`` on macOS)."""
    try:
        import psutil
        for name, addrs in psutil.net_if_addrs().items():
            if any(getattr(a, "address", None) == LOOPBACK for a in addrs):
                return name
    except ImportError:
        pass
    return "lo0" if sys.platform == "darwin" else "lo"


def _network(comm, interface, dashboard_address):
    """(interface, dashboard address): loopback where every rank is on one host."""
    from mpi4py import MPI
    hosts = comm.allgather(MPI.Get_processor_name())
    one_host = len(set(hosts)) == 1
    if interface is None and one_host:
        interface = loopback_interface()
    if dashboard_address is None:
        dashboard_address = f"{LOOPBACK}:0" if interface == loopback_interface() else ":8787"
    return interface, dashboard_address


def _pin_gpu(comm, first_worker):
    """Give each worker rank one GPU from its local rank among the workers of its host.

    Collective (every rank calls it).  Sets ``CUDA_VISIBLE_DEVICES`` before the worker starts;
    returns the GPU id, or None without GPUs.
    """
    from mpi4py import MPI
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        ranks = node.allgather(comm.Get_rank())
    finally:
        node.Free()
    me = comm.Get_rank()
    devices = gpu_ids()
    if me < first_worker or not devices:
        return None
    local = sorted(r for r in ranks if r >= first_worker).index(me)
    gpu = devices[local % len(devices)]
    os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    return gpu


def _worker_class(worker_class, nthreads, worker_options, gpu):
    opts = dict(worker_options or {})
    if worker_class is None:
        if gpu is not None and cuda_workers_available():
            return "dask_cuda.CUDAWorker", opts, 1
        return "distributed.Worker", opts, nthreads
    return worker_class, opts, nthreads


def _quiet(level):
    for name in ("distributed", "tornado"):
        logging.getLogger(name).setLevel(level)


def _quiet_shutdown(client):
    """At exit: stop the scheduler and workers, without the log noise of closing connections."""
    _quiet(logging.CRITICAL)
    try:
        client.shutdown()
    except Exception:  # noqa: BLE001 - the cluster may already be gone
        pass


def initialize(interface=None, nthreads=1, *, dashboard=True, dashboard_address=None, local_directory=None,
               memory_limit="auto", protocol=None, worker_class=None, worker_options=None, comm=None,
               exit=True, timeout=120, quiet=True):
    """dask-mpi's bootstrap: rank 0 runs the scheduler, rank 1 returns a ``Client``, ranks 2+ are workers.

    Call it under ``if __name__ == "__main__":`` in the script ``mpirun`` starts.  Where every
    rank is on one host, scheduler, workers and dashboard listen on 127.0.0.1 (dask-mpi's own
    defaults are the public interface and a dashboard on every interface); across hosts, pass
    ``interface=`` as dask-mpi takes it.  Each worker rank sees one GPU (``CUDA_VISIBLE_DEVICES``
    from its local rank) and runs dask-cuda's ``CUDAWorker`` (one thread) where importable,
    a plain worker of ``nthreads`` threads otherwise.  Returns on rank 1 once every worker rank
    has joined; the scheduler and workers end when the script does (``exit=False``: they
    return None instead of exiting).  ``quiet``: distributed logs warnings and errors only (its
    INFO lines, and the connection tracebacks it logs as INFO when the cluster stops, are dropped).
    """
    caller = inspect.currentframe().f_back
    if caller is not None and caller.f_globals.get("__name__") != "__main__":
        raise RuntimeError(
            "eagle_dask.initialize() must be called under `if __name__ == \"__main__\":` in the script "
            f"mpirun starts (it was called from module {caller.f_globals.get('__name__')!r}): worker "
            "processes re-import the script, and every rank but one runs the cluster instead of the script")
    if comm is None:
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
    size = comm.Get_size()
    if size < 3:
        raise RuntimeError(
            f"eagle_dask.initialize() needs at least 3 MPI ranks (rank 0 the scheduler, rank 1 this script, "
            f"ranks 2+ the workers), and the world has {size}: launch with mpirun -np 3 or more")
    import dask_mpi
    if quiet:
        _quiet(logging.WARNING)
    interface, dashboard_address = _network(comm, interface, dashboard_address)
    gpu = _pin_gpu(comm, 2)
    wclass, opts, threads = _worker_class(worker_class, nthreads, worker_options, gpu)
    if comm.Get_rank() >= 2:
        os.environ.setdefault("EAGLE_NUM_THREADS", str(threads))
    is_client = dask_mpi.initialize(interface=interface, nthreads=threads, local_directory=local_directory,
                                    memory_limit=memory_limit, dashboard=dashboard,
                                    dashboard_address=dashboard_address, protocol=protocol,
                                    worker_class=wclass, worker_options=opts, comm=comm, exit=False)
    if not is_client:
        if exit:
            sys.exit(0)
        return None
    from distributed import Client
    client = Client()
    client.wait_for_workers(size - 2, timeout=timeout)
    if exit:
        atexit.register(_quiet_shutdown, client)
    return client


def serve(scheduler_file, *, interface=None, nthreads=1, dashboard_address=None, memory_limit="auto",
          local_directory=None, comm=None):
    """Run this MPI rank as part of a cluster others join with ``Client(scheduler_file=...)``.

    Rank 0 runs the scheduler and writes ``scheduler_file``; every other rank is a worker named
    by its rank (one GPU each where there are GPUs).  Returns when the cluster is shut down
    (``client.shutdown()``).
    """
    from distributed import Scheduler
    from distributed.utils import import_term
    if comm is None:
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
    size = comm.Get_size()
    if size < 2:
        raise RuntimeError(f"eagle-dask cluster needs at least 2 MPI ranks (rank 0 the scheduler, ranks 1+ "
                           f"the workers), and the world has {size}: launch with mpirun -np 2 or more")
    interface, dashboard_address = _network(comm, interface, dashboard_address)
    gpu = _pin_gpu(comm, 1)
    wclass, opts, threads = _worker_class(None, nthreads, None, gpu)
    rank = comm.Get_rank()

    async def scheduler():
        async with Scheduler(interface=interface, dashboard_address=dashboard_address,
                             scheduler_file=scheduler_file) as s:
            comm.Barrier()
            await s.finished()

    async def worker():
        os.environ.setdefault("EAGLE_NUM_THREADS", str(threads))
        cls = import_term(wclass)
        async with cls(scheduler_file=scheduler_file, interface=interface, nthreads=threads, name=rank,
                       memory_limit=memory_limit, local_directory=local_directory, **opts) as w:
            await w.finished()

    if rank == 0:
        asyncio.run(scheduler())
    else:
        comm.Barrier()
        asyncio.run(worker())
