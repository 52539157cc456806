"""MPI's switch and lifecycle: whether eagle uses MPI, and MPI initialised only when needed.

The switch ``EAGLE_PYTHON_MPI`` decides whether MPI is used:

* ``AUTO`` (the default): use mpi4py when it can be imported;
* ``ON``: require it -- without mpi4py every call, ``RankPartition.available`` included, raises;
* ``OFF``: never use it.

Without MPI, ``RankPartition.available`` is False and every other call raises ``RuntimeError``
naming the switch and ``pip install 'eagle[mpi]'`` (``require``).

**Importing eagle never initialises MPI** (Dask workers and spawned processes re-import the
user's script and inherit the launcher's environment).  MPI is initialised on first need
(``comm``), with ``mpi4py.rc.initialize = rc.finalize = False`` and ``MPI.Init_thread``, and
finalised at exit only when eagle started it.  A process is taken to be an MPI rank when MPI is
already initialised (by the user or mpi4py) or one of :data:`LAUNCHER_VARS` is set
(mpich/hydra/gforker, Intel MPI, Open MPI, PMIx, MVAPICH); only then is MPI initialised.
"""
from __future__ import annotations

import atexit
import importlib.util
import os
import sys

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


# -- ranks on this host ----------------------------------------------------------------------------
#: launchers' own count of the ranks on this host (hydra and Intel MPI, Open MPI, MVAPICH)
LOCAL_SIZE_VARS = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "MV2_COMM_WORLD_LOCAL_SIZE")


def _slurm_local_tasks(env) -> int | None:
    """This node's tasks of the SLURM step (srun), from ``SLURM_STEP_TASKS_PER_NODE`` ("2(x3),1");
    None in a batch script, which is one process whatever the job's tasks."""
    spec, node = env.get("SLURM_STEP_TASKS_PER_NODE"), env.get("SLURM_NODEID")
    if not spec or node is None:
        return None
    counts = []
    for part in spec.split(","):
        count, _, times = part.partition("(x")
        counts += [int(count)] * (int(times.rstrip(")")) if times else 1)
    return counts[int(node)] if int(node) < len(counts) else None


def local_ranks(env=None) -> int:
    """How many ranks of this job run on this host, read from the launcher's environment (no
    collective call, so any rank may ask alone): its own count where it gives one, else SLURM's
    tasks on this node, else every rank for a launcher that only forks (mpiexec.gforker); 1 when
    this process is no rank."""
    env = os.environ if env is None else env
    try:
        for var in LOCAL_SIZE_VARS:
            if env.get(var):
                return max(1, int(env[var]))
        found = _slurm_local_tasks(env)
        if found:
            return found
        if env.get("PMI_SIZE") and "PMI_FD" in env and "SLURM_JOB_ID" not in env:
            return max(1, int(env["PMI_SIZE"]))
    except ValueError:            # a launcher variable that is not a count: no share taken
        return 1
    return 1


def unconnected_tasks(size: int, env=None) -> str | None:
    """Why a world of ``size`` ranks is wrong here, or None: srun started several tasks of this
    step, but MPI gave this one a world of 1 (the mpich wheel under plain ``srun`` or
    ``--mpi=pmix``), so each task would run every sample alone."""
    env = os.environ if env is None else env
    try:
        tasks = int(env.get("SLURM_STEP_NUM_TASKS") or 1)
    except ValueError:
        return None
    if tasks <= 1 or size != 1:
        return None
    return (f"this process is one of the {tasks} tasks srun started, but its MPI world has 1 rank: srun did "
            "not connect the tasks, so each would run every sample alone. With the mpich wheel launch "
            "srun --mpi=pmi2 ...; with your site's MPI, its own srun plugin or mpirun")


# -- lazy initialisation -------------------------------------------------------------------------
def launched() -> bool:
    """Whether a launcher (mpiexec, mpirun, srun) started this process, from its environment."""
    return any(v in os.environ for v in LAUNCHER_VARS)


def mpi_module():
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
    MPI = mpi_module() if ("mpi4py.MPI" in sys.modules or launched()) else None
    if MPI is None:
        why = unconnected_tasks(1)
        if why:
            raise RuntimeError(why)
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
    why = unconnected_tasks(MPI.COMM_WORLD.Get_size())
    if why:
        raise RuntimeError(why)
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
            unlink_mapped_segments()
            MPI.COMM_WORLD.Abort(1)

    sys.excepthook = hook


#: where MPICH keeps its shared-memory segments, and their names' start
SEGMENTS = "/dev/shm/mpich_"


def unlink_mapped_segments() -> list:
    """Unlink the MPICH shared-memory segments this rank has mapped (returns their paths).

    MPICH removes them in ``MPI_Finalize``; an aborted job's ranks are killed before that, so
    each abort would leave a segment (2 MB here) in ``/dev/shm`` until the machine restarts.
    The ranks keep their mappings: only the names go, and only names of files this process
    maps (which the job created)."""
    try:
        with open("/proc/self/maps") as f:
            fields = [line.split(maxsplit=5) for line in f]
    except OSError:
        return []
    gone = []
    for path in sorted({f[5].rstrip("\n") for f in fields if len(f) == 6}):
        if path.startswith(SEGMENTS) and not path.endswith(" (deleted)"):
            try:
                os.unlink(path)
                gone.append(path)
            except OSError:
                pass
    return gone
