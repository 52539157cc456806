"""``python -m benchmarks``: every way of running, side by side, in one run.

    python -m benchmarks --quick --out DIR     # one size, all arms, under two minutes on 2 cores
    python -m benchmarks --out DIR             # sizes 1e4, 1e6, 1e7 (--large adds 1e8)
    python -m benchmarks --gpu-only --out DIR  # DeviceKernel and dask-cuda arms (scripts/gpu_bench.sh)
    python -m benchmarks --lanes               # host lanes against one sample at a time (benchmarks.lanes)
    python -m benchmarks --smoke --out DIR     # n=1000, 1 repeat, host arms only (the harness's test)

Writes ``results.csv``, ``results.png`` and ``results.txt`` into DIR and prints the table.
"""
from __future__ import annotations

import argparse
import os
import sys
import time


def _ints(text):
    return [int(float(v)) for v in text.split(",") if v]


def parse(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="one size (1e5), fewer oscillator steps, 3 repeats")
    mode.add_argument("--smoke", action="store_true", help="n=1000, 1 repeat, host arms only")
    mode.add_argument("--gpu-only", action="store_true", help="the GPU arms (with the host baseline)")
    mode.add_argument("--lanes", action="store_true",
                      help="host lanes against one sample at a time: oscillator (1000 steps), a while loop and "
                           "stream at 1e6, 1 and all threads, median of 5 (same as python -m benchmarks.lanes)")
    ap.add_argument("--large", action="store_true", help="add 1e8 samples to the full sizes")
    ap.add_argument("--out", default="bench-out", help="folder for results.csv/png/txt (default: bench-out)")
    ap.add_argument("--sizes", type=_ints, help="sample counts, comma-separated (overrides the mode's)")
    ap.add_argument("--kernels", help="comma-separated subset of stream,oscillator,stencil,mapreduce")
    ap.add_argument("--repeats", type=int, help="timed runs per arm (default 5; quick 3; smoke 1)")
    ap.add_argument("--steps", type=int, help="oscillator steps (default 1000; quick 200)")
    ap.add_argument("--workers", type=_ints, help="Dask worker counts (default 1,2,4; quick 1,2)")
    ap.add_argument("--ranks", type=_ints, default=[1, 2], help="MPI world sizes (default 1,2)")
    ap.add_argument("--no-mpi", action="store_true", help="leave out the RankPartition arms")
    ap.add_argument("--no-dask", action="store_true", help="leave out the Dask arms")
    return ap.parse_args(argv)


def settings(a):
    """(sizes, kernels, repeats, steps, which arm groups) for the chosen mode."""
    from .kernels import MAIN
    if a.smoke:
        sizes, repeats, steps, groups = [1000], 1, 50, {"host"}
    elif a.quick:
        sizes, repeats, steps, groups = [10**5], 3, 200, {"host", "mpi", "dask", "gpu"}
    elif a.gpu_only:
        sizes, repeats, steps, groups = [10**6, 10**7], 3, 1000, {"baseline", "gpu"}
    else:
        sizes, repeats, steps = [10**4, 10**6, 10**7], 5, 1000
        groups = {"host", "mpi", "dask", "gpu"}
        if a.large:
            sizes.append(10**8)
    kernels = list(MAIN)
    if a.kernels:
        kernels = [k.strip() for k in a.kernels.split(",") if k.strip()]
    if a.no_mpi:
        groups.discard("mpi")
    if a.no_dask:
        groups.discard("dask")
    workers = a.workers or ([1, 2] if a.quick else [1, 2, 4])
    return (a.sizes or sizes, kernels, a.repeats or repeats, a.steps or steps, groups, workers)


def main(argv=None) -> int:
    a = parse(argv)
    if a.lanes:
        from . import lanes
        lanes.main([str(s) for s in (a.sizes or [])[:1]])
        return 0
    sizes, kernels, repeats, steps, groups, workers = settings(a)
    from . import arms, report
    from .kernels import SPECS
    from .measure import Case
    unknown = [k for k in kernels if k not in SPECS]
    if unknown:
        print(f"unknown kernel(s) {', '.join(unknown)}; choose from {', '.join(SPECS)}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    load0 = os.getloadavg()[0]
    everyone = arms.all_threads()
    cases = [Case(k, n, steps, repeats) for n in sizes for k in kernels]
    rows = []

    def say(msg):
        print(f"[{time.perf_counter() - t0:6.1f}s] {msg}", flush=True)

    for c in cases:
        say(f"{c.kernel} n={c.n}: host arms")
        rows.append(arms.host_team(c, 1))
        if groups & {"host", "baseline"} and everyone > 1:
            rows.append(arms.host_team(c, everyone))
        if "host" in groups:
            rows.append(arms.numba_loop(c))
        if "host" in groups:
            rows.append(arms.numpy_arm(c))
    if "dask" in groups:
        say(f"dask arms on {', '.join(map(str, workers))} worker(s)")
        rows += arms.dask_arms(cases, workers)
    if "mpi" in groups:
        say(f"mpi arms, mpiexec.gforker -n {', '.join(map(str, a.ranks))}")
        rows += arms.mpi_arms(cases, a.ranks)
    if "gpu" in groups:
        say("gpu arms")
        rows += arms.gpu_arms(cases)
    rows = report.finish(rows)
    print()
    print(report.table(rows))
    if a.quick:
        print(f"quick mode: n={sizes}, oscillator {steps} steps (full: 1000), {repeats} repeats, Dask on "
              f"{workers} worker(s) (full: 1,2,4); run without --quick for sizes 1e4, 1e6, 1e7.")
    machine = (f"machine: {os.cpu_count()} CPUs, {everyone} threads for 'all'; load average "
               f"{load0:.1f} at start, {os.getloadavg()[0]:.1f} at end (above the CPU count: timings "
               "include other work)")
    print(machine)
    paths = report.write_all(rows, a.out, footer=machine)
    say(f"wrote {paths['csv']}; plot: {paths['png']}; all threads = {everyone}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
