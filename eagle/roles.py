"""Argument roles of a per-sample kernel: In, Out, Mutable, Param, Cell[op] and Table.

A kernel's first parameter is the sample index; every other parameter is annotated with one
of these roles.  ``Out`` may declare a vector width and a dtype (``Out[3]``, ``Out["int64"]``,
``Out[3, np.float32]``); ``Cell`` must name its reduction (``Cell["sum"]``).  A ``Table`` is a
read-only array shared by every sample (any shape, not cut by samples); ``Table["int64"]``
declares the dtype it must have.
"""
from __future__ import annotations

import numpy as np

#: reductions a Cell may declare, in the order of their codes in compiled code
CELL_OPS = ("sum", "times", "max", "min", "land")


class Role:
    """An annotation role.  ``kind`` is one of In, Out, Mutable, Param, Cell."""

    __slots__ = ("kind", "width", "dtype", "op")

    def __init__(self, kind, width=None, dtype=None, op=None):
        self.kind = kind
        self.width = width
        self.dtype = dtype
        self.op = op

    # Out[3], Out["int64"], Out[3, "float32"], Cell["sum"]
    def __getitem__(self, item):
        if self.kind == "Cell":
            if self.op is not None:
                raise TypeError("Cell takes one reduction op: Cell['sum']")
            if item not in CELL_OPS:
                raise ValueError(
                    f"unknown cell op {item!r}: a Cell reduces with one of {', '.join(CELL_OPS)}")
            return Role("Cell", op=item)
        if self.kind == "Table" and self.dtype is None:
            return Role("Table", dtype=_table_dtype(item))
        if self.kind != "Out" or self.width is not None or self.dtype is not None:
            raise TypeError(f"{self.kind} takes no subscript; only Out[width] / Out[dtype], Table[dtype] and "
                            "Cell[op] do")
        items = item if isinstance(item, tuple) else (item,)
        width = dtype = None
        for it in items:
            if isinstance(it, (int, np.integer)) and not isinstance(it, bool):
                if it < 1:
                    raise ValueError(f"Out[{it}]: a vector output's width must be at least 1")
                if width is not None:
                    raise TypeError(f"Out[{', '.join(map(repr, items))}]: one width at most (a plane is (n,) "
                                    "or (n, w)); Out[w] or Out[w, dtype]")
                width = int(it)
            else:
                if dtype is not None:
                    raise TypeError(f"Out[{', '.join(map(repr, items))}]: one dtype at most")
                try:
                    dtype = np.dtype(it)
                except TypeError:
                    raise TypeError(f"Out[{it!r}]: expected a width (int) or a dtype") from None
        return Role("Out", width=width, dtype=dtype)

    def __repr__(self):
        if self.kind == "Cell" and self.op:
            return f"Cell[{self.op!r}]"
        parts = []
        if self.width is not None:
            parts.append(str(self.width))
        if self.dtype is not None:
            parts.append(repr(str(self.dtype)))      # the name, or ">f8" for a byte order
        return f"{self.kind}[{', '.join(parts)}]" if parts else self.kind

    def __eq__(self, other):
        return isinstance(other, Role) and (self.kind, self.width, self.dtype, self.op) == (
            other.kind, other.width, other.dtype, other.op)

    def __hash__(self):
        return hash((self.kind, self.width, self.dtype, self.op))

    def __reduce__(self):
        return (Role, (self.kind, self.width, self.dtype, self.op))

    @property
    def out_dtype(self):
        """dtype of an output plane eagle allocates (float64 unless declared)."""
        return self.dtype if self.dtype is not None else np.dtype(np.float64)


def _table_dtype(item):
    try:
        dtype = np.dtype(item)
    except TypeError:
        raise TypeError(f"Table[{item!r}]: a Table declares one numeric dtype, e.g. Table['float64']") from None
    if dtype.kind not in "biufc":
        raise TypeError(f"Table[{item!r}]: a table holds numbers (bool, integers, floats or complex)")
    return dtype


In = Role("In")
Out = Role("Out")
Mutable = Role("Mutable")
Param = Role("Param")
Cell = Role("Cell")
Table = Role("Table")

PLANE_KINDS = ("In", "Out", "Mutable")
OUTPUT_KINDS = ("Out", "Mutable")
#: a read-only array shared by every sample: indexed freely, bounds-checked, never cut by samples
TABLE = "Table"

#: the dtypes compiled code reads and writes in a plane (in the machine's byte order)
PLANE_DTYPES = tuple(np.dtype(t) for t in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float32", "float64", "complex64", "complex128"))
_WIDER = {"f": ("float32", "float64"), "c": ("complex128", "complex128")}


def dtype_problem(dtype):
    """Why a plane cannot hold ``dtype`` values, as ``(why, better)`` (``better``: the dtype to
    use instead, or None), or None when it can.  The one rule for the planes a run is given
    (``eagle.bind.check_plane``) and for ``Out[dtype]`` declarations (``eagle.kernel``)."""
    dt = np.dtype(dtype)
    if dt.kind not in "biufc":
        return ": a plane holds numbers (bool, integers, floats or complex)", None
    native = dt.newbyteorder("=")
    if native not in PLANE_DTYPES:            # float16, long double, complex256
        small, large = _WIDER[dt.kind]
        better = np.dtype(small if native.itemsize < np.dtype(small).itemsize else large)
        return ", which compiled code does not support", better
    if not dt.isnative:
        order = "big" if dt.byteorder == ">" else "little"
        return f" ({order}-endian): compiled code reads the machine's byte order", native
    return None
