"""Mutants the SLURM test of a worker rank lost mid-run kills (tests/test_slurm.py, the bed of
scripts/slurm_local.sh start).  The SLURM jobs run the bed's virtualenv, built from the tree the
bed was started from: the docs mutant is read from the tree under test, but a mutant of
eagle_dask/ reaches the jobs only when the bed is restarted from the mutated tree (its venv is
rebuilt when the tree changes) -- the two in ``BY_HAND`` were checked so; scripts/mutants.py
runs ``MUTANTS`` only."""
T = "tests/test_slurm.py::test_a_worker_rank_lost_mid_run_leaves_the_cluster_and_the_run_gives_the_same_bits"
MUTANTS = [
    {"name": "the page's srun ends the whole step when one task dies (--kill-on-bad-exit=1)",
     "path": "docs/laptop_to_cluster.md",
     "old": "srun --mpi=pmi2 --ntasks=5",
     "new": "srun --mpi=pmi2 --kill-on-bad-exit=1 --ntasks=5",
     "tests": [T], "timeout": 400},
]
#: run by hand (the bed restarted from the mutated tree): scripts/mutants.py cannot reach them
BY_HAND = [
    {"name": "the scheduler's rank ends the cluster once a worker rank is lost (bed rebuilt: by hand)",
     "path": "eagle_dask/cluster.py",
     "old": "            await s.finished()",
     "new": "            while len(s.workers) >= size - 1 and s.status.name == 'running':\n"
            "                await asyncio.sleep(0.1)",
     "tests": [T], "timeout": 400},
    {"name": "no rank leaves without the lost one: the job waits until its time limit (bed rebuilt: by hand)",
     "path": "eagle_dask/leave.py",
     "old": 'if is_scheduler or scheduler_gone(address, security, bound=1.0, role="worker"):',
     "new": "if False:",
     "tests": [T], "timeout": 400},
]
