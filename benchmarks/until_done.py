"""Run-until-done benchmark: a heavy-tailed workload, stepped in rounds or in one while loop.

Run ``python -m benchmarks.until_done [n] [repeats]`` (default 10^6 samples, 5 repeats).  Each
sample is a walker absorbed at random: each step it is absorbed with probability ``hazard``,
1/20 for 99 % of the samples (median about 14 steps) and 1/2000 for 1 % (about 100x the median).

* HostTeam, 2 threads: ``Plan.run_until_done`` of the step kernel ``absorb_step`` against the
  plain kernel ``absorb_while`` (the same walk in a ``while`` inside the body), alternating the
  two, fresh inputs (a new seed) each repeat; the median of each and their ratio.  Both give
  the same planes, checked.
* DaskPartition on 2 local workers (one thread each), the tail samples all in the first
  worker's half: run_until_done with its rounds (each round's shares cut over the samples that
  remain: rebalanced) against one round with the whole budget (``round_steps=max_steps``: not
  rebalanced, the first worker steps the whole tail); the median of each and their ratio.
  Then the same with the planes as dask arrays of two chunks (the tail in the first): the state
  stays on the workers, the time includes fetching the planes and steps to the driver.
"""
from __future__ import annotations

import statistics
import sys
import time

import numpy as np

import eagle
import eagle.exec as eexec
import eagle.random as er
from eagle import In, Mutable, Out, Param
from eagle import plan as eplan

MAX_STEPS = 100_000
SHORT, LONG = 1.0 / 20.0, 1.0 / 2000.0


@eagle.kernel
def absorb_step(i, seed: Param, hazard: In, x: Mutable, t: Mutable, done: Out):
    u = er.uniform(seed, i, int(t[i]))
    x[i] = x[i] + (u - 0.5)
    t[i] = t[i] + 1.0
    if u < hazard[i]:
        done[i] = 1.0


@eagle.kernel
def absorb_while(i, seed: Param, cap: Param, hazard: In, x: Mutable, t: Mutable):
    xi = x[i]
    k = int(t[i])
    while k < cap:
        u = er.uniform(seed, i, k)
        xi = xi + (u - 0.5)
        k += 1
        if u < hazard[i]:
            break
    x[i] = xi
    t[i] = k


def hazards(n, rng, tail_in_first_half=False):
    h = np.full(n, SHORT)
    k = max(1, n // 100)
    where = rng.choice(n // 2 if tail_in_first_half else n, size=k, replace=False)
    h[where] = LONG
    return h


def planes(n, rng, **kw):
    return {"seed": int(rng.integers(2**32)), "hazard": hazards(n, rng, **kw), "x": np.zeros(n), "t": np.zeros(n)}


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def host(n, repeats, rng):
    """(median until-done s, median while s, same planes)."""
    step = eplan.plan(absorb_step, structure=eexec.HostTeam)
    loop = eplan.plan(absorb_while, structure=eexec.HostTeam)
    warm = planes(256, rng)
    step.run_until_done(max_steps=MAX_STEPS, **warm)
    loop.run(cap=MAX_STEPS, **planes(256, rng))
    times, same = {"until_done": [], "while": []}, True
    for _ in range(repeats):
        p = planes(n, rng)
        q = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in p.items()}
        dt, got = timed(lambda: step.run_until_done(max_steps=MAX_STEPS, **p))
        times["until_done"].append(dt)
        dt, ref = timed(lambda: loop.run(cap=MAX_STEPS, **q))
        times["while"].append(dt)
        same &= got.planes["x"].tobytes() == ref["x"].tobytes() and np.array_equal(got.steps, ref["t"])
    return statistics.median(times["until_done"]), statistics.median(times["while"]), same


def _lazy(client, p, n):
    """``p``'s planes as dask arrays of two chunks, scattered to the workers (not in a graph)."""
    import dask.array as da
    half = max(n // 2, 1)

    def on_cluster(v):
        pieces = [v[lo:lo + half] for lo in range(0, n, half)]
        return da.concatenate([da.from_delayed(f, shape=x.shape, dtype=x.dtype)
                               for f, x in zip(client.scatter(pieces), pieces)])
    return {k: (on_cluster(v) if isinstance(v, np.ndarray) else v) for k, v in p.items()}


def _fetched(run, lazy):
    """``run()``'s result with its x plane and steps as numpy (fetched from the cluster when lazy)."""
    r = run()
    if lazy:
        import dask
        return dask.compute(r.planes["x"], r.steps)
    return r.planes["x"], r.steps


def dask(n, repeats, rng, lazy=False):
    """(median rebalanced s, median one-round s, same planes); ``lazy``: dask planes."""
    import eagle_dask
    from eagle_dask import DaskPartition
    client = eagle_dask.local_cluster(n_workers=2, threads_per_worker=1)
    try:
        client.wait_for_workers(2, timeout=120)
        p = eplan.plan(absorb_step, structure=DaskPartition.on(client, progress=False))
        p.run_until_done(max_steps=MAX_STEPS, **planes(256, rng))
        times, same = {"rebalanced": [], "one round": []}, True
        for _ in range(repeats):
            base = planes(n, rng, tail_in_first_half=True)
            copy = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in base.items()}
            if lazy:
                base, copy = _lazy(client, base, n), _lazy(client, copy, n)
            dt, a = timed(lambda: _fetched(lambda: p.run_until_done(max_steps=MAX_STEPS, **base), lazy))
            times["rebalanced"].append(dt)
            dt, b = timed(lambda: _fetched(lambda: p.run_until_done(max_steps=MAX_STEPS, round_steps=MAX_STEPS,
                                                                    **copy), lazy))
            times["one round"].append(dt)
            same &= a[0].tobytes() == b[0].tobytes() and np.array_equal(a[1], b[1])
        return statistics.median(times["rebalanced"]), statistics.median(times["one round"]), same
    finally:
        client.close()


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    n = int(float(argv[0])) if argv else 10 ** 6
    repeats = int(argv[1]) if len(argv) > 1 else 5
    rng = np.random.default_rng(2026)
    import os
    os.environ.setdefault("EAGLE_NUM_THREADS", "2")
    print(f"run until done, {n} walkers (1 % absorbed 100x slower), median of {repeats} runs (seconds)")
    u, w, same = host(n, repeats, rng)
    print(f"HostTeam, {os.environ['EAGLE_NUM_THREADS']} threads: until done {u:.3f}  while in the body {w:.3f}  "
          f"ratio {u / w:.2f}  same planes: {same}")
    r, o, same = dask(n, repeats, rng)
    print(f"DaskPartition, 2 workers, tail in one block: rebalanced {r:.3f}  one round {o:.3f}  "
          f"ratio {r / o:.2f}  same planes: {same}")
    r, o, same = dask(n, repeats, rng, lazy=True)
    print(f"DaskPartition, dask planes of 2 chunks, tail in the first: rebalanced {r:.3f}  one round {o:.3f}  "
          f"ratio {r / o:.2f}  same planes: {same}")


if __name__ == "__main__":
    main()
