"""A scheduler file is trusted only when it is the user's: yours, not a link, mode 0600, ``tls://``.

The attacker (uid 65534, through ``setpriv``) writes the scheduler file first, in a directory
everyone may write to (like ``/tmp``), naming a ``tcp://`` address it listens on.  ``connect(F)`` and
``eagle-dask info --scheduler-file F`` must refuse it by name before connecting: the listener the file
names must see no connection at all (nothing is sent to it, nothing from it is unpickled).
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time

import pytest

pytest.importorskip("distributed")
pytest.importorskip("cryptography")

import eagle_dask  # noqa: E402
from eagle_dask import security as tls  # noqa: E402
from tests.launch import ROOT, loopback_env  # noqa: E402

NOBODY = 65534
as_other_user = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                   reason="acting as another local user needs root and setpriv")


def as_nobody(code):
    subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", sys.executable, "-c",
                    code], check=True, timeout=60, env={"PATH": os.environ.get("PATH", "")})


@pytest.fixture
def shared_dir():
    d = tempfile.mkdtemp(prefix="eagle-shared-")
    os.chmod(d, 0o1777)                     # like /tmp: everyone may create files here
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def attacker():
    """A listening socket standing for the attacker's scheduler: it must never be connected to."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(4)
    yield s
    s.close()


def assert_never_contacted(listener):
    listener.settimeout(0.5)
    with pytest.raises(socket.timeout):
        listener.accept()


@as_other_user
@pytest.mark.parametrize("security", [None, False], ids=["default", "security-False"])
def test_scheduler_file_written_first_by_another_user_is_refused_before_connecting(shared_dir, attacker,
                                                                                    security):
    sched = os.path.join(shared_dir, "scheduler.json")
    addr = f"tcp://127.0.0.1:{attacker.getsockname()[1]}"
    as_nobody(f"import json, os\nfd = os.open({sched!r}, os.O_WRONLY | os.O_CREAT, 0o600)\n"
              f"os.write(fd, json.dumps({{'address': {addr!r}}}).encode())")
    assert os.stat(sched).st_uid == NOBODY and stat.S_IMODE(os.stat(sched).st_mode) == 0o600
    t = time.monotonic()
    with pytest.raises(PermissionError, match=rf"the scheduler file {sched} is mode 0600, owned by uid {NOBODY}: "
                                              r"it must be yours.*not trusted"):
        eagle_dask.connect(sched, timeout=5, security=security)
    assert time.monotonic() - t < 2
    assert_never_contacted(attacker)


@as_other_user
def test_info_refuses_a_scheduler_file_of_another_user(shared_dir, attacker):
    sched = os.path.join(shared_dir, "scheduler.json")
    addr = f"tcp://127.0.0.1:{attacker.getsockname()[1]}"
    as_nobody(f"import json\nopen({sched!r}, 'w').write(json.dumps({{'address': {addr!r}}}))")
    for extra in ([], ["--no-tls"]):
        out = subprocess.run([sys.executable, "-m", "eagle_dask", "info", "--scheduler-file", sched, *extra],
                             capture_output=True, text=True, timeout=120, cwd=ROOT, env=loopback_env())
        assert out.returncode != 0
        assert f"the scheduler file {sched} is mode 0644, owned by uid {NOBODY}" in out.stderr, out.stderr[-2000:]
    assert_never_contacted(attacker)


def _own_file(path, address, mode=0o600):
    tls.write_private(path, json.dumps({"address": address}))
    os.chmod(path, mode)


def test_own_scheduler_file_with_a_tcp_address_is_refused_without_security_false(tmp_path, attacker):
    sched = tmp_path / "scheduler.json"
    _own_file(sched, f"tcp://127.0.0.1:{attacker.getsockname()[1]}")
    with pytest.raises(PermissionError, match=r"names tcp://127.0.0.1:\d+, not a tls:// address.*security=False"):
        eagle_dask.connect(sched, timeout=5)
    assert_never_contacted(attacker)


def test_own_scheduler_file_readable_by_others_or_a_link_is_refused(tmp_path, attacker):
    sched = tmp_path / "scheduler.json"
    _own_file(sched, f"tls://127.0.0.1:{attacker.getsockname()[1]}", mode=0o640)
    with pytest.raises(PermissionError, match=r"is mode 0640, owned by uid \d+: it must be yours and readable by "
                                              r"you only"):
        eagle_dask.connect(sched, timeout=5)
    good = tmp_path / "good.json"
    _own_file(good, f"tls://127.0.0.1:{attacker.getsockname()[1]}")
    link = tmp_path / "link.json"
    link.symlink_to(good)
    with pytest.raises(PermissionError, match=r"the scheduler file .*link.json is a symbolic link: it is not "
                                              r"followed"):
        eagle_dask.connect(link, timeout=5)
    assert_never_contacted(attacker)


def test_credentials_file_readable_by_group_is_refused(tmp_path):
    path = tmp_path / "s.json.credentials.json"
    tls.write_client_credentials(path, tls.fresh())
    os.chmod(path, 0o640)
    with pytest.raises(PermissionError, match=r"credentials file .* is mode 0640.*readable by you only"):
        tls.read_client_credentials(path)


def test_credentials_file_is_0600_from_the_moment_it_is_created(tmp_path, monkeypatch):
    """Not created wider and tightened after: the mode on the descriptor open returns is 0600."""
    seen = []
    real_open = os.open

    def spy(path, flags, mode=0o777, **kw):
        fd = real_open(path, flags, mode, **kw)
        if flags & os.O_CREAT:
            seen.append(stat.S_IMODE(os.fstat(fd).st_mode))
        return fd

    monkeypatch.setattr(os, "open", spy)
    old = os.umask(0)
    try:
        tls.write_client_credentials(tmp_path / "c.json", tls.fresh())
    finally:
        os.umask(old)
    assert seen == [0o600]


def test_connect_given_an_address_without_credentials_says_what_to_pass():
    t = time.monotonic()
    with pytest.raises(ValueError, match=r"connect\('tls://127.0.0.1:1'\): an address carries no credentials: "
                                         r"pass the scheduler file"):
        eagle_dask.connect("tls://127.0.0.1:1")
    assert time.monotonic() - t < 2
