"""Dask arrays: eagle's lazy mode on a local cluster of 2 workers (127.0.0.1), measured.

    python -m benchmarks.dask_arrays                 # the sizes of the issue (a few minutes on 2 cores)
    python -m benchmarks.dask_arrays --quick         # 10-100x smaller, under a minute
    python -m benchmarks.dask_arrays --out DIR       # also write DIR/dask_arrays.json

Five measurements, medians of ``--repeats`` runs (arms alternated, so a busy machine slows them
alike); every arm's outputs are checked bit for bit against one process:

1. **driver memory** -- a 10^8-sample plane made on the workers (``da.random``), a kernel with a
   cell, the cell computed: the growth of the driver's resident memory (peak, sampled every 10 ms);
2. **oscillator** -- 10^6 oscillators x 1000 steps, inputs persisted on the 2 workers, outputs
   persisted, against one process with 2 threads (``HostTeam``) on numpy planes: the ratio;
3. **chained loop** -- 10 runs of 100 steps feeding ``x`` and ``v`` back: lazy (one graph, and
   persisted at every step) against the numpy mode (every run through the driver) and one process;
4. **map_blocks** -- the same work written with ``dask.array.map_blocks`` over a plain numba loop
   (``benchmarks.kernels``), and dask's own ``sum``, whose bits change with the chunking where
   eagle's cell does not;
5. **numpy mode** -- the fixed cost of a ``DaskPartition`` run of 10^4 samples on numpy planes.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time

import numpy as np

import eagle
import eagle.exec as eexec
from eagle import Cell, In
from eagle import plan as eplan
from eagle.bits import same_bits
from eagle.models import axpb, oscillator

from .kernels import DT, oscillator_block, stream_block


@eagle.kernel
def mean_square(i, x: In, total: Cell["sum"]):
    total[i] = x[i] * x[i]


def median(f, repeats):
    """Median seconds of ``repeats`` calls of ``f`` (``f`` returns its own seconds)."""
    return statistics.median(f() for _ in range(repeats))


def timed(f):
    t = time.perf_counter()
    out = f()
    return time.perf_counter() - t, out


class PeakRSS:
    """The driver's peak resident memory while the block runs, sampled every 10 ms."""

    def __enter__(self):
        import psutil
        self.proc = psutil.Process()
        self.base = self.peak = self.proc.memory_info().rss
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self):
        while not self.done.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(0.01)

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join(5)
        self.peak = max(self.peak, self.proc.memory_info().rss)

    @property
    def growth_mb(self):
        return (self.peak - self.base) / 2 ** 20


def lazy(client):
    from eagle_dask import DaskPartition
    return DaskPartition.on(client, progress=False)


def driver_memory(client, n, chunk):
    import dask.array as da
    p = eplan.plan(eagle.deploy(mean_square), structure=lazy(client))
    p.run(x=da.random.default_rng(0).random(1000, chunks=500)).compute()         # warm: imports, compile
    with PeakRSS() as mem:
        seconds, s = timed(lambda: p.run(x=da.random.default_rng(0).random(n, chunks=chunk)).compute())
    return {"n": n, "chunk": chunk, "plane_mb": n * 8 / 2 ** 20, "driver_growth_mb": mem.growth_mb,
            "seconds": seconds, "mean_square": float(s) / n}


def oscillators(n, seed=2024):
    rng = np.random.default_rng(seed)
    return rng.uniform(0.5, 2.0, n)


def persisted(client, arrays):
    from distributed import wait
    out = client.persist(arrays)
    wait(out)
    return out


def fresh(client, values, chunks):
    """numpy planes as dask arrays persisted on the workers, under names never used before: a
    run is a pure function of its inputs, so the same inputs would give keys dask already holds."""
    import uuid
    import warnings
    import dask.array as da
    tag = uuid.uuid4().hex[:8]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sending large graph", category=UserWarning)
        return persisted(client, [da.from_array(v, chunks=chunks, name=f"bench-{k}-{tag}")
                                  for k, v in enumerate(values)])


def oscillator_vs_one_process(client, n, steps, chunks, repeats):
    plugin = eagle.deploy(oscillator)
    omega = oscillators(n)
    one = eplan.plan(plugin, structure=eexec.HostTeam)
    p = eplan.plan(plugin, structure=lazy(client))

    def run_one():
        d = dict(omega=omega, dt=DT, steps=steps, x=np.ones(n), v=np.zeros(n))
        t, out = timed(lambda: one.run(**d))
        run_one.out = out
        return t

    def run_lazy():
        run_lazy.out = None
        w, x0, v0 = fresh(client, [omega, np.ones(n), np.zeros(n)], chunks)
        t, got = timed(lambda: persisted(client, list(p.run(omega=w, dt=DT, steps=steps, x=x0, v=v0).values())))
        run_lazy.out = got
        return t

    one.run(**dict(omega=omega[:64], dt=DT, steps=1, x=np.ones(64), v=np.zeros(64)))
    run_lazy()                                                                    # warm the workers
    times = {"one process (2 threads)": [], "lazy on 2 workers": []}
    for _ in range(repeats):
        times["one process (2 threads)"].append(run_one())
        times["lazy on 2 workers"].append(run_lazy())
    x, v, e = client.gather(client.compute(run_lazy.out))
    med = {k: statistics.median(v_) for k, v_ in times.items()}
    return {"n": n, "steps": steps, "chunks": chunks, **{f"{k} s": m for k, m in med.items()},
            "ratio": med["lazy on 2 workers"] / med["one process (2 threads)"],
            "identical": same_bits(run_one.out, {"x": x, "v": v, "energy": e})}


def chained(client, n, runs, steps, chunks, repeats):
    import dask
    from eagle_dask import DaskPartition
    plugin = eagle.deploy(oscillator)
    omega = oscillators(n)
    one = eplan.plan(plugin, structure=eexec.HostTeam)
    numpy_mode = eplan.plan(plugin, structure=DaskPartition.on(client, progress=False))
    p = eplan.plan(plugin, structure=lazy(client))
    res = {}

    def loop_numpy(plan):
        x, v = np.ones(n), np.zeros(n)
        t = time.perf_counter()
        for _ in range(runs):
            out = plan.run(omega=omega, dt=DT, steps=steps, x=x, v=v)
        res[plan.structure] = out
        return time.perf_counter() - t

    def loop_lazy(step_persist):
        res[step_persist] = None
        w, x, v = fresh(client, [omega, np.ones(n), np.zeros(n)], chunks)
        t = time.perf_counter()
        for _ in range(runs):
            out = p.run(omega=w, dt=DT, steps=steps, x=x, v=v)
            x, v = out["x"], out["v"]
            if step_persist:
                x, v = dask.persist(x, v)
        got = persisted(client, [x, v, out["energy"]])
        res[step_persist] = got
        return time.perf_counter() - t

    arms = {"one process (2 threads)": lambda: loop_numpy(one),
            "numpy mode, 2 workers": lambda: loop_numpy(numpy_mode),
            "lazy, one graph": lambda: loop_lazy(False),
            "lazy, persisted each run": lambda: loop_lazy(True)}
    for f in arms.values():
        f()                                                                       # warm
    times = {k: [] for k in arms}
    for _ in range(repeats):
        for k, f in arms.items():
            times[k].append(f())
    ref = res[one.structure]
    same = all(same_bits(ref, dict(zip(("x", "v", "energy"), client.gather(client.compute(res[k])))))
               for k in (False, True)) and same_bits(ref, res[numpy_mode.structure])
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"n": n, "runs": runs, "steps": steps, **{f"{k} s": m for k, m in med.items()},
            "lazy / numpy mode": med["lazy, one graph"] / med["numpy mode, 2 workers"], "identical": same}


def versus_map_blocks(client, n, chunks, steps, repeats):
    import dask.array as da
    xs = np.random.default_rng(7).uniform(-3.0, 3.0, n)
    omega = oscillators(n)
    stream = eplan.plan(eagle.deploy(axpb), structure=lazy(client))
    osc = eplan.plan(eagle.deploy(oscillator), structure=lazy(client))
    arms = {
        "stream: eagle": lambda x, w, x0, v0: [stream.run(x=x, a=2.5, b=-1.25)],
        "stream: map_blocks (numba loop)": lambda x, w, x0, v0: [x.map_blocks(stream_block, 2.5, -1.25,
                                                                              dtype=np.float64)],
        "stream: dask elementwise": lambda x, w, x0, v0: [2.5 * x + (-1.25)],
        "oscillator: eagle": lambda x, w, x0, v0: list(osc.run(omega=w, dt=DT, steps=steps, x=x0, v=v0).values()),
        "oscillator: map_blocks (numba loop)": lambda x, w, x0, v0: _osc_map_blocks(w, x0, v0, steps),
    }
    outs = {}

    def once(k):
        outs[k] = None
        planes = fresh(client, [xs, omega, np.ones(n), np.zeros(n)], chunks)
        t, outs[k] = timed(lambda: persisted(client, arms[k](*planes)))
        return t

    for k in arms:
        once(k)
    times = {k: [] for k in arms}
    for _ in range(repeats):
        for k in arms:
            times[k].append(once(k))
    got = {k: client.gather(client.compute(v)) for k, v in outs.items()}
    y_ref = 2.5 * xs - 1.25
    one = eplan.plan(eagle.deploy(oscillator), structure=eexec.HostTeam).run(
        omega=omega, dt=DT, steps=steps, x=np.ones(n), v=np.zeros(n))
    # the cell: eagle's at another chunking, and dask's own sum of the same contributions at both
    other = chunks // 3 + 1
    w, x0, v0 = fresh(client, [omega, np.ones(n), np.zeros(n)], other)
    e_other = client.compute(osc.run(omega=w, dt=DT, steps=steps, x=x0, v=v0)["energy"]).result()
    xe, ve, _ = got["oscillator: map_blocks (numba loop)"]
    contrib = 0.5 * (ve * ve + omega * omega * xe * xe)
    dsum = [float(client.compute(c.sum()).result()) for c in fresh(client, [contrib], chunks) + fresh(client, [contrib], other)]
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"n": n, "chunks": chunks, "steps": steps, **{f"{k} s": m for k, m in med.items()},
            "stream identical": all(same_bits(got[k][0], y_ref) for k in ("stream: eagle",
                                                                             "stream: map_blocks (numba loop)")),
            "oscillator identical (eagle)": same_bits(one, dict(zip(("x", "v", "energy"), got["oscillator: eagle"]))),
            "eagle cell, two chunkings, same bits": same_bits(one["energy"], e_other),
            "dask sum, two chunkings, same bits": dsum[0] == dsum[1],
            "dask sum == one process": dsum[0] == float(one["energy"])}


def _osc_map_blocks(w, x0, v0, steps):
    import dask.array as da
    out = da.map_blocks(oscillator_block, w, x0, v0, DT, steps, dtype=np.float64, new_axis=1,
                        chunks=(w.chunks[0], (3,)))
    return [out[:, 0], out[:, 1], out[:, 2].sum()]


def numpy_mode_fixed_cost(client, n, runs):
    from eagle_dask import DaskPartition
    p = eplan.plan(eagle.deploy(axpb), structure=DaskPartition.on(client, progress=False))
    x = np.random.default_rng(0).random(n)
    for _ in range(5):
        p.run(x=x, a=2.0, b=1.0)
    times = [timed(lambda: p.run(x=x, a=2.0, b=1.0))[0] for _ in range(runs)]
    return {"n": n, "runs": runs, "median ms": 1e3 * statistics.median(times), "min ms": 1e3 * min(times)}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.dask_arrays", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="10-100x smaller sizes")
    ap.add_argument("--repeats", type=int, default=None, help="timed runs per arm (default 5; quick 3)")
    ap.add_argument("--out", default=None, help="folder for dask_arrays.json")
    a = ap.parse_args(argv)
    repeats = a.repeats or (3 if a.quick else 5)
    os.environ["EAGLE_NUM_THREADS"] = "2"              # one process: 2 threads (the workers take 1 each)
    import eagle_dask
    client = eagle_dask.local_cluster(n_workers=2, threads_per_worker=1)
    results = {}
    try:
        client.wait_for_workers(2, timeout=120)
        q = a.quick
        steps = {
            "driver memory": lambda: driver_memory(client, 10**7 if q else 10**8, 10**6 if q else 10**7),
            "oscillator": lambda: oscillator_vs_one_process(client, 10**5 if q else 10**6, 1000,
                                                            12_512 if q else 125_024, repeats),
            "chained loop": lambda: chained(client, 10**5 if q else 10**6, 10, 100, 12_512 if q else 125_024,
                                            repeats),
            "map_blocks": lambda: versus_map_blocks(client, 10**6 if q else 10**7, 125_024 if q else 1_250_016,
                                                    100, repeats),
            "numpy mode": lambda: numpy_mode_fixed_cost(client, 10**4, 40),
        }
        for name, f in steps.items():
            results[name] = f()
            print(f"== {name}")
            for k, v in results[name].items():
                print(f"   {k}: {v:.4g}" if isinstance(v, float) else f"   {k}: {v}")
            sys.stdout.flush()
    finally:
        client.close()
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "dask_arrays.json"), "w") as f:
            json.dump(results, f, indent=2, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
