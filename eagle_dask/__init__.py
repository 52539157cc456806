"""eagle_dask: eagle plans across the workers of a Dask cluster, bit for bit what one process gives.

``DaskPartition`` (the structure; ``DaskPartition.on(client)``, ``DaskPartition.ranks()``),
``local_cluster()`` (the embedded cluster on 127.0.0.1), ``initialize()`` (dask-mpi under
``mpirun``), ``serve()`` and ``connect()`` (a cluster under ``mpirun`` that others join); every
one runs mutual TLS unless told ``security=False``.
"""
from .cluster import connect, initialize, local_cluster, serve
from .ranks import Rank, gpu_ids, worker_ranks
from .structure import DaskPartition

__all__ = ["DaskPartition", "Rank", "connect", "gpu_ids", "initialize", "local_cluster", "serve", "worker_ranks"]
