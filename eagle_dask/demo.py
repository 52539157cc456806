"""The main job: a real kernel over a million samples on the embedded cluster, checked bit for bit.

The kernel integrates one harmonic oscillator per sample (explicit Euler, ``eagle.models.oscillator``) and sums the
final energies in a cell.  The same plan runs once in this process (``HostTeam``), then across
the cluster's workers (``DaskPartition``) on numpy planes, then lazily on dask arrays persisted on
the workers; every output and the cell must have the same bits.
"""
from __future__ import annotations

import os
import time
import warnings

import numpy as np

import eagle
import eagle.exec as eexec
from eagle.bits import same_bits
from eagle.models import oscillator
from eagle import plan as eplan

#: why a Dask run on one machine is slower than one process with as many threads
WHY_SLOWER = ("on one machine Dask is slower than one process: each run pays the scheduler's round trips and "
              "copies its planes into and out of shared memory for the worker processes (over TLS to other "
              "hosts); a cluster pays off when the work outgrows one machine")


def planes(n, steps, seed=2024):
    """Fresh inputs: frequencies in [0.5, 2), every oscillator released from x=1 at rest."""
    rng = np.random.default_rng(seed)
    return {"omega": rng.uniform(0.5, 2.0, n), "dt": 1e-3, "steps": int(steps), "x": np.ones(n), "v": np.zeros(n)}


def _timed(p, n, steps):
    data = planes(n, steps)
    t = time.perf_counter()
    out = p.run(**data)
    return out, time.perf_counter() - t


def run(samples=1_000_000, steps=1000, workers=None, client=None, progress=None, echo=print):
    """Run the demo; return a dict with both timings and whether the bits are identical."""
    from . import DaskPartition, local_cluster
    from .ranks import scheduler_workers
    plugin = eagle.deploy(oscillator)
    one = eplan.plan(plugin, structure=eexec.HostTeam)
    one.run(**planes(64, 1))                                   # compile (or load from the disk cache)
    echo(f"one process (HostTeam, {eagle.host.num_threads()} threads): {samples} samples x {steps} steps ...")
    ref, t_one = _timed(one, samples, steps)
    own = client is None
    if own:
        echo("starting the local cluster ...")
        client = local_cluster(n_workers=workers)
    try:
        k = len(scheduler_workers(client))
        dist = eplan.plan(plugin, structure=DaskPartition.on(client, progress=progress))
        eplan.plan(plugin, structure=DaskPartition.on(client, progress=False)).run(**planes(64 * k, 1))  # warm
        echo(f"dask ({k} workers): {samples} samples x {steps} steps ...")
        got, t_dask = _timed(dist, samples, steps)
        echo(f"dask lazy ({k} workers, dask arrays): {samples} samples x {steps} steps ...")
        lazy, t_lazy = _lazy(client, plugin, samples, steps, k)
    finally:
        if own:
            client.close()
    return {"workers": k, "samples": samples, "steps": steps, "seconds": t_dask, "one_seconds": t_one,
            "lazy_seconds": t_lazy, "one_threads": eagle.host.num_threads(),
            "identical": same_bits(ref, got) and same_bits(ref, lazy), "numpy_identical": same_bits(ref, got),
            "lazy_identical": same_bits(ref, lazy)}


def _lazy(client, plugin, n, steps, workers):
    """The lazy mode: inputs persisted on the workers (chunks of whole rows), outputs persisted, then fetched."""
    import dask.array as da
    from . import DaskPartition
    from .ranks import scheduler_workers
    p = eplan.plan(plugin, structure=DaskPartition.on(client, progress=False))

    def once(n, steps, where=None, seed=2024):
        """One lazy run of n samples (on the workers ``where`` only, when given)."""
        data = planes(n, steps, seed)
        chunk = max(32, -(-n // (2 * workers)) // 32 * 32)
        lazy = {**data, **{k: da.from_array(data[k], chunks=chunk) for k in ("omega", "x", "v")}}
        with warnings.catch_warnings():          # the inputs go into the graph once, on purpose
            warnings.filterwarnings("ignore", message="Sending large graph", category=UserWarning)
            lazy["omega"], lazy["x"], lazy["v"] = client.persist([lazy["omega"], lazy["x"], lazy["v"]],
                                                                 workers=where)
        t = time.perf_counter()
        out = p.run(**lazy)
        x, v, energy = client.persist([out["x"], out["v"], out["energy"]], workers=where)
        got = dict(zip(("x", "v", "energy"), client.gather(client.compute([x, v, energy], workers=where))))
        return got, time.perf_counter() - t

    # warm every worker, one at a time: each compiles for the chunks' types (read-only inputs);
    # a small run on all of them at once would join its chunks into one block on one worker.
    # Each its own inputs: the same ones would be the same keys, served from the first's memory
    for seed, address in enumerate(scheduler_workers(client)):
        once(64, 1, where=[address], seed=seed)
    return once(n, steps)


def table(res) -> str:
    """The demo's summary: the Dask run and the one-process run side by side."""
    head = ("run", "workers", "samples", "seconds", "samples/s", "identical")
    rows = [
        (f"dask ({res['workers']} workers)", str(res["workers"]), str(res["samples"]), f"{res['seconds']:.3f}",
         f"{res['samples'] / res['seconds']:.3g}" if res["seconds"] else "-",
         "yes" if res["numpy_identical"] else "NO"),
        (f"dask lazy ({res['workers']} workers)", str(res["workers"]), str(res["samples"]),
         f"{res['lazy_seconds']:.3f}", f"{res['samples'] / res['lazy_seconds']:.3g}" if res["lazy_seconds"] else "-",
         "yes" if res["lazy_identical"] else "NO"),
        (f"one process ({res['one_threads']} threads)", "-", str(res["samples"]), f"{res['one_seconds']:.3f}",
         f"{res['samples'] / res['one_seconds']:.3g}" if res["one_seconds"] else "-", "(reference)"),
    ]
    widths = [max(len(r[c]) for r in [head] + rows) for c in range(len(head))]
    line = lambda r: "  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip()  # noqa: E731
    return os.linesep.join([line(head), line(tuple("-" * w for w in widths))] + [line(r) for r in rows]
                           + ["", "Why: " + WHY_SLOWER + "."])
