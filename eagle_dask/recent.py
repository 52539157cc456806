"""Timings this process measured, kept per kind of work to size the next one of its kind.

Two users: a worker's host pieces (``eagle_dask.task``: the seconds per sample of a kernel's last
piece) and the driver's wait for a run's blocks (``eagle_dask.done_watch``: how long the last run
of its kind took).  A kind names the kernel by its key and its scalar Params (``scalars``): a
loop's ``steps``, say, changes the time a sample takes.  A ``Recent`` keeps its ``KEEP`` most
recently measured kinds.
"""
from __future__ import annotations

import collections
import threading

import numpy as np


def scalars(values) -> tuple:
    """The scalar values among ``values`` (a run's planes and Params), sorted by name: hashable."""
    return tuple(sorted((k, v) for k, v in values.items() if isinstance(v, (bool, int, float, np.generic))))


class Recent:
    """The last value measured for each kind, the ``KEEP`` most recent kinds; safe from any thread."""

    KEEP = 64

    def __init__(self):
        self._known = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, kind):
        with self._lock:
            return self._known.get(kind)

    def put(self, kind, value):
        with self._lock:
            self._known[kind] = value
            self._known.move_to_end(kind)
            while len(self._known) > self.KEEP:
                self._known.popitem(last=False)
