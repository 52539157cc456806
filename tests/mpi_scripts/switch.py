"""The EAGLE_PYTHON_MPI switch, in one process without mpiexec.

usage: switch.py OUTDIR [--block-mpi4py]
With --block-mpi4py a meta-path finder makes ``import mpi4py`` fail, as on a machine without
it.  Records ``available`` and what every call of RankPartition does (result or error).
"""
import sys

if "--block-mpi4py" in sys.argv:
    class _NoMpi4py:
        def find_spec(self, name, path=None, target=None):
            if name == "mpi4py" or name.startswith("mpi4py."):
                raise ImportError(f"No module named {name!r} (blocked by the test)")
            return None

    sys.meta_path.insert(0, _NoMpi4py())

import numpy as np

import eagle
import eagle.exec as eexec
from eagle import plan as eplan
from eagle.rows import Partition
from tests import kernels as K

import _record

RP = eexec.RankPartition


def attempt(fn):
    try:
        value = fn()
        return {"value": repr(value)}
    except Exception as e:  # noqa: BLE001 - judged by the test
        return _record.error(e)


plugin = eagle.deploy(K.axpb)
out = {
    "available": attempt(lambda: RP.available),
    "world": attempt(RP.world),
    "local": attempt(lambda: RP.local(Partition(0, 10, 10))),
    "allgather_plane": attempt(lambda: RP.allgather_plane(np.zeros(10), Partition(0, 10, 10))),
    "allgather_fold": attempt(lambda: RP.allgather_fold("sum", 1.0)),
    "plan": attempt(lambda: eplan.plan(plugin, structure=RP)),
    "run": attempt(lambda: eplan.plan(plugin, structure=RP).run(**K.inputs("axpb", 11)).tobytes()
                   == eplan.plan(plugin, structure=eexec.HostTeam).run(**K.inputs("axpb", 11)).tobytes()),
}
mpi = sys.modules.get("mpi4py.MPI")
out["mpi_initialised"] = bool(mpi is not None and mpi.Is_initialized())
_record.write(0, out)
