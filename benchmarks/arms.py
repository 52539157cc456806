"""The arms: every way of running a benchmark kernel, each measured by ``measure.measure``.

* ``host_team`` with 1 thread (the baseline and the reference) and with all threads;
* ``numba loop`` (the same loop compiled by plain numba, one thread, no eagle) and ``numpy``;
* ``rank_partition`` under ``mpiexec.gforker -n R`` (see ``mpi_job``), one thread per rank;
* ``dask_partition`` on K local workers (one thread each), and ``dask map_blocks`` over the plain
  numba loop on the same cluster;
* ``device_kernel`` and ``dask_partition+cuda`` (dask-cuda workers) where an NVIDIA GPU is present.

An arm whose structure is not available (not installed: an ``ImportError``; no GPU: ``gpu_reason``)
gives one row ``skipped: <reason>``; an arm that fails -- any other error -- gives
``failed: <error>``.  Nothing here raises.
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

import eagle.exec as eexec
from eagle import plan as eplan

from . import bits
from .measure import Case, measure, median, spread
from .report import Row, skipped

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: what makes an arm unavailable rather than failed: its packages are not installed
UNAVAILABLE = (ImportError,)


@contextlib.contextmanager
def threads(count):
    """Run with ``EAGLE_NUM_THREADS=count`` (None: leave it as it is)."""
    old = os.environ.get("EAGLE_NUM_THREADS")
    if count is not None:
        os.environ["EAGLE_NUM_THREADS"] = str(count)
    try:
        yield
    finally:
        if count is not None:
            if old is None:
                os.environ.pop("EAGLE_NUM_THREADS", None)
            else:
                os.environ["EAGLE_NUM_THREADS"] = old


def all_threads() -> int:
    from eagle.host import num_threads
    return num_threads()


def _why(e: BaseException) -> str:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {msg}"[:200]


def _row(case: Case, arm: str, workers: int, t, *, bytes_moved=0, note="", reference=None) -> Row:
    same, detail = bits.compare(t.result, case.reference if reference is None else reference)
    notes = [f"first run {t.first_s:.3f}s (warm-up: compile/cache load)"]
    if detail:
        notes.append(detail)
    if note:
        notes.append(note)
    return Row(case.kernel, arm, workers, case.n, len(t.times), median(t.times), spread(t.times),
               bytes_moved=bytes_moved, peak_driver_mem_mb=t.peak_mb, identical=same, note="; ".join(notes))


def _guard(case, arm, workers, body):
    """Run one arm; a failure becomes a row, never an exception."""
    try:
        return body()
    except UNAVAILABLE as e:
        return skipped(case.kernel, arm, workers, case.n, _why(e))
    except Exception as e:  # noqa: BLE001 - reported in the table
        r = Row(case.kernel, arm, workers, case.n, identical="no", note=f"failed: {_why(e)}")
        return r


def _steps_note(case):
    if case.kernel == "oscillator" and case.steps != 1000:
        return f"{case.steps} steps per sample (not 1000)"
    return ""


# -- one process ----------------------------------------------------------------------------

def host_team(case: Case, count: int) -> Row:
    """HostTeam with ``count`` threads.  With 1 thread it is the baseline and sets the reference."""
    plugin = case.spec.plugin
    p = eplan.plan(plugin, structure=eexec.HostTeam)

    def run(planes):
        return bits.as_dict(plugin, p.run(**planes))

    with threads(count):
        t = measure(run, case.fresh, case.repeats)
    path = getattr(plugin, "host_path", None)
    lanes = (f"host {path} (simd width {plugin.host_simd_width}, lanes {plugin.host_lanes})"
             if path is not None else "")
    if case.reference is None:                        # the baseline: compare it with its own warm-up
        case.reference = t.result
        case.ref_digest = bits.digest(t.result)
        same, detail = bits.compare(t.result, t.first_result)
        return Row(case.kernel, "host_team", count, case.n, len(t.times), median(t.times), spread(t.times),
                   bytes_moved=0, peak_driver_mem_mb=t.peak_mb, identical=same,
                   note="; ".join(x for x in ("baseline and reference (run-to-run bits checked)",
                                              f"first run {t.first_s:.3f}s (warm-up: compile/cache load)",
                                              detail, _steps_note(case), lanes) if x))
    return _row(case, "host_team", count, t, note="; ".join(x for x in (_steps_note(case), lanes) if x))


def numba_loop(case: Case) -> Row:
    """The kernel's loop compiled by plain numba, one thread, no eagle."""
    return _guard(case, "numba loop", 1, lambda: _row(
        case, "numba loop", 1, measure(case.spec.numba, case.fresh, case.repeats),
        note="plain @njit loop, 1 thread" + ("; cell summed in sample order, not eagle's rows"
                                            if case.spec.plugin.cells else "")))


def numpy_arm(case: Case) -> Row:
    spec = case.spec
    if spec.numpy is None:
        return skipped(case.kernel, "numpy", 1, case.n, "no vectorised numpy form")
    return _guard(case, "numpy", 1, lambda: _row(
        case, "numpy", 1, measure(spec.numpy, case.fresh, case.repeats),
        note="vectorised numpy" + ("; cells with np.sum/np.max" if spec.plugin.cells else "")))


# -- MPI ------------------------------------------------------------------------------------

def gforker():
    """The mpich wheel's fork-based launcher (keeps every listener on 127.0.0.1), or None."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec.gforker")
    return here if os.path.exists(here) else shutil.which("mpiexec.gforker")


def mpi_arms(cases: list[Case], ranks=(1, 2), timeout=600) -> list[Row]:
    """RankPartition under ``mpiexec.gforker -n R`` (UCX_NET_DEVICES=lo): one job per R, every case."""
    arm = "rank_partition"
    reason = None
    if importlib.util.find_spec("mpi4py") is None:
        reason = "mpi4py is not installed (pip install '.[mpi]')"
    elif gforker() is None:
        reason = "mpiexec.gforker (the mpich wheel) is not installed"
    rows = []
    for size in ranks:
        if reason:
            rows += [skipped(c.kernel, arm, size, c.n, reason) for c in cases]
            continue
        job, wall, err = _mpi_job(cases, size, timeout)
        if job is None or "skipped" in job:
            why = job["skipped"] if job else err
            reason = why if job else None               # unavailable: do not launch larger worlds
            rows += [skipped(c.kernel, arm, size, c.n, why) if job else
                     Row(c.kernel, arm, size, c.n, identical="no", note=f"failed: {why}") for c in cases]
            continue
        for c, res in zip(cases, job["cases"]):
            if "error" in res:
                rows.append(Row(c.kernel, arm, size, c.n, identical="no", note=f"failed: {res['error']}"))
                continue
            same = "yes" if res["digest"] == c.ref_digest and res["ranks_agree"] else "no"
            detail = "" if res["ranks_agree"] else "ranks disagree; "
            rows.append(Row(c.kernel, arm, size, c.n, len(res["times"]), median(res["times"]),
                            spread(res["times"]), bytes_moved=res["bytes"], peak_driver_mem_mb=res["peak_mb"],
                            identical=same,
                            note=(f"{detail}kernel time inside the run (slowest rank, between barriers), "
                                  f"1 thread per rank; first run {res['first_s']:.3f}s; job wall {wall:.1f}s"
                                  + (f"; {_steps_note(c)}" if _steps_note(c) else ""))))
        rows.append(Row("(job)", arm + " job", size, 0, 1, wall, 0.0,
                        note=(f"whole mpiexec -n {size} job: start-up, import {job['import_s']:.2f}s, "
                              f"compile, {len(cases)} case(s) x (warm-up + repeats + memory run), "
                              f"{sum(c.n for c in cases)} samples a run over all cases")))
    return rows


def _mpi_job(cases, size, timeout):
    """Run ``benchmarks.mpi_job`` under mpiexec; return (report, wall seconds, error text)."""
    spec = [[c.kernel, c.n, c.steps, c.repeats] for c in cases]
    with tempfile.TemporaryDirectory(prefix="eagle-bench-mpi-") as tmp:
        out = os.path.join(tmp, "report.json")
        cmd = [gforker(), "-n", str(size), sys.executable, "-m", "benchmarks.mpi_job", json.dumps(spec), out]
        env = dict(os.environ, UCX_NET_DEVICES="lo", EAGLE_NUM_THREADS="1", PYTHONUNBUFFERED="1",
                   PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        try:
            text, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)          # the job's own process group, started above
            proc.communicate()
            return None, time.perf_counter() - t, f"mpiexec -n {size} timed out after {timeout}s"
        wall = time.perf_counter() - t
        if os.path.exists(out):
            with open(out) as f:
                return json.load(f), wall, ""
        tail = " | ".join(text.strip().splitlines()[-3:])
        return None, wall, f"mpiexec -n {size} exited {proc.returncode}: {tail}"[:300]


# -- Dask -----------------------------------------------------------------------------------

def dask_partition():
    """``eagle_dask.DaskPartition``, or raise ImportError saying why not."""
    import eagle_dask
    return eagle_dask.DaskPartition


def start_cluster(workers: int):
    """A local cluster of ``workers`` one-thread processes on 127.0.0.1; (client, how)."""
    with threads(1):                                  # workers inherit EAGLE_NUM_THREADS=1
        try:
            import eagle_dask
        except UNAVAILABLE:                           # the map_blocks arm runs without eagle_dask
            from distributed import Client, LocalCluster
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                                   dashboard_address=None, silence_logs=logging.ERROR)
            return Client(cluster), "distributed.LocalCluster (eagle_dask not importable)"
        return eagle_dask.local_cluster(n_workers=workers, threads_per_worker=1), "eagle_dask.local_cluster"


def _overhead(run, case, tiny_n, runs=3):
    """Median time of ``runs`` runs at ``tiny_n`` samples (already warm): the fixed per-run cost."""
    small = Case(case.kernel, tiny_n, case.steps, case.repeats)
    times = []
    for _ in range(runs):
        p = small.fresh()
        t = time.perf_counter()
        run(p)
        times.append(time.perf_counter() - t)
    return median(times)


def _dask_bytes(plugin, case, result, workers, sliceable, cell_bytes=None, ships_plugin=True) -> int:
    """Inputs shipped (a slice each, or whole per worker) + outputs and cell partials returned.

    ``cell_bytes``: bytes of the cells' partials returned (default: eagle's row partials, 16 bytes
    per row of 32 samples per cell); ``ships_plugin``: the pickled plugin goes to every worker.
    """
    shipped = 0
    for role, name in plugin.arg_spec:
        if role.kind in ("In", "Mutable"):
            nb = case.base[name].nbytes
            shipped += nb if name in sliceable else nb * workers
    returned = sum(np.asarray(result[nm]).nbytes for nm in plugin.names("Out", "Mutable"))
    returned += len(plugin.cells) * 16 * -(-case.n // 32) if cell_bytes is None else cell_bytes
    return shipped + returned + (len(pickle.dumps(plugin)) * workers if ships_plugin else 0)


def _split_note(over, total, tiny_n):
    kern = total - over
    rest = f"kernel+transfer {kern:.3f}s" if kern > 0 else "kernel+transfer below the timing noise"
    return f"fixed overhead {over:.3f}s (n={tiny_n} run), {rest}"


def dask_partition_arm(case: Case, client, workers: int, inner=None, arm="dask_partition", reference=None) -> Row:
    def body():
        plugin = case.spec.plugin
        structure = dask_partition().on(client, progress=False)
        p = eplan.plan(plugin, structure=structure, inner=inner or eexec.HostTeam)

        def run(planes):
            return bits.as_dict(plugin, p.run(**planes))

        t = measure(run, case.fresh, case.repeats)
        over = _overhead(run, case, 32 * workers)
        moved = _dask_bytes(plugin, case, t.result, workers, plugin.sliceable)
        return _row(case, arm, workers, t, bytes_moved=moved, reference=reference,
                    note=(_split_note(over, median(t.times), 32 * workers) + "; "
                          + ("slices shipped" if set(plugin.sliceable) >= set(plugin.names('In', 'Mutable'))
                             else "whole inputs to every worker") + "; 1 thread per worker"
                          + (f"; {_steps_note(case)}" if _steps_note(case) else "")))
    return _guard(case, arm, workers, body)


def _map_blocks_run(case: Case, client, workers: int):
    """What a user writes without eagle: dask.array over the plain numba loop, one block per worker."""
    import warnings

    import dask.array as da
    from . import kernels as K
    name = case.kernel
    # dask warns on every run that inputs are embedded in the graph: that is this arm's cost, measured
    warnings.filterwarnings("ignore", message="Sending large graph", category=UserWarning)

    def run(p):
        first = next(v for v in p.values() if isinstance(v, np.ndarray))
        n = first.shape[0]
        c = max(1, -(-n // workers))
        if name == "stream":
            y = da.from_array(p["x"], chunks=c).map_blocks(K.stream_block, p["a"], p["b"], dtype=float)
            return {"y": client.compute(y, sync=True)}
        if name == "oscillator":
            om, x, v = (da.from_array(p[k], chunks=c) for k in ("omega", "x", "v"))
            o = da.map_blocks(K.oscillator_block, om, x, v, p["dt"], p["steps"], dtype=float,
                              chunks=(om.chunks[0], (3,)), new_axis=1)
            x, v, e = client.compute([o[:, 0], o[:, 1], o[:, 2].sum()], sync=True)
            return {"x": x, "v": v, "energy": np.float64(e)}
        if name == "stencil":
            y = da.from_array(p["x"], chunks=c).map_overlap(K.stencil_padded, depth=2, boundary="nearest",
                                                            dtype=float)
            return {"y": client.compute(y, sync=True)}
        if name == "mapreduce":
            x = da.from_array(p["x"], chunks=c)
            r = x.map_blocks(K.mapreduce_block, dtype=float, chunks=((1,) * x.numblocks[0], (2,)), new_axis=1)
            r = client.compute(r, sync=True)
            return {"total": np.float64(r[:, 0].sum()), "peak": np.float64(r[:, 1].max())}
        raise ValueError(f"no map_blocks form for kernel {name!r}")
    return run


#: the kernels ``_map_blocks_run`` writes with dask.array
MAP_BLOCKS = ("stream", "oscillator", "stencil", "mapreduce")


def map_blocks_arm(case: Case, client, workers: int) -> Row:
    arm = "dask map_blocks"
    if case.kernel not in MAP_BLOCKS:
        return skipped(case.kernel, arm, workers, case.n, "no map_blocks form")

    def body():
        run = _map_blocks_run(case, client, workers)
        t = measure(run, case.fresh, case.repeats)
        over = _overhead(run, case, 32 * workers)
        plugin = case.spec.plugin
        blocks = min(workers, case.n) if case.n else 0
        moved = _dask_bytes(plugin, case, t.result, 1, set(plugin.names("In", "Mutable")),
                            cell_bytes=16 * blocks if plugin.cells else 0, ships_plugin=False)
        return _row(case, arm, workers, t, bytes_moved=moved,
                    note=(_split_note(over, median(t.times), 32 * workers) + "; plain numba loop per block, "
                          f"{'map_overlap depth 2' if case.spec.halo else 'one block per worker'}"))
    return _guard(case, arm, workers, body)


def dask_arms(cases: list[Case], workers_list=(1, 2, 4)) -> list[Row]:
    """DaskPartition and map_blocks on local clusters of 1, 2, 4 workers."""
    rows = []
    try:
        dask_partition()
        dp_reason = None
    except UNAVAILABLE as e:
        dp_reason = f"eagle_dask.DaskPartition unavailable ({_why(e)})"
    if importlib.util.find_spec("distributed") is None:
        return [skipped(c.kernel, a, w, c.n, "dask.distributed is not installed (pip install '.[dask]')")
                for w in workers_list for c in cases for a in ("dask_partition", "dask map_blocks")]
    for w in workers_list:
        try:
            t = time.perf_counter()
            client, how = start_cluster(w)
            start_s = time.perf_counter() - t
        except Exception as e:  # noqa: BLE001
            rows += [Row(c.kernel, a, w, c.n, note=f"failed: cluster start: {_why(e)}")
                     for c in cases for a in ("dask_partition", "dask map_blocks")]
            continue
        try:
            for c in cases:
                rows.append(skipped(c.kernel, "dask_partition", w, c.n, dp_reason) if dp_reason
                            else dask_partition_arm(c, client, w))
                rows.append(map_blocks_arm(c, client, w))
            rows.append(Row("(cluster)", "dask cluster start job", w, 0, 1, start_s, 0.0,
                            note=f"{how}: {w} worker process(es), 1 thread each, 127.0.0.1"))
        finally:
            with contextlib.suppress(Exception):
                client.close()
            with contextlib.suppress(Exception):
                client.cluster.close()
    return rows


# -- GPU ------------------------------------------------------------------------------------

def gpu_reason():
    """Why the GPU arms cannot run here, or None when an NVIDIA GPU is usable."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return "NUMBA_ENABLE_CUDASIM=1 (the CUDA simulator is not a GPU)"
    try:
        from numba import cuda
        if not cuda.is_available():
            return "no NVIDIA GPU (numba.cuda.is_available() is False)"
    except Exception as e:  # noqa: BLE001
        return f"no CUDA ({_why(e)})"
    return None


def gpu_arms(cases: list[Case]) -> list[Row]:
    """DeviceKernel in this process, and DaskPartition(inner=DeviceKernel) on dask-cuda workers."""
    reason = gpu_reason()
    if reason:
        return [skipped(c.kernel, a, 1, c.n, reason) for c in cases for a in ("device_kernel", "dask_partition+cuda")]
    rows, device_refs = [], {}
    for c in cases:
        def body(c=c):
            plugin = c.spec.plugin
            p = eplan.plan(plugin, structure=eexec.DeviceKernel)

            def run(planes):
                return bits.as_dict(plugin, p.run(**planes))
            t = measure(run, c.fresh, c.repeats)
            device_refs[id(c)] = t.result
            outs = sum(np.asarray(v).nbytes for v in t.result.values())
            return _row(c, "device_kernel", 1, t, bytes_moved=c.plane_bytes() + outs,
                        note="host arrays in and out (PCIe both ways in the time); compared with host: the "
                             "device's math library may differ from the host's" + (
                                 f"; {_steps_note(c)}" if _steps_note(c) else ""))
        rows.append(_guard(c, "device_kernel", 1, body))
    try:
        import dask_cuda  # noqa: F401
        import eagle_dask
    except UNAVAILABLE as e:
        return rows + [skipped(c.kernel, "dask_partition+cuda", 1, c.n, _why(e)) for c in cases]
    try:
        client = eagle_dask.local_cluster()
    except Exception as e:  # noqa: BLE001 - reported in the table
        return rows + [Row(c.kernel, "dask_partition+cuda", 1, c.n, identical="no",
                           note=f"failed: cluster start: {_why(e)}") for c in cases]
    try:
        from eagle_dask.ranks import scheduler_workers
        w = len(scheduler_workers(client))
        for c in cases:
            ref = device_refs.get(id(c))
            r = dask_partition_arm(c, client, w, inner=eexec.DeviceKernel, arm="dask_partition+cuda",
                                   reference=ref)
            if ref is not None:
                r.note += "; compared with one-process DeviceKernel"
            rows.append(r)
    finally:
        with contextlib.suppress(Exception):
            client.close()
    return rows

