"""Ranks: the workers of a Dask cluster, in the order that numbers them.

Rank ``r`` is the ``r``-th worker sorted by name (numbers first, in numeric order; with
dask-mpi a worker's name is its MPI rank, with a LocalCluster its index).  Each rank's block
of samples is pinned to that worker.
"""
from __future__ import annotations

import os
from typing import NamedTuple

from eagle.device import simulated


class Rank(NamedTuple):
    """One worker as a rank: where it listens, its name, its host and its GPU (None without)."""
    address: str
    name: object
    host: str
    gpu: str | None = None


def _name_key(name):
    text = str(name)
    try:
        return (0, int(text), "")
    except ValueError:
        return (1, 0, text)


def gpu_ids() -> list[str]:
    """The GPUs this process may use: ``CUDA_VISIBLE_DEVICES`` if set, else the driver's list."""
    if simulated():
        return []
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [d.strip() for d in env.split(",") if d.strip() and d.strip() != "-1"]
    try:
        return [str(k) for k in range(len(os.listdir("/proc/driver/nvidia/gpus")))]
    except OSError:
        return []


def _worker_gpu():
    ids = gpu_ids()
    return ids[0] if ids else None


def scheduler_workers(client) -> dict:
    """Address -> worker info, asked of the scheduler now.

    Not ``client.scheduler_info()``: that returns the client's shared cache, which the client's
    periodic refresh (asking for no per-worker detail) may overwrite between the fetch and the
    read, leaving ``workers`` empty.
    """
    return client.sync(client.scheduler.identity, n_workers=-1)["workers"]


def worker_ranks(client, workers=None, gpus=False) -> list[Rank]:
    """The client's workers as ranks (``workers``: addresses or names to keep, in any order).

    ``gpus=True`` asks every worker which GPU it sees (one round trip).
    """
    info = scheduler_workers(client)
    table = [Rank(addr, w.get("name", addr), w.get("host", ""), None) for addr, w in info.items()]
    if workers is not None:
        wanted = {str(w) for w in workers}
        table = [r for r in table if r.address in wanted or str(r.name) in wanted]
        missing = wanted - {r.address for r in table} - {str(r.name) for r in table}
        if missing:
            raise ValueError(f"workers={sorted(missing)!r} are not workers of this cluster "
                             f"(its workers: {', '.join(sorted(str(a) for a in info))})")
    table.sort(key=lambda r: _name_key(r.name))
    if gpus and table:
        found = client.run(_worker_gpu, workers=[r.address for r in table])
        table = [r._replace(gpu=found.get(r.address)) for r in table]
    return table
