"""MPI ranks: the switch and lifecycle (``world``), how ranks agree on an outcome (``agree``),
the collectives (``collectives``) and the ``RankPartition`` structure (``rank_partition``)."""
