"""Under mpiexec: ``eagle_dask.initialize()`` (quiet by default), one run on rank 1's client checked
against numpy, then the script's end (the cluster shut down at exit); prints ``RESULT <json>``."""
import json

import numpy as np

import eagle
import eagle_dask
from eagle import plan as eplan
from tests import kernels as K

if __name__ == "__main__":
    client = eagle_dask.initialize()
    planes = K.inputs("axpb", 101)
    got = eplan.plan(eagle.deploy(K.axpb), structure=eagle_dask.DaskPartition.on(client, progress=False)).run(
        **planes)
    want = K.CASES["axpb"][2](planes)["y"]         # the suite's numpy reference
    print("RESULT " + json.dumps({"same": bool(np.array_equal(got.view(np.uint64), want.view(np.uint64)))}),
          flush=True)
