"""Pages faulted in before they are written (``eagle.prefault``): the memory is there after
``populate`` (the process's resident size grows by the array), the contents are unchanged, the
arrays it must leave alone are left alone, ``populate_soon`` does it on a helper thread; the host engine asks for the share of each plane a run
writes, and only those.
"""
from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

import eagle
import eagle.exec as eexec
import eagle.host as host
import eagle.prefault as prefault
from eagle import plan as eplan
from eagle.models import oscillator
from eagle.prefault import MIN_BYTES, populate

psutil = pytest.importorskip("psutil")
linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MADV_POPULATE_WRITE is Linux's")


def _kernel_has_populate():
    release = tuple(int(p) for p in __import__("platform").release().split(".")[:2] if p.isdigit())
    return release >= (5, 14)


@linux
@pytest.mark.skipif(not _kernel_has_populate(), reason="MADV_POPULATE_WRITE needs Linux 5.14")
def test_a_fresh_array_is_resident_after_populate_and_unchanged():
    size = 64 << 20
    fresh = np.zeros(size // 8)                     # calloc'd: no page of it is there yet
    before = psutil.Process().memory_info().rss
    assert populate(fresh)
    grew = psutil.Process().memory_info().rss - before
    assert grew > 0.9 * size, f"resident size grew by {grew} bytes, not about {size}"
    assert not fresh.any()
    data = np.random.default_rng(1).uniform(size=size // 8)
    copy = data.copy()
    assert populate(data)
    assert np.array_equal(data.view(np.uint8), copy.view(np.uint8))


@linux
@pytest.mark.skipif(not _kernel_has_populate(), reason="MADV_POPULATE_WRITE needs Linux 5.14")
def test_populate_soon_faults_the_pages_in_on_another_thread():
    size = 32 << 20
    fresh = [np.zeros(size // 8), np.zeros(size // 8)]
    left = np.zeros(MIN_BYTES // 8 - 1)                       # too small: left alone, not counted
    threads = []
    real = prefault.populate
    seen = lambda a: threads.append(threading.get_ident()) or real(a)  # noqa: E731
    before = psutil.Process().memory_info().rss
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(prefault, "populate", seen)
        assert prefault.populate_soon(iter(fresh + [left])).result(timeout=30) == 2
    grew = psutil.Process().memory_info().rss - before
    assert grew > 0.9 * 2 * size, f"resident size grew by {grew} bytes, not about {2 * size}"
    assert len(threads) == 3 and threading.get_ident() not in threads, "not on a helper thread"
    assert not fresh[0].any() and not fresh[1].any() and not left.any()


@pytest.mark.parametrize("what", ["small", "read-only", "strided"])
def test_arrays_it_must_leave_alone(what):
    if what == "small":
        a = np.zeros(MIN_BYTES // 8 - 1)
    elif what == "read-only":
        a = np.frombuffer(bytes(4 * MIN_BYTES), dtype=np.float64)
    else:
        a = np.zeros((1024, 1024))[:, ::2]
    before = a.copy()
    assert populate(a) is False
    assert np.array_equal(a, before)


def test_the_host_engine_populates_the_share_of_the_planes_it_writes(monkeypatch):
    asked = []
    monkeypatch.setattr(host, "populate", lambda a: asked.append((a.ctypes.data, a.nbytes)) or True)
    n = 5000
    d = {"omega": np.linspace(0.5, 2.0, n), "dt": 1e-3, "steps": 3, "x": np.ones(n), "v": np.zeros(n)}
    entry = host.host_entry(eagle.deploy(oscillator))
    entry.run(d, 1024, 3008, po=0)
    want = {(d[k][1024:3008].ctypes.data, d[k][1024:3008].nbytes) for k in ("x", "v")}
    assert set(asked) == want, "not exactly the written planes' shares were populated"
    asked.clear()
    share = {k: (v[1024:3008] if isinstance(v, np.ndarray) else v) for k, v in d.items()}
    entry.run(share, 1024, 3008, po=1024)                 # planes that start at sample 1024
    assert set(asked) == {(share[k].ctypes.data, share[k].nbytes) for k in ("x", "v")}


def test_a_run_on_fresh_planes_has_numpys_bits():
    n = 300_001
    d = {"omega": np.random.default_rng(2).uniform(0.5, 2.0, n), "dt": 1e-3, "steps": 5, "x": np.zeros(n) + 1.0,
         "v": np.zeros(n)}
    from tests import kernels as K
    want = K.oscillator_numpy({k: (np.copy(v) if isinstance(v, np.ndarray) else v) for k, v in d.items()})
    got = K.as_dict(eagle.deploy(oscillator), eplan.plan(oscillator, structure=eexec.HostTeam).run(**d))
    assert K.same_bits(want, got)


def test_a_lazy_blocks_copy_of_an_output_plane_is_populated_then_filled(monkeypatch):
    """A lazy block copies every plane it writes (its chunks may be read again): the copy's pages
    are asked for at once, before it is filled, and it holds the chunk's bytes."""
    import eagle_dask.task as task
    asked = []
    chunk = np.random.default_rng(4).uniform(size=MIN_BYTES // 8 * 3)
    monkeypatch.setattr(task, "populate", lambda a: asked.append((a.ctypes.data, a.nbytes,
                                                                  a.tobytes() == chunk.tobytes())) or True)
    copy = task._copy(chunk)
    assert copy.tobytes() == chunk.tobytes() and copy.ctypes.data != chunk.ctypes.data
    assert asked == [(copy.ctypes.data, copy.nbytes, False)], "not populated before it was filled"
