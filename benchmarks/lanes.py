"""Host lanes benchmark: the laned host entry against the one-at-a-time loop.

Run ``python -m benchmarks.lanes [n]`` (default 10^6 samples).  For each kernel -- the 1000-step
oscillator (one long dependency chain per sample), a per-sample ``while`` loop whose trip counts
vary 10x between samples, and ``y = a*x + b`` (memory-bound) -- it times the one-at-a-time entry
(``HostEntry(plugin, lanes=1)``) and the laned one (``HostEntry(plugin, simd=False)``; the vectorised
loop eagle takes where it can is ``benchmarks.simd``'s), on one thread and on all of
them, alternating the two so a busy machine slows both alike, and prints the median of 5 runs of
each and their ratio.  It also checks that both give the same bits.
"""
from __future__ import annotations

import math
import statistics
import sys

import numpy as np

import eagle
from eagle import In, Out, Param
from eagle.host import HostEntry, num_threads

from .kernels import oscillator, stream
from .measure import run_entry

REPEATS = 5


@eagle.kernel
def shrink(i, x: In, tol: Param, count: Out, rest: Out):
    v = x[i]
    c = 0
    while v > tol:             # 10 to 100 steps, depending on the sample
        v = v * 0.5 + math.sqrt(v) * 1e-3
        c += 1
    count[i] = c
    rest[i] = v


def cases(n, rng):
    """name -> (kernel, fresh planes for one run)."""
    omega = rng.uniform(0.5, 2.0, n)
    xs = 2.0 ** rng.uniform(10.0, 100.0, n)
    xa = rng.uniform(-3.0, 3.0, n)
    # outputs allocated (and touched) once: the timings do not include first-touch page faults
    x, v, count, rest, y = np.ones(n), np.zeros(n), np.ones(n), np.ones(n), np.ones(n)

    def fresh_state():
        x[:], v[:] = 1.0, 0.0
        return {"omega": omega, "dt": 1e-3, "steps": 1000, "x": x, "v": v}

    return {
        "oscillator (1000 steps)": (oscillator, fresh_state),
        "while (10-100 trips)": (shrink, lambda: {"x": xs, "tol": 1.0, "count": count, "rest": rest}),
        "y = a*x + b": (stream, lambda: {"x": xa, "a": 2.5, "b": -1.25, "y": y}),
    }


def bench(kernel, make, threads):
    p = eagle.deploy(kernel)
    one, laned = HostEntry(p, lanes=1), HostEntry(p, simd=False)
    small = {k: (v[:64].copy() if isinstance(v, np.ndarray) else v) for k, v in make().items()}
    run_entry(one, small, threads), run_entry(laned, small, threads)          # compile outside the timing
    times = {"one": [], "laned": []}
    outs = {}
    for _ in range(REPEATS):
        for name, entry in (("one", one), ("laned", laned)):
            dt, outs[name] = run_entry(entry, make(), threads)
            times[name].append(dt)
    same = all(np.asarray(outs["one"][k]).tobytes() == np.asarray(outs["laned"][k]).tobytes()
               for k in outs["one"])
    return laned.lanes, statistics.median(times["one"]), statistics.median(times["laned"]), same


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    n = int(float(argv[0])) if argv else 10 ** 6
    rng = np.random.default_rng(2024)
    every = num_threads()
    print(f"host lanes, {n} samples, median of {REPEATS} runs (seconds); ratio = one at a time / laned")
    print(f"{'kernel':26s} {'threads':>7s} {'lanes':>5s} {'one at a time':>14s} {'laned':>9s} {'ratio':>7s}  bits")
    for label, (kernel, make) in cases(n, rng).items():
        for threads in sorted({1, every}):
            lanes, t1, tl, same = bench(kernel, make, threads)
            print(f"{label:26s} {threads:7d} {lanes:5d} {t1:14.4f} {tl:9.4f} {t1 / tl:6.2f}x  "
                  f"{'same' if same else 'DIFFERENT'}", flush=True)


if __name__ == "__main__":
    main()
