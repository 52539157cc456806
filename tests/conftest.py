"""Shared fixtures of the core tests: thread teams, a launch guard and subprocess runs."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import eagle.host

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: the smallest chunk under the ``team`` fixture: a share of 8 samples or more (33 or more, two
#: rows, for a kernel with cells) is cut into several chunks when the team has several threads
TEAM_MIN_CHUNK = 4


@pytest.fixture
def team(monkeypatch):
    """``team(k)`` makes HostTeam runs use ``k`` threads (``EAGLE_NUM_THREADS``).

    Chunks may be as small as ``TEAM_MIN_CHUNK`` samples (whole rows for a kernel with cells),
    so that even the small sample counts of the tests are really cut into several chunks run by
    the team's threads (``tests/test_host_bits.py`` checks that they are).
    """
    monkeypatch.setattr(eagle.host, "MIN_CHUNK", TEAM_MIN_CHUNK)

    def set_threads(k: int):
        monkeypatch.setenv("EAGLE_NUM_THREADS", str(k))
    set_threads(1)
    return set_threads


@pytest.fixture
def no_launch(monkeypatch):
    """Fail the test if anything reaches the compiled loop (a refusal must come before)."""
    def launched(self, *args, **kwargs):
        raise AssertionError(f"kernel {self.plugin.name!r} was launched before the refusal")
    monkeypatch.setattr(eagle.host.HostEntry, "run", launched)


@pytest.fixture
def python(tmp_path):
    """``python(script, *args, cache=dir)`` runs a script in a fresh interpreter; returns stdout.

    The child sees the repository on ``PYTHONPATH`` and uses ``cache`` (default: the
    session's ``EAGLE_CACHE_DIR``) as its disk cache.  A failing child fails the test with
    its stderr.
    """
    def run(script, *args, cache=None, cwd=None):
        env = dict(os.environ)
        env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        if cache is not None:
            env["EAGLE_CACHE_DIR"] = str(cache)
        done = subprocess.run([sys.executable, str(script), *map(str, args)], env=env, cwd=cwd or tmp_path,
                              capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            pytest.fail(f"{script} exited with {done.returncode}:\n{done.stdout}\n{done.stderr}")
        return done.stdout
    return run
