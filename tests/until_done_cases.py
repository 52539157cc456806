"""Step kernels for ``run_until_done``, their inputs, and the plain-Python reference.

The reference steps each sample one step at a time, in sample order, by calling the step
kernel's body as a Python function on the full planes (no rounds, no compaction, none of eagle's
generated code), counts its steps, and folds the cells with ``tests.reference.cell`` over every
sample's last contribution.  Importable from MPI scripts and Dask workers; run as
``python -m tests.until_done_cases OUTDIR STRUCTURE`` it writes ``OUTDIR/<case>.npz`` for the
HostTeam paths and the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``), judged by
``tests/test_until_done.py``.
"""
from __future__ import annotations

import math
import sys

import numpy as np

import eagle
import eagle.random as er
from eagle import Cell, In, Mutable, Out, Param, Table
from tests.reference import IDENTITY, cell

TOP = 10.0


@eagle.kernel
def walker(i, seed: Param, up: Param, bias: Table, x: Mutable, t: Mutable, done: Out, hits: Cell["sum"],
           last: Cell["max"], growth: Cell["times"]):
    """Gambler's ruin: a walker steps +1 / -1 (the draw keyed by the sample's index and its step
    count) until it reaches 0 or TOP; the index is also used as a value and as a Table index."""
    u = er.uniform(seed, i, int(t[i]))
    step = 1.0 if u < up + bias[i % 4] else -1.0
    x[i] = x[i] + step
    t[i] = t[i] + 1.0
    if x[i] <= 0.0 or x[i] >= TOP:
        done[i] = 1.0
        hits[i] = (1.0 if x[i] >= TOP else 0.0) + i * 1e-3
    last[i] = t[i] * 0.5 + u
    growth[i] = 1.0 + u * 0.01


@eagle.kernel
def kepler(i, m: In, e: In, tol: Param, big_e: Mutable, done: Mutable, residual: Out, energy: Cell["sum"]):
    """One Newton step of Kepler's equation E - e sin E = M; done when the step is below tol."""
    ee = big_e[i]
    f = ee - e[i] * math.sin(ee) - m[i]
    d = f / (1.0 - e[i] * math.cos(ee))
    big_e[i] = ee - d
    residual[i] = f
    if abs(d) < tol:
        done[i] = 1.0
    energy[i] = math.cos(big_e[i]) * e[i]


@eagle.kernel
def planar(i, seed: Param, pos: Mutable, t: Mutable, done: Out, dist: Out[2]):
    """A walker in the plane (vector planes, pos[i, k]) until it leaves the unit disc."""
    r2 = 0.0
    for k in range(2):
        pos[i, k] = pos[i, k] + 0.2 * er.normal(seed, i, 2 * int(t[i]) + k)
        dist[i, k] = abs(pos[i, k]) + k * i
        r2 += pos[i, k] * pos[i, k]
    t[i] = t[i] + 1.0
    if r2 > 1.0:
        done[i] = 1.0


CASES = {"walker": walker, "kepler": kepler, "planar": planar}


def inputs(name, n, seed=3):
    """Fresh planes and Params of ``n`` samples for case ``name``."""
    rng = np.random.default_rng(seed + n)
    if name == "walker":
        return {"seed": 11, "up": 0.45, "bias": np.array([0.0, 0.05, -0.05, 0.02]),
                "x": rng.integers(1, 10, size=n).astype(np.float64), "t": np.zeros(n)}
    if name == "planar":
        return {"seed": 5, "pos": rng.uniform(-0.5, 0.5, size=(n, 2)), "t": np.zeros(n)}
    m = rng.uniform(0.0, 2 * math.pi, size=n)
    e = rng.uniform(0.0, 0.99, size=n)
    return {"m": m, "e": e, "tol": 1e-13, "big_e": m.copy(), "done": np.zeros(n)}


def reference(kernel, planes, max_steps, done="done", steps=None, contrib=None):
    """``(planes, status, steps, cells, contributions)`` stepping each sample in plain Python."""
    n = len(next(v for r, nm in kernel.arg_spec if r.kind in ("In", "Mutable") for v in [planes[nm]]))
    args, outs, cells = [], {}, {}
    for role, name in kernel.arg_spec:
        if role.kind in ("Param", "Table", "In"):
            v = planes[name]
        elif role.kind == "Cell":
            v = cells[name] = (np.full(n, IDENTITY[role.op]) if contrib is None else contrib[name].copy())
        elif name in planes:
            v = outs[name] = np.array(planes[name], copy=True)
        else:
            v = outs[name] = np.zeros((n,) if role.width is None else (n, role.width), dtype=role.out_dtype)
        args.append(v)
    taken = np.zeros(n, dtype=np.int64) if steps is None else np.array(steps, dtype=np.int64)
    for i in range(n):
        while outs[done][i] == 0 and taken[i] < max_steps:
            kernel.fn(i, *args)
            taken[i] += 1
    status = (outs[done] != 0).astype(np.int8)
    ops = {name: role.op for role, name in kernel.arg_spec if role.kind == "Cell"}
    folded = {name: np.float64(cell(ops[name], v)) for name, v in cells.items()}
    return outs, status, taken, folded, cells


def flat(result):
    """A run_until_done result as one dict of arrays (planes, status, steps, cells); a result of
    dask arrays is computed first (one ``dask.compute``)."""
    if any(hasattr(v, "dask") for v in result.planes.values()):
        import dask
        from eagle.until_done import UntilDone
        parts = dask.compute(result.planes, result.status, result.steps, result.cells, result.contributions)
        result = UntilDone(result.kernel, *parts, result.arguments)
    out = {f"plane/{k}": np.asarray(v) for k, v in result.planes.items()}
    out.update({f"cell/{k}": np.asarray(v) for k, v in result.cells.items()})
    out["status"], out["steps"] = result.status, result.steps
    return out


def flat_reference(ref):
    outs, status, steps, cells, _ = ref
    out = {f"plane/{k}": v for k, v in outs.items()}
    out.update({f"cell/{k}": np.asarray(v) for k, v in cells.items()})
    out["status"], out["steps"] = status, steps
    return out


#: (case, n, max_steps, round_steps): odd n, n = 0 and 1, caps that stop some samples
RUNS = (("walker", 0, 50, None), ("walker", 1, 400, None), ("walker", 101, 400, None), ("walker", 67, 12, 5),
        ("kepler", 53, 60, None), ("kepler", 53, 3, 1), ("planar", 45, 30, None))


def lazy(name, planes, chunks):
    """``planes`` of case ``name`` with every sample plane a dask array of ``chunks`` along samples
    (an int, or a function of n giving the chunk sizes); Params and Tables as they are."""
    import dask.array as da
    kinds = {nm: r.kind for r, nm in CASES[name].arg_spec}
    out = {}
    for nm, v in planes.items():
        if kinds[nm] in ("In", "Out", "Mutable"):
            c = chunks(len(v)) if callable(chunks) else chunks
            v = da.from_array(v, chunks=(c,) + v.shape[1:])
        out[nm] = v
    return out


def run_all(structure, chunks=None, **plan_kw):
    """Every RUNS entry, and a resumed run, through ``structure``: {key: flat result} (``chunks``:
    the planes as dask arrays so chunked, see ``lazy``)."""
    from eagle import plan as eplan

    def given(name, n):
        planes = inputs(name, n)
        return planes if chunks is None else lazy(name, planes, chunks)
    out = {}
    for name, n, cap, rounds in RUNS:
        p = eplan.plan(CASES[name], structure=structure, **plan_kw)
        got = p.run_until_done(max_steps=cap, round_steps=rounds, **given(name, n))
        out[f"{name}/{n}/{cap}/{rounds}"] = flat(got)
    p = eplan.plan(walker, structure=structure, **plan_kw)
    first = p.run_until_done(max_steps=7, **given("walker", 101))
    out["walker/101/resume"] = flat(p.run_until_done(max_steps=400, resume=first))
    return out


def main(outdir, structure):
    import eagle.exec as eexec
    kw = {"npartitions": 3} if structure == "HostTeam" else {"npartitions": 2}
    for key, arrays in run_all(getattr(eexec, structure), **kw).items():
        np.savez(f"{outdir}/{key.replace('/', '_')}.npz", **arrays)
    if structure == "HostTeam":               # the host loop the rounds ran through
        from eagle.step_kernel import loop_plugin
        with open(f"{outdir}/host_path.txt", "w") as f:
            f.write(loop_plugin(eagle.deploy(walker), "done").plugin.host_path)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
