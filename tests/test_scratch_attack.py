"""Another local user's planted dask scratch space is never used by a cluster eagle starts.

The attacker (uid 65534, through ``setpriv``) makes ``<tmp>/dask-scratch-space`` and
``<tmp>/dask-scratch-space-<our uid>`` first, mode 0777, plants Python files in them that write a
marker when imported, and holds ``flock`` on their ``global.lock``.  ``<tmp>`` is a sandbox standing
for ``/tmp`` (``TMPDIR`` of the victim's process, so other people's runs are not touched).  The
victim's ``local_cluster()`` must start anyway, give HostTeam's bits, import no planted file (in
the driver or a worker, even a module imported only after the cluster started), and keep its files
in its own 0700 directory, gone once the client closes.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time

import pytest

pytest.importorskip("distributed")

from eagle_dask import scratch  # noqa: E402
from tests.launch import ROOT, loopback_env  # noqa: E402

NOBODY = 65534
as_other_user = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                   reason="acting as another local user needs root and setpriv")
PLANTED = ("zict", "eagle_planted_probe")

VICTIM = r'''
import json, os, stat, sys
import eagle, eagle.exec as eexec, eagle_dask
from eagle import plan as eplan
from tests import kernels as K

def probe():
    try:
        import eagle_planted_probe      # exists only in the planted directories
        return "imported"
    except ImportError:
        return "absent"

if __name__ == "__main__":
    client = eagle_dask.local_cluster(n_workers=2, threads_per_worker=1)
    client.wait_for_workers(2, timeout=120)
    plugin = eagle.deploy(K.reductions)
    planes = K.inputs("reductions", 333)
    ref = eplan.plan(plugin, structure=eexec.HostTeam).run(**planes)
    got = eplan.plan(plugin, structure=eagle_dask.DaskPartition.on(client, progress=False)).run(**planes)
    dirs = list(client.run(lambda dask_worker: dask_worker.local_directory).values())
    sched_dir = client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.local_directory)
    workers_probe = sorted(client.run(probe).values())
    place = os.path.dirname(os.path.dirname(dirs[0]))
    st = os.lstat(place)
    out = {"same": K.same_bits(ref, got), "dirs": dirs, "sched_dir": sched_dir, "place": place,
           "mode": oct(st.st_mode & 0o7777), "uid": st.st_uid,
           "driver_probe": probe(), "workers_probe": workers_probe,
           "driver_path": [p for p in sys.path if "dask-scratch-space" in p]}
    client.close()
    out["exists_after"] = os.path.exists(place)
    print("RESULT " + json.dumps(out), flush=True)
'''

PLANT = r'''
import fcntl, os, sys, time
sandbox, markers, uid, planted = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
code = "import os\nopen(os.path.join(%r, 'ran-' + __name__ + '-' + str(os.getpid())), 'w').close()\n" % markers
held = []
for name in ("dask-scratch-space", "dask-scratch-space-" + uid):
    d = os.path.join(sandbox, name)
    os.mkdir(d)
    os.chmod(d, 0o777)
    for mod in planted:
        with open(os.path.join(d, mod + ".py"), "w") as f:
            f.write(code)
    lock = open(os.path.join(d, "global.lock"), "a")
    os.chmod(lock.name, 0o644)
    fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
    held.append(lock)
print("PLANTED", flush=True)
time.sleep(600)
'''


def nobody(args, **kw):
    return subprocess.Popen(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *args],
                            env={"PATH": os.environ.get("PATH", "")}, **kw)


@as_other_user
def test_planted_scratch_space_runs_nothing_and_cannot_stop_the_cluster(tmp_path):
    sandbox = tempfile.mkdtemp(prefix="eagle-sandbox-tmp-")
    os.chmod(sandbox, 0o1777)                      # a /tmp of its own
    markers = os.path.join(sandbox, "markers")
    os.mkdir(markers)
    os.chmod(markers, 0o777)
    attacker = nobody([sys.executable, "-c", PLANT, sandbox, markers, str(os.getuid()), *PLANTED],
                      stdout=subprocess.PIPE, text=True)
    try:
        assert attacker.stdout.readline().strip() == "PLANTED"
        victim = tmp_path / "victim.py"
        victim.write_text(VICTIM)
        env = loopback_env({"TMPDIR": sandbox, "EAGLE_DASK_PROGRESS": "0"})
        env.pop("XDG_RUNTIME_DIR", None)
        env.pop("DASK_TEMPORARY_DIRECTORY", None)
        t = time.monotonic()
        proc = subprocess.run([sys.executable, str(victim)], capture_output=True, text=True, timeout=300,
                              cwd=ROOT, env=env)
        line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        assert proc.returncode == 0 and len(line) == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert time.monotonic() - t < 240
        res = json.loads(line[0][len("RESULT "):])
        assert os.listdir(markers) == [], "a planted file ran as the victim"
        assert res["same"]
        assert res["driver_probe"] == "absent" and res["workers_probe"] == ["absent", "absent"]
        place = res["place"]
        assert os.path.dirname(place) == sandbox and os.path.basename(place).startswith("eagle-dask-")
        assert res["mode"] == oct(0o700) and res["uid"] == os.getuid()
        assert all(d.startswith(place + os.sep) for d in res["dirs"]) and res["sched_dir"].startswith(place)
        assert [p for p in res["driver_path"] if not p.startswith(place)] == []
        assert res["exists_after"] is False
    finally:
        attacker.kill()
        attacker.wait()
        shutil.rmtree(sandbox, ignore_errors=True)


def test_a_named_directory_others_can_write_is_refused(tmp_path):
    d = tmp_path / "scratch"
    d.mkdir()
    os.chmod(d, 0o777)
    with pytest.raises(PermissionError, match=r"local_cluster\(local_directory='.*scratch'\) is mode 0777, owned "
                                              r"by uid \d+: .*writable by you only"):
        scratch.private(str(d), "local_cluster")
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    with pytest.raises(PermissionError, match=r"local_directory='.*link'\) is a symbolic link"):
        scratch.private(str(link), "local_cluster")
    os.chmod(d, 0o700)
    assert scratch.private(str(d)).path == str(d)
    fresh = tmp_path / "new"
    p = scratch.private(str(fresh))
    assert stat.S_IMODE(os.stat(p.path).st_mode) == 0o700
    p.remove()
    assert fresh.exists()                 # a directory the user named is theirs: not removed


def test_a_fresh_directory_is_0700_and_removed():
    p = scratch.private()
    assert stat.S_IMODE(os.stat(p.path).st_mode) == 0o700 and os.stat(p.path).st_uid == os.getuid()
    p.remove()
    assert not os.path.exists(p.path)


def test_unsafe_parts_name_directories_others_can_write(tmp_path):
    d = tmp_path / "open"
    d.mkdir()
    os.chmod(d, 0o1777)                   # sticky does not stop files being made in it
    inner = d / "mine"
    inner.mkdir(mode=0o700)
    assert scratch.unsafe_parts(str(d)) == [f"{d} (mode 1777, uid {os.getuid()})"]
    assert scratch.unsafe_parts(str(inner)) == []          # a sticky parent cannot swap our entry
    os.chmod(d, 0o777)
    assert scratch.unsafe_parts(str(inner)) == [f"{d} (mode 0777, uid {os.getuid()})"]


def test_info_warns_when_a_worker_directory_is_writable_by_others(tmp_path):
    from distributed import Client, LocalCluster

    from eagle_dask import cli
    bad = tmp_path / "open"
    bad.mkdir()
    os.chmod(bad, 0o777)
    with LocalCluster(n_workers=1, threads_per_worker=1, host="127.0.0.1", dashboard_address=None,
                      local_directory=str(bad)) as cluster, Client(cluster) as client:
        lines = scratch.warnings_for(client)
        assert len(lines) == 1 and f"another user can write to {bad} (mode 0777" in lines[0], lines
        assert "local_directory=" in lines[0] and len(lines[0]) < 400
        out = subprocess.run([sys.executable, "-m", "eagle_dask", "info", "--address", cluster.scheduler_address],
                             capture_output=True, text=True, timeout=120, cwd=ROOT, env=loopback_env())
        assert out.returncode == 0, out.stderr[-2000:]
        assert f"another user can write to {bad}" in out.stderr
    good = tmp_path / "mine"
    good.mkdir(mode=0o700)
    with LocalCluster(n_workers=1, processes=False, dashboard_address=None,
                      local_directory=str(good)) as cluster, Client(cluster) as client:
        assert scratch.warnings_for(client) == []
    assert cli.columns                      # the command's module imports
