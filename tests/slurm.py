"""The tests' view of the one-node SLURM that ``scripts/slurm_local.sh start`` runs: jobs are
submitted from inside its network namespace, as an ordinary user (uid 65534), with the virtualenv
made for that user; every job and every wait is bounded."""
from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile

import pytest

NS = os.environ.get("EAGLE_SLURM_NS", "eagle-slurm")
VENV = os.environ.get("EAGLE_SLURM_VENV", "/opt/eagle-slurm/venv")
UID = 65534
PYTHON = os.path.join(VENV, "bin", "python")


def _enter():
    return ["nsenter", f"--net=/run/netns/{NS}"]


def why_not() -> str | None:
    """Why the SLURM tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (jobs are run as another user through setpriv)"
    if shutil.which("srun") is None or not os.path.exists(f"/run/netns/{NS}"):
        return "SLURM is not running: bash scripts/slurm_local.sh start"
    if not os.access(PYTHON, os.X_OK):
        return f"no Python for the job's user at {PYTHON}: bash scripts/slurm_local.sh start"
    try:
        state = subprocess.run([*_enter(), "sinfo", "-h", "-o", "%T"], capture_output=True, text=True,
                               timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"sinfo failed: {e}"
    if not any(s.startswith(("idle", "mix", "alloc")) for s in state.split()):
        return f"the SLURM node is not up (sinfo: {state.strip()!r})"
    return None


requires_slurm = pytest.mark.skipif(why_not() is not None, reason=str(why_not()))


def job_dir(*files) -> str:
    """A fresh directory owned by the job's user, with copies of ``files`` (repository paths)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    d = tempfile.mkdtemp(prefix="eagle-slurm-job-")
    for f in files:
        shutil.copy(os.path.join(root, f), d)
    for dirpath, _, names in os.walk(d):
        os.chown(dirpath, UID, UID)
        for n in names:
            os.chown(os.path.join(dirpath, n), UID, UID)
    return d


def as_user(args, cwd, *, timeout=120, env=None, popen=False):
    """Run ``args`` inside the namespace as uid 65534 (HOME the job directory)."""
    full_env = {"PATH": f"{VENV}/bin:/usr/bin:/bin", "HOME": cwd, "LANG": "C.UTF-8",
                "USER": pwd.getpwuid(UID).pw_name, "UCX_NET_DEVICES": "lo", **(env or {})}
    cmd = [*_enter(), "setpriv", f"--reuid={UID}", f"--regid={UID}", "--clear-groups", "env", "-i",
           *[f"{k}={v}" for k, v in full_env.items()], *args]
    if popen:
        return subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def cancel_all():
    """Cancel every job of the job's user (a test's cleanup)."""
    subprocess.run([*_enter(), "scancel", "-u", str(UID)], capture_output=True, timeout=20)


def wait_for_job(job: str, timeout: float) -> str:
    """The final state of batch job ``job`` (COMPLETED, FAILED, ...), waiting at most ``timeout``
    seconds (then the job is cancelled and its state then returned)."""
    import time
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        out = subprocess.run([*_enter(), "scontrol", "show", "job", job], capture_output=True, text=True,
                             timeout=20).stdout
        state = next((w.split("=", 1)[1] for w in out.split() if w.startswith("JobState=")), "UNKNOWN")
        if state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "UNKNOWN"):
            return state
        time.sleep(1)
    subprocess.run([*_enter(), "scancel", job], capture_output=True, timeout=20)
    return "TIMEOUT (cancelled by the test)"
