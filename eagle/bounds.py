"""Bounds: every index of a plane other than the sample's own is checked, on the host and the device.

Every index of a ``Table`` is checked, ``t[i]`` included (a table is not cut by samples).

``plane[i]`` and the first index of ``plane[i, k]`` are in range by construction and stay
unchecked, so a sample-local kernel pays nothing.  Every other index -- ``x[i + 1]``,
``counts[b]``, the ``k`` of ``q[i, k]`` -- goes through ``at`` in the generated body
(``eagle.codegen``); an index out of ``[0, n)``, a negative one included (there is no
wrap-around), never reaches the plane:

* on the host ``at`` raises at once, with the index, the axis's length, the sample, the plane
  and the axis as the exception's arguments (a raise costs nothing until it happens; a record
  written to memory in the loop kept LLVM from optimising it, 2-25x on the stencil);
* on the device a kernel cannot raise: ``at_device`` records the access in the launch's error
  record (an int64 array of ``FIELDS``) and gives 0, so the thread reads or writes element 0
  instead, and the engine raises after the launch.

Arrays the body makes itself (``a = np.zeros(3)``, ``cuda.local.array``, a view ``z = q[i]``) are
checked the same way: every index of a subscript of a local name goes through ``local_at``
(``local_at_device`` on the device), which checks it against the array's own axis when the name
holds an array and passes it through otherwise (a tuple: numba checks those itself).  Such an
error names the local array (its code is past the arguments': ``local_code``).  A plane can only
be reached by its own name (``eagle.access`` refuses aliases, slices and chained subscripts at
deploy), so no index of any array a body can name escapes a check.

Either way the engine raises an ``IndexError`` naming the kernel, the plane, the index and the
sample (``index_error``).  A plane passed to a helper is indexed outside the body: helpers eagle
compiles from source get numba's own bounds checks (``boundscheck=True``; an IndexError naming
the kernel), and an imported compiled helper is the user's own code, as it was written.  The host reports the first bad access its chunks met, chunks in sample
order; the device, the last one a thread recorded.
"""
from __future__ import annotations

import ast

import numpy as np
from numba import njit, types
from numba.extending import overload

from .syntax import parse

#: the generated body's name for the run's error record
ERR = "_eagle_err"
#: the generated body's name for ``at``
AT = "_eagle_at"
FIELDS = 5


#: the generated body's name for ``local_at`` / ``local_at_device``
LX = "_eagle_lx"


#: the first argument of the IndexError ``at`` raises (the engine turns it into eagle's message)
TAG = "eagle: plane index out of range"


@njit(inline="always", nogil=True, cache=True)
def at(k, n, err, sample, code, axis):
    """``k`` when ``0 <= k < n``, else an IndexError carrying the access (host code)."""
    if k < 0 or k >= n:
        raise IndexError(TAG, sample, code, k, axis, n)
    return k


@njit(inline="always", nogil=True, cache=True)
def at_device(k, n, err, sample, code, axis):
    """``k`` when ``0 <= k < n``, else 0, the access recorded in ``err`` (device code)."""
    if k < 0 or k >= n:
        err[0] = sample
        err[1] = code
        err[2] = k
        err[3] = axis
        err[4] = n
        return 0
    return k


def local_at(a, k, axis, err, sample, code):
    """``k`` when ``a`` is not an array or ``0 <= k < a.shape[axis]``, else an IndexError carrying
    the access (host code; compiled through its overload below)."""
    if isinstance(a, np.ndarray):
        n = a.shape[axis]
        if k < 0 or k >= n:
            raise IndexError(TAG, sample, code, k, axis, n)
    return k


@overload(local_at, inline="always")
def _local_at_compiled(a, k, axis, err, sample, code):
    if isinstance(a, types.Array):
        def check(a, k, axis, err, sample, code):
            n = a.shape[axis]
            if k < 0 or k >= n:
                raise IndexError(TAG, sample, code, k, axis, n)
            return k
        return check
    return lambda a, k, axis, err, sample, code: k


def local_at_device(a, k, axis, err, sample, code):
    """``k`` when ``0 <= k < a.shape[axis]``, else 0, the access recorded in ``err`` (device code)."""
    n = a.shape[axis]
    if k < 0 or k >= n:
        err[0] = sample
        err[1] = code
        err[2] = k
        err[3] = axis
        err[4] = n
        return 0
    return k


def subscripted_locals(source: str, arguments) -> list:
    """The names a kernel body subscripts that are not its ``arguments``: its own arrays (and
    tuples), sorted; ``local_code`` numbers them after the arguments."""
    fdef = parse(source).body[0]
    return sorted({n.value.id for stmt in fdef.body for n in ast.walk(stmt)
                   if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name)
                   and n.value.id not in arguments})


def local_code(plugin, name) -> int:
    """The code of the local array ``name`` in an error record (past the arguments' codes)."""
    names = subscripted_locals(plugin.source, {n for _, n in plugin.arg_spec} | {plugin.index_name})
    return len(plugin.arg_spec) + names.index(name)


def raised_record(exc):
    """The record an exception raised by ``at`` carries, or None for any other exception."""
    args = getattr(exc, "args", ())
    if isinstance(exc, IndexError) and len(args) == 1 + FIELDS and args[0] == TAG:
        return np.array(args[1:], dtype=np.int64)
    return None


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
    if code >= len(plugin.arg_spec):
        names = subscripted_locals(plugin.source, {n for _, n in plugin.arg_spec} | {plugin.index_name})
        return IndexError(f"index {index} is out of range for array {names[code - len(plugin.arg_spec)]!r} "
                          f"(made in the kernel's body), whose axis {axis} has {n} entries (no wrap-around: "
                          "every index of an array the body makes is checked)")
    role, name = plugin.arg_spec[code]
    if role.kind == "Table":
        return IndexError(f"index {index} is out of range for table {name!r}, whose axis {axis} has {n} entries "
                          "(no wrap-around: every index of a table is checked)")
    what = "samples" if axis == 0 else "entries on axis 1"
    return IndexError(f"index {index} is out of range for plane {name!r}, which has {n} {what} "
                      f"(no wrap-around: indices other than {plugin.index_name} itself are checked)")
