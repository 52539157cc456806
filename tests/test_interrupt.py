"""Ctrl-C during a long HostTeam run stops it within about a second, and the process exits."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = textwrap.dedent("""
    import sys, time
    import numpy as np
    import eagle, eagle.exec as eexec
    from eagle import plan as eplan
    from eagle.models import oscillator
    n = int(sys.argv[1])
    p = eplan.plan(eagle.deploy(oscillator), structure=eexec.HostTeam)
    p.run(omega=np.ones(64), dt=1e-3, steps=1, x=np.ones(64), v=np.zeros(64))      # compile first
    print("running", flush=True)
    t = time.perf_counter()
    try:
        p.run(omega=np.linspace(0.5, 2.0, n), dt=1e-9, steps=10 ** 8, x=np.ones(n), v=np.zeros(n))
    except KeyboardInterrupt:
        print(f"interrupted after {time.perf_counter() - t:.2f} s", flush=True)
        raise
    print("finished", flush=True)
""")


@pytest.mark.parametrize("threads, n", [("1", 4096), ("2", 40_000)])
def test_ctrl_c_stops_a_long_run_and_the_process_exits(tmp_path, threads, n):
    """One tile on one thread, and several tiles on a team: each sample is 10^8 steps (tens of seconds of
    work in all), so only the poll between samples can stop it in time."""
    script = tmp_path / "long_run.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, EAGLE_NUM_THREADS=threads, PYTHONPATH=REPO)
    proc = subprocess.Popen([sys.executable, str(script), str(n)], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout.readline().strip() == "running"
        time.sleep(1.0)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "interrupted after" in out, (out, err)
    assert "KeyboardInterrupt" in err
    assert "finished" not in out
    assert took < 5.0, f"the run took {took:.1f} s to stop and exit after Ctrl-C"
