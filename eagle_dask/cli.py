"""The ``eagle-dask`` command line: ``demo`` (the main job), ``info`` and ``cluster``."""
from __future__ import annotations

import argparse
import sys


def _demo(args):
    from . import demo
    res = demo.run(samples=args.samples, steps=args.steps, workers=args.workers,
                   progress=False if args.quiet else None)
    print(demo.table(res))
    print(f"identical: {'yes' if res['identical'] else 'no'}")
    return 0 if res["identical"] else 1


def _connect(args):
    if args.scheduler_file:
        from . import connect
        return connect(args.scheduler_file, security=False if args.no_tls else None), False
    if args.address:
        from .cluster import new_client
        return new_client(None, args.address), False
    from . import local_cluster
    return local_cluster(n_workers=args.workers), True


def _info(args):
    from . import DaskPartition, gpu_ids
    client, own = _connect(args)
    try:
        ranks = DaskPartition.on(client).ranks()
        print(f"scheduler: {client.scheduler.address}")
        print(f"workers: {len(ranks)}; GPUs on this host: {len(gpu_ids())}")
        rows = [(str(r), str(w.name), str(w.host), str(w.address), "-" if w.gpu is None else str(w.gpu))
                for r, w in ranks.items()]
        print(columns(("rank", "name", "host", "address", "GPU"), rows))
        from .scratch import warnings_for
        for line in warnings_for(client):
            print(line, file=sys.stderr)
    finally:
        client.close()
    return 0


def columns(header, rows):
    """``header`` and ``rows`` (tuples of text) as lines of left-aligned columns, two spaces apart."""
    widths = [max(len(cell) for cell in col) for col in zip(header, *rows)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip()
                     for row in (header, *rows))


def security_of(args):
    """The ``security=`` the cluster command's flags ask for: None (fresh), a Security, or False."""
    given = [args.tls_ca_file, args.tls_cert, args.tls_key]
    if args.no_tls and any(given):
        raise SystemExit("eagle-dask cluster: --no-tls and --tls-* exclude each other")
    if args.no_tls:
        return False
    if not any(given):
        return None
    if not all(given):
        raise SystemExit("eagle-dask cluster: --tls-ca-file, --tls-cert and --tls-key go together (the "
                         "authority every peer's certificate is checked against, and the certificate and key "
                         "the scheduler, the workers and the joining clients present)")
    from distributed import Security
    cert, key = args.tls_cert, args.tls_key
    return Security(require_encryption=True, tls_ca_file=args.tls_ca_file,
                    tls_scheduler_cert=cert, tls_scheduler_key=key, tls_worker_cert=cert, tls_worker_key=key,
                    tls_client_cert=cert, tls_client_key=key)


def _cluster(args):
    from . import serve
    serve(args.scheduler_file, interface=args.interface, nthreads=args.nthreads,
          dashboard=not args.no_dashboard, dashboard_address=args.dashboard_address, security=security_of(args),
          local_directory=args.local_directory, quiet=args.quiet)
    return 0


def parser():
    ap = argparse.ArgumentParser(prog="eagle-dask", description="eagle plans on Dask clusters")
    sub = ap.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="the oscillator over a million samples on a local cluster, checked "
                                    "bit for bit against one process")
    d.add_argument("--samples", type=int, default=1_000_000)
    d.add_argument("--steps", type=int, default=1000)
    d.add_argument("--workers", type=int, default=None, help="default: one per CPU (one per GPU with dask-cuda)")
    d.add_argument("--quiet", action="store_true", help="no progress bar")
    d.set_defaults(func=_demo)
    i = sub.add_parser("info", help="ranks, workers and GPUs of a cluster (default: a new local cluster)")
    i.add_argument("--scheduler-file", default=None, help="the file of an `eagle-dask cluster` (joined with "
                                                         "eagle_dask.connect: its credentials lie beside it)")
    i.add_argument("--no-tls", action="store_true", help="the scheduler file names a tcp:// cluster started "
                                                         "with --no-tls (without it, only tls:// is trusted)")
    i.add_argument("--address", default=None)
    i.add_argument("--workers", type=int, default=None)
    i.set_defaults(func=_info)
    c = sub.add_parser("cluster", help="under mpirun: rank 0 a scheduler, the other ranks workers, mutual "
                                       "TLS with fresh credentials; join with eagle_dask.connect(F)")
    c.add_argument("--scheduler-file", required=True)
    c.add_argument("--interface", default=None, help="default: loopback when every rank is on one host")
    c.add_argument("--nthreads", type=int, default=1)
    c.add_argument("--dashboard-address", default=None, help="default: 127.0.0.1, a free port, when every "
                                                              "rank is on one host")
    c.add_argument("--no-dashboard", action="store_true", help="no dashboard (its HTTP page is open to every "
                                                               "user who can reach its port)")
    c.add_argument("--tls-ca-file", default=None, help="your own certificate authority (PEM); with --tls-cert "
                                                       "and --tls-key, instead of fresh credentials")
    c.add_argument("--tls-cert", default=None, help="the certificate every process of the cluster presents")
    c.add_argument("--tls-key", default=None, help="its private key")
    c.add_argument("--local-directory", default=None, help="the ranks' files (default: a fresh 0700 directory "
                                                           "per rank, removed at the end); yours, others not "
                                                           "allowed to write to it")
    c.add_argument("--no-tls", action="store_true", help="plain TCP, no authentication: any user who can "
                                                         "reach a port runs code as you")
    c.add_argument("--quiet", action="store_true", help="distributed logs warnings and errors only (no INFO "
                                                        "lines, no tracebacks of connections closed at shutdown)")
    c.set_defaults(func=_cluster)
    return ap


def main(argv=None):
    args = parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
