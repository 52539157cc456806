"""Plans: a deployed kernel, the structure that runs it, and how its samples are partitioned.

``plan(plugin, structure=..., inner=None, npartitions=1, partitions=None).run(**planes)``
validates the placement when the plan is made and every argument before anything runs, runs
the structure, and returns the single output plane, or a dict by name when there are several
(cells as numpy float64 scalars).

The placement table (``check_placement``)::

    | access                                         | HostTeam / DeviceKernel | RankPartition / DaskPartition |
    |------------------------------------------------|-------------------------|-------------------------------|
    | sample_local, cross_sample_read, mapreduce     | any partition count     | legal                         |
    | cross_sample_write                             | one partition only      | refused at every world size   |
"""
from __future__ import annotations

from .access import ACCESS_CLASSES, CROSS_SAMPLE_WRITE
from .bind import GATHERED_DTYPE, not_gatherable
from .local import DeviceKernel, HostTeam
from .plugin import Plugin, deploy
from .rows import check_partitions, cover, fold, is_count, n_rows, split
from .structure import Structure
from .until_done import run_until_done
from .xarray_io import unwrap, wrap

#: what may run a rank's or a worker's share
INNER = (HostTeam, DeviceKernel)


def check_placement(access, structure, npartitions=1, kernel=None):
    """Refuse a placement the table forbids, naming the rule (and the kernel when given)."""
    if access not in ACCESS_CLASSES:
        raise ValueError(f"unknown access class {access!r}; one of {', '.join(ACCESS_CLASSES)}")
    who = f"kernel {kernel!r}" if kernel else "a kernel"
    if access == CROSS_SAMPLE_WRITE:
        if structure.crosses_processes:
            raise ValueError(
                f"{who} writes other samples' planes (cross_sample_write) and cannot be split across "
                f"{structure.name}: refused at every world size; run it with HostTeam or DeviceKernel "
                "and one partition")
        if npartitions != 1:
            raise ValueError(
                f"{who} writes other samples' planes (cross_sample_write): {structure.name} runs it "
                f"with one partition only, not {npartitions}")


class Plan:
    """A kernel, a structure and a partitioning, validated; call ``run(**planes)``."""

    def __init__(self, plugin, structure, inner, npartitions, partitions):
        self.plugin = plugin
        self.structure = structure
        self.inner = inner
        self.npartitions = npartitions
        self.partitions = partitions          # checked (base, count) pairs, or None

    def __repr__(self):
        inner = f", inner={self.inner!r}" if self.inner is not None else ""
        return (f"<eagle plan {self.plugin.name} on {self.structure!r}{inner}, "
                f"{len(self.partitions) if self.partitions is not None else self.npartitions} partition(s)>")

    def partitions_for(self, n):
        """The plan's partitions of ``n`` samples (rows of 32 for a kernel with cells)."""
        if self.partitions is not None:
            return cover(self.partitions, n, kernel=self.plugin.name)
        rows = bool(self.plugin.cells)
        # partitions past one per sample (or row) would all be empty: the same cut, without
        # allocating them (npartitions=10**8 of 10 samples)
        return split(n, min(self.npartitions, max(n_rows(n) if rows else n, 1)), rows=rows)

    def bind(self, planes, device=None):
        return self.structure.bind(self, planes, device)

    def run(self, *, device=None, **planes):
        """Run the kernel over every sample of ``planes``; see the module docstring for the result."""
        if device is not None and not (self.structure.uses_device or getattr(self.inner, "uses_device", False)):
            runs = f"inner={self.inner!r}" if self.structure.crosses_processes else f"{self.structure!r}"
            raise ValueError(f"kernel {self.plugin.name!r}: device={device!r}, but {runs} runs on "
                             "CPU threads; device= picks the GPU of a DeviceKernel plan (or of inner=DeviceKernel)")
        planes, labels = unwrap(self.plugin, planes)          # xarray planes: their data, their labels
        bound = self.structure.bind(self, planes, device)
        rows = self.structure.execute(self, bound, device)
        return wrap(self.plugin, self.structure.result(self, bound, rows), labels)

    def run_until_done(self, *, max_steps=None, resume=None, round_steps=None, done_plane="done", device=None, **planes):
        """Step every sample of a *step kernel* (one step per call; ``done[i] = 1`` when the sample
        is done, in the output plane ``done`` names) until it is done or has taken ``max_steps``
        steps, in rounds of at most ``round_steps`` steps (16, then 4 times the last, unless given) over the
        samples still running.  Returns an ``eagle.until_done.UntilDone``: ``planes``, ``status``,
        ``steps``, ``cells``; ``resume=result`` continues its capped samples.  See docs/until_done.md."""
        return run_until_done(self, plan, max_steps=max_steps, resume=resume, round_steps=round_steps, done_plane=done_plane,
                              device=device, planes=planes)

    def result(self, bound, rows):
        out = {}
        for role, name in self.plugin.arg_spec:
            if role.kind == "Cell":
                out[name] = fold(role.op, rows[name])
            elif name in bound.outputs:
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
        if not structure.crosses_processes:
            raise ValueError(f"kernel {k!r}: inner={inner!r} names what runs each rank's share, and "
                             f"{structure!r} has no ranks; inner= goes with RankPartition or DaskPartition")
    elif structure.crosses_processes:
        inner = HostTeam
    if inner is not None and not any(inner is s for s in INNER):
        raise ValueError(f"kernel {k!r}: inner={inner!r}: a rank's share runs through HostTeam or "
                         "DeviceKernel")
    if not is_count(npartitions) or npartitions < 1:
        raise ValueError(f"kernel {k!r}: npartitions={npartitions!r}: a plan has at least one partition "
                         "(an integer >= 1)")
    npartitions = int(npartitions)
    if partitions is not None:
        if npartitions != 1:
            raise ValueError(f"kernel {k!r}: give npartitions= or partitions=, not both")
        partitions = check_partitions(list(partitions), rows=bool(plugin.cells), kernel=k)
    if structure.crosses_processes and (partitions is not None or npartitions != 1):
        raise ValueError(f"kernel {k!r}: {structure!r} splits the samples by rank (the world size, or the "
                         "workers); do not give npartitions= or partitions=")
    count = len(partitions) if partitions is not None else npartitions
    check_placement(plugin.exec_access, structure, count, kernel=k)
    if structure.crosses_processes:
        for role, name in plugin.arg_spec:
            if role.kind == "Out" and role.out_dtype != GATHERED_DTYPE:
                raise not_gatherable(f"output plane {name!r} of kernel {k!r} is declared", role.out_dtype,
                                     " (declare it Out or Out[w])")
    p = Plan(plugin, structure, inner, npartitions, partitions)
    structure.check_plan(p)
    return p
