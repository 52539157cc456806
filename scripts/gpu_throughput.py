"""Device throughput, one line each: a streaming kernel (GB/s) and the 1000-step oscillator.

Run on a machine with an NVIDIA GPU and the ``cuda12`` extra (``scripts/gpu_check.sh`` calls it):
``python -m scripts.gpu_throughput [--n N]``.  Planes are CuPy arrays, so the timings are the
device's own (the first run of each kernel compiles it and is not timed).
"""
from __future__ import annotations

import argparse
import math
import time

import numpy as np

import eagle.exec as eexec
from eagle.models import axpb as stream, oscillator
from eagle import plan as eplan


def _best(fn, repeats):
    import cupy
    best = math.inf
    for _ in range(repeats):
        cupy.cuda.Device().synchronize()
        t = time.perf_counter()
        fn()
        cupy.cuda.Device().synchronize()
        best = min(best, time.perf_counter() - t)
    return best


def streaming(n: int, device: int = 0, repeats: int = 5) -> str:
    import cupy
    with cupy.cuda.Device(device):
        x = cupy.random.default_rng(1).uniform(-1.0, 1.0, n)
        y = cupy.empty(n)
    p = eplan.plan(stream, structure=eexec.DeviceKernel)
    run = lambda: p.run(device=device, x=x, a=2.0, b=1.0, y=y)  # noqa: E731
    run()
    t = _best(run, repeats)
    gbs = 2 * 8 * n / t / 1e9
    return f"streaming a*x+b: n={n} {t * 1e3:.3f} ms  {gbs:.1f} GB/s (read x, write y)"


def oscillating(n: int, steps: int = 1000, device: int = 0, repeats: int = 3) -> str:
    import cupy
    rng = np.random.default_rng(2)
    omega = rng.uniform(0.5, 2.0, n)
    with cupy.cuda.Device(device):
        om = cupy.asarray(omega)
    p = eplan.plan(oscillator, structure=eexec.DeviceKernel)

    def run():
        with cupy.cuda.Device(device):
            x, v = cupy.ones(n), cupy.zeros(n)
        return p.run(device=device, omega=om, dt=1e-3, steps=steps, x=x, v=v)

    out = run()
    t = _best(run, repeats)
    return (f"oscillator: n={n} steps={steps} {t:.3f} s  {n * steps / t / 1e9:.2f} G sample-steps/s  "
            f"energy={float(out['energy']):.17g}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1 << 26, help="samples of the streaming kernel")
    ap.add_argument("--oscillator-n", type=int, default=10 ** 6)
    ap.add_argument("--device", type=int, default=0)
    a = ap.parse_args(argv)
    print(streaming(a.n, a.device))
    print(oscillating(a.oscillator_n, 1000, a.device))


if __name__ == "__main__":
    main()
