"""Dask at the speed of one process: every row of the table, ours against its reference.

    python -m benchmarks.dask_speed                  # the sizes of the table (several minutes on 2 cores)
    python -m benchmarks.dask_speed --quick          # 10x smaller, a couple of minutes
    python -m benchmarks.dask_speed --out DIR        # where results.csv / .png / .txt go

Each row runs its arms alternated, round after round, on fresh inputs every round, and reports
medians; every arm's outputs are checked bit for bit against one process:

1. **readme demo** -- the oscillator, 10^6 samples x 1000 steps, numpy mode on 2 workers
   (shared memory through the driver's arena; fresh segments per run, ``EAGLE_DASK_ARENA=0``;
   and the messages, ``EAGLE_DASK_SHM=0``) / one process with 2 threads;
2. **tiny run** -- 10^4 samples, 1 step, numpy mode, the same three transports, against
   distributed's own round trip of two tasks on the same client (goal: at most 1.2 times it),
   each arm after ``TINY_SETTLE`` seconds of quiet;
3. **lazy, 2 chunks** -- the same oscillator on persisted dask arrays, outputs persisted / one process;
   and distributed's own graph of that shape with no kernel in it (the row's floor, below);
4. **lazy, chunks of 1000** -- 10^6 samples (100 steps) with a cell, inputs persisted, against
   ``map_blocks`` over a numba loop + dask's ``sum``; the tasks each adds to the graph;
5. **chunks of 333 / of 31** -- the same at those chunkings, / the chunks-of-1000 time (the
   inputs of chunks of 31 are ~10^5 keys: skipped, with a note, when making and persisting them
   would take over ``--persist-budget`` seconds, estimated from those of chunks of 333);
6. **a user's LocalCluster** -- ``distributed.LocalCluster(n_workers=2, threads_per_worker=1)``
   against ``eagle_dask.local_cluster(n_workers=2)``, the readme demo, and the teams' threads;
7. **first run, empty cache** -- a fresh 2-worker cluster's first run / a first HostTeam run,
   each with an empty cache (one round: it compiles); and the CPU seconds those runs cost, the
   driver's process and the workers' together (row "first run, CPU": goal at most 1.3 times).

Beside a figure, the summary gives what one process plus what distributed alone costs would be,
where that is measured in the same run (``FLOORS``): the readme demo's, (one process +
distributed's own 2-task round trip) / one process; the lazy row's, (one process + distributed's
own graph of its shape) / one process.  Not a strict bound (a block's work overlaps another's
messages), but a goal well under it asks distributed for less than it does alone.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
import uuid

import numpy as np

import eagle
import eagle.exec as eexec
from eagle import plan as eplan
from eagle.bits import same_bits
from eagle.models import oscillator

from . import report
from .dask_arrays import _osc_map_blocks, fresh, persisted
from .kernels import DT

GOALS = {"readme demo": 1.25, "tiny run": 1.2, "lazy, 2 chunks": 1.10, "lazy, chunks of 1000": 1.0,
         "chunks of 333": 1.5, "chunks of 31": 1.5, "a user's LocalCluster": 1.05, "first run, empty cache": 1.2,
         "first run, CPU": 1.3}


def oscillators(n, steps, seed):
    rng = np.random.default_rng(seed)
    return {"omega": rng.uniform(0.5, 2.0, n), "dt": DT, "steps": steps, "x": np.ones(n), "v": np.zeros(n)}


def timed(f):
    t = time.perf_counter()
    out = f()
    return time.perf_counter() - t, out


def alternate(arms, rounds, settle=0.0):
    """{arm: [seconds]} and each arm's last output; ``arms[k](seed)`` returns (seconds, output).
    ``settle``: seconds of quiet before each arm (see ``TINY_SETTLE``)."""
    times, last = {k: [] for k in arms}, {}
    for r in range(rounds):
        for k, f in arms.items():
            time.sleep(settle)
            t, last[k] = f(1000 + r)
            times[k].append(t)
    return times, last


def row(name, arm, workers, n, times, identical, note=""):
    med = statistics.median(times)
    return report.Row(name, arm, workers, n, repeats=len(times), median_s=med, spread_s=max(times) - min(times),
                      identical="yes" if identical else "no", note=note)


class Shm:
    """The transport of the runs inside: ``"arena"`` (shared memory, the driver's arena: the
    default), ``"fresh"`` (shared memory, fresh segments per run: ``EAGLE_DASK_ARENA=0``) or
    ``"messages"`` (``EAGLE_DASK_SHM=0``)."""

    def __init__(self, how):
        how = {True: "arena", False: "messages"}.get(how, how)
        self.env = {"EAGLE_DASK_SHM": "0" if how == "messages" else "1",
                    "EAGLE_DASK_ARENA": "0" if how == "fresh" else "1"}

    def __enter__(self):
        self.old = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)

    def __exit__(self, *exc):
        for k, v in self.old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def cpu_of(proc):
    """User + system CPU seconds of the psutil process ``proc`` so far; None once it is gone."""
    try:
        t = proc.cpu_times()
    except Exception:  # noqa: BLE001 - a process gone
        return None
    return t.user + t.system


def cpu_seconds(procs) -> float:
    """``cpu_of`` summed over ``procs`` (those gone count 0)."""
    return sum(c for c in map(cpu_of, procs) if c is not None)


class CpuTime:
    """CPU seconds (user + system) of this process -- the driver, and under ``local_cluster`` the
    scheduler and the nannies too -- and of the client's worker processes on this host, summed
    per arm over its timed runs (``of``), shown per run (``note``): on a machine with few cores
    the workers' kernels and everything else the run costs share them."""

    def __init__(self, client):
        import psutil
        self.procs = {"driver": psutil.Process()}
        try:
            pids = client.run(os.getpid)
            self.procs.update({f"worker {i}": psutil.Process(pid) for i, pid in enumerate(sorted(pids.values()))})
        except Exception:  # noqa: BLE001 - workers elsewhere: the driver's alone
            pass
        self.spent, self.runs = {}, {}

    def _now(self):
        now = {k: cpu_of(proc) for k, proc in self.procs.items()}
        return {k: c for k, c in now.items() if c is not None}

    @contextlib.contextmanager
    def of(self, label):
        if label is None:
            yield
            return
        before = self._now()
        yield
        after = self._now()
        spent = self.spent.setdefault(label, {})
        for k in after.keys() & before.keys():
            spent[k] = spent.get(k, 0.0) + after[k] - before[k]
        self.runs[label] = self.runs.get(label, 0) + 1

    def note(self, label):
        spent, runs = self.spent.get(label, {}), self.runs.get(label, 0)
        if not runs:
            return ""
        workers = sum(v for k, v in spent.items() if k != "driver")
        return (f"CPU ms per run: driver {1e3 * spent.get('driver', 0.0) / runs:.1f}, "
                f"workers {1e3 * workers / runs:.1f}")


#: the reference of the tiny run: distributed's own round trip of two tasks on the same client
OWN_ROUND_TRIP = "distributed's own 2-task round trip"
#: seconds of quiet before each arm of the tiny run: what an arm leaves behind (its futures
#: released, a numpy-mode run's held futures ``eagle_dask.eager.HOLD`` seconds later) puts a
#: message on the scheduler's stream to each worker, which then holds the next arm's tasks for its
#: 5 ms interval -- back to back, each arm paid for the one before it
TINY_SETTLE = 0.3


def _echo(x):
    return x


def own_round_trip(client):
    def go(seed):
        from distributed import wait
        t = time.perf_counter()
        fs = [client.submit(_echo, (seed, k), pure=False) for k in range(2)]
        wait(fs)
        return time.perf_counter() - t, None
    return go


def numpy_mode_rows(client, n, steps, rounds, tiny_rounds):
    from eagle_dask import DaskPartition
    plugin = eagle.deploy(oscillator)
    one = eplan.plan(plugin, structure=eexec.HostTeam)
    dask_plan = eplan.plan(plugin, structure=DaskPartition.on(client, progress=False))

    cpu = CpuTime(client)

    def arm(p, on=True, size=n, k=steps, label=None):
        def go(seed):
            d = oscillators(size, k, seed)
            with Shm(on), cpu.of(label):
                return timed(lambda: p.run(**d))
        return go

    for f in (arm(one), arm(dask_plan), arm(dask_plan, "fresh"), arm(dask_plan, False)):
        f(0)                                                                   # warm: compile, connect
    arms = {"one process": (one, True), "numpy mode, shared memory": (dask_plan, True),
            "numpy mode, fresh segments": (dask_plan, "fresh"), "numpy mode, messages": (dask_plan, False)}
    times, last = alternate({k: arm(p, on, label=k) for k, (p, on) in arms.items()}, rounds)
    ref = one.run(**oscillators(n, steps, 1000 + rounds - 1))
    rows = [row("readme demo", k, 1 if k == "one process" else 2, n, t, same_bits(ref, last[k]), note=cpu.note(k))
            for k, t in times.items()]
    tiny, tlast = alternate({"numpy mode, shared memory": arm(dask_plan, True, 10**4, 1),
                             "numpy mode, fresh segments": arm(dask_plan, "fresh", 10**4, 1),
                             "numpy mode, messages": arm(dask_plan, False, 10**4, 1),
                             OWN_ROUND_TRIP: own_round_trip(client)}, tiny_rounds, TINY_SETTLE)
    tref = one.run(**oscillators(10**4, 1, 1000 + tiny_rounds - 1))
    rows += [row("tiny run", k, 2, 10**4, t, same_bits(tref, tlast[k])) for k, t in tiny.items()
             if k != OWN_ROUND_TRIP]
    rows.append(row("tiny run", OWN_ROUND_TRIP, 2, 0, tiny[OWN_ROUND_TRIP], True,
                    note="two tasks that return their argument, submitted one after the other, waited for; "
                         "the same client"))
    return rows


#: the lazy row's floor: the same graph as an eagle run of the oscillator, run by distributed with no
#: kernel in it
OWN_LAZY_GRAPH = "distributed's own graph of this shape"


def _null_block(omega, x, v):
    """A lazy block that runs no kernel: its outputs are copies of ``x`` and ``v`` (as an eagle
    block's are), its row partials one empty row."""
    return x.copy(), v.copy(), np.zeros((1, 2))


def _pick(result, i):
    return result[i]


def _null_fold(*rows):
    return np.float64(sum(float(r.sum()) for r in rows))


def own_lazy_graph(w, x, v):
    """Dask arrays of the graph an eagle lazy run of the oscillator makes over ``w, x, v`` (one
    block per chunk -- eagle's, for chunks of at least ``eagle_dask.arrays.MIN_BLOCK`` samples cut
    on whole rows of a cell --, a pick per output and per block's rows, a fold of the rows), whose
    blocks run no kernel: what distributed alone costs a run of this shape."""
    import dask.array as da
    from dask.highlevelgraph import HighLevelGraph
    tag = uuid.uuid4().hex[:8]
    blocks = range(len(x.chunks[0]))
    run = f"bench-null-block-{tag}"
    graph = HighLevelGraph.from_collections(
        run, {(run, b): (_null_block, (w.name, b), (x.name, b), (v.name, b)) for b in blocks}, dependencies=[w, x, v])
    runs = da.Array(graph, run, chunks=((1,) * len(blocks),), dtype=object, meta=np.empty((0,), dtype=object))

    def picked(i, label, chunks, meta):
        name = f"bench-null-{label}-{tag}"
        layer = {(name, b) + (0,) * (len(chunks) - 1): (_pick, (run, b), i) for b in blocks}
        return da.Array(HighLevelGraph.from_collections(name, layer, dependencies=[runs]), name, chunks=chunks,
                        dtype=np.float64, meta=meta)
    outs = [picked(0, "x", x.chunks, np.empty((0,))), picked(1, "v", v.chunks, np.empty((0,)))]
    rows = picked(2, "rows", ((1,) * len(blocks), (2,)), np.empty((0, 0)))
    cell = f"bench-null-cell-{tag}"
    graph = HighLevelGraph.from_collections(cell, {(cell,): (_null_fold, *[(rows.name, b, 0) for b in blocks])},
                                            dependencies=[rows])
    return outs + [da.Array(graph, cell, chunks=(), dtype=np.float64, meta=np.empty(()))]


def lazy_two_chunks(client, n, steps, rounds):
    from eagle_dask import DaskPartition
    plugin = eagle.deploy(oscillator)
    one = eplan.plan(plugin, structure=eexec.HostTeam)
    p = eplan.plan(plugin, structure=DaskPartition.on(client, progress=False))
    chunks = -(-n // 2)
    cpu = CpuTime(client)

    def lazy(seed):
        d = oscillators(n, steps, seed)
        w, x, v = fresh(client, [d["omega"], d["x"], d["v"]], chunks)
        with cpu.of("lazy, 2 chunks, persisted"):
            return timed(lambda: client.gather(persisted(client, list(p.run(omega=w, dt=DT, steps=steps, x=x,
                                                                                v=v).values()))))

    def one_arm(seed):
        d = oscillators(n, steps, seed)
        with cpu.of("one process"):
            return timed(lambda: one.run(**d))

    def null(seed):
        d = oscillators(n, steps, seed)
        w, x, v = fresh(client, [d["omega"], d["x"], d["v"]], chunks)
        return timed(lambda: client.gather(persisted(client, own_lazy_graph(w, x, v))))

    lazy(0)
    one_arm(0)
    null(0)
    times, last = alternate({"one process": one_arm, "lazy, 2 chunks, persisted": lazy, OWN_LAZY_GRAPH: null}, rounds)
    ref = one.run(**oscillators(n, steps, 1000 + rounds - 1))
    got = dict(zip(("x", "v", "energy"), last["lazy, 2 chunks, persisted"]))
    rows = [row("lazy, 2 chunks", k, 1 if k == "one process" else 2, n, t,
                same_bits(ref, got if k != "one process" else last[k]), note=cpu.note(k)) for k, t in times.items()
            if k != OWN_LAZY_GRAPH]
    rows.append(row("lazy, 2 chunks", OWN_LAZY_GRAPH, 2, n, times[OWN_LAZY_GRAPH], True,
                    note="the same graph (a block per chunk, a pick per output and rows, a fold) whose blocks copy x "
                         "and v and run no kernel: what distributed alone costs a run of this shape"))
    return rows


def added_tasks(outs, inputs):
    keys = {k for v in outs for k in dict(v.__dask_graph__())}
    return len(keys - {k for v in inputs for k in dict(v.__dask_graph__())})


def persisted_within(client, arrays, budget):
    """``arrays`` persisted on the workers within ``budget`` seconds, else None (cancelled)."""
    from distributed import TimeoutError as DaskTimeout
    from distributed import wait
    out = client.persist(arrays)
    try:
        wait(out, timeout=budget)
    except (DaskTimeout, TimeoutError):
        client.cancel(out)
        return None
    return out


def inputs_at(client, d, chunks, budget=None):
    import dask.array as da
    tag = uuid.uuid4().hex[:8]
    arrays = [da.from_array(d[k], chunks=chunks, name=f"speed-{k}-{tag}") for k in ("omega", "x", "v")]
    if budget is None:
        return persisted(client, arrays)
    return persisted_within(client, arrays, budget)


def chunked_rows(client, n, steps, rounds, budget):
    """Rows 4 and 5: eagle at chunks of 1000, 333 (and 31) against map_blocks + sum at 1000."""
    import warnings
    from eagle_dask import DaskPartition
    plugin = eagle.deploy(oscillator)
    p = eplan.plan(plugin, structure=DaskPartition.on(client, progress=False))
    counts = {}

    def eagle_arm(chunks):
        def go(seed):
            w, x, v = inputs_at(client, oscillators(n, steps, seed), chunks)
            out = p.run(omega=w, dt=DT, steps=steps, x=x, v=v)
            counts[f"eagle, chunks of {chunks}"] = added_tasks(out.values(), [w, x, v])
            return timed(lambda: client.gather(persisted(client, list(out.values()))))
        return go

    def map_blocks_arm(seed):
        w, x, v = inputs_at(client, oscillators(n, steps, seed), 1000)
        outs = _osc_map_blocks(w, x, v, steps)
        counts["map_blocks + sum, chunks of 1000"] = added_tasks(outs, [w, x, v])
        return timed(lambda: client.gather(persisted(client, outs)))

    arms = {"eagle, chunks of 1000": eagle_arm(1000), "map_blocks + sum, chunks of 1000": map_blocks_arm,
            "eagle, chunks of 333": eagle_arm(333)}
    note31 = ""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sending large graph", category=UserWarning)
        # the inputs in chunks of 31 are ~3 n / 31 keys: their cost is estimated from those of 333
        t333, probe = timed(lambda: inputs_at(client, oscillators(n, steps, 0), 333))
        client.cancel(probe)
        estimate = t333 * 333 / 31
        if estimate > budget:
            note31 = (f"making and persisting the inputs in chunks of 31 ({3 * -(-n // 31)} keys) would take about "
                      f"{estimate:.0f} s a round here (from {t333:.1f} s at chunks of 333), over the "
                      f"{budget:g} s budget: the scheduler's cost per key, before eagle runs")
        else:
            arms["eagle, chunks of 31"] = eagle_arm(31)
        for f in arms.values():
            f(0)                                                                # warm
        times, last = alternate(arms, rounds)
    ref = eplan.plan(plugin, structure=eexec.HostTeam).run(**oscillators(n, steps, 1000 + rounds - 1))
    rows = []
    for k, ts in times.items():
        got = dict(zip(("x", "v", "energy"), last[k]))
        same = same_bits(ref, got) if k.startswith("eagle") else same_bits({"x": ref["x"], "v": ref["v"]},
                                                                             {"x": got["x"], "v": got["v"]})
        label = "lazy, chunks of 1000" if k.endswith("1000") else f"chunks of {k.rsplit(' ', 1)[1]}"
        extra = "" if k.startswith("eagle") else "; x, v compared (dask's sum folds in a tree of the chunks)"
        rows.append(row(label, k, 2, n, ts, same, f"{counts.get(k, 0)} tasks added{extra}"))
    if note31:
        rows.append(report.skipped("chunks of 31", "eagle, chunks of 31", 2, n, note31))
    return rows


def user_cluster_row(client, n, steps, rounds):
    """Row 6: a user's own LocalCluster against eagle's local_cluster, and the teams' threads."""
    from distributed import Client, LocalCluster
    from eagle_dask import DaskPartition, task
    plugin = eagle.deploy(oscillator)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0") as cluster, Client(cluster, set_as_default=False) as user:
        user.wait_for_workers(2, timeout=120)
        plans = {"eagle's local_cluster(n_workers=2)": eplan.plan(
                     plugin, structure=DaskPartition.on(client, progress=False)),
                 "LocalCluster(n_workers=2, threads_per_worker=1)": eplan.plan(
                     plugin, structure=DaskPartition.on(user, progress=False))}
        arms = {k: (lambda p: lambda seed: timed(lambda: p.run(**oscillators(n, steps, seed))))(p)
                for k, p in plans.items()}
        for f in arms.values():
            f(0)
        user.run(task.clear_received)
        times, last = alternate(arms, rounds)
        threads = sorted({t for ts in user.run(task.teams).values() for _, _, t in ts})
    ref = eplan.plan(plugin, structure=eexec.HostTeam).run(**oscillators(n, steps, 1000 + rounds - 1))
    return [row("a user's LocalCluster", k, 2, n, t, same_bits(ref, last[k]),
                f"teams of {threads} thread(s) on 1-thread workers" if k.startswith("LocalCluster") else "")
            for k, t in times.items()]


FIRST = """
import sys, time, numpy as np
import eagle, eagle.exec as eexec
from eagle import plan as eplan
from eagle.models import oscillator
n, steps = int(sys.argv[1]), int(sys.argv[2])
d = dict(omega=np.linspace(0.5, 2.0, n), dt=1e-3, steps=steps, x=np.ones(n), v=np.zeros(n))
import os, psutil
from benchmarks.dask_speed import cpu_seconds
if __name__ == "__main__":
    procs = [psutil.Process()]
    if sys.argv[3] == "cluster":
        import eagle_dask
        from eagle_dask import DaskPartition
        c = eagle_dask.local_cluster(n_workers=2)
        c.wait_for_workers(2, timeout=120)
        s = DaskPartition.on(c, progress=False)
        procs += [psutil.Process(pid) for pid in c.run(os.getpid).values()]
    else:
        s = eexec.HostTeam
    c0, t = cpu_seconds(procs), time.perf_counter()
    eplan.plan(eagle.deploy(oscillator), structure=s).run(**d)
    print(time.perf_counter() - t, cpu_seconds(procs) - c0)
    if sys.argv[3] == "cluster":
        c.close()
"""


def first_run_row(n, steps):
    """Row 7: first runs with an empty cache, each in a new process (one round: they compile)."""
    import subprocess
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out, spent = {}, {}
    for arm in ("host", "cluster"):
        with tempfile.TemporaryDirectory() as cache:
            os.chmod(cache, 0o700)
            env = {**os.environ, "EAGLE_CACHE_DIR": cache, "PYTHONPATH": root}
            done = subprocess.run([sys.executable, "-c", FIRST, str(n), str(steps), arm], capture_output=True,
                                  text=True, timeout=600, env=env, cwd=root)
            got = done.stdout.split()[-2:] if done.returncode == 0 else ["nan", "nan"]
            out[arm], spent[arm] = float(got[0]), float(got[1])
    note = ("one round; each host compiles once (a file lock in the cache), the workers load it, numba "
            "already started in them by their preload (eagle_dask.warm)")
    cpu_note = "CPU seconds (user + system) of the run in 'median s': the driver's process and the workers'"
    return [report.Row("first run, empty cache", "first HostTeam run", 1, n, 1, out["host"], 0.0, note=note),
            report.Row("first run, empty cache", "first run, fresh 2-worker cluster", 2, n, 1, out["cluster"], 0.0,
                       note=note),
            report.Row("first run, CPU", "first HostTeam run", 1, n, 1, spent["host"], 0.0, note=cpu_note),
            report.Row("first run, CPU", "first run, fresh 2-worker cluster", 2, n, 1, spent["cluster"], 0.0,
                       note=cpu_note)]


#: each row's figure: (row, ours, reference or None for an absolute figure in seconds)
FIGURES = [("readme demo", "numpy mode, shared memory", "one process"),
           ("tiny run", "numpy mode, shared memory", OWN_ROUND_TRIP),
           ("lazy, 2 chunks", "lazy, 2 chunks, persisted", "one process"),
           ("lazy, chunks of 1000", "eagle, chunks of 1000", "map_blocks + sum, chunks of 1000"),
           ("chunks of 333", "eagle, chunks of 333", ("lazy, chunks of 1000", "eagle, chunks of 1000")),
           ("chunks of 31", "eagle, chunks of 31", ("lazy, chunks of 1000", "eagle, chunks of 1000")),
           ("a user's LocalCluster", "LocalCluster(n_workers=2, threads_per_worker=1)",
            "eagle's local_cluster(n_workers=2)"),
           ("first run, empty cache", "first run, fresh 2-worker cluster", "first HostTeam run"),
           ("first run, CPU", "first run, fresh 2-worker cluster", "first HostTeam run")]


def _medians(rows):
    """{(row, arm): median seconds} of the arms that ran."""
    return {(r.kernel, r.arm): r.median_s for r in rows if r.ran}


def figures(rows):
    """[(row, figure, goal, unit)]: ratios ours / reference (a row without one: seconds)."""
    med = _medians(rows)
    out = []
    for name, ours, ref in FIGURES:
        mine = med.get((name, ours))
        if mine is None:
            continue
        if ref is None:
            out.append((name, mine, GOALS[name], "s"))
            continue
        base = med.get(ref if isinstance(ref, tuple) else (name, ref))
        if base:
            out.append((name, mine / base, GOALS[name], "x"))
    return out


#: rows for which what distributed alone costs is measured in the same run: (row, (row, arm) of
#: distributed alone, the reference arm); the floor is (reference + distributed alone) /
#: reference.  The readme demo's: distributed's own round trip of two tasks (the tiny row's
#: reference), which a run of two blocks cannot do without
FLOORS = [("lazy, 2 chunks", ("lazy, 2 chunks", OWN_LAZY_GRAPH), "one process"),
          ("readme demo", ("tiny run", OWN_ROUND_TRIP), "one process")]


def floors(rows):
    """{row: (its reference + what distributed alone costs) / its reference}."""
    med = _medians(rows)
    return {name: (med[(name, ref)] + med[alone]) / med[(name, ref)] for name, alone, ref in FLOORS
            if med.get((name, ref)) and alone in med}


def summary(figs, floor=None):
    lines = ["", "figure against its goal:"]
    for name, value, goal, unit in figs:
        shown = f"{1e3 * value:.1f} ms (goal <= {1e3 * goal:g} ms)" if unit == "s" else \
            f"{value:.2f}x (goal <= {goal:g}x)"
        least = f"  (one process + distributed alone: {floor[name]:.2f}x)" if floor and name in floor else ""
        lines.append(f"  {name:28s} {shown:34s} {'met' if value <= goal else 'MISSED'}{least}")
    return "\n".join(lines)


def plot(figs, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot"
    if not figs:
        return "nothing ran: no plot"
    fig, ax = plt.subplots(figsize=(9, 4.5))
    names = [f[0] for f in figs]
    vals = [f[1] / f[2] for f in figs]
    ax.barh(names, vals, color=["tab:green" if v <= 1 else "tab:red" for v in vals])
    ax.axvline(1.0, color="k", lw=1)
    ax.set_xlabel("figure / goal (<= 1 meets the goal)")
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.dask_speed", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="10x smaller sizes, fewer rounds")
    ap.add_argument("--rounds", type=int, default=None, help="alternated rounds per row (default 9; quick 3)")
    ap.add_argument("--persist-budget", type=float, default=30.0,
                    help="seconds the chunks-of-31 inputs may take to make and persist, estimated from those of "
                         "333, before that row is skipped")
    ap.add_argument("--skip-first-run", action="store_true", help="leave out row 7 (two fresh processes)")
    ap.add_argument("--only", choices=["numpy mode", "lazy, 2 chunks", "chunked", "user cluster"], default=None,
                    help="run only this group of rows (and not row 7)")
    ap.add_argument("--out", default="bench-out/dask_speed", help="folder for results.csv/png/txt")
    a = ap.parse_args(argv)
    rounds = a.rounds or (3 if a.quick else 9)
    n = 10**5 if a.quick else 10**6
    import eagle_dask
    client = eagle_dask.local_cluster(n_workers=2)
    rows = []
    steps = {
        "numpy mode": lambda: numpy_mode_rows(client, n, 1000, rounds, 15),
        "lazy, 2 chunks": lambda: lazy_two_chunks(client, n, 1000, rounds),
        "chunked": lambda: chunked_rows(client, n, 100, max(3, rounds // 3), a.persist_budget),
        "user cluster": lambda: user_cluster_row(client, n, 1000, rounds),
    }
    try:
        client.wait_for_workers(2, timeout=120)
        for name, f in steps.items():
            if a.only not in (None, name):
                continue
            new = f()
            rows += new
            print(report.table(new))
            sys.stdout.flush()
    finally:
        client.close()
    if not a.skip_first_run and a.only is None:
        rows += first_run_row(n, 1000)
    figs = figures(rows)
    note = summary(figs, floors(rows))
    print(report.table(rows))
    print(note)
    os.makedirs(a.out, exist_ok=True)
    report.write_csv(rows, os.path.join(a.out, "results.csv"))
    png = plot(figs, os.path.join(a.out, "results.png"))
    with open(os.path.join(a.out, "results.txt"), "w") as f:
        f.write(report.table(rows, note_width=10**6) + "\n" + note + "\n")
    print(f"wrote {a.out}/results.csv, {png}, {a.out}/results.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
