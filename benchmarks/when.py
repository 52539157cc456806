"""When to use eagle: the same oscillator written five ways, on one machine, measured.

    python -m benchmarks.when              # 10^6 oscillators x 100 steps, 5 repeats (a minute or two)
    python -m benchmarks.when --quick      # 10^5 oscillators, 3 repeats

The arms, medians of ``--repeats`` runs (arms alternated), every one checked against eagle's
one-process run (the x and v planes, bit for bit; the energies' sum as each arm folds it):

* ``eagle HostTeam`` -- one process, a team of 2 threads, numpy planes;
* ``numba prange`` -- the same loop in ``@njit(parallel=True)`` over ``prange`` (2 threads),
  the energies summed by ``np.sum``;
* ``eagle DaskPartition`` -- numpy planes, 2 local workers of 1 thread (``eagle_dask``);
* ``eagle lazy`` -- dask planes persisted on the 2 workers, outputs persisted;
* ``map_blocks + numba`` -- ``dask.array.map_blocks`` over a numba loop, dask's ``sum``;
* ``dask.delayed + numba`` -- one delayed call of the numba loop per chunk, summed on the driver.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numba
import numpy as np
from numba import njit, prange

import eagle
import eagle.exec as eexec
from eagle import plan as eplan
from eagle.bits import same_bits
from eagle.models import oscillator

from .kernels import DT, oscillator_block


@njit(parallel=True, cache=True)
def oscillator_prange(omega, x, v, dt, steps):
    """The oscillator over every sample with ``prange``; returns x, v and the energies."""
    n = omega.shape[0]
    xo, vo, e = np.empty(n), np.empty(n), np.empty(n)
    for i in prange(n):
        xi, vi, w = x[i], v[i], omega[i]
        for _ in range(steps):
            xi, vi = xi + dt * vi, vi - dt * w * w * xi
        xo[i], vo[i] = xi, vi
        e[i] = 0.5 * (vi * vi + w * w * xi * xi)
    return xo, vo, e


def _arms(client, n, steps, chunk):
    import dask
    import dask.array as da
    from eagle_dask import DaskPartition
    plugin = eagle.deploy(oscillator)
    one = eplan.plan(plugin, structure=eexec.HostTeam)
    dist = eplan.plan(plugin, structure=DaskPartition.on(client, progress=False))
    omega = np.linspace(0.5, 2.0, n)
    chunks = (chunk,)

    def planes():
        return {"omega": omega, "dt": DT, "steps": steps, "x": np.ones(n), "v": np.zeros(n)}

    def lazy():
        w, x0, v0 = dask.persist(da.from_array(omega, chunks=chunks), da.ones(n, chunks=chunks),
                                 da.zeros(n, chunks=chunks))
        out = dist.run(omega=w, dt=DT, steps=steps, x=x0, v=v0)
        x, v, e = dask.persist(out["x"], out["v"], out["energy"])
        return client.gather(client.compute([x, v, e]))

    def blocks():
        w = da.from_array(omega, chunks=chunks)
        out = da.map_blocks(oscillator_block, w, da.ones(n, chunks=chunks), da.zeros(n, chunks=chunks), DT, steps,
                            dtype=np.float64, new_axis=1, chunks=(w.chunks[0], (3,)))
        return dask.compute(out[:, 0], out[:, 1], out[:, 2].sum())

    def delayed():
        parts = [dask.delayed(oscillator_block)(omega[a:a + chunk], np.ones(min(chunk, n - a)),
                                                np.zeros(min(chunk, n - a)), DT, steps)
                 for a in range(0, n, chunk)]
        got = np.concatenate(dask.compute(*parts))
        return got[:, 0], got[:, 1], got[:, 2].sum()

    def prange_arm():
        x, v, e = oscillator_prange(omega, np.ones(n), np.zeros(n), DT, steps)
        return x, v, np.sum(e)

    return {
        "eagle HostTeam (2 threads)": lambda: tuple(one.run(**planes()).values()),
        "numba prange (2 threads)": prange_arm,
        "eagle DaskPartition, numpy planes (2 workers)": lambda: tuple(dist.run(**planes()).values()),
        "eagle lazy, dask planes (2 workers)": lazy,
        "map_blocks + numba (2 workers)": blocks,
        "dask.delayed + numba (2 workers)": delayed,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.when", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="10^5 samples, 3 repeats")
    ap.add_argument("--repeats", type=int, default=None)
    a = ap.parse_args(argv)
    repeats = a.repeats or (3 if a.quick else 5)
    n, steps = (10**5 if a.quick else 10**6), 100
    chunk = n // 8 // 32 * 32
    os.environ["EAGLE_NUM_THREADS"] = "2"
    numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
    import eagle_dask
    client = eagle_dask.local_cluster(n_workers=2, threads_per_worker=1)
    try:
        client.wait_for_workers(2, timeout=120)
        arms = _arms(client, n, steps, chunk)
        outs = {k: f() for k, f in arms.items()}                    # compile everywhere first
        times = {k: [] for k in arms}
        for _ in range(repeats):
            for k, f in arms.items():
                t = time.perf_counter()
                outs[k] = f()
                times[k].append(time.perf_counter() - t)
    finally:
        client.close()
    ref = outs["eagle HostTeam (2 threads)"]
    base = statistics.median(times["eagle HostTeam (2 threads)"])
    print(f"oscillator, {n} samples x {steps} steps, medians of {repeats}; chunks of {chunk} samples")
    print(f"{'arm':48s} {'seconds':>8s} {'ratio':>6s}  x,v same bits  energy sum same bits")
    for k in arms:
        m = statistics.median(times[k])
        x, v, e = outs[k]
        xv = same_bits(np.asarray(x), ref[0]) and same_bits(np.asarray(v), ref[1])
        print(f"{k:48s} {m:8.3f} {m / base:6.2f}  {'yes' if xv else 'NO':13s}  "
              f"{'yes' if float(e) == float(ref[2]) else 'no (' + repr(float(e) - float(ref[2])) + ')'}")


if __name__ == "__main__":
    main()
