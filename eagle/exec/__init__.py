"""Execution structures: ``HostTeam``, ``DeviceKernel``, ``RankPartition`` (and
``eagle_dask.DaskPartition``), the placement table and the fixed-order fold."""
from ..local import DeviceKernel, HostTeam
from ..mpi.rank_partition import RankPartition
from ..plan import check_placement
from ..rows import Partition, fold, split
from ..structure import Structure

__all__ = ["Partition", "HostTeam", "DeviceKernel", "RankPartition", "Structure",
           "check_placement", "fold", "split"]
