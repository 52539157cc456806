"""Another local user re-creates the driver's segment names in /dev/shm (issue 27, row 4).

The attacker (uid 65534, through ``setpriv``) watches ``/dev/shm`` and makes each
``eagle-<pid>-*`` name again -- a file of its own, or a symbolic link to a file of the victim's
-- as soon as the driver unlinks it.  A block that started before keeps writing into its own
mappings: no byte lands in the attacker's file or in the link's target, and the run's bits are
those of one process (``HostTeam``).  A block that starts after is refused by name, and says
what it found (a link, another owner, another file).  After a failed run under attack the
victim's next run gives the bits of one process and leaves none of its segments behind.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

pytest.importorskip("distributed")

import eagle  # noqa: E402
import eagle.exec as eexec  # noqa: E402
import eagle_dask  # noqa: E402
from eagle import Cell, In, Out, Param  # noqa: E402
from eagle import plan as eplan  # noqa: E402
from eagle.bits import same_bits  # noqa: E402
from eagle.rows import fold, n_rows  # noqa: E402
from eagle_dask import DaskPartition, arena, shm  # noqa: E402
from eagle_dask.task import run_block  # noqa: E402

NOBODY = 65534
MARK = 0xA5          # the attacker's bytes
OWN = 0x5A           # the bytes of the victim's file a link points to

pytestmark = [
    pytest.mark.skipif(not shm.enabled(), reason="no writable /dev/shm"),
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                       reason="acting as another local user needs root and setpriv"),
]


@eagle.kernel
def spin(i, x: In, steps: Param, y: Out, total: Cell["sum"]):
    v = x[i]
    if v < 0.0:
        raise ValueError("negative input")
    for k in range(steps):
        v = v * 0.999999 + 1e-6
    y[i] = v
    total[i] = v


@pytest.fixture(autouse=True)
def no_arena_of_earlier_tests():
    """This process's arena (kept across runs by design, ``eagle_dask.arena``) made by an earlier
    test retired first, so that every segment of this process a test finds is one its own runs
    left."""
    arena.close_arena()
    yield


def victims():
    """This process's segments in /dev/shm that it owns (the attacker's files left aside)."""
    mine = f"{shm.PREFIX}{os.getpid()}-"
    out = []
    for f in os.listdir(shm.SHM_DIR):
        if f.startswith(mine):
            try:
                if os.lstat(os.path.join(shm.SHM_DIR, f)).st_uid == os.geteuid():
                    out.append(f)
            except FileNotFoundError:
                pass
    return sorted(out)


def sweep():
    """Remove what the attacker made under this process's names."""
    mine = f"{shm.PREFIX}{os.getpid()}-"
    for f in os.listdir(shm.SHM_DIR):
        path = os.path.join(shm.SHM_DIR, f)
        try:
            if f.startswith(mine) and os.lstat(path).st_uid == NOBODY:
                os.unlink(path)
        except FileNotFoundError:
            pass


#: the attacker: makes each name given or seen under the prefix again as soon as it is gone (a
#: 0600 file of the size it had, full of MARK, or a link to argv[3]); prints each name it made,
#: until it made every name given, or its time is up, or it is stopped
ATTACKER = r"""
import os, sys, time
prefix, kind, target, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
names = dict(a.split(":") for a in sys.argv[5:])          # name:size, the sizes it saw
seen = {f: int(size) for f, size in names.items()}
made = []
end = time.monotonic() + seconds
while time.monotonic() < end:
    for f in (os.listdir("/dev/shm") if prefix else ()):
        if f.startswith(prefix) and f not in seen:
            try:
                seen[f] = os.lstat(os.path.join("/dev/shm", f)).st_size
            except FileNotFoundError:
                seen[f] = 1 << 20
    for f, size in seen.items():
        path = os.path.join("/dev/shm", f)
        if f in made or os.path.lexists(path):
            continue
        try:
            if kind == "file":
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
                os.write(fd, bytes([0xA5]) * size)
                os.close(fd)
            else:
                os.symlink(target, path)
            made.append(f)
            print(f, flush=True)
        except OSError:
            pass
    if names and len(made) == len(names):
        break
    time.sleep(0.001)
"""


def attacker(kind, target="/nonexistent", names=None, prefix="", seconds=60.0):
    """The attacker as uid 65534: re-creates ``names`` ({name: size}) or every name under
    ``prefix`` it sees."""
    cmd = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", sys.executable, "-c", ATTACKER,
           prefix, kind, target, str(seconds), *(f"{k}:{v}" for k, v in (names or {}).items())]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/")


def made_by(proc, timeout=60, stop=False):
    """The names the attacker made (``stop``: it is stopped first)."""
    if stop:
        proc.terminate()
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == (-15 if stop else 0), err
    return out.split()


def victim_file(tmp_path, size):
    """A file of the victim's (0600, full of OWN) that a link of the attacker's points to."""
    path = tmp_path / "victim.bin"
    path.write_bytes(bytes([OWN]) * size)
    os.chmod(path, 0o600)
    os.chmod(tmp_path, 0o755)
    return str(path)


class Driver:
    """The driver's side of one block by hand: x, a fresh y and the cell's rows in segments."""

    def __init__(self, x):
        self.segments = shm.Segments()
        n = len(x)
        self.x_id, _ = self.segments.new(x.shape, x.dtype, x)
        self.y_id, self.y = self.segments.new(x.shape, np.float64)
        self.rows_id, self.rows = self.segments.new((n_rows(n), 2), np.float64)
        self.shared = shm.SharedPlanes(shm.host_id(), {
            "x": (self.x_id, None, x.dtype.str, x.shape, True, False),
            "y": (None, self.y_id, "<f8", x.shape, True, True),
        }, {"total": (self.rows_id, n_rows(n))})

    def ids(self):
        return [self.x_id, self.y_id, self.rows_id]


def block(plugin, x, steps, shared):
    return run_block(plugin, eexec.HostTeam, 0, 0, len(x), len(x), {}, {}, {"steps": steps}, {}, shared=shared)


def reference(plugin, x, steps):
    return eplan.plan(plugin, structure=eexec.HostTeam).run(x=x, steps=steps)


@pytest.mark.parametrize("kind", ["file", "symlink"])
def test_a_running_block_writes_only_into_its_own_mappings(tmp_path, kind):
    """The driver unlinks while the block runs (a failed run), the attacker makes every name
    again: the block's outputs and rows reach the driver's segments (the bits of one process),
    none reaches the attacker's files or the victim's file behind a link."""
    plugin = eagle.deploy(spin)
    x = np.linspace(0.0, 1.0, 256)
    steps = 8_000_000
    want = reference(plugin, x, steps)          # compiled here first: the block's time is its own
    d = Driver(x)
    sizes = {s.name: s.size for s in d.ids()}
    target = victim_file(tmp_path, max(sizes.values()))
    shm.clear_opened()
    box = {}
    th = threading.Thread(target=lambda: box.setdefault("out", block(plugin, x, steps, d.shared)), daemon=True)
    try:
        th.start()
        end = time.monotonic() + 60
        while len(set(shm.opened()) & set(sizes)) < 3 and th.is_alive() and time.monotonic() < end:
            time.sleep(0.001)
        assert set(shm.opened()) >= set(sizes), "the block did not map its segments"
        d.segments.close()                                       # the driver unlinks: its run failed
        made = made_by(attacker(kind, target, names=sizes, seconds=30))
        assert sorted(made) == sorted(sizes), made
        assert th.is_alive(), "the block ended before the names were made again: make it longer"
        th.join(120)
        assert box.get("out") == ({}, None), box
        for name, size in sizes.items():
            path = os.path.join(shm.SHM_DIR, name)
            if kind == "file":
                assert os.lstat(path).st_uid == NOBODY
                with open(path, "rb") as f:
                    assert f.read() == bytes([MARK]) * size, f"the block wrote into the attacker's {name}"
        with open(target, "rb") as f:
            assert f.read() == bytes([OWN]) * max(sizes.values()), "the block wrote through the link"
        assert same_bits(d.y, want["y"]), "the block's outputs did not reach the driver's segment"
        assert same_bits(np.asarray(fold("sum", d.rows)), want["total"]), "the block's rows did not reach the driver"
    finally:
        d.segments.close()
        sweep()
    assert victims() == []


@pytest.mark.parametrize("kind, words", [("file", r"is owned by uid 65534, not by uid 0 that made it"),
                                         ("symlink", r"is a symbolic link")], ids=["file", "symlink"])
def test_a_block_starting_later_is_refused_by_name(tmp_path, kind, words):
    """A block that starts once the names are the attacker's: refused, saying what it found,
    and nothing written to the attacker's file or through the link."""
    plugin = eagle.deploy(spin)
    x = np.linspace(0.0, 1.0, 100)
    d = Driver(x)
    sizes = {s.name: s.size for s in d.ids()}
    target = victim_file(tmp_path, max(sizes.values()))
    try:
        d.segments.close()
        assert sorted(made_by(attacker(kind, target, names=sizes, seconds=30))) == sorted(sizes)
        with pytest.raises(shm.ForeignSegment, match=words + r": refused, nothing read or written"):
            block(plugin, x, 10, d.shared)
        for name, size in sizes.items():
            if kind == "file":
                with open(os.path.join(shm.SHM_DIR, name), "rb") as f:
                    assert f.read() == bytes([MARK]) * size
        with open(target, "rb") as f:
            assert f.read() == bytes([OWN]) * max(sizes.values())
    finally:
        d.segments.close()
        sweep()
    assert victims() == []


def test_a_hard_link_to_another_segment_is_refused():
    """Where ``fs.protected_hardlinks`` is 0 the attacker may link another live segment of the
    victim's (same owner, mode and size) under an unlinked name: refused as another file, and
    that segment is left as it was."""
    plugin = eagle.deploy(spin)
    x = np.linspace(0.0, 1.0, 100)
    d = Driver(x)
    other = Driver(x)                   # the victim's next run, still live
    try:
        d.segments.close()
        for old, new in zip(d.ids(), other.ids()):
            os.link(os.path.join(shm.SHM_DIR, new.name), os.path.join(shm.SHM_DIR, old.name))
        before = (other.y.copy(), other.rows.copy())
        with pytest.raises(shm.ForeignSegment, match=r"is another file than the segment its driver made"):
            block(plugin, x, 10, d.shared)
        assert same_bits(other.y, before[0]), "the refused block wrote into the other run's segment"
        assert same_bits(other.rows, before[1]), "the refused block wrote into the other run's rows"
    finally:
        for s in d.ids():
            try:
                os.unlink(os.path.join(shm.SHM_DIR, s.name))
            except FileNotFoundError:
                pass
        d.segments.close()
        other.segments.close()
    assert victims() == []


def test_a_failed_run_under_attack_then_the_next_run(tmp_path):
    """A real cluster: a run fails (one block raises) while the attacker makes every unlinked
    name again (files, then links): no byte of the victim's in the attacker's files or in the
    link's target; the next run gives the bits of one process; none of the victim's segments left."""
    plugin = eagle.deploy(spin)
    n, steps = 4096, 400_000
    good = np.linspace(0.0, 1.0, n)
    bad = good.copy()
    bad[n - 10] = -1.0                       # the last block fails, at its end: the others still run
    want = reference(plugin, good, steps)
    target = victim_file(tmp_path, 1 << 20)
    with eagle_dask.local_cluster(n_workers=2, threads_per_worker=1) as c:
        c.wait_for_workers(2, timeout=120)
        p = eplan.plan(plugin, structure=DaskPartition.on(c, progress=False, timeout=120))
        p.run(x=good[:64], steps=1)
        for kind in ("file", "symlink"):
            spy = attacker(kind, target, prefix=f"{shm.PREFIX}{os.getpid()}-", seconds=120)
            try:
                with pytest.raises(ValueError, match="negative input"):
                    p.run(x=bad, steps=steps)
                time.sleep(2.0)                      # the cancelled blocks end meanwhile
                got = p.run(x=good, steps=steps)
            finally:
                made = made_by(spy, stop=True)
            assert made, f"{kind}: the attacker saw no segment to take"
            try:
                for name in made:
                    path = os.path.join(shm.SHM_DIR, name)
                    if kind == "file" and os.path.exists(path):
                        with open(path, "rb") as f:
                            assert set(f.read()) <= {MARK}, f"the victim's bytes landed in the attacker's {name}"
                with open(target, "rb") as f:
                    assert f.read() == bytes([OWN]) * (1 << 20), "the victim's bytes landed through a link"
            finally:
                sweep()
            assert same_bits(got, want), f"{kind}: the run after the attack is not the bits of one process"
            arena.close_arena()                      # the next run's arena: kept until closed
            assert victims() == [], f"{kind}: segments left"


@pytest.mark.parametrize("change, words", [(lambda path: os.chmod(path, 0o644), r"has mode 0644, not 0600"),
                                           (lambda path: os.truncate(path, 8), r"holds 8 bytes, not 800")],
                         ids=["mode", "size"])
def test_a_segment_changed_under_its_name_is_refused(change, words):
    """The driver's own segment made readable by others, or cut short: a block opening it is
    refused by name, saying what changed (not mmap's bare "length is greater than file size")."""
    plugin = eagle.deploy(spin)
    x = np.linspace(0.0, 1.0, 100)
    d = Driver(x)
    try:
        change(os.path.join(shm.SHM_DIR, d.x_id.name))
        with pytest.raises(shm.ForeignSegment, match=words):
            block(plugin, x, 10, d.shared)
        assert not d.y.any(), "the refused block wrote its outputs"
    finally:
        d.segments.close()
    assert victims() == []
