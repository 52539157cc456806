"""The collectives of a RankPartition run: planes gathered in place, row partials in rank order.

Output planes are gathered through the host (``Allgatherv`` in place, float64, C-contiguous);
cells' row partials (both halves of each pair) are gathered in rank order, so the fold sees
exactly the rows one process would.
"""
from __future__ import annotations

import numpy as np

from ..bind import GATHERED_DTYPE, not_gatherable
from ..rows import Partition, fold, is_count, shares
from .world import mpi_module


def as_partition(partition) -> Partition:
    """``partition`` as a Partition of integers with ``0 <= base``, ``0 <= count`` and
    ``base + count <= n_samples``; a TypeError or ValueError naming it otherwise."""
    try:
        base, count, n = partition
    except (TypeError, ValueError):
        raise TypeError(f"{partition!r} is not a Partition(base, count, n_samples)") from None
    if not all(is_count(v) for v in (base, count, n)):
        raise TypeError(f"partition {tuple(partition)!r}: base, count and n_samples are integers")
    if base < 0 or count < 0 or base + count > n:
        raise ValueError(f"partition {tuple(partition)!r}: needs 0 <= base, 0 <= count and base + count <= "
                         "n_samples")
    return Partition(int(base), int(count), int(n))


def _allgatherv(world_comm, buf, counts):
    """Allgatherv in place of a flat float64 buffer whose rank blocks have ``counts`` values."""
    if sum(counts) == 0:
        return
    MPI = mpi_module()
    displs = np.concatenate([[0], np.cumsum(counts[:-1])]).astype(np.int64).tolist() if counts else []
    world_comm.Allgatherv(MPI.IN_PLACE, [buf, list(counts), displs, MPI.DOUBLE])


def check_gathered(plane, name="plane"):
    """Refuse, by name, a plane that cannot be gathered in place: float64 and C-contiguous."""
    if not isinstance(plane, np.ndarray):
        raise TypeError(f"plane {name!r} is a {type(plane).__name__}: gathered planes are numpy arrays "
                        "on the host")
    if plane.dtype != GATHERED_DTYPE:
        raise not_gatherable(f"plane {name!r} is", plane.dtype)
    if not plane.flags["C_CONTIGUOUS"]:
        raise ValueError(f"plane {name!r} is not C-contiguous: planes are gathered in place; pass "
                         "np.ascontiguousarray(...)")
    if not plane.flags["WRITEABLE"]:
        raise ValueError(f"plane {name!r} is read-only: planes are gathered in place")


def gather_plane(world_comm, plane, partition, rows):
    """Fill ``plane[partition]`` in place from every rank's share of it."""
    parts = shares(partition, world_comm.Get_size(), rows)
    width = int(np.prod(plane.shape[1:], dtype=np.int64))
    buf = plane[partition.base:partition.stop].reshape(-1)
    _allgatherv(world_comm, buf, [p.count * width for p in parts])


def gather_rows(world_comm, local_rows, counts):
    """Every rank's ``(k, 2)`` row partials, concatenated in rank order."""
    full = np.zeros((sum(counts), 2))
    rank = world_comm.Get_rank()
    at = sum(counts[:rank])
    full[at:at + counts[rank]] = local_rows
    _allgatherv(world_comm, full.reshape(-1), [2 * c for c in counts])
    return full


def fold_every_rank(world_comm, op, partial):
    """Fold every rank's partial (one value or ``(k, 2)`` row partials) in rank order."""
    mine = _partials(op, partial)
    fold(op, mine)                               # refuses an unknown op before the collective
    if world_comm is None or world_comm.Get_size() == 1:
        return fold(op, mine)
    counts = world_comm.allgather(mine.shape[0])
    return fold(op, gather_rows(world_comm, mine, counts))


def _partials(op, partial):
    arr = np.asarray(partial, dtype=np.float64)
    if arr.ndim == 0:
        return np.array([[float(arr), 0.0]])
    if arr.ndim == 2 and arr.shape[1] == 2:
        return np.ascontiguousarray(arr)
    raise ValueError(f"allgather_fold({op!r}, ...) takes one value or (k, 2) row partials (value, "
                     f"compensation), not an array of shape {arr.shape}")
