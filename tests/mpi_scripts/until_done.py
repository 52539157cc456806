"""run_until_done through RankPartition(inner=HostTeam): every case of tests/until_done_cases.py.

usage: until_done.py OUTDIR
Each rank saves every result it returned (``<case>/<plane>`` in rank<r>.npz); the test judges
them against the plain-Python reference.
"""
import eagle.exec as eexec
from tests import until_done_cases as U

import _record

rank, size = eexec.RankPartition.world()
arrays = {f"{key}|{part}": value for key, parts in U.run_all(eexec.RankPartition).items()
          for part, value in parts.items()}
_record.write(rank, {"rank": rank, "size": size}, arrays)
