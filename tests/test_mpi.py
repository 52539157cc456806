"""RankPartition under mpiexec -n 1/2/3 (the mpich wheel's gforker, loopback only).

Every MPI job goes through tests.launch.mpiexec.  The scripts in tests/mpi_scripts write what
each rank saw to a temporary folder; these tests judge it against one process without MPI,
computed here with HostTeam.
"""
from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest

import eagle
import eagle.exec as eexec
from eagle import plan as eplan
from eagle.rows import Partition
from tests import kernels as K
from tests import launch
from tests import reference as ref

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi_scripts")
SUITE_SIZES = (0, 1, 2, 32, 33, 97, 1001)     # as in mpi_scripts/suite.py
RP = eexec.RankPartition


def job(n, script, tmp_path, *args, env=None, check=True, timeout=240):
    """Run a script of mpi_scripts under mpiexec -n n; return (process, [rank records])."""
    out = tmp_path / f"{script}-{n}"
    out.mkdir()
    proc = launch.mpiexec(n, [os.path.join(SCRIPTS, f"{script}.py"), str(out), *args],
                          env=env, check=check, timeout=timeout)
    return proc, records(out, n if check else 0)


def records(out, n):
    got = []
    for r in range(n):
        path = out / f"rank{r}.json"
        assert path.exists(), f"rank {r} wrote no record"
        rec = json.loads(path.read_text())
        npz = out / f"rank{r}.npz"
        if npz.exists():
            with np.load(npz) as z:
                rec["arrays"] = {k: z[k] for k in z.files}
        got.append(rec)
    return got


@pytest.fixture(scope="module")
def reference():
    """One process, no MPI: every suite case and size through HostTeam."""
    out = {}
    for name in K.SPLITTABLE:
        plugin = eagle.deploy(K.CASES[name][0])
        host = eplan.plan(plugin, structure=eexec.HostTeam)
        numpy_reference = K.CASES[name][2]
        for n in SUITE_SIZES:
            got = K.as_dict(plugin, host.run(**K.inputs(name, n)))
            for plane, value in (numpy_reference(K.inputs(name, n)) if numpy_reference else {}).items():
                assert K.same_bits(got[plane], value), f"one process differs from numpy: {name}/{n}/{plane}"
            for plane, value in got.items():
                out[f"{name}/{n}/{plane}"] = np.asarray(value)
    return out


# -- bit identity ----------------------------------------------------------------------------------
@pytest.mark.parametrize("size", [1, 2, 3])
def test_every_splittable_kernel_same_bits_as_one_process(size, tmp_path, reference):
    _, ranks = job(size, "suite", tmp_path)
    expected_cases = {f"{name}/{n}" for name in K.GATHERABLE for n in SUITE_SIZES}
    for rank, rec in enumerate(ranks):
        assert (rec["rank"], rec["size"]) == (rank, size)
        assert rec["mpi_loaded_at_import"] is False, "importing eagle loaded mpi4py.MPI"
        assert rec["eagle_started_mpi"] is True
        assert set(rec["same"]) == expected_cases
        assert all(rec["same"].values()), {k for k, v in rec["same"].items() if not v}
        assert rec["in_place"] and all(rec["in_place"].values()), rec["in_place"]
        # integers declares an int64 output: refused at plan time, by name
        assert set(rec["refused"]) == {"integers"}
        assert "'parity'" in rec["refused"]["integers"] and "float64" in rec["refused"]["integers"]
        arrays = rec["arrays"]
        assert set(arrays) == {k for k in reference if not k.startswith("integers/")}
        bad = [k for k in arrays if not K.same_bits(arrays[k], reference[k])]
        assert not bad, f"rank {rank} of {size} differs from one process on {bad}"


def test_user_initialised_mpi_is_used_and_not_finalised_by_eagle(tmp_path, reference):
    _, ranks = job(2, "suite", tmp_path, "--user-mpi")
    for rec in ranks:
        assert rec["size"] == 2 and rec["eagle_started_mpi"] is False
        assert rec["same"] and all(rec["same"].values())
        assert all(K.same_bits(v, reference[k]) for k, v in rec["arrays"].items())


def test_example_script_same_digest_alone_and_under_mpiexec():
    example = os.path.join(launch.ROOT, "examples", "mpi_run.py")
    line = re.compile(r"rank (\d+) of (\d+): (energy = \S+, digest [0-9a-f]{16})")
    alone = subprocess.run([sys.executable, example], env=launch.loopback_env(), cwd=launch.ROOT,
                           capture_output=True, text=True, timeout=240)
    assert alone.returncode == 0, alone.stderr[-3000:]
    [(rank, size, want)] = line.findall(alone.stdout)
    assert (rank, size) == ("0", "1")
    got = sorted(line.findall(launch.mpiexec(2, [example]).stdout))
    assert got == [("0", "2", want), ("1", "2", want)], (got, want)


def test_device_inner_under_cuda_simulator(tmp_path):
    _, ranks = job(2, "device", tmp_path, env={"NUMBA_ENABLE_CUDASIM": "1"})
    expected_cases = {f"{name}/{n}" for name in K.GATHERABLE for n in (0, 1, 33, 97)}   # as in device.py
    for rank, rec in enumerate(ranks):
        assert (rec["rank"], rec["size"]) == (rank, 2)
        assert set(rec["same"]) == expected_cases, rec["same"]
        assert all(rec["same"].values()), {k for k, v in rec["same"].items() if not v}
        assert set(rec["refused"]) == {"integers"} and "'parity'" in rec["refused"]["integers"], rec["refused"]


# -- refusals --------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", [1, 2, 3])
def test_refusals_on_every_rank_alike(size, tmp_path):
    _, ranks = job(size, "refusals", tmp_path)
    last = f"[rank {size - 1} of {size}]"
    for rank, rec in enumerate(ranks):
        c = rec["cases"]

        def refused(case, kind, *words):
            got = c[case]
            assert got != "ran", f"{case} was not refused on rank {rank}"
            assert got["type"] == kind, (case, got)
            for w in words:
                assert w in got["message"], (case, w, got["message"])

        refused("cross_sample_write", "ValueError", "'histogram'", "cross_sample_write", "every world size")
        refused("declared_dtype", "ValueError", "'parity'", "'integers'", "float64")
        refused("inner_other", "ValueError", "inner=", "HostTeam or DeviceKernel")
        refused("inner_ranks", "ValueError", "inner=", "HostTeam or DeviceKernel")
        refused("npartitions", "ValueError", "'axpb'", "npartitions=")
        refused("mutable_dtype", "ValueError", "'x'", "'oscillator'", "float64")
        refused("out_noncontiguous", "ValueError", "'y'", "'axpb'", "C-contiguous")
        refused("out_dtype_supplied", "TypeError", "'y'", "float32")
        # refused on the last rank only: every rank gets it, naming that rank
        refused("one_rank_noncontiguous", "ValueError", "'y'", "C-contiguous", last)
        if size > 1:
            refused("ranks_disagree_on_n", "ValueError", "'axpb'", "different sample counts",
                    f"rank {size - 1} has 102")
        else:
            assert c["ranks_disagree_on_n"] == "ran"
        refused("gather_float32", "ValueError", "'q'", "float64")
        refused("gather_noncontiguous", "ValueError", "'q'", "C-contiguous")
        refused("fold_bad_op", "ValueError", "'mean'")
        assert c["afterwards"] == "ran"
        check_primitives(rank, size, rec)


def check_primitives(rank, size, rec):
    """local() is the rule's share (tests.reference); allgather_plane fills the plane in place;
    folds in rank order, as the reference folds."""
    c = rec["cases"]
    a, b = ref.cut(90, size)[rank]
    assert c["local"] == [7 + a, b - a, 101]
    a, b = ref.cut(69, size, rows=True)[rank]
    assert c["local_rows"] == [32 + a, b - a, 101]
    assert c["gather_in_place"] is True
    expect_plane = np.full((101, 2), np.nan)
    expect_plane[7:97] = np.arange(7, 97)[:, None] * [1.0, -1.0]
    assert K.same_bits(rec["arrays"]["plane"], expect_plane)
    all_rows = [pair for r in range(size) for pair in ((float(r), 1e-17 * r), (2.0 ** -r, 0.0))]
    assert c["value_fold"] == ref.fold_values("sum", [0.1 * (r + 1) ** 3 for r in range(size)])
    assert c["rows_fold"] == ref.fold_partials("sum", all_rows)
    assert c["max_fold"] == float(size - 1)


def test_histogram_refused_at_plan_time_without_launcher():
    with pytest.raises(ValueError, match="cross_sample_write") as e:
        eplan.plan(eagle.deploy(K.histogram), structure=RP)
    assert "'histogram'" in str(e.value) and "every world size" in str(e.value)


class FakeDevicePlane:
    """Looks like a device array to eagle (``__cuda_array_interface__``), holds host memory."""

    def __init__(self, a):
        self._a = a
        self.shape, self.ndim, self.dtype, self.flags = a.shape, a.ndim, a.dtype, a.flags
        self.__cuda_array_interface__ = {"shape": a.shape, "typestr": a.dtype.str, "version": 3,
                                         "data": (a.ctypes.data, False)}


def test_device_resident_output_refused_by_name():
    p = eplan.plan(eagle.deploy(K.axpb), structure=RP)
    with pytest.raises(TypeError, match="output plane 'y' of kernel 'axpb'.*through the host"):
        p.run(**K.inputs("axpb", 5), y=FakeDevicePlane(np.zeros(5)))


# -- a raising rank --------------------------------------------------------------------------------
@pytest.mark.parametrize("size", [2, 3])
def test_raising_rank_reaches_every_rank(size, tmp_path):
    _, ranks = job(size, "raising", tmp_path, "caught")
    for rec in ranks:
        got = rec["got"]
        assert got != "ran"
        assert got["type"] == "ValueError"
        assert "negative input" in got["message"] and "'picky'" in got["message"]
        assert f"sample {rec['bad_sample']}" in got["message"]
        assert f"[rank {size - 1} of {size}]" in got["message"]
        assert got["rank_attr"] == size - 1
        assert rec["after_ok"] is True


def test_uncaught_kernel_error_ends_the_job(tmp_path):
    start = time.monotonic()
    proc, _ = job(2, "raising", tmp_path, "uncaught", check=False, timeout=180)
    assert proc.returncode != 0
    assert "ValueError: negative input" in proc.stdout + proc.stderr
    assert "[rank 1 of 2]" in proc.stdout + proc.stderr
    assert time.monotonic() - start < 180


def mpich_segments() -> set:
    return set(glob.glob(eagle.mpi.world.SEGMENTS + "*"))


def test_error_outside_eagle_on_one_rank_aborts_instead_of_hanging(tmp_path):
    before = mpich_segments()
    proc, _ = job(2, "raising", tmp_path, "stray", check=False, timeout=180)
    assert proc.returncode != 0
    assert "a stray error on rank 1 outside eagle" in proc.stdout + proc.stderr
    assert mpich_segments() - before == set(), "the aborted job left MPICH's shared memory in /dev/shm"


# -- the switch ------------------------------------------------------------------------------------
SWITCH_CASES = [("AUTO", False), ("ON", False), ("AUTO", True), ("ON", True), ("OFF", False), ("bogus", False)]


@pytest.mark.parametrize("mode,block", SWITCH_CASES)
def test_switch(mode, block, tmp_path):
    env = launch.loopback_env({"EAGLE_PYTHON_MPI": mode})
    for v in eagle.mpi.world.LAUNCHER_VARS:
        env.pop(v, None)
    cmd = [sys.executable, os.path.join(SCRIPTS, "switch.py"), str(tmp_path)] + (["--block-mpi4py"] if block else [])
    proc = subprocess.run(cmd, env=env, cwd=launch.ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads((tmp_path / "rank0.json").read_text())
    assert rec["mpi_initialised"] is False, "world() without a launcher initialised MPI"
    calls = ["world", "local", "allgather_plane", "allgather_fold", "plan", "run"]
    if mode == "bogus":
        for k in ["available"] + calls:
            assert rec[k]["type"] == "ValueError" and "EAGLE_PYTHON_MPI='bogus'" in rec[k]["message"]
        return
    usable = mode != "OFF" and not block
    if usable:
        launch.require_mpi()
        assert rec["available"] == {"value": "True"}
        assert rec["world"] == {"value": "(0, 1)"}
        assert rec["local"] == {"value": repr(Partition(0, 10, 10))}
        assert rec["allgather_fold"] == {"value": repr(np.float64(1.0))}
        assert rec["run"] == {"value": "True"}
        return
    if mode == "ON":                       # required and missing: even `available` says so
        assert rec["available"]["type"] == "RuntimeError"
    else:
        assert rec["available"] == {"value": "False"}
    for k in calls:
        assert rec[k]["type"] == "RuntimeError", (k, rec[k])
        assert "EAGLE_PYTHON_MPI" in rec[k]["message"] and "pip install 'eagle[mpi]'" in rec[k]["message"] \
            or "EAGLE_PYTHON_MPI=OFF" in rec[k]["message"], (k, rec[k])


def test_world_without_launcher_does_not_initialise_mpi():
    launch.require_mpi()
    assert RP.available is True
    assert RP.world() == (0, 1)
    assert RP.local(Partition(3, 10, 20)) == Partition(3, 10, 20)
    mpi = sys.modules.get("mpi4py.MPI")
    assert mpi is None or not mpi.Is_initialized()


# -- loopback only ---------------------------------------------------------------------------------
def test_no_listener_beyond_loopback_during_a_two_rank_job(tmp_path):
    out = tmp_path / "linger"
    out.mkdir()
    proc = launch.mpiexec(2, [os.path.join(SCRIPTS, "linger.py"), str(out)], popen=True)
    try:
        deadline = time.monotonic() + 180
        while not all((out / f"rank{r}.json").exists() for r in range(2)):
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "the job did not get going"
            time.sleep(0.1)
        ranks = records(out, 2)
        tree = launch.process_tree(proc.pid)
        assert {rec["pid"] for rec in ranks} <= set(tree), "sampled the wrong processes"
        found = []
        for _ in range(5):
            found += launch.listeners(launch.process_tree(proc.pid))
            time.sleep(0.1)
        launch.assert_loopback_only(found, "a two-rank MPI job")
        assert all(rec["same"] for rec in ranks)
        (out / "go").write_text("")
        assert proc.wait(timeout=120) == 0, proc.stdout.read()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()


# -- srun without MPI: several tasks, each a world of one -----------------------------------------
def _example(env, ranks=None):
    args = [os.path.join("examples", "mpi_run.py")]
    if ranks is None:
        return subprocess.run([sys.executable, *args], env=launch.loopback_env(env), cwd=launch.ROOT,
                              capture_output=True, text=True, timeout=180)
    return launch.mpiexec(ranks, args, env=env, check=False)


def test_srun_tasks_that_mpi_did_not_connect_are_refused_by_name():
    """Plain ``srun -n 2`` with the mpich wheel starts two processes, each a world of 1: each would
    run every sample alone (issue: two 'rank 0 of 1' runs, exit 0).  Here the step's environment
    says 2 tasks and the world is 1, alone and under a launcher of one rank."""
    for proc in (_example({"SLURM_STEP_NUM_TASKS": "2", "SLURM_JOB_ID": "9"}),
                 _example({"SLURM_STEP_NUM_TASKS": "2", "SLURM_JOB_ID": "9"}, ranks=1)):
        assert proc.returncode != 0, proc.stdout
        err = proc.stderr
        assert "one of the 2 tasks srun started" in err and "srun --mpi=pmi2" in err, err[-2000:]
        assert "rank 0 of 1" not in proc.stdout


def test_srun_tasks_connected_by_mpi_run_as_ranks():
    launch.require_mpi()
    one = _example({})
    two = _example({"SLURM_STEP_NUM_TASKS": "2", "SLURM_JOB_ID": "9"}, ranks=2)
    assert one.returncode == 0 and two.returncode == 0, two.stdout + two.stderr
    digest = one.stdout.split("digest ")[1].strip()
    lines = sorted(line for line in two.stdout.splitlines() if line.startswith("rank"))
    assert [line.split(":")[0] for line in lines] == ["rank 0 of 2", "rank 1 of 2"]
    assert all(line.endswith(digest) for line in lines), (digest, lines)
