"""``eagle_dask.pinned``: a GPU worker registers its mapping of the arena as pinned memory once.

Without a GPU the registration itself is numba's (``Context.mempin``) and is replaced here by a
recorder: what is checked is eagle's side -- one registration per arena and device across runs,
a new arena of the same driver replacing (and letting go of) the old one, a refusal or the
simulator's context costing nothing but the speed.  On a real GPU (marked ``gpu``) a
``DeviceKernel`` run through local workers leaves the arena pinned on each of them, with the bits
of one process.
"""
from __future__ import annotations

import gc
import shutil
import weakref

import numpy as np
import pytest

from eagle_dask import pinned
from eagle_dask.shm import SegmentId


class _Pin:
    """What numba's ``mempin`` returns: kept alive while registered."""


@pytest.fixture
def registrations(monkeypatch):
    calls = []

    def register(buf, device):
        calls.append((len(buf), device))
        return _Pin()
    monkeypatch.setattr(pinned, "_register", register)
    monkeypatch.setattr(pinned, "_PINNED", {})
    return calls


def _seg(name, ino, size=1 << 16):
    return SegmentId(name=name, dev=1, ino=ino, size=size, uid=0)


def test_an_arena_is_registered_once_per_device_and_replaced_by_the_next(registrations):
    a = _seg("eagle-11-aaaa", 1)
    buf = bytearray(a.size)
    assert pinned.pin_arena(a, buf, 0) and pinned.pin_arena(a, buf, 0) and pinned.pin_arena(a, buf, None)
    assert registrations == [(a.size, 0)], "registered again for the same arena and device"
    assert pinned.pin_arena(a, buf, 1) and registrations[-1] == (a.size, 1)
    old = weakref.ref(pinned._PINNED[("eagle-11", 0)][1])
    b = _seg("eagle-11-bbbb", 2, 1 << 17)                     # the same driver's new, larger arena
    assert pinned.pin_arena(b, bytearray(b.size), 0)
    gc.collect()
    assert old() is None, "the replaced arena's registration was kept (its mapping could not close)"
    assert pinned.registered() == [("eagle-11-aaaa", 1), ("eagle-11-bbbb", 0)]
    other = _seg("eagle-12-cccc", 3)                          # another driver's arena: its own
    assert pinned.pin_arena(other, bytearray(other.size), 0)
    assert len(pinned.registered()) == 3


def test_a_refused_registration_leaves_pageable_uploads(monkeypatch):
    monkeypatch.setattr(pinned, "_PINNED", {})

    def refuse(buf, device):
        raise RuntimeError("cuMemHostRegister: out of memory")
    monkeypatch.setattr(pinned, "_register", refuse)
    a = _seg("eagle-13-dddd", 4)
    assert pinned.pin_arena(a, bytearray(a.size), 0) is False
    assert pinned.registered() == []
    monkeypatch.setattr(pinned, "_register", lambda buf, device: None)      # the simulator's context
    assert pinned.pin_arena(a, bytearray(a.size), 0) is False and pinned.registered() == []


def _has_gpu() -> bool:
    if not shutil.which("nvidia-smi"):
        return False
    try:
        from numba import cuda
        return cuda.is_available() and len(cuda.gpus) > 0
    except Exception:  # noqa: BLE001 - no numba-cuda, no driver
        return False


@pytest.mark.gpu
@pytest.mark.skipif(not _has_gpu(), reason="needs an NVIDIA GPU")
def test_a_device_run_through_local_workers_pins_the_arena():
    import eagle
    import eagle.exec as eexec
    import eagle_dask
    from eagle import plan as eplan
    from eagle_dask import DaskPartition
    from tests import kernels as K
    plugin = eagle.deploy(K.axpb)
    d = K.inputs("axpb", 100_003)
    with eagle_dask.local_cluster(n_workers=1) as client:
        got = eplan.plan(plugin, structure=DaskPartition.on(client, progress=False),
                         inner=eexec.DeviceKernel).run(**d)
        pins = client.run(pinned.registered)
    assert K.same_bits(d["a"] * d["x"] + d["b"], got)
    assert all(any(name.startswith("eagle-") for name, _ in p) for p in pins.values()), pins
