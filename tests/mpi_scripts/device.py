"""RankPartition with inner=DeviceKernel (run under NUMBA_ENABLE_CUDASIM=1), device=rank.

usage: device.py OUTDIR
Each rank compares what it returns with one process running the same kernel on DeviceKernel
(the promise: the same bits as one process with the same inner structure).  Anything raised
ends the job (and fails the test); plan-time refusals are recorded by kernel.
"""
import eagle
import eagle.exec as eexec
from eagle import plan as eplan
from tests import kernels as K

import _record

SIZES = (0, 1, 33, 97)
rank, size = eexec.RankPartition.world()
# device=rank picks this rank's GPU; numba's CUDA simulator has one GPU per process, number 0
dev = 0
same, refused = {}, {}
for name in K.SPLITTABLE:
    plugin = eagle.deploy(K.CASES[name][0])
    try:
        p = eplan.plan(plugin, structure=eexec.RankPartition, inner=eexec.DeviceKernel)
    except ValueError as e:
        refused[name] = str(e)
        continue
    one = eplan.plan(plugin, structure=eexec.DeviceKernel)
    for n in SIZES:
        got = K.as_dict(plugin, p.run(device=dev, **K.inputs(name, n)))
        ref = K.as_dict(plugin, one.run(device=dev, **K.inputs(name, n)))
        same[f"{name}/{n}"] = K.same_bits(got, ref)
_record.write(rank, {"rank": rank, "size": size, "same": same, "refused": refused})
