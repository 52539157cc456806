"""Bounds: every index of a plane other than the sample's own is checked, on the host and the device.

``plane[i]`` and the first index of ``plane[i, k]`` are in range by construction and stay
unchecked, so a sample-local kernel pays nothing.  Every other index -- ``x[i + 1]``,
``counts[b]``, the ``k`` of ``q[i, k]`` -- goes through ``at`` in the generated body
(``eagle.codegen``): an index out of ``[0, n)`` (a negative one included: there is no
wrap-around) is recorded in the run's error record and replaced by 0, so nothing is read or
written outside a plane, and the run goes on.  After a tile or a launch the engine raises the
record as an ``IndexError`` naming the kernel, the plane, the index and the sample
(``index_error``).  A compiled kernel cannot raise on the device, so this is also how the
device reports it.

The record is an int64 array of ``FIELDS``: the sample, the plane's position in the kernel's
arguments, the index, the axis and that axis's length; the sample is -1 while nothing was
flagged.  Where several samples go out of range, the first in sample order is kept on the host
(on the device, the first a thread recorded).
"""
from __future__ import annotations

import numpy as np
from numba import njit

#: the generated body's name for the run's error record
ERR = "_eagle_err"
#: the generated body's name for ``at``
AT = "_eagle_at"
FIELDS = 5


@njit(inline="always", nogil=True, cache=True)
def at(k, n, err, sample, code, axis):
    """``k`` when ``0 <= k < n``; else record the first bad access in ``err`` and give 0."""
    if k < 0 or k >= n:
        if err[0] < 0 or sample < err[0]:
            err[0] = sample
            err[1] = code
            err[2] = k
            err[3] = axis
            err[4] = n
        return 0
    return k


def new_record(count: int = 1) -> np.ndarray:
    """``count`` empty error records (a tile or a launch each)."""
    return np.full((count, FIELDS), -1, dtype=np.int64)


def first(records: np.ndarray):
    """The record of the first sample flagged in ``records`` (rows), or None."""
    flagged = records[records[:, 0] >= 0]
    if not len(flagged):
        return None
    return flagged[np.argmin(flagged[:, 0])]


def index_error(plugin, record) -> IndexError:
    """The IndexError of one record, naming the plane, the index and its axis (the engine adds
    the kernel and the sample)."""
    sample, code, index, axis, n = (int(v) for v in record)
    name = plugin.arg_spec[code][1]
    what = "samples" if axis == 0 else "entries on axis 1"
    return IndexError(f"index {index} is out of range for plane {name!r}, which has {n} {what} "
                      f"(no wrap-around: indices other than {plugin.index_name} itself are checked)")
