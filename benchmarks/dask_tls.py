"""The cost of mutual TLS on a local cluster: the same runs with TLS on and with ``security=False``.

    python -m benchmarks.dask_tls                    # the sizes of the issue (a few minutes on 2 cores)
    python -m benchmarks.dask_tls --quick            # 10x smaller, under a minute
    python -m benchmarks.dask_tls --out DIR          # also write DIR/dask_tls.json

Two local clusters of 2 one-thread workers each, both on 127.0.0.1: ``local_cluster()`` (mutual
TLS, fresh credentials) and ``local_cluster(security=False)`` (plain TCP).  Two cases, numpy mode
(``DaskPartition`` on numpy planes):

1. **oscillator** -- ``eagle.models.oscillator``, 10^6 samples x 1000 steps;
2. **tiny** -- the same kernel, 10^4 samples x 1 step: the fixed cost of a run.

Rounds alternate the arms (TLS first in even rounds, plain first in odd ones), so a busy machine
slows them alike; every round makes fresh inputs (Dask keeps the keys it holds, and would not
send the same planes again).  Printed: the median seconds of each arm and TLS / plain, and the
bytes a run sends: estimated from the planes (inputs to the workers, outputs back) and measured
on the TLS arm: the bytes every process of the cluster (the driver, with its in-process scheduler,
and the workers) read and wrote (``/proc/self/io``, Linux), halved (each byte on the wire is
written by one process and read by another).  TLS goes through read/write calls, which that
count sees; plain sockets use send/recv, which it does not, so the plain arm has no such figure.
Every run's outputs are checked bit for bit against the other arm's.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

import eagle
from eagle import plan as eplan
from eagle.bits import as_dict, same_bits
from eagle.models import oscillator

DT = 1e-3


def planes(n, steps, seed):
    rng = np.random.default_rng(seed)
    return {"omega": rng.uniform(0.5, 2.0, n), "dt": DT, "steps": steps, "x": rng.uniform(-1.0, 1.0, n),
            "v": np.zeros(n)}


def plane_bytes(n):
    """Bytes a run moves: omega, x, v to the workers, x, v back (the cell's row partials are small)."""
    return {"to workers": 3 * 8 * n, "back": 2 * 8 * n}


def io_bytes():
    """(read, written) bytes of this process's read/write calls, or None where /proc/self/io is absent."""
    try:
        with open("/proc/self/io") as f:
            fields = dict(line.split(": ") for line in f.read().splitlines())
        return int(fields["rchar"]), int(fields["wchar"])
    except (OSError, KeyError, ValueError):
        return None


def io_all(client):
    """read + written bytes of the driver and every worker of ``client``'s cluster, or None."""
    mine = io_bytes()
    if mine is None:
        return None
    theirs = client.run(io_bytes)
    if any(v is None for v in theirs.values()):
        return None
    return sum(mine) + sum(sum(v) for v in theirs.values())


def one_run(client, p, d):
    before = io_all(client)
    t = time.perf_counter()
    out = p.run(**d)
    dt = time.perf_counter() - t
    after = io_all(client)
    return dt, None if before is None else (after - before) / 2, out


def compare(clients, plans, plugin, n, steps, rounds):
    """Alternated rounds of both arms on fresh inputs: medians, the ratio, bytes, bits."""
    times = {arm: [] for arm in plans}
    moved = {arm: [] for arm in plans}
    same = True
    arms = list(plans)
    for r in range(rounds + 1):                       # round 0 is the warm-up, not counted
        order = arms if r % 2 == 0 else arms[::-1]
        outs = {}
        for arm in order:
            d = planes(n, steps, seed=1000 * r + 1)      # the same values for both arms of a round
            dt, b, out = one_run(clients[arm], plans[arm], d)
            outs[arm] = as_dict(plugin, out)
            if r:
                times[arm].append(dt)
                moved[arm].append(b)
        same = same and same_bits(outs[arms[0]], outs[arms[1]])
    med = {arm: statistics.median(times[arm]) for arm in arms}
    res = {"n": n, "steps": steps, "rounds": rounds, **{f"{arm} median s": med[arm] for arm in arms},
           "TLS / plain": med["TLS"] / med["plain"], "identical": same}
    res.update({f"estimated MB {k}": v / 1e6 for k, v in plane_bytes(n).items()})
    if all(b is not None for b in moved["TLS"]):
        res["measured MB over TLS per run"] = statistics.median(moved["TLS"]) / 1e6
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.dask_tls", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="10x fewer samples")
    ap.add_argument("--rounds", type=int, default=None, help="timed rounds (default 5 for the oscillator, "
                                                             "20 for the tiny run; quick: 3 and 10)")
    ap.add_argument("--out", default=None, help="folder for dask_tls.json")
    a = ap.parse_args(argv)
    import eagle_dask
    from eagle_dask import DaskPartition
    clients = {"TLS": eagle_dask.local_cluster(n_workers=2, threads_per_worker=1),
               "plain": eagle_dask.local_cluster(n_workers=2, threads_per_worker=1, security=False)}
    results = {}
    try:
        for c in clients.values():
            c.wait_for_workers(2, timeout=120)
        assert clients["TLS"].scheduler.address.startswith("tls://")
        assert clients["plain"].scheduler.address.startswith("tcp://")
        plugin = eagle.deploy(oscillator)
        plans = {arm: eplan.plan(plugin, structure=DaskPartition.on(c, progress=False))
                 for arm, c in clients.items()}
        scale = 10 if a.quick else 1
        cases = {"oscillator": (10**6 // scale, 1000, a.rounds or 5),
                 "tiny": (10**4, 1, a.rounds or (10 if a.quick else 20))}
        for name, (n, steps, rounds) in cases.items():
            results[name] = compare(clients, plans, plugin, n, steps, rounds)
            print(f"== {name}")
            for k, v in results[name].items():
                print(f"   {k}: {v:.4g}" if isinstance(v, float) else f"   {k}: {v}")
            sys.stdout.flush()
    finally:
        for c in clients.values():
            c.close()
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "dask_tls.json"), "w") as f:
            json.dump(results, f, indent=2, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
