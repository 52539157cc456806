"""Run a kernel through RankPartition, then stay alive until OUTDIR/go exists (at most 120 s),
so that the test can look at the job's sockets while MPI is initialised.

usage: linger.py OUTDIR
"""
import os
import time

import eagle
import eagle.exec as eexec
from eagle import plan as eplan
from tests import kernels as K

import _record

rank, size = eexec.RankPartition.world()
plugin = eagle.deploy(K.reductions)
got = eplan.plan(plugin, structure=eexec.RankPartition).run(**K.inputs("reductions", 301))
ref = eplan.plan(plugin, structure=eexec.HostTeam).run(**K.inputs("reductions", 301))
_record.write(rank, {"rank": rank, "size": size, "same": K.same_bits(got, ref), "pid": os.getpid()})
deadline = time.monotonic() + 120
while not os.path.exists(os.path.join(_record.outdir(), "go")) and time.monotonic() < deadline:
    time.sleep(0.05)
eexec.RankPartition.allgather_fold("sum", 1.0)      # MPI still in use after the wait
