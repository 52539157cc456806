"""Tables on the workers of a numpy-mode Dask run: sent once, kept, found again by content.

A ``Table`` (``eagle.Table``) is read by every sample and never cut, so every worker needs it
whole.  Sending it with each run would cost its size per run; instead the driver keeps, per
client, the tables it has sent (``shared``): each is scattered to every worker once
(``broadcast``), under a key named by a random token drawn for it (never a digest of its
bytes: the key shows on the dashboard, and must not let a reader confirm a guess of the
content), and its future is held so the workers keep it.  A later run that passes a table with the same bytes
-- the same array, or an equal one made anew -- reuses the future and sends nothing.

Finding a table again must not cost a full cryptographic hash per run (SHA-256 of an 8 MB
table is about one small run), and must never reuse a table whose bytes changed in place.
So the driver keeps a copy of each table it sent (the very copy the workers hold) and a
cheap *fingerprint* -- dtype, shape and a few entries spread over the table -- to find
candidates (a table of another dtype or shape never is one, whatever its bytes); a candidate
is reused only when its bytes equal the table's, compared in full
(a memory compare: about a tenth of a hash's cost, and exact, where a hash is probably so).
A table edited in place since the last run therefore misses and is sent again.

The store is bounded (``MAX_TABLES`` tables, ``MAX_BYTES`` in all): the least recently used
are released.  Before a run looks for its tables, the scheduler is asked (one round trip)
which kept tables a worker still holds: one lost with every worker that held it is forgotten
and scattered again (its future's ``status`` alone stays ``finished``).  A send is bounded by
the run's ``timeout`` and retried after a lost worker (``eagle_dask.send``); a table that
could not be sent is never kept.
"""
from __future__ import annotations

import secrets
import threading
import weakref
from collections import OrderedDict

import numpy as np

from .send import held, scatter_everywhere

#: tables kept per client at most, and their bytes in all
MAX_TABLES = 16
MAX_BYTES = 1 << 30
#: entries read for a table's fingerprint
PROBES = 64
#: seconds a send (and a question to the scheduler) takes at most when the run gives no timeout
DEFAULT_SEND_TIMEOUT = 60.0


def fingerprint(v: np.ndarray) -> tuple:
    """dtype, shape and ``PROBES`` entries spread evenly over the table (cheap; finds candidates)."""
    flat = v.reshape(-1)
    if flat.size > PROBES:
        flat = flat[np.linspace(0, flat.size - 1, PROBES).astype(np.intp)]
    return v.dtype.str, v.shape, np.ascontiguousarray(flat).tobytes()


def _words(v: np.ndarray) -> np.ndarray:
    flat = np.ascontiguousarray(v).reshape(-1).view(np.uint8)
    return flat.view(np.uint64) if flat.size % 8 == 0 else flat


def same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two tables hold the same bytes (NaNs and signed zeros compared as bits).  Only
    tables of one fingerprint are compared, so of one dtype and shape: the fingerprint is what
    tells an int64 table from its float64 view, and a (3, 4) table from the same bytes as (4, 3)."""
    return a.nbytes == b.nbytes and bool(np.array_equal(_words(a), _words(b)))


class _Entry:
    __slots__ = ("copy", "future", "nbytes")

    def __init__(self, copy, future):
        self.copy, self.future, self.nbytes = copy, future, copy.nbytes


class _Store:
    """The tables one client has sent: fingerprint -> entries, least recently used first."""

    def __init__(self):
        self.entries = OrderedDict()          # (fingerprint, serial) -> _Entry
        self.serial = 0
        self.sent = 0                         # tables scattered (read by the tests and the benchmark)

    def prune(self, client, timeout):
        """Forget every kept table no worker holds any more (lost with the workers that held it,
        or half-sent when a worker died): the next run that passes it sends it again."""
        if not self.entries:
            return
        kept = held(client, [e.future for e in self.entries.values()], timeout)
        for key, e in list(self.entries.items()):
            if e.future.key not in kept:
                del self.entries[key]
                _release(e.future)

    def find(self, v):
        fp = fingerprint(v)
        for key, e in self.entries.items():
            if key[0] == fp and same_bytes(e.copy, v):
                self.entries.move_to_end(key)
                return e.future
        return None

    def add(self, client, v, timeout, what):
        copy = np.array(v, copy=True, order="C")        # what the workers hold; never the caller's array
        key = "eagle-table-" + secrets.token_hex(16)    # names no content (a dashboard shows it)
        future = scatter_everywhere(client, key, copy, timeout, what)
        self.serial += 1
        self.sent += 1
        self.entries[(fingerprint(copy), self.serial)] = _Entry(copy, future)
        self._trim()
        return future

    def _trim(self):
        while len(self.entries) > MAX_TABLES or (
                len(self.entries) > 1 and sum(e.nbytes for e in self.entries.values()) > MAX_BYTES):
            _, e = self.entries.popitem(last=False)
            _release(e.future)


def _release(future):
    try:
        future.release()
    except Exception:  # noqa: BLE001 - the client closed: nothing is held any more
        pass


_STORES = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def store_of(client) -> _Store:
    with _LOCK:
        s = _STORES.get(client)
        if s is None:
            s = _STORES[client] = _Store()
        return s


def shared(client, tables: dict, timeout=None, kernel=None) -> dict:
    """``{name: future}`` of each numpy table of ``tables`` on every worker of ``client``: the
    future a previous run left for the same dtype, shape and bytes (if a worker still holds
    it), else the table scattered now (``eagle_dask.send``: within ``timeout`` seconds)."""
    timeout = DEFAULT_SEND_TIMEOUT if timeout is None else timeout
    store = store_of(client)
    of = f" of kernel {kernel!r}" if kernel else ""
    out = {}
    with _LOCK:
        store.prune(client, timeout)
        for name, v in tables.items():
            out[name] = store.find(v) or store.add(client, v, timeout, f"table {name!r}{of}")
    return out


def lost(futures) -> bool:
    """Whether any of a run's table futures was lost: no worker holds its data any more (asked
    of the scheduler; a future's own status stays ``finished`` when its last holder dies)."""
    futures = list(futures)
    if not futures:
        return False
    if any(f.status != "finished" for f in futures):
        return True
    return len(held(futures[0].client, futures, DEFAULT_SEND_TIMEOUT)) < len({f.key for f in futures})
