"""One MPI job of the benchmark: ``mpiexec.gforker -n R python -m benchmarks.mpi_job CASES OUT``.

``CASES`` is a JSON list of ``[kernel, n, steps, repeats]``.  For each case every rank runs a
RankPartition plan: a warm-up, ``repeats`` timed runs (between barriers; the time of a run is
the slowest rank's), and one run under tracemalloc on rank 0.  Rank 0 writes ``OUT`` (JSON):
the times, the digest of the result, whether every rank returned the same bits, the bytes
received in the allgathers, and rank 0's peak memory.  A RankPartition that cannot be imported
gives ``{"skipped": reason}``; any other error is reported as the case's ``error``.
"""
from __future__ import annotations

import json
import sys
import time
import tracemalloc

T0 = time.perf_counter()


def _write(path, report):
    with open(path, "w") as f:
        json.dump(report, f)


def _moved(plugin, result, n, size):
    """Bytes every rank receives from the others: outputs and cells' row partials, all ranks."""
    total = sum(result[name].nbytes for name in plugin.names("Out", "Mutable"))
    total += len(plugin.cells) * 16 * -(-n // 32)
    return (size - 1) * total


def main(cases_json, out):
    from mpi4py import MPI
    import eagle.exec as eexec
    from eagle import plan as eplan
    from benchmarks import bits
    from benchmarks.measure import Case

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    report = {"ranks": size, "import_s": time.perf_counter() - T0, "cases": []}
    for kernel, n, steps, repeats in json.loads(cases_json):
        case = Case(kernel, n, steps, repeats)
        plugin = case.spec.plugin
        try:
            p = eplan.plan(plugin, structure=eexec.RankPartition, inner=eexec.HostTeam)
        except ImportError as e:
            if rank == 0:
                _write(out, {"skipped": f"{type(e).__name__}: {e}"[:200]})
            return
        except Exception as e:  # noqa: BLE001 - a plan refused alike on every rank; reported
            report["cases"].append({"kernel": kernel, "n": n, "error": f"{type(e).__name__}: {e}"[:300]})
            continue

        def run(planes, p=p, plugin=plugin):
            comm.Barrier()
            t = time.perf_counter()
            result = bits.as_dict(plugin, p.run(**planes))
            return result, comm.allreduce(time.perf_counter() - t, op=MPI.MAX)

        try:
            _, first_s = run(case.fresh())
            times = [run(case.fresh())[1] for _ in range(repeats)]
            planes = case.fresh()
            if rank == 0:
                tracemalloc.start()
            result, _ = run(planes)
            peak = tracemalloc.get_traced_memory()[1] / 2**20 if rank == 0 else 0.0
            tracemalloc.stop()
            digests = comm.allgather(bits.digest(result))
            report["cases"].append({"kernel": kernel, "n": n, "times": times, "first_s": first_s,
                                    "digest": digests[0], "ranks_agree": len(set(digests)) == 1,
                                    "bytes": _moved(plugin, result, n, size), "peak_mb": peak})
        except Exception as e:  # noqa: BLE001 - every rank raises alike (eagle's promise); reported
            report["cases"].append({"kernel": kernel, "n": n, "error": f"{type(e).__name__}: {e}"[:300]})
    if rank == 0:
        _write(out, report)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
