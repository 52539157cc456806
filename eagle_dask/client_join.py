"""A computed dask array joined on the driver, its blocks fetched straight from the workers.

``y.compute()`` and ``dask.compute(y, ...)`` put a *finalize* task in the graph that concatenates
every block of ``y``: the scheduler runs it on one worker, which first pulls every other
worker's blocks, and the joined array then travels worker -> scheduler -> driver.  Each output
byte crosses the network about 2.5 times with two workers (every byte held twice by one worker,
and the whole output in that worker's memory at once).  ``EagleClient.get`` (the scheduler
``compute`` calls) uses ``split`` to ask for the blocks instead of those concatenations (the
scheduler builds only what the keys asked for need, so the finalize tasks are never made; the
graph and its annotations are sent as dask built them): the blocks are fetched from the workers
that made them (``direct=True``), and ``join`` concatenates them on the driver with dask's own
``finalize`` -- one crossing per output byte, the same array, the same bits.

Only a key whose task is exactly dask's array ``finalize`` over references to other keys is
changed; every other key (a scalar, a Delayed, a DataFrame's finalize) is computed as dask
builds it.
"""
from __future__ import annotations

import sys


def _array_finalize():
    """dask's array ``finalize``, or None while ``dask.array`` is not imported (then no key asked
    for is an array's; importing eagle_dask imports neither it nor what it pulls in)."""
    core = sys.modules.get("dask.array.core")
    return None if core is None else core.finalize


def _block_keys(node):
    """The nested lists of keys a finalize task reads, or None where it reads anything else."""
    from dask._task_spec import List, TaskRef
    if isinstance(node, TaskRef):
        return node.key
    if isinstance(node, List):
        keys = [_block_keys(x) for x in node.args]
        return None if any(k is None for k in keys) else keys
    return None


def split(expr, keys):
    """``(keys to fetch, {joined key: its blocks' keys})``: ``keys`` with every array finalize
    among them replaced by the keys of the blocks it joins, or None when there is none."""
    array_finalize = _array_finalize()
    if array_finalize is None or not isinstance(keys, (list, tuple)):
        return None
    from dask._task_spec import Task
    graph = expr.__dask_graph__()
    joined = {}
    for key in keys:
        task = graph.get(key) if not isinstance(key, list) else None
        if (isinstance(task, Task) and task.func is array_finalize and len(task.args) == 1
                and not task.kwargs):
            blocks = _block_keys(task.args[0])
            if blocks is not None:
                joined[key] = blocks
    if not joined:
        return None
    return [joined.get(k, k) if not isinstance(k, list) else k for k in keys], joined


def join(keys, fetched, joined) -> list:
    """What ``Client.get`` would have returned for ``keys``: each joined key's blocks
    concatenated here, every other result as fetched."""
    array_finalize = _array_finalize()
    return [array_finalize(got) if not isinstance(k, list) and k in joined else got
            for k, got in zip(keys, fetched)]
