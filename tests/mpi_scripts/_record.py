"""Scripts run under mpiexec write what each rank saw to ``<outdir>/rank<r>.json`` (and .npz);
the tests read and judge it, so every assertion lives in pytest."""
import json
import os


def outdir():
    import sys
    return sys.argv[1]


def write(rank, data, arrays=None):
    import numpy as np
    d = outdir()
    if arrays is not None:
        np.savez(os.path.join(d, f"rank{rank}.npz"), **arrays)
    tmp = os.path.join(d, f"rank{rank}.json.tmp")
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, os.path.join(d, f"rank{rank}.json"))


def error(exc):
    return {"type": type(exc).__name__, "message": str(exc)}
