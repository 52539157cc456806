"""The memory thread's copies (``eagle.memory_thread.copy_split``): every byte of every plane copied, half
of them on the memory thread; a busy memory thread's half copied by the caller; no copy going on after
the call, even when the caller's half raises; the memory thread's errors raised to the caller."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import eagle.memory_thread as mt


def _planes(rng, shapes):
    return [rng.uniform(-1, 1, s) for s in shapes]


SHAPES = {
    "small": [(7,), (3, 2), (1,)],
    "large, odd lengths": [(300_001,), (100_003, 3), (1,), (2,)],
    "one large plane": [(mt.SPLIT_FROM // 8 + 1,)],
}


@pytest.mark.parametrize("case", sorted(SHAPES))
def test_every_byte_is_copied(case):
    rng = np.random.default_rng(5)
    src = _planes(rng, SHAPES[case])
    dst = [np.full_like(s, np.nan) for s in src]
    mt.copy_split(zip(dst, src))
    for d, s in zip(dst, src):
        assert d.tobytes() == s.tobytes()


def test_a_large_copy_is_shared_with_the_memory_thread(monkeypatch):
    seen = []
    real = mt._copy
    monkeypatch.setattr(mt, "_copy", lambda pairs: seen.append((threading.get_ident(), sum(
        int(d.nbytes) for d, _ in pairs))) or real(pairs))
    src = _planes(np.random.default_rng(6), [(400_000,), (400_001,)])
    dst = [np.zeros_like(s) for s in src]
    mt.copy_split(zip(dst, src))
    assert all(d.tobytes() == s.tobytes() for d, s in zip(dst, src))
    threads = {t for t, _ in seen}
    assert len(threads) == 2 and threading.get_ident() in threads, "not shared between two threads"
    here = sum(b for t, b in seen if t == threading.get_ident())
    assert abs(here - sum(int(d.nbytes) for d in dst) / 2) <= 16, "not cut in halves"


def test_a_busy_memory_threads_half_is_copied_by_the_caller():
    gate = threading.Event()
    mt.soon(lambda: gate.wait(30))                        # the memory thread is busy with earlier work
    try:
        src = _planes(np.random.default_rng(7), [(600_001,)])
        dst = [np.zeros_like(src[0])]
        t = time.monotonic()
        mt.copy_split(zip(dst, src))
        assert time.monotonic() - t < 5, "it waited for the busy memory thread"
        assert dst[0].tobytes() == src[0].tobytes()
    finally:
        gate.set()
    mt.soon(lambda: None).result(timeout=30)


def test_no_copy_goes_on_after_the_callers_half_raised(monkeypatch):
    """The caller's half fails (a Ctrl-C in the driver) once the memory thread's half has started: that
    half, slow, has ended by the time the error reaches the caller."""
    real, main, begun = mt._copy, threading.get_ident(), threading.Event()

    def copy(pairs):
        if threading.get_ident() == main:
            begun.wait(10)
            raise KeyboardInterrupt
        begun.set()
        time.sleep(0.5)
        real(pairs)
    monkeypatch.setattr(mt, "_copy", copy)
    src = _planes(np.random.default_rng(8), [(400_000,)])
    dst = [np.zeros_like(src[0])]
    with pytest.raises(KeyboardInterrupt):
        mt.copy_split(zip(dst, src))
    half = dst[0].shape[0] // 2
    assert dst[0][:half].tobytes() == src[0][:half].tobytes(), "the memory thread's half was still being copied"
    assert not dst[0][half:].any()


def test_an_error_on_the_memory_thread_reaches_the_caller(monkeypatch):
    real, main = mt._copy, threading.get_ident()

    def copy(pairs):
        if threading.get_ident() != main:
            raise MemoryError("the memory thread's half")
        real(pairs)
    monkeypatch.setattr(mt, "_copy", copy)
    src = [np.ones(400_000), np.ones(400_000)]
    with pytest.raises(MemoryError, match="the memory thread's half"):
        mt.copy_split(zip([np.zeros(400_000), np.zeros(400_000)], src))
