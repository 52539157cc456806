"""Kernels that index arrays they make, run in a process of their own (one host path, or the CUDA
simulator, per process: ``python -m tests.memory_cases host|device``).  Prints one JSON record per
run (the kernel deployed, and saved then loaded with plain ``eagle.load``): the path taken, the error's message or the result, and whether the caller's arrays changed."""
from __future__ import annotations

import json
import os
import sys
import tempfile

import numpy as np

import eagle
import eagle.exec as eexec
from eagle import In, Out, Param
from eagle import plan as eplan


@eagle.kernel
def local_write(i, x: In, k: Param, steps: Param, y: Out):
    a = np.zeros(3)
    for _ in range(steps):
        a[k] = a[k] + x[i]
    y[i] = a[0] + a[1] + a[2]


def main(where):
    structure = eexec.DeviceKernel if where == "device" else eexec.HostTeam
    x = np.linspace(1.0, 2.0, 40)
    planes = {"x": x, "steps": 3}
    with tempfile.TemporaryDirectory() as tmp:
        eagle.save(local_write, os.path.join(tmp, "art"))
        plugins = {"deployed": eagle.deploy(local_write), "loaded": eagle.load(os.path.join(tmp, "art"))}
    for via, plugin in plugins.items():
        for k in (1, 3, -1, 10 ** 9):
            before = {n: v.copy() for n, v in planes.items() if isinstance(v, np.ndarray)}
            rec = {"kernel": plugin.name, "via": via, "k": k, "path": plugin.host_path}
            try:
                rec["y"] = eplan.plan(plugin, structure=structure).run(k=k, **planes).tolist()
            except IndexError as e:
                rec["error"] = str(e)
            rec["untouched"] = all(np.array_equal(planes[n], v) for n, v in before.items())
            print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
