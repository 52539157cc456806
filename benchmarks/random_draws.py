"""Random draws benchmark: eagle.random inside a kernel against numpy's Philox.

Run ``python -m benchmarks.random_draws [count]`` (default 10^7 uniforms).  On one thread
(``EAGLE_NUM_THREADS=1``, HostTeam) a kernel draws ``count`` uniforms -- 10^4 samples of
``count / 10^4`` draws each, summed per sample and into a sum cell -- once with
``erandom.uniform`` (one Philox block per value) and once with ``erandom.uniform2`` (two values
per block, as numpy uses them); numpy draws the same count with
``Generator(Philox(seed)).random(count)`` and sums it.  Each arm is timed by
``benchmarks.measure.measure`` (a warm-up, then 5 runs); the table gives the medians and
numpy's time over each arm's (above 1: eagle is faster).
"""
from __future__ import annotations

import os
import sys

os.environ["EAGLE_NUM_THREADS"] = "1"

import numpy as np  # noqa: E402

import eagle  # noqa: E402
import eagle.exec as eexec  # noqa: E402
from eagle import Cell, Out, Param  # noqa: E402
from eagle import plan as eplan  # noqa: E402
from eagle import random as erandom  # noqa: E402

from .measure import measure, median, spread  # noqa: E402

REPEATS = 5
SAMPLES = 10**4
SEED = 2024


@eagle.kernel
def uniforms(i, seed: Param, m: Param, acc: Out, total: Cell["sum"]):
    s = 0.0
    for k in range(m):
        s += erandom.uniform(seed, i, k)
    acc[i] = s
    total[i] = s


@eagle.kernel
def uniform_pairs(i, seed: Param, m: Param, acc: Out, total: Cell["sum"]):
    s = 0.0
    for k in range(m):
        a, b = erandom.uniform2(seed, i, k)
        s += a
        s += b
    acc[i] = s
    total[i] = s


def arms(count):
    """name -> (run(planes) -> mean of the draws, fresh planes)."""
    m = count // SAMPLES
    acc = np.zeros(SAMPLES)            # touched once: no first-touch page faults in the timings
    one = eplan.plan(eagle.deploy(uniforms), structure=eexec.HostTeam)
    two = eplan.plan(eagle.deploy(uniform_pairs), structure=eexec.HostTeam)
    return {
        "eagle uniform (kernel)": (lambda p: one.run(**p)["total"] / count,
                                   lambda: {"acc": acc, "seed": SEED, "m": m}),
        "eagle uniform2 (kernel)": (lambda p: two.run(**p)["total"] / count,
                                    lambda: {"acc": acc, "seed": SEED, "m": m // 2}),
        "numpy Philox": (lambda p: np.random.Generator(np.random.Philox(SEED)).random(count).sum() / count,
                         lambda: {}),
    }


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    count = int(float(argv[0])) if argv else 10**7
    count -= count % (2 * SAMPLES)
    print(f"{count} uniforms on one thread, median of {REPEATS} runs after a warm-up (seconds); "
          "ratio = numpy / arm")
    print(f"{'arm':26s} {'median':>9s} {'spread':>9s} {'ns/draw':>8s} {'ratio':>7s} {'mean':>9s}")
    rows = {name: measure(run, fresh, REPEATS) for name, (run, fresh) in arms(count).items()}
    base = median(rows["numpy Philox"].times)
    for name, t in rows.items():
        med = median(t.times)
        print(f"{name:26s} {med:9.4f} {spread(t.times):9.4f} {med / count * 1e9:8.2f} {base / med:6.2f}x "
              f"{t.result:9.6f}", flush=True)


if __name__ == "__main__":
    main()
