"""The core suite: one kernel per behaviour, with inputs and (where exact) a numpy reference.

Every structure's bit-identity tests run these same kernels (HostTeam, DeviceKernel,
RankPartition, DaskPartition), so that "the same bits" is checked on the same ground.
The references are written here with numpy and plain loops, never with eagle: per-sample
arithmetic in numpy (the same operations in the same order, so the same bits), cells folded by
``tests.reference.cell``.  ``transcendental`` and the exp/sin/cos cells of ``reductions`` have
none: numpy's math functions are not the C library's, and need not agree in the last bit.
This module is importable from MPI scripts and Dask workers (``tests.kernels``).
"""
from __future__ import annotations

import math

import numpy as np

import eagle
import eagle.exec as eexec
from eagle import Cell, In, Out, Param
from eagle import plan as eplan
from eagle.bits import as_dict, same_bits  # noqa: F401 - the suite's comparison, imported from here
from eagle.models import axpb, oscillator, stencil
from tests.reference import cell

SCALE = 1.5          # a module-level number: frozen into the kernels that read it at deploy


@eagle.kernel
def transcendental(i, x: In, y: Out):
    v = x[i]
    y[i] = math.exp(-v * v) * math.sin(3.0 * v) + math.log(1.0 + abs(v)) + math.sqrt(abs(v)) * SCALE


@eagle.kernel
def histogram(i, x: In, counts: Out):
    nbins = counts.shape[0]
    b = int(x[i] * nbins)
    if b >= nbins:
        b = nbins - 1
    if b < 0:
        b = 0
    counts[b] += 1.0


@eagle.kernel
def reductions(i, x: In, total: Cell["sum"], prod: Cell["times"], hi: Cell["max"], lo: Cell["min"],
               positive: Cell["land"]):
    v = x[i]
    total[i] = math.exp(v) * SCALE
    prod[i] = 1.0 + v * 1e-3
    hi[i] = math.sin(v)
    lo[i] = math.cos(v)
    positive[i] = 1.0 if v > -10.0 else 0.0


@eagle.kernel
def halvings(i, x: In, tol: Param, count: Out, rest: Out):
    v = abs(x[i])
    c = 0
    while v > tol:            # a data-dependent number of steps per sample
        v = v * 0.5
        c += 1
        if c > 10000:
            break
    count[i] = c
    rest[i] = v


@eagle.kernel
def vectors(i, p: In, scale: Param, q: Out[3], norm: Out):
    s = 0.0
    for k in range(3):
        q[i, k] = p[i, k] * scale + k
        s += p[i, k] * p[i, k]
    norm[i] = math.sqrt(s)


@eagle.kernel
def integers(i, k: In, y: Out, parity: Out["int64"]):
    y[i] = k[i] * 3 + 1
    parity[i] = k[i] % 2


@eagle.kernel
def neighbour_sum(i, x: In, total: Cell["sum"]):
    n = x.shape[0]
    right = x[i + 1] if i + 1 < n else 0.0
    total[i] = x[i] * right


@eagle.kernel
def picky(i, x: In, y: Out):
    if x[i] < 0.0:
        raise ValueError("negative input")
    y[i] = math.sqrt(x[i])


def _uniform(n, rng, lo=-3.0, hi=3.0):
    return rng.uniform(lo, hi, n)


# -- numpy references (independent of eagle) -------------------------------------------------------

def stencil_numpy(d):
    """The 5-point average with missing neighbours replaced by the edge sample, summed left to right."""
    x = d["x"]
    if x.shape[0] == 0:
        return {"y": np.zeros(0)}
    xp = np.pad(x, 2, mode="edge")
    return {"y": (xp[:-4] + xp[1:-3] + xp[2:-2] + xp[3:-1] + xp[4:]) / 5.0}


def halvings_numpy(d):
    """Halve |x| while above tol (at most 10001 times), counting the halvings."""
    v = np.abs(d["x"]).astype(np.float64)
    count = np.zeros(v.shape[0])
    active = v > d["tol"]
    while active.any():
        v[active] *= 0.5
        count[active] += 1.0
        active = (v > d["tol"]) & (count <= 10000)
    return {"count": count, "rest": v}


def neighbour_sum_numpy(d):
    """sum_i x[i] * x[i + 1] (x[n] read as 0), folded as a cell."""
    x = d["x"]
    right = np.concatenate([x[1:], np.zeros(min(x.shape[0], 1))])
    return {"total": np.float64(cell("sum", x * right))}


def oscillator_numpy(d):
    """Explicit Euler, both updates from the old values; the final energies folded as a cell."""
    x, v, w, dt = d["x"].copy(), d["v"].copy(), d["omega"], d["dt"]
    for _ in range(d["steps"]):
        x, v = x + dt * v, v - dt * w * w * x
    return {"x": x, "v": v, "energy": np.float64(cell("sum", 0.5 * (v * v + w * w * x * x)))}


def reductions_numpy(d):
    """The two cells of ``reductions`` made of exact arithmetic (the others call exp, sin, cos)."""
    x = d["x"]
    return {"prod": np.float64(cell("times", 1.0 + x * 1e-3)),
            "positive": np.float64(cell("land", np.where(x > -10.0, 1.0, 0.0)))}


#: name -> (kernel, inputs(n, rng) -> dict, numpy reference(inputs) -> dict or None)
CASES = {
    "axpb": (axpb, lambda n, r: {"x": _uniform(n, r), "a": 2.5, "b": -1.25},
             lambda d: {"y": d["a"] * d["x"] + d["b"]}),
    "transcendental": (transcendental, lambda n, r: {"x": _uniform(n, r)}, None),
    "stencil": (stencil, lambda n, r: {"x": _uniform(n, r)}, stencil_numpy),
    "histogram": (histogram, lambda n, r: {"x": r.uniform(0.0, 1.0, n)},
                  lambda d: {"counts": np.bincount(np.clip((d["x"] * d["x"].shape[0]).astype(np.int64), 0,
                                                           max(d["x"].shape[0] - 1, 0)),
                                                   minlength=d["x"].shape[0]).astype(np.float64)}),
    "reductions": (reductions, lambda n, r: {"x": _uniform(n, r)}, reductions_numpy),
    "oscillator": (oscillator, lambda n, r: {"omega": r.uniform(0.5, 2.0, n), "dt": 1e-3, "steps": 50,
                                               "x": np.ones(n), "v": np.zeros(n)}, oscillator_numpy),
    "halvings": (halvings, lambda n, r: {"x": 10.0 ** r.uniform(-3, 6, n), "tol": 1.0}, halvings_numpy),
    "vectors": (vectors, lambda n, r: {"p": r.normal(size=(n, 3)), "scale": 0.75},
                lambda d: {"q": d["p"] * d["scale"] + np.arange(3.0)}),
    "integers": (integers, lambda n, r: {"k": r.integers(-1000, 1000, n)},
                 lambda d: {"y": (d["k"] * 3 + 1).astype(np.float64), "parity": d["k"] % 2}),
    "neighbour_sum": (neighbour_sum, lambda n, r: {"x": _uniform(n, r)}, neighbour_sum_numpy),
}

#: kernels whose runs may be split (every class but cross_sample_write)
SPLITTABLE = [name for name, (k, _, _) in CASES.items() if eagle.deploy(k).exec_access != "cross_sample_write"]

#: splittable kernels whose outputs can be gathered between processes (every output float64);
#: the others are refused by RankPartition and DaskPartition at plan time
GATHERABLE = [name for name in SPLITTABLE
              if all(role.out_dtype == np.float64 for role, _ in eagle.deploy(CASES[name][0]).arg_spec
                     if role.kind == "Out")]


def inputs(name, n, seed=12345):
    """Fresh inputs for case ``name`` (new arrays every call: Mutable planes are updated)."""
    return CASES[name][1](n, np.random.default_rng(seed))


def one_process(name, n):
    """Case ``name`` on ``n`` samples in this process (HostTeam), as a dict by output name: the
    reference every distributed run is compared with."""
    plugin = eagle.deploy(CASES[name][0])
    return as_dict(plugin, eplan.plan(plugin, structure=eexec.HostTeam).run(**inputs(name, n)))


@eagle.kernel
def slow_neighbours(i, x: In, steps: Param, y: Out):
    """Fault injection only: as slow as ``steps`` makes it, and it reads other samples (its input
    travels whole, scattered to every worker)."""
    n = x.shape[0]
    acc = 0.0
    for k in range(steps):
        acc = acc * 0.5 + x[(i + k) % n]
    y[i] = acc


@eagle.kernel
def slow_sine(i, x: In, steps: Param, y: Out):
    """Fault injection only: a sum of ``steps`` half sines per sample, as slow as ``steps`` makes it."""
    s = 0.0
    for k in range(steps):
        s += 0.5 * math.sin(x[i] + k)
    y[i] = s
