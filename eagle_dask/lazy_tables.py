"""Tables in the lazy mode of a Dask run: a numpy table is one key of the graph; a dask table is
assembled on the cluster into one chunk (every axis) and that chunk given to every block."""
from __future__ import annotations

import sys

from eagle.bind import table_value


def is_dask(v) -> bool:
    """A dask collection (without importing dask when nothing has)."""
    base = sys.modules.get("dask.base")
    return base is not None and base.is_dask_collection(v)


def bind_table(plugin, name, planes: dict):
    """Table ``name`` of a lazy run, checked by ``eagle.bind.table_value``'s rules without
    computing a dask table (its dtype and dimensions are known from its metadata)."""
    v = planes.get(name)
    if not is_dask(v):
        return table_value(plugin, name, planes)
    import dask.array as da
    if not isinstance(v, da.Array):
        raise TypeError(f"Table {name!r} of kernel {plugin.name!r} is a {type(v).__name__}: a table is an "
                        "array (numpy or dask)")
    if any(c != c for dim in v.chunks for c in dim):
        raise ValueError(f"Table {name!r} of kernel {plugin.name!r} has unknown chunk sizes (shape {v.shape}); "
                         f"call {name}.compute_chunk_sizes() first")
    return table_value(plugin, name, planes, as_array=lambda x: x)


def table_key(v, key, layer):
    """The graph key a block reads table ``v`` from, and the dask array it comes from (None for a
    numpy table, which is put in ``layer`` under ``key``)."""
    if not is_dask(v):
        layer[key] = v
        return key, None
    if any(len(c) != 1 for c in v.chunks):
        v = v.rechunk(-1)                           # assembled on the cluster, never on the driver
    return (v.name,) + (0,) * v.ndim, v
