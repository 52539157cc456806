"""Clusters on this machine or under ``mpirun``, bound to loopback unless told otherwise.

* :func:`local_cluster` -- the embedded default: a ``LocalCUDACluster`` (one worker per GPU)
  where dask-cuda and a GPU are present, else a ``LocalCluster`` of processes; scheduler,
  workers and dashboard on 127.0.0.1.  The returned client owns its cluster.
* :func:`initialize` -- dask-mpi's bootstrap (rank 0 the scheduler, rank 1 the script, ranks
  2+ workers), on loopback when every rank is on one host, one GPU per worker rank.
* :func:`serve` -- the same ranks as a cluster for others to join (``eagle-dask cluster``):
  rank 0 the scheduler (writing a scheduler file), every other rank a worker;
  :func:`connect` joins it.

Their workers start numba before they join (:mod:`eagle_dask.warm`, a preload), so a fresh
cluster's first run does not pay it.  Every one of them runs mutual TLS by default
(``security=None``: fresh credentials per cluster, see :mod:`eagle_dask.security`);
``security=False`` is plain TCP, which lets any user of the machine who can reach a port run
code as you.
"""
from __future__ import annotations

import asyncio
import atexit
import inspect
import logging
import os
import sys
import threading
import weakref

from eagle.host import cpu_count

from . import scratch
from . import security as tls
from .leave import leave
from .main_guard import refuse_unguarded
from .no_http import PRELOAD as NO_HTTP
from .published import identity, publish, scheduler_gone, unpublish, unpublish_if_names
from .ranks import gpu_ids
from .structure import DEFAULT_STALL
from .warm import listed, preloads

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


def new_client(cls=None, *args, **kwargs):
    """``cls(*args, **kwargs)`` (default ``EagleClient``), started with the garbage collector
    held off.  A ``Client`` left for garbage collection closes its event loop from ``__del__``
    under distributed's ``LoopRunner`` lock; if that collection happens while a new client starts
    its loop in the same thread -- which holds the lock -- the thread waits for itself forever.
    Collecting first and starting with collection off closes that window."""
    import gc

    from .client import EagleClient
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        return (cls or EagleClient)(*args, **kwargs)
    finally:
        if enabled:
            gc.enable()


def _owning_client(cluster, cleanup=None):
    from .client import EagleClient

    class OwningClient(EagleClient):
        """A client that closes its cluster when it closes (once)."""

        _eagle_cluster_closed = False

        def close(self, *args, **kwargs):
            try:
                return super().close(*args, **kwargs)
            finally:
                if not self._eagle_cluster_closed:
                    self._eagle_cluster_closed = True
                    try:
                        cluster.close()
                    finally:
                        if cleanup is not None:
                            cleanup()

        def __del__(self):
            # at garbage collection, closing the cluster can deadlock a client being started in
            # the same thread (distributed's LoopRunner lock); the cluster's own finaliser closes it
            self._eagle_cluster_closed = True
            super().__del__()

    return new_client(OwningClient, cluster)


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


def _env(env):
    if env is None:
        return {}
    if not isinstance(env, dict):
        raise TypeError(f"local_cluster(env={env!r}): env takes a dict of environment variables for the "
                        f"workers, e.g. env={{'EAGLE_NUM_THREADS': '1'}}, not a {type(env).__name__}")
    return dict(env)


def local_cluster(n_workers=None, threads_per_worker=None, *, security=None, **kwargs):
    """Start a cluster on this machine and return a ``Client`` that owns it.

    With dask-cuda and a GPU: ``LocalCUDACluster`` (one worker per GPU, one thread each).
    Otherwise a ``LocalCluster`` of processes: ``n_workers`` (default one per CPU) of
    ``threads_per_worker`` threads (default 1); a numpy-mode block's eagle team takes the
    worker's threads, a lazy block one (``EAGLE_NUM_THREADS`` in ``env`` overrides both).  Both counts are integers >= 1 (or None); workers are
    processes (``processes=False`` is refused); ``env`` is a dict of environment variables for
    the workers.  Keyword arguments go to the cluster.
    Scheduler, workers and dashboard (its HTTP server, at a free port) listen on 127.0.0.1
    unless ``host=``/``dashboard_address=`` say otherwise (``dashboard_address=None``: no dashboard).

    ``security``: ``None`` (the default) makes fresh mutual-TLS credentials for this cluster, held
    in memory by the cluster, its workers and the returned client only: a connection without a
    certificate they signed is refused at the TLS handshake.  A ``distributed.Security`` is used
    as given.  ``False`` is plain TCP with no authentication: any user of this machine who finds
    a port (``/proc/net/tcp`` lists them) can connect and run code as you on the scheduler and
    every worker.

    ``scheduler_file=F`` writes ``F`` (the address) and ``F.credentials.json`` (the client's
    certificate), both mode 0600 and removed at close, as ``eagle-dask cluster`` does: another
    process of yours joins with ``eagle_dask.connect(F)`` (a plain ``distributed.Client`` has no
    certificate).  The scheduler and workers keep their files in a fresh 0700 directory of their own,
    removed at close (``local_directory=``: one of yours that nobody else can write).  In a script,
    call it under ``if __name__ == "__main__":`` (the workers re-import the script).
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
    env = _env(kwargs.pop("env", None))
    sec = tls.resolve(security, "local_cluster")
    kwargs["security"] = sec          # None: distributed's default, plain TCP
    kwargs["preload"] = preloads(kwargs.get("preload"))
    kwargs.setdefault("host", LOOPBACK)
    dashboard = kwargs.setdefault("dashboard_address", f"{LOOPBACK}:0") is not None
    refuse_unguarded(inspect.currentframe().f_back, "local_cluster")
    scheduler_file = kwargs.pop("scheduler_file", None)
    place = scratch.private(kwargs.pop("local_directory", None), "local_cluster")
    written = []

    def cleanup():
        unpublish(written)
        place.remove()

    cluster = None
    try:
        cluster = _start_local(n_workers, threads, env, place, kwargs, dashboard)
        if scheduler_file is not None:
            written += publish(scheduler_file, cluster.scheduler_address, sec)
    except BaseException:
        if cluster is not None:
            cluster.close()
        cleanup()
        raise
    weakref.finalize(cluster, cleanup)
    return _owning_client(cluster, cleanup)


def _start_local(n_workers, threads, env, place, kwargs, dashboard):
    """The cluster of :func:`local_cluster`, its scheduler and workers in ``place`` (a private
    directory); without a dashboard, no process of it listens for HTTP (``eagle_dask.no_http``)."""
    if not dashboard:
        kwargs["preload"] = [*kwargs["preload"], NO_HTTP]
        kwargs["preload_nanny"] = [*listed(kwargs.get("preload_nanny")), NO_HTTP]
    kwargs["local_directory"] = place.path
    kwargs["scheduler_kwargs"] = {"local_directory": place.path, **(kwargs.get("scheduler_kwargs") or {})}
    env = {**place.env(), **env}
    if cuda_workers_available():
        from dask_cuda import LocalCUDACluster
        return LocalCUDACluster(n_workers=n_workers, threads_per_worker=threads, env=env, **kwargs)
    import dask
    from distributed import LocalCluster
    kwargs.setdefault("silence_logs", logging.ERROR)
    with dask.config.set(launch_config(dashboard)):        # the scheduler reads worker-ttl as it starts
        return LocalCluster(n_workers=n_workers or cpu_count(), threads_per_worker=threads, processes=True,
                            env=env, **kwargs)


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
    if dashboard_address is None:       # loopback on every host: reach a remote one through a tunnel
        dashboard_address = f"{LOOPBACK}:0" if interface == loopback_interface() else f"{LOOPBACK}:8787"
    return interface, dashboard_address


#: seconds ``serve`` waits for its workers to join before it writes the scheduler file anyway
JOIN_WAIT = 300


def launch_config(dashboard=True):
    """dask config of every cluster eagle starts: the scheduler forgets a worker it has
    not heard from for ``DEFAULT_STALL`` seconds (distributed's default is 5 minutes), and without
    a dashboard no HTTP route is served and no HTTP port listens, on the scheduler or the workers
    (``eagle_dask.no_http``)."""
    config = {"distributed.scheduler.worker-ttl": f"{DEFAULT_STALL:g}s"}
    if not dashboard:
        import dask
        given = listed(dask.config.get("distributed.scheduler.preload", None))
        config.update({"distributed.scheduler.http.routes": [], "distributed.worker.http.routes": [],
                       "distributed.scheduler.preload": [*given, NO_HTTP]})
    return config


def _worker_http(opts, dashboard):
    """A worker's options with its HTTP listener closed when there is no dashboard (``no_http``)."""
    return opts if dashboard else {**opts, "preload": [*opts["preload"], NO_HTTP]}


def abort_on_failure(comm, role, body):
    """Run ``body()``; if it raises, print why and end the whole MPI job (``comm.Abort``): the other
    ranks wait for this one in a collective, or for a scheduler that will never come, and would
    otherwise spin until the job's time limit."""
    try:
        return body()
    except (KeyboardInterrupt, SystemExit):
        raise           # stopped (Ctrl-C, the launcher ending the job, scancel): every rank is told
    except BaseException as e:  # noqa: BLE001 - said, then the job ends
        import traceback
        sys.stderr.write(f"eagle-dask: the {role} (rank {comm.Get_rank()}) failed: {type(e).__name__}: {e}; "
                         f"ending the MPI job\n{traceback.format_exc()}")
        sys.stderr.flush()
        comm.Abort(1)
        raise


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


def _share_credentials(comm, security, where, roles, client_file=None):
    """Rank 0 resolves ``security`` (fresh credentials for None) and sends each rank its role's part.

    Collective; before any listener starts.  ``roles[r]`` is rank r's role.  With ``client_file``,
    rank 0 also writes the client's part there (mode 0600).  Returns this rank's fields (None for
    plain TCP); an error on rank 0 is raised on every rank.
    """
    tls.check(security, where)      # the same error on every rank, before any collective
    payload = None
    if comm.Get_rank() == 0:
        try:
            sec = tls.resolve(security, where)
            if sec is not None and client_file is not None:
                tls.write_client_credentials(client_file, sec)
            payload = [None if sec is None else tls.role_fields(sec, role) for role in roles]
        except Exception as e:  # noqa: BLE001 - raised on every rank below
            payload = [e] * len(roles)
    mine = comm.scatter(payload, root=0)
    if isinstance(mine, Exception):
        raise mine
    return mine


def _worker_class(worker_class, nthreads, worker_options, gpu):
    opts = dict(worker_options or {})
    opts["preload"] = preloads(opts.get("preload"))
    if worker_class is None:
        if gpu is not None and cuda_workers_available():
            return "dask_cuda.CUDAWorker", opts, 1
        return "distributed.Worker", opts, nthreads
    return worker_class, opts, nthreads


def _quiet(level):
    """distributed's and tornado's loggers at ``level``; after distributed is imported, whose import
    sets their levels from its config (a level set before would be undone)."""
    import distributed  # noqa: F401 - its logging configuration first
    for name in ("distributed", "tornado"):
        logging.getLogger(name).setLevel(level)


def _quiet_shutdown(client):
    """At exit: stop the scheduler and workers, without the log noise of closing connections."""
    _quiet(logging.CRITICAL)
    try:
        client.shutdown()
    except Exception:  # noqa: BLE001 - the cluster may already be gone
        pass


def _roles_for_initialize(size):
    return ["scheduler", "client"] + ["worker"] * (size - 2)


def initialize(interface=None, nthreads=1, *, dashboard=True, dashboard_address=None, local_directory=None,
               memory_limit="auto", protocol=None, worker_class=None, worker_options=None, comm=None,
               exit=True, timeout=120, quiet=True, security=None):
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

    ``security``: ``None`` (the default) is mutual TLS with fresh credentials: rank 0 makes them
    and sends each rank its certificate over MPI before any listener starts (nothing is written to
    disk); rank 1's client, and ``distributed.Client()`` on rank 1, hold the client's.  A
    ``distributed.Security`` (rank 0's) is used as given.  ``False`` is plain TCP: any user of the
    machine who finds a port can connect and run code as you on the scheduler and every worker.
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
    if quiet:
        _quiet(logging.WARNING)
    interface, dashboard_address = _network(comm, interface, dashboard_address)
    gpu = _pin_gpu(comm, 2)
    wclass, opts, threads = _worker_class(worker_class, nthreads, worker_options, gpu)
    place = None
    if comm.Get_rank() != 1:                    # the scheduler's and each worker's files: 0700, their own
        place = scratch.private(local_directory, "initialize")
    elif local_directory is not None:
        scratch.check_given(local_directory, "initialize")
    fields = _share_credentials(comm, security, "initialize", _roles_for_initialize(size))
    opts = {"dashboard_address": f"{LOOPBACK}:0", **_worker_http(opts, dashboard)}   # on loopback, or none
    start = lambda: _dask_mpi(fields, place, launch_config(dashboard), interface=interface,  # noqa: E731
                              nthreads=threads, memory_limit=memory_limit, dashboard=dashboard,
                              dashboard_address=dashboard_address, protocol=protocol, worker_class=wclass,
                              worker_options=opts, comm=comm, exit=False)
    is_client = abort_on_failure(comm, "scheduler", start) if comm.Get_rank() == 0 else start()
    if not is_client:
        if exit:
            sys.exit(0)
        return None
    client = new_client(None, security=tls.from_fields(fields) if fields else False)
    client.wait_for_workers(size - 2, timeout=timeout)
    if exit:
        atexit.register(_quiet_shutdown, client)
    return client


def _dask_mpi(fields, place, launch, **kwargs):
    """``dask_mpi.initialize`` with this rank's credentials and ``launch`` (``launch_config``) in
    dask's config (where its scheduler and workers read them): for the cluster's ranks while they
    run, in ``place`` (their private directory, removed when they end), for rank 1 (``place``
    None) from now on."""
    import dask
    import dask_mpi
    config = {**(tls.as_config(fields) if fields else {}), **launch}
    if fields and kwargs.get("protocol") is None:
        kwargs["protocol"] = "tls"       # dask-mpi's listeners, given an interface, would pick tcp
    if place is None:
        dask.config.set(config)
        return dask_mpi.initialize(**kwargs)
    try:
        with dask.config.set({**config, **place.config()}):
            return dask_mpi.initialize(local_directory=place.path, **kwargs)
    finally:
        place.remove()


def serve(scheduler_file, *, interface=None, nthreads=1, dashboard=True, dashboard_address=None,
          memory_limit="auto", local_directory=None, comm=None, security=None, quiet=False):
    """Run this MPI rank as part of a cluster others join with :func:`connect` (``eagle-dask cluster``).

    Rank 0 runs the scheduler and writes ``scheduler_file`` (its address, mode 0600); every other
    rank is a worker named by its rank (one GPU each where there are GPUs), told the address over
    MPI.  Returns when the cluster is shut down (``client.shutdown()``); the files are removed then.

    ``security``: ``None`` (the default) is mutual TLS with fresh credentials: rank 0 makes them and
    sends each rank its certificate over MPI before any listener starts; the only copy on disk is
    the client's, in ``scheduler_file + ".credentials.json"`` (mode 0600), which
    ``connect(scheduler_file)`` reads.  A ``distributed.Security`` (rank 0's) is used as given (its
    client part goes in that file).  ``False`` is plain TCP: any user of the machine who finds a port
    can connect and run code as you.  A file there that belongs to another user is refused.
    ``quiet``: distributed logs warnings and errors only (``eagle-dask cluster --quiet``).
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
    scheduler_file = os.path.abspath(os.fspath(scheduler_file))
    client_file = tls.credentials_path(scheduler_file)
    interface, dashboard_address = _network(comm, interface, dashboard_address)
    gpu = _pin_gpu(comm, 1)
    wclass, opts, threads = _worker_class(None, nthreads, None, gpu)
    opts = _worker_http(opts, dashboard)
    rank = comm.Get_rank()
    fields = _share_credentials(comm, security, "serve", ["scheduler"] + ["worker"] * (size - 1), client_file)
    sec = tls.from_fields(fields) if fields else None

    place = scratch.private(local_directory, "serve")       # every rank's own files, 0700
    _exit_on_sigterm()
    if quiet:
        _quiet(logging.WARNING)

    here = {}

    async def scheduler():
        async with Scheduler(interface=interface, dashboard=dashboard, dashboard_address=dashboard_address,
                             security=sec, local_directory=place.path) as s:
            comm.bcast(s.address, root=0)
            here["address"] = s.address
            await _joined(s, size - 1)              # the file says the cluster is ready: it is
            if os.path.lexists(client_file):
                tls.add_address(client_file, s.address)
            ident = s.identity()
            tls.write_private(scheduler_file, identity(ident.pop("address"), **ident))
            await s.finished()

    async def worker(address):
        cls = import_term(wclass)
        async with cls(address, interface=interface, nthreads=threads, name=rank, memory_limit=memory_limit,
                       local_directory=place.path, security=sec, dashboard_address=f"{LOOPBACK}:0", **opts) as w:
            await w.finished()

    import dask
    try:
        with dask.config.set({**place.config(), **launch_config(dashboard)}):
            if rank == 0:
                abort_on_failure(comm, "scheduler",
                                 lambda: _run_scheduler(scheduler, (scheduler_file, client_file)))
            else:
                here["address"] = comm.bcast(None, root=0)
                try:
                    asyncio.run(worker(here["address"]))
                finally:            # the scheduler's rank died: what it left names a gone cluster
                    unpublish_if_names((scheduler_file, client_file), here["address"])
    finally:
        place.remove()
    leave(comm, here["address"], rank == 0, sec)


async def _joined(scheduler, count):
    """Wait until ``count`` workers have joined ``scheduler`` (at most ``JOIN_WAIT`` seconds, then
    go on with a warning naming how many did)."""
    import time
    end = time.monotonic() + JOIN_WAIT
    while len(scheduler.workers) < count:
        if time.monotonic() > end:
            logging.getLogger("eagle_dask").warning(
                "eagle-dask cluster: %d of %d workers joined within %d s; writing the scheduler file anyway",
                len(scheduler.workers), count, JOIN_WAIT)
            return
        await asyncio.sleep(0.05)


def _run_scheduler(scheduler, files):
    """Run ``scheduler()`` to its end, then remove ``files`` (the scheduler file, the credentials) if ours."""
    try:
        asyncio.run(scheduler())
    finally:
        unpublish(files)


def _exit_on_sigterm():
    """SIGTERM (``scancel``, the batch system's time limit) ends this rank through its ``finally``
    blocks, so the scheduler file and credentials are removed, as at a clean shutdown."""
    import signal

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, stop)


def connect(target, *, timeout=60, security=None, **kwargs):
    """A ``Client`` of an eagle cluster, with its credentials: ``target`` is a scheduler file or an address.

    A scheduler file (of ``eagle-dask cluster``, :func:`serve` or ``local_cluster(scheduler_file=F)``)
    must be yours, not a link, mode 0600, and name a ``tls://`` address; the client's certificate
    (and the address) come from ``F + ".credentials.json"`` (yours, mode 0600).  A file another
    user wrote is refused before anything connects.  It waits up to ``timeout`` seconds for the
    cluster to write the file.  An address (``"tls://127.0.0.1:8786"``) needs ``security=`` (a
    ``distributed.Security``; ``False`` for a ``tcp://`` cluster started with ``--no-tls``).

    A plain ``distributed.Client(address)`` or ``Client(scheduler_file=F)`` has no certificate: it
    fails with ``TypeError: TLS expects a ssl_context ...`` or is refused by the cluster -- use
    ``eagle_dask.connect(F)``.  Keyword arguments go to ``Client``.
    """
    import time

    tls.check(security, "connect")
    target = os.path.expanduser(os.fspath(target))
    if "://" in target:
        return new_client(None, _address_security(target, security), security=security or None, timeout=timeout,
                          **kwargs)
    end = time.monotonic() + timeout
    while not os.path.lexists(target):
        if time.monotonic() > end:
            raise TimeoutError(f"eagle_dask.connect: no scheduler file {target} after {timeout} s: is "
                               f"`mpirun -np N eagle-dask cluster --scheduler-file {target}` running? (an "
                               "address is given as tls://host:port)")
        time.sleep(0.1)
    address, sec = tls.read_scheduler_file(target, security)
    if scheduler_gone(address, sec):
        raise ConnectionError(f"eagle_dask.connect: the scheduler file {target} names {address}, where nothing "
                              "listens: its cluster ended without removing it (its scheduler's rank was "
                              "killed). Start the cluster again (it writes a new file), or remove the file")
    kwargs.setdefault("timeout", max(1, end - time.monotonic()))
    return new_client(None, address, security=sec, **kwargs)


def _address_security(address, security):
    """The ``Client`` arguments (address, security=) for ``connect(address, security=...)``."""
    if security is None:
        raise ValueError(f"eagle_dask.connect({address!r}): an address carries no credentials: pass the scheduler "
                         "file instead (connect(F), its credentials lie beside it), or security=distributed."
                         "Security(...) with the cluster's client certificate (False for a tcp:// cluster)")
    if security is not False and not address.startswith("tls://"):
        raise ValueError(f"eagle_dask.connect({address!r}, security=...): a cluster with credentials listens on "
                         "tls://; for a plain tcp:// cluster pass security=False")
    return address
