"""Every cluster eagle_dask starts refuses whoever lacks its credentials, tried as an intruder would.

For ``local_cluster``, ``initialize`` under ``mpiexec -n 4`` and ``eagle-dask cluster`` under
``mpiexec -n 3``, a second process (``tests/mpi_scripts/intruder.py``) is given only the ports the
cluster's processes listen on (read with psutil, as ``/proc/net/tcp`` shows them to any user) and
the scheduler file's text; it tries plain TCP, TLS without a certificate and TLS with a certificate
of another authority, through distributed's client and through the raw ``run`` handlers.  Each try
must be refused within 10 s and the marker file its payload would write must not appear.  The
controls (``security=False``; the credentials file of ``eagle-dask cluster``) show that the same
intruder does get in where the door is open, so the refusals are the cluster's doing.
"""
from __future__ import annotations

import json
import os
import queue
import stat
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("distributed")
pytest.importorskip("cryptography")

import eagle  # noqa: E402
import eagle.exec as eexec  # noqa: E402
import eagle_dask  # noqa: E402
from eagle import plan as eplan  # noqa: E402
from eagle_dask import security as tls  # noqa: E402
from tests import kernels as K  # noqa: E402
from tests.launch import ROOT, assert_loopback_only, listeners, loopback_env, mpiexec, process_tree  # noqa: E402

INTRUDER = os.path.join(ROOT, "tests", "mpi_scripts", "intruder.py")
HOSTILE = ["tcp", "tls-nocert", "tls-other", "tls-other-trusting"]
REFUSED_WITHIN_S = 10


def intrude(tmp_path, ports, modes, credentials=None, name="intruder"):
    """Run the intruder against ``ports``; returns (its attempts, the marker files that appeared, the
    ports that answered HTTP)."""
    markers = tmp_path / f"{name}-markers"
    markers.mkdir()
    spec = tmp_path / f"{name}.json"
    spec.write_text(json.dumps({"ports": sorted(ports), "marker_dir": str(markers), "modes": modes,
                                "credentials": credentials}))
    env = loopback_env({"EAGLE_DASK_PROGRESS": "0"})
    env["PYTHONPATH"] = ""                          # an outsider: not even this checkout on its path
    proc = subprocess.run([sys.executable, INTRUDER, str(spec)], capture_output=True, text=True, timeout=600,
                          cwd=str(tmp_path), env=env)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert len(line) == 1, proc.stdout[-4000:] + proc.stderr[-4000:]
    res = json.loads(line[0][len("RESULT "):])
    return res["attempts"], sorted(os.listdir(markers)), res["http"]


def assert_all_refused(attempts, markers, ports, modes, http, dask_ports):
    """Every try on every port that is not HTTP failed in time, and at least ``dask_ports`` were tried."""
    assert len(ports) - len(http) >= dask_ports, (ports, http)
    assert len(attempts) == 2 * (len(ports) - len(http)) * len(modes), attempts
    got_in = [a for a in attempts if a["ok"]]
    assert got_in == [], f"an intruder got in: {got_in}"
    slow = [a for a in attempts if a["seconds"] > REFUSED_WITHIN_S]
    assert slow == [], f"refusals slower than {REFUSED_WITHIN_S} s: {slow}"
    assert markers == [], f"code an intruder sent ran: {markers}"


def ports_of(pids):
    found = listeners(pids)
    assert_loopback_only(found, "the cluster")
    return {(ip, port) for _, ip, port in found}


def scheduler_port(address):
    host, port = address.split("://")[1].rsplit(":", 1)
    return host, int(port)


def same_bits_on(client):
    plugin = eagle.deploy(K.reductions)
    planes = K.inputs("reductions", 333)
    ref = eplan.plan(plugin, structure=eexec.HostTeam).run(**planes)
    got = eplan.plan(plugin, structure=eagle_dask.DaskPartition.on(client, progress=False)).run(**planes)
    return K.same_bits(ref, got)


def private_places(client):
    """The directories holding the scheduler's and each worker's files: each fresh, yours, mode 0700."""
    dirs = list(client.run(lambda dask_worker: dask_worker.local_directory).values())
    dirs.append(client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.local_directory))
    places = sorted({os.path.dirname(os.path.dirname(d)) if "dask-scratch-space" in d else None for d in dirs})
    assert None not in places and len(places) == len(dirs), dirs           # one per process, not shared
    for p in places:
        st = os.lstat(p)
        assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid(), p
        assert os.path.basename(p).startswith("eagle-dask-"), p
    return places


# -- local_cluster -------------------------------------------------------------------------
def test_local_cluster_refuses_intruders_and_serves_its_client(tmp_path):
    client = eagle_dask.local_cluster(n_workers=2, threads_per_worker=1)
    try:
        client.wait_for_workers(2, timeout=120)
        assert client.scheduler.address.startswith("tls://127.0.0.1:")
        assert same_bits_on(client)
        ports = ports_of(process_tree(os.getpid()))
        assert scheduler_port(client.scheduler.address) in ports
        assert len(ports) >= 5                        # scheduler, dashboard, two nannies, two workers
        attempts, markers, http = intrude(tmp_path, ports, HOSTILE)
        assert_all_refused(attempts, markers, ports, HOSTILE, http, dask_ports=5)   # scheduler, 2 nannies, 2 workers
        assert len(client.run(os.getpid)) == 2        # the cluster still serves its own client
    finally:
        client.close()


def test_local_cluster_security_false_is_plain_tcp_open_to_anyone(tmp_path):
    """The opt-out works, and is as open as its docstring says: the same intruder runs code."""
    client = eagle_dask.local_cluster(n_workers=1, threads_per_worker=1, security=False)
    try:
        client.wait_for_workers(1, timeout=120)
        assert client.scheduler.address.startswith("tcp://127.0.0.1:")
        assert same_bits_on(client)
        attempts, markers, _ = intrude(tmp_path, {scheduler_port(client.scheduler.address)}, ["tcp"])
        assert [a["how"] for a in attempts if a["ok"]] == ["client", "raw"], attempts
        port = scheduler_port(client.scheduler.address)[1]
        assert {m.rsplit("-", 1)[0] for m in markers} == {f"ran-tcp-{port}-client-{w}" for w in
                                                          ("run", "submit", "scheduler")} | {
            f"ran-tcp-{port}-raw-function"}
    finally:
        client.close()
    assert "any user of this machine" in eagle_dask.local_cluster.__doc__
    assert "security=False" in eagle_dask.initialize.__doc__ or "``False``" in eagle_dask.initialize.__doc__


def test_local_cluster_with_a_given_security_uses_it():
    from distributed import Security
    sec = Security.temporary()
    client = eagle_dask.local_cluster(n_workers=1, threads_per_worker=1, security=sec)
    try:
        client.wait_for_workers(1, timeout=120)
        assert client.security is sec
        assert client.scheduler.address.startswith("tls://")
        assert len(client.run(os.getpid)) == 1
    finally:
        client.close()


@pytest.mark.parametrize("security", ["yes", True, 1])
def test_security_of_the_wrong_kind_is_refused_before_anything_starts(security):
    with pytest.raises(TypeError, match=r"local_cluster\(security=.*None \(fresh mutual-TLS.*a "
                                        r"distributed.Security.*False \(plain TCP"):
        eagle_dask.local_cluster(n_workers=1, security=security)


def test_env_that_is_not_a_dict_is_a_clear_error():
    with pytest.raises(TypeError, match=r"local_cluster\(env='EAGLE_NUM_THREADS=1'\): env takes a dict .*not a "
                                        r"str"):
        eagle_dask.local_cluster(n_workers=1, env="EAGLE_NUM_THREADS=1")


def test_cluster_command_tls_flags():
    from distributed import Security

    from eagle_dask.cli import parser, security_of

    def sec(*flags):
        return security_of(parser().parse_args(["cluster", "--scheduler-file", "F", *flags]))
    assert sec() is None                                   # fresh credentials
    assert sec("--no-tls") is False
    given = sec("--tls-ca-file", "ca.pem", "--tls-cert", "c.pem", "--tls-key", "k.pem")
    assert isinstance(given, Security) and given.require_encryption and given.tls_ca_file == "ca.pem"
    assert {getattr(given, f"tls_{r}_cert") for r in tls.ROLES} == {"c.pem"}
    assert {getattr(given, f"tls_{r}_key") for r in tls.ROLES} == {"k.pem"}
    with pytest.raises(SystemExit, match="go together"):
        sec("--tls-cert", "c.pem")
    with pytest.raises(SystemExit, match="exclude each other"):
        sec("--no-tls", "--tls-ca-file", "ca.pem")


# -- credentials and private files ---------------------------------------------------------
def test_fresh_credentials_chain_to_one_authority_that_signed_nothing_else():
    from cryptography import x509
    a, b = tls.fresh(), tls.fresh()
    assert a.require_encryption and a.tls_ca_file != b.tls_ca_file
    ca = x509.load_pem_x509_certificate(a.tls_ca_file.encode())
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    for role in tls.ROLES:
        cert = x509.load_pem_x509_certificate(getattr(a, f"tls_{role}_cert").encode())
        cert.verify_directly_issued_by(ca)
        assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        other = x509.load_pem_x509_certificate(getattr(b, f"tls_{role}_cert").encode())
        with pytest.raises(Exception):
            other.verify_directly_issued_by(ca)
    assert len({getattr(a, f"tls_{r}_key") for r in tls.ROLES}) == 3


def test_private_files_are_0600_and_someone_elses_file_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "scheduler.json"
    monkeypatch.setattr(os, "umask", os.umask)
    old = os.umask(0)
    try:
        tls.write_private(path, "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    tls.write_private(path, '{"a": 1}')            # our own stale file is replaced, still 0600
    assert path.read_text() == '{"a": 1}' and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    real_lstat = os.lstat

    class Foreign:
        st_uid = os.getuid() + 1
        st_mode = stat.S_IFREG | 0o644

    monkeypatch.setattr(os, "lstat", lambda p: Foreign() if os.fspath(p) == str(path) else real_lstat(p))
    with pytest.raises(PermissionError, match=r"scheduler.json exists and belongs to uid .*not to you"):
        tls.write_private(path, "{}")
    assert path.read_text() == '{"a": 1}'


def test_credentials_readable_by_others_are_refused(tmp_path):
    path = tmp_path / "s.json.credentials.json"
    tls.write_client_credentials(path, tls.fresh())
    assert tls.read_client_credentials(path).tls_client_cert.startswith("-----BEGIN CERTIFICATE")
    os.chmod(path, 0o644)
    with pytest.raises(PermissionError, match=r"mode 0644.*chmod 600"):
        tls.read_client_credentials(path)


# -- under MPI -------------------------------------------------------------------------------
def _lines(proc):
    """A queue of ``proc``'s stdout lines, read in a daemon thread (None at the end)."""
    q = queue.Queue()

    def pump():
        for ln in proc.stdout:
            q.put(ln)
        q.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return q


def _wait_for(q, prefix, seen, timeout=240):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            ln = q.get(timeout=1)
        except queue.Empty:
            continue
        if ln is None:
            break
        seen.append(ln)
        if ln.startswith(prefix):
            return json.loads(ln[len(prefix):])
    raise AssertionError(f"no {prefix!r} line within {timeout} s:\n" + "".join(seen[-80:]))


def _stop(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, 9)
        proc.wait()


def test_initialize_under_mpi_refuses_intruders(tmp_path):
    go = tmp_path / "go"
    proc = mpiexec(4, [os.path.join(ROOT, "tests", "mpi_scripts", "secure_initialize.py"), str(go)], popen=True,
                   env={"EAGLE_DASK_PROGRESS": "0"})
    seen = []
    try:
        q = _lines(proc)
        ready = _wait_for(q, "READY ", seen)
        assert ready["scheduler"].startswith("tls://127.0.0.1:")
        ports = ports_of(process_tree(proc.pid))
        assert scheduler_port(ready["scheduler"]) in ports
        attempts, markers, http = intrude(tmp_path, ports, HOSTILE)
        go.write_text("")
        res = _wait_for(q, "RESULT ", seen, timeout=120)
        assert proc.wait(timeout=120) == 0, "".join(seen[-80:])
    finally:
        _stop(proc)
    assert_all_refused(attempts, markers, ports, HOSTILE, http, dask_ports=3)   # scheduler, 2 workers
    assert res["same"] is True
    assert len(res["workers"]) == 2
    places = res["places"]                  # each rank's files in a 0700 directory of its own, removed at exit
    assert len(places) == 3 and all(d.count("/dask-scratch-space/") == 1 for d in res["dirs"]), res["dirs"]
    assert all(os.path.basename(p).startswith("eagle-dask-") and int(m, 8) == 0o40700 for p, m in places.items())
    assert [p for p in places if os.path.exists(p)] == []


def _cluster(tmp_path, *flags):
    sched = tmp_path / "scheduler.json"
    proc = mpiexec(3, ["-m", "eagle_dask", "cluster", "--scheduler-file", str(sched), *flags], popen=True)
    end = time.monotonic() + 180
    while not sched.exists() and proc.poll() is None and time.monotonic() < end:
        time.sleep(0.2)
    assert sched.exists(), proc.stdout.read() if proc.poll() is not None else "no scheduler file"
    plain = "--no-tls" in flags
    with eagle_dask.connect(sched, security=False if plain else None) as client:   # workers join after the file
        client.wait_for_workers(2, timeout=180)
    return proc, sched


def test_cluster_command_refuses_intruders_and_connect_gets_in(tmp_path):
    from distributed import Client
    proc, sched = _cluster(tmp_path)
    try:
        creds = tls.credentials_path(sched)
        assert stat.S_IMODE(os.stat(sched).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(creds).st_mode) == 0o600
        address = json.loads(sched.read_text())["address"]          # what a reader of the file learns
        assert address.startswith("tls://127.0.0.1:")
        with eagle_dask.connect(sched) as client:
            client.wait_for_workers(2, timeout=180)
            assert [w.name for w in eagle_dask.DaskPartition.on(client).ranks().values()] == [1, 2]
            assert same_bits_on(client)
            ports = ports_of(process_tree(proc.pid)) | {scheduler_port(address)}
            attempts, markers, http = intrude(tmp_path, ports, HOSTILE)
            assert_all_refused(attempts, markers, ports, HOSTILE, http, dask_ports=3)
            t = time.monotonic()
            with pytest.raises(Exception):
                Client(scheduler_file=str(sched), timeout=5)            # without credentials
            assert time.monotonic() - t < REFUSED_WITHIN_S
            # the control: the same intruder with the credentials file runs its code
            attempts, markers, _ = intrude(tmp_path, {scheduler_port(address)}, ["credentials"], str(creds),
                                           "control")
            assert [a["how"] for a in attempts if a["ok"]] == ["client", "raw"], attempts
            assert len(markers) == 2 + 1 + 1 + 1, markers    # run on both workers, submit, scheduler, raw
            places = private_places(client)
            client.shutdown()
        assert proc.wait(timeout=120) == 0, proc.stdout.read()
        assert not sched.exists() and not os.path.exists(creds)
        assert [p for p in places if os.path.exists(p)] == []      # each rank's directory removed at the end
    finally:
        _stop(proc)


@pytest.mark.parametrize("plain", [False, True], ids=["tls", "no-tls"])
def test_info_uses_the_credentials_and_aligns_its_columns(tmp_path, plain):
    proc, sched = _cluster(tmp_path, "--no-dashboard", *(["--no-tls"] if plain else []))
    try:
        assert stat.S_IMODE(os.stat(sched).st_mode) == 0o600
        assert os.path.exists(tls.credentials_path(sched)) is not plain
        scheme = "tcp" if plain else "tls"
        assert json.loads(sched.read_text())["address"].startswith(f"{scheme}://127.0.0.1:")
        out = subprocess.run([sys.executable, "-m", "eagle_dask", "info", "--scheduler-file", str(sched),
                              *(["--no-tls"] if plain else [])],
                             capture_output=True, text=True, timeout=180, cwd=ROOT, env=loopback_env())
        assert out.returncode == 0, out.stdout + out.stderr
        lines = out.stdout.splitlines()
        table = lines[lines.index(next(ln for ln in lines if ln.startswith("rank"))):]
        assert len(table) == 3
        assert all(f" {scheme}://127.0.0.1:" in row for row in table[1:]), table
        for col in ("name", "host", "address", "GPU"):     # each header starts where its column does
            at = table[0].index(col)
            assert all(row[at - 2:at] == "  " and row[at] != " " for row in table[1:]), table
        with eagle_dask.connect(sched, security=False if plain else None) as client:
            client.shutdown()
        assert proc.wait(timeout=120) == 0
    finally:
        _stop(proc)
