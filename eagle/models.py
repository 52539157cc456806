"""Ready-made kernels: the ones the demo, the examples, the benchmarks and the GPU check share.

* ``oscillator`` -- one harmonic oscillator per sample, integrated ``steps`` times with
  explicit (forward) Euler (``x += dt*v; v -= dt*w*w*x``, both from the old values), its final
  energy summed over samples in a cell: compute-bound, one long dependency chain per sample.
  Explicit Euler is not symplectic: each step multiplies the energy by ``1 + dt*dt*w*w``
  exactly, so it grows as ``(1 + dt**2 * w**2) ** steps`` (0.4 % for ``dt = 1e-3``, ``w = 2``,
  1000 steps) -- a benchmark and a bit-identity check, not a long-time integrator;
* ``axpb`` -- ``y = a*x + b``: memory-bound streaming;
* ``stencil`` -- a 5-point average of neighbouring samples, edges clamped: reads other samples'
  inputs (``cross_sample_read``);
* ``interp`` -- piecewise-linear interpolation over a table ``(xs, ys)`` read by every sample
  (two ``Table`` arguments), as ``np.interp`` computes it, bit for bit.
"""
from __future__ import annotations

from .kernel import kernel
from .roles import Cell, In, Mutable, Out, Param, Table


@kernel
def oscillator(i, omega: In, dt: Param, steps: Param, x: Mutable, v: Mutable, energy: Cell["sum"]):
    xi, vi, w = x[i], v[i], omega[i]
    for _ in range(steps):
        xi, vi = xi + dt * vi, vi - dt * w * w * xi
    x[i] = xi
    v[i] = vi
    energy[i] = 0.5 * (vi * vi + w * w * xi * xi)


@kernel
def axpb(i, x: In, a: Param, b: Param, y: Out):
    y[i] = a * x[i] + b


@kernel
def stencil(i, x: In, y: Out):
    n = x.shape[0]
    left = x[i - 1] if i > 0 else x[i]
    right = x[i + 1] if i < n - 1 else x[i]
    far_left = x[i - 2] if i > 1 else left
    far_right = x[i + 2] if i < n - 2 else right
    y[i] = (far_left + left + x[i] + right + far_right) / 5.0


@kernel
def interp(i, x: In, xs: Table, ys: Table, y: Out):
    """Piecewise-linear interpolation over the table (xs, ys), as np.interp computes it: the
    interval by bisection, then slope * (x - xs[j]) + ys[j]; the ends clamp."""
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
