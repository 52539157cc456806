"""Piecewise-linear interpolation over a table: a ``Table`` read by every sample.

The table (xs, ys) is not cut by samples: every sample reads it whole, every index checked.
The kernel computes what ``np.interp`` computes (the interval by bisection, then
``slope * (x - xs[j]) + ys[j]``, the ends clamped), so the results are checked bit for bit.
"""
import numpy as np

import eagle.exec as eexec
from eagle import plan as eplan
from eagle.models import interp          # the kernel: read it there (eagle/models.py)


if __name__ == "__main__":
    xs = np.linspace(0.0, 2.0 * np.pi, 200)          # a 200-entry table ...
    ys = np.sin(xs)
    x = np.random.default_rng(0).uniform(-1.0, 7.5, 1_000_000)   # ... read by a million samples
    y = eplan.plan(interp, structure=eexec.HostTeam, npartitions=3).run(x=x, xs=xs, ys=ys)
    same = np.array_equal(y, np.interp(x, xs, ys))
    print(f"{x.size} samples over a {xs.size}-entry table; identical bits to np.interp: {'yes' if same else 'NO'}")
    raise SystemExit(0 if same else 1)
