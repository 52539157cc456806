"""Host SIMD benchmark: the vectorised host loop, the laned loop it replaces and, when installed, the peer.

Run ``python -m benchmarks.simd [n] [--peer PYTHON]`` (default 10^6 samples).  For each kernel
-- the 1000-step oscillator with its energy cell (``eagle.models.oscillator``), a Newton
square-root loop with 1 to 30 data-dependent iterations per sample (``newton``), ``y = a*x + b``
(memory-bound) and a kernel with a cell (``cellsum``: the sum of a polynomial; the peer reduces
with one op per kernel)
-- on 1 thread and on 2, it times the laned loop (``HostEntry(plugin, simd=False)``) and the
vectorised one (``HostEntry(plugin)``), alternating them so a busy machine slows both alike, and
prints the median of 5 runs of each with their ratio, checking that both give the same bits.

``--peer PYTHON`` (or ``EAGLE_PEER_PYTHON``) names the interpreter of a scratch virtualenv with
raptor-eagle 0.7.1 and raptor-hawk 0.7.1 (``python3 -m venv /tmp/peer && /tmp/peer/bin/pip install
raptor-eagle==0.7.1 raptor-hawk==0.7.1``; it is no dependency of eagle, and its package is also
called ``eagle``, so it runs in a subprocess): the same four kernels, written for it
(``PEER_SCRIPT``; its oscillator writes each sample's energy to a plane, because its sample
reduction in a looping kernel took 2 s here), run at its default host profile with
``OMP_NUM_THREADS`` threads, medians of 5, interleaved with ours; the table adds its time and
``ours/peer``.

``python -m benchmarks.simd --compile`` measures compile time instead: for each kernel, in a fresh
interpreter with an empty ``EAGLE_CACHE_DIR``, the CPU seconds to build and compile its host entry,
laned and vectorised, after a warm-up kernel (``halvings``) compiled through the same path, so numba's
one-time costs (its own ``np.empty`` implementations) are not counted; ``--compile --cold`` warms
up on a kernel without state instead, and counts them.

It also prints the machine's vector width and, for the oscillator and the Newton loop, the
achieved fraction of the core's peak floating-point rate.  Peak: ``cores x clock x lanes x 2``
floating-point operations a second -- two vector add/multiply pipes per core, no FMA (eagle
does not contract), ``lanes`` = vector bits / 64; the clock is measured (a chain of dependent
integer adds, one a cycle).  Achieved: the kernel's floating-point operations as written, per
sample and step, times samples and steps, over the median time (the oscillator: 4 per step --
``dt * w * w`` is computed once per sample, as LLVM hoists it one at a time too -- and 2 per
sample; the Newton loop: 6 per iteration, the division counted as one though the divider takes
several cycles, the comparison and ``abs`` not counted).
"""
from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time

import numpy as np

import eagle
import eagle.bits
from eagle import Cell, In, Out, Param
from eagle.host import HostEntry
from eagle.simd import host_has_avx512

from .kernels import DT, oscillator, stream
from .measure import run_entry

REPEATS = 5
STEPS = 1000
NEWTON_TOL = 1e-12


@eagle.kernel
def newton(i, x: In, tol: Param, root: Out, iters: Out["int64"]):
    """Newton's square root from ``y = a``: 1 to 30 iterations, depending on the sample."""
    a = x[i]
    y = a
    c = 0
    while abs(y * y - a) > tol * a:
        y = 0.5 * (y + a / y)
        c += 1
    root[i] = y
    iters[i] = c


@eagle.kernel
def cellsum(i, x: In, total: Cell["sum"]):
    """A cell: the sum over samples of a polynomial (the cell folded by rows, compensated)."""
    v = x[i]
    total[i] = 0.5 * v * v + 0.25 * v


def newton_inputs(n, rng):
    """``2 ** U(0, 50)``: 1 to 30 iterations from ``y = a``."""
    return 2.0 ** rng.uniform(0.0, 50.0, n)


def cases(n, rng):
    """name -> (kernel, fresh planes for one run, floating-point operations of one run or None)."""
    omega = rng.uniform(0.5, 2.0, n)
    xs = newton_inputs(n, rng)
    xa = rng.uniform(-3.0, 3.0, n)
    x, v, root, iters, y = np.ones(n), np.zeros(n), np.ones(n), np.ones(n, np.int64), np.ones(n)

    def fresh_state():
        x[:], v[:] = 1.0, 0.0
        return {"omega": omega, "dt": DT, "steps": STEPS, "x": x, "v": v}

    it = _newton_iterations(xs)
    return {
        "oscillator (1000 steps)": (oscillator, fresh_state, 4.0 * n * STEPS + 2.0 * n),
        "newton (1-30 iterations)": (newton, lambda: {"x": xs, "tol": NEWTON_TOL, "root": root, "iters": iters},
                                     6.0 * it),
        "y = a*x + b": (stream, lambda: {"x": xa, "a": 2.5, "b": -1.25, "y": y}, None),
        "cell (sum)": (cellsum, lambda: {"x": xa}, None),
    }


def _newton_iterations(xs):
    y, c = xs.copy(), 0
    act = np.ones(xs.shape, bool)
    while act.any():
        act = np.abs(y * y - xs) > NEWTON_TOL * xs
        y = np.where(act, 0.5 * (y + xs / y), y)
        c += int(act.sum())
    return c


# --- the peer, in its own interpreter --------------------------------------------------------------

PEER_SCRIPT = r'''
import json, sys, time, numpy as np
import eagle, hawk
from hawk import Param, Scalar, Mutable
STEPS, CAP = %(steps)d, 64

@hawk.kernel
def oscillator(omega: Scalar, dt: Param, x: Mutable[Scalar], v: Mutable[Scalar], e: Mutable[Scalar]):
    xi = x
    vi = v
    for _ in range(STEPS):
        xn = xi + dt * vi
        vn = vi - dt * omega * omega * xi
        xi = xn
        vi = vn
    x = xi
    v = vi
    e = 0.5 * (vi * vi + omega * omega * xi * xi)     # a plane: its sample reduction is far slower

@hawk.kernel
def newton(x: Scalar, tol: Param, root: Mutable[Scalar], iters: Mutable[Scalar]):
    y = x
    c = 0.0
    for _ in range(CAP):
        if abs(y * y - x) <= tol * x:
            break
        y = 0.5 * (y + x / y)
        c = c + 1.0
    root = y
    iters = c

@hawk.kernel
def stream(x: Scalar, a: Param, b: Param, y: Mutable[Scalar]):
    y = a * x + b

@hawk.kernel
def cell(x: Scalar, total: Mutable[Scalar]):
    total = hawk.sum(0.5 * x * x + 0.25 * x)

n, seed = %(n)d, %(seed)d
rng = np.random.default_rng(seed)
omega = rng.uniform(0.5, 2.0, n)
xs = 2.0 ** rng.uniform(0.0, 50.0, n)
xa = rng.uniform(-3.0, 3.0, n)
plans = {"oscillator": eagle.deploy(oscillator), "newton": eagle.deploy(newton),
         "stream": eagle.deploy(stream), "cell": eagle.deploy(cell)}

def planes(name):
    if name == "oscillator":
        return dict(omega=omega, dt=%(dt)r, x=np.ones(n), v=np.zeros(n), e=np.zeros(n))
    if name == "newton":
        return dict(x=xs, tol=%(tol)r, root=np.zeros(n), iters=np.zeros(n))
    if name == "stream":
        return dict(x=xa, a=2.5, b=-1.25, y=np.zeros(n))
    return dict(x=xa)

for name in plans:
    plans[name].run(**planes(name))                     # build and compile outside the timing
print("ready", flush=True)
for line in sys.stdin:
    name = line.strip()
    d = planes(name)
    t = time.perf_counter()
    plans[name].run(**d)
    print(json.dumps(time.perf_counter() - t), flush=True)
'''

PEER_NAMES = {"oscillator (1000 steps)": "oscillator", "newton (1-30 iterations)": "newton",
              "y = a*x + b": "stream", "cell (sum)": "cell"}


class Peer:
    """raptor-eagle in a subprocess of ``python``, ``threads`` OpenMP threads; ``time(name)``."""

    def __init__(self, python, n, threads, seed=2024):
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        env.pop("PYTHONPATH", None)
        script = PEER_SCRIPT % {"steps": STEPS, "n": n, "seed": seed, "dt": DT, "tol": NEWTON_TOL}
        self.proc = subprocess.Popen([python, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=env, text=True, cwd="/")
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"the peer at {python} did not start (it said {line!r})")

    def time(self, name):
        self.proc.stdin.write(PEER_NAMES[name] + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


# --- the machine -----------------------------------------------------------------------------------

def clock_hz() -> float:
    """The core's clock, measured: a chain of dependent integer adds runs one a cycle."""
    from numba import njit

    @njit(cache=False)
    def chain(n):
        a = 0
        for k in range(n):
            a = (a + k) ^ 1       # two dependent single-cycle ops per iteration
        return a
    chain(10)
    n = 50_000_000
    best = min(_timed(chain, n) for _ in range(9))      # the best of 9: a busy machine only slows it
    return 2 * n / best


def _timed(fn, n):
    t = time.perf_counter()
    fn(n)
    return time.perf_counter() - t


def vector_bits() -> int:
    return 512 if host_has_avx512() else 256


def bench(label, kernel, make, threads, peer):
    p = eagle.deploy(kernel)
    laned, simd = HostEntry(p, simd=False), HostEntry(p)
    small = {k: (v[:64].copy() if isinstance(v, np.ndarray) else v) for k, v in make().items()}
    run_entry(laned, small, threads), run_entry(simd, small, threads)           # compile outside the timing
    times = {"laned": [], "simd": [], "peer": []}
    outs = {}
    for _ in range(REPEATS):
        for name, entry in (("laned", laned), ("simd", simd)):
            dt, outs[name] = run_entry(entry, make(), threads)
            times[name].append(dt)
        if peer is not None:
            times["peer"].append(peer.time(label))
    same = eagle.bits.same_bits(outs["laned"], outs["simd"])
    med = {k: statistics.median(v) for k, v in times.items() if v}
    return simd.path, med, same


COMPILE_SCRIPT = r'''
import os, sys, tempfile, time
os.environ["EAGLE_CACHE_DIR"] = tempfile.mkdtemp()
import numpy as np, eagle, eagle.bind
from eagle.host import HostEntry
from tests.kernels import CASES, inputs
from tests.test_lanes import EXTRA
from benchmarks.simd import newton, newton_inputs
name, path, warm = sys.argv[1:4]
def entry(p):
    return HostEntry(p) if path == "simd" else HostEntry(p, simd=False)
def case(name):
    if name == "newton":
        return newton, dict(x=newton_inputs(50, np.random.default_rng(1)), tol=1e-12)
    if name in CASES:
        return CASES[name][0], inputs(name, 50)
    return EXTRA[name][0], EXTRA[name][1](50, np.random.default_rng(1))
k, planes = case(warm)
w = eagle.deploy(k); b = eagle.bind.bind(w, planes); entry(w).run(b.values, 0, b.n, threads=1)
k, planes = case(name)
p = eagle.deploy(k)
t = time.process_time()
e = entry(p); b = eagle.bind.bind(p, planes); e.run(b.values, 0, b.n, threads=1)
print(time.process_time() - t, e.path)
'''
COMPILED = ["oscillator", "newton", "axpb", "reductions", "halvings", "stencil", "vectors", "collatz", "rotate"]


def compile_times(cold=False, repeats=2):
    """Kernel -> (laned seconds, vectorised seconds), the best of ``repeats`` fresh interpreters."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = {}
    for name in COMPILED:
        warm = "integers" if cold else ("collatz" if name == "halvings" else "halvings")
        best = {}
        for _ in range(repeats):
            for path in ("lanes", "simd"):
                r = subprocess.run([sys.executable, "-c", COMPILE_SCRIPT, name, path, warm], env=env, cwd=root,
                                   capture_output=True, text=True, check=True)
                t = float(r.stdout.split()[0])
                best[path] = min(best.get(path, t), t)
        out[name] = (best["lanes"], best["simd"])
    return out


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if "--compile" in argv:
        cold = "--cold" in argv
        print(f"compile time, CPU seconds, best of 2 fresh interpreters ({'cold' if cold else 'warm'} numba)")
        print(f"{'kernel':12s} {'laned':>7s} {'simd':>7s} {'simd/laned':>10s}")
        for name, (lt, st) in compile_times(cold).items():
            print(f"{name:12s} {lt:7.3f} {st:7.3f} {st / lt:9.2f}x", flush=True)
        return
    peer_python = os.environ.get("EAGLE_PEER_PYTHON")
    if "--peer" in argv:
        k = argv.index("--peer")
        peer_python = argv[k + 1]
        argv = argv[:k] + argv[k + 2:]
    n = int(float(argv[0])) if argv else 10 ** 6
    rng = np.random.default_rng(2024)
    bits = vector_bits()
    hz = clock_hz()
    peak = hz * (bits // 64) * 2
    print(f"host SIMD, {n} samples, median of {REPEATS} runs (seconds); vector width {bits} bits; "
          f"clock {hz / 1e9:.2f} GHz; peak {peak / 1e9:.1f} GFLOP/s per core (no FMA)")
    if peer_python:
        print(f"peer: raptor-eagle at {peer_python}, default host profile")
    head = f"{'kernel':26s} {'threads':>7s} {'path':>5s} {'laned':>8s} {'simd':>8s} {'laned/simd':>10s}"
    if peer_python:
        head += f" {'peer':>8s} {'ours/peer':>9s}"
    print(head + "  bits  peak")
    for label, (kernel, make, flops) in cases(n, rng).items():
        for threads in (1, 2):
            peer = Peer(peer_python, n, threads) if peer_python else None
            try:
                path, med, same = bench(label, kernel, make, threads, peer)
            finally:
                if peer is not None:
                    peer.close()
            line = (f"{label:26s} {threads:7d} {path:>5s} {med['laned']:8.4f} {med['simd']:8.4f} "
                    f"{med['laned'] / med['simd']:9.2f}x")
            if peer_python:
                line += f" {med['peer']:8.4f} {med['simd'] / med['peer']:9.2f}"
            frac = f"{flops / med['simd'] / (peak * threads):6.1%}" if flops else "     -"
            print(line + f"  {'same' if same else 'DIFFERENT'}  {frac}", flush=True)


if __name__ == "__main__":
    main()
