"""The worker side of a Dask run: one rank's block of samples.

A task gets the plugin (it pickles by value), the inner structure, its rank and samples
``[start, stop)``, the planes it needs and the Params.  Sliceable planes (the body touches them
only as ``plane[i]``) arrive as their slice, indexed through one offset ``po = start``; every
other plane arrives whole.  The task returns the output blocks for ``[start, stop)`` and the
cells' row partials.  Compiled code is not shipped: ``plugin.host`` compiles (or loads from
the disk cache) once per worker process and stays cached there, keyed by the plugin's hash.
"""
from __future__ import annotations

import collections

import numpy as np

from eagle.errors import with_place
from eagle.roles import OUTPUT_KINDS

#: what recent tasks of this worker received: (kernel, rank, start, stop, worker, {plane: length})
#: -- a debugging record, read with ``client.run(eagle_dask.task.received)``
RECEIVED = collections.deque(maxlen=256)


def received():
    return list(RECEIVED)


def clear_received():
    RECEIVED.clear()


def _worker_address():
    try:
        from distributed import get_worker
        return get_worker().address
    except (ImportError, ValueError):
        return "?"


def run_block(plugin, inner, rank, start, stop, n, sliced, whole, params, fresh, device=None):
    """Run rank ``rank``'s samples ``[start, stop)``; return (output blocks, row partials).

    ``sliced``: sliceable planes, samples ``[start, stop)`` only.  ``whole``: the other planes
    (shared by the tasks of this worker: outputs among them are copied before writing).
    ``fresh``: Out planes to allocate here, ``{name: (width, dtype)}``.
    """
    worker = _worker_address()
    RECEIVED.append((plugin.name, rank, start, stop, worker,
                     {k: int(v.shape[0]) for k, v in {**(whole or {}), **sliced}.items()}))
    values = dict(params)
    values.update(sliced)
    outputs = plugin.names(*OUTPUT_KINDS)
    sliceable = plugin.sliceable
    for name, v in (whole or {}).items():
        values[name] = np.array(v, copy=True) if name in outputs else v
    for name, (width, dtype) in fresh.items():
        count = stop - start if name in sliceable else n
        values[name] = np.zeros((count,) if width is None else (count, width), dtype=dtype)
    try:
        rows = inner.run_range(plugin, values, start, stop, po=start, device=device)
    except Exception as e:
        raise with_place(e, plugin.name, f"rank {rank}, worker {worker}") from None
    blocks = {}
    for name in outputs:
        v = np.asarray(values[name])
        blocks[name] = np.ascontiguousarray(v if name in sliceable else v[start:stop])
    return blocks, {c: np.asarray(r) for c, r in rows.items()}
