"""xarray in, xarray out: planes given as ``xarray.DataArray`` and outputs returned as DataArrays.

A run's planes may be DataArrays, numpy- or dask-backed (``plan.run(**dataset.data_vars)``
passes an ``xarray.Dataset``'s variables).  Their first dimension is the samples: every
DataArray plane of a run must name it alike and, where they carry a coordinate along it, carry
the same one.  ``unwrap`` checks that, names the plane it refuses, and hands the structures the
arrays underneath; ``wrap`` gives back every ``Out``/``Mutable`` as a DataArray along that
dimension with its coordinate (a vector output's second dimension is ``<name>_dim_1``), lazy
where the run was.  A Mutable given as a DataArray is written in place and returned as given.

A 0-d DataArray is a Param's value (or, in a lazy run, a 0-d dask array: see
``eagle_dask.lazy_params``); a Table may be a DataArray of any shape.  xarray stays optional:
this module never imports it -- a DataArray can only exist once the caller imported xarray.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from .roles import OUTPUT_KINDS


@dataclass
class Labels:
    """The samples' dimension of a run's DataArray planes, and its coordinate (or None)."""
    dim: str
    coord: object
    given: dict                       # Mutable/Out name -> the DataArray the caller passed


def _xarray():
    return sys.modules.get("xarray")


def _coord(v, dim):
    return v.coords[dim] if dim in v.coords else None


def _same_coord(a, b) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and bool(np.array_equal(np.asarray(a), np.asarray(b)))


def _sample_dim(plugin, planes, xr):
    """The samples' dimension for sure: that of the first 1-d DataArray plane (None without one)."""
    for name, v in planes.items():
        role = plugin.roles.get(name)
        if isinstance(v, xr.DataArray) and role is not None and role.kind in ("In", *OUTPUT_KINDS) and v.ndim == 1:
            return v.dims[0]
    return None


def _transposed(k, name, v, sample):
    """A 2-d plane whose samples are its second dimension: refused, saying to put them first."""
    if sample is not None and v.ndim == 2 and v.dims[1] == sample and v.dims[0] != sample:
        raise ValueError(f"plane {name!r} of kernel {k!r} has its samples {sample!r} as its second dimension "
                         f"(dims {v.dims}): a plane's samples come first; pass {name}.transpose({sample!r}, ...)")


def _check_plane(k, name, role, v):
    """A DataArray plane's own rules: chunked along samples only; an output holds writable data."""
    chunks = getattr(v, "chunks", None)
    if chunks is not None and v.ndim == 2 and len(chunks[1]) > 1:
        second = v.dims[1]
        raise ValueError(f"plane {name!r} of kernel {k!r} is a DataArray chunked along {second!r} (chunks "
                         f"{chunks[1]}), its second dimension: a plane's samples come first and are the only one "
                         f"cut. If {second!r} is the samples, pass {name}.transpose({second!r}, ...); if not, "
                         f"{name}.chunk({{{second!r}: -1}})")
    if role.kind in OUTPUT_KINDS and chunks is None:
        data = v.data
        if not (isinstance(data, np.ndarray) and data.flags["WRITEABLE"]):
            what = "read-only numpy data" if isinstance(data, np.ndarray) else f"{type(data).__name__} data"
            raise ValueError(f"{role.kind} plane {name!r} of kernel {k!r} is a DataArray holding {what}: eagle "
                             f"writes it in place, so it must hold writable numpy data (pass {name}.copy()), "
                             "or dask data for a lazy run")


def unwrap(plugin, planes: dict):
    """``(planes, labels)``: the DataArrays of ``planes`` replaced by their data, and the labels
    to put on the outputs (None when no plane is a DataArray)."""
    xr = _xarray()
    if xr is None or not any(isinstance(v, xr.DataArray) for v in planes.values()):
        return planes, None
    k, out, first, labels = plugin.name, dict(planes), None, None
    sample = _sample_dim(plugin, planes, xr)
    for name, v in planes.items():
        if not isinstance(v, xr.DataArray):
            continue
        role = plugin.roles.get(name)
        out[name] = v.data
        if role is None or role.kind not in ("In", *OUTPUT_KINDS):
            continue                                   # a Param's 0-d value, a Table, or refused by bind
        if v.ndim not in (1, 2):
            continue                                   # refused by bind, by name
        _transposed(k, name, v, sample)
        _check_plane(k, name, role, v)
        dim, coord = v.dims[0], _coord(v, v.dims[0])
        if labels is None:
            first, labels = name, Labels(dim, coord, {})
        elif dim != labels.dim:
            raise ValueError(f"plane {name!r} of kernel {k!r} has samples along {dim!r}, but plane {first!r} "
                             f"along {labels.dim!r}: every DataArray plane of a run has the same sample dimension")
        elif coord is not None and labels.coord is not None and not _same_coord(coord, labels.coord):
            raise ValueError(f"plane {name!r} of kernel {k!r} has another {dim!r} coordinate than plane "
                             f"{first!r}: the DataArray planes of a run must be aligned along the samples "
                             "(xarray.align them first)")
        elif labels.coord is None:
            labels.coord = coord
        if role.kind in OUTPUT_KINDS and v.chunks is None:
            labels.given[name] = v
    return out, labels


def wrap(plugin, result, labels):
    """``result`` (one output, or a dict by name) with every Out/Mutable a DataArray."""
    if labels is None:
        return result
    outputs = [name for role, name in plugin.arg_spec if role.kind in OUTPUT_KINDS]
    if not isinstance(result, dict):
        named = [name for name in plugin.outputs]
        return _labelled(labels, named[0], result) if named[0] in outputs else result
    return {name: (_labelled(labels, name, v) if name in outputs else v) for name, v in result.items()}


def _labelled(labels, name, v):
    given = labels.given.get(name)
    if given is not None and given.data is v:
        return given
    xr = _xarray()
    dims = (labels.dim,) if v.ndim == 1 else (labels.dim, f"{name}_dim_1")
    coords = {labels.dim: labels.coord} if labels.coord is not None else None
    return xr.DataArray(v, dims=dims, coords=coords, name=name)
