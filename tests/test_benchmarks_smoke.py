"""The benchmark harness runs: ``python -m benchmarks --smoke`` (n=1000, one repeat, host arms).

Speed is never asserted here; this checks the harness's output: the CSV columns, a row per host
arm and kernel, and that HostTeam with every thread count gives the one-thread bits.
"""
import csv
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLUMNS = ["kernel", "arm", "workers", "n", "repeats", "median_s", "spread_s", "samples_per_s",
           "ratio_to_baseline", "bytes_moved", "peak_driver_mem_mb", "identical", "note"]
KERNELS = {"stream", "oscillator", "stencil", "mapreduce"}


def test_smoke_run_writes_the_table(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               EAGLE_NUM_THREADS="2")
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "--smoke", "--out", str(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "samples/s" in proc.stdout and "identical" in proc.stdout
    with open(tmp_path / "results.csv", newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        rows = [dict(zip(header, r)) for r in reader]
    assert header == COLUMNS
    host = [r for r in rows if r["arm"] == "host_team"]
    assert {(r["kernel"], r["workers"]) for r in host} == {(k, w) for k in KERNELS for w in ("1", "2")}
    for r in host:
        assert r["identical"] == "yes", r
        assert r["n"] == "1000" and r["repeats"] == "1"
        assert float(r["median_s"]) > 0 and float(r["samples_per_s"]) > 0
        assert r["bytes_moved"] == "0"
    for r in rows:
        if r["arm"] == "host_team" and r["workers"] == "1":
            assert float(r["ratio_to_baseline"]) == 1.0
    # the plain numba loop and numpy give the same planes as eagle on the streaming and stencil kernels
    for k in ("stream", "stencil"):
        for arm in ("numba loop", "numpy"):
            (r,) = [r for r in rows if r["kernel"] == k and r["arm"] == arm]
            assert r["identical"] == "yes", r
    assert not any(r["note"].startswith("failed") for r in rows), [r for r in rows if "failed" in r["note"]]


def test_only_a_missing_package_skips_an_arm():
    """ImportError is "not installed" (skipped); anything else -- NotImplementedError and
    AttributeError included, which once stood for "not implemented yet" -- is a failure."""
    import types

    from benchmarks import arms
    case = types.SimpleNamespace(kernel="stream", n=10)

    def raising(exc):
        def body():
            raise exc
        return body

    row = arms._guard(case, "some arm", 1, raising(ImportError("No module named 'dask_cuda'")))
    assert row.note == "skipped: ImportError: No module named 'dask_cuda'", row
    for exc in (NotImplementedError("not yet"), AttributeError("no DaskPartition"), RuntimeError("boom")):
        row = arms._guard(case, "some arm", 1, raising(exc))
        assert row.note == f"failed: {type(exc).__name__}: {exc}" and row.identical == "no", row


_MPI_JOB_REFUSED = """
import json, sys
import eagle.plan
exc = {"import": ImportError("No module named 'mpi4py'"), "other": NotImplementedError("not yet")}[sys.argv[1]]
def refuse(*args, **kwargs):
    raise exc
eagle.plan.plan = refuse
from benchmarks import mpi_job
mpi_job.main(json.dumps([["stream", 100, 1, 1], ["stencil", 100, 1, 1]]), sys.argv[2])
"""


def test_the_mpi_job_skips_only_when_rank_partition_cannot_be_imported(tmp_path):
    """benchmarks.mpi_job alone (one rank): a plan that cannot be imported skips the job; any
    other plan error is each case's error (a failed row), never a skip."""
    import json
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    reports = {}
    for kind in ("import", "other"):
        out = tmp_path / f"{kind}.json"
        proc = subprocess.run([sys.executable, "-c", _MPI_JOB_REFUSED, kind, str(out)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        reports[kind] = json.loads(out.read_text())
    assert reports["import"] == {"skipped": "ImportError: No module named 'mpi4py'"}
    assert "skipped" not in reports["other"]
    assert reports["other"]["cases"] == [{"kernel": k, "n": 100, "error": "NotImplementedError: not yet"}
                                         for k in ("stream", "stencil")]
