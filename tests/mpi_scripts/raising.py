"""A kernel that raises on one rank's samples only.

usage: raising.py OUTDIR MODE
  caught   -- every rank records the error it got (the other ranks must get it too);
  uncaught -- the error propagates out of the script on every rank (the job must end, non-zero);
  stray    -- the last rank raises a plain error before the run while the others start it
              (eagle's exit hook must abort the job rather than leave them waiting).
The input is negative only in samples of the last rank's share, so only that rank's kernel raises.
"""
import sys

import numpy as np

import eagle
import eagle.exec as eexec
from eagle import plan as eplan
from tests import kernels as K
from tests import reference as ref

import _record

mode = sys.argv[2]
rank, size = eexec.RankPartition.world()
n = 103
first, stop = ref.cut(n, size)[size - 1]         # the last rank's share, by the rule (not eagle's split)
bad = (first + stop) // 2
x = np.linspace(0.5, 4.0, n)
x[bad] = -1.0                                    # inside the last rank's share
p = eplan.plan(eagle.deploy(K.picky), structure=eexec.RankPartition)

if mode == "stray" and rank == size - 1:
    raise RuntimeError(f"a stray error on rank {rank} outside eagle")
if mode == "uncaught":
    p.run(x=x)
try:
    p.run(x=x)
    got = "ran"
except Exception as e:  # noqa: BLE001 - judged by the test
    got = _record.error(e)
    got["rank_attr"] = getattr(e, "eagle_rank", None)
after = p.run(x=np.abs(x))                         # the job goes on: no rank is stuck
_record.write(rank, {"rank": rank, "size": size, "got": got, "bad_sample": bad,
                     "after_ok": bool(np.array_equal(after, np.sqrt(np.abs(x))))})
