"""Launch helpers for tests: MPI jobs on loopback only, and the loopback listener check.

The mpich wheel's default ``mpiexec`` (hydra) listens on every interface, and its UCX transport
on the machine's public address; ``mpiexec.gforker`` with ``UCX_NET_DEVICES=lo`` keeps every
listener on 127.0.0.1.  Every MPI job the tests start goes through :func:`mpiexec`.
"""
from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def gforker():
    """Path of the mpich wheel's fork-based launcher, or None."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec.gforker")
    return here if os.path.exists(here) else shutil.which("mpiexec.gforker")


def loopback_env(extra=None):
    env = dict(os.environ)
    env["UCX_NET_DEVICES"] = "lo"
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update(extra or {})
    return env


def require_mpi():
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        pytest.skip("mpi4py is not installed (pip install '.[mpi]')")
    if gforker() is None:
        pytest.skip("mpiexec.gforker (the mpich wheel) is not installed")


def clear_stale_mpich_segments(directory="/dev/shm", older_than=30.0):
    """Remove this user's ``mpich_shm_*`` segments that no process maps or holds open (and that
    are older than ``older_than`` seconds, so a job starting now is never touched).

    A killed job of the mpich wheel (the tests kill ranks on purpose, and kill jobs that run past
    their bound) leaves its node segment behind, named by a hash of its PMI job name, which holds
    the launcher's pid under gforker; a later job whose launcher gets the same pid (pids wrap at
    32768 here) attaches to the stale segment and hangs in MPI_Init."""
    import glob
    now = time.time()
    stale = set()
    for path in glob.glob(os.path.join(directory, "mpich_shm_*")):
        with contextlib.suppress(OSError):
            st = os.lstat(path)
            if st.st_uid == os.geteuid() and os.path.isfile(path) and now - st.st_mtime > older_than:
                stale.add(path)
    if not stale:
        return
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/maps") as f:
            stale -= {line.split(None, 5)[-1].strip().removesuffix(" (deleted)") for line in f
                      if "mpich_shm_" in line}
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    stale.discard(os.readlink(f"/proc/{pid}/fd/{fd}"))
    for path in stale:
        with contextlib.suppress(OSError):
            os.unlink(path)


def mpiexec(n, args, *, timeout=180, env=None, check=True, popen=False):
    """Run ``python *args`` under ``mpiexec.gforker -n n`` on loopback; return the CompletedProcess."""
    require_mpi()
    clear_stale_mpich_segments()
    cmd = [gforker(), "-n", str(n), sys.executable, *args]
    if popen:
        return subprocess.Popen(cmd, env=loopback_env(env), cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
    with subprocess.Popen(cmd, env=loopback_env(env), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, start_new_session=True) as job:
        try:
            out, err = job.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, 9)               # the launcher and every rank it started
            job.communicate()
            raise
    proc = subprocess.CompletedProcess(cmd, job.returncode, out, err)
    if check and proc.returncode != 0:
        raise AssertionError(f"mpiexec -n {n} {' '.join(args)} exited {proc.returncode}\n"
                             f"--- stdout\n{proc.stdout[-6000:]}\n--- stderr\n{proc.stderr[-6000:]}")
    return proc


def listeners(pids):
    """(pid, ip, port) of every listening inet socket the given processes hold."""
    import psutil
    out = []
    for pid in pids:
        try:
            conns = psutil.Process(pid).net_connections(kind="inet")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        out += [(pid, c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN]
    return out


def speaks_http(port):
    """Whether something on 127.0.0.1:``port`` answers an HTTP request (MPI's and dask's own
    listeners do not)."""
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=3)
    try:
        conn.request("GET", "/health")
        conn.getresponse()
        return True
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def beyond_loopback(found):
    """The listeners of ``listeners()`` bound to anything but a loopback address."""
    return [(pid, ip, port) for pid, ip, port in found if not ipaddress.ip_address(ip).is_loopback]


def assert_loopback_only(found, what):
    """At least one listener was seen (else the check judged nothing: sockets that could not be
    read, or processes already gone), and every one of them is on loopback."""
    assert found, f"no listening socket seen in {what}: nothing was checked"
    assert beyond_loopback(found) == [], f"{what} listens beyond loopback: {beyond_loopback(found)}"


def process_tree(pid):
    import psutil
    try:
        p = psutil.Process(pid)
        return [pid] + [c.pid for c in p.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def in_thread(fn):
    """Call ``fn()`` in a daemon thread; returns the thread and a box that gets ``out`` or
    ``error``, and ``seconds``."""
    box = {}

    def go():
        t = time.monotonic()
        try:
            box["out"] = fn()
        except BaseException as e:  # noqa: BLE001 - inspected by the test
            box["error"] = e
        box["seconds"] = time.monotonic() - t

    th = threading.Thread(target=go, daemon=True)
    th.start()
    return th, box


def run_in_thread(p, planes):
    """Run plan ``p`` on ``planes`` in a daemon thread (``in_thread``)."""
    return in_thread(lambda: p.run(**planes))


@contextlib.contextmanager
def local_client(workers):
    """``eagle_dask.local_cluster`` with ``workers`` one-thread workers, all of them up."""
    import eagle_dask
    c = eagle_dask.local_cluster(n_workers=workers, threads_per_worker=1)
    try:
        c.wait_for_workers(workers, timeout=120)
        yield c
    finally:
        c.close()
