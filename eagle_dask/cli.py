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
    from distributed import Client
    if args.scheduler_file:
        return Client(scheduler_file=args.scheduler_file), False
    if args.address:
        return Client(args.address), False
    from . import local_cluster
    return local_cluster(n_workers=args.workers), True


def _info(args):
    from . import DaskPartition, gpu_ids
    client, own = _connect(args)
    try:
        ranks = DaskPartition.on(client).ranks()
        print(f"scheduler: {client.scheduler.address}")
        print(f"workers: {len(ranks)}; GPUs on this host: {len(gpu_ids())}")
        print("rank  name  host  address  GPU")
        for r, w in ranks.items():
            print(f"{r}  {w.name}  {w.host}  {w.address}  {w.gpu if w.gpu is not None else '-'}")
    finally:
        client.close()
    return 0


def _cluster(args):
    from . import serve
    serve(args.scheduler_file, interface=args.interface, nthreads=args.nthreads,
          dashboard_address=args.dashboard_address)
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
    i.add_argument("--scheduler-file", default=None)
    i.add_argument("--address", default=None)
    i.add_argument("--workers", type=int, default=None)
    i.set_defaults(func=_info)
    c = sub.add_parser("cluster", help="under mpirun: rank 0 a scheduler, the other ranks workers; "
                                       "join with Client(scheduler_file=F)")
    c.add_argument("--scheduler-file", required=True)
    c.add_argument("--interface", default=None, help="default: loopback when every rank is on one host")
    c.add_argument("--nthreads", type=int, default=1)
    c.add_argument("--dashboard-address", default=None)
    c.set_defaults(func=_cluster)
    return ap


def main(argv=None):
    args = parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
