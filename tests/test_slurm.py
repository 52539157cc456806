"""eagle under a real batch system: Debian's SLURM 22.05 on this machine
(``scripts/slurm_local.sh start``), jobs run by an ordinary user.  Skipped, with the reason, where
SLURM is not running."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time

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


# -- the batch recipe of docs/laptop_to_cluster.md, copied from the page ---------------------------
#: what the test changes in the page's script for this one-node, two-core SLURM (a scheduler and
#: one worker, a core each): each must match once
ONE_NODE = [
    ("#SBATCH --nodes=5                   # 1 scheduler + 4 workers", "#SBATCH --nodes=1"),
    ("#SBATCH --ntasks-per-node=1", "#SBATCH --ntasks-per-node=2"),
    ("#SBATCH --cpus-per-task=32", "#SBATCH --cpus-per-task=1"),
    ("#SBATCH --time=01:00:00", "#SBATCH --time=00:05:00"),
    ("--ntasks=5", "--ntasks=2"),
    ("--interface ib0", "--interface lo"),
]

MY_RUN = '''
import sys, hashlib, numpy as np, eagle, eagle.exec as eexec, eagle_dask
from eagle import plan as eplan
from eagle.models import oscillator

n = 20_001
rng = np.random.default_rng(5)
planes = lambda: dict(omega=rng.uniform(0.5, 2.0, n), dt=1e-3, steps=100, x=np.ones(n), v=np.zeros(n))
d = planes()
client = eagle_dask.connect(sys.argv[1])
print("workers:", len(client.scheduler_info()["workers"]), flush=True)
p = eplan.plan(eagle.deploy(oscillator), structure=eagle_dask.DaskPartition)
got = p.run(**{k: (v.copy() if hasattr(v, "copy") else v) for k, v in d.items()})
one = eplan.plan(eagle.deploy(oscillator), structure=eexec.HostTeam).run(**d)
same = all(np.asarray(got[k]).tobytes() == np.asarray(one[k]).tobytes() for k in ("x", "v", "energy"))
print("identical:", "yes" if same else "no", flush=True)
client.shutdown()
'''


def page_script():
    """The bash block of section 2 of docs/laptop_to_cluster.md."""
    text = open(os.path.join(ROOT, "docs", "laptop_to_cluster.md")).read()
    section = text.split("## 2. One batch job")[1].split("## 3.")[0]
    return section.split("```bash\n")[1].split("```")[0]


def test_the_batch_recipe_of_the_page_runs_with_the_bits_of_one_process():
    script = page_script()
    for old, new in ONE_NODE:
        assert script.count(old) == 1, f"the page's recipe changed: {old!r} is not in it once"
        script = script.replace(old, new)
    d = slurm.job_dir()
    for name, text in (("job.sh", script), ("my_run.py", MY_RUN)):
        path = os.path.join(d, name)
        with open(path, "w") as f:
            f.write(text)
        os.chown(path, slurm.UID, slurm.UID)
    sub = slurm.as_user(["sbatch", "--parsable", "--output=job.out", "job.sh"], d, timeout=60)
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.strip().split(";")[0]
    state = slurm.wait_for_job(job, timeout=240)
    out = open(os.path.join(d, "job.out")).read()
    assert state == "COMPLETED", (state, out[-4000:])
    assert "workers: 1" in out and "identical: yes" in out, out[-4000:]
    assert not os.path.exists(os.path.join(d, f"eagle-{job}.json")), "the scheduler file outlived the cluster"



def test_a_scheduler_that_cannot_start_ends_the_job_with_its_reason():
    d = slurm.job_dir()
    start = time.monotonic()
    proc = slurm.as_user(["srun", "--mpi=pmi2", "-n", "3", "--overcommit", "--time=5", "eagle-dask", "cluster",
                          "--scheduler-file", os.path.join(d, "sched.json"), "--interface", "ib0"], d, timeout=120)
    took = time.monotonic() - start
    assert proc.returncode != 0
    assert took < 30, f"the job took {took:.0f} s to end"
    assert "'ib0'" in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-3000:]
