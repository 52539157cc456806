"""Joining a cluster eagle started from another process, and the messages a new user meets.

* ``local_cluster(scheduler_file=F)`` writes ``F`` and its credentials (0600, as ``eagle-dask
  cluster`` does); a second Python process joins with ``eagle_dask.connect(F)`` and gets HostTeam's
  bits; a plain ``distributed.Client(scheduler_file=F)`` has no certificate; both files and the
  cluster's directory are gone after close.
* ``connect`` given an address and ``security=``.
* a script calling ``local_cluster()`` without the ``__main__`` guard: eagle's one message, fast.
"""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time

import pytest

pytest.importorskip("distributed")
pytest.importorskip("cryptography")

import eagle_dask  # noqa: E402
from eagle_dask import security as tls  # noqa: E402
from tests.launch import ROOT, loopback_env  # noqa: E402

NOTEBOOK = r'''
import json, os, sys
import eagle, eagle.exec as eexec, eagle_dask
from eagle import plan as eplan
from tests import kernels as K
from distributed import Client

out = {}
try:
    Client(scheduler_file=sys.argv[1], timeout=5)
    out["plain"] = "connected"
except Exception as e:
    out["plain"] = f"{type(e).__name__}: {e}"
with eagle_dask.connect(sys.argv[1], timeout=30) as client:
    plugin = eagle.deploy(K.reductions)
    planes = K.inputs("reductions", 333)
    ref = eplan.plan(plugin, structure=eexec.HostTeam).run(**planes)
    got = eplan.plan(plugin, structure=eagle_dask.DaskPartition.on(client, progress=False)).run(**planes)
    out.update(same=K.same_bits(ref, got), workers=len(client.run(os.getpid)), address=client.scheduler.address)
print("RESULT " + json.dumps(out), flush=True)
'''


def _mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_a_second_process_joins_a_local_cluster_through_its_scheduler_file(tmp_path):
    sched = tmp_path / "scheduler.json"
    creds = tls.credentials_path(sched)
    script = tmp_path / "notebook.py"
    script.write_text(NOTEBOOK)
    client = eagle_dask.local_cluster(n_workers=2, threads_per_worker=1, scheduler_file=sched)
    try:
        client.wait_for_workers(2, timeout=120)
        place = os.path.dirname(os.path.dirname(next(iter(
            client.run(lambda dask_worker: dask_worker.local_directory).values()))))
        assert _mode(sched) == 0o600 and _mode(creds) == 0o600
        assert json.loads(sched.read_text())["address"] == client.scheduler.address
        assert "join with eagle_dask.connect(this file)" in json.loads(sched.read_text())["eagle"]
        assert json.loads(open(creds).read())["address"] == client.scheduler.address
        proc = subprocess.run([sys.executable, str(script), str(sched)], capture_output=True, text=True,
                              timeout=300, cwd=ROOT, env=loopback_env({"EAGLE_DASK_PROGRESS": "0"}))
        line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        assert proc.returncode == 0 and len(line) == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
        res = json.loads(line[0][len("RESULT "):])
        assert res["same"] is True and res["workers"] == 2 and res["address"] == client.scheduler.address
        assert res["plain"].startswith("TypeError: TLS expects a `ssl_context`"), res["plain"]
    finally:
        client.close()
    assert not sched.exists() and not os.path.exists(creds) and not os.path.exists(place)


def test_connect_given_an_address_and_security_joins():
    from distributed import Security
    sec = Security.temporary()
    client = eagle_dask.local_cluster(n_workers=1, threads_per_worker=1, security=sec)
    try:
        client.wait_for_workers(1, timeout=120)
        t = time.monotonic()
        with eagle_dask.connect(client.scheduler.address, security=sec, timeout=30) as other:
            assert len(other.run(os.getpid)) == 1
        assert time.monotonic() - t < 30
        with pytest.raises(ValueError, match=r"a cluster with credentials listens on tls://; for a plain tcp:// "
                                             r"cluster pass security=False"):
            eagle_dask.connect("tcp://127.0.0.1:1", security=sec)
    finally:
        client.close()


UNGUARDED = """
import eagle_dask
client = eagle_dask.local_cluster(n_workers=1)
client.close()
"""

GUARDED = """
import os
import eagle_dask

if __name__ == "__main__":
    client = eagle_dask.local_cluster(n_workers=1)
    print("WORKERS", len(client.run(os.getpid)))
    client.close()
"""


def test_local_cluster_in_a_script_without_the_main_guard_is_one_message(tmp_path):
    script = tmp_path / "unguarded.py"
    script.write_text(UNGUARDED)
    t = time.monotonic()
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          cwd=str(tmp_path), env=loopback_env())
    assert time.monotonic() - t < 60
    assert proc.returncode != 0
    assert (f"eagle_dask.local_cluster() must be called under `if __name__ == \"__main__\":` in a script "
            f"({script}, line 3)") in proc.stderr, proc.stderr[-3000:]
    assert "Nanny failed to start" not in proc.stderr and len(proc.stderr.splitlines()) < 20, proc.stderr
    script = tmp_path / "guarded.py"
    script.write_text(GUARDED)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180,
                          cwd=str(tmp_path), env=loopback_env())
    assert proc.returncode == 0 and "WORKERS 1" in proc.stdout, proc.stderr[-3000:]
