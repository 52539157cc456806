"""A first kernel: a million damped oscillators on CPU threads, checked against one thread."""
import os
import time

import numpy as np

import eagle
import eagle.exec as eexec
from eagle import Cell, In, Mutable, Param
from eagle import plan as eplan
from eagle.bits import same_bits


@eagle.kernel
def damped(i, omega: In, gamma: Param, dt: Param, steps: Param, x: Mutable, v: Mutable,
           energy: Cell["sum"], loudest: Cell["max"]):
    xi, vi, w = x[i], v[i], omega[i]
    for _ in range(steps):
        xi, vi = xi + dt * vi, vi - dt * (w * w * xi + gamma * vi)
    x[i] = xi
    v[i] = vi
    energy[i] = 0.5 * (vi * vi + w * w * xi * xi)     # this sample's share of the total energy
    loudest[i] = abs(xi)                              # the largest amplitude left over all samples


def main(n=1_000_000, steps=200):
    omega = np.linspace(0.5, 2.0, n)
    p = eplan.plan(eagle.deploy(damped), structure=eexec.HostTeam)
    p.run(omega=omega[:64], gamma=0.1, dt=1e-3, steps=1, x=np.ones(64), v=np.zeros(64))   # compile (cached on disk)
    runs = {}
    # one thread, then a team (at least two threads, even on a one-CPU machine)
    for threads in ("1", str(max(2, eagle.host.num_threads()))):
        os.environ["EAGLE_NUM_THREADS"] = threads
        t0 = time.perf_counter()
        runs[threads] = p.run(omega=omega, gamma=0.1, dt=1e-3, steps=steps, x=np.ones(n), v=np.zeros(n))
        print(f"{threads} thread(s): {n} samples x {steps} steps in {time.perf_counter() - t0:.2f} s, "
              f"energy = {runs[threads]['energy']!r}, loudest = {runs[threads]['loudest']!r}")
    a, b = runs.values()
    same = same_bits(a, b)
    print("identical bits:", "yes" if same else "NO")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
