"""Tables reused by consecutive numpy-mode Dask runs: what a big table costs once it is kept.

    python -m benchmarks.tables              # 10 runs of 10^4 samples, 10^6- vs 10-entry table
    python -m benchmarks.tables --repeats 7

Two arms on one local cluster of 2 workers (127.0.0.1), alternated, each the median of
``--repeats`` measurements of 10 consecutive runs of a table-interpolation kernel over 10^4
samples (``eagle.models.interp``): with a 10^6-entry table (8 MB per axis) and with a
10-entry one.  The table is sent to the workers once (``eagle_dask.tables``); later runs find
it by its bytes, so the big table must cost at most ``LIMIT`` times the small one (asserted
here, printed).  A first run of each arm sends its table and is left out (warm-up); every
run's output is checked bit for bit against ``np.interp``.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from eagle import plan as eplan
from eagle.bits import same_bits

LIMIT = 1.3
RUNS = 10
N = 10 ** 4


def _arm(p, x, xs, ys, want):
    t = time.perf_counter()
    for _ in range(RUNS):
        y = p.run(x=x, xs=xs, ys=ys)
    spent = time.perf_counter() - t
    assert same_bits(y, want), "a run's output differs from np.interp"
    return spent


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.tables", description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)

    import eagle_dask
    from eagle_dask.tables import store_of
    from tests.launch import local_client
    from eagle.models import interp

    rng = np.random.default_rng(1)
    x = rng.uniform(0.0, 1.0, N)
    tables = {size: (np.linspace(0.0, 1.0, size), np.sin(np.linspace(0.0, 1.0, size) * 7.0))
              for size in (10 ** 6, 10)}
    wants = {size: np.interp(x, *t) for size, t in tables.items()}
    with local_client(2) as client:
        p = eplan.plan(interp, structure=eagle_dask.DaskPartition.on(client, progress=False))
        for size, (xs, ys) in tables.items():             # warm-up: compile, send each table once
            p.run(x=x, xs=xs, ys=ys)
        sent = store_of(client).sent
        times = {size: [] for size in tables}
        for _ in range(args.repeats):
            for size, (xs, ys) in tables.items():
                times[size].append(_arm(p, x, xs, ys, wants[size]))
        assert store_of(client).sent == sent, "a kept table was sent again"
    big, small = (statistics.median(times[s]) for s in (10 ** 6, 10))
    ratio = big / small
    print(f"{RUNS} numpy-mode Dask runs of {N} samples: 10^6-entry table {big * 1e3:.1f} ms, "
          f"10-entry table {small * 1e3:.1f} ms; ratio {ratio:.3f} (limit {LIMIT})")
    assert ratio <= LIMIT, f"a kept 10^6-entry table costs {ratio:.2f}x the 10-entry one (limit {LIMIT})"
    return ratio


if __name__ == "__main__":
    main()
