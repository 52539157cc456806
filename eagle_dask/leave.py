"""How a rank of ``eagle-dask cluster`` (:func:`eagle_dask.serve`) leaves the MPI job when its part ended.

``MPI_Finalize`` waits for every rank.  Under ``srun`` a lost rank does not end the job (the
cluster goes on without it), so after a lost rank the others would wait in ``MPI_Finalize`` until
the job's time limit.  Each rank first waits in a non-blocking barrier: when every rank comes, they
finalize together; when one never comes, a rank leaves alone (``os._exit``, after its files are
removed and its output flushed): the scheduler's rank after ``LEAVE_WAIT`` seconds, a worker rank
once its scheduler is gone too (a worker ended by a scheduler that still runs waits for the
cluster's end, as before).
"""
from __future__ import annotations

import os
import sys
import time

from .published import scheduler_gone

#: seconds a rank waits for the others at the end before it looks for a lost one
LEAVE_WAIT = 10.0


def leave(comm, address, is_scheduler, security=None, wait=LEAVE_WAIT):
    """Wait for every rank (a non-blocking barrier), or leave alone when a rank is lost (see the module);
    ``security``: this rank's credentials, to look for its scheduler."""
    done = comm.Ibarrier()
    look = time.monotonic() + wait
    while not done.Test():
        time.sleep(0.05)
        if time.monotonic() < look:
            continue
        if is_scheduler or scheduler_gone(address, security, bound=1.0, role="worker"):
            why = "" if is_scheduler else f"; its scheduler is gone (nothing listens at {address})"
            sys.stderr.write(f"eagle-dask: rank {comm.Get_rank()} leaves without the ranks that did not come to "
                             f"the end (lost){why}: the cluster has ended\n")
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        look = time.monotonic() + 5.0
