"""RankPartition: a kernel's samples split across MPI ranks.  Not implemented yet."""
from __future__ import annotations

from .structure import Structure, register


class _RankPartition(Structure):
    name = "rank_partition"
    has_ranks = True
    gathered = True

    def check_plan(self, plan):
        raise NotImplementedError("RankPartition is not available in this version of eagle yet")


RankPartition = register(_RankPartition())
