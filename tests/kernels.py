"""The core suite: one kernel per behaviour, with inputs and (where exact) a numpy reference.

Every structure's bit-identity tests run these same kernels (HostTeam, DeviceKernel,
RankPartition, DaskPartition), so that "the same bits" is checked on the same ground.
This module is importable from MPI scripts and Dask workers (``tests.kernels``).
"""
from __future__ import annotations

import math

import numpy as np

import eagle
from eagle import Cell, In, Out, Param
from eagle.models import axpb, oscillator, stencil

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


#: name -> (kernel, inputs(n, rng) -> dict, numpy reference(inputs) -> dict or None)
CASES = {
    "axpb": (axpb, lambda n, r: {"x": _uniform(n, r), "a": 2.5, "b": -1.25},
             lambda d: {"y": d["a"] * d["x"] + d["b"]}),
    "transcendental": (transcendental, lambda n, r: {"x": _uniform(n, r)}, None),
    "stencil": (stencil, lambda n, r: {"x": _uniform(n, r)}, None),
    "histogram": (histogram, lambda n, r: {"x": r.uniform(0.0, 1.0, n)},
                  lambda d: {"counts": np.bincount(np.clip((d["x"] * d["x"].shape[0]).astype(np.int64), 0,
                                                           max(d["x"].shape[0] - 1, 0)),
                                                   minlength=d["x"].shape[0]).astype(np.float64)}),
    "reductions": (reductions, lambda n, r: {"x": _uniform(n, r)}, None),
    "oscillator": (oscillator, lambda n, r: {"omega": r.uniform(0.5, 2.0, n), "dt": 1e-3, "steps": 50,
                                               "x": np.ones(n), "v": np.zeros(n)}, None),
    "halvings": (halvings, lambda n, r: {"x": 10.0 ** r.uniform(-3, 6, n), "tol": 1.0}, None),
    "vectors": (vectors, lambda n, r: {"p": r.normal(size=(n, 3)), "scale": 0.75},
                lambda d: {"q": d["p"] * d["scale"] + np.arange(3.0)}),
    "integers": (integers, lambda n, r: {"k": r.integers(-1000, 1000, n)},
                 lambda d: {"y": (d["k"] * 3 + 1).astype(np.float64), "parity": d["k"] % 2}),
    "neighbour_sum": (neighbour_sum, lambda n, r: {"x": _uniform(n, r)}, None),
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


def same_bits(a, b) -> bool:
    """Bit-for-bit equality of two results (planes, cells or dicts of them), NaN-aware."""
    if isinstance(a, dict) or isinstance(b, dict):
        return (isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys()
                and all(same_bits(a[k], b[k]) for k in a))
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return a.tobytes() == b.tobytes()


def as_dict(plugin, result):
    """A run's result as a dict by output name (a single output is returned bare)."""
    if isinstance(result, dict):
        return result
    return {plugin.outputs[0]: result}
