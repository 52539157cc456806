"""DeviceKernel: the same kernels on a GPU (numba-cuda).  Not implemented yet."""
from __future__ import annotations

from .structure import Structure, register


class _DeviceKernel(Structure):
    name = "device_kernel"
    uses_device = True

    def check_plan(self, plan):
        raise NotImplementedError("DeviceKernel is not available in this version of eagle yet")


def device_entry(plugin):
    raise NotImplementedError("DeviceKernel is not available in this version of eagle yet")


DeviceKernel = register(_DeviceKernel())
