"""Where the bytes go across hosts, and how long a run takes when a host goes silent.

    bash scripts/hosts_local.sh up 5               # as root: the bed (five hosts)
    python -m benchmarks.hosts                     # as root; about two minutes on 2 cores
    python -m benchmarks.hosts --n 200000          # smaller planes
    python -m benchmarks.hosts --out DIR           # also write DIR/hosts.json
    python -m benchmarks.hosts --no-silent         # the bytes only (no silent-host runs)

``eagle-dask cluster`` (mutual TLS) across the namespaces of ``scripts/hosts_local.sh``: the
scheduler on eagle-h0, one worker on each of eagle-h1 .. eagle-hK (K = 2, then 3), the driver on
eagle-h(K+1), a host of its own.  The bytes counted are every byte the hosts sent onto the switch
while a run ran (``tests.hosts.switch_bytes``: TLS, TCP and IP included, heartbeats too):

* numpy mode (numpy planes): **network crossings per plane byte** = bytes on the links / (input
  plane bytes + output plane bytes): 1.0 when every plane byte crosses once, 2.0 when each is
  relayed by the scheduler.  Each block's share goes from the driver straight to its worker and
  its outputs straight back (``eagle_dask.eager``): 1.005 (axpb) and 1.017 (oscillator) with 2
  and with 3 worker hosts at ``--n 1000000``, the rest being TLS, TCP and IP headers and the
  cluster's own messages; 2.009 and 2.033 when the shares rode in the tasks and the outputs came
  back through the scheduler;
* lazy mode (dask arrays persisted on the workers before the run, the outputs computed to the
  driver with ``dask.compute``): **bytes moved per output byte** = bytes on the links / output
  plane bytes, with the inputs persisted plane by plane (``lazy/plane``: the scheduler spreads
  each plane's chunks by itself, so a block's chunks often lie on several workers) or as the
  columns of one table (``lazy/table``: every plane's chunk ``i`` on one worker).  eagle's
  client joins the results on the driver from blocks fetched straight from the workers
  (``eagle_dask.client_join``), and a block cut at whole rows of a cell reads a neighbour's
  few samples through a task of their own: at ``--n 1000000``, 2 and 3 worker hosts, axpb
  1.01 and the oscillator 1.03 (``lazy/table``; one run of three at 3 hosts gave 1.41: the
  scheduler sent a block to an idle worker, away from its chunks), against 2.51 and
  3.35-3.92 when the blocks were joined on one worker and relayed by the scheduler; with
  ``lazy/plane`` the oscillator's three input planes lie apart and a block fetches the
  chunks it lacks (1.34-1.41 with 2 worker hosts, 1.60-1.66 with 3).

Each run is done twice (fresh inputs) and the second is reported.  Then **a silent host**: 2
worker hosts, a numpy-mode oscillator run of a few seconds; a third of the way into it eagle-h2
goes silent -- its link cut at the switch (``cut``), or every process of it stopped with
``SIGSTOP`` (``stop``: its kernel still acknowledges TCP) -- and the time the run takes to return
is reported beside the same run without the fault (at most 900 s, then the driver is killed).  Every output is checked bit for bit against
the same run in this process (``HostTeam``).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

import eagle
import eagle.exec as eexec
from eagle import plan as eplan
from eagle.bits import as_dict, same_bits
from tests import hosts as H
from tests import kernels as K

KERNELS = ("axpb", "oscillator")
#: seconds a silent-host run may take before the driver is killed
TIMEOUT = 900


def reference(run) -> dict:
    plugin = eagle.deploy(K.CASES[run["kernel"]][0])
    return as_dict(plugin, eplan.plan(plugin, structure=eexec.HostTeam).run(**H.planes_of(K, run)))


def traffic(k: int, n: int) -> list:
    """The runs of both modes with ``k`` worker hosts: one row per reported run."""
    runs = [{"kernel": name, "mode": mode, "n": n, "chunks": max(n // 8, 1), "together": together}
            for mode, together in (("numpy", False), ("lazy", False), ("lazy", True))
            for name in KERNELS for _ in range(2)]
    with tempfile.TemporaryDirectory(prefix="eagle-bench-hosts-") as d:
        with H.Cluster(0, list(range(1, k + 1)), d) as cluster:
            report = H.drive(k + 1, {"scheduler_file": cluster.file, "workers": k, "runs": runs}, d, timeout=600)
    rows = []
    for i in range(1, len(runs), 2):
        run = report["runs"][i]
        mode = run["mode"] + ("" if run["mode"] == "numpy" else "/table" if run["together"] else "/plane")
        rows.append({"worker_hosts": k, "mode": mode, "kernel": run["kernel"], "n": n,
                     "plane_bytes": run["plane_bytes"], "moved": run["moved"],
                     "per_byte": run["moved"] / run["plane_bytes"], "seconds": run["seconds"],
                     "identical": same_bits(reference(runs[i]), report["outputs"][i])})
    return rows


def _netns_pids(host: int) -> list:
    out = subprocess.run(["ip", "netns", "pids", f"eagle-h{host}"], capture_output=True, text=True, timeout=20)
    return [int(p) for p in out.stdout.split()]


def _signal_host(host: int, sig) -> int:
    pids = _netns_pids(host)
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    return len(pids)


def _silence(how: str, on: bool) -> int:
    """Silence eagle-h2 (``on``) or give it back: ``stop`` its processes (SIGSTOP/SIGCONT; its kernel
    still answers TCP), or ``cut`` its link at the switch (nothing it sends or is sent arrives)."""
    if how == "stop":
        return _signal_host(2, signal.SIGSTOP if on else signal.SIGCONT)
    subprocess.run(["ip", "-n", H.SWITCH, "link", "set", "sw2", "down" if on else "up"], check=True, timeout=20)
    return len(_netns_pids(2))


def silent_host(n: int, steps: int, how: str) -> dict:
    """A numpy-mode run with eagle-h2 silenced (``how``) a third of the way in, against the same run
    without."""
    base = {"kernel": "oscillator", "mode": "numpy", "n": n, "steps": steps}
    runs = [{**base, "steps": 10}, base, base]          # warm-up, no fault, the host stopped
    with tempfile.TemporaryDirectory(prefix="eagle-bench-hosts-") as d:
        with H.Cluster(0, [1, 2], d) as cluster:
            proc = H.start_driver(3, {"scheduler_file": cluster.file, "workers": 2, "runs": runs,
                                      "shutdown": False}, d)
            lines, stopped, t_start, last = [], 0, None, None
            watchdog = threading.Timer(TIMEOUT, H._killpg, [proc])    # every wait bounded
            watchdog.start()
            try:
                for line in proc.stdout:
                    lines.append(line)
                    if line.startswith(("numpy ", "lazy ")):     # "..., 1.23 s" after each run
                        last = float(line.rstrip().rsplit(", ", 1)[1].rstrip(" s"))
                    elif line.startswith("START 2"):
                        t_start = time.monotonic()
                        time.sleep(last / 3)
                        stopped = _silence(how, True)
                proc.wait(timeout=60)
                t_end = time.monotonic()
            finally:
                watchdog.cancel()
                _silence(how, False)
                H._killpg(proc)
        if proc.returncode != 0:
            raise SystemExit("the driver failed:\n" + "".join(lines)[-4000:])
        report = H.read_report(d, len(runs))
    run = report["runs"][2]
    return {"how": how, "n": n, "steps": steps, "no_fault_seconds": report["runs"][1]["seconds"],
            "silent_host_seconds": run["seconds"], "stopped_processes": stopped,
            "driver_wall_after_stop": t_end - t_start,
            "identical": same_bits(reference(base), report["outputs"][2]),
            "identical_no_fault": same_bits(reference(base), report["outputs"][1])}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.hosts", description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="samples per run (default 1e6)")
    ap.add_argument("--steps", type=int, default=40_000, help="oscillator steps of the silent-host run")
    ap.add_argument("--silent-n", type=int, default=200_000, help="samples of the silent-host run")
    ap.add_argument("--silence", type=lambda t: t.split(","), default=["cut", "stop"],
                    help="how eagle-h2 goes silent: cut (its link), stop (SIGSTOP), or both, comma-separated")
    ap.add_argument("--no-traffic", action="store_true", help="the silent-host runs only")
    ap.add_argument("--no-silent", action="store_true", help="the bytes only: no silent-host runs")
    ap.add_argument("--out", default=None, help="folder for hosts.json")
    a = ap.parse_args(argv)
    why = H.why_not(need=5)
    if why:
        raise SystemExit(f"benchmarks.hosts: {why}")
    rows = []
    for k in () if a.no_traffic else (2, 3):
        rows += traffic(k, a.n)
    print(f"{'hosts':>5}  {'mode':11}  {'kernel':10}  {'plane bytes':>11}  {'on the links':>12}  {'per byte':>8}  "
          f"{'seconds':>7}  identical")
    for r in rows:
        print(f"{r['worker_hosts']:>5}  {r['mode']:11}  {r['kernel']:10}  {r['plane_bytes']:>11}  {r['moved']:>12}  "
              f"{r['per_byte']:>8.2f}  {r['seconds']:>7.2f}  {'yes' if r['identical'] else 'NO'}")
    print("per byte: network crossings per plane byte (numpy mode), bytes moved per output byte (lazy mode: "
          "inputs persisted plane by plane, or as the columns of one table)")
    silent = [] if a.no_silent else [silent_host(a.silent_n, a.steps, how) for how in a.silence]
    for f in silent:
        what = {"stop": "its processes stopped (SIGSTOP)", "cut": "its link cut at the switch"}[f["how"]]
        print(f"silent host (numpy oscillator n={f['n']} x {f['steps']} steps, 2 worker hosts, eagle-h2 silenced a "
              f"third of the way in: {what}): {f['silent_host_seconds']:.1f} s against {f['no_fault_seconds']:.2f} s "
              f"without the fault; identical: {'yes' if f['identical'] and f['identical_no_fault'] else 'NO'}")
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "hosts.json"), "w") as f:
            json.dump({"traffic": rows, "silent_host": silent}, f, indent=2, default=bool)
    ok = all(r["identical"] for r in rows) and all(f["identical"] and f["identical_no_fault"] for f in silent)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
