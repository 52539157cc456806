"""RankPartition: a kernel's samples split across MPI ranks (over mpi4py), every rank with the
whole output, bit for bit what one process computes.

A run: the inputs are replicated (every rank holds all of them), rank ``r`` runs its share
``eagle.rows.share(n, r, size, rows=bool(cells))`` through the plan's ``inner`` structure, then
output planes and cells' row partials are gathered (``eagle.mpi.collectives``), so
``Plan.result`` folds exactly the rows one process would.  Every step that may fail on one rank
is agreed on by all (``eagle.mpi.agree``).
"""
from __future__ import annotations

import numpy as np

from ..rows import Partition, row_span, shares
from ..structure import Structure
from .agree import on_every_rank
from .collectives import as_partition, check_gathered, fold_every_rank, gather_plane, gather_rows
from .world import available, comm, require


class _RankPartition(Structure):
    """A kernel's samples split across MPI ranks; every rank returns the whole output."""

    name = "rank_partition"
    public_name = "RankPartition"
    crosses_processes = True

    # -- the seed page's API ----------------------------------------------------------------
    @property
    def available(self) -> bool:
        """Whether MPI can be used here (mpi4py importable and the switch not OFF)."""
        return available()

    def world(self) -> tuple[int, int]:
        """``(rank, size)`` of this process; ``(0, 1)`` without a launcher (MPI not initialised)."""
        require("RankPartition.world()")
        c = comm()
        return (0, 1) if c is None else (c.Get_rank(), c.Get_size())

    def local(self, partition, *, rows=False) -> Partition:
        """This rank's share of ``partition`` (rows of 32 when ``rows``)."""
        require("RankPartition.local()")
        partition = as_partition(partition)
        rank, size = self.world()
        return shares(partition, size, rows)[rank]

    def allgather_plane(self, plane, partition, *, rows=False, name="plane"):
        """Fill ``plane[partition]`` in place from every rank's share (float64, C-contiguous)."""
        require("RankPartition.allgather_plane()")
        check_gathered(plane, name)
        partition = as_partition(partition)
        if plane.shape[0] < partition.stop:
            raise ValueError(f"plane {name!r} has {plane.shape[0]} samples; partition {tuple(partition)} "
                             f"ends at {partition.stop}")
        c = comm()
        if c is not None and c.Get_size() > 1:
            gather_plane(c, plane, partition, rows)
        return plane

    def allgather_fold(self, op, partial):
        """Fold every rank's partial (one value or ``(k, 2)`` row partials) in rank order."""
        require("RankPartition.allgather_fold()")
        return fold_every_rank(comm(), op, partial)

    # -- the structure interface --------------------------------------------------------------
    def check_plan(self, plan):
        require("RankPartition")

    def bind(self, plan, planes, device):
        require("RankPartition")

        def checked():
            bound = super(_RankPartition, self).bind(plan, planes, device)
            for name in bound.outputs:
                if not isinstance(bound.values[name], np.ndarray):
                    raise TypeError(f"output plane {name!r} of kernel {plan.plugin.name!r} is a "
                                    f"{type(bound.values[name]).__name__}: RankPartition gathers outputs "
                                    "through the host; pass a numpy array (device inputs are fine)")
            return bound

        bound, counts = on_every_rank(comm(), checked, lambda b: b.n)
        if len(set(counts)) > 1:
            desc = ", ".join(f"rank {r} has {n}" for r, n in enumerate(counts))
            raise ValueError(f"kernel {plan.plugin.name!r}: ranks were given different sample counts "
                             f"({desc}); inputs are replicated: pass every rank the same planes")
        return bound

    def execute(self, plan, bound, device):
        plugin, n = plan.plugin, bound.n
        rows = bool(plugin.cells)
        c = comm()
        size, rank = (1, 0) if c is None else (c.Get_size(), c.Get_rank())
        parts = shares(Partition(0, n, n), size, rows)
        mine = parts[rank]
        got, _ = on_every_rank(c, lambda: plan.inner.run_range(plugin, bound.values, mine.base, mine.stop,
                                                               0, device))
        if c is None:
            return got
        for name in bound.outputs:
            gather_plane(c, bound.values[name], Partition(0, n, n), rows)
        counts = [row_span(p.base, p.stop)[1] - row_span(p.base, p.stop)[0] for p in parts]
        return {cell: gather_rows(c, got[cell], counts) for cell in plugin.cells}


RankPartition = _RankPartition()
