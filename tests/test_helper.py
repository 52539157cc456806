"""The helper thread's copies (``eagle.helper.copy_split``): every byte of every plane copied, half
of them on the helper thread; a busy helper's half copied by the caller; no copy going on after
the call, even when the caller's half raises; the helper's errors raised to the caller."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import eagle.helper as helper


def _planes(rng, shapes):
    return [rng.uniform(-1, 1, s) for s in shapes]


SHAPES = {
    "small": [(7,), (3, 2), (1,)],
    "large, odd lengths": [(300_001,), (100_003, 3), (1,), (2,)],
    "one large plane": [(helper.SPLIT_FROM // 8 + 1,)],
}


@pytest.mark.parametrize("case", sorted(SHAPES))
def test_every_byte_is_copied(case):
    rng = np.random.default_rng(5)
    src = _planes(rng, SHAPES[case])
    dst = [np.full_like(s, np.nan) for s in src]
    helper.copy_split(zip(dst, src))
    for d, s in zip(dst, src):
        assert d.tobytes() == s.tobytes()


def test_a_large_copy_is_shared_with_the_helper_thread(monkeypatch):
    seen = []
    real = helper._copy
    monkeypatch.setattr(helper, "_copy", lambda pairs: seen.append((threading.get_ident(), sum(
        int(d.nbytes) for d, _ in pairs))) or real(pairs))
    src = _planes(np.random.default_rng(6), [(400_000,), (400_001,)])
    dst = [np.zeros_like(s) for s in src]
    helper.copy_split(zip(dst, src))
    assert all(d.tobytes() == s.tobytes() for d, s in zip(dst, src))
    threads = {t for t, _ in seen}
    assert len(threads) == 2 and threading.get_ident() in threads, "not shared between two threads"
    here = sum(b for t, b in seen if t == threading.get_ident())
    assert abs(here - sum(int(d.nbytes) for d in dst) / 2) <= 16, "not cut in halves"


def test_a_busy_helpers_half_is_copied_by_the_caller():
    gate = threading.Event()
    helper.soon(lambda: gate.wait(30))                        # the helper is busy with earlier work
    try:
        src = _planes(np.random.default_rng(7), [(600_001,)])
        dst = [np.zeros_like(src[0])]
        t = time.monotonic()
        helper.copy_split(zip(dst, src))
        assert time.monotonic() - t < 5, "it waited for the busy helper"
        assert dst[0].tobytes() == src[0].tobytes()
    finally:
        gate.set()
    helper.soon(lambda: None).result(timeout=30)


def test_no_copy_goes_on_after_the_callers_half_raised(monkeypatch):
    """The caller's half fails (a Ctrl-C in the driver) once the helper's half has started: that
    half, slow, has ended by the time the error reaches the caller."""
    real, main, begun = helper._copy, threading.get_ident(), threading.Event()

    def copy(pairs):
        if threading.get_ident() == main:
            begun.wait(10)
            raise KeyboardInterrupt
        begun.set()
        time.sleep(0.5)
        real(pairs)
    monkeypatch.setattr(helper, "_copy", copy)
    src = _planes(np.random.default_rng(8), [(400_000,)])
    dst = [np.zeros_like(src[0])]
    with pytest.raises(KeyboardInterrupt):
        helper.copy_split(zip(dst, src))
    half = dst[0].shape[0] // 2
    assert dst[0][:half].tobytes() == src[0][:half].tobytes(), "the helper's half was still being copied"
    assert not dst[0][half:].any()


def test_an_error_on_the_helper_reaches_the_caller(monkeypatch):
    real, main = helper._copy, threading.get_ident()

    def copy(pairs):
        if threading.get_ident() != main:
            raise MemoryError("the helper's half")
        real(pairs)
    monkeypatch.setattr(helper, "_copy", copy)
    src = [np.ones(400_000), np.ones(400_000)]
    with pytest.raises(MemoryError, match="the helper's half"):
        helper.copy_split(zip([np.zeros(400_000), np.zeros(400_000)], src))
