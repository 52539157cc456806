"""The arena registered as pinned host memory in a GPU worker's CUDA context.

A block run with ``inner=DeviceKernel`` on a worker of the driver's host uploads its share of
the planes from the arena (``eagle_dask.arena``), which the worker keeps mapped across runs.
Uploads from pageable memory go through the driver's staging buffers; from page-locked memory
the GPU reads them by DMA, at the link's full speed.  ``pin_arena`` registers the worker's
mapping of the arena with the context of the block's GPU once (numba's ``Context.mempin``, that
is ``cuMemHostRegister``), and keeps it registered across runs; a new arena of the same driver
replaces the registration (the old one is unregistered when it is let go, before its mapping
closes).  Registering is an optimisation only: where it cannot be done -- numba's CUDA simulator,
no CUDA, a driver that refuses -- the block uploads from pageable memory as before, with the
same bits; ``registered`` says which arenas are pinned in this process.
"""
from __future__ import annotations

import threading

import numpy as np

#: ``{(driver prefix, device): (SegmentId, numba's PinnedMemory)}`` of this worker process
_PINNED = {}
_LOCK = threading.Lock()


def _register(buf, device):
    """numba's registration of the whole mapping ``buf`` on GPU ``device``, or None."""
    from numba import cuda
    with cuda.gpus[device]:
        mempin = getattr(cuda.current_context(), "mempin", None)
        if mempin is None:              # the simulator's context: nothing to register
            return None
        address = np.frombuffer(buf, np.uint8).ctypes.data
        return mempin(buf, address, len(buf))


def pin_arena(seg, buf, device) -> bool:
    """Register the mapping ``buf`` of the arena ``seg`` as pinned memory on GPU ``device`` once
    (see the module docstring); True when it is registered."""
    key = (seg.name.rsplit("-", 1)[0], int(device or 0))
    with _LOCK:
        known = _PINNED.get(key)
        if known is not None and known[0] == seg:
            return True
        try:
            pinned = _register(buf, key[1])
        except Exception:  # noqa: BLE001 - pageable uploads instead: slower, the same bits
            pinned = None
        old = _PINNED.pop(key, None)
        if pinned is not None:
            _PINNED[key] = (seg, pinned)
    del old                              # the replaced arena's registration let go here
    return pinned is not None


def registered() -> list:
    """``[(arena name, device)]`` pinned in this process (read with ``client.run``)."""
    with _LOCK:
        return sorted((seg.name, device) for (_, device), (seg, _) in _PINNED.items())
