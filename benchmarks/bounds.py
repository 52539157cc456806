"""What the bounds checks cost: the host entry as eagle builds it against the same entry with the
checks left out (built for this benchmark only, by replacing the rewrite's check with the bare
index while the module is generated).

Run ``python -m benchmarks.bounds [n]`` (default 10^6 samples).  Kernels: the 5-point stencil
(four checked neighbour reads per sample), the 1000-step oscillator (sample-local: nothing is
checked, so the ratio should be 1), and a gather ``y[i] = src[idx[i]]`` (one checked read).
Median of 5 alternating runs each, one thread and all of them, with the same-bits check.
"""
from __future__ import annotations

import statistics
import sys
from unittest import mock

import numpy as np

import eagle
import eagle.codegen
from eagle.bits import same_bits
from eagle import In, Out
from eagle.host import HostEntry, host_entry, num_threads
from eagle.models import oscillator, stencil

from .measure import run_entry

REPEATS = 5


@eagle.kernel
def gather(i, src: In, idx: In, y: Out):
    y[i] = src[idx[i]]


def cases(n, rng):
    x = rng.uniform(-1.0, 1.0, n)
    omega = rng.uniform(0.5, 2.0, n)
    idx = rng.integers(0, n, n)
    y, xs, vs = np.ones(n), np.ones(n), np.zeros(n)

    def fresh_state():
        xs[:], vs[:] = 1.0, 0.0
        return {"omega": omega, "dt": 1e-3, "steps": 1000, "x": xs, "v": vs}

    return {
        "stencil (4 checked reads)": (stencil, lambda: {"x": x, "y": y}),
        "oscillator (none checked)": (oscillator, fresh_state),
        "gather (1 checked read)": (gather, lambda: {"src": x, "idx": idx, "y": y}),
    }


def unchecked_entry(plugin) -> HostEntry:
    """The host entry with every index left as written (benchmark only)."""
    with mock.patch.object(eagle.codegen._Rewrite, "_checked", lambda self, e, plane, axis: e):
        return HostEntry(plugin)


def bench(kernel, make, threads):
    p = eagle.deploy(kernel)
    checked, bare = host_entry(p), unchecked_entry(p)
    assert checked.source != bare.source or kernel is oscillator
    small = {k: (v[:64].copy() if isinstance(v, np.ndarray) else v) for k, v in make().items()}
    if "idx" in small:
        small["idx"] = small["idx"] % 64
    run_entry(checked, small, threads), run_entry(bare, small, threads)       # compile outside the timing
    times = {"checked": [], "bare": []}
    outs = {}
    for _ in range(REPEATS):
        for name, entry in (("checked", checked), ("bare", bare)):
            dt, outs[name] = run_entry(entry, make(), threads)
            times[name].append(dt)
    same = same_bits(outs["checked"], outs["bare"])
    return statistics.median(times["checked"]), statistics.median(times["bare"]), same


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    n = int(float(argv[0])) if argv else 10 ** 6
    rng = np.random.default_rng(2024)
    every = num_threads()
    print(f"bounds checks, {n} samples, median of {REPEATS} runs (seconds); cost = checked / unchecked")
    print(f"{'kernel':28s} {'threads':>7s} {'checked':>9s} {'unchecked':>10s} {'cost':>7s}  bits")
    for label, (kernel, make) in cases(n, rng).items():
        for threads in sorted({1, every}):
            tc, tb, same = bench(kernel, make, threads)
            print(f"{label:28s} {threads:7d} {tc:9.4f} {tb:10.4f} {tc / tb:6.3f}x  "
                  f"{'same' if same else 'DIFFERENT'}", flush=True)


if __name__ == "__main__":
    main()
