"""Lazy Params: a Param of a lazy run given as a 0-d dask array, read on the worker.

A reduction of one run used by the next (a cell of an earlier lazy run, ``x.mean()``) is a 0-d
dask array.  It is checked when the graph is built from its metadata only -- 0-d, numbers, an
integer dtype where the body passes it to ``range()`` -- and never computed there: every block
of the run depends on its key, and ``read_params`` puts its value among the block's Params on
the worker, unwrapped and checked as a 0-d numpy array Param is (``eagle.bind.param_value``:
the metadata may say int64 of a value that computes to 10.5, refused there as on HostTeam).  So a
two-stage computation is one graph, and the scheduler runs the first stage before the blocks
that need it.
"""
from __future__ import annotations

import numpy as np

from eagle.bind import param_value

from .lazy_tables import is_dask


def lazy_param(plugin, name, v):
    """Param ``name`` given as a dask collection: refused unless a 0-d dask array of numbers."""
    import dask.array as da
    k = plugin.name
    if not isinstance(v, da.Array) or v.ndim != 0:
        shape = getattr(v, "shape", None)
        what = f"a dask array of shape {shape}" if isinstance(v, da.Array) else f"a dask {type(v).__name__}"
        raise TypeError(f"Param {name!r} of kernel {k!r} is {what}: a Param takes one number for all samples, "
                        "here a 0-d dask array (a cell of a lazy run, x.mean()); pass per-sample values as an "
                        "In plane")
    if v.dtype.kind not in "biuf":
        raise TypeError(f"Param {name!r} of kernel {k!r} is a 0-d dask array of {v.dtype}: a Param is a number")
    if name in plugin.range_params and v.dtype.kind not in "iu":
        raise TypeError(f"Param {name!r} of kernel {k!r} is passed to range() and must be an integer, not a "
                        f"0-d dask array of {v.dtype} (numba would truncate it); .astype('int64') it if that "
                        "is what you mean")
    return v


def _key(v):
    keys = v.__dask_keys__()
    while isinstance(keys, list):
        keys = keys[0]
    return keys


class ParamRules:
    """What ``eagle.bind.param_value`` reads of a kernel to check a Param (its name and the
    Params it passes to ``range()``): small, so it rides in the graph instead of the plugin."""

    def __init__(self, plugin):
        self.name, self.range_params, self.defaults = plugin.name, frozenset(plugin.range_params), {}


def params_arg(plugin, params: dict):
    """The Params as a block task takes them, and the dask arrays the blocks then depend on:
    ``params`` itself when none is lazy, else a task of ``read_params`` over their keys."""
    lazy = {name: v for name, v in params.items() if is_dask(v)}
    if not lazy:
        return params, []
    static = {name: v for name, v in params.items() if name not in lazy}
    return ((read_params, ParamRules(plugin), static, tuple(lazy), [_key(v) for v in lazy.values()]),
            list(lazy.values()))


def read_params(rules: ParamRules, static: dict, names, values) -> dict:
    """On the worker: the block's Params, each lazy one its computed value, checked by the rule
    HostTeam applies to the same value (``eagle.bind.param_value``): a dask array whose dtype
    says int64 may still compute to 10.5, which a ``range()`` Param refuses, never truncates."""
    out = dict(static)
    for name, v in zip(names, values):
        out[name] = param_value(rules, name, {name: np.asarray(v)})
    return out
