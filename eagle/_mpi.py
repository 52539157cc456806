"""RankPartition: a kernel's samples split across MPI ranks (over mpi4py), every rank with the
whole output, bit for bit what one process computes.

The switch ``EAGLE_PYTHON_MPI`` decides whether MPI is used:

* ``AUTO`` (the default): use mpi4py when it can be imported;
* ``ON``: require it -- without mpi4py every call, ``RankPartition.available`` included, raises;
* ``OFF``: never use it.

Without MPI, ``RankPartition.available`` is False and every other call raises ``RuntimeError``
naming the switch and ``pip install 'eagle[mpi]'``.

**Importing eagle never initialises MPI** (Dask workers and spawned processes re-import the
user's script and inherit the launcher's environment).  MPI is initialised on first need, with
``mpi4py.rc.initialize = rc.finalize = False`` and ``MPI.Init_thread``, and finalised at exit
only when eagle started it.  ``world()`` answers ``(0, 1)`` without initialising anything when
no launcher started this process: a process is taken to be an MPI rank when MPI is already
initialised (by the user or mpi4py) or one of :data:`LAUNCHER_VARS` is set (mpich/hydra/gforker,
Intel MPI, Open MPI, PMIx, MVAPICH); only then is MPI initialised.

A run: the inputs are replicated (every rank holds all of them), rank ``r`` runs its share
``eagle.partition.share(n, r, size, rows=bool(cells))`` through the plan's ``inner`` structure,
output planes are gathered through the host (``Allgatherv`` in place, float64, C-contiguous),
and cells' row partials (both halves of each pair) are gathered in rank order, so ``Plan.result``
folds exactly the rows one process would.  Before the data collectives the ranks exchange an
ok/error status, so a refusal or a raising kernel on one rank reaches every rank as the same
exception type, naming the rank, and no rank is left waiting.
"""
from __future__ import annotations

import atexit
import importlib
import os
import sys

import numpy as np

from .errors import message, retyped
from .partition import ROW, Partition, row_span, share
from .reduction import fold
from .structure import Structure, register

SWITCH = "EAGLE_PYTHON_MPI"
MODES = ("AUTO", "ON", "OFF")
INSTALL = "pip install 'eagle[mpi]'"

#: environment variables a launcher sets in each rank; one of them marks this process as a rank
LAUNCHER_VARS = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
                 "MV2_COMM_WORLD_SIZE", "MPI_LOCALNRANKS")

_STATE = {"found": None, "started": False, "hook": False}


# -- the switch ----------------------------------------------------------------------------------
def mode() -> str:
    """``EAGLE_PYTHON_MPI`` as one of AUTO, ON, OFF."""
    raw = os.environ.get(SWITCH, "")
    value = raw.strip().upper() or "AUTO"
    if value not in MODES:
        raise ValueError(f"{SWITCH}={raw!r}: the switch is one of {', '.join(MODES)}")
    return value


def _mpi4py_found() -> bool:
    if _STATE["found"] is None:
        try:
            import mpi4py  # noqa: F401 - the package alone never initialises MPI
            _STATE["found"] = importlib.util.find_spec("mpi4py.MPI") is not None
        except ImportError:
            _STATE["found"] = False
    return _STATE["found"]


def available() -> bool:
    """Whether RankPartition can run (see the switch); raises under ``ON`` without mpi4py."""
    m = mode()
    if m == "OFF":
        return False
    if not _mpi4py_found():
        if m == "ON":
            raise RuntimeError(f"{SWITCH}=ON requires mpi4py, which cannot be imported: {INSTALL} "
                               f"(or set {SWITCH}=AUTO / OFF)")
        return False
    return True


def require(what: str):
    """Raise the ``RuntimeError`` every call gives without MPI."""
    if available():
        return
    if mode() == "OFF":
        why = f"MPI is switched off ({SWITCH}=OFF); unset it or set {SWITCH}=AUTO"
    else:
        why = f"mpi4py is not installed: {INSTALL} (and see {SWITCH})"
    raise RuntimeError(f"{what} needs MPI: {why}")


# -- lazy initialisation -------------------------------------------------------------------------
def launched() -> bool:
    """Whether a launcher (mpiexec, mpirun, srun) started this process, from its environment."""
    return any(v in os.environ for v in LAUNCHER_VARS)


def _mpi():
    """The mpi4py.MPI module, imported without initialising MPI."""
    mod = sys.modules.get("mpi4py.MPI")
    if mod is None:
        import mpi4py
        mpi4py.rc.initialize = False          # eagle initialises when (and only if) it needs to
        mpi4py.rc.finalize = False
        from mpi4py import MPI as mod
    return mod


def comm():
    """COMM_WORLD when this process is an MPI rank (initialising MPI if needed), else None."""
    MPI = _mpi() if ("mpi4py.MPI" in sys.modules or launched()) else None
    if MPI is None:
        return None
    if MPI.Is_finalized():
        raise RuntimeError("MPI was already finalised in this process; RankPartition cannot run")
    if not MPI.Is_initialized():
        if not launched():
            return None
        MPI.Init_thread(MPI.THREAD_MULTIPLE)
        _STATE["started"] = True
        atexit.register(_finalize)
        _install_abort_hook(MPI)
    return MPI.COMM_WORLD


def _finalize():
    MPI = sys.modules.get("mpi4py.MPI")
    if _STATE["started"] and MPI is not None and MPI.Is_initialized() and not MPI.Is_finalized():
        MPI.Finalize()


def _install_abort_hook(MPI):
    """An exception that escapes on one rank only aborts the job instead of leaving the others
    waiting in a collective.  Errors eagle raised on every rank alike end normally."""
    if _STATE["hook"] or MPI.COMM_WORLD.Get_size() == 1 or sys.excepthook is not sys.__excepthook__:
        return
    _STATE["hook"] = True

    def hook(kind, exc, tb):
        sys.__excepthook__(kind, exc, tb)
        if not getattr(exc, "eagle_all_ranks", False) and MPI.Is_initialized() and not MPI.Is_finalized():
            sys.stderr.flush()
            sys.stdout.flush()
            MPI.COMM_WORLD.Abort(1)

    sys.excepthook = hook


# -- agreement: one rank's error reaches every rank ----------------------------------------------
def _describe(exc):
    if exc is None:
        return None
    return type(exc).__module__, type(exc).__qualname__, message(exc)


def _rebuild(desc, rank, size):
    module, qualname, msg = desc
    text = f"{msg} [rank {rank} of {size}]"
    try:
        kind = importlib.import_module(module)
        for part in qualname.split("."):
            kind = getattr(kind, part)
    except Exception:  # noqa: BLE001 - a type this rank cannot import
        kind = None
    err = retyped(kind, text) if isinstance(kind, type) and issubclass(kind, Exception) else \
        RuntimeError(f"{qualname}: {text}")
    err.eagle_rank = rank
    err.eagle_all_ranks = True
    return err


def agree(world_comm, exc, value=None):
    """Exchange every rank's status (and ``value``); raise the first rank's error on all ranks.

    Returns the list of every rank's ``value`` when no rank failed.
    """
    states = world_comm.allgather((_describe(exc), value))
    size = len(states)
    for rank, (desc, _) in enumerate(states):
        if desc is not None:
            err = _rebuild(desc, rank, size)
            raise err from exc
    return [v for _, v in states]


def on_every_rank(world_comm, step, value=lambda result: None):
    """Run ``step()`` here, then agree with every rank before anyone goes on.

    Without a communicator an error is raised as it is.  With one, every rank learns whether any
    rank failed (and raises that error, naming the rank) -- no rank is left waiting in a later
    collective.  Returns ``(result, every rank's value(result))``.
    """
    try:
        result, err = step(), None
    except Exception as e:  # noqa: BLE001 - raised on every rank by agree()
        result, err = None, e
    if world_comm is None:
        if err is not None:
            raise err
        return result, [value(result)]
    return result, agree(world_comm, err, None if err is not None else value(result))


# -- collectives ---------------------------------------------------------------------------------
def _as_partition(partition) -> Partition:
    if isinstance(partition, Partition):
        return partition
    try:
        base, count, n = partition
        return Partition(int(base), int(count), int(n))
    except (TypeError, ValueError):
        raise TypeError(f"{partition!r} is not a Partition(base, count, n_samples)") from None


def blocks(partition: Partition, size: int, rows: bool) -> list[Partition]:
    """Every rank's share of ``partition``, in rank order (eagle.partition's split)."""
    if rows and partition.base % ROW:
        raise ValueError(f"a partition split in rows of {ROW} must start at a multiple of {ROW}, "
                         f"not at sample {partition.base}")
    return [Partition(partition.base + s.base, s.count, partition.n_samples)
            for s in (share(partition.count, r, size, rows=rows) for r in range(size))]


def _allgatherv(world_comm, buf, counts):
    """Allgatherv in place of a flat float64 buffer whose rank blocks have ``counts`` values."""
    if sum(counts) == 0:
        return
    from mpi4py import MPI
    displs = np.concatenate([[0], np.cumsum(counts[:-1])]).astype(np.int64).tolist() if counts else []
    world_comm.Allgatherv(MPI.IN_PLACE, [buf, list(counts), displs, MPI.DOUBLE])


def check_gathered(plane, name="plane"):
    """Refuse, by name, a plane that cannot be gathered in place: float64 and C-contiguous."""
    if not isinstance(plane, np.ndarray):
        raise TypeError(f"plane {name!r} is a {type(plane).__name__}: gathered planes are numpy arrays "
                        "on the host")
    if plane.dtype != np.float64:
        raise ValueError(f"plane {name!r} is {plane.dtype}: planes gathered across ranks must be float64")
    if not plane.flags["C_CONTIGUOUS"]:
        raise ValueError(f"plane {name!r} is not C-contiguous: planes are gathered in place; pass "
                         "np.ascontiguousarray(...)")
    if not plane.flags["WRITEABLE"]:
        raise ValueError(f"plane {name!r} is read-only: planes are gathered in place")


def gather_plane(world_comm, plane, partition, rows, name):
    parts = blocks(partition, world_comm.Get_size(), rows)
    width = int(np.prod(plane.shape[1:], dtype=np.int64))
    buf = plane[partition.base:partition.stop].reshape(-1)
    _allgatherv(world_comm, buf, [p.count * width for p in parts])


def gather_rows(world_comm, local_rows, counts):
    """Every rank's ``(k, 2)`` row partials, concatenated in rank order."""
    full = np.zeros((sum(counts), 2))
    rank = world_comm.Get_rank()
    at = sum(counts[:rank])
    full[at:at + counts[rank]] = local_rows
    _allgatherv(world_comm, full.reshape(-1), [2 * c for c in counts])
    return full


def _partials(op, partial):
    arr = np.asarray(partial, dtype=np.float64)
    if arr.ndim == 0:
        return np.array([[float(arr), 0.0]])
    if arr.ndim == 2 and arr.shape[1] == 2:
        return np.ascontiguousarray(arr)
    raise ValueError(f"allgather_fold({op!r}, ...) takes one value or (k, 2) row partials (value, "
                     f"compensation), not an array of shape {arr.shape}")


# -- the structure -------------------------------------------------------------------------------
class _RankPartition(Structure):
    """A kernel's samples split across MPI ranks; every rank returns the whole output."""

    name = "rank_partition"
    has_ranks = True
    gathered = True

    # -- the seed page's API ----------------------------------------------------------------
    @property
    def available(self) -> bool:
        """Whether MPI can be used here (mpi4py importable and the switch not OFF)."""
        return available()

    def world(self) -> tuple[int, int]:
        """``(rank, size)`` of this process; ``(0, 1)`` without a launcher (MPI not initialised)."""
        require("RankPartition.world()")
        c = comm()
        return (0, 1) if c is None else (c.Get_rank(), c.Get_size())

    def local(self, partition, *, rows=False) -> Partition:
        """This rank's share of ``partition`` (rows of 32 when ``rows``)."""
        require("RankPartition.local()")
        partition = _as_partition(partition)
        rank, size = self.world()
        return blocks(partition, size, rows)[rank]

    def allgather_plane(self, plane, partition, *, rows=False, name="plane"):
        """Fill ``plane[partition]`` in place from every rank's share (float64, C-contiguous)."""
        require("RankPartition.allgather_plane()")
        check_gathered(plane, name)
        partition = _as_partition(partition)
        if plane.shape[0] < partition.stop:
            raise ValueError(f"plane {name!r} has {plane.shape[0]} samples; partition {tuple(partition)} "
                             f"ends at {partition.stop}")
        c = comm()
        if c is not None and c.Get_size() > 1:
            gather_plane(c, plane, partition, rows, name)
        return plane

    def allgather_fold(self, op, partial):
        """Fold every rank's partial (one value or ``(k, 2)`` row partials) in rank order."""
        require("RankPartition.allgather_fold()")
        mine = _partials(op, partial)
        fold(op, mine)                               # refuses an unknown op before the collective
        c = comm()
        if c is None or c.Get_size() == 1:
            return fold(op, mine)
        counts = c.allgather(mine.shape[0])
        return fold(op, gather_rows(c, mine, counts))

    # -- the structure interface --------------------------------------------------------------
    def check_plan(self, plan):
        require("RankPartition")

    def bind(self, plan, planes, device):
        require("RankPartition")

        def checked():
            bound = super(_RankPartition, self).bind(plan, planes, device)
            for name in bound.outputs:
                if not isinstance(bound.values[name], np.ndarray):
                    raise TypeError(f"output plane {name!r} of kernel {plan.plugin.name!r} is a "
                                    f"{type(bound.values[name]).__name__}: RankPartition gathers outputs "
                                    "through the host; pass a numpy array (device inputs are fine)")
            return bound

        bound, counts = on_every_rank(comm(), checked, lambda b: b.n)
        if len(set(counts)) > 1:
            desc = ", ".join(f"rank {r} has {n}" for r, n in enumerate(counts))
            raise ValueError(f"kernel {plan.plugin.name!r}: ranks were given different sample counts "
                             f"({desc}); inputs are replicated: pass every rank the same planes")
        return bound

    def execute(self, plan, bound, device):
        plugin, n = plan.plugin, bound.n
        rows = bool(plugin.cells)
        c = comm()
        size, rank = (1, 0) if c is None else (c.Get_size(), c.Get_rank())
        parts = blocks(Partition(0, n, n), size, rows)
        mine = parts[rank]
        got, _ = on_every_rank(c, lambda: plan.inner.run_range(plugin, bound.values, mine.base, mine.stop,
                                                               0, device))
        if c is None:
            return got
        for name in bound.outputs:
            gather_plane(c, bound.values[name], Partition(0, n, n), rows, name)
        counts = [(lambda s: s[1] - s[0])(row_span(p.base, p.stop)) for p in parts]
        return {cell: gather_rows(c, got[cell], counts) for cell in plugin.cells}


RankPartition = register(_RankPartition())
