"""Execution structures: ``HostTeam``, ``DeviceKernel``, ``RankPartition`` (and
``eagle_dask.DaskPartition``), the placement table and the fixed-order fold."""
from ..device import DeviceKernel
from ..host import HostTeam
from .._mpi import RankPartition
from ..partition import Partition, split
from ..reduction import fold
from ..structure import Structure, check_placement

__all__ = ["Partition", "HostTeam", "DeviceKernel", "RankPartition", "Structure",
           "check_placement", "fold", "split"]
