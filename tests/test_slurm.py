"""eagle under a real batch system: Debian's SLURM 22.05 on this machine
(``scripts/slurm_local.sh start``), jobs run by an ordinary user.  Skipped, with the reason, where
SLURM is not running."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests import slurm
from tests.launch import ROOT, loopback_env

pytestmark = [pytest.mark.slurm, slurm.requires_slurm]


@pytest.fixture(autouse=True)
def no_job_left():
    yield
    slurm.cancel_all()


def one_process_digest():
    proc = subprocess.run([sys.executable, os.path.join("examples", "mpi_run.py")], cwd=ROOT, env=loopback_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return re.search(r"digest (\w+)", proc.stdout).group(1)


@pytest.mark.parametrize("ranks", [2, 3])
def test_srun_pmi2_runs_the_mpi_example_as_ranks_with_the_bits_of_one_process(ranks):
    d = slurm.job_dir("examples/mpi_run.py")
    # --overcommit: 3 ranks on this 2-core node
    proc = slurm.as_user(["srun", "--mpi=pmi2", "-n", str(ranks), "--overcommit", "--time=5", "python",
                          "mpi_run.py"], d, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = sorted(line for line in proc.stdout.splitlines() if line.startswith("rank "))
    assert [line.split(":")[0] for line in lines] == [f"rank {r} of {ranks}" for r in range(ranks)], proc.stdout
    digest = one_process_digest()
    assert all(line.endswith(f"digest {digest}") for line in lines), (digest, lines)


def test_plain_srun_with_the_wheel_is_refused_by_name():
    d = slurm.job_dir("examples/mpi_run.py")
    proc = slurm.as_user(["srun", "-n", "2", "--time=5", "python", "mpi_run.py"], d, timeout=240)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "rank 0 of 1" not in out, "two silent copies of the work"
    assert out.count("one of the 2 tasks srun started") == 2 and "srun --mpi=pmi2" in out, out[-3000:]
