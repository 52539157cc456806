"""Every splittable kernel of the core suite through RankPartition(inner=HostTeam).

usage: suite.py OUTDIR [--user-mpi]
Each rank saves every output it returned (``<case>/<n>/<plane>`` in rank<r>.npz), whether the
result equals its own one-process HostTeam run, and whether supplied outputs came back in place.
"""
import sys

if "--user-mpi" in sys.argv:
    from mpi4py import MPI  # noqa: F401 - the user initialised MPI before eagle

import numpy as np

import eagle
import eagle.mpi.world as emp
import eagle.exec as eexec
from eagle import plan as eplan
from tests import kernels as K

import _record

SIZES = (0, 1, 2, 32, 33, 97, 1001) if "--user-mpi" not in sys.argv else (2, 97)
mpi_loaded_at_import = "mpi4py.MPI" in sys.modules and "--user-mpi" not in sys.argv
rank, size = eexec.RankPartition.world()
arrays, same, in_place, refused = {}, {}, {}, {}
for name in K.SPLITTABLE:
    plugin = eagle.deploy(K.CASES[name][0])
    try:
        p = eplan.plan(plugin, structure=eexec.RankPartition)
    except ValueError as e:
        refused[name] = str(e)
        continue
    host = eplan.plan(plugin, structure=eexec.HostTeam)
    for n in SIZES:
        got = K.as_dict(plugin, p.run(**K.inputs(name, n)))
        ref = K.as_dict(plugin, host.run(**K.inputs(name, n)))
        same[f"{name}/{n}"] = K.same_bits(got, ref)
        for plane, value in got.items():
            arrays[f"{name}/{n}/{plane}"] = np.asarray(value)
        # outputs the caller supplies are written in place, on every rank
        outs = {nm: np.full((n, r.width) if r.width else (n,), np.nan)
                for r, nm in plugin.arg_spec if r.kind == "Out"}
        if outs and n % 2:
            again = K.as_dict(plugin, p.run(**K.inputs(name, n), **outs))
            in_place[f"{name}/{n}"] = (all(again[nm] is outs[nm] for nm in outs)
                                       and K.same_bits(again, ref))
_record.write(rank, {"rank": rank, "size": size, "same": same, "in_place": in_place, "refused": refused,
                     "mpi_loaded_at_import": mpi_loaded_at_import, "eagle_started_mpi": emp._STATE["started"]},
              arrays)
