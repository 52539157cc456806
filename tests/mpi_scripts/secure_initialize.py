"""Under mpiexec: ``eagle_dask.initialize()`` (mutual TLS by default), a plan checked bit for bit
against HostTeam on rank 1's client, then the cluster kept up until the file argv[1] appears (the
test attacks it meanwhile; at most 240 s), then one line ``RESULT <json>``.
"""
import json
import os
import sys
import time

import eagle
import eagle.exec as eexec
import eagle_dask
from eagle import plan as eplan
from tests import kernels as K

if __name__ == "__main__":
    client = eagle_dask.initialize()
    plugin = eagle.deploy(K.reductions)
    planes = K.inputs("reductions", 333)
    ref = eplan.plan(plugin, structure=eexec.HostTeam).run(**planes)
    got = eplan.plan(plugin, structure=eagle_dask.DaskPartition.on(client, progress=False)).run(**planes)
    print("READY " + json.dumps({"scheduler": client.scheduler.address}), flush=True)
    end = time.monotonic() + 240
    while not os.path.exists(sys.argv[1]) and time.monotonic() < end:
        time.sleep(0.2)
    alive = sorted(client.run(os.getpid))      # the workers still serve their own client
    dirs = list(client.run(lambda dask_worker: dask_worker.local_directory).values())
    dirs.append(client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.local_directory))
    places = {os.path.dirname(os.path.dirname(d)): oct(os.lstat(os.path.dirname(os.path.dirname(d))).st_mode)
              for d in dirs}
    print("RESULT " + json.dumps({"same": K.same_bits(ref, got), "scheduler": client.scheduler.address,
                                  "workers": alive, "dirs": dirs, "places": places}), flush=True)
