"""Why a numpy-mode block did not come back, and what its run does about it.

``EagerRun`` (``eagle_dask.eager``) hands every block whose future ended without a result here:

* ``ran_elsewhere``: a shared-memory block the scheduler ran on another host (``Elsewhere``),
  or ran again after its worker was lost (``StartedBefore``): sent again, through the messages;
* ``cancelled``: the client closed (eagle's reason, the kernel named), the scheduler lost
  (``scheduler_lost``), an input lost with the workers that held it -- the block's share, the
  whole planes, its tables, or tables another block's cancel already sent again: sent anew and
  the block submitted again -- else a cancel, named as such;
* ``failed``: ``KilledWorker`` named with the kernel and the rank; any other error as raised.
"""
from __future__ import annotations

from .client import CLOSED_REASON
from .shm import Elsewhere, StartedBefore
from .tables import lost


def ran_elsewhere(run, b) -> bool:
    """A shared-memory block the scheduler ran on another host: sent again through the messages;
    or ran again after its worker was lost (``StartedBefore``): sent again through the messages
    (``eagle_dask.eager._transport``: an earlier try may still write into its regions)."""
    exc = b.future.exception()
    if not b.shared or not isinstance(exc, (Elsewhere, StartedBefore)):
        return False
    b.remote = isinstance(exc, Elsewhere)
    run._again(b)
    run._resubmitted.append(b)
    return True


def scheduler_lost(run) -> RuntimeError:
    """The error a run ends in when its scheduler is gone."""
    return RuntimeError(f"DaskPartition: the connection to the scheduler {run.client.scheduler.address} was "
                        f"lost while kernel {run.name!r} ran: its process or host is gone (under mpirun, "
                        f"rank 0 of `eagle-dask cluster`); the blocks of rank(s) {run.left()} were not "
                        "computed and the output planes are incomplete: start the cluster again and rerun")


def cancelled(run, b):
    """A block whose future was cancelled: the client closed, an input lost, or a cancel."""
    left = run.left()
    if (run.client.status not in ("running", "connecting", "newly-created")
            or _cancel_reason(b.future) == CLOSED_REASON):
        raise RuntimeError(f"DaskPartition: the client closed while kernel {run.name!r} ran; the blocks of "
                           f"rank(s) {left} were not computed and the output planes are incomplete")
    if _scheduler_lost(run.client, b.future):
        raise scheduler_lost(run)
    share_lost = b.inputs is not None and lost([b.inputs])    # lost with the worker it was sent to
    # its tables lost with every worker that held them, or already sent again for another block
    # cancelled by the same loss
    tables_lost = bool(b.tables) and (b.tables is not run.table_f or lost(run.table_f.values()))
    if share_lost or (b.whole is not None and b.whole.status != "finished") or tables_lost:
        if tables_lost and b.tables is run.table_f:
            run._send_tables()
        if b.whole is not None and b.whole is run.whole_f:
            run._scatter()                         # and so were the whole planes
        run._again(b)
        run._resubmitted.append(b)
        return
    raise RuntimeError(f"DaskPartition: the block of rank {b.rank} of kernel {run.name!r} was cancelled "
                       f"(client.cancel, or the scheduler released it); the blocks of rank(s) {left} were not "
                       "computed and the output planes are incomplete")


def failed(run, b):
    """A block whose task raised: ``KilledWorker`` named with the kernel and the rank."""
    exc = b.future.exception()
    from distributed.scheduler import KilledWorker
    if isinstance(exc, KilledWorker):
        raise RuntimeError(f"DaskPartition: the block of rank {b.rank} of kernel {run.name!r} killed every "
                           f"worker that ran it ({exc}); it was given up") from None
    raise exc


def _cancel_reason(future):
    """The reason ``future`` was cancelled with (distributed's, or ``EagleClient``'s at close), or None."""
    cancelled = getattr(getattr(future, "_state", None), "exception", None)
    return getattr(cancelled, "reason", None)


def _scheduler_lost(client, future) -> bool:
    """Whether ``future`` was cancelled because ``client`` lost its scheduler (distributed's reason
    ``scheduler-connection-lost``; the client is then reconnecting)."""
    return _cancel_reason(future) == "scheduler-connection-lost" or client.status == "connecting"
