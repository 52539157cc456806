"""Table kernels on one structure in this process: ``tables.py OUTDIR mpi`` under mpiexec
(RankPartition) or ``tables.py OUTDIR device`` under NUMBA_ENABLE_CUDASIM=1 (DeviceKernel at
1, 2 and 3 partitions).  Writes each rank's results and the out-of-range errors it saw;
tests/test_table.py judges them against numpy."""
import sys

import numpy as np

import eagle.exec as eexec
from eagle import plan as eplan
from tests.table_kernels import data, interp, lookup, poly2d

from _record import error, write


def main():
    mode = sys.argv[2]
    if mode == "mpi":
        rank, _ = eexec.RankPartition.world()
        layouts = {"ranks": dict(structure=eexec.RankPartition)}
    else:
        rank = 0
        layouts = {f"device{k}": dict(structure=eexec.DeviceKernel, npartitions=k) for k in (1, 2, 3)}
    a, b = data(1001)
    arrays, record = {}, {}
    for label, kw in layouts.items():
        arrays[f"{label}-interp"] = eplan.plan(interp, **kw).run(**a)
        arrays[f"{label}-poly2d"] = eplan.plan(poly2d, **kw).run(**b)
        for shift, what in ((5, "past the end"), (-1, "negative")):
            try:
                eplan.plan(lookup, **kw).run(k=np.arange(40, dtype=np.int64) % 8, t=np.arange(8.0), shift=shift)
                record[f"{label}-{what}"] = None
            except Exception as e:  # noqa: BLE001 - judged by the test
                record[f"{label}-{what}"] = error(e)
    write(rank, record, arrays)


if __name__ == "__main__":
    main()
