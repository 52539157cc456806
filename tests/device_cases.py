"""DeviceKernel checks run in their own process under numba's CUDA simulator.

Run as ``NUMBA_ENABLE_CUDASIM=1 python -m tests.device_cases`` (the variable must be set before
numba is imported).  Prints one JSON record per check: ``{"case", "check", "ok", "detail"}``;
``tests/test_device.py`` asserts every record.

What is compared: DeviceKernel at every partitioning (and run_range pieces) against
DeviceKernel with one partition, bit for bit; and DeviceKernel against HostTeam (and the numpy
reference where the suite has an exact one), bit for bit -- the simulator runs the body as
Python (no contraction, the C library's math functions), so every kernel must match the host.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile

import numpy as np

import eagle
import eagle.exec as eexec
from eagle import plan as eplan
from eagle.bind import bind
from tests.kernels import CASES, SPLITTABLE, as_dict, inputs, picky, same_bits

N = 77                                   # odd, three rows of 32 (the last one short)


def emit(case, check, ok, detail=""):
    print(json.dumps({"case": case, "check": check, "ok": bool(ok), "detail": str(detail)}), flush=True)


def run(plugin, structure, name, n, **kw):
    return as_dict(plugin, eplan.plan(plugin, structure=structure, **kw).run(**inputs(name, n)))


def layouts(plugin, n):
    """Partitionings to try: counts 2 and 3, and explicit ones with odd (or row) bases."""
    out = {"npartitions=2": {"npartitions": 2}, "npartitions=3": {"npartitions": 3}}
    if plugin.cells:
        out["rows 32|32|13"] = {"partitions": [(0, 32), (32, 32), (64, n - 64)]}
        out["rows 0|64|13"] = {"partitions": [(0, 0), (0, 64), (64, n - 64)]}
    else:
        out["bases 0,5,43"] = {"partitions": [(0, 5), (5, 38), (43, n - 43)]}
        out["bases 0,1,76"] = {"partitions": [(0, 1), (1, 75), (76, n - 76)]}
    return out


def by_ranges(plugin, name, n, cuts):
    """run_range over [0,a), [a,b), [b,n) with host arrays, sliced planes at po=start (as a worker)."""
    bound = bind(plugin, inputs(name, n))
    rows = {c: [] for c in plugin.cells}
    edges = [0, *cuts, n]
    for start, stop in zip(edges, edges[1:]):
        vals = {}
        for role, nm in plugin.arg_spec:
            if role.kind == "Cell":
                continue
            v = bound.values[nm]
            vals[nm] = v[start:stop] if (nm in plugin.sliceable and isinstance(v, np.ndarray)) else v
        part = eexec.DeviceKernel.run_range(plugin, vals, start, stop, po=start, device=0)
        for c in plugin.cells:
            rows[c].append(part[c])
    out = {nm: bound.values[nm] for nm in bound.outputs}
    for c, op in plugin.cells.items():
        out[c] = eexec.fold(op, np.concatenate(rows[c]))
    return out


def check_case(name):
    kernel, _, reference = CASES[name]
    plugin = eagle.deploy(kernel)
    one = run(plugin, eexec.DeviceKernel, name, N)
    host = run(plugin, eexec.HostTeam, name, N)
    emit(name, "device == host", same_bits(one, host))
    if reference is not None:
        ref = reference(inputs(name, N))
        emit(name, "device == numpy", same_bits({k: one[k] for k in ref}, {k: np.asarray(v) for k, v in ref.items()}))
    emit(name, "host planes come home as numpy",
         all(isinstance(one[o], np.ndarray) for o in plugin.names("Out", "Mutable")))
    if name not in SPLITTABLE:
        return
    for label, kw in layouts(plugin, N).items():
        emit(name, f"{label} == one partition", same_bits(run(plugin, eexec.DeviceKernel, name, N, **kw), one))
    cuts = [(32, 64), (64, 64)] if plugin.cells else [(5, 43), (1, 76)]
    for a, b in cuts:
        got = by_ranges(plugin, name, N, [a, b])
        emit(name, f"run_range [0,{a}) [{a},{b}) [{b},{N}) == one partition", same_bits(got, one),
             {k: (got[k], one[k]) for k in plugin.cells})


def check_small():
    for name in ("axpb", "reductions", "oscillator"):
        plugin = eagle.deploy(CASES[name][0])
        for n in (0, 5):
            for parts in (1, 3):
                dev = run(plugin, eexec.DeviceKernel, name, n, npartitions=parts)
                host = run(plugin, eexec.HostTeam, name, n)
                emit(name, f"n={n} npartitions={parts} == host", same_bits(dev, host))


def check_errors():
    plugin = eagle.deploy(picky)
    try:
        eplan.plan(plugin, structure=eexec.DeviceKernel, npartitions=2).run(x=np.array([1.0, 4.0, -1.0, 9.0]))
        emit("picky", "body error raised", False, "no error")
    except ValueError as e:
        msg = str(e)
        emit("picky", "body error raised", "negative input" in msg and "'picky'" in msg and "sample 2" in msg, msg)


def check_artifact():
    name = "oscillator"
    plugin = eagle.deploy(CASES[name][0])
    with tempfile.TemporaryDirectory() as d:
        loaded = eagle.load(plugin.save(os.path.join(d, name)))
    emit(name, "loaded artifact runs the same on the device",
         same_bits(run(loaded, eexec.DeviceKernel, name, N, npartitions=3), run(plugin, eexec.HostTeam, name, N)))


def main():
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        sys.exit("run with NUMBA_ENABLE_CUDASIM=1 (set before numba is imported)")
    for name in CASES:
        check_case(name)
    check_small()
    check_errors()
    check_artifact()


if __name__ == "__main__":
    main()
