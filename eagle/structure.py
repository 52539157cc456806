"""Execution structures and the placement table.

| access                                         | host_team / device_kernel | rank_partition / dask_partition |
|------------------------------------------------|---------------------------|---------------------------------|
| sample_local, cross_sample_read, mapreduce     | any partition count       | legal                           |
| cross_sample_write                             | one partition only        | refused at every world size     |
"""
from __future__ import annotations

from .access import ACCESS_CLASSES, CROSS_SAMPLE_WRITE


class Structure:
    """What runs a plan's samples.  Subclasses are singletons (``HostTeam``, ``DeviceKernel``...)."""

    name = "structure"
    has_ranks = False      # splits samples over ranks or workers, each running an inner structure
    uses_device = False    # takes device=
    gathered = False       # outputs travel between processes: float64, C-contiguous

    def bind(self, plan, planes, device):
        """Validate a run's arguments (see ``eagle.plan.bind``)."""
        from .plan import bind
        return bind(plan.plugin, planes, gathered=self.gathered)

    def __repr__(self):
        return f"eagle.exec.{type(self).__name__.lstrip('_')}"

    def __reduce__(self):
        return (_structure_by_name, (self.name,))

    def check_plan(self, plan):
        """Refusals this structure adds at plan time."""

    def execute(self, plan, bound, device):
        """Run every sample of ``bound``; write output planes in place; return cells' row partials."""
        raise NotImplementedError

    def run_range(self, plugin, values, start, stop, po=0, device=None):
        """Run samples ``[start, stop)`` as an inner structure (one rank's or worker's share)."""
        raise NotImplementedError(f"{self!r} cannot run a rank's share")


_REGISTRY = {}


def register(structure):
    _REGISTRY[structure.name] = structure
    return structure


def _structure_by_name(name):
    if name not in _REGISTRY and name == "dask_partition":
        import eagle_dask  # noqa: F401 - registers itself
    return _REGISTRY[name]


def check_placement(access, structure, npartitions=1, kernel=None):
    """Refuse a placement the table forbids, naming the rule (and the kernel when given)."""
    if access not in ACCESS_CLASSES:
        raise ValueError(f"unknown access class {access!r}; one of {', '.join(ACCESS_CLASSES)}")
    who = f"kernel {kernel!r}" if kernel else "a kernel"
    if access == CROSS_SAMPLE_WRITE:
        if structure.has_ranks:
            raise ValueError(
                f"{who} writes other samples' planes (cross_sample_write) and cannot be split across "
                f"{structure.name}: refused at every world size; run it with HostTeam or DeviceKernel "
                "and one partition")
        if npartitions != 1:
            raise ValueError(
                f"{who} writes other samples' planes (cross_sample_write): {structure.name} runs it "
                f"with one partition only, not {npartitions}")
