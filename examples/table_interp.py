"""Piecewise-linear interpolation over a table: a ``Table`` read by every sample.

The table (xs, ys) is not cut by samples: every sample reads it whole, every index checked.
The kernel computes what ``np.interp`` computes (the interval by bisection, then
``slope * (x - xs[j]) + ys[j]``, the ends clamped), so the results are checked bit for bit.
"""
import numpy as np

import eagle
import eagle.exec as eexec
from eagle import In, Out, Table
from eagle import plan as eplan


@eagle.kernel
def interp(i, x: In, xs: Table, ys: Table, y: Out):
    xi = x[i]
    n = xs.shape[0]
    if xi >= xs[n - 1]:
        y[i] = ys[n - 1]
    elif xi < xs[0]:
        y[i] = ys[0]
    else:
        lo = 0
        hi = n - 1
        while hi - lo > 1:                 # xs[lo] <= xi < xs[hi]
            mid = (lo + hi) // 2
            if xs[mid] <= xi:
                lo = mid
            else:
                hi = mid
        slope = (ys[hi] - ys[lo]) / (xs[hi] - xs[lo])
        y[i] = slope * (xi - xs[lo]) + ys[lo]


if __name__ == "__main__":
    xs = np.linspace(0.0, 2.0 * np.pi, 200)          # a 200-entry table ...
    ys = np.sin(xs)
    x = np.random.default_rng(0).uniform(-1.0, 7.5, 1_000_000)   # ... read by a million samples
    y = eplan.plan(interp, structure=eexec.HostTeam, npartitions=3).run(x=x, xs=xs, ys=ys)
    same = np.array_equal(y, np.interp(x, xs, ys))
    print(f"{x.size} samples over a {xs.size}-entry table; identical bits to np.interp: {'yes' if same else 'NO'}")
    raise SystemExit(0 if same else 1)
