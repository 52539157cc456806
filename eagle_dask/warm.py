"""Workers ready for their first eagle task: numba started while the worker starts.

The first kernel a fresh worker process runs pays, besides loading the kernel (from the disk
cache, or compiling it), numba's own start in that process: its typing and target contexts and
LLVM: here a fresh two-worker cluster's first run of the README demo took 0.92 s without the
preload and 0.37-0.48 s with it (the kernel in the disk cache).
A worker given this module as a preload pays it while it starts, before it joins the scheduler,
so ``wait_for_workers`` returns workers that run the first block at once.

eagle's own clusters (``local_cluster``, ``initialize``, ``serve`` and ``eagle-dask cluster``)
add it (``preloads``); on another cluster, start the workers with
``dask worker --preload eagle_dask.warm`` or ``Nanny(..., preload=["eagle_dask.warm"])``.  A
warm-up that fails is logged as a warning and the worker starts anyway: its first task then
raises numba's error with the kernel's name, as without the preload.
"""
from __future__ import annotations

import logging
import time

import numba

import eagle.host  # noqa: F401 - the engine a block loads: imported while the worker starts

#: the module name distributed imports on each worker (its ``dask_setup`` runs there)
PRELOAD = "eagle_dask.warm"

logger = logging.getLogger(__name__)
#: what the preload did in this process: ``{"seconds": s}`` once numba started, ``{"error": text}``
#: when it could not (read on the workers with ``client.run``)
STARTED = {}


def started() -> dict:
    """What the preload did in this process (``client.run(eagle_dask.warm.started)``)."""
    return dict(STARTED)


def _one(x):
    return x + 1.0


def warm() -> float:
    """Start numba's compiler in this process (one tiny function, compiled now); returns seconds."""
    t = time.perf_counter()
    numba.njit("float64(float64)")(_one)
    return time.perf_counter() - t


def dask_setup(worker):
    """distributed's preload hook, run as the worker starts (before it registers, nothing else
    running in it yet: the warm-up runs right there, in the worker's own thread)."""
    try:
        seconds = warm()
    except Exception as e:  # noqa: BLE001 - a worker that cannot warm still starts; its tasks report why
        STARTED["error"] = f"{type(e).__name__}: {e}"
        logger.warning("eagle_dask.warm: numba did not start on worker %s (%s); its first eagle task "
                       "will start it", getattr(worker, "address", "?"), STARTED["error"])
        return
    STARTED["seconds"] = seconds
    logger.info("eagle_dask.warm: numba started in %.2f s", seconds)


def preloads(given=None) -> list:
    """``given`` (a worker's ``preload``: None, a module name or a list) with this module added once."""
    given = listed(given)
    return given if PRELOAD in given else [*given, PRELOAD]


def listed(preload) -> list:
    """A ``preload`` setting (None, a module name or a list) as a list."""
    return [] if preload is None else [preload] if isinstance(preload, str) else list(preload)
