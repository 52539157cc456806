"""Ready-made kernels: the ones the demo, the examples, the benchmarks and the GPU check share.

* ``oscillator`` -- one harmonic oscillator per sample, integrated ``steps`` times with
  symplectic Euler (``x += dt*v; v -= dt*w*w*x``, both from the old values), its final energy
  summed over samples in a cell: compute-bound, one long dependency chain per sample;
* ``axpb`` -- ``y = a*x + b``: memory-bound streaming.
"""
from __future__ import annotations

from .kernel import kernel
from .roles import Cell, In, Mutable, Out, Param


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
