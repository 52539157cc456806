"""eagle under a real batch system: Debian's SLURM 22.05 on this machine
(``scripts/slurm_local.sh start``), jobs run by an ordinary user.  Skipped, with the reason, where
SLURM is not running."""
from __future__ import annotations

import json
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


def _rank_pid(rank, sched, bound=60.0):
    """The pid of SLURM task ``rank`` of the job user's ``eagle-dask cluster`` writing ``sched``
    (the task itself, started by slurmstepd: not a process it forked, which has its command line
    and environment too)."""
    import psutil
    end = time.monotonic() + bound
    while time.monotonic() < end:
        tasks = {}
        for p in psutil.process_iter(["uids", "cmdline", "ppid"]):
            try:
                if p.info["uids"].real != slurm.UID or sched not in (p.info["cmdline"] or []):
                    continue
                if p.environ().get("SLURM_PROCID") == str(rank):
                    tasks[p.pid] = p.info["ppid"]
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        top = [pid for pid, parent in tasks.items() if parent not in tasks]
        if top:
            return top[0]
        time.sleep(0.2)
    raise AssertionError(f"no task {rank} of eagle-dask cluster within {bound} s")


def _cluster_job(d, ranks):
    sched = os.path.join(d, "sched.json")
    job = slurm.as_user(["srun", "--mpi=pmi2", "-n", str(ranks), "--overcommit", "--time=5", "eagle-dask", "cluster",
                         "--scheduler-file", sched, "--no-dashboard"], d, popen=True)
    end = time.monotonic() + 120
    while not os.path.exists(sched) and job.poll() is None and time.monotonic() < end:
        time.sleep(0.1)
    assert os.path.exists(sched), job.stdout.read() if job.poll() is not None else "no scheduler file in 120 s"
    return job, sched


def test_a_lost_scheduler_rank_ends_the_job_and_removes_its_files():
    d = slurm.job_dir()
    job, sched = _cluster_job(d, 3)
    try:
        os.kill(_rank_pid(0, sched), 9)
        start = time.monotonic()
        job_out, _ = job.communicate(timeout=90)
        took = time.monotonic() - start
        assert took < 40, f"the job took {took:.0f} s to end after its scheduler's rank was killed"
        assert "its scheduler is gone" in job_out, job_out[-3000:]
        assert not os.path.exists(sched) and not os.path.exists(sched + ".credentials.json")
    finally:
        if job.poll() is None:
            os.killpg(job.pid, 9)


JOBQUEUE_RUN = '''
import json, os, sys, time
import numpy as np
import eagle, eagle_dask
from eagle import plan as eplan
from eagle.bits import as_dict
from eagle.models import oscillator

x0 = np.ones(1001); v0 = np.zeros(1001); omega = np.linspace(0.5, 2.0, 1001)
out = eplan.plan(eagle.deploy(oscillator), structure=eagle_dask.DaskPartition.on(client)).run(
    omega=omega, dt=1e-3, steps=200, x=x0.copy(), v=v0.copy())
xi, vi = x0.copy(), v0.copy()                  # numpy, the same operations in the same order
for _ in range(200):
    xi, vi = xi + 1e-3 * vi, vi - 1e-3 * omega * omega * xi
got = as_dict(eagle.deploy(oscillator), out)
same = all(np.array_equal(a.view(np.uint64), b.view(np.uint64)) for a, b in ((got["x"], xi), (got["v"], vi)))
info = client.scheduler_info()
ports = [client.scheduler.address] + sorted(w for w in info["workers"]) + sorted(
    w["nanny"] for w in info["workers"].values() if w.get("nanny"))
print("IDENTICAL" if same else "DIFFERENT", flush=True)
print("PORTS " + json.dumps(ports), flush=True)
end = time.monotonic() + 120
while not os.path.exists("attacked") and time.monotonic() < end:
    time.sleep(0.2)
client.close(); cluster.close()
print("CLOSED", flush=True)
'''

STRANGER = '''
import asyncio, json, sys
from distributed.comm import connect
from distributed.security import Security

mine = Security.temporary()          # a certificate of the stranger's own
for address in json.loads(sys.argv[1]):
    port = address.rsplit(":", 1)[1]
    for how, target, kw in (("tcp", "tcp://127.0.0.1:" + port, {}),
                            ("tls", "tls://127.0.0.1:" + port, mine.get_connection_args("client"))):
        async def probe():
            comm = await connect(target, timeout=5, **kw)
            await comm.write({"op": "identity", "reply": True})
            return await asyncio.wait_for(comm.read(), 5)
        try:
            reply = asyncio.run(probe())
            print("ANSWERED", how, address, str(reply)[:80], flush=True)
        except Exception as e:
            print("REFUSED", how, address, type(e).__name__, flush=True)
'''


def _jobqueue_recipe():
    text = open(os.path.join(ROOT, "docs", "laptop_to_cluster.md")).read()
    section = text.split("## 4. Workers that come and go", 1)[1].split("## 5.", 1)[0]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    for old, new in (("cores = 32", "cores = 1"), ('memory="120GB"', 'memory="1GB"'),
                     ('walltime="01:00:00"', 'walltime="00:05:00"'), ('interface="ib0"', 'interface="lo"'),
                     ("cluster.scale(jobs=4)", "cluster.scale(jobs=2)"),
                     ("client.wait_for_workers(4, timeout=600)", "client.wait_for_workers(2, timeout=180)"),
                     ("p = eplan.plan(oscillator, structure=eagle_dask.DaskPartition)\n", "")):
        assert code.count(old) == 1, f"the recipe no longer has {old!r} once"
        code = code.replace(old, new)
    return code + JOBQUEUE_RUN


def test_the_jobqueue_recipe_runs_with_tls_and_refuses_a_stranger_on_every_port():
    """dask-jobqueue's SLURMCluster as docs/laptop_to_cluster.md shows it, submitted to SLURM by
    the job's user: the bits of numpy; another local user (uid 65533), with no certificate or a
    certificate of its own, gets no answer from the scheduler, any worker or any nanny."""
    d = slurm.job_dir()
    path = os.path.join(d, "jobqueue_run.py")
    with open(path, "w") as f:
        f.write(_jobqueue_recipe())
    os.chown(path, slurm.UID, slurm.UID)
    driver = slurm.as_user(["python", "jobqueue_run.py"], d, popen=True)
    out = ""
    try:
        end = time.monotonic() + 240
        while "PORTS " not in out and time.monotonic() < end and driver.poll() is None:
            out += driver.stdout.readline()
        assert "IDENTICAL" in out, out[-4000:]
        ports = out.split("PORTS ", 1)[1].splitlines()[0]
        assert ports.count("tls://") >= 3, ports            # the scheduler, two workers (and nannies)
        stranger = subprocess.run(
            ["nsenter", f"--net=/run/netns/{slurm.NS}", "setpriv", "--reuid=65533", "--regid=65533",
             "--clear-groups", "env", "-i", f"PATH={slurm.VENV}/bin:/usr/bin:/bin", "HOME=/tmp",
             slurm.PYTHON, "-c", STRANGER, ports], capture_output=True, text=True, timeout=120)
        with open(os.path.join(d, "attacked"), "w"):
            pass
        said = stranger.stdout
        print(said)
        assert "ANSWERED" not in said and said.count("REFUSED") == 2 * len(json.loads(ports)), \
            said + stranger.stderr[-2000:]
        out += driver.communicate(timeout=120)[0]
        assert "CLOSED" in out, out[-3000:]
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, 9)


# -- a worker rank lost while its block runs ---------------------------------------------------
#: the page's recipe (section 2) as a cluster of 3 ranks on this two-core node: the scheduler and
#: two workers; the job's own script only says the cluster is up (the run comes from outside the job)
THREE_RANKS = [
    ("#SBATCH --nodes=5                   # 1 scheduler + 4 workers", "#SBATCH --nodes=1"),
    ("#SBATCH --ntasks-per-node=1", "#SBATCH --ntasks-per-node=2"),
    ("#SBATCH --cpus-per-task=32", "#SBATCH --cpus-per-task=1"),
    ("#SBATCH --time=01:00:00", "#SBATCH --time=00:05:00"),
    ("--ntasks=5", "--ntasks=3 --overcommit"),
    ("--interface ib0", "--interface lo"),
    ('python my_run.py "$SCHED"', 'echo "cluster up: $SCHED"'),
]

LOST_WORKER_DRIVER = """
import json, os, sys, threading, time
import numpy as np
import eagle, eagle_dask
from eagle import In, Out, Param
from eagle import plan as eplan
from eagle_dask import DaskPartition


@eagle.kernel
def halve_and_add(i, x: In, steps: Param, y: Out):
    s = 0.0
    for k in range(steps):
        s = s * 0.5 + x[i]
    y[i] = s


def reference(x, steps):
    # numpy, the same operations (s * 0.5 is exact): the values stop changing long before steps
    s = np.zeros_like(x)
    for _ in range(steps):
        nxt = s * 0.5 + x
        if np.array_equal(nxt, s):
            break
        s = nxt
    return s


def say(*what):
    print(*what, flush=True)


def received():
    # (kernel, rank, start, stop) of the blocks this worker began (recorded as the kernel starts)
    import eagle_dask.task
    return [list(r[:4]) for r in eagle_dask.task.received()]


STEPS = 1_000_000_000           # about a second per sample: a block of 4 samples runs for seconds
client = eagle_dask.connect(sys.argv[1])
pids = client.run(os.getpid)    # each worker's own process, as the worker says
names = {a: w["name"] for a, w in client.scheduler_info()["workers"].items()}
victim = next(a for a in pids if names[a] == 2)
p = eplan.plan(eagle.deploy(halve_and_add), structure=DaskPartition.on(client, progress=False))
x = np.arange(8.0) * 0.5 + 0.25
out = {}


def first_run():
    try:
        out["y"] = p.run(x=x, steps=STEPS)
    except Exception as e:
        say("RUN FAILED", type(e).__name__, e)
        raise


run = threading.Thread(target=first_run, daemon=True)
run.start()
end = time.monotonic() + 120
while run.is_alive() and time.monotonic() < end and not client.run(received, workers=[victim])[victim]:
    time.sleep(0.1)
say("RUNNING", pids[victim])     # worker 2's block has started: the test kills that process now
run.join(240)
say("FIRST", np.array_equal(out["y"].view(np.uint64), reference(x, STEPS).view(np.uint64)))
info = client.scheduler_info()["workers"]
say("WORKERS", json.dumps(sorted(w["name"] for w in info.values())))
say("RECEIVED", json.dumps({str(w["name"]): client.run(received, workers=[a])[a] for a, w in info.items()}))
y = p.run(x=x + 1.0, steps=1000)
say("SECOND", np.array_equal(y.view(np.uint64), reference(x + 1.0, 1000).view(np.uint64)))
client.shutdown()
say("SHUTDOWN")
"""


def _lines(proc):
    """A list that a thread fills with ``proc``'s output lines as they come."""
    import threading
    got = []
    threading.Thread(target=lambda: got.extend(iter(proc.stdout.readline, "")), daemon=True).start()
    return got


def _wait_for(lines, word, proc, bound):
    """The first line of ``lines`` starting with ``word`` (waiting at most ``bound`` seconds)."""
    end = time.monotonic() + bound
    while time.monotonic() < end:
        hit = next((line for line in list(lines) if line.startswith(word)), None)
        if hit is not None:
            return hit
        if proc.poll() is not None and not any(line.startswith(word) for line in list(lines)):
            time.sleep(0.5)             # the reader's last lines
            hit = next((line for line in list(lines) if line.startswith(word)), None)
            assert hit is not None, f"the driver ended without {word!r}:\n" + "".join(lines)[-4000:]
            return hit
        time.sleep(0.05)
    raise AssertionError(f"no {word!r} from the driver within {bound} s:\n" + "".join(lines)[-4000:])


def test_a_worker_rank_lost_mid_run_leaves_the_cluster_and_the_run_gives_the_same_bits():
    """The page's batch recipe, a run from outside the job, and worker rank 2's process -- the pid
    its worker reports -- killed while its block runs: srun goes on, the scheduler reruns that
    block on rank 1 (numpy's bits), counts rank 1 alone and serves the next run; after
    ``client.shutdown()`` the ranks left end the job within 40 s and remove their files.
    (Busy-ness is read from the worker, not from the CPU: ``srun -n 3 --overcommit`` outside a
    batch job binds every task to CPU 0 here, where two blocks run at ~48 % each.)"""
    script = page_script()
    for old, new in THREE_RANKS:
        assert script.count(old) == 1, f"the page's recipe changed: {old!r} is not in it once"
        script = script.replace(old, new)
    d = slurm.job_dir()
    for name, text in (("job.sh", script), ("driver.py", LOST_WORKER_DRIVER)):
        path = os.path.join(d, name)
        with open(path, "w") as f:
            f.write(text)
        os.chown(path, slurm.UID, slurm.UID)
    sub = slurm.as_user(["sbatch", "--parsable", "--output=job.out", "job.sh"], d, timeout=60)
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.strip().split(";")[0]
    sched, job_out = os.path.join(d, f"eagle-{job}.json"), os.path.join(d, "job.out")
    end = time.monotonic() + 120
    while not os.path.exists(sched) and time.monotonic() < end:
        time.sleep(0.2)
    assert os.path.exists(sched), open(job_out).read()[-3000:]
    driver = slurm.as_user(["python", "driver.py", sched], d, popen=True)
    try:
        lines = _lines(driver)
        victim = int(_wait_for(lines, "RUNNING", driver, 180).split()[1])
        time.sleep(1.0)                 # well inside the block (4 samples, about a second each)
        os.kill(victim, 9)
        _wait_for(lines, "SHUTDOWN", driver, 240)
        shut = time.monotonic()
        state = slurm.wait_for_job(job, timeout=90)
        took = time.monotonic() - shut
        print(f"the job ended ({state}) {took:.1f} s after the driver's shutdown")
        said, ranks = "".join(lines), open(job_out).read()
        assert "FIRST True" in said and "SECOND True" in said, said[-4000:]
        assert "WORKERS [1]" in said, said[-4000:]           # the scheduler counts the survivor alone
        received = json.loads(said.split("RECEIVED ", 1)[1].splitlines()[0])
        assert ["halve_and_add", 1, 4, 8] in received["1"], received     # rank 2's block, rerun on rank 1
        assert took < 40, f"the job took {took:.0f} s to end after shutdown ({state})\n" + ranks[-3000:]
        assert re.findall(r"task (\d+): (\w+)", ranks) == [("2", "Killed")], ranks[-3000:]
        assert "rank 0 leaves" in ranks and "rank 1 leaves" in ranks, ranks[-3000:]
        assert not os.path.exists(sched) and not os.path.exists(sched + ".credentials.json")
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, 9)
