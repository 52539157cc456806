"""A second thread for a process's memory work: copies cut in two, pages asked for ahead.

A Dask run's driver copies the caller's planes into shared memory before its blocks can start,
and the results back once they have finished; meanwhile the workers wait, and a core of the
machine is idle.  ``copy_split`` copies the first half of every plane on the memory thread and
the second half on the caller's, at once (numpy releases the GIL for a copy of numbers):
24 MB in about half the time on a machine of two cores.  ``soon`` runs other work there (the
pages of the caller's output planes, ``eagle.prefault.populate_soon``).

One such thread per process, made at the first call; it runs one piece of work at a time, in order.
Copies below ``SPLIT_FROM`` bytes in all are made on the caller's thread alone (handing work to
a thread costs tens of microseconds).
"""
from __future__ import annotations

import concurrent.futures
import threading

import numpy as np

#: bytes below which ``copy_split`` copies everything on the caller's thread
SPLIT_FROM = 2 << 20
#: seconds ``copy_split`` waits for the memory thread's half once its own is done (a copy in memory:
#: past it the process is swapping, or stopped)
BOUND = 60.0

_thread = None
_thread_lock = threading.Lock()


def soon(fn) -> concurrent.futures.Future:
    """Run ``fn()`` on the memory thread, after the work handed to it before; a Future of its result."""
    global _thread
    with _thread_lock:
        if _thread is None:
            _thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="eagle-memory")
    return _thread.submit(fn)


def _halves(pairs):
    first, second = [], []
    for dst, src in pairs:
        if np.ndim(dst) == 0 or dst.shape[0] < 2:
            second.append((dst, src))
            continue
        h = dst.shape[0] // 2
        first.append((dst[:h], src[:h]))
        second.append((dst[h:], src[h:]))
    return first, second


def _copy(pairs):
    for dst, src in pairs:
        np.copyto(dst, src)


def _wait(fut, bound):
    done, _ = concurrent.futures.wait([fut], timeout=bound)
    if not done:
        raise TimeoutError(f"a copy of planes on the memory thread did not end within {bound:g} s (the process is "
                           "swapping, or was stopped)")
    fut.result()


def copy_split(pairs, bound=BOUND):
    """``np.copyto(dst, src)`` for every ``(dst, src)`` of ``pairs`` (same shapes), the first half
    of each pair's rows on the memory thread while this one copies the second half.  Returns once
    every byte is copied.  When the memory thread is still busy with earlier work as this thread ends
    its half, this thread copies the other half too.  When this thread's half raises (Ctrl-C),
    the memory thread's half is taken back if it has not started, else waited for (within ``bound``
    seconds), so that no copy goes on after the call."""
    pairs = list(pairs)
    if sum(int(dst.nbytes) for dst, _ in pairs) < SPLIT_FROM:
        _copy(pairs)
        return
    first, second = _halves(pairs)
    fut = soon(lambda: _copy(first))
    try:
        _copy(second)
    except BaseException:
        if not fut.cancel():
            concurrent.futures.wait([fut], timeout=bound)
        raise
    if fut.cancel():
        _copy(first)
    else:
        _wait(fut, bound)
