"""No HTTP listener at all on a cluster started without a dashboard.

distributed starts an HTTP server on every scheduler and worker whatever its settings; with
``dashboard=False`` it serves the Prometheus ``/metrics``, ``/health`` and ``/info`` routes (eagle
already gives it no route: ``eagle_dask.cluster.launch_config``), and its port still listens.
This module, a preload of the scheduler and of each worker of eagle's clusters started without a
dashboard (``serve`` / ``eagle-dask cluster --no-dashboard``, ``initialize(dashboard=False)``),
stops that server once the process has started -- for a worker before it joins the scheduler,
so no worker advertises an HTTP port.
"""
from __future__ import annotations

#: the module name distributed imports (its ``dask_setup`` runs in each process it preloads)
PRELOAD = "eagle_dask.no_http"


def dask_setup(server):
    """Close ``server``'s HTTP listener and forget it as a service (the scheduler or a worker)."""
    http = getattr(server, "http_server", None)
    if http is not None:
        http.stop()
    server.services.pop("dashboard", None)
