"""Split a kernel's samples across MPI ranks; every rank ends with the whole output.

On one machine (loopback only, with the mpich wheel that ``pip install 'eagle[mpi]'`` brings):

    UCX_NET_DEVICES=lo mpiexec.gforker -n 2 python examples/mpi_run.py

On a cluster, use your site's launcher (``mpirun -np 2 python examples/mpi_run.py``, ``srun``).
Run alone (``python examples/mpi_run.py``) it is one rank and prints the same digest.
Add ``--device`` to run each rank's share on GPU number ``rank`` (inner=DeviceKernel).
"""
import hashlib
import sys

import numpy as np

import eagle
import eagle.exec as eexec
from eagle.models import oscillator
from eagle import plan as eplan


def main(n=100_001, steps=200):
    on_device = "--device" in sys.argv
    plugin = eagle.deploy(oscillator)
    inner = eexec.DeviceKernel if on_device else eexec.HostTeam
    p = eplan.plan(plugin, structure=eexec.RankPartition, inner=inner)
    rank, size = eexec.RankPartition.world()

    omega = np.random.default_rng(7).uniform(0.5, 2.0, n)     # every rank holds all the inputs
    planes = dict(omega=omega, dt=1e-3, steps=steps, x=np.ones(n), v=np.zeros(n))
    out = p.run(device=rank, **planes) if on_device else p.run(**planes)   # the whole output, every rank

    digest = hashlib.sha256(out["x"].tobytes() + out["v"].tobytes() + out["energy"].tobytes()).hexdigest()
    # one write per line, so that the ranks' lines do not interleave on a shared terminal
    sys.stdout.write(f"rank {rank} of {size}: energy = {out['energy']!r}, digest {digest[:16]}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
