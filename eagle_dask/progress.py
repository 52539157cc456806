"""The numpy mode's progress bar: samples done, reported by the blocks as they run.

A block on the host runs in pieces of whole rows (``eagle_dask.task.run_pieces``); after each
piece its task logs an event ``{"tag", "rank", "done"}`` on the topic ``TOPIC``
(``report_piece``, on the worker).  The driver subscribes to the topic once per client and
hands each event to the bar of its run (by the run's tag, see ``eagle_dask.keys``); a block
that comes back counts whole.  The bar is drawn by its own thread, at most every ``REFRESH``
seconds and only when the count moved:

* in a terminal (or anywhere but a notebook): one line, redrawn in place (``\\r``);
* in a notebook with ipywidgets: a progress widget;
* in a notebook without ipywidgets: one text output, updated in place (a display handle),
  so the saved notebook holds the last state only.

Blocks report only when the run shows a bar (the tag says so): no event is sent otherwise.
The lazy mode has no bar of its own: its tasks are dask's, and ``distributed.progress`` on
the persisted result shows them by kind (``docs/dask_arrays.md``).
"""
from __future__ import annotations

import os
import sys
import threading
import time
import weakref

from . import keys

#: the event topic the blocks report their progress on
TOPIC = "eagle-progress"
#: seconds between redraws of the bar (at most)
REFRESH = 0.1
_WIDTH = 30


def progress_wanted(progress):
    """``progress`` if given; else in a notebook or a terminal, unless ``EAGLE_DASK_PROGRESS`` is off."""
    if progress is not None:
        return bool(progress)
    if os.environ.get("EAGLE_DASK_PROGRESS", "").strip().lower() in ("0", "off", "no", "false"):
        return False
    from distributed.utils import is_kernel
    return is_kernel() or sys.stdout.isatty()


# -- on the worker -------------------------------------------------------------------------
def report_piece(done: int) -> None:
    """Tell the driver that this task's block has ``done`` samples done (a no-op outside a
    numpy-mode block whose run shows a bar)."""
    try:
        from distributed import get_worker
        from distributed.utils import thread_state
        key = thread_state.key
        worker = get_worker()
    except (ImportError, AttributeError, ValueError):
        return
    tag = keys.run_tag(key)
    if tag is None or not keys.reports_progress(tag):
        return
    worker.log_event(TOPIC, {"tag": tag, "rank": keys.block_rank(key), "done": int(done)})


# -- on the driver -------------------------------------------------------------------------
_BARS = {}
_LOCK = threading.Lock()
_SUBSCRIBED = weakref.WeakSet()


def _dispatch(event):
    """The client's handler of ``TOPIC``: the event goes to the bar of its run, if any."""
    _, msg = event
    with _LOCK:
        bar = _BARS.get(msg.get("tag"))
    if bar is not None:
        bar.piece(msg.get("rank"), msg.get("done", 0))


def _subscribe(client):
    with _LOCK:
        if client in _SUBSCRIBED:
            return
        _SUBSCRIBED.add(client)
    client.loop.add_callback(client.subscribe_topic, TOPIC, _dispatch)


class SampleBar:
    """The bar of one run: ``total`` samples of kernel ``kernel`` in blocks of ``counts`` (by rank)."""

    def __init__(self, kernel, total, counts, out=None):
        self.kernel, self.total, self.counts = kernel, int(total), dict(counts)
        self.done = {}
        self.out = out if out is not None else _output()
        self.start = time.monotonic()
        self.drawn = None
        self.draws = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="eagle-dask-progress", daemon=True)
        self._thread.start()

    def piece(self, rank, done):
        """Rank ``rank``'s block has ``done`` samples done (its latest attempt's word counts)."""
        if rank in self.counts:
            with self._lock:
                self.done[rank] = min(int(done), self.counts[rank])

    def finished(self, rank):
        with self._lock:
            self.done[rank] = self.counts.get(rank, 0)

    def count(self) -> int:
        with self._lock:
            return sum(self.done.values())

    def _loop(self):
        while not self._stop.wait(REFRESH):
            self._draw()

    def _draw(self, last=False, note=""):
        done = self.count()
        if done == self.drawn and not last:
            return
        self.drawn = done
        self.draws += 1
        frac = done / self.total if self.total else 1.0
        filled = int(round(_WIDTH * frac))
        text = (f"{self.kernel}: [{'#' * filled}{' ' * (_WIDTH - filled)}] {100 * frac:3.0f}% "
                f"{done}/{self.total} samples, {time.monotonic() - self.start:.1f} s{note}")
        self.out.show(text, frac, last)

    def close(self, complete=True):
        """Stop redrawing; draw the last state (``complete``: every block came back)."""
        self._stop.set()
        self._thread.join(timeout=2 * REFRESH + 1.0)
        self._draw(last=True, note="" if complete else " (stopped)")


def show_progress(client, tag, kernel, total, counts):
    """Start the bar of run ``tag`` (see the module docstring); the driver closes it."""
    bar = SampleBar(kernel, total, counts)
    with _LOCK:
        _BARS[tag] = bar
    _subscribe(client)
    return bar


def end_progress(tag, bar, complete):
    with _LOCK:
        _BARS.pop(tag, None)
    bar.close(complete)


# -- where the bar is drawn ----------------------------------------------------------------
class _Line:
    """One line of a terminal (or a captured stream), redrawn in place."""

    def __init__(self, stream):
        self.stream = stream

    def show(self, text, frac, last):
        self.stream.write("\r" + text + ("\n" if last else ""))
        self.stream.flush()


class _Handle:
    """One text output of a notebook, updated in place (no widgets)."""

    def __init__(self):
        from IPython.display import display
        self.handle = display({"text/plain": ""}, raw=True, display_id=True)

    def show(self, text, frac, last):
        self.handle.update({"text/plain": text}, raw=True)


class _Widget:
    """An ipywidgets progress bar and its label."""

    def __init__(self):
        import ipywidgets
        from IPython.display import display
        self.bar = ipywidgets.FloatProgress(min=0.0, max=1.0)
        self.label = ipywidgets.Label()
        display(ipywidgets.HBox([self.bar, self.label]))

    def show(self, text, frac, last):
        self.bar.value = frac
        self.bar.bar_style = "success" if last and frac >= 1.0 else ""
        self.label.value = text


def _output():
    from distributed.utils import is_kernel
    if not is_kernel():
        return _Line(sys.stdout)
    try:
        import ipywidgets  # noqa: F401 - the notebook bar is a widget
    except ImportError:
        return _Handle()
    return _Widget()
