"""Every script in ``examples/`` runs as a user would run it, on one CPU thread and on two.

A new example is picked up by the glob; each must exit 0.  The quickstart also checks its own
bits (one thread against a team) and says so.
"""
from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

from tests import launch

EXAMPLES = sorted(glob.glob(os.path.join(launch.ROOT, "examples", "*.py")))


def test_the_examples_are_found():
    assert {os.path.basename(p) for p in EXAMPLES} >= {"quickstart.py", "mpi_run.py"}


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("script", EXAMPLES, ids=os.path.basename)
def test_example_runs_alone(script, threads):
    done = subprocess.run([sys.executable, script], cwd=launch.ROOT, capture_output=True, text=True,
                          timeout=300, env=launch.loopback_env({"EAGLE_NUM_THREADS": threads}))
    assert done.returncode == 0, f"{script} with EAGLE_NUM_THREADS={threads}:\n{done.stdout}\n{done.stderr}"
    if script.endswith("quickstart.py"):
        assert "identical bits: yes" in done.stdout
        assert "1 thread(s)" in done.stdout and "2 thread(s)" in done.stdout
