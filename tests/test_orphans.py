"""Segments a killed driver left in /dev/shm are unlinked by the next driver (``eagle_dask.orphans``):
only this user's regular 0600 files named ``eagle-<pid>-...``, old enough, whose creator is not
running and whose owner's mark (a ``flock``) is gone -- never a live driver's, one still marked
by a process that inherited it, another user's, a link, or a young one."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import uuid

import pytest

from eagle_dask import orphans, shm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
linux = pytest.mark.skipif(not sys.platform.startswith("linux") or not os.path.isdir(shm.SHM_DIR),
                           reason="POSIX shared memory in /dev/shm")

MAKER = textwrap.dedent("""
    import os, signal, sys, time
    from eagle_dask import shm
    seg, buf = shm._create(4096)
    if sys.argv[1] == "fork-keeps-mark" and os.fork() == 0:
        time.sleep(60)                         # the child holds the inherited mark
        os._exit(0)
    print(os.path.join(shm.SHM_DIR, seg.name), flush=True)
    if sys.argv[1] == "live":
        time.sleep(60)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def _maker(how):
    """A driver that makes a segment and then is killed (``SIGKILL``: no exit hook), or lives on
    (``live``); (its process, the segment's path)."""
    proc = subprocess.Popen([sys.executable, "-c", MAKER, how], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=ROOT))
    path = proc.stdout.readline().strip()
    assert path.startswith(os.path.join(shm.SHM_DIR, shm.PREFIX)), path
    if how != "live":
        proc.wait(30)
        assert proc.returncode == -signal.SIGKILL
    assert os.path.exists(path), "the killed driver's segment is not left behind"
    return proc, path


def _dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(30)
    return proc.pid


def _sweep(age=0.0):
    return orphans.sweep(shm.SHM_DIR, shm.PREFIX, age=age)


@linux
def test_a_killed_drivers_segment_is_unlinked_and_a_live_ones_kept():
    _, dead = _maker("killed")
    live, kept = _maker("live")
    try:
        gone = _sweep()
        assert dead in gone and not os.path.exists(dead)
        assert kept not in gone and os.path.exists(kept), "a live driver's segment was unlinked"
    finally:
        live.kill()
        live.wait(30)
    assert kept in _sweep() and not os.path.exists(kept)


@linux
def test_the_next_drivers_first_segment_sweeps():
    _, dead = _maker("killed")
    code = ("from eagle_dask import orphans, shm\norphans.AGE = 0.0\nseg, buf = shm._create(1)\n"
            "print(len(shm.live()))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=ROOT))
    assert out.returncode == 0, out.stderr
    assert not os.path.exists(dead), "the next driver's first segment did not sweep"


@linux
def test_a_mark_inherited_by_a_running_child_keeps_the_segment():
    """The creator is dead, but a child it forked still holds the mark: not an orphan."""
    _, path = _maker("fork-keeps-mark")
    try:
        assert path not in _sweep() and os.path.exists(path)
    finally:
        subprocess.run(["pkill", "-f", "time.sleep\\(60\\)"], check=False)
        if os.path.exists(path):
            os.unlink(path)


def _unmarked(pid, owner=None, mode=0o600):
    """A segment file named for ``pid`` that nobody marks (an older eagle's, or a dead driver's)."""
    path = os.path.join(shm.SHM_DIR, f"{shm.PREFIX}{pid}-{uuid.uuid4().hex[:16]}")
    if owner is None:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode)
        os.fchmod(fd, mode)
        os.close(fd)
    else:
        subprocess.run(["setpriv", f"--reuid={owner}", f"--regid={owner}", "--clear-groups", sys.executable, "-c",
                        f"import os; fd = os.open({path!r}, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600); os.close(fd)"],
                       check=True, timeout=30)
    return path


@linux
@pytest.mark.parametrize("case", ["creator running", "too young", "another user's", "a link", "mode 0644"])
def test_what_is_never_taken_for_an_orphan(case, tmp_path):
    if case == "another user's" and (os.getuid() != 0 or not shutil.which("setpriv")):
        pytest.skip("acting as another user needs root and setpriv")
    dead = _dead_pid()
    if case == "creator running":
        path = _unmarked(os.getpid())                  # no mark, but its creator runs
    elif case == "another user's":
        path = _unmarked(dead, owner=65534)
    elif case == "a link":
        target = tmp_path / "target"
        target.write_text("x")
        path = os.path.join(shm.SHM_DIR, f"{shm.PREFIX}{dead}-{uuid.uuid4().hex[:16]}")
        os.symlink(target, path)
    else:
        path = _unmarked(dead, mode=0o644 if case == "mode 0644" else 0o600)
    try:
        assert path not in _sweep(age=60.0 if case == "too young" else 0.0)
        assert os.path.lexists(path)
        if case == "too young":
            assert path in _sweep(age=0.0)               # the same file, once old enough: an orphan
    finally:
        if os.path.lexists(path):
            os.unlink(path)


def _descriptors_of(path):
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith(path):
                out.append(fd)
        except OSError:
            pass
    return out


@linux
def test_the_mark_is_held_while_the_segment_lives_and_let_go_with_it():
    seg, buf = shm._create(4096)
    path = os.path.join(shm.SHM_DIR, seg.name)
    buf.close()                                  # the mapping's own descriptor goes with it
    try:
        assert len(_descriptors_of(path)) == 1, "no descriptor holds the owner's mark"
        assert path not in _sweep(), "a live segment of this very process was swept"
    finally:
        shm._unlink(path)
    assert not os.path.exists(path) and _descriptors_of(path) == [], "the mark's descriptor outlived the segment"
