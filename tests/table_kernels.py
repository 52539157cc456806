"""Kernels that read Tables, shared by tests/test_table.py and the scripts it runs in other
processes (MPI ranks, the CUDA simulator)."""
import numpy as np

import eagle
from eagle import In, Out, Param, Table
from eagle.models import interp  # noqa: F401 -- the tests' interpolation kernel


@eagle.kernel
def poly2d(i, u: In, v: In, c: Table, z: Out):
    """z = sum over (a, b) of c[a, b] * u**a * v**b, Horner in both variables (a 2-D table)."""
    acc = 0.0
    for a in range(c.shape[0] - 1, -1, -1):
        row = 0.0
        for b in range(c.shape[1] - 1, -1, -1):
            row = row * v[i] + c[a, b]
        acc = acc * u[i] + row
    z[i] = acc


@eagle.kernel
def lookup(i, k: In, t: Table, shift: Param, y: Out):
    """y = t[k + shift]: a table read at an index the caller chooses (for the bounds tests)."""
    y[i] = t[k[i] + shift]


def interp_reference(x, xs, ys):
    return np.interp(x, xs, ys)


def poly2d_reference(u, v, c):
    """The same Horner evaluation in plain per-sample Python (independent of eagle)."""
    out = np.empty(len(u))
    for s in range(len(u)):
        acc = 0.0
        for a in range(c.shape[0] - 1, -1, -1):
            row = 0.0
            for b in range(c.shape[1] - 1, -1, -1):
                row = row * float(v[s]) + float(c[a, b])
            acc = acc * float(u[s]) + row
        out[s] = acc
    return out


def data(n=1000, seed=7):
    """Inputs of both kernels: sample points inside, below and above the table, and on its knots."""
    rng = np.random.default_rng(seed)
    xs = np.cumsum(rng.random(37) + 0.05)
    ys = np.sin(xs) * 3.0
    x = rng.uniform(xs[0] - 1.0, xs[-1] + 1.0, n)
    x[:10] = xs[:10]
    x[10] = xs[-1]
    u, v = rng.standard_normal(n), rng.standard_normal(n)
    c = rng.standard_normal((4, 5))
    return dict(x=x, xs=xs, ys=ys), dict(u=u, v=v, c=c)
