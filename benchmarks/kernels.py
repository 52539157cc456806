"""The benchmark kernels, each with what a user would otherwise write.

Four kernels, one per kind of work:

* ``stream``     -- ``y = a*x + b``: memory-bound, one read and one write per sample;
* ``oscillator`` -- an explicit-Euler oscillator, ``steps`` steps per sample, with an energy cell:
  compute-bound, and a reduction over samples;
* ``stencil``    -- a 5-point average reading neighbours (``cross_sample_read``);
* ``mapreduce``  -- cells only: a sum and a max over samples.

Each :class:`Spec` carries the eagle kernel, its inputs, a plain numpy version where the kernel
can be written vectorised (``numpy``), and a plain numba loop over a block of samples
(``block``) for ``dask.array.map_blocks`` -- the same loop, compiled by numba, without eagle.
This module is importable by MPI ranks and Dask workers (``benchmarks.kernels``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from numba import njit

import eagle
from eagle import Cell, In
from eagle.models import axpb as stream, oscillator, stencil

#: oscillator time step; the number of steps is a Param (1000, fewer in quick mode)
DT = 1e-3


@eagle.kernel
def mapreduce(i, x: In, total: Cell["sum"], peak: Cell["max"]):
    v = x[i]
    total[i] = math.exp(-v * v)
    peak[i] = math.sin(v) * v


# -- plain numpy: what a user writes without eagle ------------------------------------------

def stream_numpy(p):
    return {"y": p["a"] * p["x"] + p["b"]}


def oscillator_numpy(p):
    x, v, w, dt = p["x"].copy(), p["v"].copy(), p["omega"], p["dt"]
    for _ in range(p["steps"]):
        x, v = x + dt * v, v - dt * w * w * x
    return {"x": x, "v": v, "energy": np.float64(np.sum(0.5 * (v * v + w * w * x * x)))}


def stencil_numpy(p):
    x = p["x"]
    if x.shape[0] == 0:
        return {"y": x.copy()}
    xp = np.pad(x, 2, mode="edge")              # the kernel's edges: missing neighbours repeat the end
    return {"y": (xp[:-4] + xp[1:-3] + xp[2:-2] + xp[3:-1] + xp[4:]) / 5.0}


def mapreduce_numpy(p):
    x = p["x"]
    return {"total": np.float64(np.sum(np.exp(-x * x))), "peak": np.float64(np.max(np.sin(x) * x))}


# -- plain numba loops over one block (for dask.array.map_blocks and the in-process loop) -----

@njit(nogil=True, cache=True)
def stream_block(x, a, b):
    y = np.empty(x.shape[0])
    for i in range(x.shape[0]):
        y[i] = a * x[i] + b
    return y


@njit(nogil=True, cache=True)
def oscillator_block(omega, x, v, dt, steps):
    """Columns: x, v and each sample's energy contribution."""
    out = np.empty((omega.shape[0], 3))
    for i in range(omega.shape[0]):
        xi, vi, w = x[i], v[i], omega[i]
        for _ in range(steps):
            xi, vi = xi + dt * vi, vi - dt * w * w * xi
        out[i, 0] = xi
        out[i, 1] = vi
        out[i, 2] = 0.5 * (vi * vi + w * w * xi * xi)
    return out


@njit(nogil=True, cache=True)
def stencil_padded(xp):
    """The stencil over a block padded by 2 samples each side (edge values repeated)."""
    y = np.zeros(xp.shape[0])
    for j in range(2, xp.shape[0] - 2):
        y[j] = (xp[j - 2] + xp[j - 1] + xp[j] + xp[j + 1] + xp[j + 2]) / 5.0
    return y


@njit(nogil=True, cache=True)
def mapreduce_block(x):
    """One row per block: (sum, max) of the block, summed in sample order."""
    s, m = 0.0, -np.inf
    for i in range(x.shape[0]):
        v = x[i]
        s += math.exp(-v * v)
        m = max(m, math.sin(v) * v)
    out = np.empty((1, 2))
    out[0, 0], out[0, 1] = s, m
    return out


def _numba_stream(p):
    return {"y": stream_block(p["x"], p["a"], p["b"])}


def _numba_oscillator(p):
    o = oscillator_block(p["omega"], p["x"], p["v"], p["dt"], p["steps"])
    return {"x": o[:, 0].copy(), "v": o[:, 1].copy(), "energy": np.float64(o[:, 2].sum())}


def _numba_stencil(p):
    x = p["x"]
    return {"y": stencil_padded(np.pad(x, 2, mode="edge"))[2:-2].copy()} if x.shape[0] else {"y": x.copy()}


def _numba_mapreduce(p):
    r = mapreduce_block(p["x"])
    return {"total": np.float64(r[0, 0]), "peak": np.float64(r[0, 1])}


@dataclass
class Spec:
    """One benchmark kernel: eagle kernel, inputs, and its non-eagle equivalents."""
    name: str
    kernel: object
    kind: str                                    # what it stresses, for the table
    make: Callable                               # (n, rng, steps) -> planes
    numpy: Callable | None                       # planes -> outputs (None: not vectorisable)
    numba: Callable                              # planes -> outputs, one plain numba loop
    halo: int = 0                                # neighbours read each side (map_overlap depth)

    @property
    def plugin(self):
        return eagle.deploy(self.kernel)


def _oscillator_inputs(n, rng, steps):
    return {"omega": rng.uniform(0.5, 2.0, n), "dt": DT, "steps": steps, "x": np.ones(n), "v": np.zeros(n)}


SPECS = {
    "stream": Spec("stream", stream, "memory-bound",
                   lambda n, r, s: {"x": r.uniform(-3.0, 3.0, n), "a": 2.5, "b": -1.25},
                   stream_numpy, _numba_stream),
    "oscillator": Spec("oscillator", oscillator, "compute-bound + cell", _oscillator_inputs,
                       oscillator_numpy, _numba_oscillator),
    "stencil": Spec("stencil", stencil, "cross_sample_read",
                    lambda n, r, s: {"x": r.uniform(-3.0, 3.0, n)}, stencil_numpy, _numba_stencil, halo=2),
    "mapreduce": Spec("mapreduce", mapreduce, "cells only",
                      lambda n, r, s: {"x": r.uniform(-3.0, 3.0, n)}, mapreduce_numpy, _numba_mapreduce),
}

#: the four kernels of the side-by-side table
MAIN = ["stream", "oscillator", "stencil", "mapreduce"]


def inputs(name: str, n: int, steps: int = 1000, seed: int = 2024) -> dict:
    """Fresh inputs for kernel ``name`` (new arrays every call: Mutable planes are updated)."""
    return SPECS[name].make(n, np.random.default_rng(seed), steps)
