"""The disk cache runs code as its owner, so it is private and checked before anything runs.

A cache directory others may write is refused (the default one repaired); a cached module edited
on disk is never imported; a module is published only once it has fully run, whatever the number
of threads making the first run at once; and processes compiling the same kernel on one host
compile it once.  Each run is checked against numpy.
"""
from __future__ import annotations

import glob
import json
import os
import stat
import subprocess
import sys
import time

import numpy as np
import pytest

import eagle
import eagle.cache
import eagle.exec as eexec
from eagle import In, Out
from eagle import plan as eplan

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# a kernel of its own per script (a fresh name: nothing of it is in any cache yet)
KERNEL = """
import json, os, sys, threading
import numpy as np
import eagle, eagle.exec as eexec
from eagle import In, Out
from eagle import plan as eplan

@eagle.kernel
def {name}(i, x: In, y: Out):
    v = x[i]
    for k in range(3):
        v = v * 0.5 + 1.25
    y[i] = v

x = np.linspace(-3.0, 7.0, 1000)
want = x
for k in range(3):
    want = want * 0.5 + 1.25
plugin = eagle.deploy({name})
"""


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def _kernel_script(tmp_path, name, tail):
    path = tmp_path / f"{name}.py"
    path.write_text(KERNEL.format(name=name) + tail)
    return path


def _env(cache):
    return dict(os.environ, EAGLE_CACHE_DIR=str(cache),
                PYTHONPATH=REPO + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else ""))


@eagle.kernel
def affine(i, x: In, y: Out):
    y[i] = 3.0 * x[i] - 0.75


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o757])
def test_a_cache_directory_others_may_write_is_refused(tmp_path, monkeypatch, mode):
    cache = tmp_path / "shared"
    cache.mkdir()
    os.chmod(cache, mode)
    monkeypatch.setenv("EAGLE_CACHE_DIR", str(cache))
    with pytest.raises(PermissionError, match=rf"eagle cache directory '{cache}' is writable by .*chmod 700"):
        eagle.cache.cache_dir()
    assert _mode(cache) == mode                      # a directory the user named is not changed behind them
    assert os.listdir(cache) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="making a directory of another user needs root")
def test_a_cache_directory_of_another_user_is_refused(tmp_path, monkeypatch):
    cache = tmp_path / "theirs"
    cache.mkdir(mode=0o700)
    os.chown(cache, 12345, 12345)
    monkeypatch.setenv("EAGLE_CACHE_DIR", str(cache))
    with pytest.raises(PermissionError, match=rf"'{cache}' is owned by uid 12345, not by you"):
        eagle.cache.cache_dir()


def test_a_run_refuses_a_shared_cache_before_anything_is_written(tmp_path, monkeypatch):
    cache = tmp_path / "shared"
    cache.mkdir()
    os.chmod(cache, 0o777)
    monkeypatch.setenv("EAGLE_CACHE_DIR", str(cache))

    @eagle.kernel
    def fresh_for_shared_cache(i, x: In, y: Out):
        y[i] = x[i] * 0.25 + 7.0
    with pytest.raises(PermissionError, match="chmod 700"):
        eplan.plan(eagle.deploy(fresh_for_shared_cache), structure=eexec.HostTeam).run(x=np.ones(4))
    assert os.listdir(cache) == []


def test_the_default_cache_is_created_private_and_repaired(tmp_path, monkeypatch):
    monkeypatch.delenv("EAGLE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    old = os.umask(0)                                # the most permissive umask there is
    try:
        made = eagle.cache.cache_dir()
    finally:
        os.umask(old)
    assert made == str(tmp_path / "xdg" / "eagle")
    assert _mode(made) == 0o700 and _mode(os.path.join(made, "__pycache__")) == 0o700
    os.chmod(made, 0o777)
    assert eagle.cache.cache_dir() == made and _mode(made) == 0o700


def test_a_named_cache_is_created_0700_under_any_umask(tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE_CACHE_DIR", str(tmp_path / "new" / "cache"))
    old = os.umask(0)
    try:
        made = eagle.cache.cache_dir()
    finally:
        os.umask(old)
    assert _mode(made) == 0o700 and _mode(os.path.join(made, "__pycache__")) == 0o700


def test_an_edited_cached_module_is_never_imported(tmp_path, python):
    cache = tmp_path / "cache"
    marker = tmp_path / "PLANTED"
    script = _kernel_script(tmp_path, "planted_target", """
out = eplan.plan(plugin, structure=eexec.HostTeam).run(x=x)
print(json.dumps({"same": bool(np.array_equal(out.view(np.uint64), want.view(np.uint64)))}))
""")
    assert json.loads(python(script, cache=cache).splitlines()[-1]) == {"same": True}
    modules = glob.glob(str(cache / "eagle_host_planted_target_*.py"))
    assert modules
    for path in modules:                              # what a user who could write the cache would do
        with open(path, "a") as f:
            f.write(f"\n__import__('os').system('touch {marker}')\n")
    assert json.loads(python(script, cache=cache).splitlines()[-1]) == {"same": True}
    assert not marker.exists()
    for path in modules:                              # the edited file was replaced
        assert "touch" not in open(path).read()
    # numba's own cache files lie in the private directory, nowhere else
    numba_files = glob.glob(str(tmp_path / "**" / "*.nb[ic]"), recursive=True)
    assert numba_files and all(os.path.dirname(f) == str(cache / "__pycache__") for f in numba_files)
    assert _mode(cache) == 0o700 and _mode(cache / "__pycache__") == 0o700


THREADS = """
barrier = threading.Barrier(8, timeout=120)
results = [None] * 8

def first_run(k):
    barrier.wait()
    try:
        out = eplan.plan(plugin, structure=eexec.HostTeam).run(x=x)
        results[k] = bool(np.array_equal(out.view(np.uint64), want.view(np.uint64)))
    except Exception as e:
        results[k] = f"{type(e).__name__}: {e}"

threads = [threading.Thread(target=first_run, args=(k,)) for k in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join(timeout=240)
print(json.dumps(results))
"""


def test_eight_threads_making_the_first_run_at_once(tmp_path, python):
    """A fresh process, a fresh kernel: the module is published only once it has fully run."""
    cache = tmp_path / "cache"
    script = _kernel_script(tmp_path, "raced_kernel", THREADS)
    for attempt in range(3):                          # a cold cache, then warm ones (a faster load)
        assert json.loads(python(script, cache=cache).splitlines()[-1]) == [True] * 8, attempt


PROCESS = """
while not os.path.exists(sys.argv[1]):            # every process ready, then all at once
    import time; time.sleep(0.01)
out = eplan.plan(plugin, structure=eexec.HostTeam).run(x=x)
stats = eagle.host.host_entry(plugin).loop.stats
print(json.dumps({"same": bool(np.array_equal(out.view(np.uint64), want.view(np.uint64))),
                  "compiled": sum(stats.cache_misses.values()), "loaded": sum(stats.cache_hits.values())}))
"""


def test_processes_on_one_host_compile_a_kernel_once(tmp_path):
    """Processes started at once on an empty cache (Dask workers of one host): numba's own count
    says one of them compiled the kernel, and the others loaded it from the cache."""
    cache, go = tmp_path / "cache", tmp_path / "go"
    script = _kernel_script(tmp_path, "compiled_once", "import eagle.host\n" + PROCESS)
    procs = [subprocess.Popen([sys.executable, str(script), str(go)], env=_env(cache), cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    time.sleep(3.0)                                   # past their imports and deploys
    go.touch()
    reports = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        reports.append(json.loads(out.splitlines()[-1]))
    assert all(r["same"] for r in reports), reports
    assert sorted(r["compiled"] for r in reports) == [0, 0, 1], reports
    assert sorted(r["loaded"] for r in reports) == [0, 1, 1], reports


def test_a_compile_lock_held_too_long_is_a_clear_timeout(tmp_path, monkeypatch):
    import fcntl
    monkeypatch.setenv("EAGLE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("EAGLE_COMPILE_WAIT", "0.5")
    plugin = eagle.deploy(affine)
    module = eagle.host.host_entry(plugin).module
    lock = os.path.splitext(module.__file__)[0] + ".lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)    # another process compiling it
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match=rf"module {module.__name__}: waited 0.5 s .*EAGLE_COMPILE_WAIT"):
            with eagle.cache.compile_lock(module):
                pass
        assert time.monotonic() - t0 < 5.0
    finally:
        os.close(fd)
    with eagle.cache.compile_lock(module):            # released: taken at once
        pass


HOLDER = """
out = eplan.plan(plugin, structure=eexec.HostTeam).run(x=x)
print("DONE" if np.array_equal(out.view(np.uint64), want.view(np.uint64)) else "WRONG", flush=True)
sys.stdin.read()                                  # alive, its lock files open, until the test closes stdin
"""

SECOND = """
out = eplan.plan(plugin, structure=eexec.HostTeam).run(x=x)   # its own first run takes the name's lock
print(json.dumps({"same": bool(np.array_equal(out.view(np.uint64), want.view(np.uint64)))}))
"""


def test_a_compile_releases_its_lock_while_its_process_lives(tmp_path):
    """A process that compiled a kernel and lives on (a Dask worker) has let go of the lock: another
    process's first run of the kernel takes it at once.  Were it kept, that run would end in eagle's
    TimeoutError naming the lock after EAGLE_COMPILE_WAIT (2 s here), not hang."""
    cache = tmp_path / "cache"
    first, second = tmp_path / "first.py", tmp_path / "second.py"
    first.write_text(KERNEL.format(name="lock_released") + HOLDER)
    second.write_text(KERNEL.format(name="lock_released") + SECOND)
    holder = subprocess.Popen([sys.executable, str(first)], env=_env(cache), cwd=tmp_path, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "DONE", holder.stderr.read() if holder.poll() is not None else ""
        t = time.monotonic()
        done = subprocess.run([sys.executable, str(second)], env=dict(_env(cache), EAGLE_COMPILE_WAIT="2"),
                              cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        assert json.loads(done.stdout.splitlines()[-1]) == {"same": True}
        assert time.monotonic() - t < 60
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)


@pytest.mark.parametrize("where, why", [("file", "a file is there"), ("under-file", "a part of the path is a file"),
                                        ("sys", "Operation not permitted")])
def test_a_cache_dir_that_cannot_be_made_names_eagle_cache_dir(tmp_path, monkeypatch, where, why):
    f = tmp_path / "a-file"
    f.write_text("not a directory")
    target = {"file": str(f), "under-file": str(f / "cache"), "sys": "/sys/eagle-cache-probe"}[where]
    monkeypatch.setenv("EAGLE_CACHE_DIR", target)
    with pytest.raises(OSError, match=rf"cache cannot be made at '{target}' \({why}\): EAGLE_CACHE_DIR='{target}'; "
                                      r"set EAGLE_CACHE_DIR to a directory of your own") as e:
        eagle.cache.cache_dir()
    assert isinstance(e.value, (NotADirectoryError, PermissionError)) and len(str(e.value)) < 300 + len(target) * 2
