"""The structures that run a plan's partitions in this process: ``HostTeam`` and ``DeviceKernel``.

Each cuts the samples into the plan's partitions (``Plan.partitions_for``, by the rows rule of
``eagle.rows``) and runs them through its engine -- the host team of threads (``eagle.host``)
or one CUDA launch per partition (``eagle.device``).  As the inner structure of a rank or a
worker, ``run_range`` runs that process's share ``[start, stop)``.
"""
from __future__ import annotations

import numpy as np

from .bind import bind
from .device import device_entry, device_zeros, placement
from .host import host_entry
from .rows import row_span
from .structure import Structure


class _HostTeam(Structure):
    """A numba-compiled loop over each partition, cut in chunks run by a team of threads."""

    name = "host_team"
    public_name = "HostTeam"

    def execute(self, plan, bound, device):
        entry = host_entry(plan.plugin)
        parts = [entry.run(bound.values, p.base, p.stop) for p in plan.partitions_for(bound.n)]
        return {c: np.concatenate([r[c] for r in parts]) for c in plan.plugin.cells}

    def run_range(self, plugin, values, start, stop, po=0, device=None):
        if device is not None:
            raise ValueError(f"kernel {plugin.name!r}: device={device!r}, but HostTeam runs on CPU threads")
        return host_entry(plugin).run(values, start, stop, po)


class _DeviceKernel(Structure):
    """One CUDA launch per partition on one GPU, planes used where they lie."""

    name = "device_kernel"
    public_name = "DeviceKernel"
    uses_device = True

    def bind(self, plan, planes, device):
        """``eagle.bind.bind``'s rules, plus where the planes lie; missing Outs go where the inputs are."""
        dev, any_on_device = placement(plan.plugin.name, planes, device)
        alloc = device_zeros(dev) if any_on_device else np.zeros
        bound = bind(plan.plugin, planes, alloc=alloc, gathered=self.crosses_processes)
        bound.device = dev
        return bound

    def execute(self, plan, bound, device):
        dev = getattr(bound, "device", 0 if device is None else device)
        parts = [(p.base, p.stop) for p in plan.partitions_for(bound.n)]
        return device_entry(plan.plugin).run(bound.values, parts, device=dev, row_range=row_span(0, bound.n))

    def run_range(self, plugin, values, start, stop, po=0, device=None):
        """Samples ``[start, stop)`` of host planes starting at sample ``po``, on GPU ``device``."""
        dev, _ = placement(plugin.name, values, device)
        return device_entry(plugin).run(values, [(start, stop)], po=po, device=dev,
                                        row_range=row_span(start, stop), copy_back=(start, stop))


HostTeam = _HostTeam()
DeviceKernel = _DeviceKernel()
