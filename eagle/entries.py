"""One entry per process and plugin, for each engine: built once, by the first thread that asks.

An engine's entry (``eagle.host.HostEntry``, ``eagle.device.DeviceEntry``) holds what it
generated and compiled for one plugin.  Threads making the first run of the same kernel at once
must get one entry, fully built; threads asking for other kernels must not wait for it.  So each
plugin key has a lock of its own while its entry is built, and the table is read under a short
lock of its own.
"""
from __future__ import annotations

import threading


class Entries:
    """A process's entries of one engine, keyed by the plugin's key."""

    def __init__(self):
        self._entries = {}
        self._building = {}          # plugin key -> the lock held while its entry is built
        self._lock = threading.Lock()

    def get(self, plugin, build):
        """The entry of ``plugin``: ``build(plugin)`` by the first thread that asks, the same
        object for every other thread and later call."""
        with self._lock:
            entry = self._entries.get(plugin.key)
            if entry is not None:
                return entry
            building = self._building.setdefault(plugin.key, threading.Lock())
        with building:
            with self._lock:
                entry = self._entries.get(plugin.key)
            if entry is None:
                entry = build(plugin)
                with self._lock:
                    self._entries[plugin.key] = entry
                    self._building.pop(plugin.key, None)
        return entry
