"""Every refusal, on every rank, and the collectives' own checks.

usage: refusals.py OUTDIR
Each rank records, per case, the exception it got (type and message) or "ran".  Some cases
refuse on one rank only (a rank-dependent argument): the others must get the same error.
"""
import numpy as np

import eagle
import eagle.exec as eexec
from eagle import plan as eplan
from eagle.rows import Partition
from eagle.structure import Structure
from tests import kernels as K

import _record

rank, size = eexec.RankPartition.world()
RP = eexec.RankPartition
n = 101


class Elsewhere(Structure):
    name = "elsewhere"


def attempt(fn):
    try:
        fn()
        return "ran"
    except Exception as e:  # noqa: BLE001 - recorded and judged by the test
        return _record.error(e)


def plan_of(name, **kw):
    return eplan.plan(eagle.deploy(K.CASES[name][0]), structure=RP, **kw)


def osc(**over):
    d = K.inputs("oscillator", n)
    d.update(over)
    return d


def noncontiguous():
    return np.zeros(2 * n)[::2]


out = {
    # plan time: nothing launches, no collective
    "cross_sample_write": attempt(lambda: plan_of("histogram")),
    "declared_dtype": attempt(lambda: plan_of("integers")),
    "inner_other": attempt(lambda: plan_of("axpb", inner=Elsewhere())),
    "inner_ranks": attempt(lambda: plan_of("axpb", inner=RP)),
    "npartitions": attempt(lambda: plan_of("axpb", npartitions=2)),
    # bind: every rank alike
    "mutable_dtype": attempt(lambda: plan_of("oscillator").run(**osc(x=np.ones(n, np.float32)))),
    "out_noncontiguous": attempt(lambda: plan_of("axpb").run(**K.inputs("axpb", n), y=noncontiguous())),
    "out_dtype_supplied": attempt(lambda: plan_of("axpb").run(**K.inputs("axpb", n), y=np.zeros(n, np.float32))),
    # bind: one rank only -- the others must not wait, they get the same error naming the rank
    "one_rank_noncontiguous": attempt(lambda: plan_of("axpb").run(
        **K.inputs("axpb", n), y=noncontiguous() if rank == size - 1 else np.zeros(n))),
    "ranks_disagree_on_n": attempt(lambda: plan_of("axpb").run(**K.inputs("axpb", n + (rank == size - 1)))),
    # the collectives refuse by name before communicating
    "gather_float32": attempt(lambda: RP.allgather_plane(np.zeros(n, np.float32), Partition(0, n, n), name="q")),
    "gather_noncontiguous": attempt(lambda: RP.allgather_plane(noncontiguous(), Partition(0, n, n), name="q")),
    "fold_bad_op": attempt(lambda: RP.allgather_fold("mean", 1.0)),
    # ... and the plan still runs afterwards: nobody was left inside a collective
    "afterwards": attempt(lambda: plan_of("axpb").run(**K.inputs("axpb", n))),
}

# the primitives: local() is this rank's share of the partition, allgather_plane fills the other ranks' blocks in place
part = Partition(7, 90, 101)
mine = RP.local(part)
mine_rows = RP.local(Partition(32, 69, 101), rows=True)
plane = np.full((101, 2), np.nan)
plane[mine.base:mine.stop] = np.arange(mine.base, mine.stop)[:, None] * [1.0, -1.0]
returned = RP.allgather_plane(plane, part)
# allgather_fold: every rank contributes its value (and then row partials); folded in rank order
value_fold = RP.allgather_fold("sum", 0.1 * (rank + 1) ** 3)
rows_mine = np.array([[float(rank), 1e-17 * rank], [2.0 ** -rank, 0.0]])
rows_fold = RP.allgather_fold("sum", rows_mine)
max_fold = RP.allgather_fold("max", float(rank))
out["local"] = list(mine)
out["local_rows"] = list(mine_rows)
out["gather_in_place"] = returned is plane
out["value_fold"] = float(value_fold)
out["rows_fold"] = float(rows_fold)
out["max_fold"] = float(max_fold)
_record.write(rank, {"rank": rank, "size": size, "cases": out}, {"plane": plane})
