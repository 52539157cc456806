"""Binding a run's arguments: every plane and Param checked against the kernel's roles.

``bind`` refuses, by name, anything a run cannot use (a missing or unknown argument, a Param
given an array, a Table of the wrong dtype or dimensions, planes of different sample counts, an output of the wrong dtype, shape or
layout, an output sharing memory with another plane) before anything is written, then
allocates the outputs the caller did not give.  ``not_gatherable`` is the one wording of the
rule that outputs crossing processes are float64.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .roles import OUTPUT_KINDS, dtype_problem
from .truncation import warn_truncating_stores

_INT64 = (-(2 ** 63), 2 ** 63 - 1)
#: the dtype of outputs that cross processes (gathered from ranks or workers)
GATHERED_DTYPE = np.dtype(np.float64)


def not_gatherable(what: str, dtype, hint: str = "") -> ValueError:
    """The refusal of a plane that would cross processes and is not float64 (``what`` ends with
    its verb: "output plane 'y' of kernel 'k' is")."""
    return ValueError(f"{what} {dtype}: outputs gathered from ranks or workers must be float64{hint}")


_PARAM_TYPES = (bool, int, float, complex, np.generic)


@dataclass
class Bound:
    """A run's validated arguments."""
    n: int
    values: dict                      # name -> plane or Param value (cells excluded)
    outputs: list                     # Out/Mutable names, argument order
    supplied: set = field(default_factory=set)


def is_array(x) -> bool:
    return isinstance(x, np.ndarray) or hasattr(x, "__cuda_array_interface__")


def param_value(plugin, name, planes: dict):
    """Param ``name`` of a run as compiled code takes it: the value given (a 0-d array unwrapped)
    or the default; one number, an integer where the body passes it to ``range()``, and a Python
    int past int64 but within uint64 as np.uint64 (a seed up to 2**64 - 1)."""
    k = plugin.name
    if name not in planes:
        if name not in plugin.defaults:
            raise TypeError(f"kernel {k!r} is missing Param {name!r}")
        return plugin.defaults[name]
    v = planes[name]
    if getattr(v, "ndim", None) == 0 and hasattr(v, "shape") and not isinstance(v, _PARAM_TYPES):
        # a 0-d array is its value: numpy, a device array, or a dask one (computed here)
        v = v.item() if hasattr(v, "__cuda_array_interface__") else np.asarray(v)[()]
    if not isinstance(v, _PARAM_TYPES):
        shape = getattr(v, "shape", None)
        what = f"an array of shape {shape}" if shape is not None else f"a {type(v).__name__}"
        raise TypeError(f"Param {name!r} of kernel {k!r} takes one number for all samples, "
                        f"got {what}; pass per-sample values as an In plane")
    if name in plugin.range_params and not isinstance(v, (int, np.integer)):
        raise TypeError(f"Param {name!r} of kernel {k!r} is passed to range() and must be an integer, "
                        f"not {type(v).__name__} {v!r} (Python raises TypeError too; numba would "
                        "truncate it)")
    if isinstance(v, int) and not isinstance(v, bool) and not _INT64[0] <= v <= _INT64[1]:
        if 0 <= v < 2 ** 64:
            return np.uint64(v)
        raise OverflowError(f"Param {name!r} of kernel {k!r} is {v}: an integer Param fits in int64 or, "
                            "if not negative, uint64 (up to 2**64 - 1)")
    return v


def sample_count(kernel: str, n_of: dict) -> int:
    """The one sample count of a run's planes (``{name: count}``), or a refusal naming them."""
    if len(set(n_of.values())) > 1:
        desc = ", ".join(f"{nm!r} has {c}" for nm, c in n_of.items())
        raise ValueError(f"planes of kernel {kernel!r} have different sample counts: {desc}")
    if not n_of:
        raise ValueError(f"kernel {kernel!r}: the number of samples comes from its planes, and none was "
                         "given; pass an In plane or an output plane to write into")
    return next(iter(n_of.values()))


def is_bins(plugin, name) -> bool:
    """An output plane the body never touches at its own sample, only at indices it computes (a
    histogram's bins, ``counts[b] += 1.0``): not a per-sample plane, so any length, every index
    checked.  Such a kernel writes other samples (``cross_sample_write``): one partition only."""
    use = plugin.plane_uses.get(name)
    return (plugin.roles[name].kind in OUTPUT_KINDS and use is not None and not use.opaque
            and use.index_dims == 0 and bool(use.subscripts) and use.writes_other)


def check_plane(plugin, name, v):
    """Refuse a plane whose shape or dtype the body cannot use: (n,) or (n, w) as the body indexes
    it, holding numbers compiled code reads, and no mask."""
    k = plugin.name
    if isinstance(v, np.ma.MaskedArray):
        raise TypeError(f"plane {name!r} of kernel {k!r} is a numpy masked array: compiled code reads its "
                        f"values and ignores its mask; pass {name}.filled(value) (masked samples set to "
                        f"value) or {name}.data")
    if v.ndim not in (1, 2):
        raise ValueError(f"plane {name!r} of kernel {k!r} has {v.ndim} dimensions; a plane is (n,) "
                         "or (n, w), samples first")
    check_dtype(k, name, v)
    use = plugin.plane_uses.get(name)
    if use is not None and not use.opaque and use.subscripts:
        if 2 in use.subscripts and v.ndim != 2:
            raise ValueError(f"plane {name!r} of kernel {k!r} is indexed as {name}[i, k] and must be "
                             f"(n, w), but it has shape {tuple(v.shape)}")
        if use.subscripts == {1} and v.ndim != 1:
            raise ValueError(f"plane {name!r} of kernel {k!r} is indexed as {name}[i] (one value per "
                             f"sample) and must be (n,), but it has shape {tuple(v.shape)}; pass a 1-D "
                             f"plane, or index it {name}[i, k]")


def check_dtype(k, name, v, what="plane"):
    """Refuse a plane (or a table: ``what``) whose values compiled code cannot read or write (the
    rule: ``eagle.roles.dtype_problem``), saying which dtype to pass instead."""
    problem = dtype_problem(getattr(v, "dtype", np.dtype(np.float64)))
    if problem is not None:
        why, better = problem
        todo = f"; pass {name}.astype({better.name!r})" if better is not None else ""
        raise TypeError(f"{what} {name!r} of kernel {k!r} holds {v.dtype} values{why}{todo}")


def as_plane(k, name, v, as_array):
    """An In plane given as a list (or any sequence) made an array, or a refusal naming it."""
    try:
        return as_array(v)
    except (ValueError, TypeError) as e:
        what = ("a ragged sequence (its items have different lengths)" if "inhomogeneous" in str(e)
                else f"a {type(v).__name__} that is not one array of numbers ({type(e).__name__})")
        raise ValueError(f"In plane {name!r} of kernel {k!r} is {what}: a plane is (n,) or (n, w), every "
                         "sample the same number of values; pad the rows to one width, or pass an array") from None


def bind(plugin, planes: dict, *, alloc=np.zeros, as_array=np.asarray, gathered=False) -> Bound:
    """Check a run's arguments against the kernel's roles; allocate missing outputs.

    Nothing is written before every check has passed.  ``gathered`` adds the rules of
    structures whose outputs cross processes (float64, C-contiguous).
    """
    k = plugin.name
    check_names(plugin, planes)
    values, n_of = {}, {}
    for role, name in plugin.arg_spec:
        kind = role.kind
        if kind == "Cell":
            continue
        given = name in planes
        if kind == "Param":
            values[name] = param_value(plugin, name, planes)
            continue
        if kind == "Table":
            values[name] = table_value(plugin, name, planes, as_array)
            continue
        if not given:
            if kind != "Out":
                raise TypeError(f"kernel {k!r} is missing plane {name!r} ({kind})")
            continue                                    # an Out eagle allocates
        v = planes[name]
        if kind == "In" and not is_array(v):
            v = as_plane(k, name, v, as_array)
        if not is_array(v):
            raise TypeError(f"{kind} plane {name!r} of kernel {k!r} must be an array written in place, "
                            f"not a {type(v).__name__}")
        check_plane(plugin, name, v)
        if kind in OUTPUT_KINDS:
            check_output(k, name, role, v, gathered)
        values[name] = v
        if not is_bins(plugin, name):
            n_of[name] = int(v.shape[0])
    n = sample_count(k, n_of)
    outputs = plugin.names(*OUTPUT_KINDS)
    supplied = {name for name in outputs if name in planes}
    _check_aliasing(k, values, outputs)
    for role, name in plugin.arg_spec:
        if role.kind == "Out" and name not in supplied:
            shape = (n,) if role.width is None else (n, role.width)
            values[name] = alloc(shape, dtype=role.out_dtype)
    warn_truncating_stores(plugin, values)
    return Bound(n=n, values=values, outputs=outputs, supplied=supplied)


def table_value(plugin, name, planes: dict, as_array=np.asarray):
    """Table ``name`` of a run, checked: an array of numbers (numpy, CuPy or any device array; a
    list is made an array), at least one dimension, as many as the body's subscripts, the dtype
    ``Table[dtype]`` declares.  Not counted in the run's samples, never cut or written."""
    k = plugin.name
    if name not in planes:
        raise TypeError(f"kernel {k!r} is missing Table {name!r}")
    v = planes[name]
    if not is_array(v):
        v = as_array(v)
    if v.ndim < 1:
        raise ValueError(f"Table {name!r} of kernel {k!r} is 0-d: a table has at least one axis (pass one "
                         "number as a Param)")
    check_dtype(k, name, v, what="Table")
    role = plugin.roles[name]
    if role.dtype is not None and v.dtype != role.dtype:
        raise TypeError(f"Table {name!r} of kernel {k!r} is {v.dtype}, but the kernel declares it "
                        f"Table[{role.dtype.name!r}]; pass {name}.astype({role.dtype.name!r})")
    wrong = [c for c in plugin.tables.get(name, ()) if c != v.ndim]
    if wrong:
        raise ValueError(f"Table {name!r} of kernel {k!r} has {v.ndim} dimension(s) (shape {tuple(v.shape)}), "
                         f"but the body indexes it with {wrong[0]} index(es)")
    return v


def check_names(plugin, planes: dict):
    """Refuse a name the kernel has no argument for, and a cell passed in."""
    k, roles = plugin.name, plugin.roles
    for name in planes:
        if name not in roles:
            raise TypeError(f"kernel {k!r} has no argument {name!r} (its arguments: "
                            f"{', '.join(n for _, n in plugin.arg_spec)})")
        if roles[name].kind == "Cell":
            raise TypeError(f"{name!r} is a Cell of kernel {k!r}: a result over samples, not an input; "
                            "do not pass it")


def check_output(k, name, role, v, gathered):
    """Refuse an output plane that does not match its declaration, or (``gathered``) is not
    float64, or that eagle could not write in place (not C-contiguous, read-only)."""
    if role.kind == "Out":
        want = role.out_dtype
        if v.dtype != want:
            raise TypeError(f"output plane {name!r} of kernel {k!r} is {v.dtype}, but the kernel declares "
                            f"it {want} ({'Out[...]' if role.dtype is not None else 'Out is float64 unless declared'})")
        if role.width is not None and (v.ndim != 2 or v.shape[1] != role.width):
            raise ValueError(f"output plane {name!r} of kernel {k!r} is declared Out[{role.width}] and must be "
                             f"(n, {role.width}), but it has shape {tuple(v.shape)}")
        if role.width is None and v.ndim != 1:
            raise ValueError(f"output plane {name!r} of kernel {k!r} is declared Out (one value per sample) and "
                             f"must be (n,), but it has shape {tuple(v.shape)}; declare Out[w] for vectors")
    if gathered and v.dtype != GATHERED_DTYPE:
        raise not_gatherable(f"output plane {name!r} of kernel {k!r} is", v.dtype)
    flags = getattr(v, "flags", None)
    if flags is not None:
        if not flags["C_CONTIGUOUS"]:
            raise ValueError(f"output plane {name!r} of kernel {k!r} is not C-contiguous; eagle writes "
                             "outputs in place: pass np.ascontiguousarray(...) and use the result")
        if not flags["WRITEABLE"]:
            raise ValueError(f"output plane {name!r} of kernel {k!r} is read-only; eagle writes outputs in place")


def _check_aliasing(k, values, outputs):
    hosts = {nm: v for nm, v in values.items() if isinstance(v, np.ndarray)}
    for o in outputs:
        if o not in hosts:
            continue
        for nm, v in hosts.items():
            if nm != o and np.may_share_memory(hosts[o], v):
                raise ValueError(f"output plane {o!r} of kernel {k!r} shares memory with plane {nm!r}; "
                                 "samples would read values other samples already wrote: pass a copy")
