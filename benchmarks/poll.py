"""What the stop-flag polls cost: host entries with polls against the same entries built without.

Run ``python -m benchmarks.poll [n]`` (default 10^6 samples: shorter runs time too little work).
Every loop of the host body polls the stop flag (``eagle.interrupt``), so that Ctrl-C stops an
endless in-kernel loop.  For the
1000-step oscillator (a hoisted loop) and Newton's square root (a per-sample ``while``, 1-30
iterations), on each host path (vectorised, laned, one sample at a time), this times the entry
with polls (``HostEntry(plugin, ..., polls=True)``, what eagle runs) and without
(``polls=False``), alternating the two (each first in turn) so a busy machine slows both alike,
on one thread, and
prints the median of ``REPEATS`` runs of each and their ratio (polled / unpolled: 1.02 is 2 %
slower).  It checks that both give the same bits.
"""
from __future__ import annotations

import statistics
import sys

import numpy as np

import eagle
from eagle.host import HostEntry

from .kernels import oscillator
from .measure import run_entry
from .simd import NEWTON_TOL, newton, newton_inputs

REPEATS = 15
PATHS = {"simd": {}, "lanes": {"simd": False}, "one": {"lanes": 1}}


def cases(n, rng):
    """name -> (kernel, fresh planes for one run)."""
    omega = rng.uniform(0.5, 2.0, n)
    xs = newton_inputs(n, rng)
    x, v, root, iters = np.ones(n), np.zeros(n), np.ones(n), np.ones(n, np.int64)

    def fresh_state():
        x[:], v[:] = 1.0, 0.0
        return {"omega": omega, "dt": 1e-3, "steps": 1000, "x": x, "v": v}

    return {
        "oscillator (1000 steps)": (oscillator, fresh_state),
        "newton (1-30 iterations)": (newton, lambda: {"x": xs, "tol": NEWTON_TOL, "root": root, "iters": iters}),
    }


def bench(kernel, make, path):
    """(median seconds with polls, without, same bits) of one kernel on one path, one thread."""
    p = eagle.deploy(kernel)
    entries = {polls: HostEntry(p, polls=polls, **PATHS[path]) for polls in (True, False)}
    assert all(e.path == path for e in entries.values()), {e.path for e in entries.values()}
    small = {k: (v[:64].copy() if isinstance(v, np.ndarray) else v) for k, v in make().items()}
    for e in entries.values():
        run_entry(e, small, 1)                                  # compile outside the timing
    times = {True: [], False: []}
    outs = {}
    for r in range(REPEATS):
        for polls in ((True, False) if r % 2 == 0 else (False, True)):      # neither always goes first
            e = entries[polls]
            dt, outs[polls] = run_entry(e, make(), 1)
            times[polls].append(dt)
    same = all(np.asarray(outs[True][k]).tobytes() == np.asarray(outs[False][k]).tobytes() for k in outs[True])
    return statistics.median(times[True]), statistics.median(times[False]), same


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    n = int(float(argv[0])) if argv else 10 ** 6
    rng = np.random.default_rng(2024)
    print(f"stop-flag polls, {n} samples, 1 thread, median of {REPEATS} runs (seconds); "
          f"ratio = polled / unpolled")
    print(f"{'kernel':26s} {'path':>5s} {'polled':>9s} {'unpolled':>9s} {'ratio':>7s}  bits")
    for label, (kernel, make) in cases(n, rng).items():
        for path in PATHS:
            tp, tu, same = bench(kernel, make, path)
            print(f"{label:26s} {path:>5s} {tp:9.4f} {tu:9.4f} {tp / tu:7.3f}  {'same' if same else 'DIFFERENT'}",
                  flush=True)


if __name__ == "__main__":
    main()
