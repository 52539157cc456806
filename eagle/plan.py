"""Plans: a deployed kernel, the structure that runs it, and how its samples are partitioned.

``plan(plugin, structure=..., inner=None, npartitions=1, partitions=None).run(**planes)``
validates every argument before anything runs, runs the structure, and returns the single
output plane, or a dict by name when there are several (cells as numpy float64 scalars).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .partition import check_partitions, split
from .plugin import Plugin, deploy
from .reduction import fold
from .structure import Structure, check_placement

_PARAM_TYPES = (bool, int, float, complex, np.generic)
#: what may run a rank's or a worker's share
INNER = ("host_team", "device_kernel")


@dataclass
class Bound:
    """A run's validated arguments."""
    n: int
    values: dict                      # name -> plane or Param value (cells excluded)
    outputs: list                     # Out/Mutable names, argument order
    supplied: set = field(default_factory=set)


def is_array(x) -> bool:
    return isinstance(x, np.ndarray) or hasattr(x, "__cuda_array_interface__")


def bind(plugin: Plugin, planes: dict, *, alloc=np.zeros, as_array=np.asarray, gathered=False) -> Bound:
    """Check a run's arguments against the kernel's roles; allocate missing outputs.

    Nothing is written before every check has passed.  ``gathered`` adds the rules of
    structures that gather outputs through the host (float64, C-contiguous).
    """
    k = plugin.name
    roles = plugin.roles
    for name in planes:
        if name not in roles:
            raise TypeError(f"kernel {k!r} has no argument {name!r} (its arguments: "
                            f"{', '.join(n for _, n in plugin.arg_spec)})")
        if roles[name].kind == "Cell":
            raise TypeError(f"{name!r} is a Cell of kernel {k!r}: a result over samples, not an input; "
                            "do not pass it")
    values, n_of = {}, {}
    for role, name in plugin.arg_spec:
        kind = role.kind
        if kind == "Cell":
            continue
        given = name in planes
        if kind == "Param":
            if not given:
                if name not in plugin.defaults:
                    raise TypeError(f"kernel {k!r} is missing Param {name!r}")
                values[name] = plugin.defaults[name]
                continue
            v = planes[name]
            if isinstance(v, np.ndarray) and v.ndim == 0:
                v = v[()]
            if not isinstance(v, _PARAM_TYPES):
                shape = getattr(v, "shape", None)
                what = f"an array of shape {shape}" if shape is not None else f"a {type(v).__name__}"
                raise TypeError(f"Param {name!r} of kernel {k!r} takes one number for all samples, "
                                f"got {what}; pass per-sample values as an In plane")
            values[name] = v
            continue
        if not given:
            if kind in ("In", "Mutable"):
                raise TypeError(f"kernel {k!r} is missing plane {name!r} ({kind})")
            continue                                    # an Out eagle allocates
        v = planes[name]
        if kind == "In" and not is_array(v):
            v = as_array(v)
        if not is_array(v):
            raise TypeError(f"{kind} plane {name!r} of kernel {k!r} must be an array written in place, "
                            f"not a {type(v).__name__}")
        if v.ndim not in (1, 2):
            raise ValueError(f"plane {name!r} of kernel {k!r} has {v.ndim} dimensions; a plane is (n,) "
                             "or (n, w), samples first")
        use = plugin.plane_uses.get(name)
        if use is not None and use.index_dims == 2 and v.ndim != 2:
            raise ValueError(f"plane {name!r} of kernel {k!r} is indexed as {name}[i, k] and must be "
                             f"(n, w), but it has shape {tuple(v.shape)}")
        if kind in ("Out", "Mutable"):
            _check_output(k, name, role, v, gathered)
        values[name] = v
        n_of[name] = int(v.shape[0])
    if len(set(n_of.values())) > 1:
        desc = ", ".join(f"{nm!r} has {c}" for nm, c in n_of.items())
        raise ValueError(f"planes of kernel {k!r} have different sample counts: {desc}")
    if not n_of:
        raise ValueError(f"kernel {k!r}: the number of samples comes from its planes, and none was "
                         "given; pass an In plane or an output plane to write into")
    n = next(iter(n_of.values()))
    outputs = [name for role, name in plugin.arg_spec if role.kind in ("Out", "Mutable")]
    supplied = {name for name in outputs if name in planes}
    _check_aliasing(k, values, outputs)
    for role, name in plugin.arg_spec:
        if role.kind == "Out" and name not in supplied:
            shape = (n,) if role.width is None else (n, role.width)
            values[name] = alloc(shape, dtype=role.out_dtype)
    return Bound(n=n, values=values, outputs=outputs, supplied=supplied)


def _check_output(k, name, role, v, gathered):
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
    if gathered and v.dtype != np.float64:
        raise ValueError(f"output plane {name!r} of kernel {k!r} is {v.dtype}: outputs gathered from ranks "
                         "or workers must be float64")
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


class Plan:
    """A kernel, a structure and a partitioning, validated; call ``run(**planes)``."""

    def __init__(self, plugin, structure, inner, npartitions, partitions):
        self.plugin = plugin
        self.structure = structure
        self.inner = inner
        self.npartitions = npartitions
        self.partitions = partitions

    def __repr__(self):
        inner = f", inner={self.inner!r}" if self.inner is not None else ""
        return (f"<eagle plan {self.plugin.name} on {self.structure!r}{inner}, "
                f"{len(self.partitions) if self.partitions is not None else self.npartitions} partition(s)>")

    def partitions_for(self, n):
        """The plan's partitions of ``n`` samples (rows of 32 for a kernel with cells)."""
        rows = bool(self.plugin.cells)
        if self.partitions is not None:
            return check_partitions(self.partitions, n, rows=rows, kernel=self.plugin.name)
        return split(n, self.npartitions, rows=rows)

    def bind(self, planes, device=None):
        return self.structure.bind(self, planes, device)

    def run(self, *, device=None, **planes):
        """Run the kernel over every sample of ``planes``; see the module docstring for the result."""
        if device is not None and not (self.structure.uses_device or getattr(self.inner, "uses_device", False)):
            runs = f"inner={self.inner!r}" if self.structure.has_ranks else f"{self.structure!r}"
            raise ValueError(f"kernel {self.plugin.name!r}: device={device!r}, but {runs} runs on "
                             "CPU threads; device= picks the GPU of a DeviceKernel plan (or of inner=DeviceKernel)")
        bound = self.structure.bind(self, planes, device)
        rows = self.structure.execute(self, bound, device)
        return self.result(bound, rows)

    def result(self, bound, rows):
        out = {}
        for role, name in self.plugin.arg_spec:
            if role.kind == "Cell":
                out[name] = fold(role.op, rows[name])
            elif role.kind in ("Out", "Mutable"):
                out[name] = bound.values[name]
        if len(out) == 1:
            return next(iter(out.values()))
        return out


def plan(plugin, *, structure, inner=None, npartitions=1, partitions=None) -> Plan:
    """Validate a placement and return a Plan.  Refusals are raised here, before any run."""
    if not isinstance(plugin, Plugin):
        plugin = deploy(plugin)
    k = plugin.name
    if not isinstance(structure, Structure):
        raise TypeError(f"kernel {k!r}: structure={structure!r} is not an execution structure; use "
                        "eagle.exec.HostTeam, DeviceKernel, RankPartition or eagle_dask.DaskPartition")
    if "device" in plugin.roles:
        raise ValueError(f"kernel {k!r} has a plane named 'device', which Plan.run(device=...) reserves "
                         "for choosing the GPU; rename the argument")
    if inner is not None:
        if not structure.has_ranks:
            raise ValueError(f"kernel {k!r}: inner={inner!r} names what runs each rank's share, and "
                             f"{structure!r} has no ranks; inner= goes with RankPartition or DaskPartition")
    elif structure.has_ranks:
        from .host import HostTeam
        inner = HostTeam
    if inner is not None and (not isinstance(inner, Structure) or inner.name not in INNER):
        raise ValueError(f"kernel {k!r}: inner={inner!r}: a rank's share runs through HostTeam or "
                         "DeviceKernel")
    if isinstance(npartitions, bool) or not isinstance(npartitions, int) or npartitions < 1:
        raise ValueError(f"kernel {k!r}: npartitions={npartitions!r}: a plan has at least one partition "
                         "(an integer >= 1)")
    if partitions is not None:
        if npartitions != 1:
            raise ValueError(f"kernel {k!r}: give npartitions= or partitions=, not both")
        partitions = list(partitions)
        if not partitions:
            raise ValueError(f"kernel {k!r}: partitions= is empty; give at least one")
    if structure.has_ranks and (partitions is not None or npartitions != 1):
        raise ValueError(f"kernel {k!r}: {structure!r} splits the samples by rank (the world size, or the "
                         "workers); do not give npartitions= or partitions=")
    count = len(partitions) if partitions is not None else npartitions
    check_placement(plugin.exec_access, structure, count, kernel=k)
    if structure.gathered:
        for role, name in plugin.arg_spec:
            if role.kind == "Out" and role.out_dtype != np.float64:
                raise ValueError(f"output plane {name!r} of kernel {k!r} is declared {role.out_dtype}: outputs "
                                 "gathered from ranks or workers must be float64 (declare it Out or Out[w])")
    p = Plan(plugin, structure, inner, npartitions, partitions)
    structure.check_plan(p)
    return p
