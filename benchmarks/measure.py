"""What every arm measures, the same way: warm-up, timed runs, one memory run.

* the first run is the warm-up (compile or disk-cache load, worker start-up) and is reported
  apart, never in the median;
* ``repeats`` timed runs, each on fresh inputs (Mutable planes are updated in place) made
  outside the timer;
* one more run under ``tracemalloc`` gives the peak driver memory (Python and numpy
  allocations made by the driver during the run); its result is the one compared with the
  reference.
"""
from __future__ import annotations

import gc
import time
import tracemalloc
from dataclasses import dataclass, field

import numpy as np

import eagle.bind

from .kernels import SPECS, inputs


@dataclass
class Case:
    """One kernel at one size: its inputs (made once) and the one-process reference."""
    kernel: str
    n: int
    steps: int
    repeats: int
    base: dict = field(default=None, repr=False)
    reference: dict = field(default=None, repr=False)
    ref_digest: str = ""

    def __post_init__(self):
        if self.base is None:
            self.base = inputs(self.kernel, self.n, self.steps)

    @property
    def spec(self):
        return SPECS[self.kernel]

    def fresh(self) -> dict:
        """A copy of the inputs for one run."""
        return {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in self.base.items()}

    def plane_bytes(self) -> int:
        return sum(v.nbytes for v in self.base.values() if isinstance(v, np.ndarray))


@dataclass
class Timing:
    first_s: float
    times: list
    result: dict
    peak_mb: float
    first_result: dict = None


def measure(run, fresh, repeats: int) -> Timing:
    """Warm-up, ``repeats`` timed runs, then one run under tracemalloc (see the module doc)."""
    p = fresh()
    t = time.perf_counter()
    first = run(p)
    first_s = time.perf_counter() - t
    times = []
    for _ in range(repeats):
        p = fresh()
        t = time.perf_counter()
        run(p)
        times.append(time.perf_counter() - t)
    p = fresh()
    gc.collect()
    tracemalloc.start()
    try:
        result = run(p)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return Timing(first_s, times, result, peak / 2**20, first)


def median(times) -> float:
    return float(np.median(times)) if len(times) else float("nan")


def spread(times) -> float:
    """max - min of the timed runs (the table says so)."""
    return float(np.max(times) - np.min(times)) if len(times) else float("nan")


def run_entry(entry, planes, threads):
    """Seconds for one run of every sample through a host entry (``eagle.host.HostEntry``), and
    the outputs (planes copied, cells' row partials)."""
    bound = eagle.bind.bind(entry.plugin, planes)
    t = time.perf_counter()
    rows = entry.run(bound.values, 0, bound.n, threads=threads)
    dt = time.perf_counter() - t
    return dt, {**{o: bound.values[o].copy() for o in bound.outputs}, **rows}
